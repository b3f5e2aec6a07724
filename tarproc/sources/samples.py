"""Reading samples from URLs: :func:`iter_samples`."""

from ..core.passthru import fast_group
from ..core.stats import Stats
from ..core.tario import TarReader
from .resume import RETRIES, STALL_TIMEOUT


def iter_samples(urls, stats=None, strict=False, warn=None, stall=None, spooler=None, raw=False,
                 retries=RETRIES, stall_timeout=STALL_TIMEOUT):
    """Yield the samples of one URL or a list of URLs, in order.

    Each sample gets ``__source__`` (its URL; ``stdin`` for ``-``).  ``warn(message)`` receives
    warnings (a shard cut off at a block boundary); with ``strict`` those are
    errors.  Damage raises :class:`~tarproc.errors.BadInput` after every
    sample before it has been yielded.  ``urls`` is a pattern string
    (``"shard-{0000..0009}.tar"``), a path (``pathlib.Path``: one file, as
    named) or a list of URLs and paths.  ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall`) is called before a read that
    would block on an empty pipe.  Members from ``spooler.threshold`` bytes
    on come as :class:`~tarproc.core.blob.Blob` (``spooler``: a
    :class:`~tarproc.core.blob.Spooler`, default 4 MiB or
    ``TARPROC_BLOB_THRESHOLD``, spool files in ``TMPDIR``).  With ``raw``,
    samples that were read from plain headers carry their bytes, which
    :class:`~tarproc.core.grouping.SampleWriter` copies instead of encoding
    the sample again (:mod:`tarproc.core.passthru`).  An ``http(s)``, ``s3``
    or ``gs`` download that breaks is resumed where it broke, up to
    ``retries`` times in a row (``stall_timeout``: seconds without a byte
    that count as a break; see :func:`~tarproc.sources.open.open_source`)."""
    from .fragment import iter_fragment
    from .shardlist import as_urls
    from .open import open_source

    urls = as_urls(urls)
    if stats is None:
        stats = Stats()
    for url in urls:
        sliced = iter_fragment(url, lambda one: iter_samples(one, stats, strict, warn, stall=stall, raw=raw,
                                                                   retries=retries, stall_timeout=stall_timeout))
        if sliced is not None:  # 'PATTERN#START,END'
            yield from sliced
            continue
        stream = open_source(url, stall=stall, retries=retries, stall_timeout=stall_timeout)
        stats.inputs += 1
        name = "stdin" if url == "-" else url
        try:
            reader = TarReader(stream, name, strict=strict, warn=warn, spooler=spooler)
            yield from fast_group(reader, name, stats, raw)
        finally:
            stream.close()
