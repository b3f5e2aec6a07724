"""Random access with an index: ``ds[i]`` latency locally (pread) and over
HTTP (curl range requests to a local range-capable server), next to a full
sequential read of the same shard (``cat`` and ``tarproc.iter_samples``) in
the same run.  Run once: ``.venv/bin/python bench/bench_index.py``.

Data: one shard of N samples (default 20,000) of an 8 KiB .bin and a .cls.

``bench/bench_index.py many``: 256 random samples with ``ds.get_many``
against 256 ``ds[i]`` calls, over HTTP from a local server (127.0.0.1) and
locally.  ``bench/bench_index.py tarindex``: ``tarindex`` on a shard of
1 MiB members and one of small members against ``tar -tf``, ``tarcat FILE >
/dev/null``, its own start-up, and ``--checksum`` against ``sha256sum``,
with the bytes each read (rchar), all in one run, in turns.  No argument:
all three parts."""

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
sys.path.insert(0, HERE)

import tarproc  # noqa: E402
from tarproc.core.tario import TarWriter  # noqa: E402
from common import RangeHandler  # noqa: E402

N = int(os.environ.get("TARPROC_BENCH_INDEX_N", "20000"))


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
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: RangeHandler(*a, directory=d))
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


SERVER = """
import sys, http.server
sys.path.insert(0, sys.argv[2])
from common import RangeHandler
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: RangeHandler(*a, directory=sys.argv[1]))
srv.daemon_threads = True
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


def serve(d):
    """The range server in a process of its own (as a real one is: not sharing the client's GIL)."""
    proc = subprocess.Popen([sys.executable, "-c", SERVER, d, HERE], stdout=subprocess.PIPE)
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}"


def write_shard(path, n, size, seed=0):
    r = random.Random(seed)
    with open(path, "wb") as f:
        w = TarWriter(f)
        for i in range(n):
            w.write(f"{i:07d}.bin", r.randbytes(size))
            w.write(f"{i:07d}.cls", b"%d" % (i % 10))
        w.close()


def many():
    """get_many against ds[i]: 256 random samples of a 20,000-sample shard."""
    import json

    d = tempfile.mkdtemp(prefix="bench-many-")
    shard = os.path.join(d, "big.tar")
    write_shard(shard, N, 8192)
    tarproc.index_shards(shard, os.path.join(d, "index.json"))
    srv, base = serve(d)
    index = json.load(open(os.path.join(d, "index.json")))
    index["shardlist"][0]["url"] = f"{base}/big.tar"
    rows = []
    try:
        for where, ds in (("HTTP (127.0.0.1)", tarproc.IndexedDataset(index, base=d)),
                          ("local file", tarproc.IndexedDataset(os.path.join(d, "index.json")))):
            ds[0]
            one, batch = [], []
            for rnd in range(3):  # in turns
                picks = random.Random(rnd).sample(range(N), 256)
                t = time.perf_counter()
                a = [ds[i] for i in picks]
                one.append(time.perf_counter() - t)
                t = time.perf_counter()
                b = ds.get_many(picks)
                batch.append(time.perf_counter() - t)
                assert a == b
            t1, t2 = statistics.median(one), statistics.median(batch)
            rows.append((where, 256 / t1, 256 / t2, t1 / t2))
    finally:
        srv.kill()
        srv.wait()
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)
    print(f"256 random samples of {N} (8 KiB each), median of 3 rounds, load {os.getloadavg()[0]:.1f}")
    print("| where | ds[i] x256 samples/s | get_many(256) samples/s | speed-up |")
    print("|---|---|---|---|")
    for where, a, b, x in rows:
        print(f"| {where} | {a:,.0f} | {b:,.0f} | {x:.1f}x |")


def wall_cpu(cmd):
    """Wall and CPU (user + sys) seconds of a shell command."""
    t = time.perf_counter()
    p = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, cmd
    return time.perf_counter() - t, ru.ru_utime + ru.ru_stime


def rchar_of(cmd):
    p = subprocess.run(["bash", "-c", f"{cmd} > /dev/null && grep '^rchar' /proc/$$/io"], capture_output=True,
                       check=True)
    return int(p.stdout.split()[-1])


