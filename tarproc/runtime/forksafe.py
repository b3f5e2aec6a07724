"""Imports a fork waits for: :func:`loading` gives the one lock that every
``os.fork()`` of the process takes first, so a child is never forked while
another thread is inside an import that the library makes lazily
(``tarproc.IndexedDataset`` and its read path's modules): such a child
would wait forever on that import's lock, which no thread of the child
holds.  Fork hooks run newest first: the first call imports the modules
whose own hooks take locks such imports need (``logging``, the thread
pool's) and registers the wait again, after them, so that a fork never
holds their locks while it waits (``import tarproc`` imports neither).

    with loading():
        import numpy
"""

import os
import threading

_LOCK = [threading.RLock()]
_HELD = []
_LATE = []


def loading():
    """The lock to hold while importing what a forked child may need."""
    if not _LATE:
        with _LOCK[0]:
            if not _LATE:
                import concurrent.futures.thread  # noqa: F401
                import logging  # noqa: F401

                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(before=_before)
                _LATE.append(True)
    return _LOCK[0]


def _before():
    _LOCK[0].acquire()
    _HELD.append(_LOCK[0])


def _before_early():
    if not _LATE:  # (then the later registration waits, first)
        _before()


def _in_parent():
    if _HELD:  # (none when the hook was registered during the fork)
        _HELD.pop().release()


def _in_child():
    _LOCK[0] = threading.RLock()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_early, after_in_parent=_in_parent, after_in_child=_in_child)
