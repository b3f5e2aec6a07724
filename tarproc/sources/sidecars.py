"""The per-shard sidecars and the key table of an index, read on first use
(layouts in :mod:`tarproc.core.indexfile` and docs/tarindex.md).

A local sidecar is memory-mapped, so the processes that read one dataset
(``DataLoader`` workers) share its pages through the page cache, and only
the pages touched are resident; at most :data:`MAPPED` are mapped at once
(each holds a descriptor), the least recently used unmapped first.  A
remote one is fetched whole, with one read bounded by its size in the index
(and by ``TARPROC_MAX_INDEX``), into a cache of at most :data:`CACHE_BYTES`
bytes and :data:`CACHE_COUNT` sidecars.  The key table is mapped when
local, read with two range reads per lookup when remote.

    tables = ShardSidecars(fetch, settings)
    tables.get("idx/index.offsets.d/000007.offsets", 100000).key(5)
"""

import mmap
import os
import threading
from collections import OrderedDict

from ..core.indexfile import KEYS_HEAD, KEYS_MAGIC, RECORD, ShardTable, key_hash, keys_table_size, shard_sidecar_size
from ..errors import BadInput
from .open import scheme_of

#: local sidecars mapped at once (a descriptor each)
MAPPED = 16
#: remote sidecars kept: bytes, and count
CACHE_BYTES = 32 << 20
CACHE_COUNT = 256


def map_file(path, size, what):
    """A read-only map of the local file ``path``, which must have ``size``
    bytes (else a :class:`~tarproc.errors.BadInput` about ``what``)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        from .open import cannot_open

        raise BadInput(cannot_open(path, e)) from None
    try:
        got = os.fstat(fd).st_size
        if got != size:
            raise BadInput(f"{path}: {what} has {got} bytes, the index says {size}: not this index's (index the "
                           f"shards again)")
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else b""
    finally:
        os.close(fd)


class ShardSidecars:
    """The :class:`~tarproc.core.indexfile.ShardTable` of each shard's
    sidecar, by path or URL; ``fetch(url, size)`` reads a remote one whole
    (at most ``size`` bytes)."""

    def __init__(self, fetch, settings):
        self.fetch, self.settings = fetch, settings
        self.lock = threading.Lock()
        self.tables = OrderedDict()  # url -> ShardTable, least recently used first
        self.held = 0  # bytes of remote sidecars held

    def get(self, url, count, size):
        """The table of the sidecar at ``url``, which the index says holds
        ``count`` samples in ``size`` bytes."""
        with self.lock:
            table = self.tables.get(url)
            if table is not None:
                self.tables.move_to_end(url)
                return table
        if size < shard_sidecar_size(count, 0) or size > self.settings.max_index:
            raise BadInput(f"{url}: the index gives its offsets file {size} bytes for {count} samples: a damaged "
                           f"index (or more than TARPROC_MAX_INDEX, {self.settings.max_index})")
        local = scheme_of(url) == "file"
        buf = map_file(url, size, "offsets file") if local else self.fetch(url, size)
        table = ShardTable(buf, count, url)
        with self.lock:
            if url not in self.tables:
                self.tables[url] = table
                if not local:
                    self.held += size
                self._trim()
        return table

    def _trim(self):
        # (a table evicted while another thread reads it stays alive until that read ends: no close)
        while len(self.tables) > 1:
            local = [u for u in self.tables if scheme_of(u) == "file"]
            remote = len(self.tables) - len(local)
            if len(local) > MAPPED:
                drop = local[0]
            elif remote > CACHE_COUNT or self.held > CACHE_BYTES:
                drop = next(u for u in self.tables if scheme_of(u) != "file")
            else:
                return
            table = self.tables.pop(drop)
            if scheme_of(drop) != "file":
                self.held -= len(table.buf)

    def clear(self):
        with self.lock:
            self.tables.clear()
            self.held = 0


class KeyTable:
    """The key table at ``url`` (``size`` bytes): :meth:`find` gives the
    positions whose key hashes like a key's, for the caller to check."""

    def __init__(self, url, size, read_range):
        import numpy as np

        self.url, self.size, self.read_range = url, size, read_range
        self.local = scheme_of(url) == "file"
        self.buf = map_file(url, size, "key table") if self.local else None
        head = bytes(self._bytes(0, KEYS_HEAD.size)) if size >= KEYS_HEAD.size else b""
        if len(head) != KEYS_HEAD.size:
            raise BadInput(f"{url}: not a tarproc key table (index the shards again)")
        magic, self.count, self.bits = KEYS_HEAD.unpack(head)
        if magic != KEYS_MAGIC or self.bits > 48 or keys_table_size(self.count, self.bits) != size:
            raise BadInput(f"{url}: not this index's key table ({size} bytes; index the shards again)")
        self.dir_at = KEYS_HEAD.size + 16 * self.count
        self.np = np

    def _bytes(self, a, b):
        return memoryview(self.buf)[a:b] if self.local else self.read_range(self.url, a, b)

    def find(self, key):
        """The positions (ascending) whose key has the hash of ``key``."""
        np = self.np
        h = key_hash(key)
        bucket = h >> (64 - self.bits) if self.bits else 0
        lo, hi = (int(x) for x in np.frombuffer(self._bytes(self.dir_at + 8 * bucket, self.dir_at + 8 * bucket + 16),
                                                "<u8"))
        if not lo <= hi <= self.count or hi - lo > 1 << 24:
            raise BadInput(f"{self.url}: bucket {bucket} runs from record {lo} to {hi} of {self.count}: a damaged key "
                           f"table (index the shards again)")
        start = KEYS_HEAD.size + 16 * lo
        recs = np.frombuffer(self._bytes(start, start + 16 * (hi - lo)), RECORD)
        hashes = recs["h"]
        i = int(np.searchsorted(hashes, np.uint64(h)))
        out = []
        while i < len(recs) and int(hashes[i]) == h:
            out.append(int(recs["p"][i]))
            i += 1
        return out
