"""Remote reads that resume where they broke (``http(s)://``, ``s3://``, ``gs://``).

A download that ends early (the connection was reset, the body is shorter
than the object, or no byte came for ``stall_timeout`` seconds) is opened
again from the byte where it stopped, with a ranged request of the same
client:

=========  ======================================  =============================================
scheme     first request                           resumed at byte N
=========  ======================================  =============================================
http(s)    ``curl -gsSfL -D HEADERS URL``          ``curl -r N- -H 'If-Match: ETAG'`` (or
                                                   ``If-Unmodified-Since``), 206 checked
s3         ``aws s3api head-object``, then         ``aws s3api get-object --range bytes=N-
           ``aws s3api get-object --if-match``     --if-match ETAG``
gs         ``gsutil stat``, then                   ``gsutil cat -r N- URL#GENERATION``
           ``gsutil cat URL#GENERATION``
=========  ======================================  =============================================

The identity of the object (size, ETag, Last-Modified, GCS generation) is
taken once, from the first response's headers (http: no extra request) or
from one metadata request before the first read (s3, gs); every request
after it is conditional on it (If-Match, --if-match, the generation), an
http answer's headers are checked again (206, Content-Range, ETag), and no
more bytes than the size are taken, so the bytes read are those of one
unbroken read of the same object, or the read fails with one line saying
that the object changed.

A read is resumed up to ``retries`` times in a row; a resumed request that
brought at least :data:`PROGRESS` bytes starts the count again (a long
download over a flaky link may break many times, each time after
progress).  Before each, it waits :data:`FIRST_WAIT` seconds, doubling with
each break in a row, at most :data:`MAX_WAIT`.  What no retry mends fails
at once, in one line: a server never reached before any byte was read
(connection refused, unknown host: :data:`CURL_UNREACHED`), an HTTP 4xx
other than 408 and 429, access denied.

The commands are those of the scheme table (:mod:`tarproc.runtime.schemes`:
its ``STAT`` and ``RESUME`` actions, replaceable with ``TARPROC_STAT_<SCHEME>``
and ``TARPROC_RESUME_<SCHEME>``).  The processes are started and ended by the
``children`` object :func:`~tarproc.sources.open.open_source` passes in (its
own process group, the tail of its stderr, the kill of the group): this
module only decides which command runs when, and what its answer means.
"""

import io
import os
import select
import time

from ..core.limits import is_decimal
from ..errors import BadInput

#: Default number of resumes in a row.
RETRIES = 5
#: Default seconds without a byte after which a read counts as broken.
STALL_TIMEOUT = 60.0
#: Wait before the first resume (seconds); doubled for each break in a row.
FIRST_WAIT = 0.5
MAX_WAIT = 30.0
#: A resumed request that brought this many bytes starts the count of breaks again.
PROGRESS = 1 << 20
#: Bytes of a metadata answer (curl's header file, head-object's JSON, gsutil stat) read at most.
META_BYTES = 64 << 10

#: curl exit statuses that mean the transfer broke (partial file, timeout,
#: empty reply, send/receive failure, HTTP/2 stream errors, SSL read error);
#: with a status from the server, 22 is judged by that status.
CURL_BREAKS = frozenset({7, 16, 18, 28, 35, 52, 55, 56, 92})
#: curl exit statuses that mean the server was never reached (no proxy or host
#: by that name, connection refused): before any byte was read, no retry mends
#: them (a server that goes away mid-read, 7 again, is retried).
CURL_UNREACHED = frozenset({5, 6, 7})


def check_settings(retries, stall_timeout):
    """A :class:`~tarproc.errors.UsageError` for a ``retries`` that is not a
    count or a ``stall_timeout`` that is not a positive number of seconds
    (or ``None``)."""
    from ..errors import UsageError

    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise UsageError(f"retries must be a whole number >= 0, not {retries!r}")
    if stall_timeout is not None and (isinstance(stall_timeout, bool) or not isinstance(stall_timeout, (int, float))
                                      or not 0 < stall_timeout < float("inf")):
        raise UsageError(f"stall_timeout must be a positive number of seconds or None, not {stall_timeout!r}")


class Identity:
    """What makes an object the same one: size, ETag, Last-Modified, GCS generation."""

    def __init__(self, size=None, etag=None, modified=None, generation=None):
        self.size, self.etag, self.modified, self.generation = size, etag, modified, generation

    def strong_etag(self):
        return self.etag if self.etag and not self.etag.startswith("W/") else None


