"""Random access to the samples of indexed shards: :class:`IndexedDataset`.

An index made by :func:`tarproc.index_shards` (or ``tarindex``) gives, for
every sample of a shard, its byte range and key (for a gzip or zstd shard,
in its decoded tar, with a seek record saying where decoding restarts:
:mod:`tarproc.sources.seekable` reads the group or checkpoint span it needs,
with one range request, and decodes only that).  ``ds[i]``
reads only that range: ``os.pread`` on a local file, else the RANGE command
of the scheme table (:mod:`tarproc.runtime.schemes`): a range request for
``http(s)://`` (``curl -r``), ``aws s3api get-object --range`` for ``s3://``
and ``gsutil cat -r`` for ``gs://`` (each replaceable with
``TARPROC_RANGE_<SCHEME>``, a shell command where ``{url}``, ``{start}`` and
``{end}``, inclusive, stand for the quoted URL and the byte range, writing the
bytes to stdout; :meth:`IndexedDataset.get_many`'s kept-alive curl is the
table's RANGES, ``TARPROC_RANGES_<SCHEME>``).  The bytes must parse as exactly one sample with the key
the index names, so a shard that changed since indexing, offsets that do not
match it, or a server that ignores the range is an error, never a wrong
sample.

    ds = IndexedDataset("index.json")
    len(ds), ds[17]["__key__"], ds[10:20][0] == ds[10]

It is a map-style dataset for PyTorch's ``DataLoader`` without importing
torch: it pickles as its index location (workers load the index on first
use) and reads with ``pread``, which forked workers can share.
"""

import bisect
import io
import json
import os
import sys
import threading
import weakref
from collections import OrderedDict

from ..core.grouping import group
from ..core.limits import json_loads, shorten
from ..core.tario import TarReader
from ..errors import BadInput, TarprocError, UsageError
from ..core.indexfile import HEAD, KIND, parse_offsets, shard_sidecar
from .indexnames import resolve_name
from .open import read_all, scheme_of
from .sidecars import KeyTable, ShardSidecars
from .shardlist import url_from_data

#: A sample larger than this is refused before it is read (a damaged index
#: could otherwise name a range of any size).  ``TARPROC_MAX_SAMPLE`` changes it.
MAX_SAMPLE = 1 << 34


# the one rule of names in an index, which the writer follows too
_resolve = resolve_name


def _base_of(location):
    if scheme_of(location) == "file":
        return os.path.dirname(location) or "."
    return location.rsplit("/", 1)[0]


#: The largest index JSON read (``TARPROC_MAX_INDEX``); about 170 bytes a shard.
MAX_INDEX = 1 << 28

