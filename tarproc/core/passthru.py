"""Reading shards of small members fast, and copying unchanged samples as bytes.

:func:`fast_group` yields exactly the samples of
``group(reader.members(), source, stats)`` (same keys, fields, bytes, skips,
counts and errors) but reads the common member straight from the input
buffer: a plain ustar header that is byte for byte what
:class:`~tarproc.core.tario.TarWriter` writes with its defaults (mode 0644,
owner 0, time 0, no prefix, no pax) for an ASCII name of at most 100 bytes,
and data below 128 KiB and the blob threshold.  Such a header needs no decoding:
its name field is one match of :data:`~tarproc.core.rules.PLAIN_NAME`,
bytes 100..148 are looked up in a small cache of the constant parts and
sizes seen, and the checksum and the rest of the block are compared with
the bytes a writer would write for that name sum, without summing the
block (the name's byte sum is the low half of its Adler-32).  The plain
members of other writers (GNU tar, bsdtar, tarfile, webdataset, maybe after
a pax header of a few records) are read from the buffer too
(:mod:`tarproc.core.dialects`); every other member (long names, other pax
records, links, damage, the end of the input) goes to the general parser
of :class:`~tarproc.core.tario.TarReader`, which reads on from the same
position.

Names are taken as :func:`~tarproc.core.rules.classify` takes them: a
name of the shape :data:`~tarproc.core.rules.PLAIN_NAME` is split by that
regex in the buffer, every other name is asked of ``classify``.  The input
is read with the reader's public operations only
(:meth:`~tarproc.core.tario.TarReader.window`,
:meth:`~tarproc.core.tario.TarReader.advance`): a :class:`_Scanner` takes
the plain members of each buffer in one tight loop (a batch), a
:class:`_Samples` builds samples from the batch, and the general parser
reads whatever the scanner does not take, from the same position.  Other
writers' members go through :meth:`_Scanner.lane`, which reads them and
makes their samples in one loop, and takes a header shaped like one
:mod:`~tarproc.core.dialects` took before with one checksum test
(:func:`fast_members` has the same shortcut, :func:`_taker`).

With ``raw``, samples come as :class:`RawSample`: when every member of a
sample was such a header, the fields are in sorted order and named as a
writer would name them, ``sample.raw`` holds the sample's bytes as they
were read, and :class:`~tarproc.core.grouping.SampleWriter` writes those
bytes instead of encoding the sample again: the same bytes, without the work.
Any change to the sample (setting, deleting a field) drops ``raw``.
"""

import re
from zlib import adler32

from ..errors import BadArchive, BadSample, TarprocError
from .pack import Packer, sample_budget
from .rules import PLAIN_NAME, SKIPPED, classify, starts_another
from .stats import Stats
from .dialects import PAX_MAX, member_reader, octal, parse_pax_fast, times_only
from .tario import BLOCK, LARGE_MEMBER, REGULAR, TYPE_NAMES, Member, TarWriter

#: After this many members in a row that the fast path could not take,
#: an input is read by the general parser alone (a GNU tar shard).
GIVE_UP = 32
#: Bytes asked of the input at a time (``read1``: what is there, up to this).
CHUNK = 256 << 10


def _canonical_parts():
    """Bytes 100..124 (mode, owner, group), 136..148 (time) and 156..512 of
    the header a writer with the default header values writes, and the
    byte sum of all of it but the name, size and checksum fields."""
    header = TarWriter(None).plain_header(b"", 0)
    return header[100:124], header[136:148], header[156:], int(header[148:154], 8) - sum(header[124:136])


PRE, MTIME, END, CONST = _canonical_parts()
#: ZEROS[n]: n zero bytes (the padding after member data).
ZEROS = tuple(bytes(n) for n in range(512))


def _size_of(sizes, mid):
    """``(size, sum of the size field, size rounded up to 512, the padding a
    writer writes after the data)`` from bytes 100..148 of a header when they
    are what a writer writes, else ``(-1, 0, 0, b"")`` (cached: few values repeat)."""
    sf = mid[24:35]
    if mid.startswith(PRE) and mid.endswith(MTIME) and mid[35] == 0 and not sf.translate(None, b"01234567"):
        size = int(sf, 8)
        sz = (size, sum(sf), size + (-size % 512), ZEROS[-size % 512])
    else:
        sz = (-1, 0, 0, b"")
    if len(sizes) < 4096:
        sizes[mid] = sz
    return sz


def _canonical_size(canon, size):
    """Bytes 100..148 of the header a writer writes for a member of ``size``
    bytes, and the byte sum of its size field (cached: few values repeat)."""
    sizef = b"%011o\0" % size
    cs = (PRE + sizef + MTIME, sum(sizef))
    if len(canon) < 4096:
        canon[size] = cs
    return cs


def _checksum(sums, total):
    """Bytes 148..512 (the checksum field and the rest) of the header a
    writer writes whose name and size fields sum to ``total - 1`` (cached:
    few values repeat)."""
    field = b"%06o\0 " % (CONST + total - 1) + END
    if len(sums) < 4096:
        sums[total] = field
    return field


