"""An index of a billion samples: 10,000 shards x 100,000 samples with
16-byte keys (the index files only; no shard exists).  Measures, in fresh
processes: opening it (``IndexedDataset`` + ``len``), resolving random
``ds[i]`` to shard and byte range (what ``ds[i]`` does before it reads),
``ds.index_of(key)``, the resident memory (RSS) of one process, and the
proportional share (PSS, ``/proc/self/smaps_rollup``) of 8 processes that
resolve at once (as 8 DataLoader workers).  Then the choice for
``index_of``: the key table (hash + position, sorted by hash) against a
sorted table of the keys, at 10 million keys; and the writer (per-shard
sidecars and the key table of 100 x 100,000 samples, 2 threads) with its
peak RSS.

    .venv/bin/python bench/bench_index_scale.py [--shards 10000] [--dir DIR]

Disk: a real billion would be 28 GB of sidecars and 16 GB of key table.
Here 100 distinct per-shard sidecars (2.8 MB each) are made and every other
shard's sidecar is a hard link to one of them (shard s has the keys of shard
s % 100: the same bytes a reader maps, the same sizes), and the key table is
a sparse file of its full size (16 GB) whose bucket directory (32 MB) is
real and whose records are real in the buckets the timed keys fall in (the
rest are holes that no lookup reads).  About 320 MB of disk."""

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from tarproc.core.indexfile import (KEYS_HEAD, KEYS_MAGIC, RECORD, bucket_bits, key_hash, keys_table_size,  # noqa: E402
                                    pack_shard, shard_sidecar)

PER = 100_000
DISTINCT = 100
QUERIES = 1000


def key(s, j):
    return f"{s % DISTINCT:06d}-{j:09d}"  # 16 bytes


