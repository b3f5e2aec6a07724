"""pax extended headers (POSIX.1-2001): parsing their records, and the
values the tar reader (:mod:`tarproc.core.tario`) takes from them."""

from ..errors import BadArchive


def _decode(raw):
    return raw.decode("utf-8", "surrogateescape")


def parse_pax(data, source="-", offset=0):
    """Parse pax extended-header records (``"%d %s=%s\\n"``) into a dict of
    ``str`` keyword to ``bytes`` value.  Linear in the size of ``data``; every
    malformation raises :class:`BadArchive`."""
    records = {}
    sparse = []  # pax sparse 0.0: GNU.sparse.offset/numbytes pairs, repeated
    pos = 0
    end = len(data)
    while pos < end:
        if data[pos] == 0 and not data[pos:].strip(b"\0"):
            break  # NUL padding after the last record
        space = data.find(b" ", pos, min(end, pos + 21))
        if space < 0:
            raise BadArchive(source, offset, f"malformed pax record at byte {pos}: no length field")
        digits = data[pos:space]
        if not digits.isdigit():
            raise BadArchive(source, offset, f"malformed pax record at byte {pos}: bad length {bytes(digits[:20])!r}")
        length = int(digits)
        if length < 5:
            raise BadArchive(source, offset, f"malformed pax record at byte {pos}: length {length} is too small")
        if pos + length > end:
            raise BadArchive(source, offset, f"malformed pax record at byte {pos}: length {length} overruns the header")
        if data[pos + length - 1] != 0x0A:
            raise BadArchive(source, offset, f"malformed pax record at byte {pos}: no newline at its end")
        body = data[space + 1 : pos + length - 1]
        eq = body.find(b"=")
        if eq <= 0:
            raise BadArchive(source, offset, f"malformed pax record at byte {pos}: no keyword=value")
        key = _decode(body[:eq])
        value = bytes(body[eq + 1 :])
        if key in ("GNU.sparse.offset", "GNU.sparse.numbytes"):
            # the one keyword POSIX lets repeat with meaning: each pair is a
            # map entry (GNU tar 1.14/1.15), kept in order as GNU.sparse.map
            if (key == "GNU.sparse.offset") != (len(sparse) % 2 == 0):
                raise BadArchive(source, offset, f"malformed pax record at byte {pos}: {key} out of turn "
                                                 f"(GNU.sparse.offset and numbytes come in pairs)")
            sparse.append(value)
        records[key] = value
        pos += length
    if sparse:
        if len(sparse) % 2:
            raise BadArchive(source, offset, "pax sparse map: a GNU.sparse.offset without its numbytes")
        records.setdefault("GNU.sparse.map", b",".join(sparse))
    return records


def pax_int(records, key, source, offset):
    """The integer value of the pax record ``key`` (``mtime``: its whole
    seconds); :class:`BadArchive` when it is not one."""
    value = records[key]
    text = value.split(b".", 1)[0] if key == "mtime" else value
    if text.startswith(b"-"):
        text = text[1:]
        sign = -1
    else:
        sign = 1
    if not text.isdigit() or len(text) > 30:
        raise BadArchive(source, offset, f"bad pax {key} value {value[:40]!r}")
    return sign * int(text)


def pax_name(records, key, source, offset):
    """The name in the pax record ``key`` (``path``, ``linkpath``) as a
    ``str``; :class:`BadArchive` when it holds a NUL byte."""
    value = records[key]
    if b"\0" in value:
        raise BadArchive(source, offset, f"NUL byte in pax {key}")
    return _decode(value)
