"""Serve tar shards over HTTP, transformed on read (``tarserve``).

``GET /NAME`` streams the shard ``PREFIX/NAME`` through the same stages as
``tarcat [selection] | tarproc [--map F | -c CMD]``, so a response is byte
for byte the offline output::

    import tarproc
    with tarproc.serve("shards/", map="resize.py:resize", port=0, background=True) as server:
        print(server.url)          # http://127.0.0.1:PORT/, GET /shard-0000.tar
    # or, blocking until stop() (the tarserve command): tarproc.serve("shards/", port=8080)

**One process per response.**  The front is a small HTTP/1.1 server on the
standard library's sockets, one thread per connection.  Each response is
computed by a fresh child process (``tarproc.server.transform.job_main``,
in its own process group) that reads the shard and writes the tar to a pipe;
the connection's thread relays the pipe as HTTP chunks.  That gives:

* backpressure end to end: a slow client blocks ``send``, the thread stops
  reading the pipe, the child blocks on its write, its source and workers
  stop; memory per stream is a pipe plus the library's bounded windows;
* a clean stop: a client that disconnects (or stalls past the timeout), or a
  server that gives up draining, kills the child's process group (source
  command, ``--map`` workers; ``-c`` commands are ended by the child's
  cleanup), nothing is left behind;
* no state shared between streams (the library's stall hooks, the fork of
  ``--map`` workers happen in a single-threaded child, not next to other
  requests' threads).

The price is the start of a Python process per shard (~50 ms here): small
next to a shard's transfer.

**Failure is visible.**  Headers are sent when the child produced its first
bytes; a child that fails before that gives ``502``.  After that the body is
chunked, and a failure (source error, more than ``max_failures`` failed
samples, a stop) closes the connection without the terminating zero-size
chunk: every HTTP client reports an incomplete body (``curl`` exit 18), never
a short tar that looks complete.  HTTP/1.0 requests (no chunked encoding) are
refused with 505.

**Safety.**  Only names under the prefix are served: a name is percent-decoded
strictly, then must be ``[A-Za-z0-9._~+=,@-]`` segments joined by ``/``, no
empty, ``.`` or ``..`` segment, none starting with a dot (hidden files and the
partial outputs of writers), no query or fragment; with a local prefix the
resolved path (symbolic links followed) must stay inside it.  Request line,
headers and names are bounded; the request head must arrive within
``header_timeout``; a client that reads nothing for ``client_timeout`` is
dropped; ``token`` requires ``Authorization: Bearer TOKEN`` (compared in
constant time); above ``max_clients`` connections the answer is ``503`` with
``Retry-After``.
"""

import hmac
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from ..core.limits import safe_text
from ..errors import UsageError
from .names import SHARD_SUFFIXES, check_prefix, decode_name

#: Limits of a request head.
MAX_REQUEST_LINE = 4096
MAX_HEAD = 16384
MAX_HEADERS = 64
#: Entries of a ``GET /`` listing.
MAX_LISTING = 100_000
#: Bytes relayed per chunk.
CHUNK = 256 * 1024
#: Connections above max_clients that still get a 503 (beyond: closed at once).
OVERFLOW = 64
#: Seconds, in all, that a closing connection reads (and drops) what the
#: client still sends, so that closing does not reset the answer; a client
#: that keeps sending cannot hold its connection longer than this.
LINGER = 2.0

_TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 414: "URI Too Long",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 502: "Bad Gateway",
            503: "Service Unavailable", 504: "Gateway Timeout", 505: "HTTP Version Not Supported"}


# ---------------------------------------------------------------- the server


class _Refused(Exception):
    def __init__(self, status, message, headers=()):
        super().__init__(message)
        self.status = status
        self.headers = list(headers)


