"""Moved: see tarproc.sources.pcat."""
from ._compat import shim

__getattr__ = shim(['tarproc.sources.pcat'])
