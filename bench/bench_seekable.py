#!/usr/bin/env python3
"""Compressed shards with random access: the size cost of groups against one
stream, the time to write and index them, ``ds[i]`` on each kind, and the
two checkpoint libraries (indexed_gzip, rapidgzip) on a one-stream gzip.

    .venv/bin/python bench/bench_seekable.py [--mb 64]

Data (deterministic, under bench/out/data/seek):

* a JPEG-like shard: samples of a ``.jpg`` (a fixed 620-byte JFIF-like head
  of markers and tables, then 20-150 KiB of random bytes, as entropy-coded
  image data is), a ``.cls`` and a small ``.json``;
* a text-like shard of small compressible samples (bench_shard's), where
  restarting the deflate dictionary every group costs the most.

Everything runs in this one process, in turns, on a warm cache."""

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import common  # noqa: E402
import tarproc  # noqa: E402

BIN = os.path.dirname(sys.executable)
os.environ["PATH"] = BIN + os.pathsep + os.environ.get("PATH", "")


def jpeg_like(mb, seed=0):
    r = random.Random(seed)
    head = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffdb004300") + bytes(range(64)) * 9
    total, i = 0, 0
    while total < mb << 20:
        body = r.randbytes(r.randrange(20 << 10, 150 << 10))
        s = {"__key__": f"n{i:08d}", "jpg": head + body + b"\xff\xd9", "cls": b"%d" % r.randrange(1000),
             "json": json.dumps({"id": i, "w": 640, "h": 480, "label": r.randrange(1000)}).encode()}
        total += len(s["jpg"]) + 1536
        i += 1
        yield s


def text_like(mb, seed=0):
    from bench_shard import small_samples

    total = 0
    for s in small_samples(10 ** 9, seed):
        total += 2048
        if total > mb << 20:
            return
        yield s


def timed(fn, repeat=3):
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64)
    args = ap.parse_args()
    d = os.path.join(common.DATA, "seek")
    os.makedirs(d, exist_ok=True)
    rows, results = [], {}
    for name, gen in (("jpeg-like", jpeg_like), ("text-like", text_like)):
        tar = os.path.join(d, f"{name}-{args.mb}.tar")
        if not os.path.exists(tar):
            tarproc.write_samples(tar, gen(args.mb))
        size = os.path.getsize(tar)
        out = {}
        for ext in ("tar.gz", "tar.zst"):
            for gs in ("0", "1MiB"):
                path = os.path.join(d, f"{name}-{gs}.{ext}")
                common.warm(tar)
                dt = common.run_once(f"tarcat --group-size {gs} {tar} -o {path}")[0]
                out[(ext, gs)] = (os.path.getsize(path), dt, path)
            one, grouped = out[(ext, "0")][0], out[(ext, "1MiB")][0]
            cost = 100.0 * (grouped - one) / one
            rows.append([name, f"{size / 1e6:.1f} MB", ext, f"{one:,}", f"{grouped:,}", f"{cost:+.2f}%",
                         f"{out[(ext, '0')][1]:.2f} s", f"{out[(ext, '1MiB')][1]:.2f} s"])
            results[f"{name} {ext}"] = {"one": one, "grouped": grouped, "cost_percent": cost}
        results[name] = out
    print(common.table(rows, ["shard", "tar", "codec", "one stream", "1 MiB groups", "size cost",
                              "write (one)", "write (groups)"]))

    # index and access, on the JPEG-like shard
    rows = []
    name = "jpeg-like"
    for label, path in (("gzip, 1 MiB groups", results[name][("tar.gz", "1MiB")][2]),
                        ("zstd, 1 MiB frames", results[name][("tar.zst", "1MiB")][2]),
                        ("gzip, one stream (checkpoints)", results[name][("tar.gz", "0")][2])):
        idx = path + ".index.json"
        common.warm(path)
        t_index = common.run_once(f"tarindex {path} -o {idx}")[0]
        seek = json.load(open(idx))["shardlist"][0]["seek"]
        ds = tarproc.IndexedDataset(idx)
        r = random.Random(1)
        picks = [r.randrange(len(ds)) for _ in range(100)]
        lat = []
        for i in picks:
            t = time.perf_counter()
            ds[i]
            lat.append(time.perf_counter() - t)
        full = timed(lambda: sum(1 for _ in tarproc.iter_samples(path)), 1)
        rows.append([label, f"{t_index:.2f} s", f"{seek['kind']}, {seek['bytes']:,} B",
                     f"{statistics.median(lat) * 1e3:.1f} ms", f"{sorted(lat)[89] * 1e3:.1f} ms",
                     f"{full:.2f} s"])
    print()
    print(common.table(rows, ["shard", "tarindex", "seek record", "ds[i] median", "p90",
                              "iter_samples, whole shard"]))

    # the checkpoint libraries on the one-stream gzip
    import indexed_gzip
    import rapidgzip

    path = results[name][("tar.gz", "0")][2]
    usize = os.path.getsize(os.path.join(d, f"{name}-{args.mb}.tar"))
    rows = []

    def build_ig():
        f = indexed_gzip.IndexedGzipFile(fileobj=open(path, "rb"), spacing=4 << 20)
        while f.read(1 << 20):
            pass
        b = io.BytesIO()
        f.export_index(fileobj=b)
        f.close()
        return b.getvalue()

    def build_rg(p):
        def run():
            with rapidgzip.RapidgzipFile(path, parallelization=p) as f:
                while f.read(1 << 20):
                    pass
                b = io.BytesIO()
                f.export_index(b)
            return b.getvalue()
        return run

    r = random.Random(2)
    offs = [r.randrange(usize - 100_000) for _ in range(20)]
    for label, build in (("indexed_gzip 1.10", build_ig), ("rapidgzip 0.16, 1 thread", build_rg(1)),
                         ("rapidgzip 0.16, 2 threads", build_rg(2))):
        common.warm(path)
        t = time.perf_counter()
        blob = build()
        t_build = time.perf_counter() - t
        if label.startswith("indexed"):
            def one(o):
                f = indexed_gzip.IndexedGzipFile(fileobj=open(path, "rb"))
                f.import_index(fileobj=io.BytesIO(blob))
                f.seek(o)
                f.read(100_000)
                f.close()
        else:
            def one(o):
                with rapidgzip.RapidgzipFile(path, parallelization=1) as f:
                    f.import_index(io.BytesIO(blob))
                    f.seek(o)
                    f.read(100_000)
        lat = []
        for o in offs:
            t = time.perf_counter()
            one(o)
            lat.append(time.perf_counter() - t)
        rows.append([label, f"{t_build:.2f} s", f"{len(blob):,} B", f"{statistics.median(lat) * 1e3:.1f} ms"])
    print()
    print(common.table(rows, ["library", "build (read whole)", "index size", "one access (open+import+seek+read)"]))
    print(f"\nload: {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