# the sidecar is read from a path or a remote URL only, never a command (pipe:)
_SIDECAR_SCHEMES = ("file", "http", "https", "s3", "gs")


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _Index:
    """The loaded index: shard URLs, cumulative counts, offsets and keys."""

    def __init__(self, source, base, settings):
        where = source if isinstance(source, str) else "index"
        if isinstance(source, str):
            limit = settings.max_index
            data = read_all(source, limit, f"the index is larger than {limit} bytes (TARPROC_MAX_INDEX)",
                            settings=settings)
            try:
                desc = json_loads(data.decode("utf-8", "surrogateescape"))
            except ValueError as e:
                raise BadInput(f"{source}: not a JSON index: {e}") from None
            if base is None:
                base = _base_of(source)
        else:
            desc = source
        if not isinstance(desc, dict) or desc.get("__kind__") != KIND or not isinstance(desc.get("shardlist"), list):
            raise BadInput(f"{where}: not a shard index (no \"__kind__\": \"{KIND}\" with a shardlist)")
        self.shards = desc["shardlist"]
        self.urls = []
        self.cum = [0]
        for n, shard in enumerate(self.shards):
            if not isinstance(shard, dict) or not isinstance(shard.get("url"), str) \
                    or not _is_count(shard.get("nsamples")):
                raise BadInput(f"{where}: shard entry {n} is not {{\"url\": ..., \"nsamples\": N}}")
            if shard.get("filesize") is not None and not _is_count(shard["filesize"]):
                raise BadInput(f"{where}: shard entry {n} has a bad filesize ({shorten(repr(shard['filesize']))})")
            self.urls.append(url_from_data(_resolve(shard["url"], base), source if isinstance(source, str) else None,
                                           "shard index"))
            self.cum.append(self.cum[-1] + shard["nsamples"])
        if self.cum[-1] > sys.maxsize:
            raise BadInput(f"{where}: the shards have {self.cum[-1]} samples: more samples than a dataset can "
                           f"hold ({sys.maxsize}): a damaged index")
        self.starts = self.keyblob = self.keyends = None
        self.sidecars = self.side_dir = self.keys_path = self.key_table = self.by_key = None
        side = desc.get("tarproc_offsets")
        if isinstance(side, dict) and side.get("format") == 2:  # per-shard sidecars and a key table
            self._per_shard(side, base, where, settings)
            side = None
        elif side is not None and not (isinstance(side, dict) and isinstance(side.get("file"), str)
                                       and _is_count(side.get("bytes")) and _is_count(side.get("samples"))):
            raise BadInput(f"{where}: \"tarproc_offsets\" is not {{\"file\": ..., \"samples\": N, \"bytes\": N}} "
                           f"nor {{\"format\": 2, \"dir\": ..., \"keys\": ..., \"keys_bytes\": N}}")
        if not side and self.sidecars is None:
            for n, shard in enumerate(self.shards):
                if shard.get("offsets"):
                    raise BadInput(f"{where}: shard entry {n} has offsets but the index names no offsets file "
                                   f"(\"tarproc_offsets\"): a damaged index")
        if side:
            path = _resolve(side["file"], base)
            if scheme_of(path) not in _SIDECAR_SCHEMES:
                raise BadInput(f"{where}: the offsets file {shorten(path)!r} is not a path or URL "
                               f"(a {scheme_of(path)}: source): a damaged or hostile index")
            blob = read_all(path, side["bytes"], f"offsets file has more than the {side['bytes']} bytes the index "
                                                 f"says: not this index's offsets (index the shards again)",
                            settings=settings)
            if len(blob) != side.get("bytes") or len(blob) < HEAD.size:
                raise BadInput(f"{path}: offsets file has {len(blob)} bytes, the index says {side.get('bytes')}: "
                               f"not this index's offsets (index the shards again)")
            self.starts, self.keyblob, self.keyends = parse_offsets(blob, side.get("samples"), path)
            count = len(self.starts)
            for n, shard in enumerate(self.shards):
                if shard.get("offsets") and not (isinstance(shard.get("first"), int) and isinstance(shard.get("end"), int)
                                                 and 0 <= shard["first"] <= count - shard["nsamples"]):
                    raise BadInput(f"{where}: shard entry {n} has bad offset fields")

        # compressed shards: where decoding restarts (sources/seekable.py), read per shard on first use
        self.seek_path = None
        self.seek_tables = {}
        seek = desc.get("tarproc_seek")
        if seek is not None:
            if not (isinstance(seek, dict) and isinstance(seek.get("file"), str) and _is_count(seek.get("bytes"))):
                raise BadInput(f"{where}: \"tarproc_seek\" is not {{\"file\": ..., \"bytes\": N}}")
            self.seek_path = _resolve(seek["file"], base)
            if scheme_of(self.seek_path) not in _SIDECAR_SCHEMES:
                raise BadInput(f"{where}: the seek file {shorten(self.seek_path)!r} is not a path or URL "
                               f"(a {scheme_of(self.seek_path)}: source): a damaged or hostile index")
        for n, shard in enumerate(self.shards):
            sk = shard.get("seek")
            if sk is not None and not (self.seek_path and isinstance(sk, dict) and _is_count(sk.get("at"))
                                       and _is_count(sk.get("bytes")) and shard.get("offsets")
                                       and sk["at"] + sk["bytes"] <= seek["bytes"]):
                raise BadInput(f"{where}: shard entry {n} has a bad \"seek\" entry: a damaged index")

    def _per_shard(self, side, base, where, settings):
        """An index with a sidecar per shard (read on first use) and a key table."""
        if not (isinstance(side.get("dir"), str) and isinstance(side.get("keys"), str)
                and _is_count(side.get("keys_bytes")) and _is_count(side.get("samples"))):
            raise BadInput(f"{where}: \"tarproc_offsets\" is not {{\"format\": 2, \"dir\": ..., \"keys\": ..., "
                           f"\"keys_bytes\": N, \"samples\": N}}")
        self.side_dir, self.keys_path = _resolve(side["dir"], base), _resolve(side["keys"], base)
        self.keys_bytes = side["keys_bytes"]
        for path in (self.side_dir, self.keys_path):
            if scheme_of(path) not in _SIDECAR_SCHEMES:
                raise BadInput(f"{where}: the offsets file {shorten(path)!r} is not a path or URL "
                               f"(a {scheme_of(path)}: source): a damaged or hostile index")
        total = 0
        for n, shard in enumerate(self.shards):
            if shard.get("offsets"):
                if not (_is_count(shard.get("end")) and _is_count(shard.get("offsets_bytes"))):
                    raise BadInput(f"{where}: shard entry {n} has bad offset fields")
                total += shard["nsamples"]
        if total != side["samples"]:
            raise BadInput(f"{where}: the shards with offsets have {total} samples, \"tarproc_offsets\" says "
                           f"{side['samples']}: a damaged index")
        self.sidecars = ShardSidecars(lambda url, size: read_all(
            url, size, f"offsets file has more than the {size} bytes the index says: not this index's offsets "
                       f"(index the shards again)", settings=settings), settings)

    def table(self, s):
        """The :class:`~tarproc.core.indexfile.ShardTable` of shard ``s`` (an index with per-shard sidecars)."""
        shard = self.shards[s]
        return self.sidecars.get(shard_sidecar(self.side_dir, s), shard["nsamples"], shard["offsets_bytes"])

    def sample(self, s, j):
        """``(start, end, key)`` of sample ``j`` of shard ``s``, from the index only."""
        shard = self.shards[s]
        if self.sidecars is not None:
            table = self.table(s)
            start, end = table.span(j, shard["end"])
            return start, end, table.key(j)
        g = shard["first"] + j
        start = int(self.starts[g])
        end = int(self.starts[g + 1]) if j + 1 < shard["nsamples"] else shard["end"]
        return start, end, self.key(g)

    def key_at(self, s, j):
        if self.sidecars is not None:
            return self.table(s).key(j)
        return self.key(self.shards[s]["first"] + j)

    def key(self, pos):
        start = int(self.keyends[pos - 1]) + 1 if pos else 0
        return bytes(self.keyblob[start:int(self.keyends[pos])]).decode("utf-8", "surrogateescape")

    def find(self, key, read_range):
        """The dataset positions whose index key is ``key``, ascending (the
        key table's candidates, each checked against its shard's sidecar)."""
        if self.sidecars is not None:
            if self.key_table is None:
                self.key_table = KeyTable(self.keys_path, self.keys_bytes, read_range)
            found = []
            for pos in self.key_table.find(key):
                if pos < self.cum[-1]:
                    s = bisect.bisect_right(self.cum, pos) - 1
                    if self.shards[s].get("offsets") and self.key_at(s, pos - self.cum[s]) == key:
                        found.append(pos)
            return found
        if self.by_key is None:  # an older index: its keys are all in memory already
            by_key = {}
            for s, shard in enumerate(self.shards):
                if shard.get("offsets"):
                    for j in range(shard["nsamples"]):
                        by_key.setdefault(self.key_at(s, j), []).append(self.cum[s] + j)
            self.by_key = by_key
        return self.by_key.get(key, [])


