r"""The line format of a key list: one key a line, in UTF-8, with a
backslash written ``\\``, a newline ``\n``, a carriage return ``\r`` and a
byte that is not UTF-8 ``\xHH`` (:func:`escape_key`); :func:`unescape_key`
undoes exactly these and keeps any other backslash as it is.  Read by
:func:`tarproc.stages.keys.read_keys`, written by
:class:`tarproc.sinks.keylist.KeyList`."""


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}


def escape_key(key):
    """``key`` as one line of a key list (without the newline; see the
    module doc): ``str`` that is plain UTF-8."""
    if not any(c in key for c in "\\\n\r") and key.isprintable() and key.isascii():
        return key
    out = []
    for c in key:
        e = _ESCAPES.get(c)
        if e is not None:
            out.append(e)
        elif "\udc80" <= c <= "\udcff":  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        else:
            out.append(c)
    return "".join(out)


def unescape_key(text):
    """The key of one line of a key list (see :func:`escape_key`)."""
    if "\\" not in text:
        return text
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            d = text[i + 1]
            if d == "\\":
                out.append("\\")
                i += 2
                continue
            if d == "n" or d == "r":
                out.append("\n" if d == "n" else "\r")
                i += 2
                continue
            if d == "x" and i + 3 < n and _is_hex(text[i + 2 : i + 4]):
                b = int(text[i + 2 : i + 4], 16)
                out.append(chr(0xDC00 + b) if b >= 0x80 else chr(b))
                i += 4
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _is_hex(two):
    return len(two) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in two)
