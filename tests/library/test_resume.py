"""Broken downloads resume where they broke (sources/resume.py), through the
installed commands, against real servers: a local HTTP server (started here,
on 127.0.0.1) that supports ranges and cuts connections at seeded random
offsets, truncates bodies, stalls, ignores ranges or changes the object
between requests; and the local moto S3 with the real aws CLI behind a TCP
proxy that resets connections.  The output must be byte for byte that of
an undisturbed read; a changed object fails with one line and exit 2."""

import gzip
import hashlib
import os
import random
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import VENV_BIN, require
from helpers import read_tar, tar_bytes

#: Largest wait of a stalling response (the reader gives up long before).
STALL_SECONDS = 5


def make_shard(seed=1, n=8, size=200_000):
    rng = random.Random(seed)
    members = []
    for i in range(n):
        members.append((f"s{i:03d}.bin", rng.randbytes(size + i)))
        members.append((f"s{i:03d}.cls", str(i).encode()))
    return tar_bytes(members)


# ------------------------------------------------------------ the HTTP server


class Store:
    """The objects the server serves, the faults it plays (one per request,
    in order, per path) and a log of the requests."""

    def __init__(self):
        self.objects = {}
        self.faults = {}
        self.log = []
        self.etags = True
        self.version = 0
        self.lock = threading.Lock()

    def put(self, path, data):
        self.version += 1
        self.objects[path] = (data, f'"v{self.version}-{hashlib.md5(data).hexdigest()[:12]}"',
                              formatdate(1700000000 + self.version, usegmt=True))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        store = self.server.store
        with store.lock:
            faults = store.faults.get(self.path) or []
            fault = faults.pop(0) if faults else {}
            store.log.append({"path": self.path, "range": self.headers.get("Range"),
                              "if-match": self.headers.get("If-Match"),
                              "if-unmodified-since": self.headers.get("If-Unmodified-Since")})
            if "change" in fault:
                store.put(self.path, fault["change"])
            if self.path not in store.objects:
                return self._status(404)
            data, etag, modified = store.objects[self.path]
        if "status" in fault:
            return self._status(fault["status"])
        if fault.get("unconditional"):
            pass
        elif self.headers.get("If-Match") not in (None, etag) or \
                self.headers.get("If-Unmodified-Since") not in (None, modified):
            return self._status(412)
        start, end = 0, len(data)
        rng = self.headers.get("Range")
        if rng and not fault.get("norange"):
            first, _, last = rng.split("=")[1].partition("-")
            start = int(first)
            end = min(int(last) + 1, len(data)) if last else len(data)  # (a closed range: tarindex's probe)
            if start >= len(data):
                return self._status(416)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(end - start))
        if store.etags:
            self.send_header("ETag", etag)
        self.send_header("Last-Modified", modified)
        self.end_headers()
        stop = end
        for kind in ("cut", "short", "stall"):
            if kind in fault:
                stop = max(start, min(stop, fault[kind]))
        self.wfile.write(data[start:stop])
        self.wfile.flush()
        if "stall" in fault:
            time.sleep(STALL_SECONDS)
        if "cut" in fault:  # a reset: RST, not FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if stop < end:
            self.close_connection = True
            self.connection.close()

    def _status(self, code):
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # cut connections are the point


@pytest.fixture
def web():
    require("curl")
    server = Server(("127.0.0.1", 0), Handler)
    server.store = Store()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.store, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def cuts(seed, size, n):
    """``n`` fault offsets in ``(0, size)``, seeded, increasing."""
    rng = random.Random(seed)
    return sorted(rng.randrange(1, size) for _ in range(n))


FAST = {"TARPROC_STALL_TIMEOUT": "1"}
FAST5 = {"TARPROC_STALL_TIMEOUT": "5"}


# ------------------------------------------------------------ HTTP


def test_cuts_short_bodies_and_stalls_give_the_bytes_of_an_undisturbed_read(sh, tmp_path, web):
    store, base = web
    shard = make_shard()
    (tmp_path / "a.tar").write_bytes(shard)
    store.put("/a.tar", shard)
    at = cuts(7, len(shard), 3)
    store.faults["/a.tar"] = [{"cut": at[0]}, {"short": at[1]}, {"stall": at[2]}]
    want = sh("tarcat a.tar").stdout
    got = sh(f"tarcat {base}/a.tar", env=FAST).stdout
    assert got == want and read_tar(got) == read_tar(shard)
    ranges = [r["range"] for r in store.log]
    # a reset drops what the client's kernel had not handed on yet: resumed at or before the cut
    assert ranges[0] is None and 0 < int(ranges[1][6:-1]) <= at[0], ranges
    assert ranges[2] == f"bytes={at[1]}-" and at[1] < int(ranges[3][6:-1]) <= at[2], ranges
    assert all(r["if-match"] == store.objects["/a.tar"][1] for r in store.log[1:])


