"""The ordered window of both engines: function mode
(:func:`~tarproc.stages.function.map_function`, on the worker pool) and
command mode (:func:`~tarproc.runtime.spawn.spawn_loop`).

A :class:`Window` reads items ahead in one thread, at most ``size`` of them
read and not yet handed out; takes their results back by index from any
thread (:meth:`Window.put`); hands them out in input order, or as they
finish with ``ordered=False`` (:meth:`Window.ready`); calls the stall hook
while the consumer waits (:meth:`Window.pace`: it flushes the output, and
raises once the output's reader has gone); and stops its reader when closed
(:meth:`Window.close`), whatever it was waiting for.  An error while
reading is raised after every result before it has been handed out
(:meth:`Window.check`).

Two ways to use it:

* items are *submitted* from the reading thread (``on_item``: function mode
  sends batches to the pool) and results come back from other threads:
  :meth:`Window.results` is the whole loop;
* items are *taken* by the consumer (:meth:`Window.take`: command mode
  prepares and starts commands itself) and results are put back in its
  own thread: the consumer waits on :attr:`Window.rfd` beside its other
  descriptors (``epoll``), setting :attr:`Window.waiting` first so that
  the reader writes to that pipe only when it is waited for.
"""

import collections
import os
import threading
import time

#: Seconds between two calls of the stall hook while the consumer waits: a
#: stall hook that finds the output's reader gone raises BrokenPipeError,
#: and the run stops within about this long.
ALIVE_GAP = 0.5
#: Seconds from results handed out to the next call of the stall hook (the
#: output is flushed then): output keeps pace without a flush per result.
STALL_GAP = 0.02


class WindowClosed(Exception):
    """Raised by :meth:`Window.acquire` in the reading thread once the
    window is closed: the reader stops."""


