"""Reading the headers of other writers straight from a buffer.

GNU tar (gnu, ustar and posix formats), bsdtar, Python's ``tarfile`` (GNU,
USTAR, PAX) and webdataset's ``TarWriter`` write plain regular-file headers
that differ from ours only in fields a sample does not carry (mode, owner
names, times, magic), sometimes behind a pax header of a few records
(``mtime``, ``atime``, ``ctime``, ``path``, ``size``).  :class:`Dialects`
takes such a member (a pax header and its member, or a member alone) from
the buffer :func:`~tarproc.core.passthru.fast_group` reads into, checking
what the general parser (:class:`~tarproc.core.tario.TarReader`) checks:
the checksum of every header (unsigned; a signed-char sum goes to the
general parser), the numeric fields it decodes (octal; base-256 goes to the
general parser), pax records (length-prefixed, newline-ended, ``key=value``),
a pax ``path`` that replaces the header's name and a pax ``size`` its size.

Anything else returns ``None`` and the general parser reads the member from
the same position: other pax keys (``GNU.sparse.*``, ``hdrcharset``,
vendor records), empty pax values, ``././@LongLink``, prefixes, links and
directories, base-256 numbers, damage of any kind.  So every decision on an
unusual member stays in one place, :mod:`tarproc.core.tario`.

The caches are bounded: a shard's headers repeat a few tails (bytes
156..512: type, magic, owner names, prefix), modes, sizes and times.
"""

import re
from zlib import adler32

#: pax keywords whose records the fast path takes: ``path`` and ``size``
#: are applied, ``mtime`` is checked as the general parser checks it, the
#: rest are ignored by the general parser as well.
PAX_KEYS = frozenset((b"path", b"size", b"mtime", b"atime", b"ctime", b"uid", b"gid", b"uname", b"gname"))
#: Largest pax header data taken here (larger ones: the general parser).
PAX_MAX = 4096
#: Entries per cache.
CACHE = 4096
#: Entries of the cache of checksum fields: a shard's headers (real times,
#: sizes) have thousands of checksums, all below 130,560 (512 bytes of 255).
CHECKS = 1 << 15

REGULAR, PAX = 1, 2
#: pax header data of an ``mtime`` record whose value the general parser
#: takes, then at most two ``atime``/``ctime`` records (what tarfile and
#: webdataset write before each member: mtime; GNU tar: mtime, atime,
#: ctime): a subset of what :func:`parse_pax_fast` and the mtime check
#: accept, matched at once; groups 1, 3, 5 are the records, 2, 4, 6 their
#: length fields, which :func:`times_only` compares with their lengths.
TIMES_ONLY = re.compile(rb"(([1-9][0-9]{0,5}) mtime=-?[0-9]{1,30}(?:\.[^\n]*+)?\n)"
                        rb"(?:(([1-9][0-9]{0,5}) [ac]time=[^\n]++\n)(([1-9][0-9]{0,5}) [ac]time=[^\n]++\n)?)?")


def times_only(data, match=TIMES_ONLY.fullmatch):
    """Whether pax header data is only time records, ``mtime`` first and
    valid as the general parser reads it (:data:`TIMES_ONLY`, lengths checked)."""
    m = match(data)
    if m is None or int(m[2]) != len(m[1]):
        return False
    r = m[3]
    return r is None or int(m[4]) == len(r) and (m[5] is None or int(m[6]) == len(m[5]))


def octal(field):
    """The value of a numeric header field as the general parser reads it
    when it is octal text (digits up to the first NUL, spaces stripped),
    else ``None`` (base-256, or not a number)."""
    if field[0] & 0x80:
        return None
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if not digits:
        return 0
    if digits.translate(None, b"01234567"):
        return None
    return int(digits, 8)


