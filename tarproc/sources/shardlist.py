"""Shard lists: brace patterns and file lists to URLs, lazily."""

import os

from ..errors import UsageError
from ..runtime.schemes import as_url, scheme_of
from .fragment import split_fragment


def as_urls(urls, what="urls"):
    """The URLs of ``urls`` (one URL, brace pattern or path, or an iterable of
    URLs and paths), as :func:`expand_urls` yields them: a ``str`` is a
    pattern, a path-like object names one file as it is."""
    if isinstance(urls, (str, bytes, os.PathLike)):
        return expand_urls(urls)
    try:
        items = iter(urls)
    except TypeError:
        raise UsageError(f"{what}: expected a URL, a brace pattern, a path or a list of them, "
                         f"not {type(urls).__name__}") from None
    return (as_url(u, what) for u in items)


def expand_urls(args=(), filelist=None, settings=None, globs=True):
    """Yield the URLs of brace patterns (``shard-{0000..0146}.tar``) in every
    argument and in every line of the file list ``filelist`` (a URL, ``-`` for
    stdin; blank lines and ``#`` comments skipped).  With neither, the input
    is stdin (``"-"``).  ``args`` may be one string (a pattern) or a list.
    A local name in ``args`` with ``* ? [ ]`` is expanded as the shell would
    (:func:`expand_glob`; ``globs=False``: not, for names that are data or
    outputs); the lines of a file list never are.
    An argument with a sample range (``PATTERN#START,END``, see
    :mod:`.fragment`) stays one item.

    Nothing is expanded ahead: a pattern that names 10^8 URLs costs nothing
    until they are read, the first input opens at once, and a file list is
    read line by line as the URLs are used.  Use ``list(...)`` for a list.

    Stdin can be read once: ``-`` named twice (``tarpcat - -``, or ``-T -``
    whose list names ``-``) is a :class:`UsageError`.  ``settings``: the
    reading commands of a remote file list."""
    if isinstance(args, (str, bytes, os.PathLike)):
        args = [args]
    args = list(args)
    if not args and filelist is None:
        yield "-"
        return
    stdin = filelist == "-"
    for url in _all_urls(args, filelist, settings, globs):
        if url == "-":
            if stdin:
                raise UsageError("stdin ('-') is named more than once (as an input or as the file list): it can "
                                 "be read only once")
            stdin = True
        yield url


def _all_urls(args, filelist, settings=None, globs=True):
    for pattern in args:
        if isinstance(pattern, os.PathLike):  # a path names one file, braces, * and all
            yield as_url(pattern)
        elif globs:
            for url in _expand(as_url(pattern, "pattern")):
                yield from expand_glob(url)
        else:
            yield from _expand(as_url(pattern, "pattern"))
    if filelist is not None:
        for line in _lines(filelist, settings):
            yield from _expand(line)


#: The characters of a shell wildcard.
GLOB_CHARS = "*?["


def expand_glob(url):
    """The local files a name with ``* ? [ ]`` matches, sorted, as the shell
    expands an unquoted word (names starting with ``.`` only when the
    pattern's part does); a file of exactly that name wins (a name with a
    literal ``*`` still reads, as does ``[*]``); a pattern that matches
    nothing is a :class:`~tarproc.errors.BadInput` (one line: cannot open).  URLs (``s3://``, ``pipe:``, ``-``)
    are never expanded: ``url`` is yielded as it is."""
    if not any(c in url for c in GLOB_CHARS) or scheme_of(url) != "file" or os.path.lexists(url):
        yield url
        return
    import glob

    names = sorted(glob.iglob(url))
    if not names:
        from ..core.limits import shown
        from ..errors import BadInput

        raise BadInput(f"{shown(url)}: cannot open: no such file, and no file matches it as a pattern")
    yield from names


#: Where a list of URLs may come from and still name ``pipe:`` commands: a
#: local file or stdin, which the user gave and controls as much as the
#: command line.  A list read from anywhere else (http(s), s3, gs, a
#: ``pipe:`` command's output, ...) is data: its ``pipe:`` lines are refused.
TRUSTED_LIST_SCHEMES = ("-", "file")


def url_from_data(url, origin, what="file list"):
    """THE rule of commands from data, applied wherever URLs are read from a
    list (``-T`` file lists, tarmix specs, shard indexes): ``url``, read from
    ``origin``, unless it is a ``pipe:`` command and ``origin`` is not a
    local file or stdin (:data:`TRUSTED_LIST_SCHEMES`): then a
    :class:`UsageError`, before anything runs.  (tarcreate plans are read
    from local files and stdin only.)"""
    if isinstance(url, str) and _may_name_command(url) and origin is not None:
        if scheme_of(origin) not in TRUSTED_LIST_SCHEMES:
            from ..core.limits import quote, safe_text

            raise UsageError(f"{safe_text(origin)}: a {what} read from a remote source or a command may not name "
                             f"commands ({quote(safe_text(url))}); only a local {what} may use pipe:")
    return url


def _may_name_command(url):
    """Whether ``url``, or a URL its braces expand to, may be a ``pipe:``
    command: it starts with ``pipe:``, or it has braces and a ``:`` that
    the literal text before its first brace does not fix (``{pipe:cmd,a}``,
    ``p{ipe:cmd,x}`` expand to commands; ``http://h/s-{0..9}.tar`` and
    ``s-{0..9}.tar`` cannot)."""
    if url.startswith("pipe:"):
        return True
    return "{" in url and ":" in url and ":" not in url.split("{", 1)[0]


