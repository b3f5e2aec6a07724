r"""Subsets by key: :func:`select_keys` and :func:`read_keys`.

    keys = read_keys("val-keys.txt")          # one key per line, '-' for stdin
    samples = select_keys(keys)(samples)      # keep those, in stream order
    samples = select_keys(keys, exclude=True)(samples)   # drop them

Memory is the set of keys, never the data: the stream passes through.

A key list has one key a line, in UTF-8.  So that any key comes back as it
was (tar names may hold newlines and bytes that are not UTF-8), a written
list (:func:`escape_key`, ``tarproc --failed-keys``: :class:`tarproc.sinks.keylist.KeyList`) escapes a backslash as
``\\``, a newline as ``\n``, a carriage return as ``\r`` and a byte
that is not UTF-8 as ``\xHH``; :func:`read_keys` undoes exactly these, and
keeps any other backslash as it is (so plain lists made by hand or by other
tools read as they always did)."""

from ..core.keylines import escape_key, unescape_key  # noqa: F401  (the line format, in core: read here, written by sinks/keylist)
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
