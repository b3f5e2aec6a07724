r"""Subsets by key: :func:`select_keys` and :func:`read_keys`.

    keys = read_keys("val-keys.txt")          # one key per line, '-' for stdin
    samples = select_keys(keys)(samples)      # keep those, in stream order
    samples = select_keys(keys, exclude=True)(samples)   # drop them

Memory is the set of keys, never the data: the stream passes through.

A key list has one key a line, in UTF-8.  So that any key comes back as it
was (tar names may hold newlines and bytes that are not UTF-8), a written
list (:func:`escape_key`, ``tarproc --failed-keys``) escapes a backslash as
``\\``, a newline as ``\n``, a carriage return as ``\r`` and a byte
that is not UTF-8 as ``\xHH``; :func:`read_keys` undoes exactly these, and
keeps any other backslash as it is (so plain lists made by hand or by other
tools read as they always did)."""

from ..errors import BadInput, UsageError


def read_keys(url, settings=None):  # settings: the reading commands
    """The set of keys listed in ``url`` (a path or URL, ``-`` for stdin),
    one per line; blank lines are ignored, a trailing ``\\r`` is dropped."""
    from ..sources.open import open_source

    keys = set()
    stream = open_source(url, decompress=False, settings=settings)
    try:
        for n, line in enumerate(stream, 1):
            key = unescape_key(line.rstrip(b"\n").rstrip(b"\r").decode("utf-8", "surrogateescape"))
            if key:
                keys.add(key)
    except UnicodeError as e:  # pragma: no cover - surrogateescape decodes anything
        raise BadInput(f"{url}: line {n}: {e}") from None
    finally:
        stream.close()
    return keys


def select_keys(keys, exclude=False, stats=None, on_missing=None):
    """Stage: keep the samples whose ``__key__`` is in ``keys`` (a set, or
    any iterable of ``str``), or with ``exclude`` drop them; stream order is
    kept.  Dropped samples are counted in ``stats.skipped``.
    ``on_missing(n, examples)`` is called when the input ends (read to its
    end, not stopped early) and ``n`` listed keys were never seen
    (``examples``: up to 3 of them, sorted)."""
    if isinstance(keys, str):
        raise UsageError("select_keys takes a collection of keys, not one string (use read_keys(FILE))")
    wanted = keys if isinstance(keys, (set, frozenset)) else set(keys)

    def stage(samples):
        found = set()  # at most the listed keys
        for sample in samples:
            key = sample.get("__key__")
            hit = key in wanted
            if hit and on_missing is not None:
                found.add(key)
            if hit != exclude:
                yield sample
            elif stats is not None:
                stats.skipped += 1
        if on_missing is not None and len(found) < len(wanted):
            import heapq

            on_missing(len(wanted) - len(found), heapq.nsmallest(3, (k for k in wanted if k not in found)))

    return stage


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


class KeyList:
    """A key list being written (``tarproc --failed-keys``): :meth:`add` a
    key per line as they come (nothing is held in memory), then
    :meth:`commit` publishes it under its name (a path, s3:// or gs://),
    or :meth:`abort` leaves no file under that name.  Written under a
    temporary name (see :mod:`tarproc.sinks.output`) until then."""

    def __init__(self, url, settings=None):
        from ..sinks.output import open_sink

        self.url = url
        self.count = 0
        self.committed = False
        self.sink = open_sink(url, compression=None, defer=False, settings=settings)

    def add(self, key):
        self.sink.write(escape_key(str(key)).encode("utf-8", "surrogateescape") + b"\n")
        self.count += 1

    def commit(self):
        self.sink.close()
        self.committed = True

    def abort(self):
        """Leave no list under its name (no effect once committed)."""
        if not self.committed:
            self.sink.abort()