def _tail_kind(tail):
    """``(kind, byte sum)`` of bytes 156..512 of a header: REGULAR for a
    regular file without a ustar prefix, PAX for a pax header, else 0."""
    flag = tail[0]
    if flag in (0x30, 0x00, 0x37):  # '0', NUL, '7': regular files
        if tail[101:107] == b"ustar\0" and tail[189]:  # a POSIX prefix (byte 345): the general parser joins it
            kind = 0
        elif flag == 0 and not tail[1:].strip(b"\0") and tail[101:107] != b"ustar\0":
            kind = 0  # a block that may be all zeros (v7 with no magic: rare; the general parser)
        else:
            kind = REGULAR
    elif flag == 0x78:  # 'x'
        kind = PAX
    else:
        kind = 0
    return kind, sum(tail)


def parse_pax_fast(data):
    """The records of pax header data as ``{key: value}`` (bytes), or
    ``None`` when anything is unusual (a key outside :data:`PAX_KEYS`, an
    empty value, a value holding a newline, NUL padding, a malformed
    record): the general parser then decides, with its own error for what
    is malformed.  Each record is one line whose length field counts it."""
    records = data.split(b"\n")
    if records.pop():  # data that does not end with a newline
        return None
    out = {}
    for rec in records:
        length, _, kv = rec.partition(b" ")
        key, _, value = kv.partition(b"=")
        if not length.isdigit() or int(length) != len(rec) + 1 or key not in PAX_KEYS or not value:
            return None
        out[key] = value
    return out


def _pax_number(value, fraction):
    """Whether the general parser reads a pax number (``mtime`` with its
    fraction) without an error."""
    if fraction:
        value = value.split(b".", 1)[0]
    if value[:1] == b"-":
        value = value[1:]
    return value.isdigit() and len(value) <= 30