def _after_fork_in_child():
    """A forked child gets new locks: the parent's may have been held by a
    thread (loading the index, opening a shard) that the child does not have."""
    for ds in list(_LIVE):
        ds._lock = threading.Lock()
        if ds._index is not None and ds._index.sidecars is not None:
            ds._index.sidecars.lock = threading.Lock()
        ds._groups = _Groups(ds._settings.group_cache)
        for f in ds._fds.values():
            f.users = 0  # the reads that used them were the parent's threads'


def _preload():
    """Import every module the read path needs, once, holding the lock a
    fork waits for (:mod:`tarproc.runtime.forksafe`): a child forked while
    another thread was inside one of these imports would wait forever on
    that import's lock (numpy takes ~0.1 s to import)."""
    global _preloaded
    if _preloaded:
        return
    from ..runtime.forksafe import loading

    with loading():
        if _preloaded:
            return
        import concurrent.futures  # noqa: F401
        import posixpath  # noqa: F401
        import shlex  # noqa: F401
        import tarfile  # noqa: F401
        import tempfile  # noqa: F401
        import urllib.parse  # noqa: F401

        import numpy  # noqa: F401  (the offsets)

        from .. import settings  # noqa: F401
        from ..core import indexfile, rules  # noqa: F401
        from ..runtime import child, schemes  # noqa: F401
        from . import keepalive, open, ranges, seekable, stamps  # noqa: F401
        from .compression import zstd_module

        for optional in (zstd_module, lambda: __import__("indexed_gzip"), lambda: __import__("ssl")):
            try:
                optional()
            except Exception:  # noqa: BLE001 - not installed: the read that needs it says so
                pass
        _preloaded = True


