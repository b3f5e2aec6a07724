"""Read ahead in a thread: :func:`read_ahead` runs an iterator's ``next`` in
one thread, at most ``depth`` items ahead of the consumer, for readers that
release the GIL while they work (pyarrow decoding a Parquet row group): the
consumer's Python work then overlaps the reading.  Errors of the iterator
are raised in the consumer at the item where they happened; closing the
consumer (``break``, an exception, Ctrl-C) stops the thread before it
returns.  While any read-ahead runs, the interpreter's switch interval is at
most :data:`SWITCH_INTERVAL`: with the default 5 ms, the reader waits that
long for the GIL after each item while the consumer computes, and reading
becomes several times slower than without the thread."""

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
_active = [0, None]  # read-aheads running, the switch interval before the first


def _lower_switch():
    with _lock:
        if _active[0] == 0:
            _active[1] = sys.getswitchinterval()
            sys.setswitchinterval(min(_active[1], SWITCH_INTERVAL))
        _active[0] += 1


def _restore_switch():
    with _lock:
        _active[0] -= 1
        if _active[0] == 0:
            sys.setswitchinterval(_active[1])


class ForkedReadAhead(RuntimeError):
    """A read-ahead's copy in a forked child: its thread is in the parent."""


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
                raise ForkedReadAhead("a read-ahead cannot go on in a forked child: open the input again there")
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
