"""Writing samples to a URL in one call."""

from ..core.grouping import SampleWriter
from ..core.stats import Stats


def write_samples(url, samples, stats=None, stall=None, **header_defaults):
    """Write samples to an output URL (``-`` for stdout); the output appears
    under its final name only when complete.  Returns the number written.
    With ``stall`` (a :class:`~tarproc.runtime.stall.Stall` also given to the
    source) output is flushed whenever the source is about to block."""
    from .output import open_sink

    from ..errors import UsageError

    if isinstance(samples, dict) or not hasattr(samples, "__iter__"):
        raise UsageError(f"write_samples: samples must be an iterable of samples (dicts), not "
                         f"{'one sample' if isinstance(samples, dict) else type(samples).__name__}")
    stats = stats if stats is not None else Stats()
    with open_sink(url, stall=stall) as sink:
        writer = SampleWriter(sink, stats, **header_defaults)
        for sample in samples:
            writer.write(sample)
        writer.close()
    return stats.written
