"""Reading shards of small members fast, and copying unchanged samples as bytes.

:func:`fast_group` yields exactly the samples of
``group(reader.members(), source, stats)`` (same keys, fields, bytes, skips,
counts and errors) but reads the common member straight from the input
buffer: a plain ustar header that is byte for byte what
:class:`~tarproc.core.tario.TarWriter` writes with its defaults (mode 0644,
owner 0, time 0, no prefix, no pax) for an ASCII name of at most 100 bytes,
and data below 128 KiB and the blob threshold.  Such a header needs no decoding:
its name field is one match of :data:`NAME` (which splits key and field
as :func:`~tarproc.core.grouping.group` does, for the names it accepts),
bytes 100..148 are looked up in a small cache of the constant parts and
sizes seen, and the checksum and the rest of the block are compared with
the bytes a writer would write for that name sum, without summing the
block (the name's byte sum is the low half of its Adler-32).  Every other
member (GNU tar's, pax, long names, links, damage, the end of the input)
goes to the general parser of :class:`~tarproc.core.tario.TarReader`,
which reads on from the same position.

With ``raw``, samples come as :class:`RawSample`: when every member of a
sample was such a header, the fields are in sorted order and named as a
writer would name them, ``sample.raw`` holds the sample's bytes as they
were read, and :class:`~tarproc.core.grouping.SampleWriter` writes those
bytes instead of encoding the sample again: the same bytes, without the work.
Any change to the sample (setting, deleting a field) drops ``raw``.
"""

import io
import re
from zlib import adler32

from ..errors import BadArchive, BadSample, TarprocError
from .pack import Packer, sample_budget
from .limits import quote
from .rules import split_name, starts_another, unnamed, unsafe_name
from .stats import Stats
from .dialects import member_reader, octal, parse_pax_fast
from .tario import _LARGE_MEMBER, REGULAR, TYPE_NAMES, Member, TarWriter

#: After this many members in a row that the fast path could not take,
#: an input is read by the general parser alone (a GNU tar shard).
GIVE_UP = 32


def _canonical_parts():
    w = TarWriter(io.BytesIO())
    return w._pre, w._mtime, w._end, w._const


PRE, MTIME, END, CONST = _canonical_parts()
#: ZEROS[n]: n zero bytes (the padding after member data).
ZEROS = tuple(bytes(n) for n in range(512))

#: The name field of a header (bytes 0..100) as a writer writes it, in one
#: match: the key (directories, then a base name up to its first dot), the
#: field (printable ASCII, no ``/``, lower case, not starting with ``_``) and
#: NUL padding.  Other names (upper case, ``..``, ``__x__``, no extension, not
#: ASCII) go to the general path, which decides on them as :func:`group` does.
NAME = re.compile(
    rb"((?:[ -.0-~]++/)*+[ -\-0-~]++)"  # the key
    rb"\.([ -.0-@\[-^`-~][ -.0-@\[-~]*+)\x00*+",  # the field, the padding
    re.S,
)


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


def is_canonical_writer(tar):
    """Whether a :class:`TarWriter` writes the headers that raw bytes carry."""
    return tar._pre == PRE and tar._mtime == MTIME and tar._end == END


#: Bytes asked of the input at a time (``read1``: what is there, up to this).
CHUNK = 256 << 10


class _Rest:
    """The input as the general parser sees it: what the fast path has
    buffered and not used (``head[pos:]``), then ``stream``."""

    def __init__(self, stream):
        self.stream = stream
        self.head = b""
        self.pos = 0

    def read(self, n=-1):
        head, pos = self.head, self.pos
        if pos + n <= len(head) and n >= 0:
            self.pos = pos + n
            return head[pos : pos + n]
        part = head[pos:]
        self.head, self.pos = b"", 0
        more = self.stream.read(n - len(part) if n >= 0 else -1)
        return part + more if part else more

    def readinto(self, view):
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def tell(self):
        return self.stream.tell() - (len(self.head) - self.pos)

    def seek(self, n, whence=0):
        if whence != 1:
            raise ValueError("only relative seeks")  # all that TarReader does
        left = len(self.head) - self.pos
        if n <= left:
            self.pos += n
            return self.tell()
        self.head, self.pos = b"", 0
        return self.stream.seek(n - left, 1)


