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
