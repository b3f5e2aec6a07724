"""Reading and writing tar members: ustar, v7, GNU and pax. Nothing else.

This is a streaming codec.  :class:`TarReader` pulls 512-byte blocks from any
object with a ``read(n)`` method and yields :class:`Member` objects; it never
seeks, never allocates memory in proportion to a size that a header merely
claims, and turns every kind of damage into :class:`~tarproc.errors.BadArchive`
with the byte offset of the problem.  :class:`TarWriter` writes plain ustar
headers with fixed owner, mode and time, and a pax header only for what ustar
cannot hold, so the same members always give the same bytes.

Why not :mod:`tarfile`?  It spends ~49 µs per member copying (see
``bench/README.md``), stamps no reproducible defaults, and its stream mode
reports some damage as a silent end of archive.  The header layout is small
and fixed, so a direct codec is short and several times faster.
"""

from zlib import adler32

from ..errors import BadArchive, TarprocError
from .blob import Blob, Spooler, region
from .pax import parse_pax, pax_int, pax_name  # noqa: F401 (parse_pax: part of this module's API)
from .sparse import read_sparse
from .limits import quote

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
#: Largest special header (GNU long name/link, pax) we accept.
MAX_SPECIAL = 1 << 20
#: Member data is read in pieces of at most this size, so a lying size field
#: can never make us allocate more than this before the input runs dry.
READ_CHUNK = 16 << 20

REGULAR = "0"
DIRECTORY = "5"
SYMLINK = "2"
HARDLINK = "1"
_REGULAR_FLAGS = (b"0", b"\0", b"7")
_KNOWN_OTHER = {
    b"1": "1", b"2": "2", b"3": "3", b"4": "4", b"5": "5", b"6": "6",
    b"D": "D", b"V": "V", b"M": "M", b"N": "N", b"S": "S",
    b"A": "A",  # a Solaris ACL: metadata of the member after it, never a file (as bsdtar reads it)
}
#: Type flags whose entries carry no data, whatever their size field says.
_DATALESS = (b"1", b"2", b"3", b"4", b"5", b"6")
#: What a member of each type is called in reports (plural, as counted).
TYPE_NAMES = {
    "0": "regular files", "1": "hard links", "2": "symlinks", "3": "character devices",
    "4": "block devices", "5": "directories", "6": "FIFOs", "D": "GNU dump directories",
    "V": "volume labels", "M": "multi-volume continuations", "N": "old GNU long names",
    "S": "sparse files", "A": "Solaris ACLs",
}


class Member:
    """One tar entry.

    ``name`` is a ``str`` (bytes that are not UTF-8 are kept with
    ``surrogateescape``, so they round-trip); ``type`` is ``"0"`` for regular
    files, otherwise the tar type flag; ``data`` is the member's bytes for
    regular files (a :class:`~tarproc.core.blob.Blob` from the reader's
    spooler threshold on) and ``None`` otherwise; ``offset`` is where its
    header starts; ``start`` is where its first header block starts, counting
    the long-name and pax headers before it (the byte range of a member in an
    uncompressed tar is ``start`` to ``offset + 512 + size`` rounded up to 512).
    """

    __slots__ = ("name", "data", "type", "mode", "mtime", "linkname", "offset", "start")

    def __init__(self, name, data, type=REGULAR, mode=0o644, mtime=0, linkname="", offset=0, start=None):
        self.name = name
        self.data = data
        self.type = type
        self.mode = mode
        self.mtime = mtime
        self.linkname = linkname
        self.offset = offset
        self.start = offset if start is None else start

    @property
    def isfile(self):
        return self.type == REGULAR

    def __repr__(self):
        size = len(self.data) if self.data is not None else None
        return f"Member({self.name!r}, type={self.type!r}, size={size}, offset={self.offset})"


def _decode(raw):
    return raw.decode("utf-8", "surrogateescape")


def _cstr(field):
    end = field.find(b"\0")
    return field if end < 0 else field[:end]


#: Numeric fields already decoded (bytes -> int).  The same few mode, owner,
#: time and size fields repeat in nearly every header of a shard, so a
#: lookup replaces most parsing; bounded, and only valid fields get in.
_NUMBERS = {}
_NUMBERS_MAX = 1 << 14


def _number(field, what, source, offset):
    """Decode a numeric header field: octal text or GNU base-256."""
    value = _NUMBERS.get(field)
    if value is not None:
        return value
    value = _parse_number(field, what, source, offset)
    if len(_NUMBERS) < _NUMBERS_MAX:
        _NUMBERS[bytes(field)] = value
    return value


