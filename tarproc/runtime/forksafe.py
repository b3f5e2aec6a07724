"""Imports a fork waits for: :func:`loading` gives the one lock that every
``os.fork()`` of the process takes first, so a child is never forked while
another thread is inside an import that the library makes lazily
(``tarproc.IndexedDataset`` and its read path's modules): such a child
would wait forever on that import's lock, which no thread of the child
holds.  Fork hooks run newest first, so this module imports, before it
registers its own, the modules whose fork hooks take locks that such
imports need (``logging``'s, the thread pool's): a fork then waits for the
import before it takes their locks, never while holding them (a lazy
first import of them raced with a fork: each thread held what the other
waited for).  Their import costs about 5 ms of every start.

    with loading():
        import numpy
"""

import concurrent.futures.thread  # noqa: F401  (its fork hook registered before ours)
import logging  # noqa: F401  (likewise)
import os
import threading

_LOCK = [threading.RLock()]
_HELD = []


def loading():
    """The lock to hold while importing what a forked child may need."""
    return _LOCK[0]


def _before():
    _LOCK[0].acquire()
    _HELD.append(_LOCK[0])


def _in_parent():
    while _HELD:
        _HELD.pop().release()


def _in_child():
    _LOCK[0] = threading.RLock()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before, after_in_parent=_in_parent, after_in_child=_in_child)
