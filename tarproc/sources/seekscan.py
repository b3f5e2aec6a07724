"""Indexing compressed shards: decoding a gzip or zstd shard for ``tarindex``
while finding where decoding can restart, and writing that down as the
shard's seek record (read back by :mod:`tarproc.sources.seekable`, which
says what the records mean).

* gzip with restart points (tarproc's groups, ``pigz --independent``,
  ``bgzip``) and zstd: :class:`GzipScanner` and :class:`ZstdScanner` decode
  in this process and record each group with the CRC-32 of its compressed
  bytes;
* gzip in one stream: ``indexed_gzip`` decodes it and sets checkpoints as it
  goes (:func:`open_checkpointed`).

:func:`open_for_index` picks one for a shard, from its first 4 MiB.
"""

import io
import struct
import zlib

from ..core.limits import check_ratio
from ..errors import BadInput
from .seekable import (CHECKPOINTS, CHUNK, GROUPS, MAX_GROUP, PROBE, SPACING, VERIFY, gzip_header_length,
                       parse_gzidx)

_FLUSH = b"\x00\x00\xff\xff"
#: Compressed bytes decoded at a time: what one piece decodes to is held at
#: once (a bomb is stopped by the ratio bound long before memory runs out).
_PIECE = 64 << 10

# ------------------------------------------------------------ scanning gzip


class GzipScanner:
    """Decode a gzip stream fed in pieces, recording its groups: ``groups``
    is a list of ``(compressed start, compressed end, decompressed start,
    CRC-32 of the compressed bytes)``."""

    def __init__(self, url):
        self.ratio = {}  # max_ratio, ratio_floor of check_ratio (open_for_index sets them)
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
        check_ratio(self.url, "gzip", self.out_total, self.pos, **self.ratio)
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
                check_ratio(self.url, "gzip", self.out_total + CHUNK * len(chunks), self.pos + len(piece), **self.ratio)
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
    view = memoryview(head)
    try:
        for at in range(0, len(view), _PIECE):
            scan.feed(view[at:at + _PIECE])  # (its output is dropped piece by piece)
            if scan.flushes or scan.members > 1:
                return True
    except BadInput:
        return False
    return False


# ------------------------------------------------------------ scanning zstd


class ZstdScanner:
    """Decode a zstd stream fed in pieces, one frame at a time, recording
    each frame as a group (skippable frames are skipped)."""

    def __init__(self, url):
        self.ratio = {}  # max_ratio, ratio_floor of check_ratio (open_for_index sets them)
        from .compression import zstd_module

        self.zstd = zstd_module()
        self.url = url
        self.pos = 0
        self.out_total = 0
        self.groups = []
        self.d = None
        self.hbuf = b""
        self.skip = 0
        self.frames = 0
        self.skippable = 0  # skippable frames seen (a stream of only those decodes to nothing, as zstd -dc says)

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
                    self.skippable += 1
                    data = data[used:]
                    continue
                if magic != 0xFD2FB528:  # (zero padding too: zstd -d, bsdtar and our readers refuse it)
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
                    check_ratio(self.url, "zstd", self.out_total + CHUNK * len(chunks), self.pos + len(data), **self.ratio)
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
        check_ratio(self.url, "zstd", self.out_total, self.pos, **self.ratio)
        return out

    def finish(self):
        if self.hbuf and self.frames:  # fewer bytes than a frame header after the last frame
            raise BadInput(f"{self.url}: zstd stream is damaged (no frame at byte {self.pos - len(self.hbuf)})")
        if self.d is not None or self.skip or self.hbuf:
            raise BadInput(f"{self.url}: zstd stream is truncated")
        if not self.frames and not self.skippable:
            raise BadInput(f"{self.url}: zstd stream has no frame")


