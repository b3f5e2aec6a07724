"""Text inputs as samples: one per line, per page, or per key."""

from ..errors import BadSample, UsageError
from ..core.rules import bad_key


TEXT_MODES = ("lines", "pages", "keys")


def iter_text_samples(urls, mode="lines", stats=None, field="txt", stall=None):
    """Samples from text inputs, one per line (``lines``), per form-feed
    separated page (``pages``) or per line naming a key (``keys``).  The text
    goes in field ``txt``; keys are the running index (``000000000``, …), or
    for ``keys`` the line itself (blank lines are skipped)."""
    from .shardlist import expand_urls
    from .open import open_source

    if mode not in TEXT_MODES:
        raise UsageError(f"text mode must be one of {', '.join(TEXT_MODES)}, not {mode!r}")
    if isinstance(urls, str):
        urls = expand_urls([urls])
    sep = b"\f" if mode == "pages" else b"\n"
    index = 0
    for url in urls:
        stream = open_source(url, stall=stall)
        if stats is not None:
            stats.inputs += 1
        try:
            for piece in _pieces(stream, sep, mode):
                sample = _text_sample(piece, mode, index, field, url)
                if sample is not None:
                    index += 1
                    if stats is not None:
                        stats.read += 1
                    yield sample
        finally:
            stream.close()


def _pieces(stream, sep, mode):
    """The pieces of a stream between separators, in time linear in its
    length however long one piece is (the bytes of a piece that spans reads
    are collected in a list and joined once)."""
    parts = []  # the start of the current piece, read so far
    while True:
        chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
        if not chunk:
            break
        pieces = chunk.split(sep)
        if len(pieces) == 1:
            parts.append(chunk)
            continue
        parts.append(pieces[0])
        yield b"".join(parts) if len(parts) > 1 else parts[0]
        yield from pieces[1:-1]
        parts = [pieces[-1]] if pieces[-1] else []
    rest = b"".join(parts)
    # the end: what is left, unless it is a trailing blank page
    if rest and not (mode == "pages" and not rest.strip(b"\n")):
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
