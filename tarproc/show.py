"""Moved: see tarproc.sinks.show."""
from ._compat import shim

__getattr__ = shim(['tarproc.sinks.show'])