#: Entries of the lane's caches of header parts and name tails.
HEADS = 1 << 14
CACHE_NAMES = 4096
#: What the lane compares headers with before it has seen one: a v7
#: regular file's tail and a time of 0 (real ones: whatever matches them
#: is what they stand for).
_V7_TAIL, _ZERO_TIME, _PAX_TAIL = b"0" + bytes(355), b"00000000000\0", b"x" + bytes(355)
#: (no pax header block is all zeros: the lane's pax header blocks before it has taken one)
_NO_BLOCK = bytes(512)
#: Shapes of pax header data kept (one per data size).
SHAPES = 64
#: A record of pax header data (as :data:`~tarproc.core.dialects.TIMES_ONLY` matched it) and
#: its ``mtime`` value, when that is digits, maybe with a fraction of digits.
_RECORD = re.compile(rb"([1-9][0-9]* (?:mtime|atime|ctime)=)(.*)\n", re.S)
_DIGITS = re.compile(rb"([0-9]{1,30})(?:\.([0-9]+))?")


def _head(f, limit):
    """What the lane needs of a header whose bytes 100..136 (mode, owner,
    group, size: its mode checked by member_at) are ``f``: ``(size, byte
    sum of f, bytes 100..148 of our header for that size, byte sum of its
    size field, size rounded up to 512, the padding after the data)``, or
    ``None`` when the size field is not octal or the size not below ``limit``
    (the largest member read from the buffer)."""
    size = octal(f[24:36])
    if size is None or size >= limit:
        return None
    sizef = b"%011o\0" % size
    return size, sum(f), PRE + sizef + MTIME, sum(sizef), size + (-size % 512), ZEROS[-size % 512]


def _times_only(shapes, data):
    """:func:`~tarproc.core.dialects.times_only`; when it holds, the
    shape of ``data`` is kept for its size (:func:`_shape`)."""
    if not times_only(data):
        return False
    if len(data) not in shapes and len(shapes) < SHAPES:
        shapes[len(data)] = _shape(data)
    return True


def _shape(data):
    """A match (``fullmatch(chunk, start, end)``) of pax header data
    shaped as ``data``, which :func:`~tarproc.core.dialects.times_only`
    took: the same records with the same length fields and keys, and
    values of the same lengths: the ``mtime`` value digits where
    ``data``'s has digits (a fraction of digits where it has one), the
    others anything but a newline.  Data it matches has record lengths
    that are right by construction and is time records only, as
    ``times_only`` takes them.  Returned with where the whole seconds of
    its ``mtime`` start and end: ``(fullmatch, start, end)``; ``None``
    when ``data``'s mtime value is another (a sign).  GNU tar, tarfile and
    webdataset write a few shapes."""
    parts = []
    at = 0
    seconds = None
    for line in data.split(b"\n")[:-1]:
        m = _RECORD.fullmatch(line + b"\n")
        if m is None:
            return None
        head, value = m[1], m[2]
        if head.endswith(b" mtime="):
            v = _DIGITS.fullmatch(value)
            if v is None or seconds is not None:
                return None
            seconds = (at + len(head), at + len(head) + len(v[1]))
            pat = b"[0-9]{%d}" % len(v[1]) + (b"\\.[0-9]{%d}" % len(v[2]) if v[2] is not None else b"")
        else:
            pat = b"[^\\n]{%d}" % len(value)
        parts.append(re.escape(head) + pat + b"\\n")
        at += len(line) + 1
    if seconds is None:
        return None
    return re.compile(b"".join(parts)).fullmatch, seconds[0], seconds[1]


def _check_value(checks, cf):
    """The value of a checksum field as the general parser reads it, or -1 (cached)."""
    v = octal(cf)
    if v is None:
        v = -1
    if len(checks) < HEADS:
        checks[cf] = v
    return v


def _field(fields, fb):
    field = fb.decode("ascii")
    if len(fields) < 4096:
        fields[fb] = field
    return field


class RawSample(dict):
    """A sample (a ``dict``) that may carry the bytes it was read from:
    ``raw`` is ``None`` or ``(pieces, members)``, a list of ``bytes`` whose
    concatenation is the sample's members as a writer with default headers
    would write them.  Any mutation sets ``raw`` to ``None``."""

    __slots__ = ("raw",)

    def __setitem__(self, key, value):
        self.raw = None
        dict.__setitem__(self, key, value)

    def __delitem__(self, key):
        self.raw = None
        dict.__delitem__(self, key)

    def __ior__(self, other):
        self.raw = None
        return dict.__ior__(self, other)

    def _mutator(name):
        method = getattr(dict, name)

        def mutate(self, *args, **kwargs):
            self.raw = None
            return method(self, *args, **kwargs)

        mutate.__name__ = name
        return mutate

    update = _mutator("update")
    pop = _mutator("pop")
    popitem = _mutator("popitem")
    setdefault = _mutator("setdefault")
    clear = _mutator("clear")
    del _mutator


# What a scan of the buffer stopped at: the buffer's end (more is read and the scan goes on), or a
# member the general parser reads (a pax header of other records, a link, damage, the end marker).
_MORE, _GENERAL = 0, 1