def _seal(sample, pieces, rchunk, rs, rstop, nmem):
    """A finished sample keeps its input bytes (the pieces, with the last
    run of buffer ``rchunk[rs:rstop]``) only when all its members were copied
    as read; otherwise it is written by the encoder."""
    if pieces is not None and rchunk is not None:
        pieces.append(rchunk[rs:rstop])
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
    stream = reader.stream
    read1 = getattr(stream, "read1", None)
    fast = read1 is not None and reader.offset == 0
    if fast:
        rest = reader.stream = _Rest(stream)
        take = stream.read
    general = reader.members()
    limit = min(reader._blob_from, _LARGE_MEMBER)
    budget = sample_budget(reader.spooler)
    held = 0  # bytes of the current sample's fields in memory
    pack = None  # past the budget, its further fields go to one spool file
    name_of = NAME.fullmatch
    sums = {}  # header bytes 148..512 by the sum of the name and size fields (+1)
    sizes = {}  # bytes 100..148 of a header -> _size_of() them
    fields = {}  # field names as bytes -> str
    setitem = dict.__setitem__
    current = None
    key = keyb = None  # the current sample's key (and its bytes, when a fast member set it)
    last = None  # the last field of the current sample, while it can be raw
    pieces = None  # the raw bytes of the current sample (None: it cannot be raw)
    rchunk = None  # ... and its last run of members, chunk[rs:rstop]
    rs = rstop = 0
    nmem = 0
    misses = 0
    foreign = False  # headers are read as another writer's (dialects.py)
    member_at = member_reader()
    canon = {}  # size -> bytes 100..148 of our header for it, and the sum of its size field
    chunk = b""
    pos = end = 0
    base = 0  # the input offset of chunk[0]
    endpos = 0  # where the last regular member ends (for marks)
    while True:
        if fast and end - pos < 512:
            more = read1(CHUNK)
            if pos < end:
                more = chunk[pos:] + more
            while 0 < len(more) < 512:  # a header cut by the buffer: one more read
                piece = read1(CHUNK)
                if not piece:
                    break
                more += piece
            if rchunk is chunk and pieces is not None:
                pieces.append(chunk[rs:rstop])
                rchunk = None
            base += pos
            chunk, pos, end = more, 0, len(more)
        p = pos
        k = None
        built = None  # a member of another writer: the parts of its bytes as a writer writes them
        if fast and foreign and end - p >= 512:
            # ---- a header of another writer (GNU tar, bsdtar, tarfile, webdataset), maybe after a pax header
            r = member_at(chunk, p, end)
            if type(r) is int:  # the pax header and its member's header cross the buffer: get the rest
                if rchunk is chunk and pieces is not None:
                    pieces.append(chunk[rs:rstop])
                    rchunk = None
                more = take(r - (end - p))
                chunk = chunk[p:] + more
                base += p
                pos = p = 0
                end = len(chunk)
                r = member_at(chunk, p, end) if end >= r else None
            if r is not None:
                q, nameb, size = r
                if nameb is None:
                    h = name_of(chunk, q, q + 100)
                    bad = h is None or chunk.find(b"..", q, q + 100) >= 0
                else:
                    h = name_of(nameb)
                    bad = h is None or b".." in nameb
                if not bad and size < limit:
                    stop = q + 512 + size + (-size % 512)
                    if stop > end:
                        # the member goes on past the buffer: get the rest
                        more = take(stop - end)
                        if rchunk is chunk and pieces is not None:
                            pieces.append(chunk[rs:rstop])
                            rchunk = None
                        chunk = chunk[p:] + more
                        base += p
                        q -= p
                        stop -= p
                        pos = p = 0
                        end = len(chunk)
                    if stop <= end:
                        data = chunk[q + 512 : q + 512 + size]
                        pos = stop
                        here = base + q
                        mstart = base + p  # (its pax header, if any, included)
                        endpos = base + stop
                        if misses:
                            misses = 0
                        kb, fb = h.groups()
                        if kb == keyb:
                            k = key
                        else:
                            k = kb.decode("ascii")
                            keyb = kb
                        field = fields.get(fb)
                        if field is None:
                            field = fb.decode("ascii")
                            if len(fields) < 4096:
                                fields[fb] = field
                        israw = raw
                        if israw:
                            # the member as a writer writes it: the name field, the size and the checksum
                            if nameb is None:
                                namef = chunk[q : q + 100]
                            elif len(nameb) <= 100:
                                namef = nameb + ZEROS[100 - len(nameb)]
                            else:
                                namef = None  # a writer writes a pax path: it is encoded again
                                israw = False
                            if namef is not None:
                                cs = canon.get(size)
                                if cs is None:
                                    cs = _canonical_size(canon, size)
                                total = (adler32(namef) & 0xFFFF) + cs[1]
                                built = (namef, cs[0], sums.get(total) or _checksum(sums, total), data,
                                         ZEROS[-size % 512])
        elif fast and end - p >= 512:
            mid = chunk[p + 100 : p + 148]  # mode, owner, group, size and time
            sz = sizes.get(mid)
            if sz is None:
                sz = _size_of(sizes, mid)
            size, ssum, padded, padding = sz
            if size < 0:  # not our writer's header: another writer's, or not a plain member at all
                foreign = True
                continue
            h = name_of(chunk, p, p + 100)
            if h is not None and size < limit:
                total = (adler32(chunk[p : p + 100]) & 0xFFFF) + ssum
                if chunk.startswith(sums.get(total) or _checksum(sums, total), p + 148) \
                        and chunk.find(b"..", p, p + 100) < 0:
                    kb, fb = h.groups()
                    stop = p + 512 + padded
                    if stop > end:
                        # the member goes on past the buffer: get the rest
                        more = take(stop - end)
                        if rchunk is chunk and pieces is not None:
                            pieces.append(chunk[rs:rstop])
                            rchunk = None
                        chunk = chunk[p:] + more
                        base += p
                        pos = p = 0
                        end = len(chunk)
                        stop = 512 + padded
                    if stop <= end:
                        data = chunk[p + 512 : p + 512 + size]
                        pos = stop
                        mstart = here = base + p
                        endpos = base + stop
                        if misses:
                            misses = 0
                        # padding that is not zeros is not what a writer writes
                        israw = not padding or chunk[p + 512 + size : stop] == padding
                        if kb == keyb:
                            k = key
                        else:
                            k = kb.decode("ascii")
                            keyb = kb
                        field = fields.get(fb)
                        if field is None:
                            field = fb.decode("ascii")
                            if len(fields) < 4096:
                                fields[fb] = field
        if k is None:
            # the general parser reads one member (and whatever comes before it)
            if fast:
                if end - p >= 512:
                    misses += 1
                    if misses >= GIVE_UP:
                        fast = False
                rest.head, rest.pos = chunk, pos
                reader.offset = base + pos
            try:
                m = next(general, None)
            except TarprocError as e:
                # the data of the next member could not be read (damage, a compression bomb): when it
                # starts another sample, the current one is whole and is given first, so a consumer
                # that wants no more (tarshow -c 1) ends before the error (as group() does)
                if current is not None and starts_another(e, key):
                    stats.read += 1
                    if raw:
                        _seal(current, pieces, rchunk, rs, rstop, nmem)
                    done, current = current, None
                    yield done
                raise
            foreign = False
            if fast:
                chunk, pos, end = rest.head, rest.pos, len(rest.head)
                base = reader.offset - pos
                if reader.gpax:
                    fast = False  # global pax records apply to every member from here on
            elif reader.stream is not stream and rest.pos >= len(rest.head):
                reader.stream = stream  # nothing left buffered: the parser reads the input directly
            if m is None:
                break
            if m.type != REGULAR:
                stats.skip_member(TYPE_NAMES.get(m.type, "special files"))
                continue
            name, data, here, israw = m.name, m.data, m.offset, False
            mstart, endpos = m.start, reader.offset
            # ---- what group() in grouping.py does with a name
            if name and name[0] != "/" and ".." not in name and name.isprintable():
                slash = name.rfind("/")
                dot = name.find(".", slash + 1)
                if dot <= slash + 1:
                    stats.skip_member(unnamed(name))
                    continue
                k = name[:dot]
                field = name[dot + 1 :].lower()
            else:
                why = unsafe_name(name)
                if why:
                    raise BadArchive(source, here, why)
                parts = split_name(name)
                if parts is None:
                    stats.skip_member(unnamed(name))
                    continue
                k, field = parts
            if field[:2] == "__" and field[-2:] == "__":  # as group(): a metadata name is never a field
                raise BadArchive(source, here, f"member name {quote(name)}: field {quote(field)} is a "
                                                   f"metadata name (__...__), never a field")
            keyb = None
        if k != key:
            if current is not None:
                stats.read += 1
                if raw:
                    _seal(current, pieces, rchunk, rs, rstop, nmem)
                yield current
            current = RawSample(__key__=k, __source__=source) if raw else {"__key__": k, "__source__": source}
            if marks is not None:
                marks.starts.append(mstart)
            key = k
            last = ""
            pieces = [] if raw else None
            rchunk = None
            nmem = 0
            held = 0
            pack = None
        elif field in current:
            raise BadSample(k, f"field {field!r} appears twice (offset {here})", source)
        if type(data) is bytes:
            held += len(data)
            if held > budget:
                if pack is None:
                    pack = Packer(reader.spooler)
                data = pack.add_bytes(data)
                pieces = None  # written again from its fields (its raw bytes are not kept either)
        setitem(current, field, data)
        if pieces is not None:
            if israw and field > last:
                last = field
                nmem += 1
                if built is not None:
                    if rchunk is not None:
                        pieces.append(rchunk[rs:rstop])
                        rchunk = None
                    pieces += built  # (joined into one piece when the sample is done)
                elif rchunk is chunk and rstop == p:
                    rstop = pos
                else:
                    if rchunk is not None:
                        pieces.append(rchunk[rs:rstop])
                    rchunk, rs, rstop = chunk, p, pos
            else:
                pieces = None
    if marks is not None:
        marks.end = endpos
    if current is not None:
        stats.read += 1
        if raw:
            _seal(current, pieces, rchunk, rs, rstop, nmem)
        yield current


