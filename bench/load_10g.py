#!/usr/bin/env python3
"""Load drill: a large stream, generated on the fly and never stored, through

    generate | tarcat | tarproc --map bench/load_map.py:touch | tarsplit -s 1e9 -C true

(``tarsplit -C true`` deletes each shard once complete, so nothing of size is
kept on disk).  Checks that it completes, that each stage's peak memory stays
flat (under 100 MB by default; measured per stage with GNU time's maximum
resident set size, which covers the stage's worker processes too), and that
the number of samples out (tarsplit's manifest) equals the number generated.

    .venv/bin/python bench/load_10g.py              # 10 GB
    .venv/bin/python bench/load_10g.py --quick      # 200 MB smoke run
    .venv/bin/python bench/load_10g.py --size 2GB --sample-size 1MiB

Prints a markdown table and saves ``bench/out/load_10g.json``.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
from common import OUT, save  # noqa: E402

GNU_TIME = "/usr/bin/time"
STAGES = ("generate", "tarcat", "tarproc", "tarsplit")


def parse_size(text):
    from tarproc.cli.base import parse_size as ps

    return ps(text)


def generate(total, sample_size):
    """Write samples (a .bin of sample_size bytes, a .cls, a .json) to stdout
    until ``total`` bytes of payload; print the sample count on stderr."""
    from tarproc.core.tario import TarWriter

    out = sys.stdout.buffer
    w = TarWriter(out)
    block = os.urandom(1 << 16)
    payload = (block * (sample_size // len(block) + 1))[:sample_size]
    n = 0
    done = 0
    while done < total:
        key = f"load/{n:09d}"
        w.write(key + ".bin", payload)
        w.write(key + ".cls", str(n % 1000).encode())
        w.write(key + ".json", b'{"i": %d}' % n)
        done += sample_size
        n += 1
    w.close()
    out.flush()
    print(f"generated {n}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="10GB", help="bytes of sample payload to stream (default 10GB)")
    ap.add_argument("--quick", action="store_true", help="200 MB smoke run")
    ap.add_argument("--sample-size", default="100kB", help="bytes of the .bin field of each sample")
    ap.add_argument("--parallel", type=int, default=2, help="tarproc -p (default 2)")
    ap.add_argument("--limit-mb", type=float, default=100.0, help="peak memory limit per stage")
    ap.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    total = parse_size("200MB" if args.quick else args.size)
    sample_size = parse_size(args.sample_size)
    if args.generate:
        generate(total, sample_size)
        return 0

    work = os.path.join(OUT, "load")
    os.makedirs(work, exist_ok=True)
    mem = {s: os.path.join(work, f"{s}.maxrss") for s in STAGES}
    manifest = os.path.join(work, "manifest.json")
    gen_err = os.path.join(work, "generate.err")
    bin_dir = os.path.dirname(sys.executable)

    def timed(stage, cmd):
        return f"{GNU_TIME} -f %M -o {mem[stage]} {cmd}"

    pipeline = " | ".join([
        timed("generate", f"{sys.executable} {os.path.abspath(__file__)} --generate --size {total} "
                          f"--sample-size {sample_size} 2> {gen_err}"),
        timed("tarcat", f"{bin_dir}/tarcat"),
        timed("tarproc", f"{bin_dir}/tarproc -p {args.parallel} --map {HERE}/load_map.py:touch"),
        timed("tarsplit", f"{bin_dir}/tarsplit -s 1e9 -C true -o {work}/part --manifest {manifest}"),
    ])
    t0 = time.perf_counter()
    p = subprocess.run(["bash", "-o", "pipefail", "-c", pipeline], capture_output=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        print(p.stderr.decode(errors="replace"), file=sys.stderr)
        print(f"FAILED: pipeline exited {p.returncode}", file=sys.stderr)
        return 1
    with open(gen_err) as f:
        n_in = int(f.read().split()[-1])
    with open(manifest) as f:
        shards = json.load(f)
    n_out = sum(s["samples"] for s in shards)
    peaks = {}
    for s in STAGES:
        with open(mem[s]) as f:
            peaks[s] = int(f.read().split()[-1]) / 1024  # KB -> MB
    ok = n_in == n_out and all(peaks[s] < args.limit_mb for s in STAGES if s != "generate")

    print(f"## Load: {total / 1e6:,.0f} MB streamed through tarcat | tarproc --map | tarsplit\n")
    print("| stage | peak RSS (MB) |")
    print("| --- | ---: |")
    for s in STAGES:
        print(f"| {s} | {peaks[s]:.1f} |")
    print(f"\nsamples in {n_in}, out {n_out} ({len(shards)} shards); {dt:.1f} s, "
          f"{total / dt / 1e6:.0f} MB/s; {'OK' if ok else 'FAILED'}")
    save("load_10g", {"bytes": total, "sample_size": sample_size, "seconds": dt, "samples_in": n_in,
                      "samples_out": n_out, "shards": len(shards), "peak_mb": peaks, "ok": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