class Decoded(io.RawIOBase):
    """The decoded bytes of a scanner fed from ``read`` (compressed pieces)."""

    def __init__(self, scanner, read, prefix=b""):
        self.scanner = scanner
        self.read_raw = read
        self.prefix = memoryview(prefix)
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
            if self.prefix:  # (what was read ahead to probe the shard), in pieces too
                data, self.prefix = self.prefix[:_PIECE], self.prefix[_PIECE:]
            else:
                data = self.read_raw(_PIECE)
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

        from ..errors import writing

        fd, self.path = tempfile.mkstemp(prefix=".tarproc-seek-")
        what = writing(self.path, "a local copy of a compressed shard (to set its checkpoints)",
                       "choose the place with TMPDIR")
        try:
            with os.fdopen(fd, "wb", buffering=0) as f:
                data = prefix
                while data:
                    view = memoryview(data)
                    with what:
                        while view:
                            view = view[f.write(view):]
                    data = read(CHUNK)
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
        ratio = {}  # max_ratio, ratio_floor of check_ratio (open_for_index sets them), as the scanners have

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
            check_ratio(url, "gzip", self.decoded, f.tell(), **self.ratio)  # (a bomb, as every other reader says)
            return n

        def _check_end(self):
            """indexed_gzip ends a truncated stream quietly: the length in the
            trailer must be what was decoded (one member; a shard of several
            large members, cat a.gz b.gz, is refused here too: safe, if rare)."""
            import os

            fd = f.fileno()
            end = os.fstat(fd).st_size
            while end > 0:  # zero bytes after the member are padding (gzip -d and tarcat take them)
                piece = os.pread(fd, min(end, CHUNK), max(0, end - CHUNK))
                stripped = piece.rstrip(b"\0")
                end -= len(piece) - len(stripped)
                if stripped:
                    break
            # the trailer ends at or up to 7 zero bytes past the last non-zero byte (its length may end in zeros)
            tail = os.pread(fd, 16, max(0, end - 8))
            want = struct.pack("<I", self.decoded & 0xFFFFFFFF)
            if not any(tail[k + 4:k + 8] == want for k in range(max(0, len(tail) - 7))):
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
        return CHECKPOINTS + struct.pack("<QQ", size, len(points)) + struct.pack(f"<{len(crcs)}I", *crcs) \
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


# ------------------------------------------------------------ scanning a shard


def decoded_for_index(url, codec, head, read, spacing=SPACING):
    """``(stream, finish)`` to index a compressed shard: ``stream`` gives
    its decoded bytes (``head`` was read already, ``read(n)`` gives the
    rest); ``finish()`` (after the stream ended) returns the seek record, or
    ``None`` when the shard has no random access (a note says why)."""
    if codec == "zstd":
        scan = ZstdScanner(url)

        return Decoded(scan, read, head), lambda: groups_record(scan.groups, scan.out_total, codec)
    # gzip
    if gzip_has_groups(head, url):
        scan = GzipScanner(url)
        return Decoded(scan, read, head), lambda: groups_record(scan.groups, scan.out_total, codec)
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


def groups_record(groups, total, codec):
    """The seek record of a shard in ``groups`` (a list of ``(compressed
    start, compressed end, decoded start, CRC-32 of the compressed bytes)``)
    that decodes to ``total`` bytes; ``None`` (counts only) for a zstd shard
    of one frame larger than :data:`MAX_GROUP`: every access would decode
    all of it.  (The scanners here find the groups reading a shard;
    :mod:`tarproc.sinks.grouped` records them as it writes one.)"""
    if codec == "zstd" and len(groups) == 1 and total - groups[0][2] > MAX_GROUP:
        return None
    n = len(groups)
    cs = [g[0] for g in groups]
    ce = [g[1] for g in groups]
    us = [g[2] for g in groups] + [total]
    crc = [g[3] for g in groups]
    return (GROUPS + struct.pack("<Q", n) + struct.pack(f"<{n}Q", *cs) + struct.pack(f"<{n}Q", *ce)
            + struct.pack(f"<{n + 1}Q", *us) + struct.pack(f"<{n}I", *crc))


#: Codecs whose shards ``tarindex`` makes randomly accessible.
CODECS = ("gzip", "zstd")


def open_for_index(url, codec, spacing=None, settings=None):
    """``(stream, finish, size)`` to index the compressed shard ``url``:
    ``stream`` (buffered) gives its decoded bytes, ``finish()`` (before
    closing it) its seek record or ``None``, ``size()`` its compressed size.
    ``spacing``: bytes of tar between checkpoints (default :data:`SPACING`)."""
    import os

    from .open import BUFSIZE, open_source

    raw = open_source(url, decompress=False, settings=settings)
    try:
        head = raw.read(PROBE)
        stream, finish = decoded_for_index(url, codec, head, raw.read, spacing or SPACING)
    except BaseException:
        raw.close()
        raise
    scanner = getattr(stream, "scanner", None)
    if scanner is not None and settings is not None:  # the compression-bomb bounds of the settings
        scanner.ratio = {"max_ratio": settings.max_ratio, "ratio_floor": settings.ratio_floor}
    if scanner is None and settings is not None and hasattr(stream, "ratio"):
        stream.ratio = {"max_ratio": settings.max_ratio, "ratio_floor": settings.ratio_floor}
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
