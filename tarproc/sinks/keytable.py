"""The key table of an index (``INDEX.keys``; layout in docs/tarindex.md),
built without holding every key of the dataset: each shard's key hashes
come in as its shard is indexed (from any thread, in any order), and wait
in a buffer of at most :data:`BUFFER` records; a full buffer is cut by the
top bits of the hash into :data:`PARTS` spill files in ``$TMPDIR``.  At the
end each part (about ``16 * samples / PARTS`` bytes) is sorted on its own,
its shard-relative positions made dataset positions, and written out in
order, then the bucket directory.

    table = KeyTable()
    table.add(0, key_hashes(["a", "b"])); table.add(1, key_hashes(["c"]))
    table.write(sink, [0, 2, 3])
"""

import os
import shutil
import tempfile
import threading

#: records held before they are spilled (16 bytes each: 16 MiB)
BUFFER = 1 << 20
#: the spill files, by the top bits of the hash
PART_BITS = 10
PARTS = 1 << PART_BITS

_TEMP = [("h", "<u8"), ("s", "<u4"), ("j", "<u4")]  # a key's hash, its shard, its position there


class KeyTable:
    """Key hashes of the shards of an index on their way to its key table."""

    def __init__(self, buffer=None):
        self.lock = threading.Lock()
        self.parts = []  # arrays waiting, each of _TEMP records
        self.held = 0
        self.count = 0
        self.buffer = BUFFER if buffer is None else buffer
        self.spill = None  # the directory of spill files, once the buffer was full

    def add(self, shard, hashes):
        """The hashes (``uint64``, in sample order) of the keys of shard
        number ``shard`` (under 2**32 shards of under 2**32 samples)."""
        import numpy as np

        rec = np.empty(len(hashes), _TEMP)
        rec["h"], rec["s"], rec["j"] = hashes, shard, np.arange(len(hashes), dtype="<u4")
        with self.lock:
            self.parts.append(rec)
            self.held += len(rec)
            self.count += len(rec)
            if self.held >= self.buffer:
                self._spill()

    def _spill(self):
        import numpy as np

        if self.spill is None:
            self.spill = tempfile.mkdtemp(prefix="tarindex-keys-")
        rec = np.concatenate(self.parts)
        self.parts, self.held = [], 0
        top = rec["h"] >> np.uint64(64 - PART_BITS)
        order = np.argsort(top, kind="stable")
        rec, top = rec[order], top[order]
        bounds = np.searchsorted(top, np.arange(PARTS + 1, dtype=np.uint64))
        for p in range(PARTS):
            a, b = int(bounds[p]), int(bounds[p + 1])
            if a < b:
                with open(os.path.join(self.spill, f"{p:04d}"), "ab") as f:
                    f.write(rec[a:b].tobytes())

    def close(self):
        """Remove the spill files (also after a failure)."""
        if self.spill is not None:
            shutil.rmtree(self.spill, ignore_errors=True)
            self.spill = None

    def _runs(self):
        """The records, in parts whose hashes come in ascending part order."""
        import numpy as np

        if self.spill is None:
            yield np.concatenate(self.parts) if self.parts else np.empty(0, _TEMP)
            return
        if self.parts:
            self._spill()
        for p in range(PARTS):
            path = os.path.join(self.spill, f"{p:04d}")
            if os.path.exists(path):
                yield np.fromfile(path, _TEMP)
                os.unlink(path)

    def write(self, sink, firsts):
        """Write the table to ``sink`` (a file object); ``firsts[s]``: the
        dataset position of shard ``s``'s first sample.  Returns the bytes
        written."""
        import numpy as np

        from ..core.indexfile import KEYS_HEAD, KEYS_MAGIC, RECORD, bucket_bits, keys_table_size

        bits = bucket_bits(self.count)
        firsts = np.asarray(firsts, dtype="<u8")
        counts = np.zeros(1 << bits, dtype="<u8")
        sink.write(KEYS_HEAD.pack(KEYS_MAGIC, self.count, bits))
        try:
            for rec in self._runs():
                pos = firsts[rec["s"]] + rec["j"]
                order = np.lexsort((pos, rec["h"]))  # by hash, then position (a key twice: its first place first)
                out = np.empty(len(rec), RECORD)
                out["h"], out["p"] = rec["h"][order], pos[order]
                del pos, order
                sink.write(out.tobytes())
                if bits:
                    counts += np.bincount((out["h"] >> np.uint64(64 - bits)).astype(np.int64),
                                          minlength=1 << bits).astype("<u8")
                else:
                    counts[0] += len(out)
        finally:
            self.close()
        directory = np.zeros((1 << bits) + 1, dtype="<u8")
        np.cumsum(counts, out=directory[1:])
        sink.write(directory.tobytes())
        return keys_table_size(self.count, bits)
