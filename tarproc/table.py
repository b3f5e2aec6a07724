"""Moved: see tarproc.sinks.table."""
from ._compat import shim

__getattr__ = shim(['tarproc.sinks.table'])
