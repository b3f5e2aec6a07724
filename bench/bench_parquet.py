"""Parquet -> tar against pyarrow's own scan of the same table, in turns in
one run: ``.venv/bin/python bench/bench_parquet.py [--quick] [--rows N] [--repeat R]``.

Data: N rows (default 10,000; 1 GB) of a 100 KB binary ``jpg`` (random bytes), an
int64 ``label`` and a ~40-byte string ``caption``, row groups of 100 rows,
snappy (pyarrow's default; random bytes do not compress).  Timed (wall, the
file read once untimed before each turn so the page cache is warm):

- ``scan``: pyarrow reading every column in a fresh Python (its start-up
  and pyarrow's import included, as for the command): ``iter_batches`` a row
  group at a time, and ``pq.read_table`` (threads, the whole table in
  memory), and with the options tarcreate reads with (1 MiB read buffer, no
  threads, a row group at a time); the fastest of the three is the reference;
- ``tarcreate -o /dev/null``: the tar made and written to the null device;
- ``tarcreate -o FILE``: written to a file beside the table (removed after);
- ``tar2tsv --format parquet``: the tar back to Parquet (-o /dev/null).

The target (issue 38): tarcreate at >= 0.8x the scan's throughput.  Then
the same against a table of small rows (``--small-rows``, a 1 KB cell),
where the work is per member rather than per byte."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(os.path.dirname(HERE), ".venv", "bin")


def make_table(path, rows, cell=100_000, group=100):
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    for start in range(0, rows, group):
        n = min(group, rows - start)
        t = pa.table({"__key__": [f"s{start + i:08d}" for i in range(n)],
                      "jpg": pa.array([os.urandom(cell) for _ in range(n)], pa.binary()),
                      "label": pa.array([(start + i) % 1000 for i in range(n)], pa.int64()),
                      "caption": [f"a photo of thing {(start + i) % 1000}, outdoors" for i in range(n)]})
        if writer is None:
            writer = pq.ParquetWriter(path, t.schema)
        writer.write_table(t, row_group_size=group)
    writer.close()


SCAN = ("import sys, pyarrow.parquet as pq\n"
        "f = pq.ParquetFile(sys.argv[1])\n"
        "n = 0\n"
        "for b in f.iter_batches(batch_size=f.metadata.row_group(0).num_rows):\n"
        "    n += b.num_rows\n"
        "print(n)\n")
SAME = ("import sys, pyarrow.parquet as pq\n"
        "f = pq.ParquetFile(sys.argv[1], buffer_size=1 << 20, pre_buffer=False)\n"
        "n = 0\n"
        "for g in range(f.metadata.num_row_groups):\n"
        "    for b in f.iter_batches(batch_size=f.metadata.row_group(g).num_rows, row_groups=[g], use_threads=False):\n"
        "        n += b.num_rows\n"
        "print(n)\n")
READ = ("import sys, pyarrow.parquet as pq\n"
        "print(pq.read_table(sys.argv[1]).num_rows)\n")


def timed(argv):
    """(wall, CPU) seconds of one run (CPU: user + system of the child, which
    another engineer's load on the 2 cores disturbs less than wall time)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--small-rows", type=int, default=200_000, help="rows of the small-row table")
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny tables, one turn")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.small_rows, args.repeat = 200, 2000, 1
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
        table = os.path.join(d, "t.parquet")
        make_table(table, args.rows)
        tar = os.path.join(d, "t.tar")
        subprocess.run([os.path.join(BIN, "tarcreate"), table, "-o", tar], check=True)
        size = os.path.getsize(table)
        runs = {
            "scan (iter_batches, a row group each)": [sys.executable, "-c", SCAN, table],
            "scan (pq.read_table)": [sys.executable, "-c", READ, table],
            "scan (tarcreate's reader options)": [sys.executable, "-c", SAME, table],
            "tarcreate -o /dev/null": [os.path.join(BIN, "tarcreate"), table, "-o", "/dev/null"],
            "tarcreate -o FILE": [os.path.join(BIN, "tarcreate"), table, "-o", os.path.join(d, "out.tar")],
            "tar2tsv --format parquet": [os.path.join(BIN, "tar2tsv"), "--format", "parquet", tar, "-o",
                                         "/dev/null"],
        }
        times = {k: [] for k in runs}
        for _ in range(args.repeat):
            for name, argv in runs.items():
                warm(tar if "tar2tsv" in name else table)
                times[name].append(timed(argv))
                if os.path.exists(os.path.join(d, "out.tar")):
                    os.unlink(os.path.join(d, "out.tar"))
        load = os.getloadavg()[0]
        scan = min(min(w for w, c in ts) for name, ts in times.items() if name.startswith("scan"))
        scan_cpu = min(min(c for w, c in ts) for name, ts in times.items() if name.startswith("scan"))
        print("## bench_parquet: Parquet -> tar against pyarrow's own scan\n")
        print(f"Table: {args.rows:,} rows of a 100 KB binary cell, an int64 and a caption, {size / 1e6:.0f} MB "
              f"(its tar {os.path.getsize(tar) / 1e6:.0f} MB), page cache warm; load {load:.1f}; best of "
              f"{args.repeat} in turns (median). The reference is the fastest scan.\n")
        print("| run | wall s (median) | MB/s | speed vs the scan | CPU s | CPU vs the scan |")
        print("|---|---|---|---|---|---|")
        for name, ts in times.items():
            best = min(w for w, c in ts)
            cpu = min(c for w, c in ts)
            print(f"| {name} | {best:.2f} ({statistics.median(w for w, c in ts):.2f}) | {size / 1e6 / best:.0f} | "
                  f"{scan / best:.2f}x | {cpu:.2f} | {scan_cpu / cpu:.2f}x |")
        ours = min(w for w, c in times["tarcreate -o /dev/null"])
        print(f"\nTarget: `tarcreate T.parquet` >= 0.8x the scan: **{'met' if scan / ours >= 0.8 else 'not met'}** "
              f"({scan / ours:.2f}x).")
        small_rows(d, args.small_rows, args.repeat)


def small_rows(d, rows, repeat):
    """The same comparison where a row is small (a 1 KB cell): three members
    of a 512-byte header each per row, so the tar is three times the table
    and the work is per member, not per byte."""
    table = os.path.join(d, "small.parquet")
    make_table(table, rows, cell=1000, group=10_000)
    runs = {"scan (tarcreate's reader options)": [sys.executable, "-c", SAME, table],
            "tarcreate -o /dev/null": [os.path.join(BIN, "tarcreate"), table, "-o", "/dev/null"]}
    times = {k: [] for k in runs}
    for _ in range(repeat):
        for name, argv in runs.items():
            warm(table)
            times[name].append(timed(argv))
    best = {k: min(w for w, c in ts) for k, ts in times.items()}
    scan = best["scan (tarcreate's reader options)"]
    print(f"\nSmall rows: {rows:,} rows of a 1 KB binary cell, an int64 and a caption "
          f"({os.path.getsize(table) / 1e6:.0f} MB), row groups of 10,000; best of {repeat}.\n")
    print("| run | wall s | rows/s | speed vs the scan |")
    print("|---|---|---|---|")
    for name, w in best.items():
        print(f"| {name} | {w:.2f} | {rows / w:,.0f} | {scan / w:.2f}x |")
    print(f"\nWith rows this small the tar is about three times the table (a 512-byte header per member) and the "
          f"cost is per member (about 1 µs each in Python), so the 0.8x target holds for rows of images, "
          f"not for rows of 1 KB: {scan / best['tarcreate -o /dev/null']:.2f}x here.")

if __name__ == "__main__":
    main()