class Changed(Exception):
    """The object is not the one the read began with."""


class Fatal(Exception):
    """A failure that no resume can mend (HTTP 404, access denied)."""


# ---------------------------------------------------------------- per scheme


def _command(action, url, settings, **values):
    """The command of ``action`` (``STAT``, ``RESUME``) for ``url`` from the
    scheme table (``exec``'d when it is the table's own, as for any input)."""
    from ..runtime.schemes import command, override, scheme_of

    cmd = command(action, url, settings, **values)
    return cmd if override(action, scheme_of(url), settings) else "exec " + cmd


class _Http:
    """curl; the headers of each response go to a file of our own (``-D``),
    read when its first body bytes arrive."""

    what = "curl"
    checks_headers = True

    def __init__(self, url, settings=None):
        self.url = url
        self.settings = settings

    def prepare(self, run):
        return None  # the first response's headers tell

    def command(self, offset, ident, first, header_fd):
        etag = ident.strong_etag() if ident is not None else None
        modified = ident.modified if ident is not None and not etag else None
        return _command("RESUME", self.url, self.settings, headers=str(header_fd),
                        offset=str(offset) if offset else None, etag=etag, modified=modified)

    def resumable(self, ident):
        if ident is None:
            return "the server's answer was not seen"
        if not ident.strong_etag() and not ident.modified:
            return "the server gave neither an ETag nor a Last-Modified date to check it against"
        return None

    def check(self, headers, offset, ident):
        """The identity of a response whose body is arriving; raises
        :class:`Changed` when it is not the object read so far."""
        status, fields = headers
        if offset == 0 and status == 200:
            size = fields.get("content-length")
            new = Identity(int(size) if is_decimal(size or "") else None, fields.get("etag"),
                           fields.get("last-modified"))
        elif status == 206:
            start, total = _content_range(fields.get("content-range", ""))
            if start is None:
                raise Fatal(f"the server answered 206 with an unreadable Content-Range "
                            f"({fields.get('content-range', 'none')[:80]!r})")
            if offset == 0 and start != 0:
                raise Fatal(f"the server answered a part (from byte {start}) to a request for the whole object")
            if start != offset:
                raise Changed(f"the server answered from byte {start}, not {offset}")
            new = Identity(total, fields.get("etag"), fields.get("last-modified"))
        elif status == 200:
            raise Fatal("the server ignores byte ranges (it answered 200 to a ranged request): cannot resume")
        else:
            raise Fatal(f"unexpected HTTP status {status}")
        if ident is not None:
            _same(ident, new)
        return new

    def judge(self, rc, tail, headers):
        """``"break"`` or raises :class:`Fatal`/:class:`Changed` for a
        request that ended with status ``rc``."""
        status = headers[0] if headers else None
        if rc == 22 and status is not None:
            if status in (412, 416):
                raise Changed(f"HTTP {status}")
            if status >= 500 or status in (408, 429):
                return "break"
            raise Fatal(None)
        if rc in CURL_BREAKS:
            return "break"
        raise Fatal(None)

    def unreached(self, rc, tail):
        """Whether a request that ended with status ``rc`` never reached the server."""
        return rc in CURL_UNREACHED


class _S3:
    """The aws CLI: ``s3api head-object`` for the identity, then every read
    with ``s3api get-object --if-match ETAG`` (resumed ones with ``--range
    bytes=N-``).  Not ``aws s3 cp``: when the object is replaced while it is
    read, its own retry of a broken part splices the new object's bytes onto
    the old one's (seen with aws-cli 1.46 and moto)."""

    what = "aws"
    checks_headers = False

    def __init__(self, url, settings=None):
        self.url = url
        self.settings = settings
        bucket, _, key = url[5:].partition("/")
        self.bucket, self.key = bucket, key

    def prepare(self, run):
        import json

        if not self.bucket or not self.key:
            raise Fatal("an s3:// URL names a bucket and a key: s3://BUCKET/KEY")
        out = run(_command("STAT", self.url, self.settings))
        try:
            meta = json.loads(out)
            return Identity(int(meta["ContentLength"]), meta.get("ETag"), meta.get("LastModified"))
        except (ValueError, KeyError, TypeError):
            raise Fatal("aws s3api head-object gave no ContentLength") from None

    def command(self, offset, ident, first, header_fd):
        # (the table's command writes the body to the pipe, the JSON answer away)
        return _command("RESUME", self.url, self.settings, offset=str(offset) if offset else None,
                        etag=ident.etag or None)

    def resumable(self, ident):
        return None if ident is not None and ident.etag else "head-object gave no ETag"

    def judge(self, rc, tail, headers):
        if any(w in tail for w in ("PreconditionFailed", "(412)", "InvalidRange", "(416)", "NoSuchKey", "(404)")):
            raise Changed("it was replaced or removed")
        if any(w in tail for w in ("AccessDenied", "(403)", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                                   "ExpiredToken", "NoSuchBucket", "Unable to locate credentials")):
            raise Fatal(None)
        return "break"

    def unreached(self, rc, tail):
        return "Could not connect to the endpoint URL" in tail


