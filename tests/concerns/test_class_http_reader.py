"""The in-process HTTP range client (tarproc/sources/keepalive.py) against
servers that lie at the socket level: endless interim answers or trailers,
transfer codings other than chunked, framing headers given twice, Locations
that are no URL, hosts no resolver takes, connections that cannot be made,
kept-alive connections closed (FIN or RST) between calls, an interrupt in
the middle of a call, several threads and a fork at once, and https with a
CA of the test's own.  The verdict is the range's bytes, or one BadInput
line naming the URL and the range, never a hang or another exception.

Each server here is a thread per connection running a script
(``handler(conn, f, srv)``); the client runs under a watchdog, so a hang
is a failure, not a stuck suite."""

import gzip
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tarproc
from tarproc.sources import keepalive
from test_netread import Server

DATA = bytes(range(256)) * 64  # the object every server serves (16 KiB)


def requests(f):
    """``(path, first, last)`` of each range request on a connection, to its end."""
    while True:
        req = Server.request(f)
        if req is None:
            return
        path, headers = req
        a, b = (int(x) for x in headers["range"].partition("=")[2].split("-"))
        yield path, a, b


def head(a, b, *more, status="206 Partial Content", version="HTTP/1.1"):
    return (f"{version} {status}\r\nContent-Range: bytes {a}-{b}/{len(DATA)}\r\n"
            + "".join(m + "\r\n" for m in more) + "\r\n").encode()


def honest(conn, f, srv):
    for _, a, b in requests(f):
        conn.sendall(head(a, b, f"Content-Length: {b - a + 1}") + DATA[a:b + 1])


class Scripted(Server):
    """A server on 127.0.0.1 running ``handler(conn, f, srv)`` on each
    connection, in a thread of its own (the accept loop is the test
    server's); ``accepted``: connections taken; ``conns``: those still open."""

    def __init__(self, handler, tls=None):
        self.handler, self.tls = handler, tls
        self.accepted = 0
        self.conns = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _conn(self, conn):
        try:
            if self.tls:
                conn = self.tls.wrap_socket(conn, server_side=True)
            self.conns.append(conn)
            f = conn.makefile("rb")
            self.handler(conn, f, self)
        except (OSError, ValueError):
            pass
        finally:
            conn.close()


@pytest.fixture
def serve():
    made = []

    def start(handler, tls=None):
        made.append(Scripted(handler, tls))
        return made[-1]

    yield start
    for s in made:
        s.close()


def fetch(requests, within=20, **kw):
    """``Pool.fetch`` of a new pool under a watchdog: its result, or the exception it raised."""
    out = {}

    def run():
        try:
            out["v"] = keepalive.Pool().fetch(requests, **kw)
        except BaseException as e:  # (the test looks at it)
            out["v"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(within)
    if t.is_alive():
        pytest.fail(f"the client hung (more than {within} s)")
    return out["v"]


def one_line_error(got, url, a, b, pattern):
    import re

    assert isinstance(got, tarproc.BadInput), repr(got)
    text = str(got)
    assert "\n" not in text and url in text and f"bytes {a}-{b}" in text, text
    assert re.search(pattern, text), text


# ------------------------------------------------------------ answers that lie


ZIPPED = gzip.compress(b"not the bytes of the range " * 20)


def interim_forever(conn, f, srv):
    next(requests(f))
    while True:
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 200)


def trailers_forever(conn, f, srv):
    _, a, b = next(requests(f))
    conn.sendall(head(a, b, "Transfer-Encoding: chunked") + b"%x\r\n" % (b - a + 1) + DATA[a:b + 1] + b"\r\n0\r\n")
    while True:
        conn.sendall(b"X-More: yes\r\n" * 500)


def gzip_chunked(conn, f, srv):  # transfer-coded: the body's length is the range's, its bytes are not
    _, a, b = next(requests(f))
    conn.sendall(head(a, b, "Transfer-Encoding: gzip, chunked") + b"%x\r\n%s\r\n0\r\n\r\n" % (len(ZIPPED), ZIPPED))


def gzip_length(conn, f, srv):
    _, a, b = next(requests(f))
    conn.sendall(head(a, b, "Transfer-Encoding: gzip", f"Content-Length: {len(ZIPPED)}") + ZIPPED)


