"""Moved: see tarproc.core.stats tarproc.core.rules tarproc.core.grouping tarproc.sources.samples tarproc.sinks.write tarproc.stages.basic."""
from ._compat import shim

__getattr__ = shim(['tarproc.core.stats', 'tarproc.core.rules', 'tarproc.core.grouping', 'tarproc.sources.samples', 'tarproc.sinks.write', 'tarproc.stages.basic'])