def _parse_number(field, what, source, offset):
    first = field[0]
    if first & 0x80:
        if first == 0xFF:
            return int.from_bytes(field, "big", signed=True)
        if first == 0x80:
            return int.from_bytes(field[1:], "big")
        raise BadArchive(source, offset, f"malformed base-256 {what} field {bytes(field)!r}")
    digits = _cstr(field).strip(b" ")
    if not digits:
        return 0
    if digits.translate(None, b"01234567"):
        raise BadArchive(source, offset, f"non-octal {what} field {bytes(field)!r}")
    return int(digits, 8)


def _header_sum(buf):
    """The checksum of a header block (bytes summed, the checksum field as
    spaces), 6x faster than ``sum()``: the low half of an Adler-32 is the
    byte sum + 1 while the sum stays below 65521 (256 bytes at most)."""
    return ((adler32(buf[:148]) & 0xFFFF) + (adler32(buf[156:412]) & 0xFFFF)
            + (adler32(buf[412:512]) & 0xFFFF) + 253)


def _pax_time_ok(value, source, offset, strict, warn):
    """Whether a pax ``mtime`` value is a number; when not, a warning (the
    header's own time holds, as GNU tar, bsdtar and tarfile read on), or
    with ``strict`` the error."""
    try:
        pax_int({"mtime": value}, "mtime", source, offset)
        return True
    except BadArchive as e:
        if strict:
            raise
        if warn is not None:
            warn(f"{e} (the header's time is used)")
        return False


def _checksum_ok(buf, stored):
    total = sum(buf) - sum(buf[148:156]) + 256
    if total == stored:
        return True
    # Some old writers summed signed chars.
    high = sum(1 for b in buf if b > 127) - sum(1 for b in buf[148:156] if b > 127)
    return total - 256 * high == stored


#: Members from this size on make the reader tune malloc (see _tune_malloc);
#: the fast paths (:mod:`tarproc.core.passthru`) read smaller ones only.
LARGE_MEMBER = 128 << 10
_malloc_tuned = False


def _tune_malloc():
    """Keep freed member buffers in the heap for reuse (glibc only).

    Each member's data is a fresh ``bytes``.  glibc serves big allocations
    with mmap and hands them back on free, or trims the heap top, so every
    new large member costs page faults (and zeroing) for all its pages: with
    members of varying sizes from 0.2 to 3 MB this was 21,600 minor faults
    for 333 MB, and 4,700 with these settings (bench/README.md).  Called once,
    the first time a large member appears, so small-member runs never pay
    for importing ctypes."""
    global _malloc_tuned
    _malloc_tuned = True
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: libc
    except (OSError, AttributeError):
        return  # not glibc: nothing to tune
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: the largest value glibc accepts
    mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD: keep up to 64 MB of freed heap


class _ReadAhead:
    """The input of a :class:`TarReader` after :meth:`TarReader.window`:
    the bytes read ahead and not yet used (``head[pos:]``), then ``stream``."""

    __slots__ = ("stream", "head", "pos")

    def __init__(self, stream):
        self.stream = stream
        self.head = b""
        self.pos = 0

    def read(self, n):
        head, pos = self.head, self.pos
        if pos + n <= len(head):
            self.pos = pos + n
            return head[pos : pos + n]
        part = head[pos:]
        self.head, self.pos = b"", 0
        more = self.stream.read(n - len(part))
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


