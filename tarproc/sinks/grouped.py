"""Compressed outputs that stay randomly accessible: groups of whole samples.

A ``.tar.gz`` or ``.tar.zst`` written by tarproc is cut into *groups* of
whole samples of at most ``group_size`` bytes of tar (1 MiB by default; a
sample larger than that is a group of its own).  Decoding can restart at the
start of every group, so :class:`~tarproc.IndexedDataset` reads one group to
get one sample (docs/tarindex.md), and every reader still reads the file
whole, as usual:

* gzip: ONE gzip member; at the end of each group the deflate stream is
  flushed with ``Z_FULL_FLUSH`` (an empty stored block, the next block
  starts on a byte boundary and refers to nothing before it), as ``pigz
  --independent`` does.  Several gzip members would not do: Python's
  ``tarfile`` in stream mode (``r|gz``), and so webdataset, stop silently at
  the end of the first member.
* zstd: one zstd frame per group, followed by the seek table of the zstd
  *seekable format* (a skippable frame at the END of the file, which every
  zstd decoder skips; one at the start would hide the zstd magic from
  readers that sniff the first bytes).  The table lists each frame's
  compressed and decompressed size; a frame never holds more than
  :data:`FRAME_CAP` bytes (the table's fields are 32-bit), so a huge sample
  spans several frames.  Frames carry zstd's content checksum.

``group_size=0`` writes one stream, as before groups existed (gzip via
:mod:`gzip`, zstd by the ``zstd`` program).  The same input and options give
the same bytes.
"""

import io
import struct
import zlib

#: Default bytes of tar per group (``--group-size``).
DEFAULT_GROUP_SIZE = 1 << 20
#: The largest frame (decompressed bytes) of a grouped zstd output.
FRAME_CAP = 1 << 30
#: The zstd seekable format (contrib/seekable_format in the zstd sources).
SEEKABLE_MAGIC = 0x8F92EAB1
SKIPPABLE_SEEK_MAGIC = 0x184D2A5E
#: gzip level and zstd level (as ``gzip -6`` and ``zstd -3``, the defaults).
GZIP_LEVEL = 6
ZSTD_LEVEL = 3


def _write_all(raw, data):
    view = memoryview(data)
    while view:
        n = raw.write(view)
        if n is None:  # a non-blocking descriptor with no room: never ours
            raise BlockingIOError("output would block")
        view = view[n:]


class _Tap:
    """The compressed bytes on their way to ``raw``: counted (``pos``) and
    their CRC-32 taken, except the last ``hold`` bytes, which join the CRC
    only when more bytes follow or :meth:`mark` ends a group (so a gzip
    trailer, written last, is in no group)."""

    def __init__(self, raw, hold):
        self.raw = raw
        self.hold = hold
        self.pos = 0
        self.crc = 0
        self.held = b""

    def write(self, data):
        n = len(data)
        if n:
            _write_all(self.raw, data)
            self.pos += n
            view = memoryview(data).cast("B")
            if n >= self.hold:
                self.crc = zlib.crc32(view[: n - self.hold], zlib.crc32(self.held, self.crc))
                self.held = bytes(view[n - self.hold:])
            else:
                buf = self.held + bytes(view)
                self.crc = zlib.crc32(buf[: len(buf) - self.hold], self.crc)
                self.held = buf[len(buf) - self.hold:]
        return n

    def flush(self):
        pass  # (the buffered writer above flushes raw)

    def mark(self, held=True):
        """The CRC-32 of the bytes since the last mark (without the held
        bytes with ``held=False``); a new group starts."""
        crc = zlib.crc32(self.held, self.crc) if held else self.crc
        self.crc, self.held = 0, b""
        return crc


