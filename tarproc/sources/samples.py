"""Reading samples from URLs: :func:`iter_samples`."""

from ..core.passthru import fast_group
from ..core.stats import Stats
from ..core.tario import TarReader
from .resume import RETRIES, STALL_TIMEOUT


def iter_samples(urls, stats=None, strict=False, warn=None, stall=None, spooler=None, raw=False,
                 on_bad_shard="fail", retries=RETRIES, stall_timeout=STALL_TIMEOUT, settings=None):
    """Yield the samples of one URL or a list of URLs, in order.

    Each sample gets ``__source__`` (its URL; ``stdin`` for ``-``).  ``warn(message)`` receives
    warnings (a shard cut off at a block boundary); with ``strict`` those are
    errors.  Damage raises :class:`~tarproc.errors.BadInput` after every
    sample before it has been yielded, unless ``on_bad_shard`` says
    otherwise: ``"skip"`` leaves a damaged or unreadable shard out whole,
    ``"partial"`` keeps its samples read before the damage; each is reported
    to ``warn`` in one line and reading goes on (see
    :mod:`tarproc.sources.badshards`; pass a
    :class:`~tarproc.sources.badshards.BadShards` to choose the report, to
    allow at most ``max_bad`` of them, checked when the reading ends, and
    to read the record).  ``urls`` is a pattern string
    (``"shard-{0000..0009}.tar"``), a path (``pathlib.Path``: one file, as
    named) or a list of URLs and paths.  ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall`) is called before a read that
    would block on an empty pipe.  Members from ``spooler.threshold`` bytes
    on come as :class:`~tarproc.core.blob.Blob` (``spooler``: a
    :class:`~tarproc.core.blob.Spooler`, default 4 MiB, spool files in
    ``TMPDIR``).  ``settings`` (a :class:`~tarproc.settings.Settings`;
    default: the defaults, whatever the environment holds): the client
    commands of URL schemes and the bounds of reading (compression bombs,
    sparse members).  With ``raw``,
    samples that were read from plain headers carry their bytes, which
    :class:`~tarproc.core.grouping.SampleWriter` copies instead of encoding
    the sample again (:mod:`tarproc.core.passthru`).  An ``http(s)``, ``s3``
    or ``gs`` download that breaks is resumed where it broke, up to
    ``retries`` times in a row (``stall_timeout``: seconds without a byte
    that count as a break; see :func:`~tarproc.sources.open.open_source`)."""
    from .badshards import as_bad_shards
    from .shardlist import as_urls, iter_fragment

    urls = as_urls(urls)
    if stats is None:
        stats = Stats()
    bad = as_bad_shards(on_bad_shard, warn)
    if bad is not None and bad.spooler is None:
        bad.spooler = spooler

    def one(url):
        samples = _shard(url, stats, strict, warn, stall, spooler, raw, retries, stall_timeout, settings)
        return samples if bad is None else bad.guard(url, samples)

    for url in urls:
        sliced = iter_fragment(url, lambda urls1: _each(urls1, one))
        if sliced is not None:  # 'PATTERN#START,END'
            yield from sliced
            continue
        yield from one(url)
    if bad is not None:
        bad.check()


def _each(urls, one):
    for url in urls:
        yield from one(url)


def _shard(url, stats, strict, warn, stall, spooler, raw, retries=RETRIES, stall_timeout=STALL_TIMEOUT, settings=None):
    """The samples of one shard."""
    from .open import open_source

    stats.inputs += 1  # (tried: a shard that cannot be opened counts too)
    stream = open_source(url, stall=stall, retries=retries, stall_timeout=stall_timeout, settings=settings)
    name = "stdin" if url == "-" else url
    try:
        reader = TarReader(stream, name, strict=strict, warn=warn, spooler=spooler,
                           sparse_holes=settings.sparse_holes if settings is not None else None)
        yield from fast_group(reader, name, stats, raw)
        stats.truncated += reader.truncated  # (ended without its end-of-archive marker: warned)
    finally:
        stream.close()
