"""Writing the samples of trees (``tarcreate --tree``): the parts given by
:func:`tarproc.sources.tree.tree_parts`, in key order, as tar members
written to an output that exists only when every file was read
(:func:`~tarproc.sinks.output.open_sink`)."""

from ..sources.tree import tree_parts


def write_tree(listing, samples, output="-", parallel=1, group_size=None, settings=None, retries=None,
               on_part=None):
    """Write ``samples`` (:func:`~tarproc.sources.tree.tree_samples` of a
    checked ``listing``) to ``output`` (a URL); returns ``(samples, members,
    bytes of data)``.  ``parallel``: objects of bucket trees fetched at once;
    ``on_part(part, size)`` after each member.  On any failure (a file
    unreadable or changing size, a failed fetch) the output is discarded."""
    from ..core.tario import TarWriter
    from .output import open_sink

    nsamples = nmembers = nbytes = 0
    with open_sink(output, group_size=group_size, settings=settings) as sink:
        tar = TarWriter(sink)
        grouped = sink.grouped
        for key, parts in tree_parts(listing, samples, parallel, settings, retries):
            if grouped:  # a group ends only where a sample does
                sink.start_bytes(sum(512 + len(p.data) for p in parts))
            for part in parts:
                size = len(part.data)
                tar.write(part.name, part.data)
                part.done()
                nmembers += 1
                nbytes += size
                if on_part is not None:
                    on_part(part, size)
            nsamples += 1
        tar.close()
    return nsamples, nmembers, nbytes


def tree_sample_dicts(listing, samples, parallel=1, settings=None, retries=None, on_part=None):
    """The samples as ``dict`` (``__key__`` and a field per part: ``bytes``
    or a blob copied in chunks), for a writer that takes samples
    (:func:`~tarproc.sinks.split.split_samples`); a sample's files are
    checked (:meth:`~tarproc.sources.tree.Part.done`) when the writer asks
    for the next one, that is once it has written them."""
    for key, parts in tree_parts(listing, samples, parallel, settings, retries):
        sample = {"__key__": key}
        for part in parts:
            sample[part.name[len(key) + 1:]] = part.data
        yield sample
        for part in parts:
            part.done()
            if on_part is not None:
                on_part(part, len(part.data))


def split_tree(listing, samples, pattern, max_size=None, max_count=None, parallel=1, group_size=None,
               settings=None, retries=None, on_part=None, post=None):
    """Write ``samples`` of a checked ``listing`` to shards named by
    ``pattern`` (``pets-%06d.tar``), cut by :func:`~tarproc.sinks.split.split_samples`
    at ``max_size`` bytes or ``max_count`` samples; yields each
    :class:`~tarproc.sinks.split.Shard` as it is committed."""
    from .split import split_samples

    yield from split_samples(tree_sample_dicts(listing, samples, parallel, settings, retries, on_part), pattern,
                             max_count=max_count, max_size=max_size, group_size=group_size, settings=settings,
                             post=post)
