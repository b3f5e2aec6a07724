"""Moved: see tarproc.stages.command tarproc.stages.function tarproc.runtime.engine tarproc.runtime.procs tarproc.sources.text tarproc.core.rules."""
from ._compat import shim

__getattr__ = shim(['tarproc.stages.command', 'tarproc.stages.function', 'tarproc.runtime.engine', 'tarproc.runtime.procs', 'tarproc.sources.text', 'tarproc.core.rules'])
