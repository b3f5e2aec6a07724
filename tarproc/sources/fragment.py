"""``URL#START,END``: a range of samples of an input, as the original tarproc
utilities wrote it (``tarshow 'shard.tar#0,3'``).

The numbers count samples over the whole argument (a brace pattern counts
across its shards in order), from 0, and END is included: ``#0,3`` is the
first four samples, ``#5`` is sample 5 alone.  Reading stops after END.

A ``#`` can also be part of a real file name.  The rule: an argument that
names an existing local file (or directory) as written is that file; only
otherwise is a trailing ``#INT`` or ``#INT,INT`` read as a range.  So
``'take#1,2.tar'`` is always a name (the ``#`` is not at the end), and a file
really called ``x.tar#0,3`` is read whole when it exists.
"""

import os
import re

from ..errors import UsageError

_FRAGMENT = re.compile(r"#\s*(\d+)\s*(?:,\s*(\d+)\s*)?$")


def split_fragment(url, exists=os.path.exists):
    """``(base, start, end)`` for ``base#start,end`` (``end`` inclusive), or
    ``None`` when ``url`` has no range (or names an existing file)."""
    if "#" not in url or url == "-":
        return None
    m = _FRAGMENT.search(url)
    if m is None:
        return None
    if "://" not in url and not url.startswith("pipe:") and exists(url):
        return None
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) is not None else start
    if end < start:
        raise UsageError(f"{url}: the range #START,END needs END >= START (END is included)")
    base = url[: m.start()]
    if not base:
        raise UsageError(f"{url}: a range #START,END needs an input before the '#'")
    return base, start, end
