"""Reading shards to index them: what one shard holds (:class:`ShardIndex`:
its samples' offsets and keys, its count, its seek record) found by
reading it.  :mod:`tarproc.sinks.index` makes the index of such entries.

:func:`scan_shard` reads a shard through the general reading path (any URL,
compressed shards decoded, with their seek record).  :func:`scan_one`
indexes one shard as :func:`scan_shard` does (the same samples, offsets,
keys and counts: the same reader and grouping), but reads a local
uncompressed file the way ``tar -t`` does: headers through a small buffer,
and a seek over every member of 64 KiB or more (small members are read, as
there is no faster way past them).  It also records the shard's stamp
(size, and mtime, ETag or Last-Modified: :mod:`tarproc.sources.stamps`)
and, with ``checksum``, the SHA-256 of its bytes.  :func:`scan_many`
indexes many shards at once.

    info = scan_one("data/shard-0000.tar", checksum=True)
    info.nsamples, info.sha256, info.stamp
"""

import io
import os

from ..core.grouping import group
from ..core.passthru import fast_members, leftover
from ..core.stats import Stats
from ..core.tario import TarReader
from ..errors import BadInput
from ..sources.resume import RETRIES, STALL_TIMEOUT

#: Members from this size on are sought over, not read.
SEEK_FROM = 64 << 10
#: The read-ahead after a seek (a header and whatever small members follow
#: it); it doubles on every read without a seek, up to the fast path's chunk.
SMALL_READ = 4096


class ShardIndex:
    """What indexing one shard found: ``url``, ``nsamples``, ``compression``
    (``None`` or the codec), ``filesize`` (bytes read, for an uncompressed
    shard), and for uncompressed shards ``starts`` (an ``array('Q')`` of
    sample start offsets), ``end`` (where the last sample ends) and ``keys``
    (a list of ``str``); ``stamp`` (a dict, :mod:`tarproc.sources.stamps`)
    and ``sha256`` (hex, or ``None``) when :func:`~tarproc.sinks.scan.scan_one`
    made it."""

    __slots__ = ("url", "nsamples", "compression", "filesize", "starts", "end", "keys", "seek", "stamp", "sha256",
                 "sidecar_bytes", "amplification")

    def __init__(self, url):
        self.seek = None  # a compressed shard's seek record (sources/seekable.py), when it has random access
        self.url = url
        self.nsamples = 0
        self.compression = None
        self.filesize = None
        self.starts = None
        self.amplification = None  # (compressed bytes fetched, sample bytes) of reading each sample alone
        self.end = None
        self.keys = None
        self.stamp = None
        self.sha256 = None
        self.sidecar_bytes = None  # the size of its sidecar, once written (its starts and keys then dropped)

    @property
    def has_offsets(self):
        return self.starts is not None or self.sidecar_bytes is not None


class _Counting:
    """``read(n)`` through to ``stream``, counting the bytes."""

    def __init__(self, stream):
        self.stream = stream
        self.count = 0

    def read(self, n=-1):
        data = self.stream.read(n)
        self.count += len(data)
        return data

    def read_some(self, n=-1):
        data = self.stream.read1(n)
        self.count += len(data)
        return data


def _size_of(stream, read):
    """The size of the file ``stream`` reads (what the reader checks against
    the index: bytes after the end-of-archive marker, which reading stops
    at, are part of it), or the bytes ``read`` when it is not a file."""
    import stat

    region = getattr(stream, "region_source", None)  # (fd, path) of a plain file (open_source)
    if region is None:
        return read
    try:
        st = os.fstat(region[0])
    except OSError:
        return read
    return st.st_size if stat.S_ISREG(st.st_mode) and st.st_size >= read else read


