"""The format of a shard index, which the writer (:mod:`tarproc.sinks.index`)
and the reader (:mod:`tarproc.sources.indexed`) share: the JSON's kind
(:data:`KIND`, what webdataset's ``wids`` reads) and the offsets sidecar
(``INDEX.offsets``; layout in docs/tarindex.md): a head (:data:`HEAD`:
:data:`MAGIC`, the number of samples, the bytes of keys), every sample's start
offset (little-endian uint64) and every key, one per line.
"""

import struct

from ..errors import BadInput

KIND = "wids-shard-index-v1"
MAGIC = b"TARPROC-OFFSETS1"
HEAD = struct.Struct("<16sQQ")  # magic, number of samples, bytes of keys


def pack_offsets(total, starts, keys):
    """The sidecar's bytes: ``starts`` (the little-endian uint64 offsets of
    ``total`` samples, ``bytes``) and ``keys`` (each followed by a newline,
    ``bytes``)."""
    return HEAD.pack(MAGIC, total, len(keys)) + starts + keys


def parse_offsets(blob, samples, where):
    """``(starts, keyblob, keyends)`` of a sidecar's bytes ``blob`` that the
    index says holds ``samples`` samples: the offsets (a numpy ``<u8``
    array over ``blob``), the keys' bytes and the position of each key's
    newline in them.  A :class:`~tarproc.errors.BadInput` naming ``where``
    for bytes that are not such a sidecar."""
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
