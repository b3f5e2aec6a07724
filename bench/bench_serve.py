"""tarserve throughput on loopback: 1, 4 and 16 clients fetching shards with
curl, against `cat` of the same files and the offline `tarcat` in the same
run; every body is checked against the offline output.

    .venv/bin/python bench/bench_serve.py [--shards 8] [--mb 16] [--gets 16]
"""

import argparse
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from helpers import tar_bytes  # noqa: E402

OUT = os.path.join(HERE, "out", "serve")
BIN = os.path.dirname(sys.executable)


def make(n, mb):
    os.makedirs(OUT, exist_ok=True)
    per = 4000
    count = int(mb * 1e6 / (per + 1024 + 1024))
    for k in range(n):
        path = os.path.join(OUT, f"b-{k:02d}.tar")
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(tar_bytes([(f"{k:02d}{i:07d}.{ext}", (b"%d " % i) * (per // 8) if ext == "txt" else b"%d" % i)
                                   for i in range(count) for ext in ("cls", "txt")]))
    return [os.path.join(OUT, f"b-{k:02d}.tar") for k in range(n)]


def timed(cmds, clients):
    """Run shell commands with `clients` at a time; returns (seconds, [stdout sha1])."""
    digests = [None] * len(cmds)

    def work(idx):
        for i in idx:
            out = subprocess.run(["bash", "-o", "pipefail", "-c", cmds[i]], capture_output=True, check=True).stdout
            digests[i] = (hashlib.sha1(out).hexdigest(), len(out))

    t = time.perf_counter()
    threads = [threading.Thread(target=work, args=(range(c, len(cmds), clients),)) for c in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t, digests


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--mb", type=float, default=16)
    ap.add_argument("--gets", type=int, default=16)
    args = ap.parse_args()
    paths = make(args.shards, args.mb)
    log = open(os.path.join(OUT, "tarserve.log"), "wb")
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])
    server = subprocess.Popen([os.path.join(BIN, "tarserve"), OUT, "--port", "0", "-q", "--max-clients", "32",
                               "-f", "txt cls"], stderr=log, env=env)
    try:
        while not re.search(rb"127\.0\.0\.1:(\d+)/", open(log.name, "rb").read()):
            time.sleep(0.05)
        port = int(re.search(rb"127\.0\.0\.1:(\d+)/", open(log.name, "rb").read()).group(1))
        names = [os.path.basename(paths[i % len(paths)]) for i in range(args.gets)]
        rows = []
        for clients in (1, 4, 16):
            for what, make_cmd in (
                ("cat", lambda n: f"cat {OUT}/{n}"),
                ("tarcat (offline)", lambda n: f"{BIN}/tarcat -f 'txt cls' {OUT}/{n}"),
                ("curl tarserve", lambda n: f"curl -sSf http://127.0.0.1:{port}/{n}"),
            ):
                cmds = [make_cmd(n) for n in names]
                for p in paths:  # warm the page cache, untimed
                    open(p, "rb").read()
                dt, digests = timed(cmds, clients)
                mb = sum(d[1] for d in digests) / 1e6
                rows.append((clients, what, args.gets / dt, mb / dt, digests))
        offline = {c: r[4] for c, w, *_, r in [(r[0], r[1], r) for r in rows] if w == "tarcat (offline)"}
        for clients, what, sps, mbs, digests in rows:
            if what == "curl tarserve":
                assert digests == offline[clients], "a response differs from the offline output"
        print(f"{args.gets} GETs per level of {args.shards} shards of {args.mb:g} MB, loopback; bodies == offline tarcat")
        print(f"{'clients':>7}  {'command':<18} {'shards/s':>9} {'MB/s':>8}")
        for clients, what, sps, mbs, _ in rows:
            print(f"{clients:>7}  {what:<18} {sps:9.1f} {mbs:8.1f}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


if __name__ == "__main__":
    main()