class Window:
    """At most ``size`` items read ahead and not yet handed out; results
    handed out in input order (``ordered``) or as they come; ``on_stall()``
    called while waiting (see :meth:`pace`)."""

    def __init__(self, size, ordered=True, on_stall=None):
        if size < 1:
            raise ValueError("a window holds at least one item")
        self.size = size
        self.ordered = ordered
        self.on_stall = on_stall
        self.slots = threading.Semaphore(size)
        self.closing = threading.Event()
        self.items = collections.deque()  # (index, item) read and not taken (take mode)
        self.done = collections.deque()  # (index, result) put back, from any thread
        self.held = {}  # index -> result, waiting for its turn
        self.added = 0  # items read (the next item's index)
        self.emitted = 0  # results handed out
        self.unreleased = 0  # results handed out whose slots the reader has not got back
        self.refill = max(1, size // 2)  # slots go back in batches: one wake-up of the reader each
        self.ended = False  # the reader has read everything (or failed, or stopped)
        self.error = None  # what ended the reading, raised after the results before it
        self.waiting = False  # the consumer is about to wait: wake it through the pipe
        self.on_item = None
        self.thread = None
        self.blocked = False  # the reader waits for a slot
        self.owed = False  # results handed out since on_stall was last called
        self.stalled_at = -STALL_GAP
        self.rfd, self.wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.lock = threading.Lock()
        self.pid = os.getpid()  # a copy in a forked child takes no lock (see close)

    # -- the reading thread

    def start(self, items=None, feed=None, on_item=None):
        """Start reading in a thread: ``feed(window)`` if given (it calls
        :meth:`acquire` then :meth:`add` for each item), else every item of
        ``items``.  ``on_item(index, item)``, called in the reading thread,
        takes each item as it is added; without it items wait for
        :meth:`take`."""
        self.on_item = on_item
        if feed is None:
            def feed(window):
                it = iter(items)
                while True:
                    window.acquire()  # before the item is read: never more than ``size`` read ahead
                    try:
                        item = next(it)
                    except StopIteration:
                        return
                    window.add(item)

        self.thread = threading.Thread(target=self._read, args=(feed,), name="tarproc-reader", daemon=True)
        self.thread.start()
        return self

    def _read(self, feed):
        try:
            feed(self)
        except WindowClosed:
            pass
        except BaseException as e:  # raised by check() after the results before it
            self.error = e
        self.ended = True
        self.wake()

    def acquire(self):
        """In the reading thread: wait for a free slot (raises
        :class:`WindowClosed` once the window is closed)."""
        if not self.slots.acquire(blocking=False):
            self.blocked = True
            try:
                while not self.slots.acquire(timeout=1.0):
                    if self.closing.is_set():
                        raise WindowClosed()
            finally:
                self.blocked = False
        if self.closing.is_set():
            raise WindowClosed()

    def add(self, item):
        """In the reading thread, after :meth:`acquire`: the next item; its index."""
        index = self.added
        if self.on_item is not None:
            self.added = index + 1
            self.on_item(index, item)
        else:
            self.items.append((index, item))
            self.added = index + 1
            if self.waiting:
                self.wake()
        return index

    # -- results, from any thread

    def put(self, index, result):
        """The result of item ``index`` (any thread)."""
        self.done.append((index, result))
        if self.waiting:
            self.wake()

    def wake(self):
        """Wake the consumer waiting on :attr:`rfd` (any thread)."""
        with self.lock:  # never a write to a closed (and maybe reused) descriptor
            if self.wfd is not None:
                try:
                    os.write(self.wfd, b"x")
                except OSError:  # full: a wake-up is pending anyway
                    pass

    # -- the consumer

    def take(self):
        """The next item read ahead, ``(index, item)``, or None."""
        return self.items.popleft() if self.items else None

    def news(self):
        """Whether results or items wait (look after setting :attr:`waiting`)."""
        return bool(self.done or self.items or self.ended)

    def ready(self):
        """The results whose turn has come (all that are in, with
        ``ordered=False``), each slot given back to the reader."""
        done, results = self.done, self.held
        while done:
            index, result = done.popleft()
            results[index] = result
        if self.ordered:
            while self.emitted in results:
                result = results.pop(self.emitted)
                self._handed()
                yield result
                while done:  # (put meanwhile)
                    index, result = done.popleft()
                    results[index] = result
        else:
            while results:
                for index in list(results):
                    result = results.pop(index)
                    self._handed()
                    yield result
                while done:
                    index, result = done.popleft()
                    results[index] = result
        self.release()

    def _handed(self):
        self.emitted += 1
        self.unreleased += 1
        self.owed = self.on_stall is not None
        self.release()

    def release(self):
        """Give handed-out results' slots back to the reader: in batches,
        at once when it is about to run dry."""
        n = self.unreleased
        if n and (n >= self.refill or len(self.items) <= 1):
            self.unreleased = 0
            self.slots.release(n)

    def finished(self):
        """Everything read has been handed out (call :meth:`check` then)."""
        return self.ended and self.emitted >= self.added and not self.items

    def check(self):
        """Raise what ended the reading, if anything."""
        if self.error is not None:
            raise self.error

    def pace(self):
        """Before waiting: call ``on_stall`` when due (``STALL_GAP`` after
        results were handed out, else every ``ALIVE_GAP``); how long the wait
        may last (None: no limit).  ``on_stall`` raising (BrokenPipeError:
        the output's reader has gone) ends the consumer's loop."""
        if self.on_stall is None:
            return None
        now = time.monotonic()
        gap = STALL_GAP if self.owed else ALIVE_GAP
        if now - self.stalled_at >= gap:
            self.on_stall()
            self.stalled_at, self.owed, gap = now, False, ALIVE_GAP
        return max(0.0, self.stalled_at + gap - now)

    def drain(self):
        """Empty the wake-up pipe (after :attr:`rfd` was readable)."""
        try:
            while os.read(self.rfd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def wait(self, timeout):
        """Wait for a wake-up, at most ``timeout`` seconds (None: no limit)."""
        import select

        try:
            ready, _, _ = select.select([self.rfd], [], [], timeout)
        except InterruptedError:
            return
        if ready:
            self.drain()

    def results(self, handle):
        """The whole loop when items are submitted (``on_item``) and results
        come from other threads: yield ``handle(result)``'s items, in turn;
        raise the reading's error at the end; close the window however it
        ends."""
        try:
            while True:
                for result in self.ready():
                    yield from handle(result)
                if self.finished():
                    break
                self.waiting = True
                if not self.done:
                    self.wait(self.pace())
                self.waiting = False
            self.check()
        finally:
            self.close()

    def close(self):
        """Stop the reader (at its next item, or at once when it waits for a
        slot) and close the pipe.  Idempotent."""
        if self.closing.is_set():
            return
        if os.getpid() != self.pid:
            # A copy in a child made by os.fork, closed as that child exits:
            # the parent's threads are not here, and a lock one of them held
            # when the process forked (this one's, the slots', the closing
            # event's) stays held in the copy for ever: take none, close the
            # copy's descriptors only.
            for fd in (self.wfd, self.rfd):
                if fd is not None and fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self.wfd, self.rfd = None, -1
            return
        self.closing.set()
        self.slots.release(self.size)  # a reader waiting for a slot sees the closing now
        thread = self.thread
        if thread is not None and self.blocked and thread is not threading.current_thread():
            thread.join(1.0)
        with self.lock:
            wfd, self.wfd = self.wfd, None
        for fd in (wfd, self.rfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.rfd = -1
