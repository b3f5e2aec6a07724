"""Shard indexes: sample counts (wids-compatible JSON) and, for uncompressed
shards, the byte range and key of every sample in a binary sidecar.

The JSON is what webdataset's ``wids`` reads (``"__kind__":
"wids-shard-index-v1"``, ``"wids_version": 1``, a ``shardlist`` of ``{"url",
"nsamples", "filesize"}``); tarproc adds, per shard, ``"compression"`` (or
``null``), ``"offsets"`` (whether the sidecar holds the shard's sample ranges)
and, at the top, ``"tarproc_offsets"`` naming the sidecar.  The sidecar
(``INDEX.offsets``; layout in docs/tarindex.md) holds for every sample of the
indexed shards its start offset (little-endian uint64) and its key, one per
line: 8 bytes plus the key's length plus one per sample.

    from tarproc import index_shards
    index = index_shards(["a.tar", "b.tar"], "index.json")
    print(index["shardlist"][0]["nsamples"])
"""

import json
import os
import struct
import sys

from ..core.grouping import group
from ..core.passthru import fast_members, leftover
from ..core.stats import Stats
from ..core.tario import TarReader
from ..errors import BadInput, UsageError
from ..sources.resume import RETRIES, STALL_TIMEOUT

KIND = "wids-shard-index-v1"
MAGIC = b"TARPROC-OFFSETS1"
_HEAD = struct.Struct("<16sQQ")  # magic, number of samples, bytes of keys


class ShardIndex:
    """What indexing one shard found: ``url``, ``nsamples``, ``compression``
    (``None`` or the codec), ``filesize`` (bytes read, for an uncompressed
    shard), and for uncompressed shards ``starts`` (an ``array('Q')`` of
    sample start offsets), ``end`` (where the last sample ends) and ``keys``
    (a list of ``str``); ``stamp`` (a dict, :mod:`tarproc.sources.stamps`)
    and ``sha256`` (hex, or ``None``) when :func:`~tarproc.sinks.scan.scan_one`
    made it."""

    __slots__ = ("url", "nsamples", "compression", "filesize", "starts", "end", "keys", "seek", "stamp", "sha256")

    def __init__(self, url):
        self.seek = None  # a compressed shard's seek record (sources/seekable.py), when it has random access
        self.url = url
        self.nsamples = 0
        self.compression = None
        self.filesize = None
        self.starts = None
        self.end = None
        self.keys = None
        self.stamp = None
        self.sha256 = None

    @property
    def has_offsets(self):
        return self.starts is not None


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


def sidecar_name(index_path):
    """The sidecar of ``dir/name.json``: ``dir/name.offsets``."""
    base = index_path[:-5] if index_path.endswith(".json") else index_path
    return base + ".offsets"


def _relative_url(url, index_dir):
    """Shard URLs are written relative to the index's directory when both are
    local (as ``wids`` resolves them), otherwise as given."""
    from ..sources.open import scheme_of

    if index_dir is None or scheme_of(url) != "file":
        return url
    return os.path.relpath(os.path.abspath(url), index_dir)


def build_index(infos, index_dir=None, sidecar=None, name=None):
    """The index ``dict`` (and the sidecar ``bytes``, or ``None``) for a list
    of :class:`ShardIndex`."""
    shardlist = []
    starts_parts = []
    key_parts = []
    total = 0
    for info in infos:
        entry = {"url": _relative_url(info.url, index_dir), "nsamples": info.nsamples}
        if info.filesize is not None:
            entry["filesize"] = info.filesize
        entry["compression"] = info.compression
        entry["offsets"] = bool(info.has_offsets and sidecar is not None)
        if entry["offsets"]:
            entry["first"] = total
            entry["end"] = info.end
            total += info.nsamples
            starts_parts.append(info.starts.tobytes() if sys.byteorder == "little" else _le(info.starts))
            for key in info.keys:
                if "\n" in key:
                    raise BadInput(f"{info.url}: key {key!r} has a newline: cannot be indexed")
            key_parts.append("".join(k + "\n" for k in info.keys).encode("utf-8", "surrogateescape"))
        _add_stamp(entry, info)
        shardlist.append(entry)
    index = {"__kind__": KIND, "wids_version": 1}
    if name:
        index["name"] = name
    index["shardlist"] = shardlist
    blob = None
    if sidecar is not None and any(e["offsets"] for e in shardlist):  # (also for shards with no samples)
        keys = b"".join(key_parts)
        blob = _HEAD.pack(MAGIC, total, len(keys)) + b"".join(starts_parts) + keys
        index["tarproc_offsets"] = {"file": sidecar, "samples": total, "bytes": len(blob)}
    return index, blob