_preloaded = False
_LIVE = weakref.WeakSet()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class IndexedDataset:
    """The samples of indexed shards, by position.

    ``index`` is the location of an index JSON (path or URL; relative shard
    URLs are relative to its directory) or the index ``dict`` itself (then
    ``base`` is the directory relative URLs are resolved against).
    ``ds[i]`` is the same ``dict`` :func:`~tarproc.iter_samples` gives for
    that sample (``__key__``, fields as ``bytes``, ``__source__``); a slice
    gives another :class:`IndexedDataset` over those positions.
    :meth:`get_many` (and ``__getitems__``, which PyTorch's ``DataLoader``
    calls with a batch of indices) reads many samples at once.

    A shard that changed since it was indexed is one error naming it: its
    size, and its modification time (local files) or ETag / Last-Modified
    (HTTP, S3), when the index records them, are compared on every read
    (``verify="size"``: the size only, for a copy that did not keep times;
    ``"none"``: neither), and every sample read must carry its indexed key.

    ``settings`` (a :class:`~tarproc.settings.Settings`): the bounds
    (``max_index``, ``max_sample``) and client commands
    (``TARPROC_READ_<SCHEME>``, ``TARPROC_RANGE_<SCHEME>``,
    ``TARPROC_RANGES_<SCHEME>``).  This is the
    one library entry point that honours the environment: given no
    ``settings``, it reads the ``TARPROC_*`` variables when it is made (it
    is built in DataLoader workers and programs that have no command line);
    ``settings=Settings()`` ignores them.  A copy (pickled, sliced) keeps the
    settings it was made with."""

    def __init__(self, index, base=None, _positions=None, verify="stamp", settings=None):
        _preload()  # first: every import of the read path, before a fork can split one
        from ..settings import Settings
        from .stamps import VERIFY

        if isinstance(index, os.PathLike):
            index = os.fspath(index)
        if not isinstance(index, (str, dict)):
            raise UsageError("IndexedDataset needs the location of an index JSON or the index dict")
        if verify not in VERIFY:
            raise UsageError(f"verify={verify!r}: one of {', '.join(map(repr, VERIFY))}")
        self._source = index
        self._base = base
        self._positions = _positions
        self._verify = verify
        self._settings = Settings.from_environ() if settings is None else settings
        self._index = None
        self._lock = threading.Lock()
        self._fds = OrderedDict()  # url -> _File, least recently used first (at most open_files)
        self._groups = _Groups(self._settings.group_cache)
        self._checked = set()
        _LIVE.add(self)

    @property
    def settings(self):
        """The :class:`~tarproc.settings.Settings` this dataset reads with."""
        return self._settings

    # ------------------------------------------------------------ pickling

    def __getstate__(self):
        return {"_source": self._source, "_base": self._base, "_positions": self._positions,
                "_verify": self._verify, "_settings": self._settings}

    def __setstate__(self, state):
        self.__init__(state["_source"], state["_base"], state["_positions"], state.get("_verify", "stamp"),
                      state.get("_settings"))

    def __del__(self, _close=os.close):
        # may run at interpreter shutdown, after this module's globals are set
        # to None: only attributes and the bound default are used, no global
        files = getattr(self, "_fds", None)
        if not files:
            return
        self._fds = {}
        for f in files.values():
            f.closed = True
            if not f.users:
                try:
                    _close(f.fd)
                except OSError:
                    pass

    def close(self):
        """Close the shard files held open (reopened on the next access); a
        file another thread is reading from is closed when that read ends."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ did not finish
            return
        with lock:
            files, self._fds = self._fds, OrderedDict()
            for f in files.values():
                f.closed = True
                if not f.users:
                    _close_quietly(f.fd)
            self._groups.clear()

    # ------------------------------------------------------------ positions

    @property
    def index(self):
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = _Index(self._source, self._base, self._settings)
        return self._index

    @property
    def urls(self):
        """The shard URLs, resolved against the index's location."""
        return list(self.index.urls)

    def __len__(self):
        if self._positions is not None:
            return len(self._positions)
        return self.index.cum[-1]

    def _position(self, i):
        n = len(self)
        if not isinstance(i, int):
            try:
                i = i.__index__()
            except AttributeError:
                raise TypeError(f"IndexedDataset indices must be integers or slices, not {type(i).__name__}") from None
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample {i} is out of range (the dataset has {n})")
        return self._positions[i] if self._positions is not None else i

    def __getitem__(self, i):
        if isinstance(i, slice):
            positions = range(self.index.cum[-1]) if self._positions is None else self._positions
            return IndexedDataset(self._source, self._base, positions[i], self._verify, self._settings)
        return self._read(self._position(i))

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def locate(self, i):
        """``(shard URL, position in the shard)`` of sample ``i``."""
        pos = self._position(i)
        idx = self.index
        s = bisect.bisect_right(idx.cum, pos) - 1
        return idx.urls[s], pos - idx.cum[s]

    def key(self, i):
        """The key the index gives sample ``i`` (read from the index only)."""
        pos = self._position(i)
        idx = self.index
        s = bisect.bisect_right(idx.cum, pos) - 1
        shard = idx.shards[s]
        if not shard.get("offsets"):
            raise BadInput(f"{idx.urls[s]}: the index has only a sample count for this shard (no keys)")
        return idx.key_at(s, pos - idx.cum[s])

    def index_of(self, key):
        """The position of the sample whose key is ``key`` in this dataset
        (the first, if the index has it twice), from the index only: the key
        table's bucket for its hash, then its shard's sidecar (no key is
        loaded beyond those).  ``KeyError`` when no sample has it."""
        if not isinstance(key, str):
            raise TypeError(f"index_of: a key is a str, not {type(key).__name__}")
        idx = self.index
        for pos in idx.find(key, lambda url, a, b: self._range(url, a, b, None)):
            if self._positions is None:
                return pos
            try:
                return self._positions.index(pos)
            except ValueError:
                continue
        raise KeyError(key)

    # ------------------------------------------------------------ many samples at once

    def get_many(self, indices, gap=64 << 10, workers=None):
        """The samples at ``indices`` (any iterable of ints; repeats and any
        order allowed), as a list in the order of ``indices``: equal to
        ``[ds[i] for i in indices]``, read with fewer and concurrent requests.

        Samples of one shard whose byte ranges are less than ``gap`` bytes
        apart are read with one request (one ``pread``, one HTTP range),
        and the requests go out at once, ``workers`` at a time (default: the
        setting ``range_concurrency``): over http(s), kept-alive connections
        of this process (:mod:`tarproc.sources.keepalive`), kept for the next
        call; s3 and gs, one client process per request.  In a compressed
        shard, each group (or checkpoint span) the samples need is read and
        decoded once, and kept for the next calls (``group_cache`` bytes).
        An error names the index it was reading, and the shard."""
        from ..runtime.schemes import override
        from .ranges import coalesce

        indices = list(indices)
        workers = self._settings.range_concurrency if workers is None else workers
        if not isinstance(gap, int) or gap < 0 or not isinstance(workers, int) or workers < 1:
            raise UsageError(f"get_many: gap {gap!r} and workers {workers!r}: gap >= 0 bytes, workers >= 1")
        positions = [self._position(i) for i in indices]
        out = [None] * len(positions)
        spans, packed, alone = {}, {}, []
        idx = self.index
        for k, pos in enumerate(positions):
            s = bisect.bisect_right(idx.cum, pos) - 1
            shard = idx.shards[s]
            if shard.get("offsets") and not shard.get("compression"):
                spans[k] = _about(indices[k], self._span, pos)
            elif shard.get("offsets") and shard.get("seek") is not None:
                packed.setdefault(s, []).append(k)  # its groups read and decoded once for all of them
            else:  # read as ds[i] reads it (and fails as it does)
                alone.append(k)
        runs = coalesce([(sp.url, sp.start, sp.stop, k) for k, sp in spans.items()], gap)
        builtin, curl, local, other = [], [], [], []
        for r in runs:
            scheme = scheme_of(r.url)
            if scheme in ("http", "https") and override("RANGE", scheme, self._settings) is None:
                (curl if override("RANGES", scheme, self._settings) is not None else builtin).append(r)
            else:
                (local if scheme == "file" else other).append(r)
        # local files: the kernel is told of every range first (it reads them ahead, at once), then
        # they are read here (from the page cache a thread per read costs more than the read)
        self._willneed(local)
        # the threads read bytes (the GIL is free meanwhile); this thread parses them, in order
        tasks = [(self._read_run, (r, spans, indices)) for r in other]
        if curl:
            from .ranges import share

            tasks += [(self._read_http_runs, (part, spans, indices)) for part in share(curl, workers)]
        if builtin:
            tasks.append((self._read_builtin_runs, (builtin, spans, indices, workers, out)))
        tasks += [(self._read_packed, (s, ks, positions, indices, out, workers)) for s, ks in packed.items()]
        tasks += [(self._read_alone, (k, positions, indices, out)) for k in alone]
        fetched = _run_all(tasks, workers)
        fetched.append(self._read_run(r, spans, indices)[0] for r in local)
        for pairs in fetched:
            for run, data in pairs:
                for k in run.tags:
                    sp = spans[k]
                    out[k] = _about(indices[k], _sample_of, sp, data[sp.start - run.start : sp.stop - run.start],
                                    self._settings)
        return out

    def __getitems__(self, indices):
        """PyTorch's batched fetch (its ``DataLoader`` calls it with the
        indices of a batch): :meth:`get_many`, a list."""
        return self.get_many(indices)

    def _willneed(self, runs):
        """Ask the kernel to read ahead the ranges of ``runs`` in files already open."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None or len(runs) < 2:
            return
        with self._lock:
            fds = {url: f.fd for url, f in self._fds.items()}
        for r in runs:
            fd = fds.get(r.url)
            if fd is not None:
                try:
                    advise(fd, r.start, r.stop - r.start, os.POSIX_FADV_WILLNEED)
                except OSError:  # advice only (a file closed meanwhile)
                    pass

    def _read_alone(self, k, positions, indices, out):
        out[k] = _about(indices[k], self._read, positions[k])
        return ()

    def _read_run(self, run, spans, indices):
        first = spans[run.tags[0]]
        return [(run, _about(indices[run.tags[0]], self._range, run.url, run.start, run.stop, first.filesize,
                             first.shard))]

    def _read_http_runs(self, runs, spans, indices):
        """Runs read by the RANGES command that replaces the in-process client (a curl config on its stdin)."""
        from .ranges import http_ranges
        from .stamps import check_stamp, stamp_of_headers

        def check(url, headers):
            check_stamp(url, spans[by_url[url]].shard, stamp_of_headers(headers), self._verify)

        by_url = {r.url: r.tags[0] for r in runs}
        try:
            datas = http_ranges([(r.url, r.start, r.stop) for r in runs], check,
                                _table_command("RANGES", runs[0].url, self._settings))
        except BadInput as e:
            k = runs[getattr(e, "request", 0)].tags[0]
            raise BadInput(f"index {indices[k]}: {e}") from None
        return list(zip(runs, datas))

    def _read_builtin_runs(self, runs, spans, indices, workers, out):
        """Runs of http(s) shards over this process's kept-alive connections,
        each parsed into its samples by the thread that read it (while the
        others wait on the network)."""
        shard_of = {r.url: spans[r.tags[0]].shard for r in runs}

        def parse(n, data):
            run = runs[n]
            for k in run.tags:
                sp = spans[k]
                try:
                    out[k] = _sample_of(sp, data[sp.start - run.start : sp.stop - run.start], self._settings)
                except BadInput as e:
                    e.index = indices[k]
                    raise

        try:
            self._http([(r.url, r.start, r.stop) for r in runs], shard_of, workers, parse)
        except BadInput as e:
            at = getattr(e, "index", None)
            raise BadInput(f"index {indices[runs[getattr(e, 'request', 0)].tags[0]] if at is None else at}: "
                           f"{e}") from None
        return ()

    def _http(self, requests, shard_of, workers, done=None):
        """The bytes of each ``(url, start, stop)``, read in process
        (:mod:`tarproc.sources.keepalive`); each answer's stamp checked
        against its shard's entry (``shard_of[url]``)."""
        from .keepalive import pool
        from .stamps import check_stamp, stamp_of_headers

        def check(url, headers):
            check_stamp(url, _entry(shard_of.get(url)), stamp_of_headers(headers), self._verify)

        st = self._settings
        return pool().fetch(requests, workers, check, st.stall_timeout, st.open_files, done)

    # ------------------------------------------------------------ reading

    def _read(self, pos):
        span = self._span(pos)
        if isinstance(span, dict):  # a compressed shard's sample, read and decoded by _read_compressed
            return span
        return _sample_of(span, self._range(span.url, span.start, span.stop, span.filesize, span.shard),
                          self._settings)

    def _span(self, pos):
        """The :class:`_Span` of the sample at position ``pos`` of an
        uncompressed shard with offsets (an error for a shard without); for
        a compressed shard with a seek record, the sample itself (its
        group, read and decoded: :meth:`_read_compressed`)."""
        idx, s, shard, url, j, start, end, key = self._locate(pos)
        if shard.get("seek") is not None:
            return self._read_compressed(idx, s, shard, url, j, start, end, key)
        filesize = shard.get("filesize")
        # and the header after the sample, when the shard has one: a member of this same sample there
        # means the shard changed (a rewrite of the same size can move a member across the boundary)
        peek = 512 if isinstance(filesize, int) and end + 512 <= filesize else 0
        return _Span(url, j, key, start, end, end + peek, filesize, shard)

    def _locate(self, pos):
        """``(index, shard number, entry, url, j, start, end, key)`` of the
        sample at ``pos``: its byte range (in the decoded tar of a
        compressed shard), checked against the bounds."""
        idx = self.index
        s = bisect.bisect_right(idx.cum, pos) - 1
        shard = idx.shards[s]
        url = idx.urls[s]
        j = pos - idx.cum[s]
        if not shard.get("offsets"):
            if shard.get("compression"):
                raise BadInput(f"{url}: shard is {shard['compression']}-compressed: the index has only its sample "
                               f"count (random access needs a .tar, a .tar.gz or a multi-frame .tar.zst indexed "
                               f"with `tarindex SHARDS -o INDEX.json` (xz, bzip2 and one-frame zstd cannot be: "
                               f"`tarcat IN -o OUT.tar.zst` rewrites it in frames))")
            raise BadInput(f"{url}: shard is indexed without offsets (a counts-only or wids index): no offsets for "
                           f"random access (index it with `tarindex SHARDS -o INDEX.json`, which writes them)")
        start, end, key = idx.sample(s, j)
        limit = self._settings.max_sample
        if not 0 <= start < end or end - start > limit:
            raise BadInput(f"{url}: sample {j} ({key!r}): the index gives bytes {start}-{end}: a damaged index")
        return idx, s, shard, url, j, start, end, key

    # ------------------------------------------------------------ compressed shards (sources/seekable.py)

    def _seek_table(self, idx, s, shard):
        from .seekable import SeekTable

        table = idx.seek_tables.get(s)
        if table is None:
            sk = shard["seek"]
            if sk["bytes"] > self._settings.max_index:  # (part of the index: its bound)
                raise BadInput(f"{idx.seek_path}: the index gives a seek record of {sk['bytes']} bytes, more than "
                               f"TARPROC_MAX_INDEX ({self._settings.max_index})")
            record = self._range(idx.seek_path, sk["at"], sk["at"] + sk["bytes"], None) if sk["bytes"] else b""
            if len(record) != sk["bytes"]:
                raise BadInput(f"{idx.seek_path}: seek file has fewer bytes than the index says: not this index's "
                               f"(index the shards again)")
            table = idx.seek_tables[s] = SeekTable(record, idx.seek_path)
        return table

    def _read_compressed(self, idx, s, shard, url, j, start, end, key):
        """Sample ``j`` of a gzip/zstd shard: its group(s) (or the span between
        two checkpoints) read with one range request and decoded (or found
        in the cache of decoded groups)."""
        table = self._seek_table(idx, s, shard)
        where = f"{url}: sample {j} ({key!r}) at decoded bytes {start}-{end}"
        data = table.read_many(lambda pairs: self._fetch_many(url, shard, pairs, 1), shard.get("compression"),
                               [(start, end, where)], self._settings.max_sample, self._groups, url)[0]
        return _the_sample(data, url, key, where, self._settings)

    def _read_packed(self, s, ks, positions, indices, out, workers):
        """The samples ``ks`` (of ``get_many``) of compressed shard ``s``:
        every group (or checkpoint span) they need read and decoded once."""
        spans = []
        for k in ks:
            idx, s, shard, url, j, start, end, key = _about(indices[k], self._locate, positions[k])
            spans.append((start, end, f"{url}: sample {j} ({key!r}) at decoded bytes {start}-{end}", key))
        table = _about(indices[ks[0]], self._seek_table, idx, s, shard)
        try:
            datas = table.read_many(lambda pairs: self._fetch_many(url, shard, pairs, workers),
                                    shard.get("compression"), [sp[:3] for sp in spans], self._settings.max_sample,
                                    self._groups, url)
        except BadInput as e:
            at = next((k for k, sp in zip(ks, spans) if str(e).startswith(sp[2])), ks[0])
            raise BadInput(f"index {indices[at]}: {e}") from None
        for k, (start, end, where, key), data in zip(ks, spans, datas):
            out[k] = _about(indices[k], _the_sample, data, url, key, where, self._settings)
        return ()

    def _fetch_many(self, url, shard, pairs, workers):
        """Bytes ``a``..``b`` of ``url`` for each ``(a, b)`` of ``pairs``:
        over http(s), at once on kept-alive connections; else one by one."""
        from ..runtime.schemes import override

        scheme = scheme_of(url)
        if scheme in ("http", "https") and override("RANGE", scheme, self._settings) is None and len(pairs) > 1:
            return self._http([(url, a, b) for a, b in pairs], {url: shard}, workers)
        return [self._range(url, a, b, shard.get("filesize"), shard) for a, b in pairs]

    def _range(self, url, start, end, filesize, shard=None):
        """Bytes ``start`` to ``end`` of ``url``: ``pread`` for a file, else
        the scheme table's RANGE command (:mod:`tarproc.runtime.schemes`;
        what its answer holds, and what is checked in it, is decided here)."""
        from ..runtime.schemes import has_command, override

        shard = _entry(shard, filesize)
        scheme = scheme_of(url)
        if scheme == "file":
            return self._pread(url, start, end, shard)
        if scheme == "-" or not has_command("RANGE", url, self._settings):
            raise BadInput(f"{url}: cannot read a byte range of a {scheme}: input (random access needs a file, "
                           f"http(s)://, s3:// or gs:// URL, or TARPROC_RANGE_{scheme.upper()})")
        if override("RANGE", scheme, self._settings) is None:
            if scheme in ("http", "https"):
                return self._http([(url, start, end)], {url: shard}, 1)[0]
            if scheme == "s3":
                return _range_s3(url, start, end, shard, self._verify, self._settings)
        return _range_command(url, start, end, self._settings)  # the bytes alone on its stdout

    def _pread(self, url, start, end, shard):
        from .stamps import check_stamp, local_stamp

        shard = _entry(shard)
        with self._lock:
            f = self._fds.get(url)
            if f is None:
                f = self._fds[url] = _File(self._open(url))
                self._evict(self._settings.open_files)
            else:
                self._fds.move_to_end(url)
            f.users += 1  # close() leaves it open until this read ends
        try:
            # on every read (an fstat is cheap): a shard rewritten in place since it was opened is seen too
            check_stamp(url, shard, local_stamp(os.fstat(f.fd)), self._verify)
            parts = []
            pos = start
            while pos < end:
                try:
                    piece = os.pread(f.fd, min(end - pos, 1 << 24), pos)
                except OSError as e:
                    raise BadInput(f"{url}: read error at offset {pos}: {e.strerror}") from None
                if not piece:
                    break
                parts.append(piece)
                pos += len(piece)
        finally:
            with self._lock:
                f.users -= 1
                if f.closed and not f.users:
                    _close_quietly(f.fd)
        return parts[0] if len(parts) == 1 else b"".join(parts)


    def _open(self, url):
        """A descriptor of the shard file ``url`` (with the lock held); out
        of descriptors, the files this dataset holds idle are closed, and
        it is tried once more."""
        import errno

        for attempt in (0, 1):
            try:
                return os.open(url, os.O_RDONLY)
            except OSError as e:
                if attempt == 0 and e.errno in (errno.EMFILE, errno.ENFILE) and self._evict(0):
                    continue
                from .open import cannot_open

                raise BadInput(cannot_open(url, e)) from None

    def _evict(self, keep):
        """Close the least recently used files until at most ``keep`` are held
        (with the lock held; a file being read is closed when its read ends).
        Whether any was closed."""
        closed = False
        while len(self._fds) > max(keep, 0):
            _, f = self._fds.popitem(last=False)
            f.closed = True
            if not f.users:
                _close_quietly(f.fd)
                closed = True
        return closed