def index_speed():
    """tarindex against tar -tf, tarcat > /dev/null and sha256sum, in turns."""
    import common

    os.makedirs(common.OUT, exist_ok=True)
    d = tempfile.mkdtemp(prefix="bench-tarindex-")
    big, small, one = (os.path.join(d, n) for n in ("big.tar", "small.tar", "one.tar"))
    r = random.Random(0)
    with open(big, "wb") as f:
        w = TarWriter(f)
        for i in range(int(os.environ.get("TARPROC_BENCH_INDEX_BIG", "300"))):
            w.write(f"{i:07d}.bin", r.randbytes(1 << 20))
        w.close()
    with open(small, "wb") as f:
        w = TarWriter(f)
        for i in range(int(os.environ.get("TARPROC_BENCH_INDEX_SMALL", "50000"))):
            w.write(f"{i:07d}.txt", r.randbytes(r.randrange(100, 2000)))
            w.write(f"{i:07d}.cls", b"%d" % (i % 10))
        w.close()
    write_shard(one, 1, 100)
    bindir = os.path.dirname(sys.executable)
    ti = os.path.join(bindir, "tarindex")
    tc = os.path.join(bindir, "tarcat")
    out = os.path.join(d, "i.json")
    rows = []
    try:
        for label, path in (("1 MiB members", big), ("small members", small)):
            cmds = {
                "tarindex (start-up: a 1-sample shard)": f"{ti} {one} -o {out}",
                "tar -tf FILE": f"tar -tf {path} > /dev/null",
                "tarindex FILE -o i.json": f"{ti} {path} -o {out}",
                "tarcat FILE > /dev/null": f"{tc} {path} > /dev/null",
                "sha256sum FILE": f"sha256sum {path} > /dev/null",
                "tarindex --checksum FILE -o i.json": f"{ti} --checksum {path} -o {out}",
            }
            res = common.compare(cmds, repeat=5, warm_paths=[path])
            size = os.path.getsize(path)
            if path == big:  # the time target (start-up + 2x tar -tf): its three commands alone, 11 turns
                quick = [cmds[k] for k in list(cmds)[:3]]
                walls, cpus = [[], [], []], [[], [], []]
                for _ in range(11):
                    for n, cmd in enumerate(quick):
                        common.warm(path)
                        w, c = wall_cpu(cmd)
                        walls[n].append(w)
                        cpus[n].append(c)
                target = [statistics.median(x) for x in walls] + [statistics.median(x) for x in cpus]
            for name, cmd in cmds.items():
                common.warm(path)
                rows.append((label, name, res[name]["median"], rchar_of(cmd), size))
    finally:
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)
    start, tar_t, index_t, start_c, tar_c, index_c = target
    print(f"1 MiB members, medians of 11 turns of these three alone: start-up {start:.3f} s, tar -tf {tar_t:.3f} s, "
          f"tarindex {index_t:.3f} s: {index_t - start:.3f} s beyond start-up against 2x tar -tf {2 * tar_t:.3f} s "
          f"({'met' if index_t <= start + 2 * tar_t else 'NOT met'}); CPU time (user+sys, steadier under load): "
          f"start-up {start_c:.3f} s, tar -tf {tar_c:.3f} s, tarindex {index_c:.3f} s: {index_c - start_c:.3f} s "
          f"beyond start-up against 2x tar -tf {2 * tar_c:.3f} s")
    print(f"tarindex, medians of 5 in turns, warm cache, load {os.getloadavg()[0]:.1f}")
    print("| shard | command | median s | bytes read (rchar) | % of the shard | tarindex: beyond its start-up |")
    print("|---|---|---|---|---|---|")
    start = {}
    for label, name, t, rc, size in rows:
        if name.startswith("tarindex (start-up"):
            start[label] = (t, rc)
        beyond = ""
        if name.startswith("tarindex ") and label in start and not name.startswith("tarindex (start-up"):
            beyond = f"+{t - start[label][0]:.3f} s, {rc - start[label][1]:,} B = {100 * (rc - start[label][1]) / size:.2f}%"
        print(f"| {label} ({size / 1e6:.0f} MB) | {name} | {t:.3f} | {rc:,} | {100 * rc / size:.2f}% | {beyond} |")


if __name__ == "__main__":
    parts = sys.argv[1:] or ["all"]
    if "all" in parts or "latency" in parts:
        main()
    if "all" in parts or "many" in parts:
        many()
    if "all" in parts or "tarindex" in parts:
        index_speed()
