"""The in-process HTTP client of random access: byte ranges of ``http(s)://``
shards over kept-alive, pipelined HTTP/1.1 connections (the scheme table's
``builtin`` RANGE and RANGES of http and https, :mod:`tarproc.runtime.schemes`).

A process has one :class:`Pool` (:func:`pool`; made again in a forked
child, which never touches its parent's sockets): connections by origin,
kept between calls (``get_many`` batches, ``__getitems__`` of a DataLoader
worker), at most ``open_files`` of them idle (the least recently used
closed first).  :meth:`Pool.fetch` spreads the requests of a call over at
most ``concurrency`` connections, one thread each; on a connection that the
server keeps alive the requests of a share are sent together (pipelined,
:data:`DEPTH` at a time), so a thread pays one wake-up per share, not per
request.  (``http.client`` over threads was measured at half the speed of
one ``http.client`` loop: its header parser and the GIL; a pipelined reader
of our own reaches 3x.)  Every answer is checked before its bytes are
used: status 206, ``Content-Range`` exactly the range asked for, a body of
exactly that length, nothing after it; anything else is one
:class:`~tarproc.errors.BadInput` naming the URL and range (a request
whose connection broke before its answer began is sent again once, on a
new connection).  Redirects to http(s) are followed (at most
:data:`MAX_REDIRECTS`), and the answer at the end is checked the same way.

    data = pool().fetch([("http://host/a.tar", 0, 1024)], concurrency=8)[0]
"""

import os
import socket
import threading
from collections import OrderedDict

from ..errors import BadInput

#: Requests sent at once on a kept-alive connection before their answers are read.
DEPTH = 16
#: Requests of one call a connection takes before another one is used.
SHARE = 8
#: Redirects followed for one range.
MAX_REDIRECTS = 10
#: Header lines and bytes of one header line accepted in an answer.
MAX_HEADERS, MAX_LINE = 200, 65536

_OK_SCHEMES = ("http", "https")


class _Failed(Exception):
    """A request that got no answer on a connection that broke (sent again)."""


class _Redirect(Exception):
    def __init__(self, location):
        self.location = location


class _Target:
    """A URL split for requests: origin ``(scheme, host, port)``, the request
    target (bytes), the Host header and the Authorization header (user:password@)."""

    __slots__ = ("origin", "path", "host", "auth")

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

    def request(self, start, stop):
        head = (b"GET " + self.path + b" HTTP/1.1\r\nHost: " + self.host.encode("idna" if not self.host.isascii()
                                                                                else "ascii")
                + b"\r\nRange: bytes=%d-%d\r\nAccept-Encoding: identity\r\nUser-Agent: tarproc\r\n" % (start, stop - 1))
        if self.auth:
            head += b"Authorization: " + self.auth + b"\r\n"
        return head + b"\r\n"