class _Groups:
    """Decoded groups of compressed shards (``(url, kind, n)`` -> bytes),
    the least recently used dropped past ``limit`` bytes; shared by the
    threads of one dataset."""

    def __init__(self, limit):
        self.limit = limit
        self.held = OrderedDict()
        self.size = 0
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            data = self.held.get(key)
            if data is not None:
                self.held.move_to_end(key)
            return data

    def put(self, key, data):
        if len(data) > self.limit:
            return
        with self.lock:
            old = self.held.pop(key, None)
            if old is not None:
                self.size -= len(old)
            self.held[key] = data
            self.size += len(data)
            while self.size > self.limit:
                _, gone = self.held.popitem(last=False)
                self.size -= len(gone)

    def clear(self):
        with self.lock:
            self.held.clear()
            self.size = 0


def _about(i, fn, *args):
    """``fn(*args)``, its error naming the dataset index ``i`` it was for."""
    try:
        return fn(*args)
    except BadInput as e:
        raise BadInput(f"index {i}: {e}") from None


def _run_all(tasks, workers):
    """The results of ``fn(*args)`` for each ``(fn, args)``, run ``workers``
    at a time in threads (in this thread when there is one task or worker);
    the first error (in the order of ``tasks``) is raised once all ended."""
    if len(tasks) <= 1 or workers == 1:
        return [fn(*args) for fn, args in tasks]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(tasks)), thread_name_prefix="tarproc-get-many") as pool:
        futures = [pool.submit(fn, *args) for fn, args in tasks]
    return [f.result() for f in futures]


