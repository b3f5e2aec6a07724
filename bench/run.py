#!/usr/bin/env python3
"""Run every benchmark in turn and collect their tables in bench/out/RESULTS.md.

    .venv/bin/python bench/run.py [--quick] [NAME ...]

Runs ``bench/startup.py`` and every ``bench/bench_*.py`` (or only those named,
e.g. ``core``), one after another (never in parallel: they time the
machine), passing ``--quick`` on.  Each script prints a markdown section on
stdout; they are written, with the machine and the date, to RESULTS.md.  A
script that fails is reported in RESULTS.md and the others still run.
"""

import argparse
import datetime
import glob
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")


def scripts(names):
    found = [os.path.join(HERE, "startup.py")] + sorted(glob.glob(os.path.join(HERE, "bench_*.py")))
    if names:
        found = [s for s in found if any(os.path.basename(s) in (n, f"bench_{n}.py", f"{n}.py") for n in names)]
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke-run every benchmark on tiny data")
    ap.add_argument("names", nargs="*", help="only these benchmarks (core, shard, startup, ...)")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    sections = []
    failed = []
    for script in scripts(args.names):
        name = os.path.basename(script)
        print(f"== {name}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, script] + (["--quick"] if args.quick else []),
                           stdout=subprocess.PIPE, text=True)
        took = time.monotonic() - t0
        if p.returncode != 0:
            failed.append(name)
            sections.append(f"## {name}\n\n**failed** with exit status {p.returncode} after {took:.0f} s\n")
        else:
            sections.append(p.stdout.strip() + f"\n\n_{name}: {took:.0f} s_\n")
        print(p.stdout, flush=True)
    head = (f"# tarproc benchmark results\n\n{datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.node()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}"
            f"{', --quick (smoke run: the figures mean nothing)' if args.quick else ''}; "
            f"made by `.venv/bin/python bench/run.py{' --quick' if args.quick else ''}`.\n")
    path = os.path.join(OUT, "RESULTS.md")
    with open(path, "w") as f:
        f.write(head + "\n" + "\n".join(sections))
    print(f"wrote {path}" + (f"; failed: {', '.join(failed)}" if failed else ""), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