def make_index(d, shards):
    side = os.path.join(d, "index.offsets.d")
    os.makedirs(side)
    size = None
    starts = (np.arange(PER, dtype="<u8") * 1536).tobytes()
    for s in range(min(shards, DISTINCT)):
        blob = pack_shard(starts, [key(s, j) for j in range(PER)])
        size = len(blob)
        with open(shard_sidecar(side, s), "wb") as f:
            f.write(blob)
    for s in range(DISTINCT, shards):
        os.link(shard_sidecar(side, s % DISTINCT), shard_sidecar(side, s))
    total = shards * PER
    rng = random.Random(7)
    queries = sorted(rng.randrange(total) for _ in range(QUERIES))
    bits = bucket_bits(total)
    tsize = keys_table_size(total, bits)
    # the directory: buckets of total / 2**bits records each (as uniform hashes make them)
    directory = (np.arange((1 << bits) + 1, dtype=np.float64) * (total / (1 << bits))).astype("<u8")
    directory[-1] = total
    recs = {}
    for pos in queries:
        h = key_hash(key(pos // PER, pos % PER))
        recs.setdefault(h >> (64 - bits), []).append((h, pos))
    with open(os.path.join(d, "index.keys"), "wb") as f:
        f.truncate(tsize)
        f.write(KEYS_HEAD.pack(KEYS_MAGIC, total, bits))
        for b, rs in recs.items():
            lo, hi = int(directory[b]), int(directory[b + 1])
            out = np.zeros(hi - lo, RECORD)
            rs.sort()
            out["h"][: len(rs)] = [h for h, _ in rs]
            out["p"][: len(rs)] = [p for _, p in rs]
            out["h"][len(rs):] = ((b + 1) << (64 - bits)) - 1 if bits else (1 << 64) - 1  # the bucket's top: sorted
            f.seek(KEYS_HEAD.size + 16 * lo)
            f.write(out.tobytes())
        f.seek(KEYS_HEAD.size + 16 * total)
        f.write(directory.tobytes())
    entries = [{"url": f"shard-{s:06d}.tar", "nsamples": PER, "filesize": PER * 1536 + 1024, "compression": None,
                "offsets": True, "end": PER * 1536, "offsets_bytes": size} for s in range(shards)]
    index = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": entries,
             "tarproc_offsets": {"format": 2, "dir": "index.offsets.d", "samples": total, "keys": "index.keys",
                                 "keys_bytes": tsize}}
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    return queries


PROBE = r"""
import json, os, random, sys, time
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
import tarproc
t1 = time.perf_counter()
ds = tarproc.IndexedDataset(sys.argv[2], settings=tarproc.Settings())
n = len(ds)
t2 = time.perf_counter()
rng = random.Random(int(sys.argv[3]))
picks = [rng.randrange(n) for _ in range(int(sys.argv[4]))]
t3 = time.perf_counter()
for i in picks:
    sp = ds._span(i)  # what ds[i] does before it reads: shard, byte range, key
t4 = time.perf_counter()
queries = json.loads(sys.argv[5])
keys = [ds.key(p) for p in queries]
tf = time.perf_counter()
first = ds.index_of(keys[0])  # the first loads the key table's head (and imports)
t5 = time.perf_counter()
found = [first] + [ds.index_of(k) for k in keys[1:]]
t6 = time.perf_counter()
assert found == queries, "index_of"
def status(name):
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith(name)).split()[1]) << 10
def pss():
    with open("/proc/self/smaps_rollup") as f:
        return int(next(l for l in f if l.startswith("Pss:")).split()[1]) << 10
if len(sys.argv) > 6:  # wait for the others, so the pages are shared while measured
    open(sys.argv[6] + f".{sys.argv[3]}", "w").close()
    while len([x for x in os.listdir(os.path.dirname(sys.argv[6])) if x.startswith(os.path.basename(sys.argv[6]))]) < int(sys.argv[7]):
        time.sleep(0.01)
print(json.dumps({"samples": n, "import": t1 - t0, "open_len": t2 - t1, "resolve_us": (t4 - t3) / len(picks) * 1e6,
                  "index_of_us": (t6 - t5) / max(1, len(keys) - 1) * 1e6, "first_index_of": t5 - tf, "rss": status("VmRSS:"), "hwm": status("VmHWM:"),
                  "pss": pss()}))
"""


def probe(d, seed, picks, queries, barrier=None, count=1):
    args = [sys.executable, "-c", PROBE, os.path.dirname(HERE), os.path.join(d, "index.json"), str(seed), str(picks),
            json.dumps(queries)]
    if barrier:
        args += [barrier, str(count)]
    return subprocess.Popen(args, stdout=subprocess.PIPE)


def mb(n):
    return f"{n / 1e6:.1f} MB"


def choice(n=10_000_000):
    """index_of: the key table (hash, position; sorted by hash; a bucket
    directory) against a sorted table of the keys (fixed 16 bytes, binary
    search), both mapped from disk, at ``n`` keys."""
    from tarproc.core.indexfile import key_hashes

    d = tempfile.mkdtemp(prefix="bench-keys-")
    try:
        keys = [key(s, j) for s in range(n // PER) for j in range(PER)]
        t = time.perf_counter()
        hashes = key_hashes(keys)
        t_hash = time.perf_counter() - t
        order = np.argsort(hashes, kind="stable")
        rec = np.empty(n, RECORD)
        rec["h"], rec["p"] = hashes[order], order
        bits = bucket_bits(n)
        counts = np.bincount((rec["h"] >> np.uint64(64 - bits)).astype(np.int64), minlength=1 << bits)
        directory = np.zeros((1 << bits) + 1, "<u8")
        np.cumsum(counts, out=directory[1:])
        rec.tofile(os.path.join(d, "h"))
        directory.tofile(os.path.join(d, "dir"))
        build_hash = time.perf_counter() - t
        t = time.perf_counter()
        # keys of any length: sorted, their bytes one after another, where each ends, each one's position
        order = sorted(range(n), key=keys.__getitem__)
        blob = b"".join(keys[i].encode() for i in order)
        ends = np.cumsum([len(keys[i]) for i in order], dtype="<u8")
        with open(os.path.join(d, "k"), "wb") as f:
            f.write(blob)
        ends.tofile(os.path.join(d, "e"))
        np.asarray(order, "<u8").tofile(os.path.join(d, "p"))
        build_sorted = time.perf_counter() - t
        del order, blob, ends, rec, hashes
        H = np.memmap(os.path.join(d, "h"), RECORD, "r")
        D = np.memmap(os.path.join(d, "dir"), "<u8", "r")
        K = np.memmap(os.path.join(d, "k"), "u1", "r")
        E = np.memmap(os.path.join(d, "e"), "<u8", "r")
        P = np.memmap(os.path.join(d, "p"), "<u8", "r")
        rng = random.Random(3)
        qs = [rng.randrange(n) for _ in range(20000)]
        qk = [keys[i] for i in qs]
        t = time.perf_counter()
        for k in qk:
            h = key_hash(k)
            b = h >> (64 - bits)
            lo, hi = int(D[b]), int(D[b + 1])
            r = H[lo:hi]
            i = int(np.searchsorted(r["h"], np.uint64(h)))
            int(r["p"][i])
        hash_us = (time.perf_counter() - t) / len(qk) * 1e6
        t = time.perf_counter()
        probes = 0
        for k in qk:
            want = k.encode()
            lo, hi = 0, n
            while lo < hi:  # the first key >= want
                mid = (lo + hi) // 2
                a = int(E[mid - 1]) if mid else 0
                probes += 1
                if K[a:int(E[mid])].tobytes() < want:
                    lo = mid + 1
                else:
                    hi = mid
            int(P[lo])
        sorted_us = (time.perf_counter() - t) / len(qk) * 1e6
        return {"n": n, "hash_build": build_hash, "hashing": t_hash, "sorted_build": build_sorted, "hash_us": hash_us,
                "sorted_us": sorted_us, "hash_bytes": 16 * n + 8 * len(directory), "sorted_bytes": 32 * n,
                "probes": probes / len(qk)}
    finally:
        shutil.rmtree(d, ignore_errors=True)


WRITER = r"""
import sys, time
from array import array
sys.path.insert(0, sys.argv[1])
from concurrent.futures import ThreadPoolExecutor
from tarproc.sinks.index import _Writer, _publish
from tarproc.sinks.scan import ShardIndex
d, shards, per = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def info(s):
    i = ShardIndex(f"{d}/shard-{s:06d}.tar")
    i.nsamples = per
    i.starts = array("Q", range(0, per * 1536, 1536))
    i.keys = [f"{s:06d}-{j:09d}" for j in range(per)]
    i.end = i.filesize = per * 1536
    return i
t = time.perf_counter()
w = _Writer(d, f"{d}/index.offsets", "index.offsets")
with ThreadPoolExecutor(2) as pool:  # as tarindex -p 2: each thread writes its shard's sidecar
    infos = list(pool.map(lambda s: w.shard(s, info(s)), range(shards)))
_publish(w, infos, f"{d}/index.json", None, None)
w.close()
with open("/proc/self/status") as f:  # (ru_maxrss would count the parent's memory at the fork)
    hwm = int(next(l for l in f if l.startswith("VmHWM:")).split()[1]) << 10
print(time.perf_counter() - t, hwm)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=10_000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--picks", type=int, default=20_000)
    ap.add_argument("--quick", action="store_true", help="200 shards, 1M keys for the choice, 10 shards written")
    a = ap.parse_args()
    if a.quick:
        a.shards, a.picks = 200, 2000
    print("## bench_index_scale: an index of a billion samples\n")
    d = tempfile.mkdtemp(prefix="bench-index-scale-", dir=a.dir)
    try:
        t = time.perf_counter()
        queries = make_index(d, a.shards)
        made = time.perf_counter() - t
        du = subprocess.run(["du", "-sh", d], capture_output=True, text=True).stdout.split()[0]
        load = os.getloadavg()[0]
        print(f"- index of {a.shards} shards x {PER} samples ({a.shards * PER:,}), made in {made:.1f} s, {du} on disk; "
              f"JSON {mb(os.path.getsize(os.path.join(d, 'index.json')))}; load {load:.1f} on {os.cpu_count()} cores")
        one = json.loads(probe(d, 1, a.picks, queries[:200]).communicate()[0])
        print(f"- one process: import {one['import'] * 1e3:.0f} ms, open + len {one['open_len'] * 1e3:.0f} ms, "
              f"ds[i] resolve {one['resolve_us']:.1f} us (random, {a.picks}), index_of {one['index_of_us']:.1f} us "
              f"(200 keys; the first {one['first_index_of'] * 1e3:.1f} ms), RSS {mb(one['rss'])} (peak {mb(one['hwm'])}), PSS {mb(one['pss'])}")
        barrier = os.path.join(d, "ready")
        procs = [probe(d, 10 + k, a.picks, queries[k * 100:(k + 1) * 100], barrier, 8) for k in range(8)]
        outs = [json.loads(p.communicate()[0]) for p in procs]
        rss = [o["rss"] for o in outs]
        pss = [o["pss"] for o in outs]
        print(f"- 8 processes at once: RSS each {mb(min(rss))}-{mb(max(rss))} (sum {mb(sum(rss))}), PSS each "
              f"{mb(min(pss))}-{mb(max(pss))} (sum {mb(sum(pss))}); resolve {statistics.median(o['resolve_us'] for o in outs):.1f} "
              f"us, index_of {statistics.median(o['index_of_us'] for o in outs):.1f} us (medians of the 8)")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    c = choice(1_000_000 if a.quick else 10_000_000)
    print(f"- index_of choice at {c['n']:,} keys: key table (hash+position) build {c['hash_build']:.1f} s (hashing "
          f"{c['hashing']:.1f} s), {mb(c['hash_bytes'])}, lookup {c['hash_us']:.1f} us, 2 reads; sorted keys (bytes, "
          f"ends, positions) build {c['sorted_build']:.1f} s, {mb(c['sorted_bytes'])}, lookup {c['sorted_us']:.1f} us, "
          f"{c['probes']:.0f} probes")
    d = tempfile.mkdtemp(prefix="bench-index-writer-", dir=a.dir)
    try:
        shards = 10 if a.quick else 100
        p = subprocess.run([sys.executable, "-c", WRITER, os.path.dirname(HERE), d, str(shards), str(PER)],
                           capture_output=True, text=True, check=True)
        secs, peak = p.stdout.split()
        print(f"- writer: {shards} shards x {PER} samples ({shards * PER:,}), 2 threads: {float(secs):.1f} s, peak "
              f"RSS {mb(int(peak))} (the keys alone: {mb(shards * PER * 16)})")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