class _Conn:
    """One connection: its socket, a buffered reader, and whether the server
    keeps it alive (learnt from its first answer: only then are requests
    pipelined on it)."""

    __slots__ = ("origin", "sock", "rfile", "alive", "pid")

    def __init__(self, origin, timeout):
        scheme, host, port = origin
        try:
            sock = socket.create_connection((host, port), timeout)
        except OSError as e:
            raise BadInput(f"{scheme}://{host}:{port}: cannot connect: {e.strerror or e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            import ssl

            try:
                sock = _ssl_context().wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise BadInput(f"https://{host}:{port}: TLS failed: {e}") from None
        self.origin, self.sock, self.alive, self.pid = origin, sock, None, os.getpid()
        self.rfile = sock.makefile("rb", buffering=1 << 16)

    def close(self):
        for f in (self.rfile, self.sock):
            try:
                f.close()
            except OSError:
                pass

    def quiet(self):
        """Whether nothing came after the last answer (bytes more would be a
        lying server's: they would be taken for the next answer)."""
        try:
            self.sock.settimeout(0)
            try:
                extra = self.rfile.peek(1)
            except (BlockingIOError, OSError):
                extra = b""
            finally:
                self.sock.settimeout(self.sock_timeout())
        except OSError:
            return False
        return not extra

    def sock_timeout(self):
        return _TIMEOUTS.get(self.origin)


_TIMEOUTS = {}
_SSL = []


def _ssl_context():
    if not _SSL:
        import ssl

        _SSL.append(ssl.create_default_context())
    return _SSL[0]


class Pool:
    """The kept-alive connections of this process, and the threads that use them."""

    def __init__(self):
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.idle = OrderedDict()  # id -> _Conn, least recently used first
        self.targets = {}
        self.executor = None
        self.threads = 0

    # ------------------------------------------------------------ connections

    def _take(self, origin, timeout):
        with self.lock:
            for k, c in self.idle.items():
                if c.origin == origin:
                    del self.idle[k]
                    return c
        _TIMEOUTS[origin] = timeout
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
        when given, is called with each answer as it comes, in the thread
        that read it (its result is put in the list instead of the bytes).  A
        :class:`BadInput` names the first request that failed (``e.request``:
        its position)."""
        out = [None] * len(requests)
        by_origin = {}
        for n, (url, start, stop) in enumerate(requests):
            try:
                t = self.target(url)
            except BadInput as e:
                e.request = n
                raise
            by_origin.setdefault(t.origin, []).append(n)
        shares = []
        for origin, ns in by_origin.items():
            parts = max(1, min(concurrency, -(-len(ns) // SHARE)))  # (a thread hand-off costs more than a request)
            shares += [(origin, ns[p::parts]) for p in range(parts)]
        timeout = timeout if timeout and timeout > 0 else None
        if len(shares) == 1:
            self._share(shares[0][0], shares[0][1], requests, out, check, timeout, keep, done)
        else:
            ex = self._executor(concurrency)
            futures = [ex.submit(self._share, origin, ns, requests, out, check, timeout, keep, done)
                       for origin, ns in shares]
            errors = []
            for f in futures:
                try:
                    f.result()
                except BadInput as e:
                    errors.append(e)
            if errors:
                raise min(errors, key=lambda e: getattr(e, "request", 0))
        return out

    def _executor(self, n):
        from concurrent.futures import ThreadPoolExecutor

        with self.lock:
            if self.executor is None or self.threads < n:
                if self.executor is not None:
                    self.executor.shutdown(wait=False)
                self.executor = ThreadPoolExecutor(n, thread_name_prefix="tarproc-ranges")
                self.threads = n
            return self.executor

    def _share(self, origin, ns, requests, out, check, timeout, keep, done=None):
        """Requests ``ns`` (all of ``origin``) over one connection, pipelined
        once the server is seen to keep it alive."""
        todo = list(ns)
        conn = None
        retried = False
        try:
            while todo:
                if conn is None:
                    conn = self._take(origin, timeout)
                    fresh = conn.alive is None
                depth = DEPTH if conn.alive else 1
                batch = todo[:depth]
                try:
                    self._exchange(conn, batch, requests, out, check, done)
                except _Failed as e:
                    conn.close()
                    conn = None
                    done = e.args[0]
                    todo = todo[done:]
                    if done == 0 and (fresh or retried):  # a new connection that broke at once: no retry
                        n = todo[0]
                        raise _error(requests, n, f"the connection broke before the answer ({e.args[1]})") from None
                    retried = done == 0
                    continue
                except BaseException:
                    conn.close()
                    conn = None
                    raise
                retried = False
                todo = todo[len(batch):]
                if not conn.alive:
                    conn.close()
                    conn = None
            if conn is not None and not conn.quiet():
                n = ns[-1]
                conn.close()
                conn = None
                raise _error(requests, n, "the server sent more bytes than its answer said (bytes after its "
                                          "Content-Length): refusing a server that does not frame its answers")
        finally:
            if conn is not None:
                self._give(conn, keep)

    def _exchange(self, conn, batch, requests, out, check, done=None):
        """Send the requests of ``batch`` on ``conn``, read their answers into
        ``out``; :class:`_Failed` ``(answers read, why)`` when the connection
        broke before an answer began."""
        try:
            conn.sock.sendall(b"".join(self.target(requests[n][0]).request(requests[n][1], requests[n][2])
                                       for n in batch))
        except OSError as e:
            raise _Failed(0, e.strerror or str(e)) from None
        for k, n in enumerate(batch):
            url, start, stop = requests[n]
            try:
                out[n] = _answer(conn, url, start, stop, check, k)
            except _Redirect as r:
                conn.alive = False  # (the rest of the batch is sent again, on another connection)
                out[n] = self._follow(url, r.location, start, stop, check, _TIMEOUTS.get(conn.origin), n)
                if k + 1 < len(batch):
                    raise _Failed(k + 1, "redirect") from None
            except BadInput as e:
                e.request = n
                raise
            if done is not None:
                try:
                    out[n] = done(n, out[n])
                except BadInput as e:
                    e.request = n
                    raise
            if not conn.alive and k + 1 < len(batch):  # the server closes it: the rest again, on a new one
                raise _Failed(k + 1, "closed by the server")

    def _follow(self, url, location, start, stop, check, timeout, n):
        """The range read from where ``url`` redirects (each hop's answer checked)."""
        from urllib.parse import urljoin

        seen = url
        if check is not None:  # the stamp is the indexed URL's
            check = (lambda fn: lambda _at, headers: fn(url, headers))(check)
        for _ in range(MAX_REDIRECTS):
            nxt = urljoin(seen, location)
            if nxt.partition("://")[0].lower() not in _OK_SCHEMES:
                raise _error([(url, start, stop)], 0, f"the server redirects to {nxt!r}, not an http(s) URL",
                             request=n)
            seen = nxt
            t = _Target(nxt)
            conn = self._take(t.origin, timeout)
            try:
                conn.sock.sendall(t.request(start, stop))
                data = _answer(conn, nxt, start, stop, check, 0)
            except _Redirect as r:
                conn.close()
                location = r.location
                continue
            except _Failed as e:
                conn.close()
                raise _error([(nxt, start, stop)], 0, f"the connection broke ({e.args[1]})", request=n) from None
            except BaseException:
                conn.close()
                raise
            if conn.alive and conn.quiet():
                self._give(conn, 4)
            else:
                conn.close()
            return data
        raise _error([(url, start, stop)], 0, f"more than {MAX_REDIRECTS} redirects", request=n)


def _error(requests, n, problem, request=None):
    url, start, stop = requests[n]
    e = BadInput(f"{url}: bytes {start}-{stop - 1}: {problem}")
    e.request = n if request is None else request
    return e


def _answer(conn, url, start, stop, check, k):
    """The body of the next answer on ``conn``, checked against the range
    ``start``..``stop`` asked of ``url``.  ``k``: answers already read on
    this connection in this exchange (a break before the first byte of an
    answer is :class:`_Failed` ``(k, why)``)."""
    rfile = conn.rfile
    problem = lambda text: _error([(url, start, stop)], 0, text)  # noqa: E731
    while True:
        try:
            line = rfile.readline(MAX_LINE)
        except OSError as e:
            raise _Failed(k, e.strerror or str(e)) from None
        if not line:
            raise _Failed(k, "closed by the server")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
            raise problem(f"not an HTTP answer ({bytes(line[:60])!r}): a server that does not frame its answers "
                          f"(bytes after an answer's Content-Length?)")
        status = int(parts[1])
        headers = {}
        try:
            for _ in range(MAX_HEADERS):
                h = rfile.readline(MAX_LINE)
                if not h.endswith(b"\n"):
                    raise problem("the connection broke in the answer's headers")
                if h in (b"\r\n", b"\n"):
                    break
                name, sep, value = h.decode("latin-1").partition(":")
                if sep:
                    name = name.strip().lower()
                    value = value.strip()
                    headers[name] = f"{headers[name]}, {value}" if name in headers and name != "content-range" \
                        else value
            else:
                raise problem(f"an answer with more than {MAX_HEADERS} header lines")
        except OSError as e:
            raise problem(f"the connection broke in the answer's headers ({e.strerror or e})") from None
        if 100 <= status < 200:
            continue
        break
    version = parts[0]
    tokens = headers.get("connection", "").lower()
    conn.alive = "close" not in tokens and (version != b"HTTP/1.0" or "keep-alive" in tokens)
    if 300 <= status < 400 and status != 304 and headers.get("location"):
        _skip_body(conn, headers, status)
        raise _Redirect(headers["location"])
    if status == 200:
        conn.alive = False
        raise problem("the server ignored the range request (status 200, the whole shard): it cannot serve one "
                      "sample; use a server that honours Range (nginx, S3, GCS), or a local copy")
    if status != 206:
        conn.alive = False
        raise problem(f"range request failed with HTTP status {status}")
    unit, _, rng = headers.get("content-range", "").partition(" ")
    span = rng.partition("/")[0]
    if unit != "bytes" or span != f"{start}-{stop - 1}":
        conn.alive = False
        raise problem(f"the server answered bytes {span or '?'} to a request for {start}-{stop - 1}: refusing a "
                      f"range it did not honour")
    coding = headers.get("content-encoding", "identity").lower()
    if coding not in ("identity", ""):
        conn.alive = False
        raise problem(f"the server sent the range {coding}-encoded (asked for identity): refusing it")
    want = stop - start
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = _chunked(rfile, want, problem)
        elif headers.get("content-length", "").isdigit():
            if int(headers["content-length"]) != want:
                conn.alive = False
                raise problem(f"the server answered {headers['content-length']} bytes (Content-Length) to a "
                              f"request for {want}: refusing a range it did not honour")
            body = rfile.read(want)
        else:  # the body ends with the connection
            conn.alive = False
            body = rfile.read(want + 1)
    except OSError as e:
        conn.alive = False
        raise problem(f"the connection broke in the answer's body ({e.strerror or e})") from None
    if len(body) != want:
        conn.alive = False
        what = "fewer" if len(body) < want else "more"
        raise problem(f"the server sent {what} bytes ({len(body)}{'+' if what == 'more' else ''}) than the "
                      f"{want} of the range: a short or broken answer")
    if check is not None:
        check(url, headers)
    return body


def _chunked(rfile, want, problem):
    parts, got = [], 0
    while True:
        line = rfile.readline(1024)
        size = line.split(b";", 1)[0].strip()
        try:
            n = int(size, 16)
        except ValueError:
            raise problem("a broken chunked answer") from None
        if n == 0:
            break
        if got + n > want:
            raise problem(f"the server sent more bytes than the {want} of the range")
        piece = rfile.read(n)
        if len(piece) != n or rfile.read(2) != b"\r\n":
            raise problem("a broken chunked answer (the connection broke in a chunk)")
        parts.append(piece)
        got += n
    for _ in range(MAX_HEADERS):  # trailers
        if rfile.readline(MAX_LINE) in (b"\r\n", b"\n", b""):
            break
    return b"".join(parts)


def _skip_body(conn, headers, status):
    """Read past a redirect's body (a small one) so the connection can go on."""
    n = headers.get("content-length", "")
    if n.isdigit() and int(n) <= 1 << 16:
        conn.rfile.read(int(n))
    else:
        conn.alive = False


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
