"""tarreshard's work directory: small objects put and got whole, one
listing of a folder, byte ranges of the intermediate objects streamed or
read ahead, on any scheme of the table (a directory, ``s3://``, ``gs://``,
an http server that takes PUT)."""

import io
import json
import os

from ..errors import BadInput

#: Bytes of one ranged read when a bucket's slice is streamed.
CHUNK = 16 << 20


def join(work, *parts):
    return work.rstrip("/") + "/" + "/".join(parts)


def names_in(folder, settings=None):
    """The names in a folder of the work directory (one listing), or ``None``
    when its scheme cannot list."""
    from ..runtime.schemes import has_command, scheme_of

    if scheme_of(folder) == "file":
        try:
            return set(os.listdir(folder))
        except FileNotFoundError:
            return set()
    if not has_command("LIST", folder, settings):
        return None
    from ..errors import OutputError
    from ..sinks.remote import run_client

    try:
        listing = run_client("LIST", folder + "/", "list", settings)
    except OutputError:  # (aws s3 ls of a prefix with nothing under it exits 1)
        listing = ""
    return {line.split()[-1].rsplit("/", 1)[-1] for line in listing.splitlines() if line.split()}


def local_dirs(url):
    from ..runtime.schemes import scheme_of

    if scheme_of(url) == "file":
        d = os.path.dirname(url)
        if d:
            os.makedirs(d, exist_ok=True)


def put(url, data, settings=None, defer=True):
    """Write a small object (committed with the task unless ``defer=False``)."""
    from ..sinks.output import open_sink

    local_dirs(url)
    with open_sink(url, compression=None, defer=defer, settings=settings) as sink:
        sink.write(data)


def get(url, settings=None, limit=1 << 30):
    """Read a small object whole."""
    from ..sources.open import read_all

    return read_all(url, limit, f"more than {limit} bytes: not an object tarreshard wrote",
                    retries=0, settings=settings)  # (one request: no STAT first)


def get_json(url, settings=None):
    try:
        return json.loads(get(url, settings))
    except ValueError as e:
        raise BadInput(f"{url}: not tarreshard's JSON ({e})") from None


def exists(url, settings=None):
    from .local import is_done

    return is_done(url, "", settings)


class RangeStream(io.RawIOBase):
    """Bytes ``start`` to ``end`` of ``url`` as a stream, read ``CHUNK`` at
    a time (a local file: read from an open descriptor)."""

    def __init__(self, url, start, end, settings=None):
        from ..runtime.schemes import scheme_of

        self.url, self.pos, self.end, self.settings = url, start, end, settings
        self.buf = memoryview(b"")
        self.fd = None
        if scheme_of(url) == "file":
            try:
                self.fd = os.open(url, os.O_RDONLY)
            except OSError as e:
                from ..sources.open import cannot_open

                raise BadInput(cannot_open(url, e)) from None

    def readable(self):
        return True

    def readinto(self, view):
        if not self.buf:
            if self.pos >= self.end:
                return 0
            n = min(CHUNK, self.end - self.pos)
            if self.fd is not None:
                self.buf = memoryview(os.pread(self.fd, n, self.pos))
                if len(self.buf) != n:
                    raise BadInput(f"{self.url}: shorter than its index says (at byte {self.pos})")
            else:
                from ..sources.indexed import read_range

                self.buf = memoryview(read_range(self.url, self.pos, self.pos + n, self.settings))
            self.pos += n
        k = min(len(view), len(self.buf))
        view[:k] = self.buf[:k]
        self.buf = self.buf[k:]  # (a memoryview: no copy of the rest)
        return k

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        super().close()


#: Slices of a bucket read ahead at once from an object store, each of at
#: most AHEAD_BYTES (at most 64 MiB held beyond --memory); larger ones are streamed.
AHEAD = 8
AHEAD_BYTES = 8 << 20


def fetched(slices, settings):
    """``(url, start, end, data)`` for each slice in order; a slice of an
    object store up to :data:`AHEAD_BYTES` comes read ahead (``AHEAD`` in
    flight: a bucket has a slice in every map object), else ``data`` is
    ``None`` and it is streamed."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    from ..runtime.schemes import scheme_of
    from ..sources.indexed import read_range

    slices = list(slices)
    if not slices or scheme_of(slices[0][0]) == "file":
        for url, a, b in slices:
            yield url, a, b, None
        return
    with ThreadPoolExecutor(AHEAD) as pool:
        window = deque()
        it = iter(slices)
        try:
            while True:
                while len(window) < AHEAD:
                    nxt = next(it, None)
                    if nxt is None:
                        break
                    url, a, b = nxt
                    small = b - a <= AHEAD_BYTES
                    window.append((url, a, b, pool.submit(read_range, url, a, b, settings) if small else None))
                if not window:
                    return
                url, a, b, future = window.popleft()
                yield url, a, b, future.result() if future is not None else None
        finally:
            for *_, future in window:
                if future is not None:
                    future.cancel()
