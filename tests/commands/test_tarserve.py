"""tarserve: the installed command, started on 127.0.0.1 with a free port,
with curl, raw sockets and webdataset as clients; responses are checked
byte for byte against the offline `tarcat ... | tarproc ...` output and read
by Python's tarfile."""

import http.server
import io
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request

import pytest

from helpers import read_tar, tar_bytes
from helpers import prefixed_shard
from helpers import text_shard

UP = '''
def up(sample):
    if sample["txt"].startswith(b"FAIL"):
        raise ValueError("asked to fail")
    sample["txt"] = sample["txt"].upper() + b"!"
    return sample
'''


def shard(n, start=0, size=0, fail_at=None):
    members = []
    for i in range(start, start + n):
        text = b"FAIL" if i == fail_at else b"sample %d " % i + b"x" * size
        members += [(f"s{i:05d}.txt", text), (f"s{i:05d}.cls", b"%d" % (i % 7))]
    return tar_bytes(members)


@pytest.fixture
def data(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    for k in range(3):
        (root / f"train-{k}.tar").write_bytes(shard(20, 100 * k))
    (root / "sub" / "deep.tar").write_bytes(shard(5))
    (root / "bad.tar").write_bytes(shard(3, fail_at=1))
    (tmp_path / "secret.tar").write_bytes(shard(2, 900))
    (root / "link.tar").symlink_to(tmp_path / "secret.tar")
    (root / ".hidden.tar").write_bytes(shard(1))
    (tmp_path / "up.py").write_text(UP)
    return tmp_path


def _terminal_signals():
    """A terminal job's dispositions (a test run in the background ignores
    SIGINT, which its children would inherit)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Tarserve:
    def __init__(self, cwd, args, env=None):
        self.log = cwd / f"tarserve-{time.monotonic_ns()}.log"
        self.err = open(self.log, "wb")
        full_env = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen(["tarserve", *args, "--port", "0"], cwd=cwd, stderr=self.err,
                                     stdout=subprocess.DEVNULL, env=full_env, preexec_fn=_terminal_signals)
        deadline = time.monotonic() + 20
        while True:
            m = re.search(rb"on http://127\.0\.0\.1:(\d+)/", self.log.read_bytes())
            if m:
                self.port = int(m.group(1))
                break
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "tarserve did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/"

    def text(self):
        return self.log.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(args, cwd=None, env=None):
        s = Tarserve(cwd or tmp_path, args, env)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def curl(url, *args, cwd=None, timeout=60):
    return subprocess.run(["curl", "-sS", "--fail", *args, url], capture_output=True, timeout=timeout, cwd=cwd)


def offline(cmd, cwd):
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, cwd=cwd, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def raw(port, request, timeout=10):
    """Send raw bytes, return the whole answer (status line first)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            out += data
    return out


def status(answer):
    return int(answer.split(b" ", 2)[1])


def descendants(pid):
    """Pids of every process below ``pid`` (from /proc)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def identity(pid):
    """(pid, start time, command line) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return pid, start, f.read().replace(b"\0", b" ")[:200]
    except (OSError, IndexError):
        return None


def wait_for(pred, timeout=15):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---------------------------------------------------------------- byte equality, clients


def test_get_equals_offline_tarproc_map(data, serve):
    s = serve(["root", "--map", "up.py:up", "-p", "2", "--skip", "2", "--count", "15", "-f", "txt cls"],
              cwd=data)
    for k in (0, 2):
        got = curl(s.url + f"train-{k}.tar")
        assert got.returncode == 0, got.stderr
        want = offline(f"tarcat --skip 2 --count 15 -f 'txt cls' root/train-{k}.tar | tarproc --map up.py:up -p 2",
                       data)
        assert got.stdout == want
        members = read_tar(got.stdout)
        assert len(members) == 30
        assert members[0] == (f"s{100 * k + 2:05d}.cls", b"%d" % ((100 * k + 2) % 7))
        assert members[1] == (f"s{100 * k + 2:05d}.txt", b"SAMPLE %d !" % (100 * k + 2))
    got = curl(s.url + "sub/deep.tar")
    assert got.stdout == offline("tarcat --skip 2 --count 15 -f 'txt cls' root/sub/deep.tar "
                                 "| tarproc --map up.py:up -p 2", data)
    assert "GET /train-0.tar 200" in s.text()


def test_get_equals_offline_tarproc_command(data, serve):
    cmd = "tr a-z A-Z < sample.txt > sample.up && rm sample.cls"
    s = serve(["root", "-c", cmd, "-p", "2", "--rekey", "{index:04d}"], cwd=data)
    got = curl(s.url + "train-1.tar")
    assert got.returncode == 0, got.stderr
    assert got.stdout == offline(f"tarcat --rekey '{{index:04d}}' root/train-1.tar | tarproc -p 2 -c '{cmd}'",
                                 data)
    assert read_tar(got.stdout)[:2] == [("0000.txt", b"sample 100 "), ("0000.up", b"SAMPLE 100 ")]


def test_webdataset_loader_trains_on_transformed_data(data, serve):
    import webdataset as wds

    s = serve(["root", "--map", "up.py:up", "-p", "1"], cwd=data)
    ds = wds.WebDataset(s.url + "train-{0..2}.tar", shardshuffle=False).to_tuple("__key__", "txt")
    got = list(ds)
    assert len(got) == 60
    assert got[0] == ("s00000", b"SAMPLE 0 !")
    assert got[-1] == ("s00219", b"SAMPLE 219 !")


def test_python_api(data):
    import tarproc

    with pytest.raises(tarproc.UsageError):
        tarproc.serve(str(data / "root"), map=lambda s: s, port=0, background=True)
    old = os.getcwd()
    os.chdir(data)
    try:
        with tarproc.serve("root", map="up.py:up", parallel=1, port=0, background=True, quiet=True) as server:
            got = curl(server.url + "train-2.tar")
    finally:
        os.chdir(old)
    assert got.returncode == 0, got.stderr
    assert got.stdout == offline("tarproc --map up.py:up -p 1 root/train-2.tar", data)


# ---------------------------------------------------------------- HEAD, listing, names


def test_head_and_listing(data, serve):
    s = serve(["root", "-q"], cwd=data)
    head = curl(s.url + "train-0.tar", "-I")
    assert head.returncode == 0 and b"application/x-tar" in head.stdout and head.stdout.count(b"\r\n\r\n") == 1
    assert curl(s.url + "nope.tar", "-I").returncode == 22
    listing = json.loads(curl(s.url).stdout)
    names = [e["name"] for e in listing["shards"]]
    assert names == ["bad.tar", "train-0.tar", "train-1.tar", "train-2.tar", "sub/deep.tar"]
    assert listing["truncated"] is False
    assert listing["shards"][1]["size"] == (data / "root" / "train-0.tar").stat().st_size


REFUSED = [
    ("/../secret.tar", 400), ("/%2e%2e/secret.tar", 400), ("/%2E%2E%2Fsecret.tar", 400),
    ("/sub/../../secret.tar", 400), ("/sub/%2e%2e/%2e%2e/secret.tar", 400), ("//etc/passwd", 400),
    ("/%2Fetc%2Fpasswd", 400), ("/http://127.0.0.1:1/x.tar", 400), ("/train-0.tar?x=../../secret.tar", 400),
    ("/train-0.tar#frag", 400), ("/.hidden.tar", 400), ("/train-0.tar%00", 400), ("/%252e%252e/secret.tar", 400),
    ("/%zz", 400), ("/caf%C3%A9.tar", 400), ("/a\\b.tar", 400), ("/link.tar", 404), ("/sub", 404),
    ("http://127.0.0.1/train-0.tar", 400), ("*", 400), ("/" + "a" * 2000 + ".tar", 400),
]


def test_names_outside_the_prefix_are_refused(data, serve):
    s = serve(["root", "-q"], cwd=data)
    for target, code in REFUSED:
        answer = raw(s.port, f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert status(answer) == code, (target, answer[:200])
        assert b"s00900" not in answer
    assert status(raw(s.port, b"GET /train-0.tar HTTP/1.1\r\n\r\n")) == 200


def test_bounded_and_malformed_requests(data, serve):
    s = serve(["root", "-q"], cwd=data)
    assert status(raw(s.port, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n")) == 414
    assert status(raw(s.port, b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 100 + b"\r\n")) == 431
    assert status(raw(s.port, b"GET / HTTP/1.1\r\nX: " + b"b" * 20000 + b"\r\n\r\n")) == 431
    assert status(raw(s.port, b"GET /train-0.tar HTTP/1.0\r\n\r\n")) == 505
    assert status(raw(s.port, b"POST /train-0.tar HTTP/1.1\r\nContent-Length: 0\r\n\r\n")) == 405
    assert status(raw(s.port, b"GET /train-0.tar HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")) == 400
    assert status(raw(s.port, b"GET /train-0.tar HTTP/1.1\r\n folded\r\n\r\n")) == 400
    assert status(raw(s.port, b"garbage\r\n\r\n")) == 400


def test_slow_request_head_times_out(data, serve):
    s = serve(["root", "-q", "--header-timeout", "0.5"], cwd=data)
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
        c.sendall(b"GET /train-0.tar HTTP/1.1\r\n")
        answer = c.recv(1000)
    assert status(answer) == 408
    assert time.monotonic() - t < 5


def test_token(data, serve):
    s = serve(["root", "-q"], cwd=data, env={"TARPROC_SERVE_TOKEN": "s3cret-token"})
    assert curl(s.url + "train-0.tar").returncode == 22
    assert curl(s.url).returncode == 22  # the listing too
    assert curl(s.url + "train-0.tar", "-H", "Authorization: Bearer wrong").returncode == 22
    answer = raw(s.port, b"GET /../x HTTP/1.1\r\n\r\n")
    assert status(answer) == 401 and b"WWW-Authenticate: Bearer" in answer  # no hint about names
    ok = curl(s.url + "train-0.tar", "-H", "Authorization: Bearer s3cret-token")
    assert ok.returncode == 0 and ok.stdout == offline("tarcat root/train-0.tar", data)


def test_usage_errors(data):
    for args in (["pipe:cat"], ["-"], ["root/train-0.tar"], ["root", "--map", "nope.py:f"],
                 ["root", "--map", "up.py:up", "-c", "true"]):
        p = subprocess.run(["tarserve", *args, "--port", "0"], cwd=data, capture_output=True, timeout=30)
        assert p.returncode == 2, (args, p.stderr)
        assert len(p.stderr.decode().strip().splitlines()) == 1 and b"Traceback" not in p.stderr


# ---------------------------------------------------------------- failures are visible


def test_failed_sample_cuts_the_response(data, serve):
    (data / "root" / "big.tar").write_bytes(shard(40, size=100_000, fail_at=30))
    s = serve(["root", "--map", "up.py:up", "-p", "1"], cwd=data)
    got = curl(s.url + "big.tar")
    assert got.returncode == 18, got  # curl: transfer closed with outstanding read data remaining
    assert len(got.stdout) > 1_000_000  # the data before the failure went out
    assert "big.tar" in s.text() and "more than --max-failures 0" in s.text()
    assert curl(s.url + "bad.tar").returncode == 18  # sample 0 went out, then the failure
    (data / "root" / "garbage.tar").write_bytes(b"not a tar archive\n" * 100)
    early = curl(s.url + "garbage.tar", "-i", "--no-fail")
    assert early.stdout.startswith(b"HTTP/1.1 502")  # failed before any byte
    assert b"not a tar" not in early.stdout  # the details are in the server's log only
    # within --max-failures: the failed sample is skipped, as offline tarproc does
    t = serve(["root", "--map", "up.py:up", "-p", "1", "--max-failures", "1"], cwd=data)
    ok = curl(t.url + "bad.tar")
    assert ok.returncode == 0
    assert ok.stdout == subprocess.run("tarproc --max-failures 1 --map up.py:up -p 1 root/bad.tar", shell=True, cwd=data,
                                       capture_output=True).stdout
    assert [n for n, _ in read_tar(ok.stdout)] == ["s00000.cls", "s00000.txt", "s00002.cls", "s00002.txt"]


# ---------------------------------------------------------------- an upstream that we control


class Upstream:
    """An HTTP server in this process that sends shard A, then waits for
    ``release`` before sending shard B and the end: a slow source."""

    def __init__(self, first, rest):
        self.release = threading.Event()
        self.stop_now = threading.Event()
        up = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(first) + len(rest)))
                self.end_headers()
                self.wfile.write(first)
                self.wfile.flush()
                while not up.release.wait(0.1):
                    if up.stop_now.is_set():
                        return
                self.wfile.write(rest)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.stop_now.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def upstream():
    whole = shard(10)
    body = whole[:-1024]  # without the end-of-archive blocks
    first, rest = body[:5 * 2 * 1024], body[5 * 2 * 1024:] + b"\0" * 1024
    u = Upstream(first, rest)
    u.whole = whole
    yield u
    u.close()


def _open_stream(port, name):
    c = socket.create_connection(("127.0.0.1", port), timeout=20)
    c.sendall(f"GET /{name} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return c


def _read_until(c, needle, limit=1 << 20):
    got = b""
    while needle not in got and len(got) < limit:
        data = c.recv(65536)
        if not data:
            break
        got += data
    return got


def test_first_sample_before_the_source_ends_and_disconnect_kills_work(data, serve, upstream):
    s = serve([upstream.url, "--map", "up.py:up", "-p", "2"], cwd=data)
    c = _open_stream(s.port, "x/shard.tar")
    got = _read_until(c, b"SAMPLE 0 !")
    assert b"SAMPLE 0 !" in got and not upstream.release.is_set()  # streamed while the source waits
    assert got.startswith(b"HTTP/1.1 200") and b"Transfer-Encoding: chunked" in got
    work = [identity(p) for p in descendants(s.proc.pid)]
    assert len(work) >= 4, work  # job process, curl, two --map workers
    c.close()  # the client goes away
    assert wait_for(lambda: not descendants(s.proc.pid)), descendants(s.proc.pid)
    assert wait_for(lambda: not [w for w in work if w is not None and identity(w[0]) == w]), \
        [identity(w[0]) for w in work if w is not None]  # none left, not even reparented
    assert "client went away" in s.text()
    # the server still serves
    upstream.release.set()
    ok = curl(s.url + "x/shard.tar")
    assert ok.returncode == 0
    assert ok.stdout == offline(f"tarproc --map up.py:up -p 2 {upstream.url}/x/shard.tar", data)


def test_failing_remote_source_is_an_error_for_the_client(data, serve, upstream):
    s = serve([upstream.url, "-p", "1"], cwd=data)
    c = _open_stream(s.port, "shard.tar")
    got = _read_until(c, b"sample 2 ")
    assert b"sample 2 " in got
    upstream.close()  # the source dies mid-shard
    rest = b""
    while True:
        data_ = c.recv(65536)
        if not data_:
            break
        rest += data_
    c.close()
    assert not (got + rest).endswith(b"0\r\n\r\n")  # no terminating chunk
    assert wait_for(lambda: "shard.tar: failed" in s.text())


def test_max_clients_gives_503(data, serve, upstream):
    s = serve([upstream.url, "--max-clients", "1"], cwd=data)
    c = _open_stream(s.port, "shard.tar")
    _read_until(c, b"sample 0")
    busy = curl(s.url + "shard.tar", "-i", "--no-fail")
    assert busy.stdout.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in busy.stdout
    c.close()
    upstream.release.set()
    assert wait_for(lambda: curl(s.url + "shard.tar").returncode == 0)


def test_sigterm_drains_then_cuts(data, serve, upstream):
    # a response in flight finishes within the drain time
    s = serve([upstream.url, "--drain-timeout", "20"], cwd=data)
    c = _open_stream(s.port, "shard.tar")
    _read_until(c, b"sample 0")
    s.proc.send_signal(signal.SIGTERM)
    assert wait_for(lambda: "draining" in s.text())
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
    upstream.release.set()
    rest = b""
    while not rest.endswith(b"0\r\n\r\n"):
        d = c.recv(65536)
        assert d, "response cut"
        rest += d
    c.close()
    assert s.proc.wait(20) == 0


def test_sigterm_cuts_at_the_deadline(data, serve, upstream):
    s = serve([upstream.url, "--drain-timeout", "0.5"], cwd=data)
    c = _open_stream(s.port, "shard.tar")
    got = _read_until(c, b"sample 0")
    s.proc.send_signal(signal.SIGTERM)
    while True:
        d = c.recv(65536)
        if not d:
            break
        got += d
    assert not got.endswith(b"0\r\n\r\n")
    assert s.proc.wait(20) == 0
    assert "1 responses cut" in s.text()
    assert not descendants(s.proc.pid)


@pytest.mark.parametrize("draining", [False, True])
def test_ctrl_c_stops_now(data, serve, upstream, draining):
    """Ctrl-C is not SIGTERM: it cuts the responses in flight at once and
    exits 130 (it drained for --drain-timeout and exited 0), also when it
    comes during a SIGTERM's drain."""
    s = serve([upstream.url, "--drain-timeout", "600"], cwd=data)
    c = _open_stream(s.port, "shard.tar")
    got = _read_until(c, b"sample 0")
    if draining:
        s.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "draining" in s.text())
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(60) == 130  # (not the 600 s of the drain)
    while True:
        d = c.recv(65536)
        if not d:
            break
        got += d
    c.close()
    assert not got.endswith(b"0\r\n\r\n")  # cut
    assert s.text().rstrip().endswith("tarserve: interrupted") and "Traceback" not in s.text(), s.text()
    assert not descendants(s.proc.pid)


# ---------------------------------------------------------------- load


def test_load_1_4_16_clients(data, serve, capsys):
    """Bounded load on loopback: 16 GETs of 8 shards per level (1, 4, 16
    clients at once); every body equals the offline output."""
    root = data / "load"
    root.mkdir()
    for k in range(8):
        (root / f"l-{k}.tar").write_bytes(shard(50, 1000 * k, size=4000))
    s = serve(["load", "-q", "-f", "txt", "--rekey", "{index:05d}", "--max-clients", "16"], cwd=data)
    want = {k: offline(f"tarcat -f txt --rekey '{{index:05d}}' load/l-{k}.tar", data) for k in range(8)}
    report = []
    for clients in (1, 4, 16):
        results = {}

        def fetch(jobs):
            for j in jobs:
                results[j] = curl(s.url + f"l-{j % 8}.tar").stdout

        t = time.monotonic()
        threads = [threading.Thread(target=fetch, args=(range(i, 16, clients),)) for i in range(clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        dt = time.monotonic() - t
        assert results == {j: want[j % 8] for j in range(16)}
        mb = sum(len(v) for v in results.values()) / 1e6
        report.append(f"{clients:2d} clients: {16 / dt:5.1f} shards/s {mb / dt:6.1f} MB/s")
    with capsys.disabled():
        print(f"\ntarserve load, 16 GETs of {len(want[0]) / 1e6:.2f} MB per level: " + "; ".join(report))


def test_range_request_gets_the_whole_transformed_shard(data, serve):
    """The body is computed, not stored: a Range header is ignored (200, the
    whole body, and 'Accept-Ranges: none' says so), never a 206 with the
    bytes of some other stream."""
    s = serve(["root", "-q", "--map", "up.py:up", "-p", "1"], cwd=data)
    got = curl(s.url + "train-1.tar", "-r", "100-199", "-D", "-")
    assert got.returncode == 0, got.stderr
    head, _, body = got.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Accept-Ranges: none" in head
    assert body == offline("tarproc --map up.py:up root/train-1.tar", data)


WIDS_CLIENT = r"""
import json, sys
import wids
ds = wids.ShardListDataset(sys.argv[1], cache_dir=sys.argv[2], transformations=[])
out = []
for i in range(len(ds)):
    s = ds[i]
    v = s[".txt"]
    out.append([s["__key__"], (v.read() if hasattr(v, "read") else v).decode()])
print(json.dumps(out))
"""


def test_wids_reads_transformed_shards_from_tarserve(data, serve):
    """wids (the real package, which downloads a shard with curl and reads it
    by offsets) as a client: tarindex counts the served shards into a wids
    index of tarserve URLs, and wids' samples are the transformed ones."""
    s = serve(["root", "-q", "--map", "up.py:up", "-p", "1"], cwd=data)
    # (counts only: tarserve serves no byte ranges, which offsets would need)
    p = subprocess.run(["tarindex", "--no-offsets", f"{s.url}train-{{0..2}}.tar", "-o", "index.json"], cwd=data,
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    index = json.loads((data / "index.json").read_text())
    assert [e["url"] for e in index["shardlist"]] == [f"{s.url}train-{k}.tar" for k in range(3)]
    assert [e["nsamples"] for e in index["shardlist"]] == [20, 20, 20]
    p = subprocess.run([sys.executable, "-c", WIDS_CLIENT, "index.json", str(data / "cache")], cwd=data,
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    got = json.loads(p.stdout.decode().strip().splitlines()[-1])
    expect = [[f"s{i:05d}", f"SAMPLE {i} !"] for k in range(3) for i in range(100 * k, 100 * k + 20)]
    assert got == expect


def test_a_stalled_job_is_ended(data, serve):
    """A job that sends nothing for --stall-timeout (a hung source; here a
    command that sleeps on a sample) is ended: 504 before its first byte, a
    cut response after; the slot is free again and nothing is left running."""
    marker = f"{os.getpid()}{time.monotonic_ns() % 100000}"
    s = serve(["root", "-c", f"case $(cat sample.__key__) in s00000|s00101) sleep 3{marker};; esac", "-p", "1",
               "--stall-timeout", "1", "--max-clients", "1"], cwd=data)
    t0 = time.monotonic()
    got = curl(s.url + "train-0.tar", "-i", "--no-fail")
    assert got.stdout.startswith(b"HTTP/1.1 504"), got.stdout[:200]
    cut = curl(s.url + "train-1.tar")
    assert cut.returncode == 18 and b"s00100.txt" in cut.stdout  # the first sample went out, then the cut
    assert time.monotonic() - t0 < 20
    assert "sent nothing for 1s" in s.text() and "answered 504" in s.text() and "response cut" in s.text()
    deadline = time.monotonic() + 10  # the one slot is free again once the job is ended (503 until then)
    while (ok := curl(s.url + "train-2.tar")).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ok.returncode == 0, ok.stderr
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", f"^sleep 3{marker}$"], capture_output=True).stdout and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", f"^sleep 3{marker}$"], capture_output=True).stdout == b""


PRINTING = '''
import os
print("loaded")
def f(sample):
    print("debug", sample["__key__"])
    os.write(1, b"raw write\\n")
    sample["txt"] = sample["txt"].upper()
    return sample
'''


def test_tarserve_map_function_that_prints_does_not_corrupt_responses(tmp_path):
    """The same in tarserve: the job's stdout is the response, so a print
    became part of the shard a client downloaded.  It goes to the log now,
    and the server keeps serving."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "a.tar").write_bytes(text_shard(5))
    (tmp_path / "f.py").write_text(PRINTING)
    proc = subprocess.Popen(["tarserve", "root", "--port", "0", "--map", "f.py:f"], cwd=tmp_path,
                            stderr=subprocess.PIPE)
    try:
        line = b""
        deadline = time.monotonic() + 20
        while b"\n" not in line and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 1)[0]:
                line += os.read(proc.stderr.fileno(), 4096)
        url = re.search(rb"http://\S+/", line).group(0).decode()
        for _ in range(2):
            with urllib.request.urlopen(url + "a.tar", timeout=30) as r:
                body = r.read()
            with tarfile.open(fileobj=io.BytesIO(body)) as tf:
                assert [m.name for m in tf] == [f"s{i:03d}.txt" for i in range(5)]
                assert tf.extractfile("s004.txt").read() == b"TEXT S 4\n"
    finally:
        proc.terminate()
        proc.wait(30)
    assert b"raw write" in proc.stderr.read() + line


@pytest.fixture
def serve_in_tmp(tmp_path):
    servers = []

    def start(args, env=None):
        s = Tarserve(tmp_path, args, env)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def _dechunk(body):
    """The payload of a chunked body, and whether it ended with the zero chunk."""
    out, pos = bytearray(), 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return bytes(out), False
        size = int(body[pos:eol], 16)
        if size == 0:
            return bytes(out), body[eol:eol + 4] == b"\r\n\r\n"
        out += body[eol + 2:eol + 2 + size]
        if len(body) < eol + 2 + size + 2:
            return bytes(out), False
        pos = eol + 2 + size + 2


def test_tarserve_a_client_trickling_bytes_after_its_answer_does_not_keep_its_slot(tmp_path, serve_in_tmp):
    """The close of an answered connection read what the client still sent
    with a 1 s timeout per read and no total: a client sending a byte every
    half second after its 404 held one of --max-clients forever (80 such
    connections shut a server out for good, for ~160 bytes/s)."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "a.tar").write_bytes(prefixed_shard(3))
    s = serve_in_tmp(["root", "-q", "--max-clients", "1"])
    hog = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    hog.sendall(b"GET /missing.tar HTTP/1.1\r\n\r\n")
    stop = threading.Event()

    def trickle():
        while not stop.wait(0.3):
            try:
                hog.send(b"x")
            except OSError:
                return

    t = threading.Thread(target=trickle)
    t.start()
    try:
        assert status(hog.recv(4096)) == 404
        time.sleep(3.5)  # past the bounded linger (2 s); the hog still sends
        answer = raw(s.port, b"GET /a.tar HTTP/1.1\r\n\r\n")
        assert status(answer) == 200, answer[:200]
    finally:
        stop.set()
        t.join()
        hog.close()


def test_tarserve_bytes_sent_after_the_request_do_not_reset_a_complete_answer(tmp_path, serve_in_tmp):
    """A client that sent anything after its request head (a pipelined
    request, a stray CRLF) got a reset instead of the end of a complete
    body: closing a socket with unread bytes discards what is still queued
    for sending, while the server logged a complete 200."""
    (tmp_path / "root").mkdir()
    data = prefixed_shard(1500, size=3000)  # several MB: more than the socket buffers hold
    (tmp_path / "root" / "big.tar").write_bytes(data)
    s = serve_in_tmp(["root"])
    with socket.create_connection(("127.0.0.1", s.port), timeout=20) as c:
        c.sendall(b"GET /big.tar HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.3)
        c.sendall(b"GET /big.tar HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(1.0)  # the server has written everything by now and closes
        answer = b""
        while True:
            try:
                got = c.recv(1 << 20)
            except ConnectionResetError:
                break
            if not got:
                break
            answer += got
    head, _, body = answer.partition(b"\r\n\r\n")
    assert status(head) == 200
    payload, complete = _dechunk(body)
    assert complete, f"{len(payload)} of {len(data)} bytes, no terminating chunk"
    assert sorted(read_tar(payload)) == sorted(read_tar(data))


def test_tarserve_a_cut_off_shard_is_never_a_complete_answer(tmp_path, serve_in_tmp):
    """A shard that ends on a member boundary without its end-of-archive
    marker (a shard still being copied into the directory: cp writes whole
    blocks) was served as a complete 200: offline readers warn, but the
    client of a server never sees the warning. tarserve is strict by
    default now (--no-strict serves what is there)."""
    (tmp_path / "root").mkdir()
    data = prefixed_shard(40)
    cut = data[:10 * 2048]  # 10 samples of 2 one-block members: a member boundary
    (tmp_path / "root" / "cut.tar").write_bytes(cut)
    s = serve_in_tmp(["root", "-q"])
    p = subprocess.run(["curl", "-sS", s.url + "cut.tar"], capture_output=True, timeout=30)
    assert p.returncode != 0, "a cut-off shard looked complete"
    s2 = serve_in_tmp(["root", "-q", "--no-strict"])
    p = subprocess.run(["curl", "-sS", "--fail", s2.url + "cut.tar"], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert len([n for n, _ in read_tar(p.stdout)]) == 20
    assert "end-of-archive" in s2.text()
