"""Shard indexes: sample counts (wids-compatible JSON) and, for uncompressed
shards, the byte range and key of every sample in a binary sidecar.

The JSON is what webdataset's ``wids`` reads (``"__kind__":
"wids-shard-index-v1"``, ``"wids_version": 1``, a ``shardlist`` of ``{"url",
"nsamples", "filesize"}``); tarproc adds, per shard, ``"compression"`` (or
``null``), ``"offsets"`` (whether the sidecar holds the shard's sample ranges)
and, at the top, ``"tarproc_offsets"`` naming the sidecar.  The sidecar
(``INDEX.offsets``; layout in docs/tarindex.md) holds for every sample of the
indexed shards its start offset (little-endian uint64) and its key, one per
line: 8 bytes plus the key's length plus one per sample.  Compressed shards
with restart points also have a seek record in ``INDEX.seek``.

An index is made one way, :func:`publish_index`, from one
:class:`~tarproc.sinks.scan.ShardIndex` per shard, whether the shards were
read (:func:`index_shards`, ``tarindex``; :mod:`tarproc.sinks.scan`) or
written (:func:`written_shard_index`, for ``tarsplit --index``;
:mod:`tarproc.sinks.split`).

    from tarproc import index_shards
    index = index_shards(["a.tar", "b.tar"], "index.json")
    print(index["shardlist"][0]["nsamples"])
"""

import io
import json
import os
import sys

from ..core.indexfile import KIND, shard_sidecar  # (the format, shared with the reader)
from ..errors import BadInput, UsageError
from ..sources.indexnames import name_for
from ..sources.resume import RETRIES, STALL_TIMEOUT
from .scan import ShardIndex, scan_many


def sidecar_name(index_path):
    """The offsets sidecar of ``dir/name.json``: ``dir/name.offsets`` (the
    per-shard sidecars go in ``dir/name.offsets.d/``, the key table is
    ``dir/name.keys``)."""
    base = index_path[:-5] if index_path.endswith(".json") else index_path
    return base + ".offsets"


def keys_name(offsets_path):
    """The key table beside an offsets sidecar: ``index.offsets`` -> ``index.keys``."""
    base = offsets_path[:-8] if offsets_path.endswith(".offsets") else offsets_path
    return base + ".keys"