class _Scanner:
    """The plain members of a :class:`~tarproc.core.tario.TarReader`'s
    input, taken from the buffer :meth:`~tarproc.core.tario.TarReader.window`
    gives, a batch at a time (:meth:`batch`).  An entry of a batch is
    ``(key, field, data, p, q, stop, built)``: the member's first header
    block at ``chunk[p]`` (a pax header, if any), its own header at
    ``chunk[q]``, its end (data and padding) at ``chunk[stop]``; ``built``
    is ``None`` when ``chunk[p:stop]`` is what a writer writes for it,
    the parts of what a writer writes when it is another writer's member
    read with ``raw``, ``False`` when it is written by the encoder."""

    def __init__(self, reader, raw):
        self.reader = reader
        self.raw = raw
        self.on = reader.offset == 0 and reader.window(0) is not None
        self.chunk, self.pos, self.base = b"", 0, reader.offset
        self.need = BLOCK  # bytes from pos the next scan needs in the buffer
        self.foreign = False  # headers are read as another writer's (dialects.py)
        self.misses = 0  # members in a row the general parser read
        self.limit = min(reader.blob_from, LARGE_MEMBER)
        self.member_at = member_reader()
        self.sums = {}  # header bytes 148..512 by the sum of the name and size fields (+1)
        self.sizes = {}  # bytes 100..148 of a header -> _size_of() them
        self.canon = {}  # size -> bytes 100..148 of our header for it, and the sum of its size field
        self.fields = {}  # field names as bytes -> str
        self.keyb = self.key = None  # the last key read (bytes, str)
        # the lane's state (see lane()): bytes 100..136 of plain headers member_at() took -> their parts
        # (_head()), checksum fields -> their values, the name fields' tails after a key -> the field,
        # the last tail (bytes 156..512) and time field of such a header and what they add to its checksum
        self.heads, self.pheads, self.checks, self.rests = {}, {}, {}, {}
        self.shapes = {}  # size -> a match of pax data of that size shaped as time records taken (_shape())
        self.rtail, self.mtime, self.ptail = _V7_TAIL, _ZERO_TIME, _PAX_TAIL
        self.rsum, self.psum = sum(_V7_TAIL) + 255, sum(_PAX_TAIL) + 255  # (+ 255: the checksum field as spaces, + 1)
        self.tsum = self.rsum + sum(_ZERO_TIME)
        # the last two pax header blocks taken (compared whole first: tarfile and webdataset repeat
        # them) with their _head(), and the last time field of a header after a pax header, with its sum
        self.pblocks = (_NO_BLOCK, None, _NO_BLOCK, None)
        self.qmtime = (_ZERO_TIME, sum(_ZERO_TIME))
        self.single = False  # batch() takes one member of another writer (the lane takes the rest)

    def batch(self):
        """``(chunk, base, entries, stop)``: the members taken from the
        buffer ``chunk`` (``base``: the input offset of ``chunk[0]``), and
        why the batch ended (:data:`_MORE` or :data:`_GENERAL`: the general
        parser reads the next member, from :meth:`handover`)."""
        chunk, pos = self.chunk, self.pos
        if len(chunk) - pos < self.need:
            reader = self.reader
            reader.advance(pos)
            chunk, pos = self.chunk, self.pos = reader.window(self.need, CHUNK)
            self.base = reader.offset - pos
            if len(chunk) - pos < self.need:  # the input ends first: the general parser says how
                self.need = BLOCK
                return chunk, self.base, (), _GENERAL
        self.need = BLOCK
        entries = []
        if not self.foreign:
            stop = self._ours(chunk, pos, entries)
            if stop is None:  # another writer's header: read on as one
                self.foreign = True
                stop = self._theirs(chunk, self.pos, entries)
        else:
            stop = self._theirs(chunk, pos, entries)
        if entries:
            self.misses = 0
        if stop == _GENERAL and len(chunk) - self.pos >= BLOCK:
            self.misses += 1
            if self.misses >= GIVE_UP:
                self.reader.advance(self.pos)
                self.on = False  # the general parser reads the rest, from here
        return chunk, self.base, entries, stop

    def _ours(self, chunk, p, entries):
        """Members whose headers are what our writer writes, from ``chunk[p]``;
        ``None`` at the first header that is not (another writer's)."""
        sizes, sums, fields, limit = self.sizes, self.sums, self.fields, self.limit
        name_of = PLAIN_NAME.fullmatch
        keyb, key = self.keyb, self.key
        append = entries.append
        end = len(chunk)
        why = _MORE
        while end - p >= 512:
            mid = chunk[p + 100 : p + 148]  # mode, owner, group, size and time
            sz = sizes.get(mid)
            if sz is None:
                sz = _size_of(sizes, mid)
            size, ssum, padded, padding = sz
            if size < 0:
                why = None
                break
            h = name_of(chunk, p, p + 100)
            if h is None or size >= limit:
                why = _GENERAL
                break
            total = (adler32(chunk[p : p + 100]) & 0xFFFF) + ssum
            if not chunk.startswith(sums.get(total) or _checksum(sums, total), p + 148) \
                    or chunk.find(b"..", p, p + 100) >= 0:
                why = _GENERAL
                break
            stop = p + 512 + padded
            if stop > end:  # the member goes on past the buffer
                self.need = stop - p
                break
            kb, fb = h.groups()
            if kb != keyb:
                key = kb.decode("ascii")
                keyb = kb
            # padding that is not zeros is not what a writer writes
            append((key, fields.get(fb) or _field(fields, fb), chunk[p + 512 : p + 512 + size], p, p, stop,
                    None if not padding or chunk[p + 512 + size : stop] == padding else False))
            p = stop
        self.keyb, self.key, self.pos = keyb, key, p
        return why

    def _theirs(self, chunk, p, entries):
        """Members of any writer (:mod:`tarproc.core.dialects`), maybe after
        a pax header, from ``chunk[p]``."""
        member_at, fields, limit, raw = self.member_at, self.fields, self.limit, self.raw
        canon, sums = self.canon, self.sums
        name_of = PLAIN_NAME.fullmatch
        keyb, key = self.keyb, self.key
        append = entries.append
        end = len(chunk)
        why = _MORE
        while end - p >= 512:
            r = member_at(chunk, p, end)
            if r is None:
                why = _GENERAL
                break
            if type(r) is int:  # the pax header and its member's header cross the buffer
                self.need = r
                break
            q, nameb, size = r
            if nameb is None:
                h = name_of(chunk, q, q + 100)
                bad = h is None or chunk.find(b"..", q, q + 100) >= 0
            else:
                h = name_of(nameb)
                bad = h is None or b".." in nameb
            if bad or size >= limit:
                why = _GENERAL
                break
            stop = q + 512 + size + (-size % 512)
            if stop > end:  # the member goes on past the buffer
                self.need = stop - p
                break
            if entries and self.single:  # one member is taken here; the lane reads on
                break
            data = chunk[q + 512 : q + 512 + size]
            built = False
            if raw:
                # the member as a writer writes it: the name field, the size and the checksum
                if nameb is None:
                    namef = chunk[q : q + 100]
                elif len(nameb) <= 100:
                    namef = nameb + ZEROS[100 - len(nameb)]
                else:
                    namef = None  # a writer writes a pax path: it is encoded again
                if namef is not None:
                    cs = canon.get(size)
                    if cs is None:
                        cs = _canonical_size(canon, size)
                    total = (adler32(namef) & 0xFFFF) + cs[1]
                    built = (namef, cs[0], sums.get(total) or _checksum(sums, total), data, ZEROS[-size % 512])
            kb, fb = h.groups()
            if kb != keyb:
                key = kb.decode("ascii")
                keyb = kb
            append((key, fields.get(fb) or _field(fields, fb), data, p, q, stop, built))
            p = stop
        self.keyb, self.key, self.pos = keyb, key, p
        return why

    def lane(self, samples):
        """Members of other writers and the samples they make, in one loop
        (a generator of samples): :meth:`batch` and :meth:`_Samples.add`
        fused for the common member, so each costs few Python operations.
        A header whose tail (bytes 156..512) and bytes 100..136 (mode,
        owner, group, size) are byte for byte those of a header
        :func:`~tarproc.core.dialects.member_reader` took before, and whose
        checksum holds, is taken without asking it: a plain header when its
        time field is one it took too, a pax header (the very block of one
        taken, or its like) when its data are time records only (matched in
        place by the shape of data taken, :func:`_shape`) and the header
        after it is such a header.  Every other member is asked of
        ``member_reader``, and what it takes teaches the lane.  The lane ends
        (its state handed back to ``self`` and ``samples``) at the first
        member it does not take as :meth:`_theirs` and :meth:`_Samples.add`
        would (a member for the general parser, a pax ``path``, a field
        twice, a sample past its memory budget, the end of the input):
        :meth:`batch` reads that one."""
        if samples.pack is not None:
            return
        reader, member_at, limit, raw = self.reader, self.member_at, self.limit, self.raw
        fields, canon, sums, heads, checks, rests = self.fields, self.canon, self.sums, self.heads, self.checks, \
            self.rests
        rtail, rsum, mtime, tsum, ptail, psum = self.rtail, self.rsum, self.mtime, self.tsum, self.ptail, self.psum
        pheads, (pblock, pbh, pblock2, pbh2), (qmtime, qmsum) = self.pheads, self.pblocks, self.qmtime
        shapes = self.shapes
        name_of = PLAIN_NAME.fullmatch
        keyb, key = self.keyb, self.key
        lk = len(keyb) if keyb is not None else 0
        chunk, p, base = self.chunk, self.pos, self.base
        current, skey, last, pieces, nmem, held = (samples.current, samples.key, samples.last, samples.pieces,
                                                   samples.nmem, samples.held)
        rchunk, rs, rstop = samples.run
        if rchunk is not None:  # a run of our members read before: its bytes come first
            if pieces is not None:
                pieces.append(rchunk[rs:rstop])
            samples.run = (None, 0, 0)
        stats, source, marks, budget = samples.stats, samples.source, samples.marks, samples.budget
        setitem = dict.__setitem__
        need = self.need
        took = False
        end = len(chunk)
        while True:
            if end - p < need:
                reader.advance(p)
                chunk, p = reader.window(need, CHUNK)
                base = reader.offset - p
                end = len(chunk)
                if end - p < need:  # the input ends first: batch() and the general parser say how
                    break
            need = BLOCK
            hd = None
            if chunk.startswith(rtail, p + 156):
                q = p
                if chunk.startswith(mtime, p + 136) and (hd := heads.get(chunk[p + 100 : p + 136])) is not None:
                    a = adler32(chunk[p : p + 100]) & 0xFFFF  # the name field's byte sum + 1
                    cf = chunk[p + 148 : p + 156]
                    stored = checks.get(cf)
                    if stored is None:
                        stored = _check_value(checks, cf)
                    if stored != a + hd[1] + tsum:
                        hd = None
            elif chunk.startswith(ptail, p + 156):
                # a pax header like those taken before (the very block of one, or its bytes 100..136 and
                # a checksum that holds), of time records only, then a plain header like those taken before
                if chunk.startswith(pblock, p):
                    ph = pbh
                elif chunk.startswith(pblock2, p):
                    ph = pbh2
                    pblock, pbh, pblock2, pbh2 = pblock2, pbh2, pblock, pbh
                elif (ph := pheads.get(chunk[p + 100 : p + 136])) is not None:
                    cf = chunk[p + 148 : p + 156]
                    stored = checks.get(cf)
                    if stored is None:
                        stored = _check_value(checks, cf)
                    if stored == (adler32(chunk[p : p + 148]) & 0xFFFF) + psum:
                        pblock2, pbh2, pblock, pbh = pblock, pbh, chunk[p : p + 512], ph
                    else:
                        ph = None
                if ph is not None and ph[0] <= PAX_MAX:
                    q = p + 512 + ph[4]
                    if q + 512 > end:
                        need = q + 512 - p
                        continue
                    d = p + 512
                    # time records only: matched in place by the shape of records taken before, or asked
                    if ((t := shapes.get(ph[0])) is not None and t[0](chunk, d, d + ph[0]) is not None
                            or _times_only(shapes, chunk[d : d + ph[0]])) and chunk.startswith(rtail, q + 156) \
                            and (hd := heads.get(chunk[q + 100 : q + 136])) is not None:
                        if not chunk.startswith(qmtime, q + 136):  # (its value is the pax record's: not read)
                            qmtime = chunk[q + 136 : q + 148]
                            qmsum = sum(qmtime)
                        a = adler32(chunk[q : q + 100]) & 0xFFFF
                        cf = chunk[q + 148 : q + 156]
                        stored = checks.get(cf)
                        if stored is None:
                            stored = _check_value(checks, cf)
                        if stored != a + hd[1] + qmsum + rsum:
                            hd = None
            if hd is not None:
                size = hd[0]  # (below limit: see _head())
                stop = q + 512 + hd[4]
            else:
                r = member_at(chunk, p, end)
                if r is None:
                    break
                if type(r) is int:  # the pax header and its member's header cross the buffer
                    need = r
                    continue
                q, nameb, size = r
                if nameb is not None:
                    break
                a = adler32(chunk[q : q + 100]) & 0xFFFF
                # member_at() took the header at q (and the pax header at p): their like is taken above
                f = chunk[q + 100 : q + 136]
                if f not in heads and len(heads) < HEADS:
                    heads[f] = _head(f, limit)
                t = chunk[q + 156 : q + 512]
                if t != rtail:
                    rtail, rsum = t, sum(t) + 255
                    tsum = rsum + sum(mtime)
                if q == p:
                    f = chunk[p + 136 : p + 148]
                    if f != mtime:
                        mtime, tsum = f, rsum + sum(f)
                else:
                    f = chunk[p + 100 : p + 136]
                    if f not in pheads and len(pheads) < HEADS:
                        pheads[f] = _head(f, limit)
                    t = chunk[p + 156 : p + 512]
                    if t != ptail:
                        ptail, psum = t, sum(t) + 255
                if size >= limit:
                    break
                stop = q + 512 + size + (-size % 512)
            # the name: the key of the member before and a field tail seen after a key, or one match
            if keyb is not None and chunk.startswith(keyb, q) and (field := rests.get(chunk[q + lk : q + 100])):
                pass
            else:
                h = name_of(chunk, q, q + 100)
                if h is None or chunk.find(b"..", q, q + 100) >= 0:
                    break
                kb, fb = h.groups()
                if kb != keyb:
                    key = kb.decode("ascii")
                    keyb = kb
                    lk = len(kb)
                field = fields.get(fb) or _field(fields, fb)
                if len(rests) < CACHE_NAMES:
                    rests[chunk[q + lk : q + 100]] = field
            if stop > end:  # the member goes on past the buffer
                need = stop - p
                continue
            # the sample (as _Samples.add)
            if key != skey:
                if size > budget:
                    break
                if current is not None:
                    stats.read += 1
                    _seal(current, pieces, nmem, raw)
                    yield current
                if raw:
                    current = RawSample(__key__=key, __source__=source)
                    pieces = []
                else:
                    current = {"__key__": key, "__source__": source}
                if marks is not None:
                    marks.starts.append(base + p)
                skey = key
                last = ""
                nmem = held = 0
            elif field in current or held + size > budget:
                break
            data = chunk[q + 512 : q + 512 + size]
            held += size
            setitem(current, field, data)
            if pieces is not None:
                if field > last:
                    last = field
                    nmem += 1
                    # the member as a writer writes it: the name field, the size and the checksum
                    if hd is not None:
                        total = a + hd[3]
                        pieces += (chunk[q : q + 100], hd[2], sums.get(total) or _checksum(sums, total), data,
                                   hd[5])
                    else:
                        cs = canon.get(size)
                        if cs is None:
                            cs = _canonical_size(canon, size)
                        total = a + cs[1]
                        pieces += (chunk[q : q + 100], cs[0], sums.get(total) or _checksum(sums, total), data,
                                   ZEROS[-size % 512])
                else:
                    pieces = None
            took = True
            p = stop
        self.chunk, self.pos, self.base, self.need = chunk, p, base, need  # (more than a block: the input ended first)
        self.rtail, self.rsum, self.mtime, self.tsum, self.ptail, self.psum = rtail, rsum, mtime, tsum, ptail, psum
        self.keyb, self.key = keyb, key
        self.pblocks, self.qmtime = (pblock, pbh, pblock2, pbh2), (qmtime, qmsum)
        if took:
            self.misses = 0
            samples.end = base + p  # (where the last member taken ends, in whatever buffer)
        samples.current, samples.key, samples.last, samples.pieces, samples.nmem, samples.held = (current, skey, last,
                                                                                                   pieces, nmem, held)

    def handover(self):
        """Let the general parser read from where the scan stopped."""
        if self.on:
            self.reader.advance(self.pos)

    def resume(self):
        """Scan on from where the general parser stopped."""
        if self.on:
            reader = self.reader
            self.chunk, self.pos = reader.window(0)
            self.base = reader.offset - self.pos
            self.foreign = False
            if reader.gpax:
                self.on = False  # global pax records apply to every member from here on