def _lines(filelist, settings=None):
    """The URL lines of a file list, read as they are used."""
    from .open import open_source

    stream = open_source(filelist, decompress=False, settings=settings)
    try:
        for number, raw in enumerate(stream, 1):
            line = raw.decode("utf-8", "surrogateescape").strip()
            if "\0" in line:
                from ..core.limits import safe_text
                from ..errors import BadInput

                raise BadInput(f"{safe_text(filelist)}: line {number} has a NUL byte: not a list of URLs "
                               f"(a tar file given as the list?)")
            if line and not line.startswith("#"):
                yield url_from_data(line, filelist)
    finally:
        stream.close()


def iter_fragment(url, read):
    """The samples ``start..end`` of ``url`` (``base#start,end``, see
    :mod:`.fragment`), reading the URLs of the expanded base with
    ``read([one_url])`` in turn and stopping after ``end``.  ``None`` when
    ``url`` has no range."""
    parts = split_fragment(url)
    if parts is None:
        return None
    base, start, end = parts
    return _slice(base, start, end, read)


def _slice(base, start, end, read):
    index = 0
    for one in expand_urls([base]):
        inner = read([one])
        try:
            for sample in inner:
                if index >= start:
                    yield sample
                index += 1
                if index > end:
                    return
        finally:
            inner.close()


def _expand(pattern):
    if "{" not in pattern or pattern.startswith("pipe:") or split_fragment(pattern) is not None:
        yield pattern  # 'PATTERN#START,END' (a sample range, see .fragment) is read as one unit
        return
    yield from expand_braces(pattern)


def expand_braces(pattern, what="brace pattern"):
    """Yield the strings of one brace pattern, lazily, in braceexpand's order
    (a bad pattern is a :class:`~tarproc.errors.UsageError`)."""
    import braceexpand

    from ..core.limits import quote

    try:
        factories = _parts(pattern, 0)
    except (braceexpand.UnbalancedBracesError, ValueError) as e:
        raise UsageError(f"bad {what} {quote(pattern)}: {e}") from None
    unescape = braceexpand.escape_re
    for url in _product(factories):
        yield unescape.sub(r"\1", url)


#: Deepest nesting of braces in a pattern.
_MAX_NESTING = 50


def _parts(pattern, depth):
    """A pattern as a list of factories, each returning a fresh iterator of
    the strings of one part (a literal, a range, a sequence).  Unlike
    ``braceexpand.braceexpand`` (whose ``itertools.product`` turns every range
    into a tuple first: ``{00000000..99999999}`` would be 10^8 strings in
    memory), nothing is expanded ahead; the grammar and the order of the
    URLs are braceexpand's, whose range parsers are used."""
    import braceexpand

    if depth > _MAX_NESTING:
        raise ValueError(f"braces nested deeper than {_MAX_NESTING}")
    parts = []
    start = pos = level = 0
    while pos < len(pattern):
        c = pattern[pos]
        if c == "\\":
            pos += 2
            continue
        if c == "{":
            if level == 0 and pos > start:
                parts.append(_const(pattern[start:pos]))
                start = pos
            level += 1
        elif c == "}":
            level -= 1
            if level == 0:
                parts.extend(_group(pattern[start + 1 : pos], depth))
                start = pos + 1
        pos += 1
    if level != 0:
        raise braceexpand.UnbalancedBracesError(f"Unbalanced braces: '{pattern}'")
    if start < len(pattern):
        parts.append(_const(pattern[start:]))
    return parts


def _const(text):
    return lambda: iter((text,))


def _group(expr, depth):
    """The factories of one ``{...}``: a range, a sequence, or a literal
    ``{...}`` around whatever its content expands to (as braceexpand)."""
    import braceexpand

    m = braceexpand.int_range_re.match(expr)
    if m:
        groups = m.groups()
        return [lambda: braceexpand.make_int_range(*groups)]
    m = braceexpand.char_range_re.match(expr)
    if m:
        groups = m.groups()
        return [lambda: iter(braceexpand.make_char_range(*groups))]
    items = []
    start = pos = level = 0
    while pos < len(expr):
        c = expr[pos]
        if c == "\\":
            pos += 2
            continue
        if c == "{":
            level += 1
        elif c == "}":
            level -= 1
        elif c == "," and level == 0:
            items.append(_parts(expr[start:pos], depth + 1))
            start = pos + 1
        pos += 1
    if level != 0 or not items:
        return [_const("{")] + _parts(expr, depth + 1) + [_const("}")]
    items.append(_parts(expr[start:], depth + 1))

    def sequence():
        for item in items:
            yield from _product(item)

    return [sequence]


def _product(factories):
    """The concatenations of one string from each factory, the first
    varying slowest (``itertools.product`` order), without recursion and
    without holding any part's strings."""
    n = len(factories)
    if n == 0:
        yield ""
        return
    iters = [None] * n
    values = [""] * n
    iters[0] = factories[0]()
    i = 0
    while i >= 0:
        try:
            values[i] = next(iters[i])
        except StopIteration:
            i -= 1
            continue
        if i == n - 1:
            yield "".join(values)
        else:
            i += 1
            iters[i] = factories[i]()


def shuffle_urls(urls, seed=None, max_urls=None):
    """The URLs in a random order, reproducible with ``seed``: a full shuffle
    of up to ``max_urls`` (:data:`~tarproc.core.limits.MAX_URLS`) of them; a longer list is
    shuffled lazily through a buffer of that many (memory stays bounded)."""
    import itertools
    import random

    from ..core import limits

    max_urls = limits.MAX_URLS if max_urls is None else max_urls
    it = iter(urls)
    head = list(itertools.islice(it, max_urls + 1))
    rng = random.Random(seed)
    if len(head) <= max_urls:
        rng.shuffle(head)
        return head
    from ..core.shuffle import buffer_shuffle

    return buffer_shuffle(itertools.chain(head, it), max_urls, rng)
