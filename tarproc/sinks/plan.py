"""Writing a tarcreate plan: the members of a plan read and checked by
:func:`tarproc.sources.create.read_plan`, written to an output that exists
only when every member was written (:func:`~tarproc.sinks.output.open_sink`)."""

from ..sources.create import item_bytes


def write_plan(items, output="-", basedir=None, on_item=None, group_size=None, settings=None):
    """Write the members of a checked plan to ``output`` (a URL); returns
    the number of members.  On any failure the output is discarded.
    ``group_size``: groups of a ``.tar.gz``/``.tar.zst`` output (see
    :func:`~tarproc.sinks.output.open_sink`), cut where a key starts;
    ``settings``: the output's (see :class:`~tarproc.sinks.output.Sink`),
    and the stderr kept of a failed command (``tail_bytes``)."""
    from ..core.rules import split_name
    from ..core.tario import TarWriter
    from .output import open_sink

    with open_sink(output, group_size=group_size, settings=settings) as sink:
        tar = TarWriter(sink)
        last = None
        for item in items:
            data = item_bytes(item, basedir, sink.settings.tail_bytes)
            if sink.grouped:  # a group ends only where a sample (key) does
                parts = split_name(item.name)
                key = parts[0] if parts is not None else item.name
                if key != last:
                    sink.start_bytes(512 + len(data))
                last = key
            tar.write(item.name, data)
            if on_item is not None:
                on_item(item, len(data))
        tar.close()
    return len(items)