def two_ranges(conn, f, srv):  # the first Content-Range is what the body is; the second is what was asked
    _, a, b = next(requests(f))
    conn.sendall(f"HTTP/1.1 206 P\r\nContent-Range: bytes {a + 1}-{b + 1}/{len(DATA)}\r\n"
                 f"Content-Range: bytes {a}-{b}/{len(DATA)}\r\nContent-Length: {b - a + 1}\r\n\r\n".encode()
                 + DATA[a + 1:b + 2])


def two_lengths(conn, f, srv):
    _, a, b = next(requests(f))
    conn.sendall(head(a, b, "Content-Length: 3", f"Content-Length: {b - a + 1}") + DATA[a:b + 1])


def bad_length(value):
    def answer(conn, f, srv):
        _, a, b = next(requests(f))
        conn.sendall(head(a, b, "Connection: close").replace(b"Connection: close", b"Content-Length: " + value)
                     + DATA[a:b + 1])
    return answer


def location(where):
    def redirect(conn, f, srv):
        next(requests(f))
        conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: {where}\r\nContent-Length: 0\r\n\r\n".encode())
    return redirect


@pytest.mark.parametrize("handler, size, pattern", [
    (interim_forever, 100, r"more than \d+ bytes of interim \(1xx\) answers"),
    (trailers_forever, 100, r"more than \d+ bytes of trailers"),
    (gzip_chunked, len(ZIPPED), r"Transfer-Encoding 'gzip, chunked' \(only chunked is read\)"),
    (gzip_length, len(ZIPPED), r"Transfer-Encoding 'gzip'"),
    (two_ranges, 100, r"two different content-range headers"),
    (two_lengths, 100, r"two different content-length headers"),
    (bad_length(b"\xb2"), 100, r"an invalid Content-Length \('\xb2'\)"),
    (bad_length(b"-1"), 100, r"an invalid Content-Length \('-1'\)"),
    (bad_length(b"1e2"), 100, r"an invalid Content-Length \('1e2'\)"),
    (location("http://[oops/x"), 100, r"redirects to 'http://\[oops/x', not an http\(s\) URL"),
    (location("https:///nohost"), 100, r"redirects to 'https:///nohost', not an http\(s\) URL with a host"),
    (location("file:///etc/passwd"), 100, r"redirects to 'file:///etc/passwd', not an http\(s\) URL"),
], ids=["interim-forever", "trailers-forever", "gzip-chunked", "gzip-length", "two-content-ranges",
        "two-content-lengths", "length-superscript", "length-negative", "length-float", "location-no-url", "location-no-host", "location-file"])
def test_a_lying_answer_is_one_line_never_other_bytes_nor_a_hang(serve, handler, size, pattern):
    srv = serve(handler)
    for concurrency, n in ((1, 1), (8, 20)):  # the one-connection path and the selectors loop
        got = fetch([(f"{srv.url}/x.tar", 7 + k, 7 + k + size) for k in range(n)], concurrency=concurrency,
                    timeout=5)
        one_line_error(got, f"{srv.url}/x.tar", 7, 7 + size - 1, pattern)


def test_a_host_no_codec_encodes_is_one_line(serve):
    url = "http://" + "\u00e4" * 64 + ".example/x.tar"
    got = fetch([(url, 0, 10)], timeout=2)
    assert isinstance(got, tarproc.BadInput) and "is not a host name" in str(got), repr(got)


def test_allowed_framings_still_read(serve):
    """What the checks above must not refuse: a 100 Continue, a redirect with
    a body, a framing header given twice alike, HTTP/1.0 kept alive."""
    def mixed(conn, f, srv):
        for path, a, b in requests(f):
            n = b - a + 1
            if path == "/moved":
                conn.sendall(b"HTTP/1.1 301 Moved\r\nLocation: /x.tar\r\nContent-Length: 9\r\n\r\nsee there")
            elif a % 3 == 0:
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" + head(a, b, f"Content-Length: {n}",
                                                                      f"Content-Length: {n}") + DATA[a:b + 1])
            elif a % 3 == 1:
                conn.sendall(head(a, b, f"Content-Length: {n}", "Connection: keep-alive", version="HTTP/1.0")
                             + DATA[a:b + 1])
            else:
                conn.sendall(head(a, b, "Transfer-Encoding: Chunked") + b"%x\r\n%s\r\n0\r\n\r\n" % (n, DATA[a:b + 1]))

    srv = serve(mixed)
    reqs = [(f"{srv.url}/x.tar", k * 37, k * 37 + 300) for k in range(30)] + [(f"{srv.url}/moved", 5, 50)]
    got = fetch(reqs, concurrency=3, timeout=5)
    assert isinstance(got, list) and got == [DATA[a:b] for _, a, b in reqs]


