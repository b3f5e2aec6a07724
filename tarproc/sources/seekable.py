"""Random access into compressed shards: finding where decoding can restart
(``tarindex``) and decoding one sample from there (``IndexedDataset``).

Two kinds of restart points, recorded per shard in the index's seek sidecar
(``INDEX.seek``, layout in docs/tarindex.md):

* **groups** (gzip and zstd): byte ranges of the compressed file that decode
  on their own.  In a gzip stream: each gzip member, cut further at every
  *full flush* (an empty stored block ``00 00 ff ff`` after which no block
  refers back), which tarproc writes between groups of samples
  (:mod:`tarproc.sinks.grouped`) and ``pigz --independent`` every 128 KiB.
  A full flush looks like any sync flush from outside, so each candidate is
  verified while the shard is read: a fresh decoder started there must give
  the same bytes as the running one for 32 KiB (a deflate distance never
  reaches further back), or up to the next candidate.  In a zstd file: each
  frame (skippable frames, like the seekable format's seek table, are
  skipped).  ``ds[i]`` reads the sample's group(s) with one range request,
  checks their CRC-32 against the index, and decodes only them.
* **checkpoints** (gzip written as one stream by others): the decoder's
  state every :data:`SPACING` bytes of tar (its position to the bit and the
  32 KiB of output before it), built by ``indexed_gzip`` while ``tarindex``
  reads the shard, stored in its own export format (``GZIDX``, which
  ``indexed_gzip``, ``rapidgzip`` and ratarmount read too).  ``ds[i]`` reads
  the compressed bytes from the checkpoint before the sample to the one
  after it (one range request), checks their CRC-32 and decodes them with
  ``indexed_gzip`` given an index of that one checkpoint (it primes zlib
  with the checkpoint's bits and window; a new, small object per access:
  no state shared between threads, no thread of its own, so forked
  DataLoader workers are safe).

A single-frame zstd shard larger than :data:`MAX_GROUP`, and xz and bzip2
shards, get counts only (docs/tarindex.md says why).
"""

import bisect
import io
import struct
import zlib

from ..core.limits import check_ratio
from ..errors import BadInput

#: Bytes of tar between two checkpoints of a one-stream gzip shard.
SPACING = 4 << 20
#: A full-flush candidate is accepted once a fresh decoder agrees this far.
VERIFY = 32 << 10
#: Compressed bytes read to decide whether a gzip shard has restart points.
PROBE = 4 << 20
#: A zstd shard of one frame that decodes to more than this is one stream:
#: counts only (every access would decode all of it).
MAX_GROUP = 8 << 20
#: Output chunks of the decoders.
CHUNK = 1 << 20
#: The seek sidecar's magic.
SEEK_MAGIC = b"TARPROC-SEEK0001"

_FLUSH = b"\x00\x00\xff\xff"
_GROUPS, _CHECKPOINTS = b"G", b"C"


# ------------------------------------------------------------ gzip headers


def gzip_header_length(buf, url="gzip"):
    """The length of the gzip member header at the start of ``buf``, or
    ``None`` when ``buf`` is too short to tell."""
    if len(buf) < 10:
        return None
    if buf[0] != 0x1F or buf[1] != 0x8B or buf[2] != 8:
        raise BadInput(f"{url}: not a gzip member where one should start")
    flags = buf[3]
    pos = 10
    if flags & 4:  # FEXTRA
        if len(buf) < pos + 2:
            return None
        pos += 2 + struct.unpack_from("<H", buf, pos)[0]
    for bit in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & bit:
            end = buf.find(b"\0", pos)
            if end < 0:
                if len(buf) - pos > 1 << 16:
                    raise BadInput(f"{url}: a gzip header field longer than 64 KiB")
                return None
            pos = end + 1
    if flags & 2:  # FHCRC
        pos += 2
    return pos if pos <= len(buf) else None


# ------------------------------------------------------------ scanning gzip