class TarReader:
    """Iterate the members of a tar stream.

    ``stream`` needs only ``read(n)``.  ``source`` names the input in errors.
    With ``strict``, input that ends on a block boundary without the
    end-of-archive blocks is an error; otherwise ``truncated`` is set and
    ``warn(message)`` is called.  Data after an end-of-archive marker is read
    on (like ``tar -i``), so ``cat a.tar b.tar`` reads as one archive.

    Members of at least ``spooler.threshold`` bytes (a
    :class:`~tarproc.core.blob.Spooler`; ``None``: the default, 4 MiB)
    come as a :class:`~tarproc.core.blob.Blob`:
    a region of the input file when the stream offers one (``region_source``,
    a plain file opened by :func:`~tarproc.sources.open.open_source`), else
    a spool file written while the data arrives.  A GNU sparse member may
    expand to at most ``sparse_holes`` zero bytes (``None``: 1 GiB).

    A fast path that reads plain members itself
    (:mod:`tarproc.core.passthru`) asks for the input bytes with
    :meth:`window`, takes whole members from them and says how far it got
    with :meth:`advance`; the general parser (:meth:`members`) reads on from
    there, the bytes read ahead first.
    """

    def __init__(self, stream, source="-", strict=False, warn=None, spooler=None, sparse_holes=None):
        self.sparse_holes = sparse_holes
        self.stream = stream
        self._in = stream  # what the general parser reads: stream, or _ahead while it holds bytes
        self._ahead = None  # a _ReadAhead, made by the first window()
        self.source = source
        self.strict = strict
        self.warn = warn
        self.offset = 0
        self.truncated = False
        self.trailing = None  # offset of data ignored after the end-of-archive marker
        self.after_end = None  # offset of the first header read after a zero block (tarfile stops there)
        # the first member named twice, by a GNU long name and a different pax path: (offset, long
        # name, pax path); GNU tar and this reader take the pax path, tarfile, bsdtar and webdataset
        # the long name when it comes first: readers disagree on its name (tarcheck reports it)
        self.name_conflict = None
        self.gpax = {}  # global pax records in force (members() fills it)
        self.spooler = spooler if spooler is not None else Spooler()
        self._region = getattr(stream, "region_source", None)
        self._shared = {}
        self._blob_from = self.spooler.region_threshold if self._region is not None else self.spooler.threshold

    def __iter__(self):
        return self.members()

    @property
    def blob_from(self):
        """Members from this size on come as blobs (see the class doc)."""
        return self._blob_from

    def window(self, need=BLOCK, ahead=256 << 10):
        """``(buf, pos)``: the input from :attr:`offset` on is ``buf[pos:]``,
        then what is still unread; at least ``need`` bytes of it unless the
        input ends first (``None``: the stream has no ``read1``, so nothing
        is read ahead).  Up to ``ahead`` bytes are read at a time: what has
        arrived (``read1``), so output flows while input still arrives;
        past a header (``need`` > 512) exactly what is missing.  Call it
        between members only (before the first one, or after
        :meth:`members` gave one or :meth:`advance` was called)."""
        ra = self._ahead
        if ra is None:
            read1 = getattr(self.stream, "read1", None)
            if read1 is None:
                return None
            ra = self._ahead = _ReadAhead(self.stream)
        head, pos = ra.head, ra.pos
        have = len(head) - pos
        if have >= need:
            return head, pos
        if need <= BLOCK:
            read1 = self.stream.read1
            more = read1(ahead)
            while 0 < len(more) < need - have:  # a header cut by the buffer: one more read
                piece = read1(ahead)
                if not piece:
                    break
                more += piece
        else:
            more = self.stream.read(need - have)
        head = head[pos:] + more if have else more
        ra.head, ra.pos = head, 0
        self._in = ra
        return head, 0

    def advance(self, pos):
        """The caller took the bytes of :meth:`window`'s ``buf`` up to
        ``pos`` as whole members: :attr:`offset` moves there, and the general
        parser reads on from there."""
        ra = self._ahead
        self.offset += pos - ra.pos
        ra.pos = pos
        if pos >= len(ra.head):
            self._in = self.stream  # nothing left read ahead: the parser reads the input directly

    @property
    def read_ahead(self):
        """Bytes read from the stream and not used yet (data after the end
        of the archive, when the members have all been read)."""
        ra = self._ahead
        return len(ra.head) - ra.pos if ra is not None else 0

    def read_raw(self, n):
        """The next ``n`` bytes of the input (fewer at its end), for the
        parts of a member read outside this module (sparse maps)."""
        return self._in.read(n)

    def number(self, field, what, offset):
        """A numeric header field (octal text or GNU base-256) of the header
        at ``offset``; :class:`BadArchive` when it is neither."""
        return _number(bytes(field), what, self.source, offset)

    def fail(self, offset, problem, bound=None):
        """Raise the :class:`BadArchive` of ``problem`` at ``offset``
        (``bound``: the variable of the bound it went over)."""
        self._fail(offset, problem, bound=bound)

    def _fail(self, offset, problem, head=None, bound=None):
        if head is not None and offset == 0:  # the first header: say what the input is instead
            from .sniff import describe

            what = describe(head)
            if what:
                problem = f"not a tar archive (looks like {what})"
        raise BadArchive(self.source, offset, problem, bound)

    def _stop(self, offset, problem):
        """End of the input at ``offset`` with a warning (``strict``: an error)."""
        if self.strict:
            self._fail(offset, problem)
        if self.warn is not None:
            self.warn(f"{self.source}: offset {offset}: {problem}")
        self.offset = offset

    def _read_blob(self, size, offset, name):
        """The data of a large member as a :class:`Blob` (see the class doc)."""
        stream = self._in
        pad = -size % BLOCK
        if self._region is not None:
            fd, path = self._region
            import os

            pos = stream.tell()
            if os.fstat(fd).st_size >= pos + size + pad:
                stream.seek(size + pad, 1)
                return region(fd, path, pos, size, self._shared)
            if size < self.spooler.threshold:
                return None  # the file is too short: read it as bytes, for the usual error

        def fail(got):
            self._fail(offset, f"input ends inside member data of {name!r} ({got} of {size} bytes)")

        readinto = getattr(stream, "readinto", None)
        if readinto is None:
            def readinto(view, read=stream.read):
                data = read(len(view))
                view[: len(data)] = data
                return len(data)
        blob = self.spooler.spool(readinto, size, fail)
        if pad and len(stream.read(pad)) < pad:
            blob.close()
            self._fail(offset, f"input ends inside the padding after {name!r}")
        return blob

    def _read_data(self, size, offset, name, what="member data"):
        if size >= self._blob_from and what == "member data":
            blob = self._read_blob(size, offset, name)
            if blob is not None:
                return blob
        read = self._in.read
        if size >= LARGE_MEMBER and not _malloc_tuned:
            _tune_malloc()
        if size <= READ_CHUNK:
            data = read(size)
            if len(data) < size:
                self._fail(offset, f"input ends inside {what} of {name!r} ({len(data)} of {size} bytes)")
        else:
            parts = []
            got = 0
            while got < size:
                piece = read(min(READ_CHUNK, size - got))
                if not piece:
                    self._fail(offset, f"input ends inside {what} of {name!r} ({got} of {size} bytes)")
                parts.append(piece)
                got += len(piece)
            data = b"".join(parts)
        pad = -size % BLOCK
        if pad and len(read(pad)) < pad:
            self._fail(offset, f"input ends inside the padding after {name!r}")
        return data

    def _skip_data(self, size, offset, name):
        read = self._in.read
        left = size + (-size % BLOCK)
        while left:
            piece = read(min(left, 1 << 20))
            if not piece:
                self._fail(offset, f"input ends inside member data of {name!r}")
            left -= len(piece)

    def members(self):
        """Yield the members.  Between two members a caller may take whole
        members itself with :meth:`window` and :meth:`advance` (the fast
        paths of :mod:`tarproc.core.passthru` do): this reads on from there."""
        read = self._in.read
        source = self.source
        offset = self.offset
        zero_seen = False
        zero_end = eoa_end = -1  # where the last zero block / end-of-archive marker ends
        long_name = long_link = None
        pax = None
        gpax = self.gpax = {}
        pending_at = None  # offset of a special header still waiting for its member
        continued = False  # the next member continues a file from another volume (pax -M)
        first_at = None  # offset of the first of those special headers
        while True:
            buf = read(BLOCK)
            if type(buf) is not bytes:
                buf = bytes(buf)  # the numeric fields are looked up by value
            if len(buf) < BLOCK:
                if buf.strip(b"\0"):  # a cut in zero padding loses nothing
                    if zero_seen and offset == zero_end and pending_at is None:
                        # a short tail after the end-of-archive marker (GNU tar, bsdtar
                        # and tarfile stop at the marker and never read it); with
                        # strict, data after the marker is an error, as a whole block is
                        self.trailing = offset
                        return self._stop(offset, f"data after the end-of-archive marker ignored ({len(buf)} "
                                                  f"bytes, less than a block)")
                    self._fail(offset, f"input ends inside a header ({len(buf)} of 512 bytes)", buf)
                if pending_at is not None:
                    self._fail(pending_at, "input ends after a long-name or pax header, before its member")
                if not zero_seen and offset > 0:
                    self.truncated = True
                    return self._stop(offset, "input ends without the end-of-archive marker (cut off, or its "
                                              "writer failed? --strict makes this an error; in a pipeline, "
                                              "set -o pipefail)")
                self.offset = offset
                return
            if buf == ZERO_BLOCK:
                if pending_at is not None:
                    self._fail(offset, "end-of-archive block right after a long-name or pax header")
                zero_seen = True
                eoa_end = offset + BLOCK if zero_end == offset else eoa_end
                zero_end = offset = offset + BLOCK
                gpax.clear()  # no pax header survives an end marker (cat a.tar b.tar: b's names are b's)
                continued = False
                continue
            here = offset
            if zero_end == here and self.after_end is None:
                self.after_end = here
            try:
                stored = _number(buf[148:156], "checksum", source, here)
                bad = _header_sum(buf) != stored and not _checksum_ok(buf, stored)
            except BadArchive as e:
                bad = e.problem
            if bad:  # not a header: after an end-of-archive marker, ignored (as GNU tar, tarfile do)
                if here == eoa_end and not self.strict:
                    self.trailing = here
                    return self._stop(here, "data after the end-of-archive marker ignored (not a tar header)")
                self._fail(here, "bad header checksum (not a tar archive, or damaged)" if bad is True else bad, buf)
            size = _number(buf[124:136], "size", source, here)
            mode = _number(buf[100:108], "mode", source, here)
            if size < 0:
                self._fail(here, f"negative size {size}")
            flag = buf[156:157]
            offset = here + BLOCK + size + (-size % BLOCK)

            if flag == b"X":  # Solaris/old star extended header: pax 'x' (as GNU tar and tarfile read it)
                flag = b"x"
            if flag in (b"L", b"K", b"x", b"g"):
                if size > MAX_SPECIAL:
                    kind = "GNU long-name" if flag in (b"L", b"K") else "pax"
                    self._fail(here, f"{kind} header of {size} bytes is larger than the {MAX_SPECIAL} byte limit")
                data = self._read_data(size, here, _decode(_cstr(buf[0:100])), "header data")
                if pending_at is None:
                    first_at = here
                pending_at = here
                if flag == b"L":
                    if long_name is not None:
                        self._fail(here, "two GNU long-name headers in a row")
                    long_name = _cstr(data)
                elif flag == b"K":
                    if long_link is not None:
                        self._fail(here, "two GNU long-link headers in a row")
                    long_link = _cstr(data)
                elif flag == b"x":
                    if pax is not None:
                        self._fail(here, "two pax headers in a row")
                    pax = parse_pax(data, source, here)
                    if "GNU.volume.offset" in pax:
                        continued = True
                else:
                    # keep only what is used, so any number of g headers stays small and cheap
                    for k, v in parse_pax(data, source, here).items():
                        if not v and k in ("path", "linkpath", "size", "mtime"):
                            gpax.pop(k, None)  # POSIX: an empty value deletes the keyword
                        elif k == "mtime" and not _pax_time_ok(v, source, here, self.strict, self.warn):
                            gpax.pop(k, None)  # (warned once here, not at every member it would apply to)
                        elif k in ("path", "linkpath", "size", "mtime"):
                            gpax[k] = v
                        elif k.startswith("GNU.sparse."):
                            gpax["GNU.sparse.global"] = v
                        elif k == "GNU.volume.offset":  # GNU tar -M --format=posix: a new volume
                            continued = True  # whose first member is the rest of a file
                    pending_at = None
                continue

            if buf[257:263] == b"ustar\0":
                prefix = _cstr(buf[345:500])
                rawname = _cstr(buf[0:100])
                if prefix:
                    rawname = prefix + b"/" + rawname
            else:
                rawname = _cstr(buf[0:100])
            name = _decode(long_name) if long_name is not None else _decode(rawname)
            if long_link is not None:
                linkname = _decode(long_link)
            else:
                linkname = _decode(_cstr(buf[157:257])) if buf[157] else ""
            if gpax or pax:
                records = dict(gpax)
                if pax:
                    records.update(pax)
                    for k, v in pax.items():
                        if not v:  # POSIX: an empty value deletes the keyword (the header's own field holds)
                            del records[k]
                if "path" in records:
                    name = pax_name(records, "path", source, here)
                    if long_name is not None and self.name_conflict is None and name != _decode(long_name):
                        self.name_conflict = (first_at, _decode(long_name), name)
                if "linkpath" in records:
                    linkname = pax_name(records, "linkpath", source, here)
                if "size" in records:
                    size = pax_int(records, "size", source, here)
                    if size < 0:
                        self._fail(here, f"negative pax size {size}")
                    offset = here + BLOCK + size + (-size % BLOCK)
                if "mtime" in records and _pax_time_ok(records["mtime"], source, here, self.strict, self.warn):
                    mtime = pax_int(records, "mtime", source, here)
                else:
                    mtime = _number(buf[136:148], "mtime", source, here)
                if any(k.startswith("GNU.sparse.") for k in records):
                    flag = b"S"
            else:
                records = None
                mtime = _number(buf[136:148], "mtime", source, here)
            long_name = long_link = pax = None
            start = here if pending_at is None else first_at
            pending_at = None

            kind = REGULAR if flag in _REGULAR_FLAGS else _KNOWN_OTHER.get(flag, REGULAR)  # POSIX: unknown
            if kind == REGULAR:
                if continued:  # GNU tar names it GNUFileParts/NAME.N: a fragment, never a whole file
                    kind = "M"
                elif name[-1:] == "/" and flag != b"7":  # pre-POSIX directory: a regular entry ending in /
                    kind = DIRECTORY
            continued = False
            if kind == "M" and self.warn is not None:
                self.warn(f"{source}: offset {here}: {quote(name)}: skipped, the rest of a file begun in another "
                          f"volume of a multi-volume archive")
            if kind == REGULAR:  # flags are regular files
                try:
                    data = self._read_data(size, here, name)
                except TarprocError as e:
                    e.member = name  # its data failed: the samples before it are whole (grouping gives them)
                    raise
                m = Member(name, data, REGULAR, mode, mtime, linkname, here, start)
            elif kind == "S":  # GNU sparse: the file it stands for (core/sparse.py)
                name, data, extra = read_sparse(self, buf, records, size, here, name)
                offset += extra
                m = Member(name, data, REGULAR, mode, mtime, linkname, here, start)
            else:
                if flag in _DATALESS:
                    # links, devices, directories and FIFOs carry no data,
                    # whatever their size field says (as tarfile and GNU tar);
                    # any other entry (an unknown type named like a directory,
                    # a pre-POSIX one) is followed by its size in data
                    offset = here + BLOCK
                elif size:
                    self._skip_data(size, here, name)
                m = Member(name, None, kind, mode, mtime, linkname, here, start)
            self.offset = offset
            yield m
            offset = self.offset  # a fast path may have taken members since (advance)
            read = self._in.read


