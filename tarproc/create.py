"""Moved: see tarproc.sources.create."""
from ._compat import shim

__getattr__ = shim(['tarproc.sources.create'])