# ------------------------------------------------------------ connections


def test_a_connection_that_cannot_be_made_fails_once_not_once_per_connection():
    """A listener whose queue is full (a host that does not answer SYNs):
    a call of 8 connections fails after one stall timeout, not eight."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(0)
    port = ls.getsockname()[1]
    fill = []
    for _ in range(3):  # the queue filled: later connections wait for a SYN-ACK that never comes
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fill.append(s)
    try:
        time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/x.tar"
        t = time.monotonic()
        got = fetch([(url, k, k + 1) for k in range(64)], concurrency=8, timeout=0.5)
        took = time.monotonic() - t
        one_line_error(got, url, 0, 0, r"cannot connect to 127.0.0.1:\d+: timed out")
        assert took < 3, took  # (eight connections one after the other: 4 s)
    finally:
        for s in fill + [ls]:
            s.close()


@pytest.mark.parametrize("how", ["fin", "rst"])
def test_kept_connections_the_server_closed_between_calls_are_replaced(serve, how):
    srv = serve(honest)
    pool = keepalive.Pool()
    url = f"{srv.url}/x.tar"
    for round in range(3):
        reqs = [(url, k * 101 + round, k * 101 + round + 500) for k in range(40)]
        assert pool.fetch(reqs, concurrency=3, timeout=5) == [DATA[a:b] for _, a, b in reqs]
        assert pool.open_connections() >= 1
        for c in list(srv.conns):  # the server ends every idle connection
            if how == "rst":
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            try:
                c.shutdown(socket.SHUT_RDWR) if how == "fin" else c.close()
            except OSError:
                pass
        srv.conns.clear()
        time.sleep(0.05)


def test_a_retry_goes_on_a_new_connection_not_another_stale_one(serve):
    """Eight kept connections the server has all closed: a call of one
    connection takes one, finds it closed, and asks again on a new
    connection (not on the next of the seven closed ones)."""
    srv = serve(honest)
    pool = keepalive.Pool()
    url = f"{srv.url}/x.tar"
    reqs = [(url, k * 200, k * 200 + 150) for k in range(64)]
    assert pool.fetch(reqs, concurrency=8, timeout=5) == [DATA[a:b] for _, a, b in reqs]
    assert pool.open_connections() == 8
    for c in list(srv.conns):
        c.shutdown(socket.SHUT_RDWR)
    time.sleep(0.05)
    for concurrency in (1, 2):
        assert pool.fetch(reqs[:5], concurrency=concurrency, timeout=5) == [DATA[a:b] for _, a, b in reqs[:5]]


def test_an_interrupt_in_a_call_leaves_no_answer_for_the_next(serve):
    """Ctrl-C (KeyboardInterrupt) while the answers of a pipelined call are
    coming; the next calls on the same pool get their own bytes."""
    srv = serve(honest)
    pool = keepalive.Pool()
    url = f"{srv.url}/x.tar"
    for stop_at in (0, 1, 5, 15, 30):
        seen = []

        def done(n, data):
            seen.append(n)
            if len(seen) > stop_at:
                raise KeyboardInterrupt

        reqs = [(url, k, k + 1000) for k in range(40)]
        with pytest.raises(KeyboardInterrupt):
            pool.fetch(reqs, concurrency=2, timeout=5, done=done)
        again = [(url, 3 * k + 1, 3 * k + 700) for k in range(40)]
        assert pool.fetch(again, concurrency=2, timeout=5) == [DATA[a:b] for _, a, b in again], stop_at


def test_several_threads_and_a_fork_share_one_pool(serve):
    srv = serve(honest)
    url = f"{srv.url}/x.tar"
    errors = []
    stop = threading.Event()

    def reader(seed):
        import random

        r = random.Random(seed)
        while not stop.is_set():
            reqs = [(url, a, a + r.randrange(1, 3000)) for a in (r.randrange(13000) for _ in range(r.randrange(1, 40)))]
            try:
                got = keepalive.pool().fetch(reqs, concurrency=r.choice([1, 2, 8]), timeout=5)
            except Exception as e:
                errors.append(repr(e))
                return
            if got != [DATA[a:b] for _, a, b in reqs]:
                errors.append("wrong bytes")
                return

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):  # forks while the threads are inside their calls
            time.sleep(0.1)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    reqs = [(url, k * 50, k * 50 + 999) for k in range(60)]
                    code = 0 if keepalive.pool().fetch(reqs, concurrency=4, timeout=5) == \
                        [DATA[a:b] for _, a, b in reqs] else 3
                finally:
                    os._exit(code)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors


# ------------------------------------------------------------ https


def test_https_with_a_ca_of_its_own(serve, tmp_path):
    """https://: checked against the CAs OpenSSL trusts (SSL_CERT_FILE is
    the way to name another one); a certificate it does not trust is one line."""
    import ssl

    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(tmp_path / "cert.pem")], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    srv = serve(honest, tls=ctx)
    script = textwrap.dedent(f"""
        import sys
        from tarproc.sources import keepalive
        import tarproc
        DATA = bytes(range(256)) * 64
        reqs = [({srv.url + '/x.tar'!r}, k * 300, k * 300 + 5000) for k in range(30)]
        try:
            for c in (1, 4, 4):
                assert keepalive.pool().fetch(reqs, concurrency=c, timeout=5) == [DATA[a:b] for _, a, b in reqs]
        except tarproc.BadInput as e:
            print(e)
            sys.exit(2)
        print("ok")
    """)
    env = dict(os.environ, SSL_CERT_FILE=str(tmp_path / "cert.pem"))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stdout + p.stderr
    env.pop("SSL_CERT_FILE")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2 and p.stdout.count("\n") == 1 and "TLS failed with 127.0.0.1" in p.stdout, p.stdout + p.stderr
    assert "certificate verify failed" in p.stdout, p.stdout


# ------------------------------------------------------------ work and memory


def flow_of(size):
    """A flow of the client waiting for the answer to one request of bytes
    0 to ``size - 1`` (fed by hand: the pieces a connection might bring)."""
    a, b = socket.socketpair()
    conn = keepalive._Conn.__new__(keepalive._Conn)
    conn.origin, conn.sock, conn.alive, conn.pid, conn.tls = ("http", "127.0.0.1", 9), a, True, os.getpid(), False
    out = [None]
    flow = keepalive._Flow(keepalive.pool(), conn.origin, [0], [("http://127.0.0.1:9/x.tar", 0, size)], out, None,
                           None, 5)
    flow.conn = conn
    flow.sent.extend(flow.todo)
    flow.todo.clear()
    return flow, out, (a, b)


def test_a_head_that_comes_a_byte_at_a_time_costs_its_size_not_its_square():
    """230 KB of headers (under the bound) a byte per read: each read used
    to copy and search all the head so far (20 s of CPU for one answer)."""
    body = DATA[:100]
    stream = (b"HTTP/1.1 206 P\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 1200) for i in range(190))
              + b"Content-Range: bytes 0-99/16384\r\nContent-Length: 100\r\n\r\n" + body)
    flow, out, socks = flow_of(100)
    done = threading.Event()

    def feed():
        for k in range(len(stream)):
            flow.feed(stream[k:k + 1])
        done.set()

    threading.Thread(target=feed, daemon=True).start()
    try:
        assert done.wait(8), "quadratic: the head was not read in 8 s"
        assert out == [body] and flow.pos == len(flow.buf)
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("framing", ["chunks", "pieces"])
def test_a_body_in_tiny_pieces_costs_about_its_size_in_memory(framing):
    """A 1 MB range in 2-byte chunks, or in 3-byte reads: the body is
    gathered in place, not kept as an object per piece (~35 bytes each:
    17-25 MB for 1 MB)."""
    size = 1 << 20
    body = bytes(range(256)) * (size // 256)
    if framing == "chunks":
        stream = [b"HTTP/1.1 206 P\r\nContent-Range: bytes 0-%d/%d\r\nTransfer-Encoding: chunked\r\n\r\n"
                  % (size - 1, size) + b"".join(b"2\r\n%s\r\n" % body[k:k + 2] for k in range(0, size, 2))
                  + b"0\r\n\r\n"]
        stream = [stream[0][:-7], stream[0][-7:]]
    else:
        stream = [b"HTTP/1.1 206 P\r\nContent-Range: bytes 0-%d/%d\r\nContent-Length: %d\r\n\r\n"
                  % (size - 1, size, size)] + [body[k:k + 3] for k in range(0, size, 3)]
    flow, out, socks = flow_of(size)
    try:
        for piece in stream[:-1]:
            flow.feed(piece)
        held = sum(sys.getsizeof(p) for p in flow.parts) + sys.getsizeof(flow.parts)
        assert held < 2 * size, held
        flow.feed(stream[-1])
        assert out == [body]
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("size", [b"0x64", b"+64", b"6_4", b"", b"-0"])
def test_a_chunk_size_that_is_not_hex_digits_is_refused(size):
    flow, out, socks = flow_of(100)
    try:
        with pytest.raises(tarproc.BadInput, match=r"bytes 0-99: a broken chunked answer"):
            flow.feed(b"HTTP/1.1 206 P\r\nContent-Range: bytes 0-99/16384\r\nTransfer-Encoding: chunked\r\n\r\n"
                      + size + b"\r\n" + DATA[:100] + b"\r\n0\r\n\r\n")
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
def test_an_answer_cut_at_every_offset_is_its_bytes_or_one_line(serve, framing):
    """The first connection ends (FIN) after k bytes of its answers, for
    every k; the later ones answer in full.  The call gives the ranges'
    bytes (when the cut falls between answers: asked again) or one
    BadInput line; never other bytes, another exception or a hang."""
    def answer(a, b):
        body = DATA[a:b + 1]
        if framing == "length":
            return head(a, b, f"Content-Length: {len(body)}") + body
        if framing == "chunked":
            return head(a, b, "Transfer-Encoding: chunked") + b"".join(
                b"%x\r\n%s\r\n" % (len(body[k:k + 40]), body[k:k + 40]) for k in range(0, len(body), 40)) \
                + b"0\r\n\r\n"
        return head(a, b, "Connection: close") + body

    reqs = [(0, 99), (300, 349)]
    whole = sum(len(answer(a, b)) for a, b in (reqs if framing != "close" else reqs[:1]))
    cut = [None]

    def cutting(conn, f, srv):
        left = cut[0] if srv.accepted == 1 else None
        for r in requests(f):
            out = answer(r[1], r[2])
            if left is not None:
                out, left = out[:left], left - len(out)
                conn.sendall(out)
                if left <= 0:
                    conn.shutdown(socket.SHUT_WR)
                    return
            else:
                conn.sendall(out)
            if framing == "close":
                return

    for k in range(whole + 1):
        srv = serve(cutting)
        cut[0] = k
        url = f"{srv.url}/x.tar"
        got = fetch([(url, a, b + 1) for a, b in reqs], concurrency=1, timeout=5, within=10)
        if isinstance(got, list):
            assert got == [DATA[a:b + 1] for a, b in reqs], k
        else:
            assert isinstance(got, tarproc.BadInput) and "\n" not in str(got) and url in str(got), (k, repr(got))
        srv.close()


def test_the_concurrency_bounds_the_connections_of_a_call_over_many_origins(serve):
    """Ranges of 12 origins (servers): at most ``concurrency`` requests are
    being answered at once, whatever the number of origins (each origin
    used to get its own share of ``concurrency`` connections)."""
    lock = threading.Lock()
    busy = [0, 0]  # now, most

    def counting(conn, f, srv):
        for _, a, b in requests(f):
            with lock:
                busy[0] += 1
                busy[1] = max(busy)
            time.sleep(0.005)
            with lock:
                busy[0] -= 1
            conn.sendall(head(a, b, f"Content-Length: {b - a + 1}") + DATA[a:b + 1])

    servers = [serve(counting) for _ in range(12)]
    reqs = [(f"{s.url}/x.tar", k * 7, k * 7 + 900) for k in range(3) for s in servers]
    for concurrency in (1, 3):
        busy[1] = 0
        got = fetch(reqs, concurrency=concurrency, timeout=5)
        assert isinstance(got, list) and got == [DATA[a:b] for _, a, b in reqs]
        assert busy[1] <= concurrency, (concurrency, busy[1])


def test_redirected_ranges_are_asked_again_together_on_kept_connections(serve):
    """A server that redirects every range (as a hub to its CDN), some of
    them twice: the redirects come on kept-alive connections and the
    ranges go on together to where they lead (each used to cost a new
    connection to the redirector and a round trip of its own after it);
    the check sees the URL asked for, the bytes are the target's."""
    target = serve(honest)

    def redirector(to):
        def answer(conn, f, srv):
            for path, a, b in requests(f):
                where = f"{to}{path}" if a % 2 == 0 or to == target.url else f"{target.url}{path}"
                conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: {where}\r\nContent-Length: 4\r\n\r\nmove".encode())
        return answer

    last = serve(redirector(target.url))
    first = serve(redirector(last.url))  # even starts: first -> last -> target; odd: first -> target
    seen = []
    reqs = [(f"{first.url}/x.tar", k * 97, k * 97 + 50 + k) for k in range(60)]
    got = fetch(reqs, concurrency=2, timeout=5, check=lambda url, headers: seen.append(url))
    assert isinstance(got, list) and got == [DATA[a:b] for _, a, b in reqs]
    assert sorted(seen) == sorted(u for u, _, _ in reqs)
    assert first.accepted <= 2 and last.accepted <= 2 and target.accepted <= 4, \
        (first.accepted, last.accepted, target.accepted)