def read_members(stream, source="-", strict=False, warn=None):
    """Yield the :class:`Member` objects of the tar stream ``stream``."""
    return TarReader(stream, source, strict, warn).members()


# ---------------------------------------------------------------- writing


def _octal_field(value, width):
    return b"%0*o\0" % (width - 1, value)


#: Members whose headers :meth:`TarWriter.write_rows` makes at once (their
#: headers: this many blocks of 512 bytes in memory).
ROWS_MEMBERS = 16384
_SIZE_SHIFTS = tuple(range(30, -1, -3))  # the 11 octal digits of a size, most significant first
_CHK_SHIFTS = tuple(range(15, -1, -3))  # the 6 of a checksum
_PADS = [bytes(p) for p in range(512)]  # the padding of each length


def _pax_record(key, value):
    """One pax record; its length field counts itself."""
    body = b" " + key.encode() + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    return str(length).encode() + body


_MAX_OCTAL_SIZE = 0o77777777777


def _is_utf8(nameb):
    try:
        nameb.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _ustar_split(nameb):
    """``(prefix, name)`` for the ustar fields of a name, or ``(b"", None)``
    when they cannot hold it.  The prefix is never empty and never ends in
    ``/`` (bsdtar joins such a prefix to the name without adding one: it
    read ``x//n`` as ``x/n``); the name part is never empty."""
    if len(nameb) <= 100:
        return b"", nameb
    cut = nameb.find(b"/", len(nameb) - 101)  # the longest name part that fits
    while 0 < cut <= 155:
        if nameb[cut - 1] != 0x2F and cut < len(nameb) - 1:
            return nameb[:cut], nameb[cut + 1 :]
        cut = nameb.find(b"/", cut + 1)
    return b"", None


