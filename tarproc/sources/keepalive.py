"""The in-process HTTP client of random access: byte ranges of ``http(s)://``
shards over kept-alive, pipelined HTTP/1.1 connections (the scheme table's
``builtin`` RANGE and RANGES of http and https, :mod:`tarproc.runtime.schemes`).

A process has one :class:`Pool` (:func:`pool`; made again in a forked
child, which never touches its parent's sockets): connections by origin,
kept between calls (``get_many`` batches, ``__getitems__`` of a DataLoader
worker), at most ``open_files`` of them idle (the least recently used
closed first).  :meth:`Pool.fetch` spreads the requests of a call over at
most ``concurrency`` connections and drives them all from the calling
thread (a ``selectors`` loop: no thread hand-offs, no GIL between readers);
on a connection the server keeps alive, up to :data:`DEPTH` requests are in
flight (pipelined), so a near server costs one send and a few reads per
share, and a far one is waited for on every connection at once.  Every
answer is checked before its bytes are used: status 206, ``Content-Range``
exactly the range asked for, a body of exactly that length, nothing after
it; anything else is one :class:`~tarproc.errors.BadInput` naming the URL
and range (a request whose connection broke before its answer began is sent
again once, on a new connection).  Redirects to http(s) are followed (at
most :data:`MAX_REDIRECTS`; the ranges redirected asked again together
where they lead), and the answer at the end is checked the same way.

    data = pool().fetch([("http://host/a.tar", 0, 1024)], concurrency=8)[0]
"""

import os
import selectors
import socket
import threading
import time
from collections import OrderedDict, deque

from ..core.limits import is_decimal
from ..errors import BadInput

#: Requests in flight at once on a kept-alive connection.
DEPTH = 16
#: Requests of one call a connection takes before another one is used.
SHARE = 8
#: Redirects followed for one range.
MAX_REDIRECTS = 10
#: Header lines, bytes of one header line, and bytes of one answer's headers accepted.
MAX_HEADERS, MAX_LINE, MAX_HEAD = 200, 65536, 256 << 10
#: Bytes asked of a socket at a time.
RECV = 256 << 10

_OK_SCHEMES = ("http", "https")


class _Failed(Exception):
    """A request that got no answer on a connection that broke (sent again)."""


class _NoConnection(Exception):
    """A connection that could not be made (why: ``args[0]``)."""


_REDIRECTED = object()  # what parse gives for a redirect (asked again where it leads, after the round)


class _Target:
    """A URL split for requests: origin ``(scheme, host, port)``, the request
    target (bytes), the Host header and the Authorization header (user:password@)."""

    __slots__ = ("origin", "path", "host", "auth", "_pre")

    def __init__(self, url):
        from urllib.parse import quote, unquote, urlsplit

        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as e:
            raise BadInput(f"{url}: not a URL ({e})") from None
        scheme = parts.scheme.lower()
        if scheme not in _OK_SCHEMES or not parts.hostname:
            raise BadInput(f"{url}: not an http(s):// URL with a host")
        port = port or (443 if scheme == "https" else 80)
        path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        # as sent: what is not allowed raw in a request target percent-encoded, escapes kept
        target = quote(path.encode("utf-8", "surrogateescape"), safe="/%:@!$&'()*+,;=-._~?")
        self.origin = (scheme, parts.hostname, port)
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        self.host = host if port == (443 if scheme == "https" else 80) else f"{host}:{port}"
        self.path = target.encode("ascii")
        self.auth = None
        if parts.username is not None:
            import base64

            cred = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode("utf-8", "surrogateescape")
            self.auth = b"Basic " + base64.b64encode(cred)
        try:
            host_bytes = self.host.encode("idna" if not self.host.isascii() else "ascii")
        except UnicodeError:
            raise BadInput(f"{url}: {parts.hostname!r} is not a host name") from None
        self._pre = (b"GET " + self.path + b" HTTP/1.1\r\nHost: " + host_bytes + b"\r\n"
                     + (b"Authorization: " + self.auth + b"\r\n" if self.auth else b""))

    def request(self, start, stop):
        return self._pre + (b"Range: bytes=%d-%d\r\nAccept-Encoding: identity\r\nUser-Agent: tarproc\r\n\r\n"
                            % (start, stop - 1))


