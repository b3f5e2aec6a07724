#!/usr/bin/env python3
"""Benchmark on shards other tools wrote: every file of ``make_foreign.py``.

    .venv/bin/python bench/bench_foreign.py [--quick] [-n SAMPLES] [--data DIR] [--repeat N]

The same samples (``-n``, default 100,000, three members each: cls, jpg of
~900 bytes, json) written by GNU tar (gnu, posix, ustar), bsdtar, Python's
tarfile (GNU, PAX, USTAR) and webdataset's TarWriter, by
``../shared/foreign/make_foreign.py`` into ``bench/out/data/foreign-N/``
(``--data DIR``: an existing set).  For each file, in turns within one run:

* ``tar -xOf FILE > /dev/null`` (GNU tar reading every member), the reference;
* ``tarcat FILE > /dev/null`` and ``tarcat FILE | cat``;
* ``tarsplit``, ``tarpcat -w 1``, ``tarindex`` and ``tarcheck`` on it;
* on the webdataset file, webdataset reading and re-writing every sample;
* on the GNU tar file gzipped, ``tar -xzOf`` against ``tarcat``.

Targets: ``tarcat FILE`` <= 5x ``tar -xOf`` on every file; ``tarcat FILE |
cat`` >= 12x the speed of webdataset read+write on the webdataset file;
gzip <= 1.3x ``tar -xzOf``; tarsplit, tarpcat -w 1, tarindex and tarcheck
<= 1.5x tarcat's time on the same file.  The load average is printed with
the figures: the machines are shared.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import common  # noqa: E402

BIN, PY = common.BIN, common.PY
common.use_venv()
MAKE_FOREIGN = os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "foreign", "make_foreign.py")
DIALECTS = ["gnutar-gnu", "gnutar-pax", "gnutar-ustar", "bsdtar", "tarfile-gnu", "tarfile-pax", "tarfile-ustar",
            "webdataset"]

WDS_COPY = r"""
import sys, webdataset as wds
with wds.TarWriter(sys.stdout.buffer, encoder=False) as w:
    for s in wds.WebDataset(sys.argv[1], shardshuffle=False):
        w.write({k: v for k, v in s.items() if k == "__key__" or not k.startswith("__")})