def test_a_size_in_latin_1_superscripts_is_no_number(serve):
    """str.isdigit() takes the superscripts of a latin-1 header (b"\\xb2"
    is '\u00b2'), int() refuses them: a Content-Range total of them is no
    size (the stamp has none), a redirect's Content-Length of them no
    length (its connection not kept), never a ValueError."""
    from tarproc.sources.stamps import stamp_of_headers

    def superscripts(conn, f, srv):
        for path, a, b in requests(f):
            if path == "/moved":
                conn.sendall(b"HTTP/1.1 302 F\r\nLocation: /x.tar\r\nContent-Length: \xb2\r\n\r\n")
                return
            conn.sendall(b"HTTP/1.1 206 P\r\nContent-Range: bytes %d-%d/\xb2\xb3\r\nContent-Length: %d\r\n\r\n"
                         % (a, b, b - a + 1) + DATA[a:b + 1])

    srv = serve(superscripts)
    stamps = []
    reqs = [(f"{srv.url}/x.tar", 5, 105), (f"{srv.url}/moved", 10, 20)]
    got = fetch(reqs, concurrency=1, timeout=5, check=lambda url, headers: stamps.append(stamp_of_headers(headers)))
    assert got == [DATA[5:105], DATA[10:20]] and stamps == [{}, {}], (got, stamps)


