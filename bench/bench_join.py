#!/usr/bin/env python3
"""Benchmark of tarjoin: an aligned join against tarcat over both inputs.

    .venv/bin/python bench/bench_join.py [--quick] [--repeat N] [--samples N]

Target on the 2-core machine: ``tarjoin A B`` of two aligned shard sets of
100,000 samples each (A: ``cls`` and a small ``jpg``, B: ``txt``; 10 shards
each) within 1.5x the time of ``tarcat A B`` (reading both and writing
every member), measured in the same run, in turns; peak memory flat: the
same join of large members (A: 40 samples of a 16 MiB ``bin``, above the
blob threshold) keeps the peak of the small join.

Data is generated under ``bench/out/data/join`` (deterministic).
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import common  # noqa: E402

BIN = os.path.dirname(sys.executable)
os.environ["PATH"] = BIN + os.pathsep + os.environ.get("PATH", "")
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def make_sets(d, n, shards=10):
    """Two aligned shard sets of ``n`` samples; returns their brace patterns."""
    from tarproc.sinks.write import write_samples

    os.makedirs(d, exist_ok=True)
    per = n // shards
    last = f"{shards - 1:02d}"
    for s in range(shards):
        a = os.path.join(d, f"a-{n}-{s:02d}.tar")
        b = os.path.join(d, f"b-{n}-{s:02d}.tar")
        keys = [f"{s:02d}/{i:08d}" for i in range(s * per, (s + 1) * per)]
        if not os.path.exists(a):
            write_samples(a, ({"__key__": k, "cls": b"%d" % (i % 1000), "jpg": bytes(200 + i % 300)}
                              for i, k in enumerate(keys)))
        if not os.path.exists(b):
            write_samples(b, ({"__key__": k, "txt": b"a caption of sample %s" % k.encode()} for k in keys))
    return (os.path.join(d, f"a-{n}-{{00..{last}}}.tar"), os.path.join(d, f"b-{n}-{{00..{last}}}.tar"),
            [os.path.join(d, f"{x}-{n}-{s:02d}.tar") for x in "ab" for s in range(shards)])


def make_large(d, n, size=16 << 20):
    from tarproc.sinks.write import write_samples

    a = os.path.join(d, f"large-a-{n}.tar")
    b = os.path.join(d, f"large-b-{n}.tar")
    if not os.path.exists(a):
        write_samples(a, ({"__key__": f"{i:06d}", "bin": bytes([i % 256]) * size} for i in range(n)))
    if not os.path.exists(b):
        write_samples(b, ({"__key__": f"{i:06d}", "txt": b"text %d" % i} for i in range(n)))
    return a, b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--samples", type=int, default=None, help="samples per set (default 100,000)")
    args = ap.parse_args()
    n = args.samples or (10_000 if args.quick else 100_000)
    repeat = args.repeat or (1 if args.quick else 3)
    d = os.path.join(common.DATA, "join")
    pa, pb, files = make_sets(d, n)
    la, lb = make_large(d, 4 if args.quick else 40)
    cmds = {
        "tarcat A B": f"tarcat '{pa}' '{pb}' > /dev/null",
        "tarjoin A B": f"tarjoin '{pa}' '{pb}' > /dev/null",
        "tarcat A B | cat": f"tarcat '{pa}' '{pb}' | cat > /dev/null",
        "tarjoin A B | cat": f"tarjoin '{pa}' '{pb}' | cat > /dev/null",
        "tarjoin large A B": f"tarjoin '{la}' '{lb}' > /dev/null",
    }
    for cmd in cmds.values():  # once untimed: byte code, page cache
        common.run_once(cmd)
    res = common.compare(cmds, repeat=repeat, warm_paths=files + [la, lb])
    load = os.getloadavg()[0]
    ratio = res["tarjoin A B"]["median"] / res["tarcat A B"]["median"]
    ratio_pipe = res["tarjoin A B | cat"]["median"] / res["tarcat A B | cat"]["median"]
    print(f"## bench_join (`.venv/bin/python bench/bench_join.py{' --quick' if args.quick else ''}"
          f"{f' --samples {n}' if args.samples else ''}`, load {load:.1f})\n")
    print(f"Two aligned shard sets of {n:,} samples, 10 shards each (A: cls + jpg of 200-500 bytes, B: txt).\n")
    rows = [
        ("`tarjoin A B > /dev/null`", f"{res['tarjoin A B']['median']:.2f} s",
         f"`tarcat A B` {res['tarcat A B']['median']:.2f} s", f"{ratio:.2f}x", "<= 1.5x"),
        ("`tarjoin A B \\| cat`", f"{res['tarjoin A B | cat']['median']:.2f} s",
         f"`tarcat A B \\| cat` {res['tarcat A B | cat']['median']:.2f} s", f"{ratio_pipe:.2f}x", "<= 1.5x"),
        ("peak memory, small join", f"{res['tarjoin A B']['peak_mb']:.0f} MB", "", "", "flat"),
        ("peak memory, large members (16 MiB each)", f"{res['tarjoin large A B']['peak_mb']:.0f} MB", "", "",
         "flat"),
    ]
    print(common.table(rows, ["measure", "tarjoin", "baseline", "ratio", "target"]))
    print()
    print(common.table([(k.replace("|", "\\|"), f"{v['median']:.3f}", " ".join(f"{x:.3f}" for x in v["runs"]),
                         f"{v['peak_mb']:.0f}") for k, v in res.items()], ["command", "median s", "runs", "peak MB"]))
    common.save("join", {"samples": n, "results": res, "ratio": ratio, "ratio_pipe": ratio_pipe, "load": load})


if __name__ == "__main__":
    main()