class _Writer:
    """The parts of an index as its shards come: each shard's sidecar
    written (:meth:`shard`, from any thread) and its keys handed to the key
    table, so no more than one shard's keys per thread are held; then the
    JSON (:meth:`finish`).  With ``sidecar_path`` ``None``: counts only;
    with ``keep``: the sidecars are kept in memory, not written."""

    def __init__(self, index_dir, sidecar_path, sidecar, settings=None, keep=False):
        import threading

        self.index_dir, self.sidecar_path, self.sidecar, self.settings = index_dir, sidecar_path, sidecar, settings
        self.kept = {} if keep else None
        self.lock = threading.Lock()
        self.spool = None  # the seek records of compressed shards, waiting in a temporary file
        self.keys = None
        if sidecar_path is not None:
            from .keytable import KeyTable

            self.keys = KeyTable()
            self.held = False
            from ..sources.open import scheme_of

            self.final_dir = sidecar_path + ".d"
            # a local index's sidecars go to a directory of their own until the index is complete, then
            # replace the previous ones at once: a failed run leaves the previous index whole
            self.local = scheme_of(sidecar_path) == "file"
            self.work_dir = f"{self.final_dir}.partial-{os.getpid()}-{id(self):x}" if self.local else self.final_dir
            self.made_dir = False

    def shard(self, n, info):
        """Write shard number ``n``'s sidecar (when it has offsets) and
        return ``info`` without its keys and offsets (``sidecar_bytes`` set)."""
        if self.sidecar_path is None or not info.has_offsets:
            return info
        from ..core.indexfile import key_hashes, pack_shard

        if info.nsamples >= 1 << 32:  # (the key table numbers a shard's samples in 32 bits)
            raise BadInput(f"{info.url}: {info.nsamples} samples in one shard: more than an index holds (2**32 - 1)")
        for key in info.keys:
            if "\n" in key:
                raise BadInput(f"{info.url}: key {key!r} has a newline: cannot be indexed")
        starts = info.starts.tobytes() if sys.byteorder == "little" else _le(info.starts)
        blob = pack_shard(starts, info.keys)
        if self.kept is not None:
            self.kept[n] = blob
        else:
            self._write(shard_sidecar(self.work_dir, n), blob)
        self.keys.add(n, key_hashes(info.keys))
        info.sidecar_bytes = len(blob)
        if info.seek is not None and len(info.starts):  # (before the offsets go: tarindex -v reports it)
            from ..sources.seekable import amplification

            info.amplification = amplification(info.seek, info.starts, info.end, info.url)
        info.starts = info.keys = None
        if info.seek is not None and self.kept is None:  # (up to 32 KiB a checkpoint: not held either)
            from ..sources.seekable import record_kind

            with self.lock:
                if self.spool is None:
                    import tempfile

                    self.spool = tempfile.TemporaryFile(prefix="tarindex-seek-")
                at = self.spool.seek(0, 2)
                self.spool.write(info.seek)
                self.spool.flush()
            info.seek = _Spooled(record_kind(info.seek), self.spool, at, len(info.seek))
        return info

    def _write(self, path, data):
        from .output import open_sink

        if not self.made_dir and self.local:
            os.makedirs(self.work_dir, exist_ok=True)
            self.made_dir = True
        # committed at once into this run's own directory, which the command's gate commits as one output
        with open_sink(path, compression=None, defer=False, settings=self.settings) as sink:
            sink.write(data)

    def commit(self):
        """The sidecars written in their own directory replace the previous index's."""
        if self.keys is None or not self.local:
            return
        if not self.made_dir:
            os.makedirs(self.work_dir, exist_ok=True)
        old = None
        if os.path.lexists(self.final_dir):  # (a symbolic link is replaced, never written through)
            old = f"{self.final_dir}.old-{os.getpid()}-{id(self):x}"
            os.rename(self.final_dir, old)
        os.rename(self.work_dir, self.final_dir)
        self.made_dir = False
        if old is not None:
            if os.path.isdir(old) and not os.path.islink(old):
                import shutil

                shutil.rmtree(old, ignore_errors=True)
            else:
                os.unlink(old)

    def discard(self):
        if self.local and self.made_dir:  # not committed: what this run wrote goes
            import shutil

            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.made_dir = False

    def close(self):
        if self.spool is not None:
            self.spool.close()
            self.spool = None
        if self.keys is not None:
            self.keys.close()
            if not self.held:
                self.discard()

    def entries(self, infos, name=None):
        """The index ``dict`` of ``infos`` (each through :meth:`shard`)."""
        shardlist = []
        firsts = []  # the dataset position of each shard's first sample
        total = samples = 0
        for n, info in enumerate(infos):
            info = self.shard(n, info) if info.has_offsets and info.sidecar_bytes is None else info
            entry = {"url": name_for(info.url, self.index_dir), "nsamples": info.nsamples}
            if info.filesize is not None:
                entry["filesize"] = info.filesize
            entry["compression"] = info.compression
            entry["offsets"] = bool(info.has_offsets and self.sidecar_path is not None)
            firsts.append(samples)
            samples += info.nsamples
            if entry["offsets"]:
                entry["end"] = info.end
                entry["offsets_bytes"] = info.sidecar_bytes
                total += info.nsamples
            _add_stamp(entry, info)
            shardlist.append(entry)
        index = {"__kind__": KIND, "wids_version": 1}
        if name:
            index["name"] = name
        index["shardlist"] = shardlist
        self.firsts = firsts
        if self.sidecar_path is not None and any(e["offsets"] for e in shardlist):  # (also for shards with no samples)
            index["tarproc_offsets"] = {"format": 2, "dir": self.sidecar + ".d", "samples": total,
                                        "keys": keys_name(self.sidecar)}
        return index

    def key_table(self, index):
        """Write the key table (when ``index`` has offsets); its size goes in the index."""
        side = index.get("tarproc_offsets")
        if side is None:
            self.close()
            return
        if self.kept is not None:
            sink = io.BytesIO()
            side["keys_bytes"] = self.keys.write(sink, self.firsts)
            self.kept["keys"] = sink.getvalue()
            return
        from .output import open_sink

        from .output import commit_with_outputs

        with open_sink(keys_name(self.sidecar_path), compression=None, settings=self.settings) as sink:
            side["keys_bytes"] = self.keys.write(sink, self.firsts)
        self.held = True  # the directory's fate is the gate's now (or it is committed here)
        commit_with_outputs(self.commit, self.discard)


