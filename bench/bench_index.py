"""Random access with an index: ``ds[i]`` latency locally (pread) and over
HTTP (curl range requests to a local range-capable server), next to a full
sequential read of the same shard (``cat`` and ``tarproc.iter_samples``) in
the same run.  Run once: ``.venv/bin/python bench/bench_index.py``.

Data: one shard of N samples (default 20,000) of an 8 KiB .bin and a .cls."""

import http.server
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import tarproc  # noqa: E402
from tarproc.core.tario import TarWriter  # noqa: E402

N = int(os.environ.get("TARPROC_BENCH_INDEX_N", "20000"))


class Range(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        path = self.translate_path(self.path)
        size = os.path.getsize(path)
        a, b = (int(x) for x in self.headers["Range"].split("=", 1)[1].split("-"))
        with open(path, "rb") as f:
            f.seek(a)
            body = f.read(b - a + 1)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def lat(ds, picks):
    out = []
    for i in picks:
        t = time.perf_counter()
        ds[i]
        out.append(time.perf_counter() - t)
    return out


def fmt(xs):
    xs = sorted(xs)
    return f"median {statistics.median(xs) * 1e6:9.0f} µs   p90 {xs[int(0.9 * len(xs))] * 1e6:9.0f} µs"


def main():
    d = tempfile.mkdtemp(prefix="bench-index-")
    shard = os.path.join(d, "big.tar")
    r = random.Random(0)
    with open(shard, "wb") as f:
        w = TarWriter(f)
        for i in range(N):
            w.write(f"{i:07d}.bin", r.randbytes(8192))
            w.write(f"{i:07d}.cls", b"%d" % (i % 10))
        w.close()
    size = os.path.getsize(shard)
    t = time.perf_counter()
    tarproc.index_shards(shard, os.path.join(d, "index.json"))
    t_index = time.perf_counter() - t
    side = os.path.getsize(os.path.join(d, "index.offsets"))
    # the same run: sequential reads (warm cache)
    subprocess.run(["cat", shard], stdout=subprocess.DEVNULL)
    t = time.perf_counter()
    subprocess.run(["cat", shard], stdout=subprocess.DEVNULL)
    t_cat = time.perf_counter() - t
    t = time.perf_counter()
    n = sum(1 for _ in tarproc.iter_samples(shard))
    t_seq = time.perf_counter() - t
    assert n == N
    picks = random.Random(1).sample(range(N), 200)
    ds = tarproc.IndexedDataset(os.path.join(d, "index.json"))
    ds[0]
    local = lat(ds, picks)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Range(*a, directory=d))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/big.tar"
    idx = {"__kind__": "wids-shard-index-v1", "wids_version": 1,
           "shardlist": [dict(tarproc.IndexedDataset(os.path.join(d, "index.json")).index.shards[0], url=url)],
           "tarproc_offsets": __import__("json").load(open(os.path.join(d, "index.json")))["tarproc_offsets"]}
    hds = tarproc.IndexedDataset(idx, base=d)
    remote = lat(hds, picks[:50])
    srv.shutdown()
    print(f"shard: {N} samples, {size / 1e6:.1f} MB; index built in {t_index:.2f} s; sidecar {side} bytes "
          f"({side / N:.1f} per sample)")
    print(f"sequential: cat {t_cat * 1e3:.0f} ms; iter_samples {t_seq * 1e3:.0f} ms "
          f"({t_seq / N * 1e6:.1f} µs/sample)")
    print(f"ds[i] local (pread), 200 random: {fmt(local)}  = {statistics.median(local) / (t_seq / N):.1f}x "
          f"one sample's share of a sequential read")
    print(f"ds[i] HTTP (curl -r, local server), 50 random: {fmt(remote)}")
    print(f"40 random samples locally: {sum(local[:40]) * 1e3:.1f} ms = {sum(local[:40]) / t_seq * 100:.1f}% "
          f"of the full sequential read")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


if __name__ == "__main__":
    main()