class _Samples:
    """Members in, samples out, as :func:`~tarproc.core.grouping.group`
    makes them (a new sample where the key changes, a field twice is an
    error, fields past the memory budget packed into one spool file); with
    ``raw``, each sample's bytes as read while they are what a writer writes."""

    def __init__(self, source, stats, raw, marks, spooler):
        self.source = source
        self.stats = stats
        self.raw = raw
        self.marks = marks
        self.spooler = spooler
        self.budget = sample_budget(spooler)
        self.current = None
        self.key = None
        self.last = None  # the last field of the current sample, while it can be raw
        self.pieces = None  # the raw bytes of the current sample (None: it cannot be raw)
        self.run = (None, 0, 0)  # ... and its last run of members as read: chunk[start:stop]
        self.nmem = 0
        self.held = 0  # bytes of the current sample's fields in memory
        self.pack = None  # past the budget, its further fields go to one spool file
        self.end = 0  # where the last regular member ends (for marks)

    def add(self, chunk, base, entries):
        """Take the entries of a batch (see :class:`_Scanner`; positions are
        offsets in ``chunk``, input offset ``base + p``); yield the samples
        they complete."""
        current, key, last, pieces, nmem, held, pack = (self.current, self.key, self.last, self.pieces, self.nmem,
                                                        self.held, self.pack)
        rchunk, rs, rstop = self.run
        budget, setitem = self.budget, dict.__setitem__
        stop = None
        for k, field, data, p, q, stop, built in entries:
            if k != key:  # a new sample (classify's rule: a key other than the last member's)
                if current is not None:
                    self.stats.read += 1
                    if pieces is not None and rchunk is not None:
                        pieces.append(rchunk[rs:rstop])
                    _seal(current, pieces, nmem, self.raw)
                    yield current
                current = RawSample(__key__=k, __source__=self.source) if self.raw else \
                    {"__key__": k, "__source__": self.source}
                if self.marks is not None:
                    self.marks.starts.append(base + p)
                key = k
                last = ""
                pieces = [] if self.raw else None
                rchunk = None
                nmem = held = 0
                pack = None
            elif field in current:
                raise BadSample(k, f"field {field!r} appears twice (offset {base + q})", self.source)
            if type(data) is bytes:
                held += len(data)
                if held > budget:
                    if pack is None:
                        pack = Packer(self.spooler)
                    data = pack.add_bytes(data)
                    pieces = None  # written again from its fields (its raw bytes are not kept either)
            setitem(current, field, data)
            if pieces is not None:
                if built is not False and field > last:
                    last = field
                    nmem += 1
                    if built is not None:
                        if rchunk is not None:
                            pieces.append(rchunk[rs:rstop])
                            rchunk = None
                        pieces += built  # (joined into one piece when the sample is done)
                    elif rchunk is chunk and rstop == p:
                        rstop = stop
                    else:
                        if rchunk is not None:
                            pieces.append(rchunk[rs:rstop])
                        rchunk, rs, rstop = chunk, p, stop
                else:
                    pieces = None
        if stop is not None:
            self.end = base + stop
        self.current, self.key, self.last, self.pieces, self.nmem, self.held, self.pack = (current, key, last, pieces,
                                                                                           nmem, held, pack)
        self.run = (rchunk, rs, rstop)

    def add_member(self, m, end):
        """Take a member the general parser read (``end``: where it ends)."""
        if m.type != REGULAR:
            self.stats.skip_member(TYPE_NAMES.get(m.type, "special files"))
            return ()
        self.end = end
        parts = classify(m.name)
        if type(parts) is not tuple:
            if parts.kind == SKIPPED:
                self.stats.skip_member(parts.why)
                return ()
            raise BadArchive(self.source, m.offset, parts.why)
        return self.add(None, 0, ((parts[0], parts[1], m.data, m.start, m.offset, end, False),))

    def finish(self):
        """The last sample (or none)."""
        if self.marks is not None:
            self.marks.end = self.end
        if self.current is not None:
            self.stats.read += 1
            self._seal_current()
            done, self.current = self.current, None
            yield done

    def whole_before(self, error):
        """The current sample, when ``error`` (of the general parser) came
        while reading a member that starts another sample (as group() does)."""
        if self.current is not None and starts_another(error, self.key):
            self.stats.read += 1
            self._seal_current()
            done, self.current = self.current, None
            yield done

    def _seal_current(self):
        pieces = self.pieces
        rchunk, rs, rstop = self.run
        if pieces is not None and rchunk is not None:
            pieces.append(rchunk[rs:rstop])
        _seal(self.current, pieces, self.nmem, self.raw)


