"""Reading indexed shards over the network and under bounds
(tarproc/sources/keepalive.py, the read path of tarproc/sources/indexed.py):
kept-alive connections that persist across batches and are the process's
own after a fork, servers that lie (each a clear error, never wrong bytes),
compressed groups decoded once per batch and cached, descriptors bounded
(ulimit -n), a fork while another thread loads a dataset, and tarindex's
Range probe and read amplification.

The servers are written here at the socket level (``Server``), so each can
lie in one way; the honest one is checked to honour Range by the tests
themselves (every sample compared with a local read)."""

import io
import json
import os
import pickle
import random
import re
import socket
import subprocess
import sys
import tarfile
import textwrap
import threading

import pytest

import tarproc
from test_index import make_two_shards
from tarproc.settings import Settings


class Server:
    """A threaded HTTP/1.1 server of the files of ``root``, at the socket
    level; ``mode`` says how it answers a Range request (``ok``: as RFC
    9110 says, kept alive; the others lie or frame answers in another
    allowed way).  ``accepted``: connections accepted; ``asked``: the
    ranges asked, in order."""

    def __init__(self, root, mode="ok", target=None):
        self.root, self.mode, self.target = root, mode, target
        self.accepted = 0
        self.asked = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self):
        self.sock.close()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    @staticmethod
    def request(f):
        """The path and headers (lower-case names) of the next request on
        ``f``; ``None`` at its end."""
        line = f.readline()
        if not line:
            return None
        headers = {}
        while True:
            h = f.readline()
            if h in (b"\r\n", b""):
                break
            k, _, v = h.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        return line.split()[1].decode(), headers

    def _conn(self, conn):
        f = conn.makefile("rb")
        served = 0  # ranges asked on this connection
        try:
            while True:
                req = self.request(f)
                if req is None:
                    return
                path, headers = req
                data = (self.root / path.lstrip("/")).read_bytes()
                if "range" not in headers:  # a whole read (tarindex's)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
                    continue
                a, b = (int(x) for x in headers["range"].partition("=")[2].split("-"))
                self.asked.append((path, a, b))
                served += 1
                out, close = self._answer(path, data, a, b, served)
                conn.sendall(out)
                if close == "stall":  # silent, the connection open
                    threading.Event().wait(30)
                if close:
                    return
        except OSError:
            return
        finally:
            f.close()
            conn.close()

    def _answer(self, path, data, a, b, served=1):
        body = data[a:b + 1]
        m = self.mode

        def head(status, *more):
            return (f"HTTP/1.1 {status}\r\n" + "".join(f"{x}\r\n" for x in more) + "\r\n").encode()

        cr = f"Content-Range: bytes {a}-{b}/{len(data)}"
        if m == "ok":
            return head("206 Partial Content", cr, f"Content-Length: {len(body)}") + body, False
        if m == "whole":
            return head("200 OK", f"Content-Length: {len(data)}") + data, False
        if m == "wrong":
            return head("206 Partial Content", f"Content-Range: bytes {a + 1}-{b + 1}/{len(data)}",
                        f"Content-Length: {len(body)}") + data[a + 1:b + 2], False
        if m == "short":
            return head("206 Partial Content", cr, f"Content-Length: {len(body)}") + body[:-10], True
        if m == "extra":
            return head("206 Partial Content", cr, f"Content-Length: {len(body)}") + body + b"XXXXXXX", False
        if m == "length":
            return head("206 Partial Content", cr, f"Content-Length: {len(body) + 1}") + body + b"Z", False
        if m == "garbage":
            return b"<html>no</html>\r\n", True
        if m == "nolength":  # allowed: the body ends with the connection
            return head("206 Partial Content", cr, "Connection: close") + body, True
        if m == "chunked":  # allowed
            return head("206 Partial Content", cr, "Transfer-Encoding: chunked") + b"".join(
                b"%x\r\n%s\r\n" % (len(body[k:k + 700]), body[k:k + 700]) for k in range(0, len(body), 700)) \
                + b"0\r\n\r\n", False
        if m == "http10":  # allowed: HTTP/1.0, a connection per request
            return (f"HTTP/1.0 206 Partial Content\r\n{cr}\r\nContent-Length: {len(body)}\r\n\r\n").encode() \
                + body, True
        if m == "redirect":
            return head("302 Found", f"Location: {self.target}{path}", "Content-Length: 0"), False
        if m == "loop":
            return head("302 Found", f"Location: {path}", "Content-Length: 0"), False
        raise AssertionError(m)


