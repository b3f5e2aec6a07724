"""Work overlapped in a thread, for libraries that release the GIL while
they work (pyarrow decoding or encoding a Parquet row group), so that the
caller's Python work runs meanwhile: :func:`read_ahead` runs an iterator's
``next`` at most ``depth`` items ahead of its consumer; :class:`WriteBehind`
runs calls one at a time behind the caller, at most one waiting.  Errors are
raised in the caller (at the item where they happened; at the next call or
at :meth:`WriteBehind.finish`); closing stops the thread before it returns.
While any of them runs, the interpreter's switch interval is at most
:data:`SWITCH_INTERVAL`: with the default 5 ms, the thread waits that long
for the GIL after each piece of work while the caller computes, and the
pair is several times slower than one thread alone.  While a worker pool
runs (:func:`enter_crowd`), the interval stays the default."""

import os
import queue
import sys
import threading
import time

#: Seconds a thread may hold the GIL while another waits, during a read-ahead.
SWITCH_INTERVAL = 50e-6
#: Seconds a closing consumer waits for the reader to finish its current item.
STOP_WAIT = 10.0

_lock = threading.Lock()
_state = {"short": 0, "crowd": 0, "saved": None}  # overlaps running, pools running, the interval before


def _apply():
    """The interval the state asks for: short while an overlap runs and no
    worker pool does (a pool's feeder and collector threads hand the GIL to
    each other often: at 50 µs they lose more than a decoder gains)."""
    st = _state
    if st["short"] and not st["crowd"]:
        sys.setswitchinterval(min(st["saved"], SWITCH_INTERVAL))
    else:
        sys.setswitchinterval(st["saved"])


def _enter(kind):
    with _lock:
        if not _state["short"] and not _state["crowd"]:
            _state["saved"] = sys.getswitchinterval()
        _state[kind] += 1
        _apply()


def _leave(kind):
    with _lock:
        if _state[kind] > 0:  # (0 in a forked child, which put the interval back at the fork)
            _state[kind] -= 1
            _apply()


def _lower_switch():
    _enter("short")


def _restore_switch():
    _leave("short")


def enter_crowd():
    """A worker pool starts (runtime/pool.py): the interval stays the
    default until :func:`leave_crowd`, whatever overlaps run."""
    _enter("crowd")


def leave_crowd():
    _leave("crowd")


def _in_child():
    """A forked child has none of the threads: its own lock, the interval
    as it was before them."""
    global _lock
    _lock = threading.Lock()
    if _state["short"] or _state["crowd"]:
        sys.setswitchinterval(_state["saved"])
    _state["short"] = _state["crowd"] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)


class short_switch:
    """``with short_switch():`` around a thread's work that overlaps another
    thread's Python work (a decoder thread): the switch interval is at most
    :data:`SWITCH_INTERVAL` until the last such block ends."""

    def __enter__(self):
        _lower_switch()
        return self

    def __exit__(self, *exc):
        _restore_switch()


class ForkedCopy(RuntimeError):
    """A copy in a forked child: the thread is in the parent."""


def read_ahead(items, depth=1):
    """The items of the iterable ``items``, read by a thread at most
    ``depth`` items ahead (a generator; close it to stop the thread)."""
    it = iter(items)
    q = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def read():
        try:
            for item in it:
                q.put((item, None))
                if stop.is_set():
                    return
            q.put((end, None))
        except BaseException as e:  # (raised in the consumer, at its item)
            q.put((end, e))

    pid = os.getpid()
    _lower_switch()
    thread = threading.Thread(target=read, name="tarproc-readahead", daemon=True)
    try:
        thread.start()
        while True:
            if os.getpid() != pid:
                raise ForkedCopy("a read-ahead cannot go on in a forked child: open the input again there")
            item, error = q.get()
            if error is not None:
                raise error
            if item is end:
                return
            yield item
    finally:
        if os.getpid() == pid:
            stop.set()
            deadline = time.monotonic() + STOP_WAIT
            while thread.is_alive() and time.monotonic() < deadline:  # (else: stuck in a read, a daemon thread)
                try:
                    q.get_nowait()  # (a reader blocked on the full queue puts, sees the stop and ends)
                except queue.Empty:
                    pass
                thread.join(0.05)
            _restore_switch()


class WriteBehind:
    """Calls run in one thread, in order, behind the caller: :meth:`call`
    hands ``fn(*args)`` over once the call before it has returned (one call
    runs while the caller prepares the next); :meth:`finish` waits for the
    last.  The first error of a call is raised by the next
    :meth:`call` or by :meth:`finish`; later calls are dropped.
    :meth:`close` (also on leaving a ``with`` block) waits for the running
    call and drops the rest."""

    def __init__(self, name="tarproc-writebehind"):
        self.name = name
        self.q = None
        self.thread = None
        self.error = None
        self.pid = os.getpid()

    def _run(self):
        while True:
            job = self.q.get()
            try:
                if job is None:
                    return
                if self.error is None:
                    job[0](*job[1])
            except BaseException as e:  # (raised in the caller)
                self.error = e
            finally:
                self.q.task_done()

    def _check(self):
        if os.getpid() != self.pid:
            raise ForkedCopy("a write behind cannot go on in a forked child: open the output again there")
        if self.error is not None:
            error, self.error = self.error, _Dropped()
            if not isinstance(error, _Dropped):
                raise error

    def call(self, fn, *args):
        self._check()
        if self.thread is None:
            self.q = queue.Queue(maxsize=1)
            _lower_switch()
            self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self.thread.start()
        else:
            self.q.join()  # (the call before has returned)
            self._check()
        self.q.put((fn, args))

    def finish(self):
        """Wait for every call handed over; raise the first error."""
        if self.thread is not None and os.getpid() == self.pid:
            self.q.join()
        self._check()

    def close(self):
        if self.thread is None or os.getpid() != self.pid:
            return
        if self.error is None:
            self.error = _Dropped()
        try:
            self.q.put(None, timeout=STOP_WAIT)
        except queue.Full:
            pass
        self.thread.join(STOP_WAIT)
        self.thread = None
        _restore_switch()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Dropped(Exception):
    """The calls after an error, or after close, are not run."""
