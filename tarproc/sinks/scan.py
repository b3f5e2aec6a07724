"""Indexing shards at disk speed: headers read, member data sought over.

:func:`scan_one` indexes one shard as :func:`~tarproc.sinks.index.scan_shard`
does (the same samples, offsets, keys and counts: the same reader and
grouping), but reads a local uncompressed file the way ``tar -t`` does:
headers through a small buffer, and a seek over every member of 64 KiB or
more (small members are read, as there is no faster way past them).  It
also records the shard's stamp (size, and mtime, ETag or Last-Modified:
:mod:`tarproc.sources.stamps`) and, with ``checksum``, the SHA-256 of its
bytes.  :func:`scan_many` indexes many shards at once.

    info = scan_one("data/shard-0000.tar", checksum=True)
    info.nsamples, info.sha256, info.stamp
"""

import io
import os

from ..core.stats import Stats
from ..errors import BadInput
from ..sources.resume import RETRIES, STALL_TIMEOUT

#: Members from this size on are sought over, not read.
SEEK_FROM = 64 << 10
#: The read-ahead after a seek (a header and whatever small members follow
#: it); it doubles on every read without a seek, up to the fast path's chunk.
SMALL_READ = 4096


class _Marks:
    __slots__ = ("starts", "end")

    def __init__(self):
        from array import array

        self.starts = array("Q")
        self.end = 0


class _HeaderStream:
    """A plain file for :class:`~tarproc.core.tario.TarReader` and
    :func:`~tarproc.core.passthru.fast_group`: ``read1`` reads little right
    after a seek (a header) and more and more while nothing is sought over
    (a run of small members), so a shard of large members is read at a few
    KiB per member and one of small members in large chunks."""

    def __init__(self, raw, path, fd):
        self.buf = io.BufferedReader(raw, SMALL_READ)
        self.cap = SMALL_READ
        self.region_source = (fd, path)

    def read(self, n=-1):
        return self.buf.read(n)

    def readinto(self, view):
        return self.buf.readinto(view)

    def read1(self, n=-1):
        cap = self.cap
        if cap < (1 << 18):
            self.cap = cap * 2
        return self.buf.read1(min(n, cap) if n >= 0 else cap)

    def seek(self, n, whence=0):
        self.cap = SMALL_READ
        return self.buf.seek(n, whence)

    def tell(self):
        return self.buf.tell()


def _scan_plain(stream, url, name, stats, strict, warn):
    """The :class:`ShardIndex` of a plain local file (``stream`` from
    :func:`~tarproc.sources.open.open_source`, at its start)."""
    from ..core.blob import Spooler
    from ..core.passthru import fast_group
    from ..core.tario import TarReader
    from .index import ShardIndex

    pos = stream.tell()
    fd, path = stream.region_source
    raw = stream.detach()
    raw.seek(pos)
    hs = _HeaderStream(raw, path, fd)
    reader = TarReader(hs, name, strict=strict, warn=warn, spooler=Spooler(region_threshold=SEEK_FROM))
    marks = _Marks()
    keys = []
    n = 0
    try:
        for sample in fast_group(reader, name, stats, marks=marks):
            keys.append(sample["__key__"])
            n += 1
        size = os.fstat(fd).st_size
    finally:
        raw.close()
    info = ShardIndex(url)
    info.nsamples = n
    info.compression = None
    if n:
        marks.starts[0] = 0  # the first sample's range begins at the shard's start (what precedes it, too)
    info.starts = marks.starts
    info.keys = keys
    info.end = marks.end
    info.filesize = size
    return info


def sha256_of(url, settings=None):
    """The SHA-256 (hex) of the bytes at ``url``, as stored (compressed or
    not; ``settings``: the reading commands)."""
    import hashlib

    from ..sources.open import open_source, scheme_of

    h = hashlib.sha256()
    if scheme_of(url) == "file":
        try:
            fd = os.open(url, os.O_RDONLY)
        except OSError as e:
            raise BadInput(f"{url}: cannot open: {e.strerror}") from None
        try:
            buf = bytearray(4 << 20)
            view = memoryview(buf)
            while True:
                try:
                    n = os.readv(fd, [buf])
                except OSError as e:
                    raise BadInput(f"{url}: read error: {e.strerror}") from None
                if not n:
                    break
                h.update(view[:n])
        finally:
            os.close(fd)
        return h.hexdigest()
    stream = open_source(url, decompress=False, settings=settings)
    try:
        while True:
            piece = stream.read(4 << 20)
            if not piece:
                break
            h.update(piece)
    finally:
        stream.close()
    return h.hexdigest()


