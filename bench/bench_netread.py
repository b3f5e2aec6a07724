"""Random access over the network: ``IndexedDataset.get_many`` against the
simplest client a user would write, in the same run.  Run:
``.venv/bin/python bench/bench_netread.py [--quick]``.

Data (made here, under ``bench/out/netread/``): N samples (default 2,000;
``--quick`` 400) of a ~31 KB ``.jpg`` (random bytes), a ``.cls`` and a
``.json``, in 15 shards, as ``.tar``, as ``.tar.gz`` and ``.tar.zst`` written
by ``tarcat`` (groups of whole samples, ``--group-size`` 1 MiB, 256 KiB, 64 KiB),
each indexed by ``tarindex``.  The server: nginx from Debian (a config of
our own, on a free port, started and stopped here) when ``/usr/sbin/nginx``
exists, else a small threaded Range server, common.RangeHandler (``python -m
http.server`` ignores Range).

Tables (each row names its shards; the machine's load average is printed
before and after each table):

1. HTTP, random batches of 32: a single-threaded ``http.client`` loop (one
   kept-alive connection, one Range request per sample; bytes only, and
   bytes parsed with ``tarfile``), ``ds[i]`` one by one, ``get_many``.
   Target: ``get_many`` >= 3x the loop.
2. A DataLoader epoch (2 workers, batch 32, shuffled) over HTTP and from
   local files.  Target: HTTP within 2x of local.
3. Compressed shards: ``get_many`` of random batches against ``ds[i]`` one
   by one (the group cache off, as before it existed), and bytes fetched
   per sample byte (from tarindex's summary); samples 0-139 of a shard
   (neighbours) with ``get_many`` against ``iter_samples`` of the whole shard.
4. s3 (moto server, the real ``aws`` CLI) and gs (the tests' stand-in: a
   ``TARPROC_RANGE_GS`` command serving a local copy): ``get_many`` of a
   batch against ``ds[i]`` one by one.
"""

import argparse
import http.client
import http.server
import io
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import tarproc  # noqa: E402
from common import BIN, OUT, RangeHandler, table, use_venv  # noqa: E402
from tarproc.settings import Settings  # noqa: E402

D = os.path.join(OUT, "netread")
NSHARDS = 15
BATCH = 32


def load():
    return "%.1f" % os.getloadavg()[0]


# ------------------------------------------------------------ data


