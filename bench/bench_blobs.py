#!/usr/bin/env python3
"""Large members (issues 12 and 18): time against ``cat FILE | cat`` in the
same run (medians of 3 interleaved runs, input read once untimed before
each), and the peak RSS (GNU time) of every command on one huge member.

    .venv/bin/python bench/bench_blobs.py [--quick]

Data is generated into a temporary directory and removed: ``large.tar``
(1,000 members of 1 MiB) and ``huge.tar`` (one sample with a 3 GB member;
300 MB with --quick).  Prints a markdown section."""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)
GEN = f"{sys.executable} {ROOT}/testdata/bigmember.py"


def sh(cmd, cwd, env=None):
    e = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"], **(env or {}))
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=e, capture_output=True)
    if p.returncode:
        raise SystemExit(f"{cmd}: exit {p.returncode}: {p.stderr.decode()[-300:]}")
    return p


def timed(cmds, cwd, warm, runs=3):
    times = {c: [] for c in cmds}
    for _ in range(runs):
        for c in cmds:
            sh(f"cat {warm} > /dev/null", cwd)
            t = time.perf_counter()
            sh(c, cwd)
            times[c].append(time.perf_counter() - t)
    return {c: statistics.median(v) for c, v in times.items()}


def main():
    quick = "--quick" in sys.argv
    huge = 300_000_000 if quick else 3_000_000_000
    d = tempfile.mkdtemp(prefix="bench-blobs-", dir=os.environ.get("BENCH_DIR"))
    try:
        sh(f"{GEN} {1 << 20} {100 if quick else 1000} > large.tar", d)
        sh(f"{GEN} {huge} 1 > huge.tar", d)
        out = ["## Large members (bench_blobs.py)", ""]
        mb = os.path.getsize(os.path.join(d, "large.tar")) / 1e6
        t = timed(["cat large.tar | cat > /dev/null", "tarcat large.tar | cat > /dev/null",
                   "cat large.tar | tarcat | cat > /dev/null"], d, "large.tar")
        ref = t["cat large.tar | cat > /dev/null"]
        out += [f"1 MiB members ({mb:.0f} MB), medians of 3:", "",
                "| command | MB/s | speed vs `cat FILE \\| cat` |", "| --- | ---: | ---: |"]
        for c, v in t.items():
            out.append(f"| `{c.replace('|', chr(92) + '|')}` | {mb / v:,.0f} | {ref / v:.2f}× |")
        gb = huge / 1e9
        t = timed(["cat huge.tar | cat > /dev/null", "tarcat huge.tar | cat > /dev/null",
                   "cat huge.tar | tarcat | cat > /dev/null"], d, "huge.tar")
        ref = t["cat huge.tar | cat > /dev/null"]
        out += ["", f"One {gb:g} GB member, medians of 3 (from a plain file the member is a region of the "
                "input, sent with sendfile; from a pipe it goes through a spool file):", "",
                "| command | s | time vs `cat FILE \\| cat` |", "| --- | ---: | ---: |"]
        for c, v in t.items():
            out.append(f"| `{c.replace('|', chr(92) + '|')}` | {v:.2f} | {v / ref:.2f}× |")
        out += ["", f"Peak RSS with one {gb:g} GB member read from a pipe (GNU time %M):", "",
                "| command | peak RSS MB | s |", "| --- | ---: | ---: |"]
        for c in ["tarcat", "tarcat -f bin", "tarsplit -n 1 -o 'p-%d.tar'", "tar2tsv -f 'bin txt'", "tarcheck",
                  "tarsort --memory 64MB", "tarpcat huge.tar", "tarshow -c 1",
                  "tarproc -c 'sha256sum sample.bin > sample.sha'"]:
            src = "" if "tarpcat" in c else "cat huge.tar | "
            t0 = time.perf_counter()
            sh(f"{src}/usr/bin/time -f %M -o rss {c} > /dev/null; rm -f p-*.tar", d)
            dt = time.perf_counter() - t0
            rss = int(open(os.path.join(d, "rss")).read().split()[-1]) / 1000
            out.append(f"| `{c}` | {rss:.0f} | {dt:.1f} |")
        print("\n".join(out) + "\n")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