def fast_members(reader):
    """The members of ``reader`` (a :class:`~tarproc.core.tario.TarReader`),
    as ``reader.members()`` gives them (names, data, types, offsets, errors,
    ``reader.offset`` after each), for readers of members rather than
    samples (``tarcheck``, ``tarindex``): plain regular members of any writer
    (:mod:`tarproc.core.dialects`) whose name is a sample name are read from
    the input buffer, every other member by the general parser at the same
    offset.  ``leftover(reader)`` tells how many bytes were read from the
    input and not used when it ends (data after the end-of-archive marker)."""
    stream = reader.stream
    read1 = getattr(stream, "read1", None)
    fast = read1 is not None and reader.offset == 0
    if fast:
        rest = reader.stream = _Rest(stream)
        take = stream.read
    general = reader.members()
    limit = min(reader._blob_from, _LARGE_MEMBER)
    member_at = member_reader()
    name_of = NAME.fullmatch
    nums = {}  # mode and time fields (checked octal by member_at) -> their values
    chunk = b""
    pos = end = 0
    base = 0
    misses = 0
    while True:
        if fast and end - pos < 512:
            more = read1(CHUNK)
            if pos < end:
                more = chunk[pos:] + more
            while 0 < len(more) < 512:
                piece = read1(CHUNK)
                if not piece:
                    break
                more += piece
            base += pos
            chunk, pos, end = more, 0, len(more)
        p = pos
        m = None
        if fast and end - p >= 512:
            r = member_at(chunk, p, end)
            if type(r) is int:
                chunk = chunk[p:] + take(r - (end - p))
                base += p
                pos = p = 0
                end = len(chunk)
                r = member_at(chunk, p, end) if end >= r else None
            if r is not None:
                q, nameb, size = r
                if nameb is None:
                    ok = name_of(chunk, q, q + 100) is not None and chunk.find(b"..", q, q + 100) < 0
                else:
                    ok = name_of(nameb) is not None and b".." not in nameb
                if ok and size < limit:
                    stop = q + 512 + size + (-size % 512)
                    if stop > end:
                        chunk = chunk[p:] + take(stop - end)
                        base += p
                        q -= p
                        stop -= p
                        pos = p = 0
                        end = len(chunk)
                    if stop <= end:
                        if nameb is None:
                            nameb = chunk[q : q + 100].rstrip(b"\0")
                        f = chunk[q + 100 : q + 108]
                        mode = nums.get(f)
                        if mode is None:
                            mode = _cached(nums, f)
                        if p == q:
                            f = chunk[q + 136 : q + 148]
                            mtime = nums.get(f)
                            if mtime is None:
                                mtime = _cached(nums, f)
                        else:
                            mtime = _mtime(chunk, p, q)
                        link = chunk[q + 157 : q + 257].split(b"\0", 1)[0].decode("utf-8", "surrogateescape") \
                            if chunk[q + 157] else ""
                        m = Member(nameb.decode("ascii"), chunk[q + 512 : q + 512 + size], REGULAR, mode, mtime, link,
                                   base + q, base + p)
                        pos = stop
                        reader.offset = base + stop
                        misses = 0
        if m is None:
            if fast:
                if end - p >= 512:
                    misses += 1
                    if misses >= GIVE_UP:
                        fast = False
                rest.head, rest.pos = chunk, pos
                reader.offset = base + pos
            m = next(general, None)
            if fast:
                chunk, pos, end = rest.head, rest.pos, len(rest.head)
                base = reader.offset - pos
                if reader.gpax:
                    fast = False
            if m is None:
                return
        yield m


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
    stream = reader.stream
    return len(stream.head) - stream.pos if type(stream) is _Rest else 0
