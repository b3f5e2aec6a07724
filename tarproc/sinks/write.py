"""Writing samples to a URL in one call."""

from ..core.grouping import SampleWriter
from ..core.stats import Stats


def write_samples(url, samples, stats=None, **header_defaults):
    """Write samples to an output URL (``-`` for stdout); the output appears
    under its final name only when complete.  Returns the number written."""
    from .output import open_sink

    stats = stats if stats is not None else Stats()
    with open_sink(url) as sink:
        writer = SampleWriter(sink, stats, **header_defaults)
        for sample in samples:
            writer.write(sample)
        writer.close()
    return stats.written


# ---------------------------------------------------------------- stages