def scan_one(url, stats=None, strict=False, warn=None, checksum=False, seek=True, seek_record=False,
             checkpoint_spacing=None, retries=RETRIES, stall_timeout=STALL_TIMEOUT, settings=None):
    """Index one shard: :func:`~tarproc.sinks.index.scan_shard`'s
    :class:`~tarproc.sinks.index.ShardIndex`, read at disk speed for a local
    uncompressed file (``seek=False``: by the general reading path), with
    ``stamp`` (a dict, :mod:`tarproc.sources.stamps`) and ``sha256`` (with
    ``checksum``; else ``None``) set.  ``seek_record``, ``checkpoint_spacing``:
    a compressed shard's record of where decoding restarts (see
    :func:`~tarproc.sinks.index.scan_shard`); ``retries``,
    ``stall_timeout``: resuming a broken download; ``settings``: the
    reading settings (client commands, bounds)."""
    from ..sources.open import open_source, scheme_of
    from ..sources.stamps import stamp_of
    from .index import scan_shard

    stats = stats if stats is not None else Stats()
    scheme = scheme_of(url)
    local = scheme == "file"
    stamp = stamp_of(url, settings) if url != "-" else {}
    regular = local and "filesize" in stamp  # (a FIFO, /dev/stdin: no stamp, and read only once)
    if checksum and (scheme in ("-", "pipe") or (local and not regular)):
        raise BadInput(f"{url}: not a file or a URL: it cannot be read twice, to checksum and to index it "
                       f"(index it without --checksum, or give a file)")
    digest = sha256_of(url, settings) if checksum else None
    info = None
    if regular and seek:
        stream = open_source(url, settings=settings)
        if stream.compression is None and getattr(stream, "region_source", None) is not None:
            info = _scan_plain(stream, url, url, stats, strict, warn)  # (it closes the stream)
        else:
            stream.close()
    if info is None:
        info = scan_shard(url, stats, strict, warn, seek=seek_record, checkpoint_spacing=checkpoint_spacing,
                          retries=retries, stall_timeout=stall_timeout, settings=settings)
    if local:
        if stamp_of(url, settings) != stamp:
            raise BadInput(f"{url}: the shard changed while it was being indexed (index it again)")
    elif info.filesize is not None and stamp.get("filesize") not in (None, info.filesize):
        raise BadInput(f"{url}: {info.filesize} bytes were read, its server says it has {stamp['filesize']}: it "
                       f"changed while it was being indexed, or has data after its end-of-archive marker")
    info.stamp = stamp
    info.sha256 = digest
    return info


def scan_many(urls, parallel=1, progress=None, **options):
    """:func:`scan_one` for each URL, ``parallel`` at a time, in threads
    (the reads and the hashing release the GIL; the header parsing of one
    shard does not, see docs/tarindex.md): a list in the order of ``urls``.
    ``progress(info)`` is called in that order too.  The first error (in
    that order) is raised."""
    if parallel <= 1 or len(urls) <= 1:
        out = []
        for url in urls:
            out.append(scan_one(url, **options))
            if progress is not None:
                progress(out[-1])
        return out
    from concurrent.futures import ThreadPoolExecutor

    total = options.pop("stats", None)
    out = []

    def one(url):
        stats = Stats()  # one per shard: counts are not added up from two threads at once
        return scan_one(url, stats=stats, **options), stats

    with ThreadPoolExecutor(min(parallel, len(urls)), thread_name_prefix="tarindex") as pool:
        futures = [pool.submit(one, url) for url in urls]
        try:
            for f in futures:
                info, stats = f.result()
                if total is not None:
                    _add(total, stats)
                out.append(info)
                if progress is not None:
                    progress(info)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return out


def _add(total, stats):
    for name in ("read", "written", "skipped", "failed", "members_skipped", "inputs"):
        setattr(total, name, getattr(total, name) + getattr(stats, name))
    for reason, n in stats.reasons.items():
        total.reasons[reason] = total.reasons.get(reason, 0) + n
