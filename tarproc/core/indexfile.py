"""The format of a shard index, which the writer (:mod:`tarproc.sinks.index`)
and the reader (:mod:`tarproc.sources.indexed`) share: the JSON's kind
(:data:`KIND`, what webdataset's ``wids`` reads), the per-shard offsets
sidecars (``INDEX.offsets.d/NNNNNN.offsets``: :data:`SHARD_MAGIC`, the
number of samples and the bytes of keys, every sample's start offset
(little-endian uint64), where every key ends (uint32) and the keys), the key
table (``INDEX.keys``: :data:`KEYS_MAGIC`, records of a key's 64-bit hash
and its sample's position sorted by hash, then a directory of buckets) and
the one-file sidecar of older indexes (``INDEX.offsets``,
:func:`parse_offsets`, read only).  Layouts in docs/tarindex.md.
"""

import hashlib
import struct

from ..errors import BadInput

KIND = "wids-shard-index-v1"
#: the one-file offsets sidecar of indexes made before per-shard sidecars (read only)
MAGIC = b"TARPROC-OFFSETS1"
HEAD = struct.Struct("<16sQQ")  # magic, number of samples, bytes of keys

#: a shard's offsets sidecar
SHARD_MAGIC = b"TARPROC-OFFSETS2"
#: the key table
KEYS_MAGIC = b"TARPROC-KEYS0001"
KEYS_HEAD = struct.Struct("<16sQQ")  # magic, number of records, bits of the bucket directory
#: what a record of the key table holds: a key's hash, its sample's position in the dataset
RECORD = [("h", "<u8"), ("p", "<u8")]
#: a bucket of the key table holds about this many records (one page of hashes)
BUCKET = 256


def shard_sidecar(directory, n):
    """Shard number ``n``'s sidecar in ``directory`` (``INDEX.offsets.d``)."""
    return f"{directory}/{n:06d}.offsets"


def shard_sidecar_size(count, key_bytes):
    """The size of a shard's sidecar of ``count`` samples and ``key_bytes``
    bytes of keys: the head, the starts, the key ends (padded to 8 bytes), the keys."""
    return HEAD.size + 8 * count + 4 * (count + (count & 1)) + key_bytes


def pack_shard(starts, keys):
    """A shard's sidecar: ``starts`` (the little-endian uint64 offsets of its
    samples, ``bytes``) and ``keys`` (a list of ``str``)."""
    import numpy as np

    encoded = [k.encode("utf-8", "surrogateescape") for k in keys]
    count = len(encoded)
    ends = np.cumsum(np.fromiter(map(len, encoded), np.int64, count), dtype=np.int64)
    key_bytes = int(ends[-1]) if count else 0
    if key_bytes >= 1 << 32:
        raise BadInput(f"the keys of one shard take {key_bytes} bytes: more than an index holds (4 GiB)")
    pad = b"\0\0\0\0" if count & 1 else b""
    return b"".join((HEAD.pack(SHARD_MAGIC, count, key_bytes), starts, ends.astype("<u4").tobytes(), pad,
                     *encoded))


class ShardTable:
    """The offsets and keys of one shard, read from its sidecar of ``size``
    bytes by ``read(start, end)`` (a few bytes at a time: the pages stay in
    the page cache, shared, not in this process): :meth:`span` and
    :meth:`key` check what they return against the sidecar's own bounds, so
    a damaged sidecar is a :class:`~tarproc.errors.BadInput` naming
    ``where``, never an allocation or a read it claims."""

    __slots__ = ("read", "size", "where", "count", "key_bytes", "owner")

    def __init__(self, read, size, count, where, owner=None):
        self.read, self.size, self.where, self.owner = read, size, where, owner  # (owner: what keeps read valid)
        head = read(0, HEAD.size) if size >= HEAD.size else b""
        if len(head) != HEAD.size:
            raise BadInput(f"{where}: not a tarproc offsets file for this index (index the shards again)")
        magic, n, key_bytes = HEAD.unpack(head)
        if magic != SHARD_MAGIC or n != count or size != shard_sidecar_size(n, key_bytes):
            raise BadInput(f"{where}: not this index's offsets file for this shard ({size} bytes; index the "
                           f"shards again)")
        self.count, self.key_bytes = n, key_bytes

    def _get(self, a, b):
        data = self.read(a, b)
        if len(data) != b - a:
            raise BadInput(f"{self.where}: offsets file ends at byte {a + len(data)}, before {b}: it changed while "
                           f"read (index the shards again)")
        return data

    def key(self, j):
        at = HEAD.size + 8 * self.count + 4 * (j - 1)
        if j:
            a, b = struct.unpack(_TWO_U32, self._get(at, at + 8))
        else:
            a, b = 0, struct.unpack("<I", self._get(at + 4, at + 8))[0]
        if not a <= b <= self.key_bytes:
            raise BadInput(f"{self.where}: key {j} runs from byte {a} to {b} of {self.key_bytes}: a damaged index "
                           f"(index the shards again)")
        at = self.size - self.key_bytes
        return bytes(self._get(at + a, at + b)).decode("utf-8", "surrogateescape")

    def span(self, j, end):
        """``(start, end)`` of sample ``j`` (``end``: the shard's, for the last)."""
        at = HEAD.size + 8 * j
        if j + 1 < self.count:
            return struct.unpack(_TWO_U64, self._get(at, at + 16))
        return struct.unpack("<Q", self._get(at, at + 8))[0], end


_TWO_U32 = "<II"
_TWO_U64 = "<QQ"


def key_hash(key):
    """The 64-bit hash of ``key`` (a ``str``) in the key table: BLAKE2b."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "little")


def key_hashes(keys):
    """:func:`key_hash` of every key of ``keys``, a numpy ``uint64`` array."""
    import numpy as np

    blake = hashlib.blake2b
    return np.frombuffer(b"".join(blake(k.encode("utf-8", "surrogateescape"), digest_size=8).digest() for k in keys),
                         "<u8").copy()


def bucket_bits(count):
    """The bits of the key table's directory for ``count`` records: buckets
    of about :data:`BUCKET` records."""
    return max(0, (max(count, 1) - 1).bit_length() - BUCKET.bit_length() + 1)


def keys_table_size(count, bits):
    return KEYS_HEAD.size + 16 * count + 8 * ((1 << bits) + 1)


def parse_offsets(blob, samples, where):
    """``(starts, keyblob, keyends)`` of an older index's one-file sidecar
    ``blob`` that the index says holds ``samples`` samples: the offsets (a
    numpy ``<u8`` array over ``blob``), the keys' bytes and the position of
    each key's newline in them.  A :class:`~tarproc.errors.BadInput` naming
    ``where`` for bytes that are not such a sidecar."""
    import numpy as np

    if len(blob) < HEAD.size:
        raise BadInput(f"{where}: not a tarproc offsets file for this index")
    magic, count, nkeys = HEAD.unpack_from(blob)
    if magic != MAGIC or count != samples or HEAD.size + 8 * count + nkeys != len(blob):
        raise BadInput(f"{where}: not a tarproc offsets file for this index")
    starts = np.frombuffer(blob, "<u8", count, HEAD.size)
    keyblob = memoryview(blob)[HEAD.size + 8 * count:]
    keyends = np.flatnonzero(np.frombuffer(keyblob, np.uint8) == 10)
    if len(keyends) != count:
        raise BadInput(f"{where}: offsets file has {len(keyends)} keys for {count} samples")
    return starts, keyblob, keyends
