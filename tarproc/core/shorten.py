"""Names cut to a bounded length for one-line messages (keys, member names,
URLs): the beginning and the end, with the number of characters left out.

A leaf module (it imports nothing of tarproc), so that the exceptions of
:mod:`tarproc.errors` can bound the names in their messages while
:mod:`tarproc.core.limits` raises those exceptions: no import circle.
"""

#: Characters of a name (key, member name, URL) quoted in a message (the
#: default; ``TARPROC_NAME_CHARS`` changes what the commands print).
NAME_CHARS = 200


def shorten(name, limit=None):
    """``name`` (any object; ``str`` or ``bytes`` usually) as text of at most
    about ``limit`` characters (default :data:`NAME_CHARS`) for a message:
    the beginning and the end with ``…[N chars]…`` between."""
    limit = NAME_CHARS if limit is None else limit
    if not isinstance(name, str):
        name = repr(name) if not isinstance(name, bytes) else name.decode("utf-8", "backslashreplace")
    if len(name) <= limit:
        return name
    keep = max(2, limit - 20)
    front = keep * 2 // 3
    back = keep - front
    return f"{name[:front]}…[{len(name) - front - back} chars]…{name[len(name) - back:]}"


def quote(name, limit=None):
    """``repr`` of a shortened name: for ``sample 'KEY'`` in messages."""
    if isinstance(name, str) and len(name) <= (NAME_CHARS if limit is None else limit):
        return repr(name)
    if not isinstance(name, str):
        return shorten(repr(name), limit)
    return repr(shorten(name, limit))