class _Span:
    """Where one sample of an uncompressed shard is: bytes ``start`` to
    ``end`` of ``url`` (its ``j``-th sample, ``key``), read up to ``stop``
    (``end`` plus the next header, when there is one)."""

    __slots__ = ("url", "j", "key", "start", "end", "stop", "filesize", "shard")

    def __init__(self, url, j, key, start, end, stop, filesize, shard):
        self.url, self.j, self.key, self.start, self.end, self.stop = url, j, key, start, end, stop
        self.filesize, self.shard = filesize, shard


def _sample_of(span, data, settings=None):
    """The sample in ``data`` (the bytes of ``span``), checked: exactly one
    sample with the indexed key, and no member of it after its end."""
    url, j, key, start, end = span.url, span.j, span.key, span.start, span.end
    where = f"{url}: sample {j} ({key!r}) at bytes {start}-{end}"
    if len(data) != span.stop - start:
        raise BadInput(f"{where}: got {len(data)} bytes instead of {span.stop - start}: the shard is shorter "
                       f"than when it was indexed (index it again)")
    if span.stop > end:
        data, after = data[: end - start], data[end - start :]
        name = _member_of(after, key)
        if name is not None:
            raise BadInput(f"{where}: the member after these bytes, {name!r}, belongs to this sample too: the "
                           f"shard changed since it was indexed (index it again)")
    return _the_sample(data, url, key, where, settings)