def test_a_compressed_shard_resumes_too(sh, tmp_path, web):
    store, base = web
    shard = make_shard(seed=2)
    packed = gzip.compress(shard, mtime=0)
    store.put("/a.tar.gz", packed)
    store.faults["/a.tar.gz"] = [{"cut": at} for at in cuts(3, len(packed), 1)]
    (tmp_path / "a.tar").write_bytes(shard)
    got = sh(f"tarcat {base}/a.tar.gz | tarcat -f 'bin cls'").stdout
    want = sh("tarcat a.tar | tarcat -f 'bin cls'").stdout
    assert got == want and len(read_tar(got)) == 16
    assert len(store.log) == 2 and store.log[1]["range"]


def test_random_cuts_through_tarpcat_and_the_library(sh, tmp_path, web, seed=11):
    store, base = web
    shards = [make_shard(seed=seed * 10 + i, n=4) for i in range(2)]
    for i, data in enumerate(shards):
        (tmp_path / f"p{i}.tar").write_bytes(data)
        store.put(f"/p{i}.tar", data)
        store.faults[f"/p{i}.tar"] = [{"cut": at} for at in cuts(seed + i, len(data), 2)]
    want = sh("tarpcat -p 2 p0.tar p1.tar").stdout
    got = sh(f"tarpcat -p 2 '{base}/p{{0,1}}.tar'").stdout
    assert got == want
    # the library: keyword arguments, no environment
    store.faults["/p0.tar"] = [{"stall": len(shards[0]) // 2}]
    import tarproc

    samples = list(tarproc.iter_samples(f"{base}/p0.tar", retries=2, stall_timeout=0.5))
    assert [s["bin"] for s in samples] == [body for name, body in read_tar(shards[0]) if name.endswith(".bin")]
    assert store.log[-1]["range"] is not None


def test_tarcheck_and_tarindex_resume_too(sh, tmp_path, web):
    store, base = web
    shard = make_shard(seed=10, n=3)
    (tmp_path / "a.tar").write_bytes(shard)
    store.put("/a.tar", shard)
    store.faults["/a.tar"] = [{"short": 70_000}, {}, {}, {"cut": 300_000}]  # (the third: tarindex's range probe)
    out = sh(f"tarcheck --json {base}/a.tar").stdout
    assert b'"samples": 3' in out and store.log[1]["range"] == "bytes=70000-"
    sh(f"tarindex {base}/a.tar -o http.json && tarindex a.tar -o file.json")
    import json

    index = json.loads((tmp_path / "http.json").read_text())["shardlist"][0]
    local = json.loads((tmp_path / "file.json").read_text())["shardlist"][0]
    from test_index import sidecars

    assert index["nsamples"] == 3 and index["end"] == local["end"], index
    assert sidecars(tmp_path / "http") == sidecars(tmp_path / "file") != {}
    assert len(store.log) == 5 and store.log[2]["range"] == "bytes=0-0" and store.log[4]["range"] is not None


def test_last_modified_when_there_is_no_etag(sh, tmp_path, web):
    store, base = web
    store.etags = False
    shard = make_shard(seed=4, n=3)
    store.put("/a.tar", shard)
    store.faults["/a.tar"] = [{"cut": len(shard) // 3}]
    assert sh(f"tarcat {base}/a.tar").stdout == sh("cat > a.tar && tarcat a.tar", input=shard).stdout
    assert store.log[1]["if-unmodified-since"] == store.objects["/a.tar"][2] and store.log[1]["if-match"] is None


def test_a_changed_object_fails_with_one_line(sh, tmp_path, web):
    store, base = web
    shard = make_shard(seed=5, n=3)
    store.put("/a.tar", shard)
    other = make_shard(seed=6, n=3)
    store.faults["/a.tar"] = [{"cut": len(shard) // 2}, {"change": other}]
    p = sh(f"tarcat http://someone:pa55word@{base[7:]}/a.tar -o out.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1, err
    resumed_at = store.log[1]["range"][6:-1]
    assert "changed" in err and "412" in err and err.endswith(f"not resumed at byte {resumed_at}\n"), err
    assert "pa55word" not in err and "someone" not in err and "***@127.0.0.1" in err, err
    assert not (tmp_path / "out.tar").exists()
    # a change that the server does not refuse (it ignores If-Match) is seen in its answer
    store.put("/b.tar", shard)
    store.faults["/b.tar"] = [{"short": 1000}, {"change": shard + b"\0" * 1024, "unconditional": True}]
    p = sh(f"tarcat {base}/b.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "changed" in err and "size is now" in err, err


def test_what_cannot_resume_fails_as_before(sh, tmp_path, web):
    store, base = web
    shard = make_shard(seed=8, n=3)
    store.put("/a.tar", shard)
    # a server that ignores ranges
    store.faults["/a.tar"] = [{"cut": 5000}, {"norange": True}]
    p = sh(f"tarcat {base}/a.tar > out.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "ignores byte ranges" in err, err
    # too many breaks in a row
    store.faults["/a.tar"] = [{"cut": 100 * (i + 1)} for i in range(5)]
    p = sh(f"tarcat --retries 2 {base}/a.tar > out.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "gave up after 2 resumes" in err, err
    assert len(store.log) == 2 + 3
    # --retries 0: one plain request, a break is an error as before
    store.faults["/a.tar"] = [{"cut": 3000}]
    p = sh(f"TARPROC_RETRIES=0 tarcat {base}/a.tar > out.tar", ok=False)
    assert p.returncode == 2 and "curl failed" in p.stderr.decode()
    # a 404 is not retried
    n = len(store.log)
    p = sh(f"tarcat {base}/missing.tar", ok=False)
    assert p.returncode == 2 and "404" in p.stderr.decode() and len(store.log) == n + 1
    # pipe: and stdin are not resumed: a short stream is a truncated shard
    (tmp_path / "a.tar").write_bytes(shard)
    for cmd in ("head -c 300000 a.tar | tarcat > out.tar", "tarcat 'pipe:head -c 300000 a.tar' > out.tar"):
        p = sh(cmd, ok=False)
        assert p.returncode == 2 and p.stderr.decode().count("\n") == 1, p.stderr


def test_a_503_then_the_object(sh, tmp_path, web):
    store, base = web
    shard = make_shard(seed=9, n=2)
    store.put("/a.tar", shard)
    store.faults["/a.tar"] = [{"status": 503}]
    assert sh(f"tarcat {base}/a.tar").stdout == sh("cat > a.tar; tarcat a.tar", input=shard).stdout
    assert len(store.log) == 2


def test_a_server_never_reached_fails_at_once_in_one_line(sh, tmp_path, web):
    # issue 40: `tarcat http://127.0.0.1:PORT/x.tar` with nothing listening waited 16 s, then spoke of resumes
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    log = tmp_path / "requests.log"
    counted = {"TARPROC_RESUME_HTTP": f"echo {{url}} >> {log}; "
                                      "exec curl -gsSfL -D /dev/fd/{headers} {from}{if_match}{if_unmodified}{url}"}
    for url, status in ((f"http://127.0.0.1:{port}/x.tar", 7), ("http://nonexistent.invalid/x.tar", 6)):
        p = sh(f"tarcat {url}", env=counted, ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2 and err.count("\n") == 1 and f"exit status {status}" in err, err
        assert "resume" not in err and "gave up" not in err, err
        assert log.read_text().splitlines() == [url], log.read_text()
        log.unlink()
    # a failure that is transient (5xx) is retried; with nothing read, it speaks of retries, not resumes
    store, base = web
    store.put("/a.tar", make_shard(seed=9, n=1))
    store.faults["/a.tar"] = [{"status": 503}] * 3
    p = sh(f"tarcat --retries 2 {base}/a.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "gave up after 2 retries" in err, err
    assert "resume" not in err and "byte 0" not in err and len(store.log) == 3, err


def test_bad_retry_settings_are_usage_errors(sh):
    for cmd in ("tarcat --retries -1 x.tar", "TARPROC_RETRIES=many tarcat x.tar",
                "TARPROC_STALL_TIMEOUT=soon tarcat x.tar"):
        p = sh(cmd, ok=False)
        assert p.returncode == 2 and p.stderr.decode().count("\n") <= 2, cmd
    import tarproc

    for kw in ({"retries": -1}, {"retries": "3"}, {"stall_timeout": 0}, {"stall_timeout": float("nan")}):
        with pytest.raises(tarproc.errors.UsageError):
            list(tarproc.iter_samples("x.tar", **kw))


# ------------------------------------------------------------ S3 behind a resetting proxy


class Proxy(socketserver.ThreadingTCPServer):
    """A TCP proxy on 127.0.0.1 in front of moto: a connection whose answer
    carries more than ``cut_after`` bytes is reset there, for the first
    ``cuts`` such connections; ``on_cut`` runs before the reset."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target):
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.target = target
        self.cut_after = None
        self.cuts = 0
        self.on_cut = None
        self.requests = []
        self.lock = threading.Lock()


class ProxyHandler(socketserver.BaseRequestHandler):
    def handle(self):
        server = self.server
        up = socket.create_connection(server.target)
        down = self.request
        done = threading.Event()

        def upstream():
            try:
                while True:
                    data = down.recv(65536)
                    if not data:
                        break
                    with server.lock:
                        server.requests.append(data)
                    up.sendall(data)
            except OSError:
                pass
            finally:
                done.set()

        threading.Thread(target=upstream, daemon=True).start()
        sent = 0
        try:
            while True:
                data = up.recv(65536)
                if not data:
                    break
                with server.lock:
                    cut = server.cut_after is not None and server.cuts > 0 and sent + len(data) > server.cut_after
                    if cut:
                        server.cuts -= 1
                if cut:
                    down.sendall(data[: server.cut_after - sent])
                    if server.on_cut is not None:
                        server.on_cut()
                    down.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    down.shutdown(socket.SHUT_RD)  # wakes the other thread's recv: the close then resets
                    break
                down.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            up.close()
            down.close()


def put(moto, path, data):
    """Make a bucket or object on moto directly (no aws CLI start: the reads
    under test use the aws CLI)."""
    import urllib.request

    req = urllib.request.Request(f"{moto}/{path}", data=data, method="PUT",
                                 headers={"Content-Type": "application/octet-stream"})
    urllib.request.urlopen(req, timeout=60).close()


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A local moto S3 server, the proxy in front of it, and the environment the aws CLI needs."""
    server = os.path.join(VENV_BIN, "moto_server")
    assert os.path.exists(server), "moto[server] is a test dependency"
    require(os.path.join(VENV_BIN, "aws"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path_factory.mktemp("moto") / "log", "wb")
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    proxy = Proxy(("127.0.0.1", port))
    thread = threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.server_address[1]}", "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_MAX_ATTEMPTS": "1",  # botocore's own retries of a request (not s3 cp's of a part's body)
    }
    moto = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                put(moto, "resume-test", None)  # the bucket
                break
            except OSError:
                assert time.monotonic() < deadline, "moto did not start"
                time.sleep(0.2)
        yield env, proxy, moto
    finally:
        proxy.shutdown()
        proxy.server_close()
        proc.terminate()
        proc.wait()
        log.close()


def test_s3_resets_resume_with_a_ranged_conditional_get(sh, tmp_path, s3):
    env, proxy, moto = s3
    shard = make_shard(seed=21, n=6)
    (tmp_path / "a.tar").write_bytes(shard)
    put(moto, "resume-test/a.tar", shard)
    proxy.requests.clear()
    proxy.cut_after, proxy.cuts = 400_000, 1
    try:
        got = sh("tarcat s3://resume-test/a.tar", env={**env, **FAST5}).stdout
    finally:
        proxy.cut_after = None
    assert got == sh("tarcat a.tar").stdout
    heads = [r.decode("latin-1").lower() for r in proxy.requests if r.startswith(b"GET")]
    resumed = [h for h in heads if "range: bytes=" in h and "if-match: \"" in h]
    assert len(heads) == 2 and len(resumed) == 1 and proxy.cuts == 0, heads
    # --retries 0: one plain GET (no head-object), the same bytes
    proxy.requests.clear()
    assert sh("tarcat --retries 0 s3://resume-test/a.tar", env=env).stdout == got
    asked = [r.split(b" ", 1)[0] for r in proxy.requests if r[:4] in (b"GET ", b"HEAD")]
    assert asked == [b"GET"], asked
    # a key holding a placeholder and shell syntax stays one quoted word
    p = sh("tarcat --retries 0 's3://resume-test/{url};touch pwned' > out.tar", env=env, ok=False)
    assert p.returncode == 2 and not (tmp_path / "pwned").exists()


def test_s3_changed_object_fails_with_one_line(sh, tmp_path, s3):
    env, proxy, moto = s3
    put(moto, "resume-test/c.tar", make_shard(seed=22, n=4))
    (tmp_path / "b.tar").write_bytes(make_shard(seed=23, n=4))
    full = {**os.environ, **env, "AWS_ENDPOINT_URL": moto}

    def replace():  # (moto refuses an unsigned PUT over an existing object)
        proxy.on_cut = None  # once
        subprocess.run(["aws", "s3", "cp", str(tmp_path / "b.tar"), "s3://resume-test/c.tar", "--quiet"],
                       env=full, check=True, timeout=120)

    proxy.on_cut, proxy.cut_after, proxy.cuts = replace, 300_000, 1
    try:
        p = sh("tarcat s3://resume-test/c.tar -o out.tar", env={**env, **FAST5}, ok=False)
    finally:
        proxy.on_cut, proxy.cut_after = None, None
    assert proxy.cuts == 0
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "changed" in err and "s3://resume-test/c.tar" in err, err
    assert not (tmp_path / "out.tar").exists()


# ------------------------------------------------------------ gs (a stand-in gsutil)

# The real gsutil needs Google Cloud (no emulator runs it here): this stand-in
# answers `stat` in gsutil's own layout (gslib/utils/ls_helper.py: fields
# indented by 4, custom metadata by 8) and `cat [-r START-] URL#GENERATION`
# from files under $GS_STORE; its first `cat` dies after 100,000 bytes, and
# with $GS_BUMP the generation changes then.
GSUTIL = r"""#!/bin/bash
echo "$*" >> "$GS_LOG"
[ "$1" = -q ] && shift
case "$1" in
  stat)
    f="$GS_STORE/${2#gs://}"
    [ -f "$f" ] || { echo "No URLs matched: $2" >&2; exit 1; }
    echo "$2:"
    echo "    Creation time:          Tue, 24 Nov 2026 12:00:00 GMT"
    echo "    Content-Length:         $(stat -c %s "$f")"
    echo "    Metadata:"
    echo "        Content-Length:     5"
    echo "        Generation:         1"
    echo "    ETag:                   CJ+abc="
    echo "    Generation:             $(cat "$f.gen")"
    ;;
  cat)
    shift; start=0
    if [ "$1" = -r ]; then start=${2%-}; shift 2; fi
    url=$1; gen=${url##*#}; f="$GS_STORE/${url#gs://}"; f="${f%#*}"
    [ "$(cat "$f.gen")" = "$gen" ] || { echo "NotFoundException: 404 $url does not exist." >&2; exit 1; }
    if [ ! -e "$f.cut" ]; then
      touch "$f.cut"
      tail -c +$((start + 1)) "$f" | head -c 100000
      [ -n "$GS_BUMP" ] && echo 999 > "$f.gen"
      echo "Connection reset by peer" >&2; exit 1
    fi
    tail -c +$((start + 1)) "$f"
    ;;
  *) echo "stand-in gsutil: $1 not supported" >&2; exit 9 ;;
esac
"""


@pytest.fixture
def gsutil(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "gsutil").write_text(GSUTIL)
    (bindir / "gsutil").chmod(0o755)
    store = tmp_path / "store"
    (store / "b").mkdir(parents=True)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "GS_STORE": str(store), "GS_LOG": str(tmp_path / "gs.log")}
    return env, store, tmp_path / "gs.log"


def test_gs_resumes_on_the_same_generation(sh, tmp_path, gsutil):
    env, store, log = gsutil
    shard = make_shard(seed=31, n=2)
    (tmp_path / "a.tar").write_bytes(shard)
    (store / "b" / "a.tar").write_bytes(shard)
    (store / "b" / "a.tar.gen").write_text("1700000000123456\n")
    assert sh("tarcat gs://b/a.tar", env=env).stdout == sh("tarcat a.tar").stdout
    assert log.read_text().splitlines() == ["stat gs://b/a.tar", "-q cat gs://b/a.tar#1700000000123456",
                                            "-q cat -r 100000- gs://b/a.tar#1700000000123456"]
    # the object replaced meanwhile: its generation is gone
    (store / "b" / "a.tar.cut").unlink()
    log.unlink()
    p = sh("tarcat gs://b/a.tar > out.tar", env={**env, "GS_BUMP": "1"}, ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "changed" in err and "byte 100000" in err, err


def test_gs_resume_command_replaced_by_its_variable(sh, tmp_path, gsutil):
    # TARPROC_RESUME_GS and TARPROC_STAT_GS replace the table's commands (with its {from} option)
    env, store, log = gsutil
    shard = make_shard(seed=32, n=2)
    (tmp_path / "a.tar").write_bytes(shard)
    (store / "b" / "a.tar").write_bytes(shard)
    (store / "b" / "a.tar.gen").write_text("42\n")
    env = {**env, "TARPROC_RESUME_GS": "echo resume {from}{url} >> extra.log; gsutil -q cat {from}{url}",
           "TARPROC_STAT_GS": "echo stat {url} >> extra.log; gsutil stat {url}"}
    assert sh("tarcat gs://b/a.tar", env=env).stdout == sh("tarcat a.tar").stdout
    assert (tmp_path / "extra.log").read_text().splitlines() == [
        "stat gs://b/a.tar", "resume gs://b/a.tar#42", "resume -r 100000- gs://b/a.tar#42"]
