"""tarproc: small, pipeable tools and a streaming library for datasets in
tar shards (the WebDataset convention).

The library API (see README.md, "Python API")::

    import tarproc
    for sample in tarproc.iter_samples("shard-{0000..0009}.tar"):
        ...
    tarproc.write_samples("out.tar.gz", samples)
    tarproc.pipeline(samples, tarproc.take(10), tarproc.rekey("{index:06d}"))
"""

from .errors import (BadArchive, BadInput, BadSample, OutputError, SampleFailed, TarprocError,
                     UsageError)
from .samples import (SampleWriter, Stats, group, iter_samples, parse_fields, pipeline, rekey,
                      rename_fields, select_fields, shuffle, skip, slice_samples, split_name, take,
                      write_samples)
from .tario import Member, TarReader, TarWriter, read_members
from .urls import Sink, expand_urls, open_sink, open_source

# The larger capabilities load on first use, so that `import tarproc` (and
# every command's start-up) stays cheap.
_LAZY = {
    "map_command": "proc", "map_function": "proc", "iter_text_samples": "proc",
    "split_samples": "split", "sort_samples": "sort", "parallel_samples": "pcat",
    "check_shards": "check", "read_plan": "create", "write_plan": "create",
    "expand_ids": "jobs", "job_manifest": "jobs",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tarproc' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"tarproc.{module}"), name)


__all__ = list(_LAZY) + [
    "BadArchive", "BadInput", "BadSample", "OutputError", "SampleFailed", "TarprocError", "UsageError",
    "SampleWriter", "Stats", "group", "iter_samples", "parse_fields", "pipeline", "rekey",
    "rename_fields", "select_fields", "shuffle", "skip", "slice_samples", "split_name", "take",
    "write_samples", "Member", "TarReader", "TarWriter", "read_members", "Sink", "expand_urls",
    "open_sink", "open_source",
]