class _Gs:
    """gsutil: ``stat`` for the size and generation; every read names that
    generation (``URL#GENERATION``), resumed reads with ``cat -r N-``."""

    what = "gsutil"
    checks_headers = False

    def __init__(self, url, settings=None):
        self.url = url
        self.settings = settings

    def prepare(self, run):
        out = run(_command("STAT", self.url, self.settings))
        fields = {}
        for line in out.splitlines():
            # gsutil's own fields are indented by 4 spaces; the object's
            # custom metadata (which may use any name) by 8: not those
            if not line.startswith("    ") or line.startswith("     "):
                continue
            name, sep, value = line.strip().partition(":")
            if sep:
                fields.setdefault(name.strip().lower(), value.strip())
        size = fields.get("content-length", "")
        if not is_decimal(size):
            raise Fatal("gsutil stat gave no Content-Length")
        gen = fields.get("generation", "")
        gen = gen if is_decimal(gen) else None
        return Identity(int(size), fields.get("etag"), fields.get("update time"), gen)

    def _pinned(self, ident):
        return self.url + "#" + ident.generation if ident is not None and ident.generation else self.url

    def command(self, offset, ident, first, header_fd):
        return _command("RESUME", self._pinned(ident), self.settings, offset=str(offset) if offset else None)

    def resumable(self, ident):
        return None if ident is not None and ident.generation else "gsutil stat gave no generation"

    def judge(self, rc, tail, headers):
        if any(w in tail for w in ("No URLs matched", "NotFound", "404")):
            raise Changed("that generation is gone")
        if any(w in tail for w in ("AccessDenied", "403", "401")):
            raise Fatal(None)
        return "break"

    def unreached(self, rc, tail):
        return False


def _content_range(value):
    """``bytes START-END/TOTAL`` as ``(START, TOTAL)`` (TOTAL ``None`` for ``*``)."""
    try:
        unit, _, spec = value.strip().partition(" ")
        span, _, total = spec.partition("/")
        start = int(span.split("-")[0])
        return start, (int(total) if is_decimal(total.strip()) else None)
    except ValueError:
        return None, None


def _same(old, new):
    if old.size is not None and new.size is not None and old.size != new.size:
        raise Changed(f"its size is now {new.size}, not {old.size}")
    if old.strong_etag() and new.etag != old.etag:
        raise Changed(f"its ETag is now {new.etag or 'missing'}, not {old.etag}")
    if old.modified and new.modified and new.modified != old.modified:
        raise Changed(f"it was modified at {new.modified}")


def parse_headers(data):
    """The status and fields (lower-case names) of the last response in
    curl's ``-D`` output (redirects and 1xx answers come before it), or
    ``None`` when there is none."""
    text = data.decode("latin-1")
    blocks = [b for b in text.replace("\r\n", "\n").split("\n\n") if b.strip()]
    for block in reversed(blocks):
        lines = block.strip("\n").split("\n")
        if not lines[0].startswith("HTTP/"):
            continue
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            continue
        if 100 <= status < 200:
            continue
        fields = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                fields[name.strip().lower()] = value.strip()
        return status, fields
    return None


# ---------------------------------------------------------------- the reader


class _Attempt:
    def __init__(self, proc, offset, header_file):
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.offset = offset
        self.header_file = header_file
        self.got = 0
        self.checked = False