def build_index(infos, index_dir=None, sidecar=None, name=None):
    """The index ``dict`` of a list of :class:`ShardIndex` and its sidecars
    (a ``dict``: shard number -> its sidecar's bytes, ``"keys"`` -> the key
    table; empty for counts only), in memory."""
    writer = _Writer(index_dir, sidecar, sidecar, keep=True)
    try:
        index = writer.entries(infos, name)
        writer.key_table(index)
    finally:
        writer.close()
    return index, writer.kept or {}


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


class _Spooled:
    """A seek record waiting in the writer's spool file."""

    __slots__ = ("kind", "spool", "at", "length")

    def __init__(self, kind, spool, at, length):
        self.kind, self.spool, self.at, self.length = kind, spool, at, length

    def __len__(self):
        return self.length

    def read(self):
        data = os.pread(self.spool.fileno(), self.length, self.at)
        if len(data) != self.length:
            raise BadInput(f"the seek records' temporary file ends before byte {self.at + self.length}")
        return data


def write_json(index, output, more=(), settings=None):
    """Write each ``(path, parts)`` of ``more`` (``bytes``, each a ``bytes``
    or a spooled record), then the index JSON to ``output`` (a URL, ``-``
    for stdout); each appears only when complete (the JSON last, so an
    index never names a sidecar that is missing)."""
    from .output import open_sink

    for path, data in more:
        if data is not None:
            with open_sink(path, compression=None, settings=settings) as sink:
                for part in [data] if isinstance(data, bytes) else data:
                    sink.write(part if isinstance(part, bytes) else part.read())
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
    from ..sources.shardlist import as_url, as_urls

    from ..core.limits import MAX_URLS, bounded_list

    urls = bounded_list(as_urls(urls), "the shard list",  # the index holds one entry per shard
                        max_urls=MAX_URLS if settings is None else settings.max_urls)
    if output is not None:
        output = as_url(output, "output")
    if not urls:
        raise UsageError("no shards to index")
    index_dir, sidecar_path, sidecar = index_paths(output, offsets)
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

    writer = _Writer(index_dir, sidecar_path, sidecar, settings)
    try:
        # each shard's sidecar is written by the thread that read it, as soon as it is read
        infos = scan_many(urls, parallel, done, each=writer.shard, stats=stats, strict=strict, warn=warn,
                          checksum=checksum, seek_record=sidecar is not None, checkpoint_spacing=checkpoint_spacing,
                          retries=retries, stall_timeout=stall_timeout, settings=settings)
        return _publish(writer, infos, output, name, settings)
    finally:
        writer.close()


def index_paths(output, offsets=True):
    """Where an index written to ``output`` (a path or URL; ``-`` or
    ``None``: not written to a file) keeps its parts: ``(index_dir,
    sidecar_path, sidecar)``, the index's local directory (``None`` when
    not local), the offsets sidecar's path (``None`` without one: on
    stdout, or ``offsets`` false; ``offsets`` a path chooses it) and its
    name as the index records it (relative to the index when both are
    local).  A sidecar named like the index itself is refused."""
    from ..sources.open import scheme_of

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
        sidecar = name_for(sidecar_path, index_dir)
    return index_dir, sidecar_path, sidecar


def index_files(output, offsets=True):
    """Every file an index written to ``output`` may write: the JSON, the
    offsets sidecar and the seek sidecar (to refuse, before anything is
    written, an index that would replace an input)."""
    if output in (None, "-"):
        return [offsets] if isinstance(offsets, str) else []
    sidecar_path = index_paths(output, offsets)[1]
    return [output] + ([sidecar_path, seek_sidecar_name(sidecar_path), keys_name(sidecar_path)] if sidecar_path
                       else [])


def publish_index(infos, output=None, offsets=True, name=None, paths=None, settings=None):
    """The index ``dict`` of the shards :class:`ShardIndex` ``infos``
    describe (in that order), written to ``output`` when given (with its
    per-shard offsets sidecars, its key table and, when a compressed shard
    has a seek record, its seek sidecar, named by :func:`index_paths`; each
    part appears only when complete, the JSON last).  The one way an index
    is made, whether the shards were read (:func:`index_shards`) or written
    (:func:`~tarproc.sinks.split.split_samples`)."""
    index_dir, sidecar_path, sidecar = paths if paths is not None else index_paths(output, offsets)
    writer = _Writer(index_dir, sidecar_path, sidecar, settings, keep=output is None)
    try:
        return _publish(writer, infos, output, name, settings)
    finally:
        writer.close()