def test_an_interrupt_at_any_moment_leaves_the_pool_clean(serve):
    """A KeyboardInterrupt raised by a timer signal at a random moment of a
    call (in a read, a send, the parser, giving connections back), again
    and again: the next call on the same pool gets its own bytes."""
    import random
    import signal

    srv = serve(honest)
    pool = keepalive.Pool()
    url = f"{srv.url}/x.tar"
    r = random.Random(7)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    interrupted = 0
    try:
        for _ in range(50):
            reqs = [(url, a, a + r.randrange(1, 2000)) for a in (r.randrange(14000) for _ in range(r.randrange(1, 60)))]
            try:
                signal.setitimer(signal.ITIMER_REAL, r.uniform(0.00005, 0.003))
                pool.fetch(reqs, concurrency=r.choice([1, 3, 8]), timeout=5)
                signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                interrupted += 1
            signal.setitimer(signal.ITIMER_REAL, 0)
            again = [(url, a, a + 300) for a in (r.randrange(14000) for _ in range(20))]
            assert pool.fetch(again, concurrency=2, timeout=5) == [DATA[a:b] for _, a, b in again]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert interrupted > 10, interrupted


def test_get_many_from_several_threads_on_one_dataset(tmp_path):
    """One IndexedDataset over http, get_many from four threads at once
    (each batch its own connections from the one pool): every sample right."""
    import random

    from test_netread import Server, drop, remote
    from test_index import make_two_shards

    d = tmp_path / "data"
    d.mkdir()
    make_two_shards(d, 60, 30)
    tarproc.index_shards([str(d / "a.tar"), str(d / "b.tar")], str(d / "index.json"))
    srv = Server(d)
    try:
        local = tarproc.IndexedDataset(str(d / "index.json"))
        want = [drop(local[i]) for i in range(90)]
        ds = remote(d, srv.url, range_concurrency=3)
        errors = []

        def reader(seed):
            r = random.Random(seed)
            for _ in range(8):
                batch = [r.randrange(90) for _ in range(r.randrange(1, 30))]
                try:
                    got = [drop(s) for s in ds.get_many(batch, gap=r.choice([0, 64 << 10]))]
                except Exception as e:
                    errors.append(repr(e))
                    return
                if got != [want[i] for i in batch]:
                    errors.append(f"wrong samples for {batch}")

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
    finally:
        srv.close()