class Resuming(io.RawIOBase):
    """A raw reader over a remote object that resumes broken reads.

    ``scheme`` is ``http``/``https``/``s3``/``gs``; ``shown`` is the URL for
    messages (credentials hidden); ``children`` starts and ends processes
    (``start(cmd, pass_fds)``, ``finish(proc) -> (rc, stderr_tail)``,
    ``kill(proc)``); ``settings``: the commands that replace the scheme
    table's (``TARPROC_STAT_*``, ``TARPROC_RESUME_*``)."""

    pollable = True

    def __init__(self, url, scheme, shown, children, retries=RETRIES, stall_timeout=STALL_TIMEOUT, stall=None,
                 settings=None):
        self.url = shown
        self.children = children
        self.retries = retries
        self.stall_timeout = stall_timeout
        self.stall = stall
        if scheme in ("http", "https"):
            self.plan = _Http(url, settings)
        elif scheme == "s3":
            self.plan = _S3(url, settings)
        else:
            self.plan = _Gs(url, settings)
        self.offset = 0
        self.breaks = 0
        self.attempt = None
        self.done = False
        self.aborted = False
        self.eof = False
        try:
            self.ident = self.plan.prepare(self._run)
        except Fatal as e:
            raise BadInput(f"{self.url}: {e}") from None
        self._start()

    # -- what compression.py's _Source looks at
    @property
    def proc(self):
        return self.attempt.proc if self.attempt is not None else None

    def readable(self):
        return True

    def _run(self, cmd):
        """A metadata command's stdout (bounded); BadInput naming the URL if it failed."""
        proc = self.children.start(cmd)
        try:
            out = b""
            while len(out) < META_BYTES:
                ready, _, _ = select.select([proc.stdout], [], [], self.stall_timeout)
                if not ready:
                    self.children.kill(proc)
                    raise BadInput(f"{self.url}: {self.plan.what} gave no answer for {self.stall_timeout:g} s")
                piece = os.read(proc.stdout.fileno(), META_BYTES)
                if not piece:
                    break
                out += piece
        except OSError:
            pass
        if len(out) >= META_BYTES:
            self.children.kill(proc)
            raise BadInput(f"{self.url}: {self.plan.what}: metadata answer longer than {META_BYTES} bytes")
        rc, tail = self.children.finish(proc)
        if rc != 0:
            raise BadInput(f"{self.url}: {self.plan.what} failed with exit status {rc}{tail}")
        return out.decode("utf-8", "replace")

    def _start(self):
        header_file = None
        pass_fds = ()
        if self.plan.checks_headers:
            import tempfile

            header_file = tempfile.TemporaryFile()
            pass_fds = (header_file.fileno(),)
        first = self.offset == 0 and self.breaks == 0
        cmd = self.plan.command(self.offset, self.ident, first,
                                header_file.fileno() if header_file is not None else None)
        try:
            proc = self.children.start(cmd, pass_fds)
        except BaseException:
            if header_file is not None:
                header_file.close()
            raise
        self.attempt = _Attempt(proc, self.offset, header_file)

    def _headers(self, attempt):
        if attempt.header_file is None:
            return None
        try:
            size = os.fstat(attempt.header_file.fileno()).st_size
            data = os.pread(attempt.header_file.fileno(), META_BYTES, max(0, size - META_BYTES))
        except OSError:
            return None
        return parse_headers(data)

    def _check(self, attempt):
        """On the first bytes of a response: is it the object read so far?"""
        attempt.checked = True
        if not self.plan.checks_headers:
            return
        headers = self._headers(attempt)
        if headers is None:
            if attempt.offset == 0 and self.ident is None:
                return  # nothing to compare with yet (and no size to check against)
            self._changed("no response headers were seen")
        try:
            self.ident = self.plan.check(headers, attempt.offset, self.ident)
        except Changed as e:
            self._changed(str(e))
        except Fatal as e:
            self._fail(str(e))

    def _end_attempt(self, kill):
        attempt, self.attempt = self.attempt, None
        if attempt is None:
            return None
        if kill:
            self.children.kill(attempt.proc)
            result = None
        else:
            result = self.children.finish(attempt.proc)
        if attempt.header_file is not None:
            headers = self._headers(attempt)
            attempt.header_file.close()
            attempt.headers = headers
        else:
            attempt.headers = None
        return attempt, result

    def _changed(self, why):
        self._end_attempt(kill=True)
        raise BadInput(f"{self.url}: the object changed while it was read ({why}): not resumed at byte {self.offset}")

    def _fail(self, why):
        self._end_attempt(kill=True)
        raise BadInput(f"{self.url}: {why}")

    def _wait(self, fd):
        try:
            ready, _, _ = select.select([fd], [], [], 0)
            if ready:
                return True
            if self.stall is not None:
                self.stall()
            ready, _, _ = select.select([fd], [], [], self.stall_timeout)
            return bool(ready)
        except (OSError, ValueError):
            return True  # the read says what is wrong

    def readinto(self, buf):
        while True:
            if self.done or self.aborted:
                return 0
            if self.attempt is None:
                self._start()
            attempt = self.attempt
            if not self._wait(attempt.fd):
                self._broke(f"no data for {self.stall_timeout:g} s", kill=True)
                continue
            try:
                n = os.readv(attempt.fd, [buf])
            except OSError as e:
                self._broke(f"read error: {e.strerror}", kill=True)
                continue
            if n:
                if not attempt.checked:
                    self._check(attempt)
                size = self.ident.size if self.ident is not None else None
                if size is not None and self.offset + n > size:  # (none of those bytes is handed out)
                    self._fail(f"the server sent more than the object's {size} bytes "
                               f"({'resumed' if attempt.offset else 'read'} from byte {attempt.offset})")
                attempt.got += n
                self.offset += n
                return n
            self._ended()

    def _ended(self):
        """The attempt's output ended: done, or a break to resume."""
        attempt = self.attempt
        if not attempt.checked and attempt.header_file is not None:
            headers = self._headers(attempt)
            if headers is not None and headers[0] in (200, 206):
                self._check(attempt)
        attempt, (rc, tail) = self._end_attempt(kill=False)
        size = self.ident.size if self.ident is not None else None
        if rc == 0:
            if size is None or self.offset == size:
                self.done = self.eof = True
                return
            self._broke(f"the body ended at byte {self.offset} of {size}", kill=False, attempt=attempt)
            return
        if self.aborted:
            return
        if self.offset == 0 and self.plan.unreached(rc, tail):
            # nothing read yet and the server not reached (refused, unknown host): at once, one line
            raise BadInput(f"{self.url}: {self.plan.what} failed with exit status {rc}{tail}")
        try:
            self.plan.judge(rc, tail, attempt.headers)
        except Changed as e:
            raise BadInput(f"{self.url}: the object changed while it was read ({e}): "
                           f"not resumed at byte {self.offset}") from None
        except Fatal:
            raise BadInput(f"{self.url}: {self.plan.what} failed with exit status {rc}{tail}") from None
        self._broke(f"{self.plan.what} failed with exit status {rc}{tail}", kill=False, attempt=attempt)

    def _broke(self, why, kill, attempt=None):
        """The read broke at ``self.offset``: wait, and let the next read
        resume it; or fail when it cannot be resumed or broke too often."""
        if kill:
            ended = self._end_attempt(kill=True)
            attempt = ended[0] if ended else None
        if self.aborted:
            return
        size = self.ident.size if self.ident is not None else None
        if size is not None and self.offset == size:
            self.done = self.eof = True  # every byte is in: how it ended does not matter
            return
        if attempt is not None and attempt.got >= PROGRESS:
            self.breaks = 0
        self.breaks += 1
        where = f"at byte {self.offset}" + (f" of {size}" if size is not None else "")
        if self.offset > 0:  # (at byte 0 the next request starts afresh)
            cannot = self.plan.resumable(self.ident)
            if cannot:
                raise BadInput(f"{self.url}: the read broke {where} ({why}); cannot resume: {cannot}")
        if self.breaks > self.retries:
            if self.offset == 0:  # nothing read: the request failed, there was nothing to resume
                tries = f"{self.retries} retr{'ies' if self.retries != 1 else 'y'}"
                raise BadInput(f"{self.url}: {why}; gave up after {tries}")
            tries = f"{self.retries} resume{'s' if self.retries != 1 else ''}"
            raise BadInput(f"{self.url}: the read broke {where} ({why}); gave up after {tries}")
        if self.stall is not None:
            self.stall()  # about to wait: what is buffered downstream goes out
        time.sleep(min(FIRST_WAIT * 2 ** (self.breaks - 1), MAX_WAIT))

    def abort(self):
        """Stop reading (from another thread): the current request is killed
        and no other one starts."""
        self.aborted = True
        attempt = self.attempt
        if attempt is not None:
            try:
                attempt.proc.kill()
            except OSError:
                pass

    def close(self):
        if self.closed:
            return
        try:
            self.aborted = True
            self._end_attempt(kill=True)
        finally:
            super().close()