def _publish(writer, infos, output, name, settings):
    index = writer.entries(infos, name)
    more = ()
    if writer.sidecar is not None and any(i.seek is not None for i in infos):
        more = ((seek_sidecar_name(writer.sidecar_path), attach_seek(index, infos, seek_sidecar_name(writer.sidecar))),)
    writer.key_table(index)
    if output is not None:
        write_json(index, output, more, settings)
    return index


# ---------------------------------------------------------------- compressed shards: the seek sidecar


def seek_sidecar_name(offsets_path):
    """The seek sidecar beside an offsets sidecar: ``index.offsets`` ->
    ``index.seek``."""
    base = offsets_path[:-8] if offsets_path.endswith(".offsets") else offsets_path
    return base + ".seek"


def attach_seek(index, infos, seek_name):
    """The parts of the seek sidecar (``bytes``, or records waiting in the
    writer's spool file, in shard order) for the compressed shards of
    ``infos`` that have a seek record; their entries in ``index`` get
    ``"seek": {"kind", "at", "bytes"}`` and the index ``"tarproc_seek":
    {"file", "bytes"}`` (layout in docs/tarindex.md)."""
    from ..sources.seekable import SEEK_MAGIC, record_kind

    parts = [SEEK_MAGIC]
    at = len(SEEK_MAGIC)
    for entry, info in zip(index["shardlist"], infos):
        if info.seek is None or not entry.get("offsets"):
            continue
        kind = info.seek.kind if isinstance(info.seek, _Spooled) else record_kind(info.seek)
        entry["seek"] = {"kind": kind, "at": at, "bytes": len(info.seek)}
        parts.append(info.seek)
        at += len(info.seek)
    index["tarproc_seek"] = {"file": seek_name, "bytes": at}
    return parts


def written_shard_index(url, nsamples, sink, starts=None, keys=None, end=None, tar_bytes=None):
    """The :class:`ShardIndex` of a shard as it was written, not read again:
    ``sink`` the closed output it went to (its compression, and the groups
    of a grouped ``.tar.gz``/``.tar.zst``), ``starts`` (an ``array('Q')``)
    and ``keys`` where each sample began in the tar and its key (``None``:
    counts only), ``end`` where the last sample ended and ``tar_bytes`` the
    tar written, end marker included.  What :func:`~tarproc.sinks.scan.scan_shard` finds
    reading the shard: offsets in the (decoded) tar; for a grouped
    compressed shard the seek record of its groups and its compressed size;
    counts only for other compressed shards (one stream, xz, bzip2, or a
    zstd shard of one frame larger than
    :data:`~tarproc.sources.seekable.MAX_GROUP`)."""
    info = ShardIndex(url)
    info.nsamples = nsamples
    info.compression = sink.compression
    if starts is None:
        return info
    if info.compression is None:
        info.starts, info.keys, info.end, info.filesize = starts, keys, end, tar_bytes
        return info
    written = sink.written_groups()
    if written is not None:
        from ..sources.seekscan import groups_record

        groups, decoded, compressed = written
        info.seek = groups_record(groups, decoded, info.compression)
        if info.seek is not None:
            info.starts, info.keys, info.end, info.filesize = starts, keys, end, compressed
    return info


def write_shard_index(infos, output, name=None, warn=None, settings=None):
    """Write the index of the shards :class:`~tarproc.sinks.scan.ShardIndex` ``infos`` describe
    (as ``tarsplit --index`` does for the shards it wrote, from
    :func:`written_shard_index`); ``warn`` hears, in one line, of the
    compressed shards that get their sample counts only."""
    packed = [i for i in infos if i.compression and not i.has_offsets]
    if warn is not None and packed:  # one line, however many shards
        first = packed[0]
        warn(f"{first.url}: {first.compression}-compressed: the index has its sample count only"
             if len(packed) == 1 else
             f"{len(packed)} shards are compressed ({first.compression}: {first.url}, ...): the index has "
             "their sample counts only")
    return publish_index(infos, output, name=name, settings=settings)