def scan_shard(url, stats=None, strict=False, warn=None, seek=False, checkpoint_spacing=None, retries=RETRIES,
               stall_timeout=STALL_TIMEOUT, settings=None):
    """Read one shard and return its :class:`ShardIndex`.

    Sample ``i`` of an uncompressed shard occupies bytes ``starts[i]`` to
    ``starts[i+1]`` (``end`` for the last): from the first header block of
    its first member (long-name and pax headers included) to the first
    header block of the next sample, so members that grouping skips between
    samples (directories, names without a dot) read back as skipped too.

    With ``seek``, a gzip or zstd shard gets the same offsets, in its
    decoded bytes, and ``seek``, the record of where decoding can restart
    (:mod:`tarproc.sources.seekable`; ``checkpoint_spacing``: bytes of tar
    between the checkpoints of a one-stream gzip shard)."""
    from array import array

    from ..sources.open import open_source

    stats = stats if stats is not None else Stats()
    stream = open_source(url, retries=retries, stall_timeout=stall_timeout, settings=settings)
    name = "stdin" if url == "-" else url
    info = ShardIndex(url)
    info.compression = stream.compression
    seekable = None
    if seek and url != "-" and stream.compression in _seekable_codecs():
        stream.close()  # read again by the decoder that finds the restart points
        stream, *seekable = _open_seekable(url, stream.compression, checkpoint_spacing, settings)
    try:
        counting = _Counting(stream)
        if hasattr(stream, "read1"):  # the fast path reads what is buffered (and counts it)
            counting.read1 = counting.read_some
        reader = TarReader(counting, name, strict=strict, warn=warn,
                           sparse_holes=None if settings is None else settings.sparse_holes)
        plain = info.compression is None or seekable is not None
        starts = array("Q")
        keys = []
        last = [None, 0]  # the member group() pulled last; where the last regular member ends

        def tracked(members):
            for m in members:
                if plain and seek:  # (offsets asked for)
                    _no_global_names(reader, name, m.offset)
                last[0] = m
                if m.data is not None:  # its data and padding are read: here it ends
                    last[1] = reader.offset  # (not offset + size: a sparse member stores less)
                yield m

        n = nxt = 0
        for sample in group(tracked(fast_members(reader)), name, stats, reader.spooler):
            if plain:
                # the sample just completed began where the previous one ended;
                # the member that completed it (if any) starts the next one
                starts.append(0 if n == 0 else nxt)
                keys.append(sample["__key__"])
                nxt = last[0].start if last[0] is not None else 0
            n += 1
        info.nsamples = n
        if plain:
            info.starts = starts
            info.keys = keys
            info.end = last[1]
            info.filesize = _size_of(stream, counting.count - leftover(reader))
        if seekable is not None:
            info.seek, info.filesize = seekable[0](), seekable[1]()
            if info.seek is None:  # no restart points: counts only
                info.starts = info.keys = info.end = info.filesize = None
    finally:
        stream.close()
    return info


def _seekable_codecs():
    from ..sources.seekscan import CODECS

    return CODECS


def _open_seekable(url, codec, spacing, settings=None):
    from ..sources.seekscan import open_for_index

    return open_for_index(url, codec, spacing, settings)


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


def _no_global_names(reader, name, offset):
    """A read at one sample's offset never sees a global pax header before
    it: one that sets names, links or sizes makes the index read back other
    members (or fail), so such a shard gets no offsets: an error."""
    if reader.gpax and not reader.gpax.keys() <= {"mtime"}:
        from ..errors import BadArchive

        raise BadArchive(name, offset, "a global pax header sets the names, links or sizes of members, which a "
                         "read at a sample's offset cannot see: no offsets for random access (tarcat rewrites "
                         "the shard without it)")


def _scan_plain(stream, url, name, stats, strict, warn, offsets=True):
    """The :class:`ShardIndex` of a plain local file (``stream`` from
    :func:`~tarproc.sources.open.open_source`, at its start)."""
    from ..core.blob import Spooler
    from ..core.passthru import fast_group

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
            if offsets:
                _no_global_names(reader, name, marks.starts[-1] if marks.starts else 0)
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
    """Index one shard: :func:`scan_shard`'s
    :class:`ShardIndex`, read at disk speed for a local
    uncompressed file (``seek=False``: by the general reading path), with
    ``stamp`` (a dict, :mod:`tarproc.sources.stamps`) and ``sha256`` (with
    ``checksum``; else ``None``) set.  ``seek_record``, ``checkpoint_spacing``:
    a compressed shard's record of where decoding restarts (see
    :func:`scan_shard`); ``retries``,
    ``stall_timeout``: resuming a broken download; ``settings``: the
    reading settings (client commands, bounds)."""
    from ..sources.open import open_source, scheme_of
    from ..sources.stamps import stamp_of

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
            info = _scan_plain(stream, url, url, stats, strict, warn, seek_record)  # (it closes the stream)
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


def scan_many(urls, parallel=1, progress=None, each=None, **options):
    """:func:`scan_one` for each URL, ``parallel`` at a time, in threads
    (the reads and the hashing release the GIL; the header parsing of one
    shard does not, see docs/tarindex.md): a list in the order of ``urls``.
    ``each(n, info)``, called in the thread that read shard number ``n``,
    gives what is kept of it (its sidecar written, its keys dropped).
    ``progress(info)`` is called in the order of ``urls``.  The first error
    (in that order) is raised."""
    if each is None:
        def each(n, info):
            return info
    if parallel <= 1 or len(urls) <= 1:
        out = []
        for n, url in enumerate(urls):
            out.append(each(n, scan_one(url, **options)))
            if progress is not None:
                progress(out[-1])
        return out
    from concurrent.futures import ThreadPoolExecutor

    total = options.pop("stats", None)
    out = []

    def one(n, url):
        stats = Stats()  # one per shard: counts are not added up from two threads at once
        return each(n, scan_one(url, stats=stats, **options)), stats

    with ThreadPoolExecutor(min(parallel, len(urls)), thread_name_prefix="tarindex") as pool:
        futures = [pool.submit(one, n, url) for n, url in enumerate(urls)]
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
