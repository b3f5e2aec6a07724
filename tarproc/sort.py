"""Moved: see tarproc.stages.sort."""
from ._compat import shim

__getattr__ = shim(['tarproc.stages.sort'])