def _seal(sample, pieces, nmem, raw):
    """A finished sample keeps its input bytes (``pieces``) only when all
    its members were copied as read; otherwise it is written by the encoder."""
    if not raw:
        return
    if pieces and len(pieces) > 1:
        pieces = [b"".join(pieces)]  # one write (members of other writers come one piece each)
    sample.raw = (pieces, nmem) if pieces else None


def fast_group(reader, source="-", stats=None, raw=False, marks=None):
    """The samples of ``reader`` (a :class:`~tarproc.core.tario.TarReader`),
    as :func:`~tarproc.core.grouping.group` gives them; see the module doc.

    ``marks`` (for indexes: an object with a list ``starts`` and an int
    ``end``): each sample's first member's start (its first header block,
    long-name and pax headers included) is appended to ``marks.starts`` when
    the sample begins, and ``marks.end`` is where the last regular member
    read so far ends (data and padding)."""
    if stats is None:
        stats = Stats()
    scan = _Scanner(reader, raw)
    samples = _Samples(source, stats, raw, marks, reader.spooler)
    general = reader.members()
    while True:
        if scan.on:
            if scan.foreign:
                yield from scan.lane(samples)
                scan.single = True  # batch() takes the one member the lane did not
            chunk, base, entries, why = scan.batch()
            if entries:
                yield from samples.add(chunk, base, entries)
            if why == _MORE:
                continue
            scan.handover()
        # the general parser reads one member (and whatever comes before it)
        try:
            m = next(general, None)
        except TarprocError as e:
            # the data of the next member could not be read (damage, a compression bomb): when it
            # starts another sample, the current one is whole and is given first, so a consumer
            # that wants no more (tarshow -c 1) ends before the error (as group() does)
            yield from samples.whole_before(e)
            raise
        scan.resume()
        if m is None:
            break
        yield from samples.add_member(m, reader.offset)
    yield from samples.finish()