def make_data(n):
    """``n`` samples in 15 shards (.tar, and .tar.gz/.tar.zst at 3 group sizes), indexed."""
    stamp = os.path.join(D, f".made-{n}")
    if os.path.exists(stamp):
        return
    shutil.rmtree(D, ignore_errors=True)
    os.makedirs(os.path.join(D, "tar"))
    r = random.Random(7)
    per = -(-n // NSHARDS)
    names = []
    for s in range(NSHARDS):
        name = f"shard-{s:02d}.tar"
        with tarfile.open(os.path.join(D, "tar", name), "w", format=tarfile.USTAR_FORMAT) as t:
            for i in range(s * per, min(n, (s + 1) * per)):
                jpg = r.randbytes(r.randrange(26000, 36000))
                for ext, data in (("cls", str(i % 10).encode()), ("jpg", jpg),
                                  ("json", json.dumps({"i": i, "w": 320}).encode())):
                    ti = tarfile.TarInfo(f"{i:08d}.{ext}")
                    ti.size = len(data)
                    t.addfile(ti, io.BytesIO(data))
        names.append(name)
    tars = " ".join(f"tar/{x}" for x in names)
    sh(f"tarindex {tars} -o tar/index.json")
    for codec in ("gz", "zst"):
        for group in ("1MiB", "256KiB", "64KiB"):
            d = f"{codec}-{group}"
            os.makedirs(os.path.join(D, d))
            for x in names:
                sh(f"tarcat tar/{x} --group-size {group} -o {d}/{x}.{codec}")
            sh(f"tarindex {' '.join(f'{d}/{x}.{codec}' for x in names)} -o {d}/index.json")
    open(stamp, "w").close()


def sh(cmd, env=None):
    return subprocess.run(cmd, shell=True, check=True, cwd=D, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE).stdout


def http_index(sub, base):
    """The index of ``sub`` with its shards at ``base/sub/`` (written beside it)."""
    with open(os.path.join(D, sub, "index.json")) as f:
        index = json.load(f)
    for e in index["shardlist"]:
        e["url"] = f"{base}/{sub}/{os.path.basename(e['url'])}"
    path = os.path.join(D, sub, "http.json")
    with open(path, "w") as f:
        json.dump(index, f)
    return path


# ------------------------------------------------------------ servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RangeServer:
    """nginx (Debian's) on a free port serving ``D``, or a threaded Range server of ours."""

    def __init__(self):
        self.port = free_port()
        self.proc = self.srv = None
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
        if nginx:
            run = os.path.join(OUT, "nginx")
            os.makedirs(os.path.join(run, "tmp"), exist_ok=True)
            conf = os.path.join(run, "nginx.conf")
            with open(conf, "w") as f:
                f.write(f"""daemon off; worker_processes 1; pid {run}/nginx.pid; error_log {run}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 100000; client_body_temp_path {run}/tmp;
  proxy_temp_path {run}/tmp; fastcgi_temp_path {run}/tmp; uwsgi_temp_path {run}/tmp; scgi_temp_path {run}/tmp;
  server {{ listen 127.0.0.1:{self.port}; root {D}; }} }}
""")
            self.proc = subprocess.Popen([nginx, "-c", conf, "-p", run], stderr=subprocess.DEVNULL)
            self.name = subprocess.run([nginx, "-v"], stderr=subprocess.PIPE, text=True).stderr.strip() \
                .replace("nginx version: ", "")
        else:
            srv = http.server.ThreadingHTTPServer(("127.0.0.1", self.port),
                                                  lambda *a: RangeHandler(*a, directory=D))
            srv.daemon_threads = True
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            self.srv = srv
            self.name = "threaded Python Range server (bench/common.py)"
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                break
            except OSError:
                time.sleep(0.05)

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
        if self.srv is not None:
            self.srv.shutdown()


# ------------------------------------------------------------ 1. HTTP: loop vs get_many


def spans_of(index_path):
    """(url, start, stop) of every sample of an uncompressed index, by position."""
    ds = tarproc.IndexedDataset(index_path, settings=Settings())
    out = []
    for i in range(len(ds)):
        sp = ds._span(ds._position(i))
        out.append((sp.url, sp.start, sp.end))
    return out


def http_client_loop(spans, picks, parse):
    """The simplest client: one kept-alive http.client connection, one Range request per sample."""
    from urllib.parse import urlsplit

    u = urlsplit(spans[0][0])
    conn = http.client.HTTPConnection(u.hostname, u.port)
    out = []
    for i in picks:
        url, a, b = spans[i]
        conn.request("GET", urlsplit(url).path, headers={"Range": f"bytes={a}-{b - 1}"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 206 or len(data) != b - a:
            raise RuntimeError(f"{url}: {resp.status}")
        if parse:
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                out.append({m.name: t.extractfile(m).read() for m in t})
        else:
            out.append(data)
    conn.close()
    return out


def rate(fn, count, repeat=3):
    """Samples per second of ``fn()`` (which reads ``count`` samples): the best of ``repeat``."""
    best = None
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return count / best


def bench_http(server, n, quick):
    path = http_index("tar", server.url)
    spans = spans_of(path)
    r = random.Random(1)
    picks = [r.randrange(n) for _ in range(min(n, 2000))]
    batches = [picks[k:k + BATCH] for k in range(0, len(picks), BATCH)]
    ds = tarproc.IndexedDataset(path, settings=Settings())
    assert [s["jpg"] for s in ds.get_many(picks[:BATCH])] == \
        [d[f"{ds.key(i)}.jpg"] for i, d in zip(picks[:BATCH], http_client_loop(spans, picks[:BATCH], True))]
    rows = []
    before = load()
    loop = rate(lambda: http_client_loop(spans, picks, False), len(picks))
    loop_parse = rate(lambda: http_client_loop(spans, picks, True), len(picks))
    one = rate(lambda: [ds[i] for i in picks], len(picks))
    many = {}
    for c in (1, 4, 8, 16):
        many[c] = rate(lambda: [ds.get_many(b, workers=c) for b in batches], len(picks))
    after = load()
    where = f"`bench/out/netread/tar` ({n} samples, 15 shards) on {server.name}"
    rows.append(["http.client loop, bytes only (the reference)", f"{loop:.0f}", "1.00x"])
    rows.append(["http.client loop + tarfile parse", f"{loop_parse:.0f}", f"{loop_parse / loop:.2f}x"])
    rows.append(["`ds[i]` one by one", f"{one:.0f}", f"{one / loop:.2f}x"])
    for c, v in many.items():
        default = " (the default)" if c == Settings().range_concurrency else ""
        rows.append([f"`get_many`, batches of {BATCH}, {c} connections{default}", f"{v:.0f}", f"{v / loop:.2f}x"])
    out = [f"## bench_netread: HTTP random access, {len(picks)} random samples\n",
           f"Shards: {where}; load {before} before, {after} after; the best of 3.\n",
           table(rows, ["reader", "samples/s", "vs the loop"]),
           f"\nTarget: `get_many` >= 3x the loop: **{'met' if many[8] >= 3 * loop else 'not met'}** "
           f"({many[8] / loop:.2f}x at the default concurrency).\n"]
    return "\n".join(out), {"loop": loop, "loop_parse": loop_parse, "one": one, "many": many}


# ------------------------------------------------------------ 2. DataLoader epoch


def epoch(path):
    import torch.utils.data as tud

    ds = tarproc.IndexedDataset(path, settings=Settings())
    dl = tud.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=2, collate_fn=lambda b: len(b),
                        generator=__import__("torch").Generator().manual_seed(0))
    t = time.perf_counter()
    got = sum(dl)
    dt = time.perf_counter() - t
    assert got == len(ds), (got, len(ds))
    return dt


def bench_loader(server, n):
    http_path = http_index("tar", server.url)
    local = os.path.join(D, "tar", "index.json")
    before = load()
    times = {"local": [], "http": []}
    for _ in range(3):
        times["local"].append(epoch(local))
        times["http"].append(epoch(http_path))
    after = load()
    lo, hi = min(times["local"]), min(times["http"])
    rows = [["local files (pread)", f"{lo:.2f}", f"{n / lo:.0f}", "1.00x"],
            [f"HTTP ({server.name})", f"{hi:.2f}", f"{n / hi:.0f}", f"{hi / lo:.2f}x"]]
    return "\n".join([
        f"## bench_netread: a DataLoader epoch (2 workers, batch {BATCH}, shuffled)\n",
        f"Shards: `bench/out/netread/tar` ({n} samples, 15 shards); load {before} before, {after} after; "
        f"the best of 3 epochs each, in turns; the time includes starting the workers.\n",
        table(rows, ["shards", "epoch s", "samples/s", "vs local"]),
        f"\nTarget: HTTP within 2x of local: **{'met' if hi <= 2 * lo else 'not met'}** ({hi / lo:.2f}x).\n"]), \
        {"local": times["local"], "http": times["http"]}


# ------------------------------------------------------------ 3. compressed shards


def amplification(sub):
    """tarindex's summary line for the shards of ``sub`` (read amplification)."""
    err = subprocess.run(f"tarindex -v {sub}/*.tar.* -o {OUT}/netread-amp.json 2>&1 >/dev/null | tail -1",
                         shell=True, cwd=D, stdout=subprocess.PIPE, text=True).stdout
    found = re.search(r"compressed shards: ([\d.]+) bytes fetched", err)
    return found.group(1) if found else "?"


def bench_compressed(server, n):
    rows = []
    r = random.Random(2)
    picks = [r.randrange(n) for _ in range(min(n, 512))]
    batches = [picks[k:k + BATCH] for k in range(0, len(picks), BATCH)]
    before = load()
    sizes = {"tar": sum(os.path.getsize(os.path.join(D, "tar", f"shard-{s:02d}.tar")) for s in range(NSHARDS))}
    for codec in ("gz", "zst"):
        for group in ("1MiB", "256KiB", "64KiB"):
            sub = f"{codec}-{group}"
            size = sum(os.path.getsize(os.path.join(D, sub, f"shard-{s:02d}.tar.{codec}")) for s in range(NSHARDS))
            path = http_index(sub, server.url)
            nocache = tarproc.IndexedDataset(path, settings=Settings(group_cache=0))
            one = rate(lambda: [nocache[i] for i in picks], len(picks), 1)
            ds = tarproc.IndexedDataset(path, settings=Settings())
            many = rate(lambda: [ds.get_many(b) for b in batches], len(picks), 1)
            fresh = tarproc.IndexedDataset(path, settings=Settings(group_cache=0))
            first = list(range(min(140, n // NSHARDS)))
            t = time.perf_counter()
            fresh.get_many(first)
            neighbours = time.perf_counter() - t
            t = time.perf_counter()
            sum(1 for _ in tarproc.iter_samples(os.path.join(D, sub, f"shard-00.tar.{codec}")))
            whole = time.perf_counter() - t
            rows.append([f"`{sub}` (HTTP)", f"{size / sizes['tar']:.3f}", amplification(sub), f"{one:.0f}",
                         f"{many:.0f}", f"{many / one:.1f}x", f"{neighbours * 1000:.0f} / {whole * 1000:.0f}"])
    after = load()
    return "\n".join([
        f"## bench_netread: compressed shards, {len(picks)} random samples\n",
        f"Shards: `bench/out/netread/{{gz,zst}}-GROUP` ({n} samples, 15 shards, written by `tarcat --group-size "
        f"GROUP`) on {server.name}; load {before} before, {after} after. `ds[i]` with the group cache off "
        f"(each sample fetches and decodes its group); `get_many` in batches of {BATCH} with the default cache "
        f"(32 MiB). Neighbours: samples 0-{len(first) - 1} of shard 0 with `get_many`, cache off, against "
        f"`iter_samples` of that whole shard (local).\n",
        table(rows, ["shards", "size vs .tar", "tarindex: fetched per sample byte", "`ds[i]` samples/s",
                     "`get_many` samples/s", "speed-up", "neighbours ms / whole shard ms"]), ""]), {"rows": rows}


# ------------------------------------------------------------ 4. s3 and gs


def bench_clouds(n, quick):
    rows = []
    r = random.Random(3)
    picks = [r.randrange(n) for _ in range(16 if quick else BATCH)]
    before = load()
    # gs: the tests' stand-in (a RANGE command serving the local copy)
    serve = (f"u={{url}}; p=\"{D}/tar/${{u##*/}}\"; "
             "tail -c +$(({start} + 1)) \"$p\" | head -c $(({end} - {start} + 1))")
    with open(os.path.join(D, "tar", "index.json")) as f:
        index = json.load(f)
    for e in index["shardlist"]:
        e["url"] = "gs://bench/" + os.path.basename(e["url"])
    gs = tarproc.IndexedDataset(index, base=os.path.join(D, "tar"), settings=Settings(commands={"RANGE_GS": serve}))
    one = rate(lambda: [gs[i] for i in picks], len(picks), 1)
    many = rate(lambda: gs.get_many(picks), len(picks), 1)
    rows.append(["gs (stand-in: `TARPROC_RANGE_GS` shell command over the local copy)", f"{one:.0f}",
                 f"{many:.0f}", f"{many / one:.1f}x"])
    # s3: a moto server and the aws CLI
    moto = os.path.join(BIN, "moto_server")
    if os.path.exists(moto) and shutil.which("aws", path=BIN + os.pathsep + os.environ["PATH"]):
        port = free_port()
        proc = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench",
               "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), 1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            sh("aws s3 mb s3://bench && aws s3 cp --recursive --quiet tar s3://bench/tar")
            sh("tarindex s3://bench/tar/shard-{00..14}.tar -o s3.json -p 4", env=dict(os.environ))
            s3 = tarproc.IndexedDataset(os.path.join(D, "s3.json"))
            one = rate(lambda: [s3[i] for i in picks], len(picks), 1)
            many = rate(lambda: s3.get_many(picks), len(picks), 1)
            rows.append(["s3 (moto server, `aws s3api get-object --range`)", f"{one:.1f}", f"{many:.1f}",
                         f"{many / one:.1f}x"])
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            proc.terminate()
            proc.wait()
    after = load()
    return "\n".join([
        f"## bench_netread: s3 and gs ranged reads, {len(picks)} random samples\n",
        f"Shards: `bench/out/netread/tar` ({n} samples, 15 shards); load {before} before, {after} after. "
        f"One client process per ranged read (the aws CLI and gsutil keep no connection between processes); "
        f"`get_many` runs {Settings().range_concurrency} at once.\n",
        table(rows, ["store", "`ds[i]` samples/s", "`get_many` samples/s", "speed-up"]), ""]), {"rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-n", type=int, default=None)
    ap.add_argument("parts", nargs="*", default=["http", "loader", "compressed", "clouds"])
    args = ap.parse_args()
    use_venv()
    n = args.n or (400 if args.quick else 2000)
    make_data(n)
    server = RangeServer()
    saved = {}
    try:
        for part in args.parts:
            if part == "http":
                text, saved[part] = bench_http(server, n, args.quick)
            elif part == "loader":
                text, saved[part] = bench_loader(server, n)
            elif part == "compressed":
                text, saved[part] = bench_compressed(server, n)
            elif part == "clouds":
                text, saved[part] = bench_clouds(n, args.quick)
            else:
                raise SystemExit(f"unknown part {part!r}")
            print(text, flush=True)
    finally:
        server.stop()
    with open(os.path.join(OUT, "netread.json"), "w") as f:
        json.dump(saved, f, indent=2, default=str)


if __name__ == "__main__":
    main()