class GzipGroups(io.RawIOBase):
    """A gzip member written to ``raw``; :meth:`cut` ends a group with a full
    flush.  Write through an :class:`io.BufferedWriter` (small writes).

    ``groups`` lists the groups written, as ``tarindex`` finds them reading
    the file (:class:`~tarproc.sources.seekscan.GzipScanner`): ``(compressed
    start, compressed end, decoded start, CRC-32 of the compressed bytes)``,
    the last one once closed; ``decoded`` and ``compressed`` count the bytes."""

    def __init__(self, raw, level=GZIP_LEVEL):
        import gzip

        self.tap = _Tap(raw, 8)  # the member's trailer: CRC-32 and length, 8 bytes
        self.gz = gzip.GzipFile(filename="", fileobj=self.tap, mode="wb", compresslevel=level, mtime=0)
        self.dirty = False
        self.groups = []
        self.decoded = 0
        self.tap.mark()  # the header is in no group
        self.start = (self.tap.pos, 0)

    @property
    def compressed(self):
        return self.tap.pos

    def writable(self):
        return True

    def write(self, data):
        n = self.gz.write(data)
        if n:
            self.dirty = True
            self.decoded += n
        return n

    def cut(self):
        """End the group: the next bytes start a fresh, byte-aligned deflate
        block that refers to nothing before it."""
        if self.dirty:
            self.gz.flush(zlib.Z_FULL_FLUSH)
            self.dirty = False
            self._group(self.tap.pos)

    def _group(self, end, last=False):
        self.groups.append((self.start[0], end, self.start[1], self.tap.mark(held=not last)))
        self.start = (end, self.decoded)

    def close(self):
        if not self.closed:
            try:
                self.gz.close()
                self._group(self.tap.pos - len(self.tap.held), last=True)  # up to the trailer
            finally:
                super().close()


class ZstdFrames(io.RawIOBase):
    """zstd frames written to ``raw``, one per group (:meth:`cut`), then the
    seek table on :meth:`close`.  ``groups``, ``decoded``, ``compressed``: as
    :class:`GzipGroups` has them (a group is a frame)."""

    def __init__(self, raw, level=ZSTD_LEVEL):
        from ..sources.compression import zstd_module

        zstd = zstd_module()
        self.raw = raw
        self.comp = zstd.ZstdCompressor(options={zstd.CompressionParameter.compression_level: level,
                                                 zstd.CompressionParameter.checksum_flag: 1})
        self.flush_frame = zstd.ZstdCompressor.FLUSH_FRAME
        self.frames = []  # (compressed, decompressed) sizes
        self.csize = self.dsize = 0
        self.groups = []
        self.crc = 0
        self.compressed = self.decoded = 0

    def writable(self):
        return True

    def _out(self, data):
        if data:
            _write_all(self.raw, data)
            self.csize += len(data)
            self.crc = zlib.crc32(data, self.crc)

    def write(self, data):
        view = memoryview(data).cast("B")
        n = len(view)
        while view:
            room = FRAME_CAP - self.dsize
            if room <= 0:
                self.cut()
                continue
            piece = view[:room]
            self._out(self.comp.compress(piece))
            self.dsize += len(piece)
            view = view[len(piece):]
        return n

    def cut(self):
        """End the frame (if it holds anything)."""
        if self.dsize:
            self._end_frame()

    def _end_frame(self):
        self._out(self.comp.compress(b"", self.flush_frame))
        self.frames.append((self.csize, self.dsize))
        self.groups.append((self.compressed, self.compressed + self.csize, self.decoded, self.crc))
        self.compressed += self.csize
        self.decoded += self.dsize
        self.csize = self.dsize = self.crc = 0

    def close(self):
        if self.closed:
            return
        try:
            if self.dsize or not self.frames:
                self._end_frame()
            table = seek_table(self.frames)
            _write_all(self.raw, table)
            self.compressed += len(table)
        finally:
            super().close()


def seek_table(frames):
    """The zstd seekable format's seek table for ``frames`` (a list of
    ``(compressed, decompressed)`` sizes), without checksums."""
    body = b"".join(struct.pack("<II", c, d) for c, d in frames)
    footer = struct.pack("<IBI", len(frames), 0, SEEKABLE_MAGIC)
    return struct.pack("<II", SKIPPABLE_SEEK_MAGIC, len(body) + len(footer)) + body + footer


def grouped_compressor(codec, raw, level=None):
    """The writer of ``codec`` (``"gzip"`` or ``"zstd"``) with groups, or
    ``None`` for a codec that has none."""
    if codec == "gzip":
        return GzipGroups(raw, GZIP_LEVEL if level is None else level)
    if codec == "zstd":
        return ZstdFrames(raw, ZSTD_LEVEL if level is None else level)
    return None


def sample_bytes(sample):
    """About the bytes of tar a sample takes (headers, data, padding), to
    decide before writing it whether it still fits in the current group."""
    raw = getattr(sample, "raw", None)
    if raw is not None:
        return sum(len(p) for p in raw[0])
    total = 0
    for field, value in sample.items():
        if type(field) is str and field[:2] == "__" and field[-2:] == "__":
            continue
        try:
            size = len(value)
        except TypeError:
            size = 0
        total += 512 + size + (-size % 512)
    return total