class GzipScanner:
    """Decode a gzip stream fed in pieces, recording its groups: ``groups``
    is a list of ``(compressed start, compressed end, decompressed start,
    CRC-32 of the compressed bytes)``."""

    def __init__(self, url):
        self.url = url
        self.pos = 0  # compressed bytes consumed
        self.out_total = 0
        self.state = "header"
        self.hbuf = b""
        self.members = 0
        self.groups = []
        self.flushes = 0  # accepted full-flush points
        self.d = None
        self.pending = None

    def feed(self, data):
        """Decoded chunks of ``data`` (a list)."""
        out = []
        data = bytes(data)
        while data:
            if self.state == "header":
                data = self._header(data)
            elif self.state == "deflate":
                data = self._deflate(data, out)
            elif self.state == "trailer":
                data = self._trailer(data)
            else:  # padding after the last member
                if data.strip(b"\0"):
                    self.state, self.hbuf = "header", b""
                    continue
                self.pos += len(data)
                data = b""
        check_ratio(self.url, "gzip", self.out_total, self.pos)
        return out

    def finish(self):
        if self.state == "header" and not self.hbuf and self.members:
            return
        if self.state == "padding":
            return
        raise BadInput(f"{self.url}: gzip stream is truncated")

    # -- states

    def _header(self, data):
        if self.members and not self.hbuf and not data.strip(b"\0"):
            self.state = "padding"
            return data
        buf = self.hbuf + data
        n = gzip_header_length(buf, self.url)
        if n is None:
            if len(buf) > 1 << 20:
                raise BadInput(f"{self.url}: a gzip header longer than 1 MiB")
            self.pos += len(data)
            self.hbuf = buf
            return b""
        used = n - len(self.hbuf)
        self.pos += used
        self.hbuf = b""
        self.state = "deflate"
        self.members += 1
        self.d = zlib.decompressobj(-15)
        self.mcrc = 0
        self.msize = 0
        self.tail = b""
        self.gstart = (self.pos, self.out_total)
        self.gcrc = 0
        return data[used:]

    def _trailer(self, data):
        buf = self.hbuf + data
        if len(buf) < 8:
            self.pos += len(data)
            self.hbuf = buf
            return b""
        crc, size = struct.unpack_from("<II", buf)
        if crc != self.mcrc or size != self.msize & 0xFFFFFFFF:
            raise BadInput(f"{self.url}: gzip stream is damaged (CRC or length check failed at byte {self.pos})")
        used = 8 - len(self.hbuf)
        self.pos += used
        self.hbuf = b""
        self.state = "header"
        return data[used:]

    def _deflate(self, data, out):
        tail = self.tail
        search = tail + data
        i = search.find(_FLUSH, max(0, len(tail) - 3))
        cut = i + 4 - len(tail) if i >= 0 else len(data)
        piece, rest = data[:cut], data[cut:]
        used = self._inflate(piece, out)
        if self.d.eof:
            self._resolve()
            self.groups.append((self.gstart[0], self.pos, self.gstart[1], self.gcrc))
            self.state, self.hbuf = "trailer", b""
            return piece[used:] + rest
        self.tail = search[-3:] if i < 0 else b""
        if i >= 0:
            self._candidate()
        return rest

    def _inflate(self, piece, out):
        """Decode ``piece`` with the running decoder (and the verifier of a
        pending candidate); returns the bytes of it that were used (less than
        all at the end of the member)."""
        d = self.d
        try:
            chunks = [d.decompress(piece, CHUNK)]
            while d.unconsumed_tail or (len(chunks[-1]) == CHUNK and not d.eof):
                chunks.append(d.decompress(d.unconsumed_tail, CHUNK))
                check_ratio(self.url, "gzip", self.out_total + CHUNK * len(chunks), self.pos + len(piece))
        except zlib.error as e:
            raise BadInput(f"{self.url}: gzip stream is damaged ({e}) near byte {self.pos}") from None
        used = len(piece) - len(d.unused_data) if d.eof else len(piece)
        piece = piece[:used]
        for c in chunks:
            if c:
                out.append(c)
                self.mcrc = zlib.crc32(c, self.mcrc)
                self.msize += len(c)
                self.out_total += len(c)
                if self.pending is not None and self.vd is not None and len(self.ref) < VERIFY:
                    self.ref += c[: VERIFY - len(self.ref)]
        self.gcrc = zlib.crc32(piece, self.gcrc)
        if self.pending is not None:
            self.pcrc = zlib.crc32(piece, self.pcrc)
            if self.vd is not None:
                try:
                    self.vbuf += self.vd.decompress(piece, VERIFY + 1 - len(self.vbuf))
                except zlib.error:
                    self._reject()
                else:
                    if len(self.vbuf) >= VERIFY and len(self.ref) >= VERIFY:
                        if self.vbuf[:VERIFY] == self.ref[:VERIFY]:
                            self._accept()
                        else:
                            self._reject()
        self.pos += used
        return used

    # -- candidates

    def _candidate(self):
        self._resolve()
        self.pending = (self.pos, self.out_total, self.gcrc)
        self.pcrc = 0
        self.vd = zlib.decompressobj(-15)
        self.vbuf = b""
        self.ref = b""

    def _resolve(self):
        """A pending candidate when the next one (or the member's end) comes:
        accepted if its decoder agreed on everything so far."""
        if self.pending is None:
            return
        if self.vd is not None and self.vbuf == self.ref:
            self._accept()
        else:
            self._reject()

    def _accept(self):
        c, u, crc = self.pending
        self.groups.append((self.gstart[0], c, self.gstart[1], crc))
        self.gstart = (c, u)
        self.gcrc = self.pcrc
        self.flushes += 1
        self.pending = self.vd = None

    def _reject(self):
        self.pending = self.vd = None


