"""Shard lists: brace patterns and file lists to URLs."""

from ..errors import UsageError
from .open import open_source


def expand_urls(args=(), filelist=None):
    """Expand brace patterns (``shard-{0000..0146}.tar``) in every argument and
    in every line of the file list ``filelist`` (a URL, ``-`` for stdin).
    With neither, the input is stdin (``["-"]``).  An argument with a sample
    range (``PATTERN#START,END``, see :mod:`.fragment`) stays one item."""
    urls = []
    patterns = list(args)
    if filelist is not None:
        stream = open_source(filelist, decompress=False)
        try:
            text = stream.read().decode("utf-8", "surrogateescape")
        finally:
            stream.close()
        patterns += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    from .fragment import split_fragment

    for pattern in patterns:
        if split_fragment(pattern) is not None:  # 'PATTERN#START,END' is read as one unit
            urls.append(pattern)
        elif "{" in pattern and not pattern.startswith("pipe:"):
            import braceexpand

            try:
                urls.extend(braceexpand.braceexpand(pattern))
            except Exception as e:
                raise UsageError(f"bad brace pattern {pattern!r}: {e}") from None
        else:
            urls.append(pattern)
    if not urls and filelist is None:
        urls = ["-"]
    return urls
