"""Names cut to a bounded length for one-line messages (keys, member names,
URLs): the beginning and the end, with the number of characters left out;
what would break the line or drive a terminal (newlines, CR, escapes, C1)
is escaped as :func:`tarproc.core.limits.safe_text` escapes it, so a name
never forges a line of a message or report.

A leaf module (it imports nothing of tarproc), so that the exceptions of
:mod:`tarproc.errors` can bound the names in their messages while
:mod:`tarproc.core.limits` raises those exceptions: no import circle.
"""

import re

#: Characters of a name (key, member name, URL) quoted in a message (the
#: default; ``TARPROC_NAME_CHARS`` changes what the commands print).
NAME_CHARS = 200


#: What a name may not hold raw on a message's line (a tab may: it breaks no line).
_BREAKS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_READABLE = {"\n": "\\n", "\r": "\\r"}


def _escape(m):
    c = m.group()
    return _READABLE.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")


def shorten(name, limit=None):
    """``name`` (any object; ``str`` or ``bytes`` usually) as text of at most
    about ``limit`` characters (default :data:`NAME_CHARS`) for a message:
    the beginning and the end with ``…[N chars]…`` between; line breaks and
    control characters escaped (``\\n``, ``\\x1b``)."""
    limit = NAME_CHARS if limit is None else limit
    if not isinstance(name, str):
        name = repr(name) if not isinstance(name, bytes) else name.decode("utf-8", "backslashreplace")
    if _BREAKS.search(name):
        name = _BREAKS.sub(_escape, name)
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