def gzip_has_groups(head, url):
    """Whether the first compressed bytes of a gzip shard show restart
    points (a verified full flush, or a second member)."""
    scan = GzipScanner(url)
    try:
        for _ in scan.feed(head):
            pass
    except BadInput:
        return False
    return scan.flushes > 0 or scan.members > 1


# ------------------------------------------------------------ scanning zstd


class ZstdScanner:
    """Decode a zstd stream fed in pieces, one frame at a time, recording
    each frame as a group (skippable frames are skipped)."""

    def __init__(self, url):
        from ..sinks.grouped import zstd_module

        self.zstd = zstd_module()
        self.url = url
        self.pos = 0
        self.out_total = 0
        self.groups = []
        self.d = None
        self.hbuf = b""
        self.skip = 0
        self.frames = 0

    def feed(self, data):
        out = []
        data = bytes(data)
        while data:
            if self.skip:
                n = min(self.skip, len(data))
                self.skip -= n
                self.pos += n
                data = data[n:]
                continue
            if self.d is None:
                buf = self.hbuf + data
                if len(buf) < 8:
                    self.pos += len(data)
                    self.hbuf = buf
                    break
                magic, size = struct.unpack_from("<II", buf)
                if 0x184D2A50 <= magic <= 0x184D2A5F:  # a skippable frame
                    used = 8 - len(self.hbuf)
                    self.hbuf = b""
                    self.pos += used
                    self.skip = size
                    data = data[used:]
                    continue
                if magic != 0xFD2FB528:
                    if not buf.strip(b"\0"):
                        self.pos += len(data)
                        break
                    raise BadInput(f"{self.url}: zstd stream is damaged (no frame at byte {self.pos - len(self.hbuf)})")
                self.d = self.zstd.ZstdDecompressor()
                self.fstart = (self.pos - len(self.hbuf), self.out_total)
                self.fcrc = 0
                data, self.hbuf = self.hbuf + data, b""
                self.pos = self.fstart[0]  # the bytes held back are counted again as the frame's
            d = self.d
            try:
                chunk = d.decompress(data, CHUNK)
                chunks = [chunk]
                while not d.eof and not d.needs_input:
                    chunks.append(d.decompress(b"", CHUNK))
                    check_ratio(self.url, "zstd", self.out_total + CHUNK * len(chunks), self.pos + len(data))
            except self.zstd.ZstdError as e:
                raise BadInput(f"{self.url}: zstd stream is damaged ({e}) in the frame at byte {self.fstart[0]}") \
                    from None
            used = len(data) - len(d.unused_data) if d.eof else len(data)
            self.fcrc = zlib.crc32(data[:used], self.fcrc)
            self.pos += used
            for c in chunks:
                if c:
                    out.append(c)
                    self.out_total += len(c)
            if d.eof:
                self.groups.append((self.fstart[0], self.pos, self.fstart[1], self.fcrc))
                self.frames += 1
                self.d = None
            data = data[used:]
        check_ratio(self.url, "zstd", self.out_total, self.pos)
        return out

    def finish(self):
        if self.d is not None or self.skip or (self.hbuf and self.hbuf.strip(b"\0")):
            raise BadInput(f"{self.url}: zstd stream is truncated")
        if not self.frames:
            raise BadInput(f"{self.url}: zstd stream has no frame")


