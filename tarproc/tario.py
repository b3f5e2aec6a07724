"""Moved: see tarproc.core.tario."""
from ._compat import shim

__getattr__ = shim(['tarproc.core.tario'])
