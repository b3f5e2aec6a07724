"""CPU of the tarproc process itself per sample of ``tarproc -c`` (issue 18):
the parent's own user+system time (all its threads, RUSAGE_SELF), not its
commands'.  On a CPU-bound machine this adds directly to the wall time.

    .venv/bin/python bench/proc_cpu.py [-n 2000] [--runs 5] [-w DIR ...] [-- TARPROC OPTIONS]

Each run is a fresh interpreter that runs ``tarproc -p 2 -c true`` in-process
on an N-sample shard and on a 10-sample one (start-up, subtracted); the
working directory variants (``-w``, default ``$TMPDIR`` and ``/dev/shm``) run
in turns.  Prints min and median of (CPU(N) - CPU(10)) / (N - 10) in µs."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from common import OUT  # noqa: E402
from bench_proc import make_shard  # noqa: E402

CHILD = r"""
import os, resource, sys
sys.argv = ["tarproc"] + sys.argv[1:]
from tarproc.cli.tarproc import entry
try:
    entry()
except SystemExit as e:
    if e.code:
        raise
s = resource.getrusage(resource.RUSAGE_SELF)
c = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(os.environ["PROC_CPU_OUT"], "w") as f:
    f.write("%f %f %f %f" % (s.ru_utime, s.ru_stime, c.ru_utime, c.ru_stime))
"""


def once(python, args, shard):
    with tempfile.NamedTemporaryFile("r") as out, open(os.devnull, "wb") as null:
        subprocess.run([python, "-c", CHILD, *args, shard], stdout=null, check=True, cwd=os.path.dirname(shard),
                       env=dict(os.environ, PROC_CPU_OUT=out.name))
        return [float(x) for x in out.read().split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-w", action="append", help="working directory base (repeatable)")
    ap.add_argument("--python", action="append",
                    help="interpreter of a venv with tarproc installed (repeatable: compared in turns)")
    ap.add_argument("rest", nargs="*", help="tarproc options (default: -p 2 -c true)")
    a = ap.parse_args()
    data = os.path.join(OUT, "proc")
    os.makedirs(data, exist_ok=True)
    big, small = os.path.join(data, f"s{a.n}.tar"), os.path.join(data, "s10.tar")
    make_shard(big, a.n)
    make_shard(small, 10)
    opts = a.rest or ["-p", "2", "-c", "true"]
    dirs = a.w or [tempfile.gettempdir(), "/dev/shm"]
    pythons = a.python or [sys.executable]
    cases = [(p, d) for d in dirs for p in pythons]
    per = {c: [] for c in cases}
    kids = {c: [] for c in cases}
    for _ in range(a.runs):
        for p, d in cases:
            u, s, cu, cs = once(p, ["-w", d, *opts], big)
            u0, s0, _, _ = once(p, ["-w", d, *opts], small)
            per[p, d].append(((u + s) - (u0 + s0)) / (a.n - 10) * 1e6)
            kids[p, d].append((cu + cs) / a.n * 1e6)
    print(f"tarproc {' '.join(opts)}, {a.n} samples, {a.runs} runs: parent CPU per sample (user+system, µs)")
    for p, d in cases:
        v = per[p, d]
        who = f"{p}  " if len(pythons) > 1 else ""
        print(f"  {who}-w {d:10s} min {min(v):6.0f}  median {statistics.median(v):6.0f}   runs {' '.join(f'{x:.0f}' for x in v)}"
              f"   (commands: median {statistics.median(kids[p, d]):.0f} µs)")


if __name__ == "__main__":
    main()