class Decoded(io.RawIOBase):
    """The decoded bytes of a scanner fed from ``read`` (compressed pieces)."""

    def __init__(self, scanner, read, prefix=b""):
        self.scanner = scanner
        self.read_raw = read
        self.prefix = prefix
        self.chunks = []
        self.cur = b""
        self.at = 0
        self.ended = False

    def readable(self):
        return True

    def readinto(self, buf):
        while self.at >= len(self.cur):
            if self.chunks:
                self.cur, self.at = self.chunks.pop(0), 0
                continue
            if self.ended:
                return 0
            if self.prefix:
                data, self.prefix = self.prefix, b""
            else:
                data = self.read_raw(CHUNK)
            if not data:
                self.scanner.finish()
                self.ended = True
                return 0
            self.chunks = self.scanner.feed(data)
        n = min(len(buf), len(self.cur) - self.at)
        buf[:n] = self.cur[self.at : self.at + n]
        self.at += n
        return n


# ------------------------------------------------------------ checkpoints


class _Spooled:
    """A local copy of a remote compressed shard (for indexed_gzip), removed
    on close."""

    def __init__(self, prefix, read):
        import os
        import tempfile

        fd, self.path = tempfile.mkstemp(prefix=".tarproc-seek-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(prefix)
                while True:
                    data = read(CHUNK)
                    if not data:
                        break
                    f.write(data)
        except BaseException:
            self.close()
            raise

    def close(self):
        import os

        try:
            os.unlink(self.path)
        except OSError:
            pass


def open_checkpointed(path, url, spacing=SPACING):
    """``(stream, finish)``: the decoded bytes of the one-stream gzip file
    ``path`` read by ``indexed_gzip``, which sets a checkpoint every
    ``spacing`` bytes as it goes; ``finish()`` gives the seek record."""
    try:
        import indexed_gzip
    except ImportError:
        raise BadInput(f"{url}: random access into a one-stream gzip shard needs the indexed_gzip package "
                       f"(pip install indexed_gzip)") from None
    f = open(path, "rb")
    try:
        gz = indexed_gzip.IndexedGzipFile(fileobj=f, spacing=spacing, readbuf_size=1 << 20)
    except Exception as e:  # noqa: BLE001 - its errors: one line
        f.close()
        raise BadInput(f"{url}: gzip stream is damaged ({e})") from None

    class Stream(io.RawIOBase):
        decoded = 0

        def readable(self):
            return True

        def readinto(self, buf):
            try:
                n = gz.readinto(buf)
            except Exception as e:  # noqa: BLE001 - a ZranError, CRC mismatch: one line
                why = "" if "returned invalid length" in str(e) else f" ({e})"
                raise BadInput(f"{url}: gzip stream is damaged or truncated{why}") from None
            if n == 0:
                self._check_end()
            self.decoded += n
            return n

        def _check_end(self):
            """indexed_gzip ends a truncated stream quietly: the length in the
            trailer must be what was decoded (one member; a shard of several
            large members, cat a.gz b.gz, is refused here too: safe, if rare)."""
            import os

            size = os.fstat(f.fileno()).st_size
            tail = os.pread(f.fileno(), 8, max(0, size - 8))
            if len(tail) < 8 or struct.unpack("<I", tail[4:])[0] != self.decoded & 0xFFFFFFFF:
                raise BadInput(f"{url}: gzip stream is truncated (or has several members, which random access "
                               f"through checkpoints does not take: decoded {self.decoded} bytes)")

        def close(self):
            if not self.closed:
                try:
                    gz.close()
                finally:
                    f.close()
                    super().close()

    stream = Stream()
    stream.path = path

    def finish():
        import os

        out = io.BytesIO()
        gz.export_index(fileobj=out)
        gzidx = out.getvalue()
        points = parse_gzidx(gzidx, url)[0]
        size = os.fstat(f.fileno()).st_size
        if not points:  # a shard shorter than the spacing gets none: one, where the deflate data starts
            start = gzip_header_length(os.pread(f.fileno(), 1 << 16, 0), url) or 10
            gzidx = gzidx[:31] + struct.pack("<IQQBB", 1, start, 0, 0, 0)
            points = parse_gzidx(gzidx, url)[0]
        ends = [p[0] for p in points[1:]] + [size]
        crcs = []
        for k, (p, end) in enumerate(zip(points, ends)):
            start = p[0] - (1 if p[2] else 0) if k else 0
            crcs.append(_crc_file(f, start, end))
        return _CHECKPOINTS + struct.pack("<QQ", size, len(points)) + struct.pack(f"<{len(crcs)}I", *crcs) \
            + struct.pack("<Q", len(gzidx)) + gzidx

    return stream, finish


def _crc_file(f, start, end):
    import os

    crc = 0
    pos = start
    while pos < end:
        data = os.pread(f.fileno(), min(CHUNK, end - pos), pos)
        if not data:
            break
        crc = zlib.crc32(data, crc)
        pos += len(data)
    return crc


def parse_gzidx(blob, url):
    """``(points, window size, offset of the windows)`` of an
    ``indexed_gzip`` export (``GZIDX`` version 0 or 1); a point is
    ``(compressed offset, decompressed offset, bits, has window)``."""
    if len(blob) < 35 or blob[:5] != b"GZIDX":
        raise BadInput(f"{url}: not a gzip checkpoint index")
    version, _flags, _csize, _usize, _spacing, wsize, npoints = struct.unpack_from("<BBQQIII", blob, 5)
    if version not in (0, 1) or wsize > 1 << 20 or npoints > len(blob):
        raise BadInput(f"{url}: a gzip checkpoint index of an unknown kind (version {version})")
    step = 18 if version == 1 else 17
    points = []
    pos = 35
    for _ in range(npoints):
        if version == 1:
            c, u, bits, has = struct.unpack_from("<QQBB", blob, pos)
        else:
            c, u, bits = struct.unpack_from("<QQB", blob, pos)
            has = len(points) > 0
        points.append((c, u, bits, has))
        pos += step
    return points, wsize, pos


# ------------------------------------------------------------ scanning a shard


def decoded_for_index(url, codec, head, read, spacing=SPACING):
    """``(stream, finish)`` to index a compressed shard: ``stream`` gives
    its decoded bytes (``head`` was read already, ``read(n)`` gives the
    rest); ``finish()`` (after the stream ended) returns the seek record, or
    ``None`` when the shard has no random access (a note says why)."""
    if codec == "zstd":
        scan = ZstdScanner(url)

        def finish():
            groups = scan.groups
            big = [g for g in _group_sizes(groups, scan.out_total) if g > MAX_GROUP]
            if big and len(groups) == 1:
                return None
            return _groups_record(groups, scan.out_total)

        return Decoded(scan, read, head), finish
    # gzip
    if gzip_has_groups(head, url):
        scan = GzipScanner(url)
        return Decoded(scan, read, head), lambda: _groups_record(scan.groups, scan.out_total)
    import os

    from .open import scheme_of

    spool = None
    if scheme_of(url) == "file" and os.path.isfile(url):
        path = url
    else:
        spool = _Spooled(head, read)
        path = spool.path
    try:
        stream, finish = open_checkpointed(path, url, spacing)
    except BaseException:
        if spool is not None:
            spool.close()
        raise
    if spool is not None:
        close = stream.close

        def closing():
            try:
                close()
            finally:
                spool.close()

        stream.close = closing
    return stream, finish


def _group_sizes(groups, total):
    us = [g[2] for g in groups] + [total]
    return [b - a for a, b in zip(us, us[1:])]


def _groups_record(groups, total):
    n = len(groups)
    cs = [g[0] for g in groups]
    ce = [g[1] for g in groups]
    us = [g[2] for g in groups] + [total]
    crc = [g[3] for g in groups]
    return (_GROUPS + struct.pack("<Q", n) + struct.pack(f"<{n}Q", *cs) + struct.pack(f"<{n}Q", *ce)
            + struct.pack(f"<{n + 1}Q", *us) + struct.pack(f"<{n}I", *crc))


def record_kind(record):
    return "groups" if record[:1] == _GROUPS else "checkpoints"


# ------------------------------------------------------------ reading one sample


class SeekTable:
    """One shard's seek record, parsed (``groups`` or ``checkpoints``)."""

    def __init__(self, record, where, filesize=None):
        try:
            self._parse(record, where)
        except struct.error:
            raise BadInput(f"{where}: the seek record is damaged (index the shards again)") from None

    def _parse(self, rec, where):
        self.kind = record_kind(rec)
        if self.kind == "groups":
            (n,) = struct.unpack_from("<Q", rec, 1)
            if 1 + 8 + n * 28 + 8 != len(rec):
                raise BadInput(f"{where}: the seek record is damaged (index the shards again)")
            pos = 9
            self.cstart = struct.unpack_from(f"<{n}Q", rec, pos)
            pos += 8 * n
            self.cend = struct.unpack_from(f"<{n}Q", rec, pos)
            pos += 8 * n
            self.ustart = struct.unpack_from(f"<{n + 1}Q", rec, pos)
            pos += 8 * (n + 1)
            self.crc = struct.unpack_from(f"<{n}I", rec, pos)
            for i in range(n):
                if not (self.cstart[i] <= self.cend[i] and self.ustart[i] <= self.ustart[i + 1]
                        and (i == 0 or self.cend[i - 1] <= self.cstart[i])):
                    raise BadInput(f"{where}: the seek record is damaged (index the shards again)")
        else:
            self.size, n = struct.unpack_from("<QQ", rec, 1)
            pos = 17
            self.crc = struct.unpack_from(f"<{n}I", rec, pos)
            pos += 4 * n
            (glen,) = struct.unpack_from("<Q", rec, pos)
            pos += 8
            gzidx = rec[pos:pos + glen]
            if len(gzidx) != glen:
                raise BadInput(f"{where}: the seek record is damaged (index the shards again)")
            self.points, self.wsize, wpos = parse_gzidx(gzidx, where)
            if len(self.points) != n or not self.points:
                raise BadInput(f"{where}: the seek record is damaged (index the shards again)")
            self.gzidx = memoryview(gzidx)
            self.woff = {}  # point -> where its window starts in gzidx
            for k, p in enumerate(self.points):
                if p[3]:
                    self.woff[k] = wpos
                    wpos += self.wsize
            if wpos > len(gzidx):
                raise BadInput(f"{where}: the seek record is damaged (index the shards again)")
            self.ustarts = [p[1] for p in self.points]
            for a, b in zip(self.points, self.points[1:]):
                if not (a[0] <= b[0] <= self.size and a[1] <= b[1]):
                    raise BadInput(f"{where}: the seek record is damaged (index the shards again)")

    def read(self, fetch, codec, start, end, where, limit=1 << 34):
        """Bytes ``start``..``end`` of the decoded shard, reading through
        ``fetch(a, b)`` (compressed bytes ``a``..``b``) only what they need;
        more than ``limit`` bytes to read or decode is refused before."""
        def bounded(a, b):
            if b - a > limit:
                raise BadInput(f"{where}: the index says to read {b - a} bytes for it, more than "
                               f"TARPROC_MAX_SAMPLE ({limit}): a damaged index")
            return fetch(a, b)

        if self.kind == "groups":
            return self._read_groups(bounded, codec, start, end, where, limit)
        return self._read_checkpoint(bounded, start, end, where)

    def _read_groups(self, fetch, codec, start, end, where, limit):
        us = self.ustart
        if not 0 <= start < end <= us[-1]:
            raise BadInput(f"{where}: outside the shard's {us[-1]} decoded bytes: a damaged index")
        ga = bisect.bisect_right(us, start) - 1
        gb = bisect.bisect_left(us, end) - 1
        if us[gb + 1] - us[ga] > limit:
            raise BadInput(f"{where}: its groups decode to {us[gb + 1] - us[ga]} bytes, more than "
                           f"TARPROC_MAX_SAMPLE ({limit}): a damaged index")
        base = self.cstart[ga]
        data = fetch(base, self.cend[gb])
        if len(data) != self.cend[gb] - base:
            raise BadInput(f"{where}: got {len(data)} bytes of the compressed shard instead of "
                           f"{self.cend[gb] - base}: the shard is shorter than when it was indexed (index it again)")
        parts = []
        for g in range(ga, gb + 1):
            piece = data[self.cstart[g] - base:self.cend[g] - base]
            if zlib.crc32(piece) != self.crc[g]:
                raise BadInput(f"{where}: compressed bytes {self.cstart[g]}-{self.cend[g]} are not those indexed "
                               f"(CRC-32 differs): the shard changed since it was indexed (index it again)")
            out = _decode_group(codec, piece, where, us[g + 1] - us[g])
            if len(out) != us[g + 1] - us[g]:
                raise BadInput(f"{where}: a group decodes to {len(out)} bytes, {us[g + 1] - us[g]} when indexed: "
                               f"the shard changed since it was indexed (index it again)")
            parts.append(out)
        decoded = b"".join(parts)
        return decoded[start - us[ga]:end - us[ga]]

    def _read_checkpoint(self, fetch, start, end, where):
        us = self.ustarts
        a = bisect.bisect_right(us, start) - 1
        b = bisect.bisect_left(us, end)  # first point at or after the end (len: none)
        pa = self.points[a]
        lo = pa[0] - (1 if pa[2] else 0) if a else 0  # from the first: zlib reads the gzip header too
        # to the next checkpoint, and the 64 KiB the decoder reads at a time beyond it
        hi = min(self.points[b][0] + _READBUF + 1, self.size) if b < len(self.points) else self.size
        data = fetch(lo, hi)
        if len(data) != hi - lo:
            raise BadInput(f"{where}: got {len(data)} bytes of the compressed shard instead of {hi - lo}: the "
                           f"shard is shorter than when it was indexed (index it again)")
        for k in range(a, b):
            p = self.points[k]
            s = p[0] - (1 if p[2] else 0) if k else 0
            e = self.points[k + 1][0] if k + 1 < len(self.points) else self.size
            if zlib.crc32(data[s - lo:e - lo]) != self.crc[k]:
                raise BadInput(f"{where}: compressed bytes {s}-{e} are not those indexed (CRC-32 differs): the "
                               f"shard changed since it was indexed (index it again)")
        return self._inflate_from(a, _Ranged(data, lo, self.size, fetch, where), start, end, where)

    def _inflate_from(self, a, fileobj, start, end, where):
        """Decode from checkpoint ``a`` with indexed_gzip, given an index of
        that one checkpoint (and the next, or one past the end, which says
        how far it reaches): it primes zlib with the checkpoint's bits."""
        import indexed_gzip

        pts = [self.points[a]]
        wins = [self._window(a)]
        if a + 1 < len(self.points):
            pts.append(self.points[a + 1])
            wins.append(self._window(a + 1))
        else:
            pts.append((self.size, 1 << 62, 0, True))  # past the end: the last checkpoint reaches it
            wins.append(bytes(self.wsize))
        head = bytes(self.gzidx[:31])
        mini = head + struct.pack("<I", len(pts)) + b"".join(
            struct.pack("<QQBB", c, u, bits, 1 if w else 0) for (c, u, bits, _h), w in zip(pts, wins)) \
            + b"".join(w for w in wins if w)
        try:
            gz = indexed_gzip.IndexedGzipFile(fileobj=fileobj, auto_build=False, skip_crc_check=True,
                                              readbuf_size=_READBUF, buffer_size=_READBUF)
            try:
                gz.import_index(fileobj=io.BytesIO(mini))
                gz.seek(start)
                out = gz.read(end - start)
            finally:
                gz.close()
        except BadInput:
            raise
        except Exception as e:  # noqa: BLE001 - a ZranError and its kin: one line
            raise BadInput(f"{where}: gzip stream is damaged ({e}): the shard changed since it was indexed "
                           f"(index it again)") from None
        if len(out) != end - start:
            raise BadInput(f"{where}: the compressed bytes decode to less than indexed: the shard changed since it "
                           f"was indexed (index it again)")
        return out

    def _window(self, k):
        w = self.woff.get(k)
        return bytes(self.gzidx[w:w + self.wsize]) if w is not None else b""


_READBUF = 1 << 16  # compressed bytes indexed_gzip reads at a time (and decoded bytes it buffers)


class _Ranged(io.RawIOBase):
    """The compressed shard as a file for indexed_gzip: the bytes fetched
    from ``lo``, and more fetched on demand (``fetch(a, b)``)."""

    def __init__(self, data, lo, size, fetch, where):
        self.data, self.lo, self.size, self.fetch, self.where = data, lo, size, fetch, where
        self.pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=0):
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def readinto(self, buf):
        at = self.pos - self.lo
        if at < 0:
            raise BadInput(f"{self.where}: the decoder read before its checkpoint: a damaged index")
        have = self.lo + len(self.data)
        if at + len(buf) > len(self.data) and have < self.size:
            more = self.fetch(have, min(self.size, max(have + _READBUF, self.pos + len(buf))))
            if not more:
                raise BadInput(f"{self.where}: the shard is shorter than when it was indexed (index it again)")
            self.data += more
        n = max(0, min(len(buf), len(self.data) - at))
        buf[:n] = self.data[at:at + n]
        self.pos += n
        return n


