"""How an index names the files it points at (its shards, its sidecars): the
one rule the writer (:mod:`tarproc.sinks.index`) and every reader
(:class:`~tarproc.IndexedDataset`, ``tarcheck --index``, and webdataset's
``wids``) share.

A reader resolves a relative name against the directory of the index as it
was opened, lexically (:func:`resolve_name`: ``idx/../x.tar`` is ``x.tar``,
as wids does), and the kernel resolves the same path physically (``..`` of
a symbolic link is the parent of its target).  So the writer
(:func:`name_for`) names a local file relative to the index's directory
only when both ways lead to that file from the index's directory as named
and from its real directory (a file in the index's directory or below it,
or beside it when no link is on the way); otherwise by its absolute real
path.  An index with no directory (written to stdout) names local files by
their absolute path.  URLs are named as given.

    name_for("data/s.tar", "/work/idx")      # '../data/s.tar', or '/work/data/s.tar' through a link
    resolve_name("../data/s.tar", "/work/idx")   # '/work/data/s.tar'
"""

import os
import posixpath

from .open import scheme_of


def resolve_name(name, base):
    """``name`` (a shard or sidecar as an index names it) relative to
    ``base``, the directory of the index (a local directory, or a URL
    prefix; ``None``: as it is)."""
    if base is None or scheme_of(name) != "file" or name.startswith("/"):
        return name
    if scheme_of(base) == "file":
        return os.path.normpath(os.path.join(base, name))
    # a URL: dot segments resolved here (RFC 3986), so __source__ is the URL
    # read (curl would squash them; s3 and gs would take them as a key)
    head, sep, path = base.partition("://")
    host, _, path = path.partition("/")
    return head + sep + host + posixpath.normpath(posixpath.join("/" + path, name))


def name_for(url, index_dir):
    """The name an index in the local directory ``index_dir`` (``None``:
    not a local file, such as stdout or a URL) gives the file ``url``."""
    if scheme_of(url) != "file":
        return url
    if index_dir is None:
        return os.path.abspath(url) if url != "-" else url
    real = os.path.realpath(url)
    named_dir, real_dir = os.path.abspath(index_dir), os.path.realpath(index_dir)
    for name in (os.path.relpath(os.path.abspath(url), named_dir), os.path.relpath(real, real_dir)):
        # found from the index's directory as named and from its real one, lexically and physically
        if all(os.path.realpath(way) == real for way in (resolve_name(name, named_dir), resolve_name(name, real_dir),
                                                          os.path.join(named_dir, name))):
            return name
    return real
