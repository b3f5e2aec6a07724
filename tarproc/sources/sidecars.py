"""The per-shard sidecars and the key table of an index, read on first use
(layouts in :mod:`tarproc.core.indexfile` and docs/tarindex.md).

A local sidecar is read a few bytes at a time with ``pread`` (what one
sample needs: its start and the next, where its key ends, its key), so the
processes that read one dataset (``DataLoader`` workers) share its pages in
the page cache and none of them holds them (a memory map was measured
instead: the kernel maps a whole large folio of the page cache on a fault,
up to 2 MiB, resident in every process); at most :data:`OPEN` are held open
at once (each holds a descriptor), the least recently used closed first.  A
remote one is fetched whole, with one read bounded by its size in the index
(and by ``TARPROC_MAX_INDEX``), into a cache of at most :data:`CACHE_BYTES`
bytes and :data:`CACHE_COUNT` sidecars.  The key table is mapped when
read the same way: two reads per lookup (the bucket's bounds, then the
bucket), local or remote (range reads).

    tables = ShardSidecars(fetch, settings)
    tables.get("idx/index.offsets.d/000007.offsets", 100000).key(5)
"""

import bisect
import os
import struct
import sys
import threading
from array import array
from collections import OrderedDict

from ..core.indexfile import KEYS_HEAD, KEYS_MAGIC, ShardTable, key_hash, keys_table_size, shard_sidecar_size
from ..errors import BadInput
from .open import scheme_of

#: local sidecars held open at once (a descriptor each)
OPEN = 16
#: remote sidecars kept: bytes, and count
CACHE_BYTES = 32 << 20
CACHE_COUNT = 256


class LocalFile:
    """A local file held open for ``pread`` (closed when the last reader
    lets go of it, so an evicted file another thread reads from stays valid)."""

    __slots__ = ("fd",)

    def __init__(self, path, size, what, release=None):
        try:
            self.fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            import errno

            fd = None
            if e.errno in (errno.EMFILE, errno.ENFILE) and release is not None:
                release()  # out of descriptors: close what this dataset holds and try once more
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError as again:
                    e = again
            if fd is None:
                from .open import cannot_open

                self.fd = None
                raise BadInput(cannot_open(path, e)) from None
            self.fd = fd
        got = os.fstat(self.fd).st_size
        if got != size:
            raise BadInput(f"{path}: {what} has {got} bytes, the index says {size}: not this index's (index the "
                           f"shards again)")

    def read(self, a, b):
        return os.pread(self.fd, b - a, a)

    def __del__(self, _close=os.close):
        if self.fd is not None:
            try:
                _close(self.fd)
            except OSError:
                pass
            self.fd = None


class ShardSidecars:
    """The :class:`~tarproc.core.indexfile.ShardTable` of each shard's
    sidecar, by path or URL; ``fetch(url, size)`` reads a remote one whole
    (at most ``size`` bytes)."""

    def __init__(self, fetch, settings):
        self.fetch, self.settings = fetch, settings
        self.lock = threading.Lock()
        self.local = OrderedDict()  # url -> ShardTable, least recently used first
        self.remote = OrderedDict()
        self.held = 0  # bytes of remote sidecars held
        self.on_emfile = None  # what else may be closed when the process is out of descriptors

    @property
    def tables(self):
        return {**self.local, **self.remote}

    def get(self, url, count, size):
        """The table of the sidecar at ``url``, which the index says holds
        ``count`` samples in ``size`` bytes."""
        with self.lock:
            for held in (self.local, self.remote):
                table = held.get(url)
                if table is not None:
                    held.move_to_end(url)
                    return table
        if size < shard_sidecar_size(count, 0) or size > self.settings.max_index:
            raise BadInput(f"{url}: the index gives its offsets file {size} bytes for {count} samples: a damaged "
                           f"index (or more than TARPROC_MAX_INDEX, {self.settings.max_index})")
        if scheme_of(url) == "file":
            f = LocalFile(url, size, "offsets file", release=self.release)
            table = ShardTable(f.read, size, count, url, f)
            with self.lock:
                self.local[url] = table
                while len(self.local) > OPEN:  # (an evicted file another thread reads from closes after that read)
                    self.local.popitem(last=False)
            return table
        buf = self.fetch(url, size)
        table = ShardTable(lambda a, b: buf[a:b], len(buf), count, url, buf)
        with self.lock:
            if url not in self.remote:
                self.remote[url] = table
                self.held += table.size
            while len(self.remote) > 1 and (len(self.remote) > CACHE_COUNT or self.held > CACHE_BYTES):
                self.held -= self.remote.popitem(last=False)[1].size
        return table

    def release(self):
        """Close the local sidecars held (a process out of descriptors)."""
        with self.lock:
            self.local.clear()
        if self.on_emfile is not None:
            self.on_emfile()

    def clear(self):
        with self.lock:
            self.local.clear()
            self.remote.clear()
            self.held = 0


class KeyTable:
    """The key table at ``url`` (``size`` bytes): :meth:`find` gives the
    positions whose key hashes like a key's, for the caller to check."""

    def __init__(self, url, size, read_range):
        self.url, self.size, self.read_range = url, size, read_range
        self.file = LocalFile(url, size, "key table") if scheme_of(url) == "file" else None
        head = bytes(self._bytes(0, KEYS_HEAD.size)) if size >= KEYS_HEAD.size else b""
        if len(head) != KEYS_HEAD.size:
            raise BadInput(f"{url}: not a tarproc key table (index the shards again)")
        magic, self.count, self.bits = KEYS_HEAD.unpack(head)
        if magic != KEYS_MAGIC or self.bits > 48 or keys_table_size(self.count, self.bits) != size:
            raise BadInput(f"{url}: not this index's key table ({size} bytes; index the shards again)")
        self.dir_at = KEYS_HEAD.size + 16 * self.count

    def _bytes(self, a, b):
        data = self.file.read(a, b) if self.file is not None else self.read_range(self.url, a, b)
        if len(data) != b - a:
            raise BadInput(f"{self.url}: key table ends at byte {a + len(data)}, before {b}: it changed while read "
                           f"(index the shards again)")
        return data

    def find(self, key):
        """The positions (ascending) whose key has the hash of ``key``."""
        h = key_hash(key)
        bucket = h >> (64 - self.bits) if self.bits else 0
        lo, hi = struct.unpack("<QQ", self._bytes(self.dir_at + 8 * bucket, self.dir_at + 8 * bucket + 16))
        if not lo <= hi <= self.count or hi - lo > 1 << 24:
            raise BadInput(f"{self.url}: bucket {bucket} runs from record {lo} to {hi} of {self.count}: a damaged key "
                           f"table (index the shards again)")
        start = KEYS_HEAD.size + 16 * lo
        records = array("Q", self._bytes(start, start + 16 * (hi - lo)))
        if sys.byteorder != "little":
            records.byteswap()
        hashes = records[0::2]
        i = bisect.bisect_left(hashes, h)
        out = []
        while i < len(hashes) and hashes[i] == h:
            out.append(records[2 * i + 1])
            i += 1
        return out
