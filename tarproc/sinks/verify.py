"""Checking shards against their index: size and SHA-256 (``tarcheck --index``).

:func:`verify_index` reads the index (as :class:`~tarproc.IndexedDataset`
does: shard URLs relative to its directory) and checks every shard: its
size against the entry's ``filesize``, and, when ``tarindex --checksum``
recorded one, the SHA-256 of all its bytes against ``sha256``.  It returns
one report per shard, in index order::

    {"url": ..., "ok": bool, "checked": "sha256" | "size" | "nothing",
     "problem": None | "one line", "unreadable": bool}

    from tarproc import verify_index
    bad = [r for r in verify_index("index.json") if not r["ok"]]
"""

from ..errors import BadInput


def verify_shard(url, entry, settings=None):
    """The report of one shard (see the module doc); ``settings``: the
    reading commands."""
    from ..sources.stamps import stamp_of
    from .scan import sha256_of

    rep = {"url": url, "ok": True, "checked": "nothing", "problem": None, "unreadable": False}
    want_size, want_sha = entry.get("filesize"), entry.get("sha256")
    try:
        size = stamp_of(url, settings).get("filesize")
        if want_size is not None:
            rep["checked"] = "size"
            if size is not None and size != want_size:
                rep["ok"] = False
                rep["problem"] = f"{size} bytes, the index says {want_size}: the shard changed since it was indexed"
                return rep
        if isinstance(want_sha, str):
            rep["checked"] = "sha256"
            got = sha256_of(url, settings)
            if got != want_sha:
                rep["ok"] = False
                rep["problem"] = (f"sha256 {got}, the index says {want_sha[:64]}: the shard's bytes changed since "
                                  f"it was indexed")
    except BadInput as e:
        rep.update(ok=False, unreadable=True, problem=str(e))
    return rep


def verify_index(index, base=None, parallel=1, on_shard=None, settings=None):
    """Check every shard of ``index`` (a location or the index ``dict``;
    ``base`` as for :class:`~tarproc.IndexedDataset`), ``parallel`` at once
    (threads: hashing releases the GIL).  ``on_shard(report)`` is called for
    each, in index order; returns the list of reports.  ``settings``: as
    for :class:`~tarproc.IndexedDataset` (given none, it reads the environment)."""
    from ..errors import UsageError
    from ..sources.indexed import IndexedDataset

    if not isinstance(parallel, int) or parallel < 1:
        raise UsageError(f"parallel={parallel!r}: a number of shards at once, 1 or more")
    ds = IndexedDataset(index, base, settings=settings)
    idx, settings = ds.index, ds.settings
    jobs = list(zip(idx.urls, idx.shards))
    out = []
    if parallel == 1 or len(jobs) <= 1:
        for url, entry in jobs:
            out.append(verify_shard(url, entry, settings))
            if on_shard is not None:
                on_shard(out[-1])
        return out
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(parallel, len(jobs)), thread_name_prefix="tarcheck-index") as pool:
        futures = [pool.submit(verify_shard, url, entry, settings) for url, entry in jobs]
        for f in futures:
            out.append(f.result())
            if on_shard is not None:
                on_shard(out[-1])
    return out
