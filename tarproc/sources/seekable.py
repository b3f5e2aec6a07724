"""Random access into compressed shards: what a seek record says (where
decoding can restart; written by ``tarindex`` through
:mod:`tarproc.sources.seekscan`) and decoding one sample from there
(``IndexedDataset``).

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
#: Compressed bytes of consecutive groups read with one request (``read_many``).
RUN_MAX = 16 << 20
#: Output chunks of the decoders.
CHUNK = 1 << 20
#: The seek sidecar's magic.
SEEK_MAGIC = b"TARPROC-SEEK0001"

#: The kinds of seek record (their first byte).
GROUPS, CHECKPOINTS = b"G", b"C"


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


def record_kind(record):
    return "groups" if record[:1] == GROUPS else "checkpoints"


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
                # (deflate expands at most 1032 times: a span decoding to more was not measured, it was damaged)
                if not (a[0] <= b[0] <= self.size and a[1] <= b[1] <= a[1] + (b[0] - a[0] + 1) * 1032):
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

    def read_many(self, fetch_many, codec, spans, limit=1 << 34, cache=None, name=None):
        """The decoded bytes of each ``(start, end, where)`` of ``spans``,
        each group (or checkpoint span) they need read and decoded once:
        ``fetch_many([(a, b), ...])`` gives compressed bytes ``a``..``b`` of
        each pair (consecutive groups are one pair).  ``cache`` (get/put of
        ``(name, kind, n)``) keeps decoded groups for the next calls.  An
        error names the ``where`` of a span that needed what failed."""
        def bounded(pairs, wheres):
            for (a, b), where in zip(pairs, wheres):
                if b - a > limit:
                    raise BadInput(f"{where}: the index says to read {b - a} bytes for it, more than "
                                   f"TARPROC_MAX_SAMPLE ({limit}): a damaged index")
            return fetch_many(pairs)

        if self.kind == "groups":
            return self._groups_many(bounded, codec, spans, limit, cache, name)
        return self._checkpoints_many(bounded, spans, cache, name)

    def _groups_many(self, fetch_many, codec, spans, limit, cache, name):
        us = self.ustart
        plan, need = [], {}
        for start, end, where in spans:
            ga, gb = self._groups_of(start, end, where, limit)
            plan.append((ga, gb))
            for g in range(ga, gb + 1):
                need.setdefault(g, where)
        decoded = {}
        runs = []
        for g in sorted(need):
            hit = cache.get((name, "g", g)) if cache is not None else None
            if hit is not None:
                decoded[g] = hit
            elif runs and runs[-1][-1] == g - 1 and self.cstart[g] == self.cend[g - 1] \
                    and self.cend[g] - self.cstart[runs[-1][0]] <= RUN_MAX:
                runs[-1].append(g)  # the next group's bytes follow: one read
            else:
                runs.append([g])
        pairs = [(self.cstart[r[0]], self.cend[r[-1]]) for r in runs]
        datas = fetch_many(pairs, [need[r[0]] for r in runs]) if runs else []
        for r, (base, stop), data in zip(runs, pairs, datas):
            if len(data) != stop - base:
                raise BadInput(f"{need[r[0]]}: got {len(data)} bytes of the compressed shard instead of "
                               f"{stop - base}: the shard is shorter than when it was indexed (index it again)")
            for g in r:
                decoded[g] = out = self._decode(g, codec, data[self.cstart[g] - base:self.cend[g] - base], need[g])
                if cache is not None:
                    cache.put((name, "g", g), out)
        result = []
        for (ga, gb), (start, end, _where) in zip(plan, spans):
            if ga == gb:
                result.append(decoded[ga][start - us[ga]:end - us[ga]])
            else:
                result.append(b"".join(decoded[g] for g in range(ga, gb + 1))[start - us[ga]:end - us[ga]])
        return result

    def _decode(self, g, codec, piece, where):
        """Group ``g``'s compressed bytes ``piece``, checked (CRC-32) and decoded (length checked)."""
        us = self.ustart
        if zlib.crc32(piece) != self.crc[g]:
            raise BadInput(f"{where}: compressed bytes {self.cstart[g]}-{self.cend[g]} are not those indexed "
                           f"(CRC-32 differs): the shard changed since it was indexed (index it again)")
        out = _decode_group(codec, piece, where, us[g + 1] - us[g])
        if len(out) != us[g + 1] - us[g]:
            raise BadInput(f"{where}: a group decodes to {len(out)} bytes, {us[g + 1] - us[g]} when indexed: "
                           f"the shard changed since it was indexed (index it again)")
        return out

    def _checkpoints_many(self, fetch_many, spans, cache, name):
        """From each checkpoint the spans start after, one decoding as far as
        the furthest of them ends (kept: a later span within it is served)."""
        us = self.ustarts
        reach = {}
        for start, end, where in spans:
            if not 0 <= start < end:
                raise BadInput(f"{where}: the index gives decoded bytes {start}-{end}: a damaged index")
            a = bisect.bisect_right(us, start) - 1
            if a < 0:
                raise BadInput(f"{where}: before the shard's first checkpoint: a damaged index")
            far = reach.get(a)
            reach[a] = (max(far[0], end), far[1]) if far else (end, where)
        decoded = {}
        for a, (end, where) in reach.items():
            hit = cache.get((name, "c", a)) if cache is not None else None
            if hit is not None and us[a] + len(hit) >= end:
                decoded[a] = hit
                continue
            data = self._read_checkpoint(lambda lo, hi: fetch_many([(lo, hi)], [where])[0], us[a], end, where)
            decoded[a] = data
            if cache is not None:
                cache.put((name, "c", a), data)
        result = []
        for start, end, _where in spans:
            a = bisect.bisect_right(us, start) - 1
            result.append(decoded[a][start - us[a]:end - us[a]])
        return result

    def _groups_of(self, start, end, where, limit):
        """The first and last group holding decoded bytes ``start``..``end``, checked against the shard and ``limit``."""
        us = self.ustart
        if not 0 <= start < end <= us[-1]:
            raise BadInput(f"{where}: outside the shard's {us[-1]} decoded bytes: a damaged index")
        ga = bisect.bisect_right(us, start) - 1
        gb = bisect.bisect_left(us, end) - 1
        if us[gb + 1] - us[ga] > limit:
            raise BadInput(f"{where}: its groups decode to {us[gb + 1] - us[ga]} bytes, more than "
                           f"TARPROC_MAX_SAMPLE ({limit}): a damaged index")
        return ga, gb

    def _read_groups(self, fetch, codec, start, end, where, limit):
        us = self.ustart
        ga, gb = self._groups_of(start, end, where, limit)
        base = self.cstart[ga]
        data = fetch(base, self.cend[gb])
        if len(data) != self.cend[gb] - base:
            raise BadInput(f"{where}: got {len(data)} bytes of the compressed shard instead of "
                           f"{self.cend[gb] - base}: the shard is shorter than when it was indexed (index it again)")
        parts = []
        for g in range(ga, gb + 1):
            parts.append(self._decode(g, codec, data[self.cstart[g] - base:self.cend[g] - base], where))
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


