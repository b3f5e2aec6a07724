"""tarproc per-sample overhead, scaling, and --map throughput.

    .venv/bin/python bench/bench_proc.py [--quick] [-n 2000]

Measured in turns in one run (bench/common.py ``compare``):

1. ``tarproc -p 2 -c true`` on N samples against the floor
   ``seq N | xargs -P2 -n1 bash -c true`` (target: within 1.2x, issue 18),
   and the same with the run directory on tmpfs (``-w /dev/shm``): a sample
   makes a directory and a file per field, which on a disk file system can
   cost more than the command;
2. a CPU-bound command (a bash arithmetic loop) with ``-p 2`` against ``-p 1``
   (target: at least 1.7x faster);
3. ``tarproc --map`` with a trivial function against ``-c true``, in samples/s
   (target: at least 30x).  --map runs on 25x more samples so that its
   start-up (interpreter, multiprocess, worker fork) does not dominate.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from common import OUT, compare, save, table  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)


def make_shard(path, n):
    from tarproc.sinks.write import write_samples

    if os.path.exists(path):
        return
    write_samples(path, ({"__key__": f"{i:07d}", "txt": b"sample %d\n" % i, "cls": b"%d" % (i % 10)}
                         for i in range(n)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one turn (smoke test)")
    ap.add_argument("-n", type=int, default=2000, help="samples for the command runs (default 2000)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = 200 if args.quick else args.n
    repeat = 1 if args.quick else args.repeat
    cpu_n = max(20, n // 20)
    map_n = n * 25
    data = os.path.join(OUT, "proc")
    os.makedirs(data, exist_ok=True)
    shard, cpu_shard, map_shard = (os.path.join(data, f"s{k}.tar") for k in (n, cpu_n, map_n))
    make_shard(shard, n)
    make_shard(cpu_shard, cpu_n)
    make_shard(map_shard, map_n)
    fn = os.path.join(data, "trivial.py")
    with open(fn, "w") as f:
        f.write("def ident(sample):\n    return sample\n")
    tp = os.path.join(VENV_BIN, "tarproc")
    env_path = f"PATH={VENV_BIN}:$PATH"
    # the run directory on tmpfs: what the per-sample files cost on $TMPDIR's filesystem
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else data
    burn = "i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; echo $i > sample.n"

    cmds = {
        "xargs -P2 bash -c true": f"seq {n} | xargs -P2 -n1 bash -c true",
        "tarproc -p 2 -c true": f"{env_path} {tp} -p 2 -c true {shard} > /dev/null",
        "tarproc -p 2 -w SHM -c true": f"{env_path} {tp} -p 2 -w {shm} -c true {shard} > /dev/null",
        "cpu-bound -p 1": f"{tp} -p 1 -c '{burn}' {cpu_shard} > /dev/null",
        "cpu-bound -p 2": f"{tp} -p 2 -c '{burn}' {cpu_shard} > /dev/null",
        "tarproc -p 2 --map ident": f"{tp} -p 2 --map {fn}:ident {map_shard} > /dev/null",
    }
    res = compare(cmds, repeat=repeat, warm_paths=(shard, cpu_shard, map_shard))
    t = {k: v["median"] for k, v in res.items()}
    rate_true = n / t["tarproc -p 2 -c true"]
    rate_map = map_n / t["tarproc -p 2 --map ident"]
    rows = [
        [f"`-c true`, {n} samples, -p 2", f"{t['tarproc -p 2 -c true']:.2f} s",
         f"xargs floor {t['xargs -P2 bash -c true']:.2f} s",
         f"{t['tarproc -p 2 -c true'] / t['xargs -P2 bash -c true']:.2f}x", "<= 1.2x (issue 18)"],
        [f"`-c true`, {n} samples, -p 2, `-w {shm}`", f"{t['tarproc -p 2 -w SHM -c true']:.2f} s",
         f"xargs floor {t['xargs -P2 bash -c true']:.2f} s",
         f"{t['tarproc -p 2 -w SHM -c true'] / t['xargs -P2 bash -c true']:.2f}x", "(run directory on tmpfs)"],
        [f"CPU-bound command, {cpu_n} samples", f"-p 2: {t['cpu-bound -p 2']:.2f} s",
         f"-p 1: {t['cpu-bound -p 1']:.2f} s", f"{t['cpu-bound -p 1'] / t['cpu-bound -p 2']:.2f}x faster",
         ">= 1.7x"],
        [f"`--map` trivial function, {map_n} samples", f"{rate_map:,.0f} samples/s",
         f"`-c true` {rate_true:,.0f} samples/s", f"{rate_map / rate_true:.1f}x", ">= 30x"],
    ]
    print(table(rows, ["measure", "tarproc", "baseline", "ratio", "target"]))
    print()
    print(table([[k, f"{v['median']:.3f}", " ".join(f"{x:.3f}" for x in v["runs"]), f"{v['peak_mb']:.0f}"]
                 for k, v in res.items()], ["command", "median s", "runs", "peak MB"]))
    save("bench_proc", {"n": n, "cpu_n": cpu_n, "map_n": map_n, "results": res,
                        "ratios": {"true_vs_xargs": t["tarproc -p 2 -c true"] / t["xargs -P2 bash -c true"],
                                   "true_shm_vs_xargs": t["tarproc -p 2 -w SHM -c true"] / t["xargs -P2 bash -c true"],
                                   "cpu_p1_over_p2": t["cpu-bound -p 1"] / t["cpu-bound -p 2"],
                                   "map_over_true_rate": rate_map / rate_true}})


if __name__ == "__main__":
    main()