"""


def run_cpu(cmd):
    """(wall s, CPU s (user + system, all processes of the command)) of one run."""
    import time

    t0 = time.perf_counter()
    before = os.times()
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, stdout=subprocess.DEVNULL)
    after = os.times()
    return time.perf_counter() - t0, (after.children_user - before.children_user
                                      + after.children_system - before.children_system)


def compare(cmds, repeat, warm):
    """Commands in turns; ``{name: {"median": wall s, "cpu": CPU s}}`` (medians).  CPU time is
    reported beside wall time: on a shared machine it moves less with the load."""
    import statistics

    runs = {name: [] for name in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            common.warm(*warm)
            runs[name].append(run_cpu(cmd))
    return {name: {"median": statistics.median(w for w, _ in r), "cpu": statistics.median(c for _, c in r),
                   "runs": r} for name, r in runs.items()}


def foreign_set(n, data):
    d = data or os.path.join(common.DATA, f"foreign-{n}")
    if not all(os.path.exists(os.path.join(d, f"{x}.tar")) for x in DIALECTS):
        script = os.environ.get("TARPROC_MAKE_FOREIGN", MAKE_FOREIGN)
        print(f"generating {d} with {script} -n {n} (a few minutes at 100,000) ...", file=sys.stderr)
        subprocess.run([PY, script, "-o", d, "-n", str(n)], check=True, stdout=subprocess.DEVNULL)
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2,000 samples, one repeat: a smoke test")
    ap.add_argument("-n", "--samples", type=int, default=None)
    ap.add_argument("--data", help="an existing make_foreign.py output directory")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--only", help="some of the files, e.g. gnutar-gnu,webdataset (the targets then cover those)")
    args = ap.parse_args()
    n = args.samples or (2000 if args.quick else 100_000)
    repeat = args.repeat or (1 if args.quick else 3)
    d = foreign_set(n, args.data)
    out = os.path.join(common.OUT, "foreign-tmp")
    os.makedirs(out, exist_ok=True)
    load0 = os.getloadavg()
    common.run_once(f"tarcat < /dev/null > /dev/null")  # byte code cached before anything is timed
    rows = []
    ratios = {}
    results = {}
    for name in args.only.split(",") if args.only else DIALECTS:
        f = os.path.join(d, f"{name}.tar")
        cmds = {
            "tar -xOf": f"tar -xOf {f} > /dev/null",
            "tarcat": f"tarcat {f} > /dev/null",
            "tarcat | cat": f"tarcat {f} | cat > /dev/null",
            "tarsplit": f"tarsplit -q -n 1000000 -o {out}/s-%06d.tar {f}",
            "tarpcat -w 1": f"tarpcat -w 1 {f} > /dev/null",
            "tarindex": f"tarindex -q {f} -o {out}/i.json",
            "tarcheck": f"tarcheck {f} > /dev/null",
        }
        if name == "webdataset":
            cmds["webdataset read+write"] = f"{PY} -c '{WDS_COPY}' {f} > /dev/null"
        r = compare(cmds, repeat, [f])
        results[name] = r
        tarcat = r["tarcat"]["median"]
        ratio = {"tarcat / tar -xOf": tarcat / r["tar -xOf"]["median"],
                 "CPU: tarcat / tar -xOf": r["tarcat"]["cpu"] / max(r["tar -xOf"]["cpu"], 0.01)}  # (clock ticks)
        for c in ("tarsplit", "tarpcat -w 1", "tarindex", "tarcheck"):
            ratio[f"{c} / tarcat"] = r[c]["median"] / tarcat
        if name == "webdataset":
            ratio["tarcat | cat speed / webdataset read+write"] = \
                r["webdataset read+write"]["median"] / r["tarcat | cat"]["median"]
        ratios[name] = ratio
        rows.append([f"`{name}.tar`", f"{r['tar -xOf']['median']:.3f}", f"{tarcat:.3f}",
                     f"{r['tarcat | cat']['median']:.3f}", f"**{ratio['tarcat / tar -xOf']:.1f}x**",
                     f"{ratio['CPU: tarcat / tar -xOf']:.1f}x"]
                    + [f"{ratio[f'{c} / tarcat']:.2f}x" for c in ("tarsplit", "tarpcat -w 1", "tarindex", "tarcheck")])
    g = os.path.join(d, "gnutar-gnu.tar")
    gz = g + ".gz"
    if not os.path.exists(gz):
        common.run_once(f"gzip -c {g} > {gz}.tmp && mv {gz}.tmp {gz}")
    r_gz = compare({"tar -xzOf": f"tar -xzOf {gz} > /dev/null", "tarcat": f"tarcat {gz} > /dev/null"},
                   repeat, [gz])
    gz_ratio = r_gz["tarcat"]["median"] / r_gz["tar -xzOf"]["median"]
    load1 = os.getloadavg()

    def mark(ok):
        return "met" if ok else "**missed**"

    worst_tar = max(r["tarcat / tar -xOf"] for r in ratios.values())
    others = max(v for r in ratios.values() for k, v in r.items() if k.endswith("/ tarcat"))
    wds = ratios["webdataset"]["tarcat | cat speed / webdataset read+write"] if "webdataset" in ratios else float("nan")
    print(f"## bench_foreign: shards other tools wrote ({n:,} samples x 3 members, make_foreign.py)"
          + (" (--quick: smoke run, not a measurement)" if args.quick else ""))
    print()
    print(f"Shards: `{d}/*.tar` (`make_foreign.py -n {n}`); median of {repeat} turns; load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after (2 cores, shared).")
    print()
    print(common.table(rows, ["shard", "tar -xOf s", "tarcat s", "tarcat \\| cat s", "tarcat / tar", "(CPU)",
                              "tarsplit / tarcat", "tarpcat -w 1 / tarcat", "tarindex / tarcat",
                              "tarcheck / tarcat"]))
    print()
    print(common.table([
        ["`tarcat FILE > /dev/null` / `tar -xOf FILE`, worst shard", f"{worst_tar:.1f}x", "<= 5x",
         mark(worst_tar <= 5)],
        ["`tarcat webdataset.tar \\| cat` speed / webdataset read+write", f"{wds:.1f}x", ">= 12x", mark(wds >= 12)],
        ["`tarcat gnutar-gnu.tar.gz` / `tar -xzOf`", f"{gz_ratio:.2f}x "
         f"({r_gz['tarcat']['median']:.2f} / {r_gz['tar -xzOf']['median']:.2f} s)", "<= 1.3x", mark(gz_ratio <= 1.3)],
        ["tarsplit, tarpcat -w 1, tarindex, tarcheck / tarcat, worst", f"{others:.2f}x", "<= 1.5x",
         mark(others <= 1.5)],
    ], ["target", "measured", "goal", ""]))
    common.save("bench_foreign" + ("_quick" if args.quick else ""), {
        "samples": n, "data": d, "results": results, "ratios": ratios, "gzip": r_gz, "load": [load0, load1]})


if __name__ == "__main__":
    main()