def amplification(record, starts, end, where="seek record"):
    """``(compressed bytes read, sample bytes)`` summed over every sample of a
    shard (``starts``: where each begins in the decoded tar, ``end``: where
    the last ends) read alone, one ``ds[i]`` at a time, through its seek
    ``record``: their ratio is the read amplification ``tarindex`` reports."""
    table = SeekTable(record, where)
    bounds = list(starts) + [end]
    fetched = wanted = 0
    for a, b in zip(bounds, bounds[1:]):
        if b <= a:
            continue
        wanted += b - a
        if table.kind == "groups":
            us = table.ustart
            ga = bisect.bisect_right(us, a) - 1
            gb = bisect.bisect_left(us, b) - 1
            fetched += table.cend[gb] - table.cstart[ga]
        else:
            us = table.ustarts
            pa = bisect.bisect_right(us, a) - 1
            pb = bisect.bisect_left(us, b)
            lo = table.points[pa][0] if pa else 0
            hi = min(table.points[pb][0] + _READBUF + 1, table.size) if pb < len(table.points) else table.size
            fetched += hi - lo
    return fetched, wanted


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
    if size < 0:
        raise BadInput(f"{where}: the seek record gives a group a negative size: a damaged index (index it again)")
    if codec == "zstd":
        from .compression import zstd_module

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