def fast_members(reader, split_names=False):
    """The members of ``reader`` (a :class:`~tarproc.core.tario.TarReader`),
    as ``reader.members()`` gives them (names, data, types, offsets, errors,
    ``reader.offset`` after each), for readers of members rather than
    samples (``tarcheck``, ``tarindex``): plain regular members of any writer
    (:mod:`tarproc.core.dialects`) whose name is a sample name are read from
    the input buffer, every other member by the general parser at the same
    offset.  ``leftover(reader)`` tells how many bytes were read from the
    input and not used when it ends (data after the end-of-archive marker).
    With ``split_names``, it yields ``(member, split)``: ``split`` is
    ``(key, field)`` as :func:`~tarproc.core.rules.classify` gives them
    for a member read from the buffer (its name is a sample name), else
    ``None`` (ask ``classify``)."""
    fast = reader.offset == 0 and reader.window(0) is not None
    general = reader.members()
    limit = min(reader.blob_from, LARGE_MEMBER)
    member_at = _taker(member_reader(), limit)
    name_of = PLAIN_NAME.fullmatch
    nums = {}  # mode and time fields (checked octal by member_at) -> their values
    rests = {}  # the tails of name fields after a key (from the dot on) -> their text (as in _Scanner.lane)
    keyb = key = None  # the key of the last name matched (bytes, str)
    lk = 0
    chunk = b""
    pos = 0
    misses = 0
    while True:
        m = None
        if fast and len(chunk) - pos < BLOCK:
            reader.advance(pos)
            chunk, pos = reader.window(BLOCK, CHUNK)
        end = len(chunk)
        p = pos
        if fast and end - p >= BLOCK:
            r = member_at(chunk, p, end)
            if type(r) is int:  # the pax header and its member's header cross the buffer: get the rest
                reader.advance(p)
                chunk, pos = reader.window(r, CHUNK)
                p, end = pos, len(chunk)
                r = member_at(chunk, p, end) if end - p >= r else None
            if type(r) is tuple:
                q, nameb, size, mtime = r
                if nameb is not None:
                    h = name_of(nameb)
                    ok = h is not None and b".." not in nameb
                    if ok:
                        name = nameb.decode("ascii")
                        split = (name[: len(h[1])], name[len(h[1]) + 1 :])
                elif keyb is not None and chunk.startswith(keyb, q) and (rest := rests.get(chunk[q + lk : q + 100])):
                    name = key + rest[0]  # the key of the member before, and a name field's tail seen after a key
                    split = (key, rest[1])
                    ok = True
                else:
                    h = name_of(chunk, q, q + 100)
                    ok = h is not None and chunk.find(b"..", q, q + 100) < 0
                    if ok:
                        name = chunk[q : q + 100].rstrip(b"\0").decode("ascii")
                        keyb = h[1]
                        lk = len(keyb)
                        key = name[:lk]
                        split = (key, name[lk + 1 :])
                        if len(rests) < CACHE_NAMES:
                            rests[chunk[q + lk : q + 100]] = (name[lk:], split[1])
                if ok and size < limit:
                    stop = q + 512 + size + (-size % 512)
                    if stop > end:  # the member goes on past the buffer: get the rest
                        reader.advance(p)
                        chunk, pos = reader.window(stop - p, CHUNK)
                        q += pos - p
                        stop += pos - p
                        p, end = pos, len(chunk)
                    if stop <= end:
                        base = reader.offset - pos
                        f = chunk[q + 100 : q + 108]
                        mode = nums.get(f)
                        if mode is None:
                            mode = _cached(nums, f)
                        if p == q:
                            f = chunk[q + 136 : q + 148]
                            mtime = nums.get(f)
                            if mtime is None:
                                mtime = _cached(nums, f)
                        elif mtime is None:
                            mtime = _mtime(chunk, p, q)
                        link = chunk[q + 157 : q + 257].split(b"\0", 1)[0].decode("utf-8", "surrogateescape") \
                            if chunk[q + 157] else ""
                        m = Member(name, chunk[q + 512 : q + 512 + size], REGULAR, mode, mtime, link, base + q, base + p)
                        pos = stop
                        reader.advance(stop)
                        misses = 0
                        if split_names:
                            m = (m, split)
        if m is None:
            if fast:
                if end - p >= BLOCK:
                    misses += 1
                    if misses >= GIVE_UP:
                        fast = False
                reader.advance(p)
            m = next(general, None)
            if fast:
                chunk, pos = reader.window(0)
                if reader.gpax:
                    fast = False
            if m is None:
                return
            if split_names:
                m = (m, None)
        yield m


