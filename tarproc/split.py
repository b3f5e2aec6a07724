"""Moved: see tarproc.sinks.split."""
from ._compat import shim

__getattr__ = shim(['tarproc.sinks.split'])