@pytest.fixture
def shards(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    make_two_shards(d, 60, 30)
    tarproc.index_shards([str(d / "a.tar"), str(d / "b.tar")], str(d / "index.json"))
    return d


@pytest.fixture
def servers():
    made = []

    def start(root, mode="ok", target=None):
        srv = Server(root, mode, target)
        made.append(srv)
        return srv

    yield start
    for s in made:
        s.close()


def remote(shards, url, **settings):
    """The dataset of the shards' index with its shards at ``url``."""
    index = json.loads((shards / "index.json").read_text())
    for e in index["shardlist"]:
        e["url"] = f"{url}/{os.path.basename(e['url'])}"
    return tarproc.IndexedDataset(index, base=str(shards), settings=Settings(**settings))


def drop(sample):
    return {k: v for k, v in sample.items() if k != "__source__"}


PICKS = [5, 5, 89, 0, 61, 60, 17, 3, 42, 43, 44, 88, 70, 70, 1, 2]


# ------------------------------------------------------------ kept-alive connections


def test_connections_persist_across_batches_and_are_the_childs_own_after_fork(shards, servers):
    srv = servers(shards)
    local = tarproc.IndexedDataset(str(shards / "index.json"))
    want = [drop(local[i]) for i in range(90)]
    ds = remote(shards, srv.url, range_concurrency=3)
    copy = pickle.loads(pickle.dumps(ds))  # as a DataLoader worker gets it: the concurrency with it
    assert copy.settings.range_concurrency == 3
    r = random.Random(5)
    for _ in range(6):
        batch = [r.randrange(90) for _ in range(24)]
        assert [drop(s) for s in ds.get_many(batch)] == [want[i] for i in batch]
        assert [drop(s) for s in copy.__getitems__(batch)] == [want[i] for i in batch]
        assert drop(ds[batch[0]]) == want[batch[0]]
    assert 1 <= srv.accepted <= 3, srv.accepted  # the same few connections, every batch and both copies
    # a forked child opens its own (the parent's sockets are never shared), and the parent's still work
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if [drop(s) for s in ds.get_many(PICKS)] == [want[i] for i in PICKS] else 3
        finally:
            os._exit(code)
    assert [drop(s) for s in ds.get_many(PICKS)] == [want[i] for i in PICKS]
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert srv.accepted <= 6
    # the concurrency bounds the connections of one call
    srv2 = servers(shards)
    ds = remote(shards, srv2.url, range_concurrency=1)
    assert [drop(s) for s in ds.get_many(list(range(0, 90, 3)), gap=0)] == want[::3]
    assert srv2.accepted == 1 and len(srv2.asked) == 30


@pytest.mark.parametrize("mode", ["ok", "nolength", "chunked", "http10"])
def test_answers_framed_in_other_allowed_ways(shards, servers, mode):
    srv = servers(shards, mode)
    local = tarproc.IndexedDataset(str(shards / "index.json"))
    ds = remote(shards, srv.url)
    got = [drop(s) for s in ds.get_many(PICKS, gap=0)] + [drop(ds[44])]
    assert got == [drop(local[i]) for i in PICKS + [44]]
    # bytes, as from a local read (== alone would take a bytearray or a memoryview for them)
    assert {type(v) for s in got for k, v in s.items() if k != "__key__"} == {bytes}


def test_a_redirect_is_followed_and_the_answer_at_its_end_is_checked(shards, servers):
    good = servers(shards)
    local = tarproc.IndexedDataset(str(shards / "index.json"))
    ds = remote(shards, servers(shards, "redirect", good.url).url)
    assert [drop(s) for s in ds.get_many(PICKS)] == [drop(local[i]) for i in PICKS]
    assert ds[7]["__source__"].startswith("http://127.0.0.1") and drop(ds[7]) == drop(local[7])
    lying = servers(shards, "whole")
    ds = remote(shards, servers(shards, "redirect", lying.url).url)
    with pytest.raises(tarproc.BadInput, match="ignored the range request"):
        ds.get_many(PICKS)
    ds = remote(shards, servers(shards, "loop").url)
    with pytest.raises(tarproc.BadInput, match=r"more than 10 redirects"):
        ds[3]


@pytest.mark.parametrize("mode, message", [
    ("whole", r"ignored the range request \(status 200, the whole shard\).*honours Range"),
    ("wrong", r"the server answered bytes \d+-\d+ to a request for \d+-\d+: refusing"),
    ("short", r"(fewer bytes|connection broke)"),
    ("extra", r"(more bytes than its answer said|not an HTTP answer)"),
    ("length", r"answered \d+ bytes \(Content-Length\) to a request for \d+"),
    ("garbage", r"not an HTTP answer"),
])
def test_a_lying_server_is_one_clear_error_never_wrong_bytes(shards, servers, mode, message):
    srv = servers(shards, mode)
    ds = remote(shards, srv.url)
    for read in (lambda: ds[17], lambda: ds.get_many([17, 18, 40, 70]), lambda: ds.get_many([17], gap=0),
                 lambda: ds.get_many(list(range(90)), gap=0)):
        with pytest.raises(tarproc.BadInput, match=message) as e:
            read()
        text = str(e.value)
        assert "\n" not in text and srv.url in text, text


# ------------------------------------------------------------ the reading loop


def answers(ranges, data, framing):
    """The bytes a server sends for pipelined requests of ``ranges`` of ``data``."""
    out = b""
    for a, b in ranges:
        body = data[a:b + 1]
        cr = b"Content-Range: bytes %d-%d/%d\r\n" % (a, b, len(data))
        if framing == "length":
            out += b"HTTP/1.1 206 Partial Content\r\n" + cr + b"Content-Length: %d\r\n\r\n" % len(body) + body
        elif framing == "interim":  # a 100 Continue first, bare newlines
            out += b"HTTP/1.1 100 Continue\n\nHTTP/1.1 206 P\n" + cr.replace(b"\r", b"") \
                + b"Content-Length: %d\n\n" % len(body) + body
        else:
            out += b"HTTP/1.1 206 Partial Content\r\n" + cr + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(
                b"%x;ext=1\r\n%s\r\n" % (len(body[k:k + 7]), body[k:k + 7]) for k in range(0, len(body), 7)) \
                + b"0\r\nTrailer: x\r\n\r\n"
    return out


@pytest.mark.parametrize("framing", ["length", "interim", "chunked"])
def test_answers_cut_at_every_offset_read_the_same(framing):
    """The loop's parser takes pipelined answers whatever the pieces the
    connection brings them in: cut once at every offset, and in random
    pieces; each body is exactly its range."""
    from tarproc.sources import keepalive

    data = bytes(range(256)) * 4
    ranges = [(0, 99), (100, 100), (7, 1000), (1023, 1023)]
    stream = answers(ranges, data, framing)
    requests = [("http://127.0.0.1:9/x.tar", a, b + 1) for a, b in ranges]

    def read(pieces):
        out = [None] * len(ranges)
        a, b = socket.socketpair()
        conn = keepalive._Conn.__new__(keepalive._Conn)
        conn.origin, conn.sock, conn.alive, conn.pid, conn.tls = ("http", "127.0.0.1", 9), a, True, os.getpid(), False
        flow = keepalive._Flow(keepalive.pool(), conn.origin, list(range(len(ranges))), requests, out, None, None,
                               5)
        flow.conn = conn
        flow.sent.extend(flow.todo)
        flow.todo.clear()
        for p in pieces:
            flow.feed(p)
        a.close()
        b.close()
        assert not flow.sent and flow.pos == len(flow.buf)
        return out

    want = [data[a:b + 1] for a, b in ranges]
    for k in range(1, len(stream)):
        assert read([stream[:k], stream[k:]]) == want, k
    r = random.Random(3)
    for _ in range(20):
        cuts = sorted(r.sample(range(1, len(stream)), 40))
        assert read([stream[i:j] for i, j in zip([0] + cuts, cuts + [len(stream)])]) == want


class Stalling(Server):
    """Answers the first ``good`` requests of each connection (of all
    connections: ``total``), then: ``stall`` (says nothing more), ``halfway``
    (half a body, then nothing), ``drop`` (closes without a word), ``close``
    (answers with Connection: close)."""

    def __init__(self, root, how, good=2, total=False):
        self.how, self.good, self.total, self.served = how, good, total, 0
        super().__init__(root)

    def _answer(self, path, data, a, b, served=1):
        body = data[a:b + 1]
        head = f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{len(data)}\r\n" \
               f"Content-Length: {len(body)}\r\n"
        self.served += 1
        if (self.served if self.total else served) <= self.good:
            return head.encode() + b"\r\n" + body, False
        if self.how == "close":
            return head.encode() + b"Connection: close\r\n\r\n" + body, True
        if self.how == "drop":
            return b"", True
        if self.how == "halfway":
            return head.encode() + b"\r\n" + body[:len(body) // 2], "stall"
        return b"", "stall"


@pytest.mark.parametrize("how", ["close", "drop"])
def test_a_server_that_ends_connections_midway_is_read_on_new_ones(shards, how):
    """Connections closed after two answers (with Connection: close, or
    without a word): the rest is asked again on new connections, every
    byte right."""
    srv = Stalling(shards, how)
    try:
        local = tarproc.IndexedDataset(str(shards / "index.json"))
        ds = remote(shards, srv.url, range_concurrency=2)
        picks = list(range(0, 90, 2))
        assert [drop(s) for s in ds.get_many(picks, gap=0)] == [drop(local[i]) for i in picks]
        assert srv.accepted >= len(picks) // 3
    finally:
        srv.close()


@pytest.mark.parametrize("how, message", [("stall", r"broke before the answer \(timed out\)"),
                                          ("halfway", r"broke in the answer's body \(timed out\)")])
def test_a_server_that_stops_answering_fails_after_the_stall_timeout(shards, how, message):
    """One connection stalls (before an answer, or in its body) while others
    answer: the call fails in one line after about the stall timeout."""
    import time

    srv = Stalling(shards, how, good=1, total=True)
    try:
        ds = remote(shards, srv.url, range_concurrency=4, stall_timeout=1)
        t = time.monotonic()
        with pytest.raises(tarproc.BadInput, match=message) as e:
            ds.get_many(list(range(0, 90, 3)), gap=0)
        assert time.monotonic() - t < 10 and "\n" not in str(e.value) and srv.url in str(e.value)
    finally:
        srv.close()


def test_large_samples_in_many_reads(tmp_path, servers):
    """Samples of 3 MB (each answer many reads long) over 1 and 4 connections."""
    d = tmp_path / "big"
    d.mkdir()
    r = random.Random(4)
    with tarfile.open(d / "a.tar", "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(6):
            for ext, size in (("bin", 3_000_000 + i), ("txt", 10)):
                data = r.randbytes(size)
                info = tarfile.TarInfo(f"s{i}.{ext}")
                info.size = size
                t.addfile(info, io.BytesIO(data))
    tarproc.index_shards([str(d / "a.tar")], str(d / "index.json"))
    srv = servers(d)
    local = tarproc.IndexedDataset(str(d / "index.json"))
    for c in (1, 4):
        ds = remote(d, srv.url, range_concurrency=c)
        picks = [5, 0, 3, 3, 1, 4, 2]
        assert [drop(s) for s in ds.get_many(picks, gap=0)] == [drop(local[i]) for i in picks]


# ------------------------------------------------------------ compressed shards


@pytest.fixture
def packed(tmp_path, shards):
    """a.tar and b.tar as .tar.gz and .tar.zst of small groups, indexed with their local copies."""
    for ext in ("tar.gz", "tar.zst"):
        for n in ("a", "b"):
            subprocess.run(["tarcat", "--group-size", "4KiB", f"{n}.tar", "-o", f"{n}.{ext}"], cwd=shards, check=True)
    subprocess.run("gzip -c a.tar > one.tar.gz", shell=True, cwd=shards, check=True)  # checkpoints
    subprocess.run(["tarindex", "--checkpoint-spacing", "64KiB", "a.tar.gz", "b.tar.zst", "one.tar.gz",
                    "-o", "index.json"], cwd=shards, check=True)
    return shards


def test_a_group_is_fetched_and_decoded_once_per_batch_and_cached(packed, servers):
    srv = servers(packed)
    local = tarproc.IndexedDataset(str(packed / "index.json"))
    seq = list(tarproc.iter_samples([str(packed / n) for n in ("a.tar.gz", "b.tar.zst", "one.tar.gz")]))
    assert len(local) == len(seq) == 150
    ds = remote(packed, srv.url)
    nocache = remote(packed, srv.url, group_cache=0)
    batch = list(range(0, 12)) + list(range(60, 70)) + list(range(95, 100)) + [140, 141, 142]
    want = [drop(seq[i]) for i in batch]
    srv.asked.clear()
    for _ in range(2):
        assert [drop(s) for s in nocache.get_many(batch)] == want
    per_batch = len(srv.asked) // 2
    # one request per run of groups: far fewer than the samples, the same each batch without a cache
    groups = {(p, a, b) for p, a, b in srv.asked}
    assert per_batch < len(batch) / 2 and len(groups) == per_batch, srv.asked
    srv.asked.clear()
    assert [drop(s) for s in ds.get_many(batch)] == want
    assert len(srv.asked) == per_batch
    srv.asked.clear()
    assert [drop(s) for s in ds.get_many(batch[::-1])] == want[::-1] and [drop(ds[i]) for i in batch] == want
    assert srv.asked == []  # all from the cache of decoded groups
    # one sample at a time without the cache: each fetches its group again
    srv.asked.clear()
    assert [drop(nocache[i]) for i in batch] == want and len(srv.asked) == len(batch)
    # locally too, and every sample of every shard, whatever the batch
    r = random.Random(2)
    order = list(range(150))
    r.shuffle(order)
    for k in range(0, 150, 32):
        part = order[k:k + 32]
        assert [drop(s) for s in local.get_many(part)] == [drop(seq[i]) for i in part]
    # the cache is bounded in bytes
    small = remote(packed, srv.url, group_cache=6000)
    small.get_many(batch)
    assert 0 < small._groups.size <= 6000


def test_tarindex_reports_the_read_amplification_of_compressed_shards(packed, sh):
    p = sh(f"cd {packed} && tarindex -v a.tar.gz one.tar.gz -o i.json", stderr_ok=True)
    last = p.stderr.decode().splitlines()[-1]
    m = re.search(r"compressed shards: ([\d.]+) bytes fetched per sample byte", last)
    assert m and float(m.group(1)) > 1, last
    p = sh(f"cd {packed} && tarindex -v a.tar -o j.json", stderr_ok=True)
    assert "fetched per sample byte" not in p.stderr.decode()


# ------------------------------------------------------------ servers that ignore Range


def test_tarindex_finds_a_server_that_ignores_range(shards, servers, sh):
    whole = servers(shards, "whole")
    p = sh(f"tarindex {whole.url}/a.tar {whole.url}/b.tar -o bad.json", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1, err
    assert "ignores Range" in err and "nginx" in err and "python -m http.server" in err, err
    assert not (shards.parent / "bad.json").exists()
    assert len(whole.asked) == 1  # one probe for the server, before anything is read
    good = servers(shards)
    sh(f"tarindex {good.url}/a.tar {good.url}/b.tar -o good.json")
    assert sum(1 for _, a, b in good.asked if (a, b) == (0, 0)) == 1  # one probe for the server
    sh(f"tarindex --no-offsets {whole.url}/a.tar -o counts.json")  # counts only need no Range


# ------------------------------------------------------------ descriptors and fork


def test_three_hundred_shards_under_ulimit_n_64(tmp_path):
    d = tmp_path / "many"
    d.mkdir()
    names = []
    for s in range(300):
        with tarfile.open(d / f"s{s:03d}.tar", "w", format=tarfile.USTAR_FORMAT) as t:
            for i in range(2):
                info = tarfile.TarInfo(f"{s:03d}-{i}.txt")
                data = f"shard {s} sample {i}".encode()
                info.size = len(data)
                import io

                t.addfile(info, io.BytesIO(data))
        names.append(str(d / f"s{s:03d}.tar"))
    tarproc.index_shards(names, str(d / "index.json"))
    script = textwrap.dedent(f"""
        import os, resource, tarproc
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        ds = tarproc.IndexedDataset({str(d / 'index.json')!r})
        for i in range(len(ds)):
            assert ds[i]["txt"] == b"shard %d sample %d" % (i // 2, i % 2), i
        got = ds.get_many(list(range(len(ds)))[::-1])
        assert [s["txt"] for s in got][:2] == [b"shard 299 sample 1", b"shard 299 sample 0"]
        fds = len(os.listdir("/proc/self/fd"))
        assert fds <= 32 + 16 + 16, fds  # shard files, idle connections, offsets sidecars (16 kept open)
        small = tarproc.IndexedDataset({str(d / 'index.json')!r}, settings=tarproc.Settings(open_files=4))
        [small[i] for i in range(0, 600, 7)]
        assert len(small._fds) <= 4
        print("ok", fds)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stderr


def test_a_fork_while_another_thread_loads_a_dataset_does_not_hang(shards):
    """The child of a fork made while a thread of the parent is inside the
    first load of an IndexedDataset (its imports: numpy takes ~0.1 s)
    reads ds[5]; a fresh interpreter each time, so the imports are first ones."""
    script = textwrap.dedent("""
        import os, sys, threading, time
        import tarproc
        path, delay = sys.argv[1], float(sys.argv[2])
        def load():
            ds = tarproc.IndexedDataset(path)
            ds[3]
        t = threading.Thread(target=load)
        t.start()
        time.sleep(delay)
        pid = os.fork()
        if pid == 0:
            ds = tarproc.IndexedDataset(path)
            os.write(1, ds[5]["__key__"].encode() + b"\\n")
            os._exit(0)
        t.join()
        for _ in range(300):
            if os.waitpid(pid, os.WNOHANG)[0]:
                sys.exit(0)
            time.sleep(0.02)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("the child hung", file=sys.stderr)
        sys.exit(3)
    """)
    for delay in ("0", "0.005", "0.02", "0.05"):
        p = subprocess.run([sys.executable, "-c", script, str(shards / "index.json"), delay], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and p.stdout == "00005\n", (delay, p.returncode, p.stderr)
