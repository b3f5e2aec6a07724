"""GNU sparse members, read back as the files they stand for.

``tar --sparse`` (GNU tar, bsdtar) stores a file with holes as its data
regions plus a map of where they go.  The reader gives such a member as a
regular file with its full contents, holes as zero bytes, as GNU tar, bsdtar
and Python's ``tarfile`` (hence webdataset) extract it.  Formats read:

- old GNU (type flag ``S``, ``--format=gnu``/``oldgnu``): a map of four
  entries in the header, more in extension blocks that follow it;
- pax 0.0 (GNU tar 1.14/1.15: ``GNU.sparse.offset``/``GNU.sparse.numbytes``
  records repeated, one pair per map entry, which
  :func:`~tarproc.core.pax.parse_pax` gathers into ``GNU.sparse.map``);
- pax 0.1 (``GNU.sparse.map``, ``GNU.sparse.size``, ``GNU.sparse.name``);
- pax 1.0 (``GNU.sparse.major=1``: the map is a text block in front of the
  data; the real name and size in ``GNU.sparse.name``/``realsize``).

Any map that is out of
order, overlapping, larger than the data stored, or whose holes add up to
more than :data:`~tarproc.core.limits.SPARSE_HOLES` (a small shard that
claims a terabyte of zeros would otherwise fill the disk).
"""

from . import limits

BLOCK = 512
#: Most entries of a sparse map.
MAX_ENTRIES = 1 << 16
_ZEROS = bytes(1 << 20)


def read_sparse(reader, buf, records, size, here, name):
    """``(name, data, extra)`` of a sparse member whose header ``buf`` (at
    offset ``here``) has just been read from ``reader`` (a
    :class:`~tarproc.core.tario.TarReader`); ``records`` its pax records
    (or ``None``), ``size`` its stored size.  ``extra``: bytes read beyond
    ``size`` and its padding (old GNU extension blocks)."""
    read = reader.read_raw

    def fail(problem, bound=None):
        reader.fail(here, f"sparse member {limits.quote(name)}: {problem}", bound)

    def num(field, what):
        return reader.number(field, what, here)

    extra = 0
    stored = size  # the data bytes after the map
    records = records or {}
    if "GNU.sparse.major" in records or "GNU.sparse.map" in records or "GNU.sparse.size" in records \
            or "GNU.sparse.realsize" in records:
        if "GNU.sparse.name" in records:
            name = records["GNU.sparse.name"].decode("utf-8", "surrogateescape")
            if "\0" in name:
                fail("NUL byte in GNU.sparse.name")
        real = records.get("GNU.sparse.realsize", records.get("GNU.sparse.size"))
        if real is None or not real.isdigit() or len(real) > 20:
            fail("missing or bad GNU.sparse.realsize")
        realsize = int(real)
        if records.get("GNU.sparse.major") == b"1":
            entries, used = _map_from_data(read, size, fail)
            stored = size - used
        elif "GNU.sparse.map" in records:
            text = records["GNU.sparse.map"]
            parts = text.split(b",") if text else []
            if len(parts) % 2 or not all(p.isdigit() and len(p) <= 20 for p in parts) \
                    or len(parts) > 2 * MAX_ENTRIES:
                fail("bad GNU.sparse.map")
            nums = [int(p) for p in parts]
            entries = list(zip(nums[0::2], nums[1::2]))
        else:
            fail("no sparse map (GNU.sparse.map, GNU.sparse.offset/numbytes, or GNU.sparse.major=1)")
    else:  # old GNU: the map in the header, then in extension blocks
        entries = []

        def take(block, start, count):
            for i in range(count):
                at = start + 24 * i
                if not block[at : at + 24].strip(b"\0"):
                    return
                entries.append((num(block[at : at + 12], "sparse offset"),
                                num(block[at + 12 : at + 24], "sparse size")))

        take(buf, 386, 4)
        more = buf[482]
        realsize = num(buf[483:495], "sparse real size")
        while more:
            block = read(BLOCK)
            if len(block) < BLOCK:
                fail("input ends inside its extension headers")
            extra += BLOCK
            take(block, 0, 21)
            more = block[504]
            if len(entries) > MAX_ENTRIES:
                fail(f"more than {MAX_ENTRIES} map entries")

    pos = total = 0
    for off, n in entries:
        if off < pos or n < 0 or off + n > realsize:
            fail("its map is out of order, overlaps or runs past its size")
        pos = off + n
        total += n
    if total > stored:
        fail(f"its map holds {total} bytes, more than the {stored} stored")
    holes = getattr(reader, "sparse_holes", None) or limits.SPARSE_HOLES  # (TarReader's bound)
    if realsize - total > holes:
        fail(f"{realsize - total} bytes of holes, over the {holes} byte limit "
             f"(TARPROC_SPARSE_HOLES)", "TARPROC_SPARSE_HOLES")
    pad = stored - total + (-size % BLOCK)  # stored bytes the map does not use, and the padding

    def pieces():
        at = 0
        for off, n in entries:
            while at < off:
                k = min(off - at, len(_ZEROS))
                yield memoryview(_ZEROS)[:k]
                at += k
            left = n
            while left:
                piece = read(min(left, 1 << 20))
                if not piece:
                    fail("input ends inside its data")
                yield piece
                left -= len(piece)
            at = off + n
        while at < realsize:
            k = min(realsize - at, len(_ZEROS))
            yield memoryview(_ZEROS)[:k]
            at += k

    gen = pieces()
    spooler = reader.spooler
    if realsize < spooler.threshold:
        data = b"".join(bytes(p) for p in gen)
    else:
        pending = [b""]

        def read_into(view):
            while not pending[0]:
                p = next(gen, None)
                if p is None:
                    return 0
                pending[0] = memoryview(p)
            p = pending[0]
            n = min(len(p), len(view))
            view[:n] = p[:n]
            pending[0] = p[n:]
            return n

        data = spooler.spool(read_into, realsize, lambda got: fail("input ends inside its data"))
    left = pad
    while left:
        piece = read(min(left, 1 << 20))
        if not piece:
            fail("input ends inside its data")
        left -= len(piece)
    return name, data, extra


def _map_from_data(read, size, fail):
    """The map of a pax 1.0 sparse member, read from the front of its data:
    decimal lines (the number of entries, then offset and size of each),
    padded to a block.  Returns (entries, bytes used)."""
    text = b""
    used = 0
    numbers = []
    count = None
    while count is None or len(numbers) < 2 * count:
        if used >= min(size, 1 << 20):
            fail("its map is longer than its data or 1 MiB")
        block = read(BLOCK)
        if len(block) < BLOCK:
            fail("input ends inside its map")
        used += BLOCK
        text += block
        lines = text.split(b"\n")
        text = lines.pop()
        for line in lines:
            if not line.isdigit() or len(line) > 20:
                fail("bad number in its map")
            if count is None:
                count = int(line)
                if count > MAX_ENTRIES:
                    fail(f"more than {MAX_ENTRIES} map entries")
            else:
                numbers.append(int(line))
    numbers = numbers[: 2 * count]
    return list(zip(numbers[0::2], numbers[1::2])), used