def _decode_group(codec, piece, where, size):
    """A group's decoded bytes: at most ``size`` + 1 of them are made (more
    is a changed shard, found by the caller without decoding a bomb)."""
    if codec == "zstd":
        from ..sinks.grouped import zstd_module

        zstd = zstd_module()
        try:
            d = zstd.ZstdDecompressor()
            out = d.decompress(piece, size + 1)
            if len(out) > size:
                return out
            if not d.eof or d.unused_data:
                raise BadInput(f"{where}: a zstd frame of the shard is not whole: the shard changed since it was "
                               f"indexed (index it again)")
            return out
        except zstd.ZstdError as e:
            raise BadInput(f"{where}: zstd frame is damaged ({e}): the shard changed since it was indexed") from None
    try:
        d = zlib.decompressobj(-15)
        return d.decompress(piece, size + 1)
    except zlib.error as e:
        raise BadInput(f"{where}: gzip group is damaged ({e}): the shard changed since it was indexed") from None


#: Codecs whose shards ``tarindex`` makes randomly accessible.
CODECS = ("gzip", "zstd")


def open_for_index(url, codec, spacing=None):
    """``(stream, finish, size)`` to index the compressed shard ``url``:
    ``stream`` (buffered) gives its decoded bytes, ``finish()`` (before
    closing it) its seek record or ``None``, ``size()`` its compressed size.
    ``spacing``: bytes of tar between checkpoints (default :data:`SPACING`)."""
    import os

    from .open import BUFSIZE, open_source

    raw = open_source(url, decompress=False)
    try:
        head = raw.read(PROBE)
        stream, finish = decoded_for_index(url, codec, head, raw.read, spacing or SPACING)
    except BaseException:
        raw.close()
        raise
    scanner = getattr(stream, "scanner", None)
    if scanner is None:  # indexed_gzip reads its own copy: this one is done
        path = getattr(stream, "path", None)
        raw.close()

        def size():
            return os.path.getsize(path) if path else 0
    else:
        close = stream.close

        def closing():
            try:
                close()
            finally:
                raw.close()

        stream.close = closing

        def size():
            return scanner.pos
    buffered = io.BufferedReader(stream, BUFSIZE)
    return buffered, finish, size