def _add_stamp(entry, info):
    """A shard's stamp and checksum (:func:`~tarproc.sinks.scan.scan_one`'s)
    in its entry: ``filesize`` (when reading gave none), ``mtime_ns``,
    ``etag``, ``last_modified``, ``sha256``."""
    for field, value in sorted((info.stamp or {}).items()):
        entry.setdefault(field, value)
    if info.sha256:
        entry["sha256"] = info.sha256


def _le(arr):
    from array import array

    swapped = array("Q", arr)
    swapped.byteswap()
    return swapped.tobytes()


def write_index(index, blob, output, sidecar_path=None, more=(), settings=None):
    """Write the index JSON to ``output`` (a URL, ``-`` for stdout) and the
    sidecar to ``sidecar_path`` (and each ``(path, bytes)`` of ``more``);
    each appears only when complete (the sidecars first, so an index never
    names a sidecar that is missing)."""
    from .output import open_sink

    for path, data in ((sidecar_path, blob),) + tuple(more):
        if data is not None:
            with open_sink(path, compression=None, settings=settings) as sink:
                sink.write(data)
    with open_sink(output, compression=None, settings=settings) as sink:
        sink.write((json.dumps(index, indent=1, ensure_ascii=False) + "\n").encode("utf-8", "surrogateescape"))


def index_shards(urls, output=None, offsets=True, name=None, stats=None, strict=False, warn=None,
                 progress=None, checkpoint_spacing=None, retries=RETRIES, stall_timeout=STALL_TIMEOUT,
                 parallel=1, checksum=False, settings=None):
    """Index shards (a URL, a brace pattern, or a list of URLs) and return the
    index ``dict``.

    With ``output`` (a path or URL; ``-`` for stdout) the JSON is written
    there and, when ``offsets`` and some shard is uncompressed, the sidecar
    next to it (``index.json`` -> ``index.offsets``; give ``offsets`` as a
    path to choose).  Compressed shards get their sample count only (their
    entry says ``"offsets": false``); ``warn(message)`` is told about them.
    gzip and multi-frame zstd shards get offsets in their decoded bytes and
    a seek record (``index.seek``; docs/tarindex.md): the groups they were
    written in, or, for a one-stream gzip, checkpoints every
    ``checkpoint_spacing`` bytes of tar (default 4 MiB).
    ``progress(info)`` is called after each shard.  ``retries``,
    ``stall_timeout``: resuming a broken download (see
    :func:`~tarproc.sources.open.open_source`).

    Each entry records the shard's size and, where the store gives one, its
    mtime (``mtime_ns``), ETag or Last-Modified, which
    :class:`~tarproc.IndexedDataset` compares on reading; with ``checksum``
    also the SHA-256 of its bytes (``sha256``; ``tarcheck --index`` verifies
    it).  ``parallel`` shards are indexed at once (threads)."""
    from ..sources.open import scheme_of
    from ..sources.shardlist import as_url, as_urls

    from ..core.limits import MAX_URLS, bounded_list

    urls = bounded_list(as_urls(urls), "the shard list",  # the index holds one entry per shard
                        max_urls=MAX_URLS if settings is None else settings.max_urls)
    if output is not None:
        output = as_url(output, "output")
    if not urls:
        raise UsageError("no shards to index")
    sidecar = sidecar_path = index_dir = None
    if output is not None and output != "-":
        if scheme_of(output) == "file":
            index_dir = os.path.dirname(os.path.abspath(output))
        if offsets:
            sidecar_path = offsets if isinstance(offsets, str) else sidecar_name(output)
    elif isinstance(offsets, str):
        sidecar_path = offsets
    if sidecar_path is not None and output not in (None, "-"):
        same = (os.path.realpath(sidecar_path) == os.path.realpath(output)
                if scheme_of(sidecar_path) == scheme_of(output) == "file" else sidecar_path == output)
        if same:  # the JSON would replace the sidecar: an index that cannot be read back
            raise UsageError(f"--offsets {sidecar_path}: names the index itself; the offsets are another file")
    if sidecar_path is not None:
        # named relative to the index (a bare name when they share a directory)
        if index_dir is not None and scheme_of(sidecar_path) == "file":
            sidecar = os.path.relpath(os.path.abspath(sidecar_path), index_dir)
        else:
            sidecar = sidecar_path
    from .scan import scan_many

    if sidecar is not None and "-" in urls:
        raise UsageError("stdin cannot be indexed with offsets (it cannot be read again): give shard files")
    if checksum and "-" in urls:
        raise UsageError("stdin cannot be checksummed (it cannot be read again): give shard files")
    if not isinstance(parallel, int) or parallel < 1:
        raise UsageError(f"parallel={parallel!r}: a number of shards at once, 1 or more")

    def done(info):
        if info.compression and info.seek is None and warn is not None:
            why = "zstd-compressed in one frame" if info.compression == "zstd" and offsets else \
                f"{info.compression}-compressed"
            warn(f"{info.url}: {why}: counted only ({info.nsamples} samples), no offsets for random access"
                 + (" (gzip and multi-frame zstd shards have them: see docs/tarindex.md)" if offsets else ""))
        if progress is not None:
            progress(info)

    infos = scan_many(urls, parallel, done, stats=stats, strict=strict, warn=warn, checksum=checksum,
                      seek_record=sidecar is not None, checkpoint_spacing=checkpoint_spacing, retries=retries,
                      stall_timeout=stall_timeout, settings=settings)
    index, blob = build_index(infos, index_dir, sidecar, name)
    more = ()
    if sidecar is not None and any(i.seek is not None for i in infos):
        seek_path = seek_sidecar_name(sidecar_path)
        more = ((seek_path, attach_seek(index, infos, seek_sidecar_name(sidecar))),)
    if output is not None:
        write_index(index, blob, output, sidecar_path, more, settings)
    return index