def _taker(member_at, limit):
    """``member_at`` (of :func:`~tarproc.core.dialects.member_reader`) with
    the lane's shortcut (:meth:`_Scanner.lane`, which has it inline): a
    header like one it took (same tail, bytes 100..136 and, for a plain
    header, time field; a pax header block taken, or its like, with time
    records of a shape taken) whose checksum holds is taken without asking
    it.  Same results as ``member_at``, with a fourth item: the member's
    time when it is read on the way (from pax records of a shape taken),
    else ``None``; members of ``limit`` bytes or more are asked of it too; for
    :func:`fast_members`."""
    heads, pheads, checks, shapes = {}, {}, {}, {}
    rtail, mtime, ptail = _V7_TAIL, _ZERO_TIME, _PAX_TAIL
    rsum, psum = sum(_V7_TAIL) + 255, sum(_PAX_TAIL) + 255
    tsum = rsum + sum(_ZERO_TIME)
    pblock, pbh, pblock2, pbh2 = _NO_BLOCK, None, _NO_BLOCK, None
    qmtime, qmsum = _ZERO_TIME, sum(_ZERO_TIME)

    def take(chunk, p, end):
        nonlocal rtail, mtime, ptail, rsum, psum, tsum, pblock, pbh, pblock2, pbh2, qmtime, qmsum
        if chunk.startswith(rtail, p + 156):
            if chunk.startswith(mtime, p + 136) and (hd := heads.get(chunk[p + 100 : p + 136])) is not None:
                cf = chunk[p + 148 : p + 156]
                stored = checks.get(cf)
                if stored is None:
                    stored = _check_value(checks, cf)
                if stored == (adler32(chunk[p : p + 100]) & 0xFFFF) + hd[1] + tsum:
                    return p, None, hd[0], None
        elif chunk.startswith(ptail, p + 156):
            if chunk.startswith(pblock, p):
                ph = pbh
            elif chunk.startswith(pblock2, p):
                ph = pbh2
                pblock, pbh, pblock2, pbh2 = pblock2, pbh2, pblock, pbh
            elif (ph := pheads.get(chunk[p + 100 : p + 136])) is not None:
                cf = chunk[p + 148 : p + 156]
                stored = checks.get(cf)
                if stored is None:
                    stored = _check_value(checks, cf)
                if stored == (adler32(chunk[p : p + 148]) & 0xFFFF) + psum:
                    pblock2, pbh2, pblock, pbh = pblock, pbh, chunk[p : p + 512], ph
                else:
                    ph = None
            if ph is not None and ph[0] <= PAX_MAX:
                q = p + 512 + ph[4]
                if q + 512 > end:
                    return q + 512 - p
                d = p + 512
                if (t := shapes.get(ph[0])) is not None and t[0](chunk, d, d + ph[0]) is not None \
                        and chunk.startswith(rtail, q + 156) and (hd := heads.get(chunk[q + 100 : q + 136])) is not None:
                    if not chunk.startswith(qmtime, q + 136):  # (its value is the pax record's: not read)
                        qmtime = chunk[q + 136 : q + 148]
                        qmsum = sum(qmtime)
                    cf = chunk[q + 148 : q + 156]
                    stored = checks.get(cf)
                    if stored is None:
                        stored = _check_value(checks, cf)
                    if stored == (adler32(chunk[q : q + 100]) & 0xFFFF) + hd[1] + qmsum + rsum:
                        return q, None, hd[0], int(chunk[d + t[1] : d + t[2]])  # (its mtime's whole seconds)
        r = member_at(chunk, p, end)
        if type(r) is tuple and r[1] is None:
            # member_at() took the header at q (and the pax header at p): their like is taken above
            q = r[0]
            if q != p and len(shapes) < SHAPES:
                size = octal(chunk[p + 124 : p + 136])
                if size not in shapes and times_only(chunk[p + 512 : p + 512 + size]):
                    shapes[size] = _shape(chunk[p + 512 : p + 512 + size])
            f = chunk[q + 100 : q + 136]
            if f not in heads and len(heads) < HEADS:
                heads[f] = _head(f, limit)
            t = chunk[q + 156 : q + 512]
            if t != rtail:
                rtail, rsum = t, sum(t) + 255
                tsum = rsum + sum(mtime)
            if q == p:
                f = chunk[p + 136 : p + 148]
                if f != mtime:
                    mtime, tsum = f, rsum + sum(f)
            else:
                f = chunk[p + 100 : p + 136]
                if f not in pheads and len(pheads) < HEADS:
                    pheads[f] = _head(f, limit)
                t = chunk[p + 156 : p + 512]
                if t != ptail:
                    ptail, psum = t, sum(t) + 255
        return (*r, None) if type(r) is tuple else r

    return take


def _cached(nums, field):
    value = octal(field)
    if len(nums) < 4096:
        nums[field] = value
    return value


def _mtime(chunk, p, q):
    """The time of a member read by :func:`fast_members`: its pax ``mtime``
    (whole seconds, as the general parser takes it) or its header's."""
    if p != q:
        records = parse_pax_fast(chunk[p + 512 : p + 512 + octal(chunk[p + 124 : p + 136])])
        if b"mtime" in records:
            return int(records[b"mtime"].split(b".", 1)[0])
    return octal(chunk[q + 136 : q + 148])


def leftover(reader):
    """Bytes :func:`fast_members` or :func:`fast_group` read from the input
    of ``reader`` and did not use (0 when they read nothing ahead)."""
    return reader.read_ahead