class _Conn:
    """One connection: its socket (in timeout mode: sends wait at most the
    timeout; reads are made when the loop sees bytes), and whether the
    server keeps it alive (learnt from its first answer: only then are
    requests pipelined on it)."""

    __slots__ = ("origin", "sock", "alive", "pid", "tls")

    def __init__(self, origin, timeout):
        scheme, host, port = origin
        try:
            sock = socket.create_connection((host, port), timeout)
        except OSError as e:
            raise _NoConnection(f"cannot connect to {host}:{port}: {e.strerror or e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.tls = scheme == "https"
        if self.tls:
            import ssl

            try:
                sock = _ssl_context().wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise _NoConnection(f"TLS failed with {host}:{port}: {e}") from None
        self.origin, self.sock, self.alive, self.pid = origin, sock, None, os.getpid()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def quiet(self):
        """Whether nothing came after the last answer (bytes more would be a
        lying server's: they would be taken for the next answer).  A server
        that has closed the connection leaves it not alive."""
        sock = self.sock
        try:
            if self.tls and sock.pending():
                return False
            timeout = sock.gettimeout()
            sock.settimeout(0)
            try:
                extra = sock.recv(1) if self.tls else sock.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError as e:
                if type(e).__name__ in ("SSLWantReadError", "SSLWantWriteError"):  # (nothing came)
                    return True
                self.alive = False
                return True
            finally:
                sock.settimeout(timeout)
        except OSError:
            self.alive = False
            return True
        if not extra:
            self.alive = False  # (closed by the server: nothing more, but not kept)
            return True
        return False


_SSL = []


def _ssl_context():
    if not _SSL:
        import ssl

        _SSL.append(ssl.create_default_context())
    return _SSL[0]


class _Flow:
    """The requests ``ns`` of one share over one connection, answered in
    order: the requests not yet sent (``todo``), those sent and not answered
    (``sent``), and the answer being read: its bytes from ``buf[pos:]``, what
    it is reading (``state``: ``head``, ``body``, ``chunked``, ``close``,
    ``skip``), its ``headers`` once read, the body ``parts`` taken so far."""

    def __init__(self, pool, origin, ns, requests, out, check, done, timeout, ids=None, names=None):
        self.pool, self.origin, self.requests, self.out = pool, origin, requests, out
        self.ids, self.names = ids, names  # (a redirected round: request k is the call's ids[k], names[ids[k]])
        self.check, self.done, self.timeout = check, done, timeout
        self.ns = ns
        self.todo = deque(ns)
        self.sent = deque()
        self.conn = None
        self.fresh = False
        self.retried = False
        self.last = time.monotonic()  # when a byte last came
        self.error = None
        self.redirects = []  # (n, location): followed after the loop
        self.fd = self.watched = None  # the descriptor and connection the loop watches
        self._reset()

    def _reset(self):
        self.buf, self.pos = b"", 0
        self.state = "head"
        self.started = False  # a byte of the current answer seen
        self.parts, self.got = [], 0
        self.heads = 0  # bytes of the answer's interim (1xx) answers and trailers: bounded, as its headers are
        self.scanned, self.checked = 0, False  # bytes of buf[pos:] searched for the head's end; status line seen
        self.want = self.headers = self.chunk = None

    # -- sending

    def start_flow(self):
        self.open()
        self.send()

    def open(self, new=False):
        try:
            self.conn = self.pool._take(self.origin, self.timeout, new)
        except _NoConnection as e:
            raise _error(self.requests, self.sent[0] if self.sent else self.todo[0], e.args[0]) from None
        self.fresh = self.conn.alive is None
        self._reset()

    def send(self):
        """Send requests: up to :data:`DEPTH` in flight on a kept-alive
        connection, one while that is not known."""
        room = (DEPTH if self.conn.alive else 1) - len(self.sent)
        if room <= 0 or not self.todo:
            return
        batch = [self.todo.popleft() for _ in range(min(room, len(self.todo)))]
        self.sent.extend(batch)
        reqs = self.requests
        try:
            self.conn.sock.sendall(b"".join(self.pool.target(reqs[n][0]).request(reqs[n][1], reqs[n][2])
                                            for n in batch))
        except OSError as e:
            raise _Failed(e.strerror or str(e)) from None

    @property
    def finished(self):
        return self.error is not None or (not self.todo and not self.sent)

    # -- reading

    def readable(self):
        """Read what the socket has and take the answers it completes."""
        sock = self.conn.sock
        try:
            data = sock.recv(RECV)
            if self.conn.tls:
                while sock.pending():  # (decrypted bytes the selector cannot see)
                    data += sock.recv(RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            if self.conn.tls and type(e).__name__ in ("SSLWantReadError", "SSLWantWriteError"):
                return
            self.broke(e.strerror or str(e))
            return
        if not data:
            self.broke(None)
            return
        self.last = time.monotonic()
        self.feed(data)

    def feed(self, data):
        """Take ``data``, the next bytes the connection brought (added in
        place while a head or chunked answer is gathered: bytes coming a few
        at a time are copied once, not once per read)."""
        if self.pos >= len(self.buf):
            self.buf = data
        elif self.state in ("head", "chunked"):
            if type(self.buf) is not bytearray:
                self.buf = bytearray(memoryview(self.buf)[self.pos:])
            else:
                del self.buf[:self.pos]
            self.buf += data
        else:
            self.buf = self.buf[self.pos:] + data
        self.pos = 0
        self.started = True
        self.take()

    def take(self):
        """Parse what ``buf`` holds: finish answers, send more requests."""
        while self.sent and self.error is None:
            body = self.parse()
            if body is None:
                return
            self.retried = self.fresh = False
            if body is not _REDIRECTED:  # (a redirect took its request off sent itself)
                self.answered(self.sent.popleft(), body)
            if not self.conn.alive:  # the rest again, on a new connection
                self.requeue()
                return
            self.state, self.started, self.heads = "head", self.pos < len(self.buf), 0
            if self.todo and len(self.sent) <= DEPTH // 2:  # (topped up in batches: a send per few answers)
                self.send()

    def answered(self, n, body):
        m = n if self.ids is None else self.ids[n]
        try:
            if self.check is not None:
                self.check((self.requests if self.names is None else self.names)[m][0], self.headers)
            self.out[m] = self.done(m, body) if self.done is not None else body
        except BadInput as e:
            e.request = n
            raise

    def requeue(self):
        """The connection is not kept: the requests sent and not answered go
        first again, on a new connection when any is left (not an idle one:
        the server may have closed those too)."""
        self.todo.extendleft(reversed(self.sent))
        self.sent.clear()
        self.conn.close()
        self.conn = None
        if self.todo:
            self.open(new=True)
            self.send()

    def parse(self):
        """The body of the answer at ``buf[pos:]`` once it is whole (``None``
        until then), checked against the range asked for."""
        while True:
            if self.state == "head":
                if not self.read_head():
                    return None
                continue
            if self.state == "body":
                need = self.want - self.got
                have = len(self.buf) - self.pos
                if have < need:
                    if have:
                        self.add(self.buf[self.pos:])
                        self.got += have
                        self.buf, self.pos = b"", 0
                    return None
                if not self.parts:
                    body = self.buf[self.pos:self.pos + need]
                else:
                    self.parts.append(self.buf[self.pos:self.pos + need])
                    body = b"".join(self.parts)
                self.pos += need
                self.parts, self.got = [], 0
                return body
            if self.state == "chunked":
                body = self.read_chunks()
                if body is None:
                    return None
                return body
            if self.state == "skip":  # a redirect's body
                have = len(self.buf) - self.pos
                if have < self.want:
                    self.want -= have
                    self.buf, self.pos = b"", 0
                    return None
                self.pos += self.want
                return self.redirect(self.headers["location"])
            if self.state == "close":  # the body ends with the connection
                have = len(self.buf) - self.pos
                if have:
                    self.add(self.buf[self.pos:])
                    self.got += have
                    self.buf, self.pos = b"", 0
                if self.got > self.want:
                    raise self.problem(f"the server sent more bytes ({self.got}+) than the {self.want} of the "
                                       f"range: a short or broken answer")
                return None
            raise AssertionError(self.state)

    def add(self, piece):
        """Add ``piece`` to the body's ``parts`` (small pieces gathered in a
        bytearray: a body that comes a few bytes at a time costs its size,
        not an object per piece)."""
        parts = self.parts
        if len(piece) >= 65536:
            parts.append(piece)
        elif parts and type(parts[-1]) is bytearray and len(parts[-1]) < 1 << 20:
            parts[-1] += piece
        else:
            parts.append(bytearray(piece))

    def redirect(self, location):
        """A redirect answered the request at the head: asked again where it
        leads after this round (the connection goes on when it is kept)."""
        self.redirects.append((self.sent.popleft(), location))
        return _REDIRECTED

    def problem(self, text):
        n = self.sent[0]
        url, start, stop = self.requests[n]
        e = BadInput(f"{url}: bytes {start}-{stop - 1}: {text}")
        e.request = n
        return e

    def read_head(self):
        buf, pos = self.buf, self.pos
        frm = pos + max(0, self.scanned - 2)  # (what was searched before has no end of the head)
        end = buf.find(b"\n\r\n", frm, pos + MAX_HEAD)
        end2 = buf.find(b"\n\n", frm, end if end >= 0 else pos + MAX_HEAD)  # (bare newlines: before it only)
        if end2 >= 0:
            end, stop = end2, end2 + 2
        elif end >= 0:
            stop = end + 3
        else:
            if not self.checked:  # (no line end in what was searched before)
                line_end = buf.find(b"\n", pos + self.scanned)
                if line_end >= 0 or len(buf) - pos > MAX_HEAD:
                    self.check_status(buf[pos:line_end + 1 if line_end >= 0 else pos + 60])
                    self.checked = True
            if len(buf) - pos > MAX_HEAD:
                raise self.problem(f"an answer with more than {MAX_HEAD} bytes of headers")
            self.scanned = len(buf) - pos
            return False
        self.scanned, self.checked = 0, False
        lines = buf[pos:end + 1].split(b"\n")
        parts = self.check_status(lines[0])
        if len(lines) - 2 > MAX_HEADERS:
            raise self.problem(f"an answer with more than {MAX_HEADERS} header lines")
        headers = {}
        for h in lines[1:-1]:
            if len(h) > MAX_LINE:
                raise self.problem(f"a header line of more than {MAX_LINE} bytes")
            name, sep, value = h.decode("latin-1").partition(":")
            if sep:
                name = name.strip().lower()
                value = value.strip()
                if name not in headers:
                    headers[name] = value
                elif name in ("content-range", "content-length"):  # (given twice: the same, or which is the body?)
                    if headers[name] != value:
                        raise self.problem(f"an answer with two different {name} headers ({headers[name][:60]!r} "
                                           f"and {value[:60]!r}): refusing an answer framed two ways")
                else:
                    headers[name] = f"{headers[name]}, {value}"
        if type(buf) is bytearray:  # (what follows the head as bytes again: a body is sliced from it)
            self.buf, self.pos = bytes(memoryview(buf)[stop:]), 0
        else:
            self.pos = stop
        status = int(parts[1])
        if 100 <= status < 200:  # an interim answer: the real one follows (a bounded number of bytes of them)
            self.heads += stop - pos
            if self.heads > MAX_HEAD:
                raise self.problem(f"an answer with more than {MAX_HEAD} bytes of interim (1xx) answers")
            return True
        self.headers = headers
        self.framing(parts[0], status, headers)
        return True

    def check_status(self, line):
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
            raise self.problem(f"not an HTTP answer ({bytes(line[:60])!r}): a server that does not frame its "
                               f"answers (bytes after an answer's Content-Length?)")
        return parts

    def framing(self, version, status, headers):
        """Check the answer's head against the range asked for; set how its body is read."""
        conn = self.conn
        tokens = headers.get("connection", "").lower()
        conn.alive = "close" not in tokens and (version != b"HTTP/1.0" or "keep-alive" in tokens)
        url, start, stop = self.requests[self.sent[0]]
        if 300 <= status < 400 and status != 304 and headers.get("location"):
            size = headers.get("content-length", "")
            if is_decimal(size) and int(size) <= 1 << 16 and "transfer-encoding" not in headers:
                self.state, self.want = "skip", int(size)
            else:
                conn.alive = False
                self.state, self.want = "skip", 0
            return
        if status == 200:
            conn.alive = False
            raise self.problem("the server ignored the range request (status 200, the whole shard): it cannot "
                               "serve one sample; use a server that honours Range (nginx, S3, GCS), or a local "
                               "copy")
        if status != 206:
            conn.alive = False
            raise self.problem(f"range request failed with HTTP status {status}")
        unit, _, rng = headers.get("content-range", "").partition(" ")
        span = rng.partition("/")[0]
        if unit != "bytes" or span != f"{start}-{stop - 1}":
            conn.alive = False
            raise self.problem(f"the server answered bytes {span or '?'} to a request for {start}-{stop - 1}: "
                               f"refusing a range it did not honour")
        coding = headers.get("content-encoding", "identity").lower()
        if coding not in ("identity", ""):
            conn.alive = False
            raise self.problem(f"the server sent the range {coding}-encoded (asked for identity): refusing it")
        want = stop - start
        self.want, self.parts, self.got = want, [], 0
        coding = headers.get("transfer-encoding")
        if coding is not None:
            if coding.lower() != "chunked":  # (gzip, chunked: the bytes are not the range's)
                conn.alive = False
                raise self.problem(f"the server sent the range with Transfer-Encoding {coding[:60]!r} (only "
                                   f"chunked is read): refusing it")
            if "content-length" in headers:  # (framed two ways: read as chunked, as RFC 9112 says, not kept)
                conn.alive = False
            self.state, self.chunk = "chunked", None
        elif is_decimal(headers.get("content-length", "")):
            if int(headers["content-length"]) != want:
                conn.alive = False
                raise self.problem(f"the server answered {headers['content-length']} bytes (Content-Length) to "
                                   f"a request for {want}: refusing a range it did not honour")
            self.state = "body"
        elif "content-length" in headers:  # (RFC 9112: an invalid one is an error, not a body up to the close)
            conn.alive = False
            raise self.problem(f"an invalid Content-Length ({headers['content-length'][:60]!r})")
        else:
            conn.alive = False
            self.state = "close"

    def read_chunks(self):
        """The body of a chunked answer once whole (its trailers read), else ``None``."""
        while True:
            buf, pos = self.buf, self.pos
            if self.chunk is None:  # a chunk-size line
                end = buf.find(b"\n", pos)
                if end < 0:
                    if len(buf) - pos > 1024:
                        raise self.problem("a broken chunked answer")
                    return None
                size = bytes(buf[pos:end].split(b";", 1)[0].strip())
                if not size or size.translate(None, b"0123456789abcdefABCDEF"):  # (int() takes 0x, +, _)
                    raise self.problem(f"a broken chunked answer (chunk size {size[:20]!r})")
                n = int(size, 16)
                self.pos = end + 1
                if n == 0:
                    self.chunk = -1
                    continue
                if self.got + n > self.want:
                    raise self.problem(f"the server sent more bytes than the {self.want} of the range")
                self.chunk = n
                continue
            if self.chunk == -1:  # trailers, up to an empty line
                end = buf.find(b"\n", pos)
                if end < 0:
                    if len(buf) - pos > MAX_HEAD:
                        raise self.problem("a broken chunked answer")
                    return None
                line = buf[pos:end + 1]
                self.pos = end + 1
                self.heads += end + 1 - pos
                if self.heads > MAX_HEAD:
                    raise self.problem(f"a chunked answer with more than {MAX_HEAD} bytes of trailers")
                if line in (b"\r\n", b"\n"):
                    body = b"".join(self.parts)
                    self.parts, self.chunk = [], None
                    if len(body) != self.want:
                        raise self.problem(f"the server sent fewer bytes ({len(body)}) than the {self.want} of "
                                           f"the range: a short or broken answer")
                    return body
                continue
            if self.chunk > 0:  # the chunk's bytes, taken as they come (never gathered in buf)
                take = min(len(buf) - pos, self.chunk)
                self.add(buf[pos:pos + take])
                self.got += take
                self.chunk -= take
                self.pos = pos + take
                if self.chunk:
                    return None
                continue
            if len(buf) - pos < 2:  # the line end after a chunk
                return None
            if buf[pos:pos + 2] != b"\r\n":
                raise self.problem("a broken chunked answer (the connection broke in a chunk)")
            self.pos = pos + 2
            self.chunk = None

    def broke(self, why):
        """The connection ended (``why``: its error, ``None`` for a close by
        the server) with answers not read."""
        if not self.sent:
            self.requeue()
            return
        if self.state == "close" and why is None:  # the body ended with the connection, as it may
            body = b"".join(self.parts)
            if len(body) != self.want:
                raise self.problem(f"the server sent fewer bytes ({len(body)}) than the {self.want} of the "
                                   f"range: a short or broken answer")
            n = self.sent.popleft()
            self.answered(n, body)
            self.requeue()
            return
        text = why or "closed by the server"
        if self.state == "head" and not self.started:  # no byte of this answer: sent again, once
            if self.fresh or self.retried:
                raise self.problem(f"the connection broke before the answer ({text})")
            self.retried = True
            self.requeue()
            return
        if self.state == "head":
            raise self.problem("the connection broke in the answer's headers" + (f" ({why})" if why else ""))
        if self.state == "body":
            got = self.got + len(self.buf) - self.pos
            if why is None:
                raise self.problem(f"the server sent fewer bytes ({got}) than the {self.want} of the range: a "
                                   f"short or broken answer")
            raise self.problem(f"the connection broke in the answer's body ({why})")
        if self.state == "chunked":
            raise self.problem("a broken chunked answer (the connection broke in a chunk)")
        raise self.problem(f"the connection broke ({text})")

    def close(self, keep):
        """The flow is over: its connection kept when it is quiet and alive."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        if self.error is None and not self.sent:
            if self.pos < len(self.buf) or not conn.quiet():
                self.error = _error(self.requests, self.ns[-1], "the server sent more bytes than its answer said "
                                    "(bytes after its Content-Length): refusing a server that does not frame its "
                                    "answers")
            elif conn.alive:
                self.pool._give(conn, keep)
                return
        conn.close()


class Pool:
    """The kept-alive connections of this process."""

    def __init__(self):
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.idle = OrderedDict()  # id -> _Conn, least recently used first
        self.targets = {}

    # ------------------------------------------------------------ connections

    def _take(self, origin, timeout, new=False):
        """A connection to ``origin``: an idle one the server has not
        closed meanwhile (those it has are closed here), else (``new``:
        always) a new one."""
        while not new:
            with self.lock:
                c = next((c for c in self.idle.values() if c.origin == origin), None)
                if c is None:
                    break
                del self.idle[id(c)]
            if c.quiet() and c.alive:
                c.sock.settimeout(timeout)
                return c
            c.close()
        return _Conn(origin, timeout)

    def _give(self, conn, limit):
        if os.getpid() != self.pid:
            return
        with self.lock:
            self.idle[id(conn)] = conn
            while len(self.idle) > max(limit, 0):
                _, old = self.idle.popitem(last=False)
                old.close()

    def close(self):
        """Close the idle connections (the next call opens new ones)."""
        with self.lock:
            conns, self.idle = list(self.idle.values()), OrderedDict()
        for c in conns:
            c.close()

    def open_connections(self):
        with self.lock:
            return len(self.idle)

    def target(self, url):
        t = self.targets.get(url)
        if t is None:
            if len(self.targets) > 4096:
                self.targets.clear()
            t = self.targets[url] = _Target(url)
        return t

    # ------------------------------------------------------------ requests

    def fetch(self, requests, concurrency=8, check=None, timeout=60.0, keep=32, done=None):
        """The bytes of each ``(url, start, stop)`` of ``requests``, in order.
        ``check(url, headers)`` sees each answer's headers (a dict, lower-case
        names); ``keep``: idle connections kept afterwards; ``done(n, data)``,
        when given, is called with each answer as it comes (its result is
        put in the list instead of the bytes).  The requests redirected are
        asked again together where they lead, at most :data:`MAX_REDIRECTS`
        times.  A :class:`BadInput` names the first request that failed
        (``e.request``: its position)."""
        from urllib.parse import urljoin

        out = [None] * len(requests)
        timeout = timeout if timeout and timeout > 0 else None
        ns, asked = list(range(len(requests))), requests
        for _ in range(MAX_REDIRECTS + 1):
            redirected = self._round(asked, ns, requests, out, check, done, concurrency, timeout, keep)
            if not redirected:
                return out
            again = []
            for k, location in redirected:
                try:
                    to = urljoin(asked[k][0], location)
                    if to.partition("://")[0].lower() not in _OK_SCHEMES:
                        raise ValueError("not http(s)")
                    self.target(to)
                except (ValueError, BadInput):
                    raise _error(requests, ns[k], f"the server redirects to {location[:200]!r}, not an http(s) "
                                 f"URL with a host") from None
                again.append((k, to))
            ns, asked = [ns[k] for k, _ in again], [(to, asked[k][1], asked[k][2]) for k, to in again]
        raise _error(requests, ns[0], f"more than {MAX_REDIRECTS} redirects")

    def _round(self, asked, ns, requests, out, check, done, concurrency, timeout, keep):
        """Ask ``asked`` (the URLs where ``requests[ns[k]]`` lead), each
        origin's over its shares of connections; ``[(k, location)]`` of the
        answers that redirect, in order."""
        ids = None if asked is requests else ns
        by_origin = {}
        for k, (url, start, stop) in enumerate(asked):
            try:
                t = self.target(url)
            except BadInput as e:
                e.request = ns[k]
                raise
            by_origin.setdefault(t.origin, []).append(k)
        flows = []
        for origin, ks in by_origin.items():
            parts = max(1, min(concurrency, -(-len(ks) // SHARE)))
            flows += [_Flow(self, origin, ks[p::parts], asked, out, check, done, timeout, ids, requests)
                      for p in range(parts)]
        try:
            self._run(flows, timeout, concurrency, keep)
        finally:
            for f in flows:
                f.close(keep)
        errors = [f.error for f in flows if f.error is not None]
        if errors:
            e = min(errors, key=lambda e: getattr(e, "request", 0))
            e.request = ns[getattr(e, "request", 0)]
            raise e
        return sorted(r for f in flows for r in f.redirects)

    def _run(self, flows, timeout, most=None, keep=32):
        """Drive ``flows`` until each is finished or failed (``flow.error``),
        at most ``most`` at once (the shares of every origin: one is started
        when another has ended, and its connection is kept for it); a
        connection without a byte for ``timeout`` seconds has broken."""
        if len(flows) == 1:  # one connection: its socket waits (in timeout mode), no selector
            f = flows[0]
            _act(f, f.start_flow)
            while not f.finished and f.conn is not None:
                _act(f, f.readable)
            return
        waiting = deque(flows)
        most = len(flows) if most is None else max(1, most)
        failed = False
        sel = selectors.DefaultSelector()
        live = {}

        def after(f):
            nonlocal failed
            _watch(f, live, sel)
            if f.error is not None:
                failed = True
            elif f.finished:
                f.close(keep)  # (its connection idle for the next share)

        try:
            while live or (waiting and not failed):
                while waiting and not failed and len(live) < most:
                    f = waiting.popleft()
                    _act(f, f.start_flow)
                    if f.error is not None:  # (a connection that cannot be made: not tried again by the next share)
                        return
                    after(f)
                if not live:
                    continue
                wait = None
                if timeout is not None:
                    wait = max(0.0, min(f.last for f in live.values()) + timeout - time.monotonic())
                for key, _ in sel.select(wait):
                    f = live.get(key.fd)
                    if f is not None:
                        _act(f, f.readable)
                        after(f)
                if timeout is not None:
                    now = time.monotonic()
                    for f in [f for f in live.values() if now - f.last >= timeout]:
                        f.last = now
                        _act(f, lambda f=f: f.broke("timed out"))
                        after(f)
        finally:
            sel.close()


def _act(f, action):
    """Run ``action`` of flow ``f``; an error becomes ``f.error`` (its
    connection closed)."""
    try:
        action()
    except _Failed as e:  # a send that failed: the connection broke before the answers
        try:
            f.broke(e.args[0])
        except BadInput as b:
            f.error = b
        except _Failed as e2:
            f.error = f.problem(f"the connection broke before the answer ({e2.args[0]})")
    except BadInput as e:
        if getattr(e, "request", None) is None:
            e.request = f.sent[0] if f.sent else f.todo[0] if f.todo else f.ns[0]
        f.error = e
    if f.error is not None and f.conn is not None:
        f.conn.close()
        f.conn = None


def _watch(f, live, sel):
    """Keep the selector on flow ``f``'s connection (which a retry or a
    server's close may have replaced), and off it when the flow is over."""
    if f.fd is not None and (f.conn is not f.watched or f.finished):
        live.pop(f.fd, None)
        try:
            sel.unregister(f.fd)
        except (KeyError, ValueError):
            pass
        f.fd = f.watched = None
    if not f.finished and f.conn is not None and f.fd is None:
        f.fd, f.watched = f.conn.sock.fileno(), f.conn
        live[f.fd] = f
        f.last = time.monotonic()
        sel.register(f.fd, selectors.EVENT_READ)


def _error(requests, n, problem, request=None):
    url, start, stop = requests[n]
    e = BadInput(f"{url}: bytes {start}-{stop - 1}: {problem}")
    e.request = n if request is None else request
    return e


def probe(url, timeout=60.0):
    """Whether the server of ``url`` honours Range: one request for its first
    byte; a :class:`BadInput` saying what to use instead when it does not."""
    try:
        pool().fetch([(url, 0, 1)], concurrency=1, timeout=timeout, keep=4)
    except BadInput as e:
        if "ignored the range request" in str(e):
            raise BadInput(f"{url}: the server ignores Range requests (it answered the whole file to a request for "
                           f"one byte): IndexedDataset could not read one sample from it; serve the shards with a "
                           f"server that honours Range (nginx, S3, GCS; not python -m http.server or tarserve), or "
                           f"index a local copy") from None
        raise


_POOL = [None]
_POOL_LOCK = [threading.Lock()]


def pool():
    """This process's :class:`Pool` (a new one in a forked child)."""
    p = _POOL[0]
    if p is None or p.pid != os.getpid():
        with _POOL_LOCK[0]:
            p = _POOL[0]
            if p is None or p.pid != os.getpid():
                p = _POOL[0] = Pool()
    return p


def _after_fork_in_child():
    # the parent's connections are the parent's: their sockets closed here (the parent's stay open), new locks
    old = _POOL[0]
    _POOL[0] = None
    _POOL_LOCK[0] = threading.Lock()
    if old is not None:
        for c in list(old.idle.values()):
            c.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
