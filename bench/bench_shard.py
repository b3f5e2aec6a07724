#!/usr/bin/env python3
"""Benchmarks of tarsplit, tarsort and tarpcat against their baselines (issue 4).

    .venv/bin/python bench/bench_shard.py [--quick] [--repeat N] [--only tarsplit,tarsort,tarpcat]

Targets on the 2-core machine:

* ``tarsplit`` at least 80% of ``tarcat``'s throughput on the same input;
* ``tarsort --memory 64MB`` of 1,000,000 small samples: peak memory under
  150 MB, time within 3x of ``tarcat`` over the data plus GNU ``sort`` over
  its keys;
* ``tarpcat -w 2`` over 8 gzip shards at least 1.5x the samples/s of
  ``tarcat`` over the same shards.

Data is generated under ``bench/out/data/shard`` (deterministic); commands
are timed in turns with :func:`common.compare`.
"""

import argparse
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import common  # noqa: E402

BIN = os.path.dirname(sys.executable)
os.environ["PATH"] = BIN + os.pathsep + os.environ.get("PATH", "")


def small_samples(n, seed=0, prefix=""):
    r = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta"]
    for i in range(n):
        key = f"{prefix}{r.randrange(10 ** 9):09d}-{i:07d}"
        yield {
            "__key__": key,
            "txt": b" ".join(r.choice(words) for _ in range(r.randrange(3, 20))),
            "cls": str(i % 1000).encode(),
            "json": b'{"id": %d, "w": %d}' % (i, r.randrange(1000)),
        }


def make_data(d, n_samples, n_shards, per_shard):
    from tarproc.sinks.write import write_samples

    os.makedirs(d, exist_ok=True)
    flat = os.path.join(d, f"small-{n_samples}.tar")
    keys = os.path.join(d, f"small-{n_samples}.keys")
    if not os.path.exists(flat):
        print(f"generating {flat} ...", file=sys.stderr)
        write_samples(flat, small_samples(n_samples))
        with open(keys, "w") as f:
            for s in small_samples(n_samples):
                f.write(s["__key__"] + "\n")
    shards = []
    for s in range(n_shards):
        path = os.path.join(d, f"gz-{per_shard}-{s:02d}.tar.gz")
        if not os.path.exists(path):
            print(f"generating {path} ...", file=sys.stderr)
            write_samples(path, small_samples(per_shard, seed=100 + s, prefix=f"s{s:02d}/"))
        shards.append(path)
    return flat, keys, shards


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small smoke run (well under a minute)")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--only", default="tarsplit,tarsort,tarpcat",
                    help="comma-separated parts to run (default: all): tarsplit, tarsort, tarpcat")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if only - {"tarsplit", "tarsort", "tarpcat"}:
        ap.error(f"--only: unknown part(s) {', '.join(sorted(only - {'tarsplit', 'tarsort', 'tarpcat'}))}")
    if args.quick:
        n, per, repeat = 40_000, 5_000, 1
    else:
        n, per, repeat = 1_000_000, 25_000, 3
    repeat = args.repeat or repeat
    d = os.path.join(common.DATA, "shard")
    flat, keys, shards = make_data(d, n, 8, per)
    work = os.path.join(common.OUT, "shard-work")
    os.makedirs(work, exist_ok=True)
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    rows = []
    results = {"samples": n, "shards": len(shards), "per_shard": per}

    ratio1 = None
    if "tarsplit" in only:
        # 1. tarsplit vs tarcat: same input, both writing files
        r1 = common.compare({
            "tarcat": f"tarcat {flat} -o {work}/cat.tar",
            "tarsplit": f"tarsplit -n 100000 -o {work}/split {flat}",
        }, repeat=repeat, warm_paths=[flat])
        ratio1 = r1["tarcat"]["median"] / r1["tarsplit"]["median"]
        rows.append(["tarsplit -n 100000", f"{r1['tarsplit']['median']:.2f} s", f"tarcat {r1['tarcat']['median']:.2f} s",
                     f"{ratio1:.2f}x throughput", ">= 0.80", "ok" if ratio1 >= 0.8 else "MISS"])
        results["tarsplit"] = r1

    ratio2 = peak = None
    if "tarsort" in only:
        # 2. tarsort --memory 64MB vs tarcat + GNU sort over the keys
        r2 = common.compare({
            "tarcat": f"tarcat {flat} > /dev/null",
            "gnusort": f"LC_ALL=C sort {keys} > /dev/null",
            "tarsort": f"tarsort --memory 64MB --tmpdir {tmp} {flat} > /dev/null",
        }, repeat=repeat, warm_paths=[flat, keys])
        base = r2["tarcat"]["median"] + r2["gnusort"]["median"]
        ratio2 = r2["tarsort"]["median"] / base
        peak = r2["tarsort"]["peak_mb"]
        rows.append(["tarsort --memory 64MB", f"{r2['tarsort']['median']:.2f} s",
                     f"tarcat + sort {base:.2f} s", f"{ratio2:.2f}x time", "<= 3.0", "ok" if ratio2 <= 3 else "MISS"])
        rows.append(["tarsort peak memory", f"{peak:.0f} MB", "", "", "< 150 MB", "ok" if peak < 150 else "MISS"])
        results["tarsort"] = r2

    ratio3 = None
    notes = []
    if "tarpcat" in only:
        # 3. tarpcat -w 2 vs tarcat over 8 gzip shards
        names = " ".join(shards)
        r3 = common.compare({
            "tarcat": f"tarcat {names} > /dev/null",
            "tarpcat": f"tarpcat -w 2 {names} > /dev/null",
        }, repeat=repeat, warm_paths=shards)
        ratio3 = r3["tarcat"]["median"] / r3["tarpcat"]["median"]
        total = len(shards) * per
        rows.append(["tarpcat -w 2 (8 gzip shards)", f"{total / r3['tarpcat']['median']:,.0f} samples/s",
                     f"tarcat {total / r3['tarcat']['median']:,.0f} samples/s", f"{ratio3:.2f}x", ">= 1.5",
                     "ok" if ratio3 >= 1.5 else "MISS"])
        results["tarpcat"] = r3
        cores = {k: r3[k]["cpu"] / r3[k]["median"] for k in ("tarcat", "tarpcat")}
        notes.append(f"tarpcat: tarcat's own processes use {cores['tarcat']:.2f} cores (gzip files of 1 MiB and more "
                     f"are decoded by a program beside the parser), tarpcat's {cores['tarpcat']:.2f}, of "
                     f"{os.cpu_count()}: the speed-up is bounded by the cores tarcat leaves idle.")

    print(f"\n{n:,} small samples (3 fields); {len(shards)} gzip shards of {per:,} samples; "
          f"{os.cpu_count()} cores; median of {repeat}\n")
    print(common.table(rows, ["measure", "ours", "baseline", "ratio", "target", ""]))
    for note in notes:
        print(f"\n{note}")
    results["ratios"] = {"tarsplit_vs_tarcat": ratio1, "tarsort_vs_tarcat_plus_sort": ratio2,
                         "tarsort_peak_mb": peak, "tarpcat_vs_tarcat": ratio3}
    suffix = "" if only == {"tarsplit", "tarsort", "tarpcat"} else "_" + "_".join(sorted(only))
    common.save("bench_shard" + ("_quick" if args.quick else "") + suffix, results)


if __name__ == "__main__":
    main()
