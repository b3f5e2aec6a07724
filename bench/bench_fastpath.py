#!/usr/bin/env python3
"""The fast path in-process: CPU per member of reading and writing back.

    .venv/bin/python bench/bench_fastpath.py [--data DIR] [-n SAMPLES] [--mb 8] [--repeat 15] [--only NAMES]

For each file of ``make_foreign.py`` (``--data DIR``, or the set
``bench_foreign.py`` makes for ``-n``), the first ``--mb`` MB are read from
memory by :func:`~tarproc.core.passthru.fast_group` (raw samples) and
written back by :class:`~tarproc.core.grouping.SampleWriter` to a sink that
drops them, what ``tarcat FILE > /dev/null`` does without start-up, pipes
or the page cache.  The figure is CPU seconds (``time.process_time``) per
member, the minimum of ``--repeat`` runs: on a shared machine the minimum
of many short runs moves far less than wall time.  To compare two checkouts,
run it under each (``PYTHONPATH=/path/to/checkout``) in turns.
"""

import argparse
import io
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_path = list(sys.path)
sys.path.insert(0, HERE)
from bench_foreign import DIALECTS, foreign_set  # noqa: E402

sys.path[:] = _path  # (bench_foreign puts this checkout first: tarproc comes from PYTHONPATH or the venv)


class _Drop:
    def write(self, data):
        return len(data)


def per_member(data, repeat):
    """(min CPU s per member, members) of fast_group + SampleWriter over ``data``."""
    from tarproc.core.grouping import SampleWriter
    from tarproc.core.passthru import fast_group
    from tarproc.core.tario import TarReader

    best, members = float("inf"), 0
    for _ in range(repeat):
        reader = TarReader(io.BufferedReader(io.BytesIO(data), 1 << 20), "bench")
        writer = SampleWriter(_Drop())
        n = 0
        t0 = time.process_time()
        try:
            for sample in fast_group(reader, "bench", None, True):
                writer.write(sample)
                n += len(sample) - 2  # members (not __key__, __source__)
        except Exception:  # the cut at --mb: the samples before it are what is timed
            pass
        best = min(best, time.process_time() - t0)
        members = n
    return best / max(members, 1), members


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="an existing make_foreign.py output directory")
    ap.add_argument("-n", "--samples", type=int, default=20_000)
    ap.add_argument("--mb", type=float, default=8)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--only", help="some of the files, e.g. gnutar-gnu,webdataset")
    args = ap.parse_args()
    d = foreign_set(args.samples, args.data)
    import tarproc

    print(f"tarproc from {os.path.dirname(tarproc.__file__)}; load average {os.getloadavg()[0]:.1f}")
    for name in args.only.split(",") if args.only else DIALECTS:
        with open(os.path.join(d, f"{name}.tar"), "rb") as f:
            data = f.read(int(args.mb * (1 << 20)))
        us, members = per_member(data, args.repeat)
        print(f"{name:14s} {us * 1e6:6.2f} µs/member ({members:,} members, min of {args.repeat})")


if __name__ == "__main__":
    main()
