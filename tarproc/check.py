"""Moved: see tarproc.sinks.check."""
from ._compat import shim

__getattr__ = shim(['tarproc.sinks.check'])