def _plain_sample(data, url, key):
    """The sample in ``data`` when it is the common case, read without the
    general reader (a third of the time of a batch over HTTP): only plain
    ustar/GNU headers of regular members, checksums right, every name a
    field of ``key`` by THE name rule, each field once, the members filling
    ``data`` exactly.  ``None`` for anything else: the general reader then
    reads it, and says what is wrong."""
    from ..core.rules import classify

    sample = {"__key__": key, "__source__": url}
    pos, end = 0, len(data)
    while pos < end:
        head = data[pos:pos + 512]
        if len(head) < 512 or head[156:157] not in (b"0", b"\0") or head[257:262] != b"ustar":
            return None
        size_field = head[124:136].rstrip(b" \0")
        chk_field = head[148:156].rstrip(b" \0")
        if not size_field.isdigit() or not chk_field.isdigit() or max(size_field + chk_field) > 0x37:
            return None
        if int(chk_field, 8) != sum(head) - sum(head[148:156]) + 256:
            return None
        name = head[:100].partition(b"\0")[0]
        if head[257:263] == b"ustar\0" and head[345] != 0:
            name = head[345:500].partition(b"\0")[0] + b"/" + name
        parts = classify(name.decode("utf-8", "surrogateescape"))
        size = int(size_field, 8)
        if type(parts) is not tuple or parts[0] != key or parts[1] in sample or pos + 512 + size > end:
            return None
        sample[parts[1]] = data[pos + 512:pos + 512 + size]
        pos += 512 + (size + 511) // 512 * 512
    return sample if pos == end and len(sample) > 2 else None


def _the_sample(data, url, key, where, settings=None):
    """The one sample that ``data`` (the bytes of an indexed range) must hold,
    with the key the index names; else one error naming ``where``.
    ``settings``: the dataset's bounds (``sparse_holes``)."""
    fast = _plain_sample(data, url, key)
    if fast is not None:
        return fast
    holes = settings.sparse_holes if settings is not None else None
    # the bytes alone, no end marker added: a range cut short must not read as members padded with zeros;
    # not strict: what a reader of the whole shard only warns about (a pax mtime that is no number) reads here too
    reader = TarReader(io.BytesIO(data), url, strict=False, sparse_holes=holes)
    try:
        samples = list(group(reader.members(), url))
    except TarprocError as e:
        bound = getattr(e, "bound", None)
        if bound:  # a bound set lower than this sample needs: the shard may well be as indexed
            raise BadInput(f"{where}: the sample goes over a bound of this read ({getattr(e, 'problem', e)}): "
                           f"set {bound} higher to read it") from None
        raise BadInput(f"{where}: these bytes are not the indexed sample ({getattr(e, 'problem', e)}): the shard "
                       f"changed since it was indexed, or the index is not this shard's (index it again)") from None
    if reader.offset != len(data):  # (zero blocks may lead: a shard of concatenated archives)
        raise BadInput(f"{where}: these bytes do not end where the sample's last member ends: the shard changed "
                       f"since it was indexed, or the index is not this shard's (index it again)")
    if len(samples) != 1 or samples[0]["__key__"] != key:
        found = ", ".join(repr(x["__key__"]) for x in samples[:3]) or "no sample"
        raise BadInput(f"{where}: found {found} where the index says {key!r}: the shard changed since it was "
                       f"indexed, or the index is not this shard's (index it again)")
    return samples[0]


