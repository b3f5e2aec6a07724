"""Moved: see tarproc.sources.open tarproc.sources.compression tarproc.sources.shardlist tarproc.sinks.output tarproc.runtime.stall tarproc.runtime.procs."""
from ._compat import shim

__getattr__ = shim(['tarproc.sources.open', 'tarproc.sources.compression', 'tarproc.sources.shardlist', 'tarproc.sinks.output', 'tarproc.runtime.stall', 'tarproc.runtime.procs'])