def member_reader():
    """A function ``member(chunk, p, end)`` that reads the member at
    ``chunk[p:]`` (``end``: where the buffer's data ends).  It returns
    ``None`` (the general parser decides), an ``int`` (the bytes needed from
    ``p`` to decide: more than the buffer holds), or ``(q, name, size)``:
    the member's header is at ``q`` (after a pax header, if any), its data
    at ``q + 512``; ``name`` is ``None`` when it is the header's name field,
    else the pax ``path`` (bytes).  Each function keeps its own bounded
    caches, and the last tail, mode and time seen, compared in place (most
    headers of a shard repeat them)."""
    tails = {}  # bytes 156..512 -> (kind, sum)
    numbers = {}  # a numeric field (mode, size, time) -> its value, or -1: not octal
    checks = {}  # checksum field -> its value (or -1)
    # the last tail of a regular header and of a pax header, with their sums, and the last two mode
    # fields and the last time field that were octal: compared in place.  They start as real ones (a
    # v7 tail, octal fields), so whatever matches them is what they stand for.
    rtail, ptail = b"0" + bytes(355), b"x" + bytes(355)
    rsum, psum = 0x30, 0x78
    # the last pax header block that passed check(), and its size: tarfile and webdataset write
    # the same block before every member whose records have the same length (a few lengths: pblocks)
    phead, psize = None, -1
    pblocks = {}  # pax header blocks that passed check() -> their size (their record lengths vary a little)
    mode, mode2, mtime = b"0000644\0", b"0000664\0", b"00000000000\0"

    def number(field):
        v = octal(field)
        if v is None:
            v = -1
        if len(numbers) < CACHE:
            numbers[field] = v
        return v

    def check(p, chunk, tsum):
        """Whether the checksum holds and the mode is octal; the size (or -1)."""
        nonlocal mode, mode2
        cf = chunk[p + 148 : p + 156]
        stored = checks.get(cf)
        if stored is None:
            stored = octal(cf)
            if stored is None:
                stored = -1
            if len(checks) < CHECKS:
                checks[cf] = stored
        # bytes 0..148 sum to at most 37740, below Adler-32's modulus: its low half is their sum + 1
        if (adler32(chunk[p : p + 148]) & 0xFFFF) + 255 + tsum != stored:
            return -1  # (a signed-char checksum: the general parser)
        if not chunk.startswith(mode, p + 100) and not chunk.startswith(mode2, p + 100):
            f = chunk[p + 100 : p + 108]
            v = numbers.get(f)
            if (number(f) if v is None else v) < 0:
                return -1
            mode, mode2 = f, mode  # (pax headers and members often have two modes)
        f = chunk[p + 124 : p + 136]
        v = numbers.get(f)
        return number(f) if v is None else v

    def kind_of(chunk, p):
        nonlocal rtail, rsum, ptail, psum
        tail = chunk[p + 156 : p + 512]
        t = tails.get(tail)
        if t is None:
            t = _tail_kind(tail)
            if len(tails) < CACHE:
                tails[tail] = t
        if t[0] == REGULAR:
            rtail, rsum = tail, t[1]
        elif t[0] == PAX:
            ptail, psum = tail, t[1]
        return t

    def member(chunk, p, end):
        nonlocal mtime, phead, psize
        if chunk.startswith(rtail, p + 156):
            # the common case inline: check() and the time, for a plain member
            stored = checks.get(chunk[p + 148 : p + 156])
            if stored is not None and (adler32(chunk[p : p + 148]) & 0xFFFF) + 255 + rsum == stored \
                    and (chunk.startswith(mode, p + 100) or chunk.startswith(mode2, p + 100)) \
                    and chunk.startswith(mtime, p + 136):
                size = numbers.get(chunk[p + 124 : p + 136])
                if size is not None and size >= 0:
                    return p, None, size
            kind, tsum = REGULAR, rsum
        elif chunk.startswith(ptail, p + 156):
            kind, tsum = PAX, psum
        else:
            kind, tsum = kind_of(chunk, p)
            if not kind:
                return None
        if kind == PAX and phead is not None and chunk.startswith(phead, p):
            size = psize  # the very block of the last pax header that passed check()
        elif kind == PAX and (block := chunk[p : p + 512]) in pblocks:
            phead, psize = block, pblocks[block]
            size = psize
        else:
            size = check(p, chunk, tsum)
            if size < 0:
                return None
            if kind == PAX:
                phead, psize = chunk[p : p + 512], size
                if len(pblocks) < 64:
                    pblocks[phead] = size
        if kind == REGULAR:
            if not chunk.startswith(mtime, p + 136):
                f = chunk[p + 136 : p + 148]
                v = numbers.get(f)
                if (number(f) if v is None else v) < 0:
                    return None  # the general parser says what is wrong with the time
                mtime = f
            return p, None, size
        if size > PAX_MAX:
            return None
        q = p + 512 + size + (-size % 512)
        if q + 512 > end:
            return q + 512 - p
        data = chunk[p + 512 : p + 512 + size]
        if times_only(data):
            records = None  # time records only, valid as the general parser reads them (tarfile, GNU tar, wds)
        else:
            records = parse_pax_fast(data)
            if records is None:
                return None
        if chunk.startswith(rtail, q + 156):
            # the common case inline: check() for a plain member after its pax header
            stored = checks.get(chunk[q + 148 : q + 156])
            if stored is not None and (adler32(chunk[q : q + 148]) & 0xFFFF) + 255 + rsum == stored \
                    and (chunk.startswith(mode, q + 100) or chunk.startswith(mode2, q + 100)):
                size = numbers.get(chunk[q + 124 : q + 136])
                if size is None:
                    size = check(q, chunk, rsum)
            else:
                size = check(q, chunk, rsum)
        else:
            kind, tsum = kind_of(chunk, q)
            if kind != REGULAR:
                return None
            size = check(q, chunk, tsum)
        if size < 0:
            return None
        if records is None:
            return q, None, size
        if b"mtime" in records:
            value = records[b"mtime"]  # (as _pax_number(value, True), inline)
            if value[:1] == b"-":
                value = value[1:]
            value = value.split(b".", 1)[0]
            if not value.isdigit() or len(value) > 30:
                return None
        elif not chunk.startswith(mtime, q + 136):
            f = chunk[q + 136 : q + 148]
            v = numbers.get(f)
            if (number(f) if v is None else v) < 0:
                return None
            mtime = f
        if b"size" in records:
            value = records[b"size"]
            if not value.isdigit() or len(value) > 18:
                return None
            size = int(value)
        name = records.get(b"path")
        if name is not None and b"\0" in name:
            return None
        return q, name, size

    return member