def _member_of(block, key):
    """The name of the regular member whose header is ``block`` when its key
    is ``key``, else None (not a header, the end marker, a pax or long-name
    header whose name comes later: no verdict)."""
    import tarfile

    from ..core.rules import split_name

    # most often the next sample's header: a name field without the key's last part cannot be the key's
    # (a ustar name prefix could hold it: then the whole header is parsed)
    if not (block[257:263] == b"ustar\0" and block[345:346] not in (b"", b"\0")) \
            and key.rpartition("/")[2].encode("utf-8", "surrogateescape") not in block[:100].partition(b"\0")[0]:
        return None
    try:
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return None
    if info.type not in tarfile.REGULAR_TYPES:
        return None
    parts = split_name(info.name)
    return info.name if parts is not None and parts[0] == key else None


class _File:
    """A shard file held open, with the number of reads using it."""

    __slots__ = ("fd", "users", "closed")

    def __init__(self, fd):
        self.fd, self.users, self.closed = fd, 0, False


def _close_quietly(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def _run(cmd, url, what, shell=False, settings=None):
    from ..runtime.child import Child

    try:
        child = Child(cmd if shell else list(cmd), url, what, tail_bytes=_tail_bytes(settings))
    except OSError as e:
        raise BadInput(Child.start_error(url, what, e)) from None
    try:
        out = child.stdout.read()
    except BaseException:
        child.kill()
        raise
    finally:
        child.stdout.close()
    if child.wait() != 0:
        raise BadInput(child.failure())
    return out


def _range_command(url, start, end, settings):
    """The bytes a RANGE command (an override, or gs's ``gsutil cat -r``)
    writes to its stdout, run as a shell command."""
    from ..runtime.schemes import command  # THE filling of client templates: one pass, quoted, never inside quotes

    cmd = command("RANGE", url, settings, start=str(start), end=str(end - 1))
    return _run(cmd, url, cmd.split()[0], shell=True, settings=settings)


def _table_command(action, url, settings, **values):
    """The command of ``action`` for ``url`` from the scheme table: the
    table's own as its argument vector, run without a shell (the values
    were quoted by the filling), a replacing one (``TARPROC_<ACTION>_<SCHEME>``)
    as the shell command it is."""
    import shlex

    from ..runtime.schemes import command, override

    cmd = command(action, url, settings, **values)
    return cmd if override(action, scheme_of(url), settings) is not None else shlex.split(cmd)


def _range_argv(url, start, end, settings, **values):
    """The table's own RANGE command of ``url`` (http, s3): its argument vector."""
    return _table_command("RANGE", url, settings, start=str(start), end=str(end - 1), **values)


def _tail_bytes(settings):
    """The stderr a failed client's message is taken from (``TARPROC_TAIL_BYTES``)."""
    return settings.tail_bytes if settings is not None else None


def _entry(shard, filesize=None):
    """The index entry a stamp is checked against (a caller may have only the size)."""
    return shard if isinstance(shard, dict) else {"filesize": shard if isinstance(shard, int) else filesize}


def _range_s3(url, start, end, shard, verify="stamp", settings=None):
    """One ``get-object --range`` (the table's RANGE: the bytes to a file,
    the JSON answer, checked, on stdout)."""
    import tempfile

    bucket, _, key = url[len("s3://"):].partition("/")
    if not bucket or not key:
        raise BadInput(f"{url}: not an s3://BUCKET/KEY URL")
    fd, tmp = tempfile.mkstemp(prefix=".tarproc-range-")
    os.close(fd)
    try:
        out = _run(_range_argv(url, start, end, settings, file=tmp), url, "aws s3api get-object", settings=settings)
        from .stamps import check_stamp, stamp_of_s3

        try:
            meta = json.loads(out.decode("utf-8", "replace") or "{}")
        except ValueError:
            meta = {}
        crange = meta.get("ContentRange")
        if crange:
            span, _, total = str(crange).partition(" ")[2].partition("/")
            if span != f"{start}-{end - 1}":
                raise BadInput(f"{url}: S3 answered bytes {span} to a request for {start}-{end - 1}")
        check_stamp(url, _entry(shard), stamp_of_s3(out.decode("utf-8", "replace"), ranged=True), verify)
        with open(tmp, "rb") as f:
            return f.read(end - start + 1)
    finally:
        os.unlink(tmp)


def read_range(url, start, end, settings=None):
    """Bytes ``start`` to ``end`` (exclusive) of ``url``: ``pread`` of a
    local file, else the scheme table's RANGE command (http(s), s3, gs, or
    ``TARPROC_RANGE_<SCHEME>``), as :class:`IndexedDataset` reads a sample;
    fewer bytes than asked is a :class:`BadInput` naming the URL (tarreshard
    reads one bucket of an intermediate object with it)."""
    from ..runtime.schemes import has_command, override

    if end <= start:
        return b""
    scheme = scheme_of(url)
    if scheme == "file":
        try:
            fd = os.open(url, os.O_RDONLY)
        except OSError as e:
            from .open import cannot_open

            raise BadInput(cannot_open(url, e)) from None
        try:
            data = os.pread(fd, end - start, start)
        except OSError as e:
            raise BadInput(f"{url}: read error at offset {start}: {e.strerror}") from None
        finally:
            os.close(fd)
    elif scheme == "-" or not has_command("RANGE", url, settings):
        raise BadInput(f"{url}: cannot read a byte range of a {scheme}: input (give a file, http(s)://, s3:// "
                       f"or gs:// URL, or TARPROC_RANGE_{scheme.upper()})")
    elif override("RANGE", scheme, settings) is None and scheme in ("http", "https"):
        from .keepalive import pool
        from ..settings import Settings

        st = settings if settings is not None else Settings()
        data = pool().fetch([(url, start, end)], 1, lambda url, headers: None, st.stall_timeout, st.open_files)[0]
    elif override("RANGE", scheme, settings) is None and scheme == "s3":
        data = _range_s3(url, start, end, {}, "none", settings)
    else:
        data = _range_command(url, start, end, settings)
    if len(data) != end - start:
        raise BadInput(f"{url}: bytes {start}-{end - 1} asked, {len(data)} read: the object is shorter than "
                       f"its index says")
    return data
