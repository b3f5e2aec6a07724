"""Text inputs as samples: one per line, per page, or per key."""

from ..errors import BadSample, UsageError
from ..core.rules import bad_key
from .resume import RETRIES, STALL_TIMEOUT


TEXT_MODES = ("lines", "pages", "keys")


def iter_text_samples(urls, mode="lines", stats=None, field="txt", stall=None, retries=RETRIES,
                      stall_timeout=STALL_TIMEOUT, settings=None):
    """Samples from text inputs, one per line (``lines``), per form-feed
    separated page (``pages``) or per line naming a key (``keys``).  The text
    goes in field ``txt``; keys are the running index (``000000000``, …), or
    for ``keys`` the line itself (blank lines are skipped).  ``retries``,
    ``stall_timeout``: resuming broken downloads (see
    :func:`~tarproc.sources.open.open_source`, as ``settings``)."""
    from .shardlist import expand_urls
    from .open import open_source

    if mode not in TEXT_MODES:
        raise UsageError(f"text mode must be one of {', '.join(TEXT_MODES)}, not {mode!r}")
    if isinstance(urls, str):
        urls = expand_urls([urls])
    sep = b"\f" if mode == "pages" else b"\n"
    index = 0
    for url in urls:
        stream = open_source(url, stall=stall, retries=retries, stall_timeout=stall_timeout, settings=settings)
        if stats is not None:
            stats.inputs += 1
        try:
            # a trailing blank page (the newline after the last form feed) is no page
            keep = (lambda rest: bool(rest.strip(b"\n"))) if mode == "pages" else None
            for piece in split_stream(stream, sep, keep_last=keep):
                sample = _text_sample(piece, mode, index, field, url)
                if sample is not None:
                    index += 1
                    if stats is not None:
                        stats.read += 1
                    yield sample
        finally:
            stream.close()


def split_stream(stream, sep, max_len=None, too_long=None, keep_last=None):
    """The pieces of a byte stream between separators ``sep`` (without it),
    read in chunks, in time linear in its length however long one piece is
    (the bytes of a piece that spans reads are joined once).  A last piece
    without a separator counts when not empty (and ``keep_last(piece)``
    agrees).  With ``max_len``, ``too_long(n)`` is called (it should raise)
    when piece ``n`` (from 1) grows past ``max_len`` bytes."""
    read = stream.read1 if hasattr(stream, "read1") else stream.read
    parts = []  # the start of the current piece, read so far
    size = 0
    n = 1
    while True:
        chunk = read(1 << 16)
        if not chunk:
            break
        pieces = chunk.split(sep)
        for piece in pieces[:-1]:
            if parts:
                parts.append(piece)
                piece = b"".join(parts)
                parts = []
                size = 0
            if max_len is not None and len(piece) > max_len:
                too_long(n)
            yield piece
            n += 1
        last = pieces[-1]
        if last:
            parts.append(last)
            size += len(last)
            if max_len is not None and size > max_len:
                too_long(n)
    if parts:
        rest = b"".join(parts)
        if keep_last is None or keep_last(rest):
            yield rest


def _text_sample(piece, mode, index, field, url):
    source = "stdin" if url == "-" else url
    if mode == "keys":
        key = piece.strip().decode("utf-8", "surrogateescape")
        if not key:
            return None
        why = bad_key(key)
        if why:
            raise BadSample(key, why, source)
        return {"__key__": key, field: key.encode("utf-8", "surrogateescape"), "__source__": source}
    if mode == "pages" and piece.startswith(b"\n"):
        piece = piece[1:]  # the newline that usually follows a form feed
    return {"__key__": f"{index:09d}", field: piece, "__source__": source}