class Server:
    """An HTTP server of transformed shards (see the module documentation).
    ``start()`` listens and serves in background threads; ``stop(drain)``
    stops accepting, lets responses in flight finish for up to ``drain``
    seconds, then cuts the rest (their clients see an error).  ``strict``
    (the default) fails a response whose shard ends without the
    end-of-archive marker: its client cannot see a warning.  ``on_bad_shard``
    ``"skip"`` serves a damaged or unreadable shard as an empty tar, and
    ``"partial"`` as the samples read before the damage, instead of a failed
    response (a line in the server's log says which, where and what)."""

    def __init__(self, prefix, *, map=None, command=None, parallel=None, count=None, skip=0, slice=None,
                 fields=None, rekey=None, shuffle=0, seed=None, max_failures=0, strict=True, batch=32,
                 on_bad_shard="fail", host="127.0.0.1", port=8080, token=None, max_clients=16, client_timeout=60.0,
                 header_timeout=10.0, drain_timeout=30.0, stall_timeout=300.0, log=None, quiet=False, settings=None):
        from ..stages import basic as S

        self.scheme, self.root = check_prefix(prefix)
        self.prefix = prefix
        if map is not None and command is not None:
            raise UsageError("give at most one of --map and -c")
        if map is not None and not isinstance(map, str):
            map = _function_spec(map)
        if map is not None:
            from ..stages.function import load_function

            where, _, fn = map.rpartition(":")
            if where.endswith(".py") or os.sep in where:
                map = os.path.abspath(where) + ":" + fn
            load_function(map)  # a clear usage error now, not at the first request
        for flag, value in (("--count", count), ("-p", parallel), ("--max-failures", max_failures)):
            if value is not None and value < 0:
                raise UsageError(f"{flag} must be >= 0")
        if slice:
            S.parse_slice(slice)
        if fields:
            S.parse_fields(fields)
        if rekey:
            S.rekey(rekey)  # a bad pattern ({key.x}) is a usage error now, not a failed response each time
        from ..sources.badshards import POLICIES

        if on_bad_shard not in POLICIES:
            raise UsageError(f"on_bad_shard must be one of {', '.join(POLICIES)}")
        for flag, value, least in (("--client-timeout", client_timeout, 0), ("--header-timeout", header_timeout, 0),
                                   ("--drain-timeout", drain_timeout, None), ("--stall-timeout", stall_timeout, 0)):
            # a finite number of seconds (socket timeouts past a C timeval fail at the first client)
            if not isinstance(value, (int, float)) or not (value > least if least is not None else value >= 0) \
                    or value > 365 * 86400:
                raise UsageError(f"{flag} {value!r}: seconds must be more than 0 (0 allowed for --drain-timeout) "
                                 f"and at most a year")
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise UsageError(f"--port {port}: a port is 0 to 65535 (0: any free port)")
        if max_clients < 1:
            raise UsageError("--max-clients must be >= 1")
        if token is not None and not token:
            raise UsageError("empty token")
        self.options = {"map": map, "command": command, "parallel": parallel or None, "count": count,
                        "skip": skip, "slice": slice, "fields": fields, "rekey": rekey, "shuffle": shuffle,
                        "seed": seed, "max_failures": max_failures, "strict": strict, "batch": batch,
                        "on_bad_shard": on_bad_shard,
                        "settings": None if settings is None else settings.as_dict()}  # (the jobs' settings)
        self.options_json = json.dumps(self.options)
        self.host, self.port = host, port
        self.token = token.encode("utf-8") if token else None
        self.max_clients = max_clients
        self.client_timeout = client_timeout
        self.header_timeout = header_timeout
        self.drain_timeout = drain_timeout
        if not stall_timeout > 0:
            raise UsageError("--stall-timeout must be > 0")
        self.stall_timeout = stall_timeout  # a job (its source) that sends nothing for this long is ended
        self.quiet = quiet
        write_log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        # every line of the log is text shown to people: controls escaped, credentials removed, bounded
        self._log = lambda line: write_log(safe_text(line, lines=True))
        self._lock = threading.Lock()
        self._connections = 0
        self._jobs = set()
        self._stopping = False
        self._idle = threading.Condition(self._lock)
        self._listener = None
        self._thread = None
        self._wake = None

    # -- lifecycle

    @property
    def url(self):
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}/"

    def start(self):
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self.host, self.port))
        except OSError as e:
            listener.close()
            raise UsageError(f"cannot listen on {self.host}:{self.port}: {e.strerror or e}") from None
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._accept_loop, name="tarserve-accept", daemon=True)
        self._thread.start()
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop(drain=0)

    def wait(self):
        """Block until the server has stopped."""
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            while self._connections:
                self._idle.wait(0.5)

    def stop(self, drain=None):
        """Stop accepting; wait up to ``drain`` seconds (default:
        ``drain_timeout``) for the responses in flight, then cut them.
        Returns the number of responses that had to be cut."""
        drain = self.drain_timeout if drain is None else drain
        with self._lock:
            self._stopping = True
        if self._wake is not None:
            try:
                os.write(self._wake[1], b"x")
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join()
        deadline = time.monotonic() + drain
        with self._lock:
            while self._connections and time.monotonic() < deadline:
                self._idle.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            cut = list(self._jobs)
        for proc in cut:
            _kill_job(proc, grace=0)
        with self._lock:
            end = time.monotonic() + 10
            while self._connections and time.monotonic() < end:
                self._idle.wait(0.2)
        return len(cut)

    def _accept_loop(self):
        listener = self._listener
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        try:
            while True:
                events = poller.poll()
                if any(fd == self._wake[0] for fd, _ in events):
                    break
                try:
                    conn, addr = listener.accept()
                except OSError:
                    continue
                with self._lock:
                    n = self._connections
                    if n >= self.max_clients + OVERFLOW:
                        conn.close()  # flooded: no thread, no answer
                        continue
                    self._connections += 1
                busy = n >= self.max_clients
                t = threading.Thread(target=self._connection, args=(conn, addr, busy), daemon=True,
                                     name="tarserve-conn")
                t.start()
        finally:
            listener.close()
            self._listener = None
            for fd in self._wake:
                os.close(fd)
            self._wake = None

    # -- one connection

    def _connection(self, conn, addr, busy):
        peer = f"{addr[0]}:{addr[1]}"
        start = time.monotonic()
        method, target, status, sent = "-", "-", 0, 0
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if busy:
                status = 503
                self._respond(conn, 503, "too many clients, retry later\n",
                              [("Retry-After", "1")], read_head=True)
                return
            try:
                method, target, headers = self._read_head(conn)
                self._authorize(headers)
                if self._stopping:
                    raise _Refused(503, "server is stopping", [("Retry-After", "5")])
                name = _name_or_refuse(target)
                if name == "":
                    status, sent = self._listing(conn, method)
                else:
                    location = self._locate(name)
                    if method == "HEAD":
                        status = 200
                        self._send_head(conn, 200, [("Content-Type", "application/x-tar"),
                                                    ("Transfer-Encoding", "chunked")])
                        _linger_close(conn)
                    else:
                        status, sent = self._stream(conn, name, location)
            except _Refused as r:
                status = r.status
                self._respond(conn, r.status, f"{r}\n", r.headers, head_only=method == "HEAD")
        except (OSError, ValueError) as e:
            if not status:
                status = 0
            if not self.quiet:
                self._log(f"tarserve: {peer}: connection error: {e}")
        finally:
            try:
                conn.close()
            except OSError:
                pass
            with self._lock:
                self._connections -= 1
                self._idle.notify_all()
            if not self.quiet:
                self._log(f"tarserve: {peer} {method} {safe_text(target)} {status} {sent} bytes "
                          f"{time.monotonic() - start:.3f}s")

    def _read_head(self, conn):
        deadline = time.monotonic() + self.header_timeout
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            if len(buf) > MAX_HEAD:
                raise _Refused(431, "request head too large")
            if b"\r\n" not in buf and len(buf) > MAX_REQUEST_LINE:
                raise _Refused(414, "request line too long")
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Refused(408, "request head not received in time")
            conn.settimeout(left)
            try:
                data = conn.recv(4096)
            except socket.timeout:
                raise _Refused(408, "request head not received in time") from None
            if not data:
                raise ConnectionError("client closed before sending a request")
            buf += data
        end = buf.index(b"\r\n\r\n")
        if end > MAX_HEAD:
            raise _Refused(431, "request head too large")
        head = bytes(buf[:end])
        lines = head.split(b"\r\n")
        if len(lines[0]) > MAX_REQUEST_LINE:
            raise _Refused(414, "request line too long")
        if len(lines) - 1 > MAX_HEADERS:
            raise _Refused(431, "too many header fields")
        try:
            method, target, version = lines[0].decode("ascii").split(" ")
        except (UnicodeDecodeError, ValueError):
            raise _Refused(400, "bad request line") from None
        if not version.startswith("HTTP/1."):
            raise _Refused(505, "HTTP/1.1 only")
        if version != "HTTP/1.1":
            raise _Refused(505, "HTTP/1.1 required (failures are shown by the chunked encoding)")
        if method not in ("GET", "HEAD"):
            raise _Refused(405, "only GET and HEAD", [("Allow", "GET, HEAD")])
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            try:
                name = name.decode("ascii")
                value = value.decode("latin-1").strip(" \t")
            except UnicodeDecodeError:
                raise _Refused(400, "bad header field") from None
            if not sep or not _TOKEN_RE.match(name):
                raise _Refused(400, "bad header field")
            key = name.lower()
            if key in headers and key in ("authorization", "host", "content-length", "transfer-encoding"):
                raise _Refused(400, f"repeated header {name}")
            headers[key] = value
        if headers.get("transfer-encoding") or headers.get("content-length", "0") not in ("", "0"):
            raise _Refused(400, "a GET or HEAD request has no body")
        return method, target, headers

    def _authorize(self, headers):
        if self.token is None:
            return
        given = headers.get("authorization", "")
        scheme, _, credentials = given.partition(" ")
        ok = hmac.compare_digest(credentials.strip().encode("latin-1"), self.token)
        if scheme.lower() != "bearer" or not ok:
            raise _Refused(401, "a bearer token is required", [("WWW-Authenticate", 'Bearer realm="tarserve"')])

    def _locate(self, name):
        if self.scheme != "file":
            return f"{self.root}/{name}"
        path = os.path.realpath(os.path.join(self.root, name))
        if not path.startswith(self.root + os.sep) or not os.path.isfile(path):
            raise _Refused(404, "no such shard")
        return path

    # -- responses

    def _send_head(self, conn, status, headers):
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", "Server: tarserve",
                 "Connection: close", "Cache-Control: no-store", "Accept-Ranges: none"]  # a Range gets the whole body
        lines += [f"{k}: {v}" for k, v in headers]
        conn.settimeout(self.client_timeout)
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def _respond(self, conn, status, text, headers=(), head_only=False, read_head=False):
        if read_head:  # read (a little of) the request, so closing does not reset the answer
            conn.settimeout(0.5)
            try:
                conn.recv(MAX_HEAD)
            except OSError:
                pass
        body = safe_text(text, lines=True).encode("utf-8")
        headers = list(headers) + [("Content-Type", "text/plain; charset=utf-8"),
                                   ("Content-Length", str(len(body)))]
        self._send_head(conn, status, headers)
        if not head_only:
            conn.sendall(body)
        _linger_close(conn)

    def _listing(self, conn, method):
        if self.scheme != "file":
            raise _Refused(404, f"listing is available for a local directory, not for {self.scheme}://")
        shards, truncated = [], False
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            rel = os.path.relpath(dirpath, self.root)
            for fn in sorted(filenames):
                if not fn.endswith(SHARD_SUFFIXES):
                    continue
                name = fn if rel == "." else f"{rel}/{fn}"
                try:
                    if decode_name("/" + name) != name:
                        continue
                except ValueError:
                    continue
                full = os.path.join(dirpath, fn)
                if not os.path.isfile(full) or not os.path.realpath(full).startswith(self.root + os.sep):
                    continue
                if len(shards) >= MAX_LISTING:
                    truncated = True
                    break
                shards.append({"name": name, "size": os.path.getsize(full)})
            if truncated:
                break
        body = json.dumps({"shards": shards, "truncated": truncated}, indent=1).encode("utf-8") + b"\n"
        self._send_head(conn, 200, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        if method == "GET":
            conn.sendall(body)
        _linger_close(conn)
        return 200, len(body) if method == "GET" else 0

    def _stream(self, conn, name, url):
        """Run the job of one shard and relay its output as chunks."""
        argv = [sys.executable, "-c", "from tarproc.server.transform import job_main; job_main()",
                self.options_json, url, name]
        with self._lock:
            if self._stopping:
                raise _Refused(503, "server is stopping", [("Retry-After", "5")])
            from ..runtime.child import Child

            # its own session (killed as a whole), dying with the server
            proc = Child(argv, name, stderr="inherit", session=True)
            self._jobs.add(proc)
        fd = proc.stdout.fileno()
        sent = 0
        started = False
        complete = False
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(conn, select.POLLRDHUP | select.POLLERR | select.POLLHUP)
        stalled = time.monotonic() + self.stall_timeout
        try:
            while True:
                events = dict(poller.poll(max(0, int((stalled - time.monotonic()) * 1000)) + 1))
                if conn.fileno() in events:
                    self._log(f"tarserve: {name}: client went away, work stopped")
                    return (200 if started else 499), sent
                if fd not in events:
                    if time.monotonic() >= stalled:  # (time spent sending to the client is not counted)
                        self._log(f"tarserve: {name}: the job sent nothing for {self.stall_timeout:g}s "
                                  f"(its source stalled?): " + ("response cut" if started else "answered 504"))
                        if not started:
                            raise _Refused(504, f"{name}: no data for {self.stall_timeout:g}s")
                        return 200, sent
                    continue
                data = os.read(fd, CHUNK)
                if not data:
                    break
                if not started:
                    self._send_head(conn, 200, [("Content-Type", "application/x-tar"),
                                                ("Transfer-Encoding", "chunked")])
                    started = True
                conn.sendall(b"%x\r\n" % len(data) + data + b"\r\n")
                sent += len(data)
                stalled = time.monotonic() + self.stall_timeout
            rc = proc.wait()
            if rc == 0:
                if not started:  # cannot happen (a tar has an end marker); be safe
                    raise _Refused(502, f"{name}: empty output")
                conn.sendall(b"0\r\n\r\n")
                complete = True
                _linger_close(conn)  # a byte the client sent after its request must not reset the end
                return 200, sent
            self._log(f"tarserve: {name}: failed (exit status {rc}); "
                      + ("response cut" if started else "answered 502"))
            if not started:
                raise _Refused(502, f"{name}: cannot be served (the server's log says why)")
            return 200, sent
        except socket.timeout:
            self._log(f"tarserve: {name}: client did not read for {self.client_timeout:g}s, dropped")
            return 200, sent
        except (BrokenPipeError, ConnectionError):
            self._log(f"tarserve: {name}: client went away, work stopped")
            return 200, sent
        finally:
            if not complete and started:
                try:  # no terminating chunk: make the end abrupt
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            _kill_job(proc)
            proc.stdout.close()
            with self._lock:
                self._jobs.discard(proc)


def _kill_job(proc, grace=2.0):
    """End a job's process group: SIGTERM (its cleanups run), then SIGKILL."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            proc.wait(max(grace, 0.5) + 3)
        except subprocess.TimeoutExpired:
            pass
    # whatever is left in the group (a source command that ignored SIGTERM)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


def _linger_close(conn, linger=LINGER):
    """End an answer that is complete: FIN after the queued bytes, then read
    and drop what the client still sends until it closes, for ``linger``
    seconds in all.  (Closing a socket with unread bytes sends a reset,
    which makes the client's kernel drop the end of an answer it has not
    read yet.)"""
    deadline = time.monotonic() + linger
    try:
        conn.shutdown(socket.SHUT_WR)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            conn.settimeout(left)
            if not conn.recv(65536):
                break
    except OSError:
        pass


def _name_or_refuse(target):
    try:
        return decode_name(target)
    except (ValueError, UnicodeError) as e:
        raise _Refused(400, f"bad name: {e}") from None


def _function_spec(fn):
    """A callable as ``module:qualname`` (the job process imports it)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname or "." in qualname:
        raise UsageError(f"map={fn!r}: give a module-level function of an importable module, "
                         f"or 'module:function' / 'path/file.py:function'")
    return f"{module}:{qualname}"


def serve(prefix, *, background=False, **options):
    """Serve ``prefix`` (a directory, ``http(s)://``, ``gs://`` or ``s3://``
    prefix) over HTTP; see :class:`Server` for the options.  With
    ``background=True`` returns the started :class:`Server` (``.url``,
    ``.stop()``; a context manager); otherwise serves until ``stop()`` is
    called from another thread, or Ctrl-C."""
    server = Server(prefix, **options).start()
    if background:
        return server
    try:
        server.wait()
    except KeyboardInterrupt:
        server.stop(drain=0)
    return server
