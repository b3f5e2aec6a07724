"""tarproc: small, pipeable tools and a streaming library for datasets in
tar shards (the WebDataset convention).

The library API (see README.md, "Python API")::

    import tarproc
    for sample in tarproc.iter_samples("shard-{0000..0009}.tar"):
        ...
    tarproc.write_samples("out.tar.gz", samples)
    tarproc.pipeline(samples, tarproc.take(10), tarproc.rekey("{index:06d}"))
"""

from .core.grouping import SampleWriter, group
from .core.blob import Blob, Spooler
from .core.rules import split_name
from .core.stats import Stats
from .core.tario import Member, TarReader, TarWriter, read_members
from .runtime.forksafe import loading
from .errors import (BadArchive, BadInput, BadSample, OutputError, SampleFailed, TarprocError,
                     UsageError)
from .sinks.output import Sink, open_sink
from .sinks.write import write_samples
from .sources.open import open_source
from .sources.samples import iter_samples
from .sources.shardlist import expand_urls
from .stages.basic import (parse_fields, parse_slice, pipeline, rekey, rename_fields, select_fields, shuffle, skip,
                           slice_samples, take)

# The larger capabilities load on first use, so that `import tarproc` (and
# every command's start-up) stays cheap.
_LAZY = {
    "map_command": "stages.command", "map_function": "stages.function", "iter_text_samples": "sources.text",
    "split_samples": "sinks.split", "sort_samples": "stages.sort", "parallel_samples": "sources.pcat",
    "check_shards": "sinks.check", "read_plan": "sources.create", "write_plan": "sinks.plan",
    "expand_ids": "jobs.local", "job_manifest": "jobs.k8s",
    "serve": "server", "Server": "server", "Stall": "runtime.stall",
    "index_shards": "sinks.index", "IndexedDataset": "sources.indexed", "select_keys": "stages.keys",
    "read_keys": "stages.keys", "BadShards": "sources.badshards", "escape_key": "stages.keys",
    "join_samples": "stages.join", "join_shards": "jobs.joinshards",
    "verify_index": "sinks.verify", "Settings": "settings",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tarproc' has no attribute {name!r}")
    with loading():  # a fork waits for it (runtime/forksafe.py)
        import importlib

        loaded = importlib.import_module(f"tarproc.{module}")
    return getattr(loaded, name)




__all__ = list(_LAZY) + [
    "BadArchive", "BadInput", "BadSample", "OutputError", "SampleFailed", "TarprocError", "UsageError",
    "SampleWriter", "Stats", "group", "iter_samples", "parse_fields", "parse_slice", "pipeline", "rekey",
    "rename_fields", "select_fields", "shuffle", "skip", "slice_samples", "split_name", "take",
    "write_samples", "Member", "TarReader", "TarWriter", "read_members", "Sink", "expand_urls",
    "open_sink", "open_source", "Blob", "Spooler",
]
