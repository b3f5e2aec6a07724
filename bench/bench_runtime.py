"""The worker runtime on multiprocess against the code before it, side by side.

    .venv/bin/python bench/bench_runtime.py [--baseline REV] [--quick] [--repeat N]

``--baseline REV`` (default ``b859b0d``, the last commit whose ``--map`` and
tarpcat forked their own workers) is exported with ``git archive`` and run
from its ``bin/`` with the same interpreter; the current checkout runs from
its ``bin/`` too, so both pay the same start-up.  In turns, in one run:

1. ``tarproc -p 2 --map ident`` (a trivial function) on 50,000 samples, now
   and then (target: now >= 0.8x then);
2. ``tarpcat -w 2`` over 8 gzip shards against ``tarcat`` on the same shards,
   now and then (target: the now-ratio >= the then-ratio, within noise).
"""

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import common  # noqa: E402
from bench_proc import make_shard  # noqa: E402
from bench_shard import make_data  # noqa: E402


def export(rev, dest):
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "tarproc", "bin"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="b859b0d")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=None)
    args = ap.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    map_n = 2000 if args.quick else 50000
    per = 1000 if args.quick else 12500
    data = os.path.join(common.OUT, "runtime")
    os.makedirs(data, exist_ok=True)
    map_shard = os.path.join(data, f"map-{map_n}.tar")
    make_shard(map_shard, map_n)
    fn = os.path.join(data, "trivial.py")
    with open(fn, "w") as f:
        f.write("def ident(sample):\n    return sample\n")
    _, _, shards = make_data(os.path.join(common.DATA, "runtime"), 1, 8, per)
    names = " ".join(shards)
    py = sys.executable
    with tempfile.TemporaryDirectory() as base:
        export(args.baseline, base)
        now, then = f"{py} {ROOT}/bin", f"{py} {base}/bin"
        res = common.compare({
            "map now": f"{now}/tarproc -p 2 --map {fn}:ident {map_shard} > /dev/null",
            "map then": f"{then}/tarproc -p 2 --map {fn}:ident {map_shard} > /dev/null",
            "tarcat": f"{now}/tarcat {names} > /dev/null",
            "tarpcat now": f"{now}/tarpcat -w 2 {names} > /dev/null",
            "tarpcat then": f"{then}/tarpcat -w 2 {names} > /dev/null",
        }, repeat=repeat, warm_paths=[map_shard] + shards)
    t = {k: v["median"] for k, v in res.items()}
    total = 8 * per
    map_ratio = t["map then"] / t["map now"]
    pcat_now, pcat_then = t["tarcat"] / t["tarpcat now"], t["tarcat"] / t["tarpcat then"]
    rows = [
        [f"`tarproc -p 2 --map ident`, {map_n:,} samples", f"{map_n / t['map now']:,.0f} samples/s",
         f"{map_n / t['map then']:,.0f} samples/s", f"{map_ratio:.2f}x", ">= 0.8x"],
        [f"`tarpcat -w 2` / `tarcat`, 8 gzip shards of {per:,}", f"{pcat_now:.2f}x", f"{pcat_then:.2f}x",
         f"{pcat_now / pcat_then:.2f}x", ">= 1.0x (noise ~5%)"],
    ]
    print(common.table(rows, ["measure", "now (pool on multiprocess)", f"then ({args.baseline})", "now/then",
                              "target"]))
    print()
    print(common.table([[k, f"{v['median']:.3f}", " ".join(f"{x:.3f}" for x in v["runs"]), f"{v['peak_mb']:.0f}"]
                        for k, v in res.items()], ["command", "median s", "runs", "peak MB"]))
    common.save("bench_runtime", {"results": res, "map_ratio": map_ratio, "pcat_now": pcat_now,
                                  "pcat_then": pcat_then})


if __name__ == "__main__":
    main()