def member_size(name, size):
    """Bytes :class:`TarWriter` writes for a member named ``name`` of
    ``size`` bytes (header blocks, data, padding; the same whatever the
    header defaults)."""
    return _SIZER.header_size(name.encode("utf-8", "surrogateescape"), size) + size + (-size % BLOCK)


class TarWriter:
    """Write tar members to ``stream`` (anything with ``write``).

    Headers are ustar with a fixed ``mode``, ``mtime``, owner and group, so the
    same members give the same bytes.  A pax header is added only for what
    ustar cannot hold: names that do not fit the 100+155 byte name/prefix
    split (:func:`_ustar_split`) and UTF-8 names beyond ASCII, and sizes of
    8 GiB and more.  The ustar name fields always hold the name's own bytes
    (its last 100 when it does not fit), as GNU tar writes them, for
    readers that take only those fields (wids).  ``close()`` writes the
    end-of-archive marker (two zero blocks) but does not close ``stream``.
    """

    def __init__(self, stream, mode=0o644, mtime=0, uid=0, gid=0, uname="", gname=""):
        self.stream = stream
        self.bytes_written = 0
        self.members_written = 0
        self._pre = _octal_field(mode, 8) + _octal_field(uid, 8) + _octal_field(gid, 8)
        self._mtime = _octal_field(mtime, 12)
        self._tail = (
            b"0"
            + bytes(100)
            + b"ustar\x0000"
            + uname.encode()[:31].ljust(32, b"\0")
            + gname.encode()[:31].ljust(32, b"\0")
            + _octal_field(0, 8)
            + _octal_field(0, 8)
        )  # bytes 156..345; the prefix (155) and padding (12) follow
        self._const = sum(self._pre) + sum(self._mtime) + 8 * 32 + sum(self._tail)
        self._zeros = bytes(BLOCK)
        self._end = self._tail + bytes(167)  # bytes 156..512 of a plain header
        self._sizes = {}  # size -> (bytes 100..148 of its header, their sum beyond _const)
        self.canonical = (mode, mtime, uid, gid, uname, gname) == (0o644, 0, 0, 0, "", "")

    def plain_header(self, nameb, size):
        """The header block this writer writes for a member named ``nameb``
        (bytes, ASCII, at most 100 of them) of ``size`` bytes."""
        if len(nameb) > 100 or not nameb.isascii() or size > _MAX_OCTAL_SIZE:
            raise ValueError("not a plain member: a name of at most 100 ASCII bytes, a size below 8 GiB")
        return self._header(nameb, size)

    def write_raw(self, pieces, members):
        """Write ``pieces`` (bytes) as they are: ``members`` whole members
        as this writer writes them (a sample's bytes copied as read,
        :class:`~tarproc.core.passthru.RawSample`); counted as written."""
        w = self.stream.write
        for piece in pieces:
            w(piece)
            self.bytes_written += len(piece)
        self.members_written += members

    def _header(self, nameb, size, prefix=b"", flag=None):
        sizef = _octal_field(size, 12) if size <= _MAX_OCTAL_SIZE else _octal_field(0, 12)
        tail = self._tail if flag is None else flag + self._tail[1:]
        chk = self._const + sum(nameb) + sum(sizef) + sum(prefix)
        if flag is not None:
            chk += flag[0] - 0x30
        return b"".join((
            nameb, bytes(100 - len(nameb)), self._pre, sizef, self._mtime,
            b"%06o\0 " % chk, tail, prefix, bytes(167 - len(prefix)),
        ))

    def _plain(self, nameb, size):
        """The bytes of ``self._header(nameb, size)`` for a plain member (a
        name of at most 100 ASCII bytes, a size below 8 GiB), the size part
        cached; ``None`` for any other."""
        if len(nameb) > 100 or size > _MAX_OCTAL_SIZE or not nameb.isascii():
            return None
        mid = self._sizes.get(size)
        if mid is None:
            sizef = _octal_field(size, 12)
            mid = (self._pre + sizef + self._mtime, sum(sizef))
            if len(self._sizes) < 4096:
                self._sizes[size] = mid
        return b"".join((nameb, bytes(100 - len(nameb)), mid[0],
                         b"%06o\0 " % (self._const + sum(nameb) + mid[1]), self._end))

    def write_members(self, names, datas):
        """Write members ``names[i]`` (``str``) holding ``datas[i]`` (bytes-like
        or a :class:`~tarproc.core.blob.Blob`): the bytes of :meth:`write` one
        by one, in fewer calls: gathered into one ``write_pieces`` when the
        stream has it (a :class:`~tarproc.sinks.output.Sink`), the data not
        copied; else headers, padding and members up to 64 KiB joined."""
        out = []
        add = out.append
        gather = getattr(self.stream, "write_pieces", None)
        w = self.stream.write
        zeros = self._zeros
        plain = self._plain
        written = 0
        for name, data in zip(names, datas):
            nameb = name.encode("utf-8", "surrogateescape")
            size = len(data)
            header = plain(nameb, size) or self._slow_header(nameb, size)
            add(header)
            if type(data) is Blob:
                if gather is not None:
                    gather(out)
                else:
                    w(b"".join(out))
                out = []
                add = out.append
                data.copy_to(self.stream)
            elif gather is None and size > 65536:
                w(b"".join(out))
                out = []
                add = out.append
                w(data)
            else:
                add(data)
            pad = -size % BLOCK
            if pad:
                add(zeros[:pad])
            written += len(header) + size + pad
        self.members_written += len(names)
        if out:
            if gather is not None:
                gather(out)
            else:
                w(b"".join(out))
        self.bytes_written += written

    def write_rows(self, keys, suffixes, columns):
        """Write, row by row, a member ``keys[r] + suffixes[j]`` holding
        ``columns[j][r]`` (bytes-like; ``None``: no member): the bytes
        :meth:`write_members` writes for those names and data.  When every
        name is plain (keys of one length, ASCII, names of at most 100 bytes)
        and no datum is a :class:`~tarproc.core.blob.Blob`, the headers of
        :data:`ROWS_MEMBERS` members at a time are made at once with numpy
        and the data gathered uncopied: no Python work per member beyond a
        list entry."""
        n = len(keys)
        if not n:
            return
        width = len(keys[0])
        if (not all(type(k) is str and len(k) == width for k in keys)
                or width + max(map(len, suffixes), default=0) > 100
                or not "".join(suffixes).isascii() or not "".join(keys).isascii()
                or any(Blob in map(type, col) for col in columns)):
            names, datas = [], []
            for row, key in enumerate(keys):
                for suffix, col in zip(suffixes, columns):
                    if col[row] is not None:
                        names.append(key + suffix)
                        datas.append(col[row])
            self.write_members(names, datas)
            return
        step = max(1, ROWS_MEMBERS // max(1, len(columns)))
        for start in range(0, n, step):
            self._plain_rows(keys[start:start + step], suffixes, [col[start:start + step] for col in columns])

    def _plain_rows(self, keys, suffixes, columns):
        import itertools

        import numpy as np

        n, m = len(keys), len(columns)
        width = len(keys[0])
        nulls = [None in col for col in columns]
        sizes = np.array([list(map(len, col)) if not null else [0 if v is None else len(v) for v in col]
                          for col, null in zip(columns, nulls)], dtype=np.int64).T.reshape(n, m)
        if m and int(sizes.max(initial=0)) > _MAX_OCTAL_SIZE:
            names = [k + s for k in keys for s in suffixes]
            datas = [v for row in zip(*columns) for v in row]
            keep = [v is not None for v in datas]
            self.write_members(list(itertools.compress(names, keep)), list(itertools.compress(datas, keep)))
            return
        head = np.empty((n, m, BLOCK), dtype=np.uint8)
        for j, suffix in enumerate(suffixes):  # the header's constant bytes
            head[:, j, :] = np.frombuffer(bytes(width) + suffix.encode().ljust(100 - width, b"\0") + self._pre
                                          + bytes(12) + self._mtime + bytes(8) + self._end, dtype=np.uint8)
        key_bytes = np.frombuffer("".join(keys).encode(), dtype=np.uint8).reshape(n, width)
        head[:, :, :width] = key_bytes[:, None, :]
        digits = ((sizes[:, :, None] >> _SIZE_SHIFTS) & 7 | 0x30).astype(np.uint8)
        head[:, :, 124:135] = digits
        head[:, :, 135] = 0
        # the checksum: the constant bytes (the field as spaces), the key's and the size's
        chk = (np.array([self._const + sum(suffix.encode()) for suffix in suffixes], dtype=np.int64)
               + key_bytes.sum(axis=1, dtype=np.int64)[:, None] + digits.sum(axis=2, dtype=np.int64))
        head[:, :, 148:154] = (chk[:, :, None] >> _CHK_SHIFTS) & 7 | 0x30
        head[:, :, 154] = 0
        head[:, :, 155] = 32
        pads = -sizes % BLOCK
        view = memoryview(head.reshape(-1))  # (the headers in place: no copy)
        headers = [view[i:i + BLOCK] for i in range(0, n * m * BLOCK, BLOCK)]
        datas = itertools.chain.from_iterable(zip(*columns))
        zeros = _PADS
        padding = map(zeros.__getitem__, pads.ravel().tolist())
        triples = zip(headers, datas, padding)
        if any(nulls):
            present = [v is not None for row in zip(*columns) for v in row]
            triples = itertools.compress(triples, present)
            count = sum(present)
            total = int((sizes + pads).sum()) + count * BLOCK
        else:
            count = n * m
            total = int((sizes + pads).sum()) + count * BLOCK
        pieces = list(itertools.chain.from_iterable(triples))
        gather = getattr(self.stream, "write_pieces", None)
        if gather is not None:
            gather(pieces)
        else:
            self.stream.write(b"".join(pieces))
        self.members_written += count
        self.bytes_written += total

    def write(self, name, data):
        """Write one regular-file member named ``name`` (``str``) holding ``data``
        (``bytes``, or a :class:`~tarproc.core.blob.Blob`, copied in chunks)."""
        nameb = name.encode("utf-8", "surrogateescape")
        size = len(data)
        w = self.stream.write
        header = self._plain(nameb, size)
        if header is not None:
            if size <= 8192 and type(data) is bytes:
                # a small member in one write: header, data and padding
                pad = -size % BLOCK
                w(b"".join((header, data, self._zeros[:pad])) if pad else header + data)
                self.bytes_written += BLOCK + size + pad
                self.members_written += 1
                return
        else:
            header = self._slow_header(nameb, size)
        w(header)
        if type(data) is Blob:
            data.copy_to(self.stream)
        else:
            w(data)
        pad = -size % BLOCK
        if pad:
            w(self._zeros[:pad])
        self.bytes_written += len(header) + size + pad
        self.members_written += 1

    def header_size(self, nameb, size):
        """Bytes of the header blocks written for a member named ``nameb``
        (bytes) of ``size`` bytes: 512, or more with a pax header."""
        if len(nameb) <= 100 and size <= _MAX_OCTAL_SIZE and nameb.isascii():
            return BLOCK
        return len(self._slow_header(nameb, size))

    def _slow_header(self, nameb, size):
        records = []
        prefix, short = _ustar_split(nameb)
        if short is None:  # ustar cannot hold it: a pax path, and its tail in the name field
            utf8 = _is_utf8(nameb)
            if not utf8:  # pax path values are UTF-8 (GNU tar warns about hdrcharset, and reads it)
                records.append(_pax_record("hdrcharset", b"BINARY"))
            records.append(_pax_record("path", nameb))
            short = nameb[-100:]
            while short[:1] and 0x80 <= short[0] < 0xC0:  # from a character boundary
                short = short[1:]
            prefix = b""
        elif not nameb.isascii() and _is_utf8(nameb):
            # as GNU tar: a pax path, and the name's own bytes in the ustar
            # fields (for readers that take only those: wids); a name that
            # is not UTF-8 goes only there, as its bytes
            records.append(_pax_record("path", nameb))
        if size > _MAX_OCTAL_SIZE:
            records.append(_pax_record("size", str(size).encode()))
        header = self._header(short, size, prefix)
        if not records:
            return header
        body = b"".join(records)
        pax = self._header(b"././@PaxHeader", len(body), flag=b"x")
        return pax + body + bytes(-len(body) % BLOCK) + header

    def close(self):
        """Write the end-of-archive marker (does not close the stream)."""
        self.stream.write(bytes(2 * BLOCK))
        self.bytes_written += 2 * BLOCK


_SIZER = TarWriter(None)  # (member_size: header sizes do not depend on the defaults)
