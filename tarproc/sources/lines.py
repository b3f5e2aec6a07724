"""Lines of text split into fields, one sample per line (``lines2tar``).

``url\tlabel`` lines with ``keys=["url", "cls"]`` become samples
``{"__key__": "000000000", "url": b"...", "cls": b"..."}``.  One of the keys
may be ``__key__``: that column is then the sample key.  The input is read in
chunks (never whole), so the first samples come out while later lines are
still arriving.
"""

from ..errors import BadInput, BadSample, UsageError
from ..core.rules import bad_field_name, bad_key, is_meta

#: Longest line accepted (bytes); a longer one is an error naming its line.
MAX_LINE = 256 << 20


def check_keys(keys):
    """The field names of ``keys`` (a list or a space-separated string),
    checked: each a writable field name or ``__key__``, none twice."""
    if isinstance(keys, str):
        keys = keys.split()
    keys = list(keys)
    if not keys:
        raise UsageError("no field names given (-k)")
    seen = set()
    for k in keys:
        if k != "__key__":
            why = bad_field_name(k) or (f"field name {k!r} is a metadata name" if is_meta(k) else None)
            if why:
                raise UsageError(f"-k: {why}")
        if k in seen:
            raise UsageError(f"-k: field {k!r} given twice")
        seen.add(k)
    if keys == ["__key__"]:
        raise UsageError("-k: __key__ alone gives samples without fields; add a field name")
    return keys


def check_keyformat(keyformat):
    """``keyformat`` (``"{:09d}"``, ``"line-{:06d}"``), checked by formatting 0."""
    from ..core.limits import check_widths

    check_widths(keyformat, "--keyformat")
    try:
        key = keyformat.format(0)
    except (IndexError, KeyError, ValueError, TypeError, AttributeError) as e:
        raise UsageError(f"--keyformat {keyformat!r}: {e} (use e.g. '{{:09d}}')") from None
    why = bad_key(key)
    if why:
        raise UsageError(f"--keyformat {keyformat!r}: {why}")
    return keyformat


def iter_line_samples(urls="-", keys=("txt",), separator="\t", keyformat="{:09d}", stats=None,
                      max_line=MAX_LINE, stall=None, settings=None):
    """Samples from the lines of text inputs, one per line.

    Each line (without its ``\\n``) is split on ``separator`` into exactly as
    many values as ``keys`` names; a line with another number of values is
    an error naming the input and the line number.  Values are the bytes of
    the line as they are (no decoding, a ``\\r`` stays).  The key is
    ``keyformat.format(index)`` (index from 0 over all inputs), or the value
    of the ``__key__`` column when ``keys`` has one.  ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall`) is called before a read that would
    block, so that output keeps pace with slow input."""
    from .open import open_source
    from .shardlist import expand_urls

    keys = check_keys(keys)
    check_keyformat(keyformat)
    if not separator:
        raise UsageError("the separator must not be empty")
    sep = separator.encode("utf-8")
    if isinstance(urls, str):
        urls = expand_urls([urls])
    index = 0
    for url in urls:
        source = "stdin" if url == "-" else url
        stream = open_source(url, stall=stall, settings=settings)  # (settings: the reading commands)
        if stats is not None:
            stats.inputs += 1
        try:
            for lineno, line in enumerate(_lines(stream, source, max_line), 1):
                values = line.split(sep)
                if len(values) != len(keys):
                    raise BadInput(f"{source}: line {lineno}: {len(values)} field{'s' if len(values) != 1 else ''}"
                                   f" separated by {separator!r}, expected {len(keys)} ({' '.join(keys)})")
                sample = dict(zip(keys, values))
                if "__key__" in sample:
                    key = sample["__key__"].decode("utf-8", "surrogateescape")
                    why = bad_key(key)
                    if why:
                        raise BadSample(key, f"line {lineno}: {why}", source)
                else:
                    key = keyformat.format(index)
                sample["__key__"] = key
                sample["__source__"] = source
                index += 1
                if stats is not None:
                    stats.read += 1
                yield sample
        finally:
            stream.close()


def _lines(stream, source, max_line):
    """The lines of a byte stream without their ``\\n``; a line longer than
    ``max_line`` is an error naming it."""
    from .text import split_stream

    def too_long(lineno):
        raise BadInput(f"{source}: line {lineno}: longer than {max_line} bytes")

    return split_stream(stream, b"\n", max_line, too_long)