# ---------------------------------------------------------------- compressed shards: the seek sidecar


def seek_sidecar_name(offsets_path):
    """The seek sidecar beside an offsets sidecar: ``index.offsets`` ->
    ``index.seek``."""
    base = offsets_path[:-8] if offsets_path.endswith(".offsets") else offsets_path
    return base + ".seek"


def attach_seek(index, infos, seek_name):
    """The seek sidecar's bytes for the compressed shards of ``infos`` that
    have a seek record; their entries in ``index`` get ``"seek": {"kind",
    "at", "bytes"}`` and the index ``"tarproc_seek": {"file", "bytes"}``
    (layout in docs/tarindex.md)."""
    from ..sources.seekable import SEEK_MAGIC, record_kind

    parts = [SEEK_MAGIC]
    at = len(SEEK_MAGIC)
    for entry, info in zip(index["shardlist"], infos):
        if info.seek is None or not entry.get("offsets"):
            continue
        entry["seek"] = {"kind": record_kind(info.seek), "at": at, "bytes": len(info.seek)}
        parts.append(info.seek)
        at += len(info.seek)
    index["tarproc_seek"] = {"file": seek_name, "bytes": at}
    return b"".join(parts)


class IndexRecorder:
    """Offsets of the shards :func:`~tarproc.sinks.split.split_samples`
    writes, without reading them again: ``recorder.stage`` notes each
    sample's key and size as it passes (the split writes exactly
    :func:`~tarproc.sinks.split.sample_size` bytes per sample), and
    ``recorder.shard_done(shard)`` turns the first ``shard.samples`` of them
    into the shard's :class:`ShardIndex` (counts only for a compressed shard)."""

    def __init__(self):
        from collections import deque

        self.pending = deque()

    def stage(self, samples):
        from .split import sample_size

        for sample in samples:
            self.pending.append((sample.get("__key__"), sample_size(sample)))
            yield sample

    def shard_done(self, shard, compression=None):
        from array import array

        from .split import END_MARKER

        info = ShardIndex(shard.name)
        info.nsamples = shard.samples
        info.compression = compression
        starts, keys, pos = array("Q"), [], 0
        for _ in range(shard.samples):
            key, size = self.pending.popleft()
            starts.append(pos)
            keys.append(key)
            pos += size
        if compression is None and pos + END_MARKER == shard.bytes:
            info.starts, info.keys, info.end, info.filesize = starts, keys, pos, shard.bytes
        return info


def write_shard_index(infos, output, name=None, warn=None):
    """Write the index of shards described by :class:`ShardIndex` objects
    (as ``tarsplit --index`` does for the shards it wrote)."""
    from ..sources.open import scheme_of

    index_dir = os.path.dirname(os.path.abspath(output)) if output != "-" and scheme_of(output) == "file" else None
    sidecar_path = sidecar = None
    if output != "-" and any(i.has_offsets for i in infos):
        sidecar_path = sidecar_name(output)
        sidecar = os.path.basename(sidecar_path) if index_dir is not None else sidecar_path
    packed = [i for i in infos if i.compression]
    if warn is not None and packed:  # one line, however many shards
        first = packed[0]
        warn(f"{first.url}: {first.compression}-compressed: the index has its sample count only"
             if len(packed) == 1 else
             f"{len(packed)} shards are compressed ({first.compression}: {first.url}, ...): the index has "
             "their sample counts only")
    index, blob = build_index(infos, index_dir, sidecar, name)
    write_index(index, blob, output, sidecar_path)
    return index
