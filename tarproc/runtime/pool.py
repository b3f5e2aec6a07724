"""The one worker pool: every worker process of the toolkit is started here,
through ``multiprocess`` (so ``dill`` carries lambdas and closures to workers
under every start method: ``fork``, ``spawn``, ``forkserver``).

Two shapes use it:

* :class:`TaskPool` -- request/reply workers (``tarproc --map``): the parent
  sends byte messages (pickled batches), each worker runs a handler on them and
  replies.  A worker that dies (SIGKILL, the OOM killer, ``os._exit``) is
  noticed, replaced, and the sample it was on is named: the worker keeps a
  shared progress marker (the position in its batch), so only that sample
  fails and the rest of the batch is sent again.
* :func:`start_worker` -- one producer process with a pipe back to the parent
  (``tarpcat``'s shard readers), for workers that stream on their own.

Messages are multiprocess ``Connection`` byte messages, written and read by
:mod:`tarproc.runtime.messages`.

Nothing here touches signal handlers of the calling process (workers set their
own), so a pool can be started from any thread.  ``multiprocess`` is imported
on first use, not with ``tarproc``.
"""

import collections
import os
import threading

from ..errors import SampleFailed, UsageError, describe_exit
from .messages import Receiver, send_pieces  # noqa: F401  (Receiver: tarpcat's, through here)
from .overlap import enter_crowd, leave_crowd

START_METHODS = ("fork", "spawn", "forkserver")


_FORK_HOOK = False


def _forget_children():
    """In a child made by ``os.fork``: the parent's worker processes are not
    its children.  ``multiprocess`` keeps them listed (it resets the list only
    in processes it starts itself), and its exit hook would then send them
    SIGTERM and fail to join them."""
    import sys

    process = sys.modules.get("multiprocess.process")
    children = getattr(process, "_children", None)
    if children is not None:
        children.clear()


def get_context(start_method=None):
    """The ``multiprocess`` context for ``start_method`` (default: ``fork``
    where the platform has it, else the platform's default)."""
    if start_method is not None and start_method not in START_METHODS:
        raise UsageError(f"start method must be one of {', '.join(START_METHODS)}, not {start_method!r}")
    import multiprocess

    global _FORK_HOOK
    if not _FORK_HOOK and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_children)
        _FORK_HOOK = True
    if start_method is None and "fork" in multiprocess.get_all_start_methods():
        start_method = "fork"
    return multiprocess.get_context(start_method)


def in_daemon():
    """Whether this process is a daemonic ``multiprocessing``/``multiprocess``
    process (a PyTorch DataLoader worker is one)."""
    import sys

    for name in ("multiprocessing", "multiprocess"):
        mod = sys.modules.get(name)
        if mod is not None:
            try:
                if mod.current_process().daemon:
                    return True
            except Exception:
                pass
    return False


def _check_can_start(what):
    import multiprocess

    if multiprocess.current_process().daemon:
        raise UsageError(f"{what}: a daemonic multiprocess process cannot start worker processes; "
                         f"use parallel=1 (runs in this process)")


# ---------------------------------------------------------------- workers

_START_LOCK = threading.Lock()


def _new_start_lock():
    global _START_LOCK
    _START_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # a lock another thread held when this process forked stays held in the child
    os.register_at_fork(after_in_child=_new_start_lock)


_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


class _Starting:
    """While a worker starts: SIGINT, SIGTERM and SIGHUP are blocked in this thread
    (so the child inherits them blocked and cannot run the parent's Python
    handlers before it has set its own; :func:`_child` unblocks them), and
    under ``spawn``/``forkserver`` the parent's main script is not run in the
    worker: our workers need nothing from ``__main__`` (functions travel by
    value with dill), and re-running it breaks ``python -c``, stdin,
    notebooks and scripts without a main guard (they would start the
    pipeline again in every worker)."""

    def __init__(self, ctx):
        self.active = ctx.get_start_method() != "fork"

    def __enter__(self):
        import signal

        if self.active:
            # multiprocess starts its resource tracker with SIGINT and SIGTERM
            # blocked and then UNBLOCKS them in this thread: once, before ours
            from multiprocess import resource_tracker

            resource_tracker.ensure_running()
        self.mask = None
        try:
            self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, [getattr(signal, n) for n in _SIGNALS])
        except (AttributeError, OSError, ValueError):
            pass
        if self.active:
            from multiprocess import spawn

            _START_LOCK.acquire()
            self.spawn = spawn
            self.orig = orig = spawn.get_preparation_data

            def prep(name):
                d = orig(name)
                d.pop("init_main_from_path", None)
                d.pop("init_main_from_name", None)
                d.pop("main_path", None)
                return d

            spawn.get_preparation_data = prep

    def __exit__(self, *exc):
        if self.active:
            self.spawn.get_preparation_data = self.orig
            _START_LOCK.release()
        if self.mask is not None:
            import signal

            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        return False



def _child(target, args, close_fds):
    """First thing in every worker: its own signal dispositions (Ctrl-C is
    the parent's business; SIGTERM ends it), die with the parent, drop the
    parent's ends of other workers' pipes (fork), then run ``target``."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # the parent's handler cleans up, not ours
    try:  # blocked while we started (see _Starting)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [getattr(signal, n) for n in _SIGNALS])
    except (AttributeError, OSError, ValueError):
        pass
    from .procs import pdeathsig

    pdeathsig()
    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    target(*args)


def start_worker(ctx, target, args, parent_fds=(), name="tarproc-worker", pipe_size=None):
    """Start ``target(conn, *args)`` in a daemonic worker process; ``conn`` is
    the write end of a pipe whose read end is returned with the process:
    ``(process, reader_connection)``.  ``parent_fds`` are this process's ends
    of other workers' pipes, closed in the worker under ``fork``."""
    from .procs import in_keeper

    _check_can_start(name)
    reader, writer = ctx.Pipe(duplex=False)
    if pipe_size:
        try:
            import fcntl

            fcntl.fcntl(writer.fileno(), 1031, pipe_size)  # F_SETPIPE_SZ: fewer stalls between turns
        except (OSError, ImportError):
            pass
    close = list(parent_fds) + [reader.fileno()] if ctx.get_start_method() == "fork" else []
    try:
        p = ctx.Process(target=_child, args=(target, (writer,) + tuple(args), close), name=name, daemon=True)

        def start():
            with _Starting(ctx):
                p.start()

        # from a thread that outlives the worker: its parent-death signal is the thread's
        in_keeper(start)
    except BaseException:
        reader.close()
        raise
    finally:
        writer.close()  # EOF on our end means the worker is gone
    return p, reader


def stop_workers(procs, timeout=5):
    """Stop worker processes: SIGTERM (a worker may end what it started, such
    as its input commands), then SIGKILL what is left after ``timeout``
    seconds in all."""
    import time

    for p in procs:
        if p.exitcode is None:
            try:
                p.terminate()
            except (OSError, ValueError):
                pass
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                p.kill()
                p.join()
        except (OSError, ValueError, AssertionError):
            pass


# ---------------------------------------------------------------- task pool


def _exiting():
    """Whether ``multiprocess`` has begun ending its processes at interpreter exit."""
    import sys

    util = sys.modules.get("multiprocess.util")
    return bool(getattr(util, "_exiting", False))


class WorkerDied(SampleFailed):
    """A worker process ended while it held a task; ``position`` is where in
    the task (which item) it was, -1 when unknown; ``timed_out``: the pool
    killed it for running one item past its timeout."""

    def __init__(self, message, position=-1, how="", timed_out=False):
        super().__init__(message)
        self.position = position
        self.how = how
        self.timed_out = timed_out


class WorkerError(SampleFailed):
    """A worker could not run a task (its handler raised) or cannot be started."""


class _Mark:
    """A worker's progress marker (``mark[slot] = item``) that also stamps
    when the item was taken up, for the parent's per-item timeout."""

    __slots__ = ("mark", "since", "clock")

    def __init__(self, mark, since):
        import time

        self.mark, self.since, self.clock = mark, since, time.monotonic

    def __setitem__(self, slot, item):
        self.since[slot] = self.clock()  # before the item: the parent reads the item, then its time
        self.mark[slot] = item


def _serve(tasks, replies, mark, slot, setup, setup_args, since=None):
    """Body of a task worker: ``handler = setup(*setup_args)``, then for
    every message ``handler(message, mark, slot)`` -> reply bytes (a pickle;
    ``mark[slot]`` is set to the item in hand).  A handler exception replies
    ``b"\\0" + message``."""
    try:
        handler = setup(*setup_args)
    except Exception as e:  # every task gets this answer
        failure = b"\0" + f"cannot start: {type(e).__name__}: {e}".encode("utf-8", "replace")

        def handler(blob, mark, slot):
            return failure
    if since is not None:
        mark = _Mark(mark, since)
    recv = Receiver(tasks.fileno(), reuse=True)  # (a handler that keeps a view of a message gets a new buffer)
    fd = replies.fileno()
    while True:
        mark[slot] = -1
        try:
            blob = recv.recv()
        except (EOFError, OSError):
            break
        try:
            out = handler(blob, mark, slot)
        except Exception as e:
            out = b"\0" + f"{type(e).__name__}: {e}".encode("utf-8", "replace")
        del blob
        mark[slot] = -1
        try:
            send_pieces(fd, [out])
        except OSError:
            break


class _Worker:
    __slots__ = ("proc", "tasks", "replies", "receiver", "inflight", "feed", "feeder", "slot", "dead", "timed_out")


class TaskPool:
    """Up to ``n`` worker processes running ``setup(*setup_args)``'s handler
    on byte messages: one starts with the pool, another each time a message
    is sent while every started worker is busy (so ``-p 200`` on 20 samples
    starts at most 20).  Every worker is started through
    :func:`~tarproc.runtime.procs.in_keeper` (by the main thread, or by one
    thread that lives as long as the process): a worker's parent-death
    signal follows the thread that started it, which must outlive the
    worker's own cleanup on SIGTERM.  :meth:`send` is thread-safe; the reply
    callback ``reply(data, exc)`` runs in the pool's collector thread, with
    the reply bytes or an exception (:class:`WorkerDied` for the first task
    of a worker that died on an item; the worker's other tasks are sent
    again to its replacement)."""

    #: deaths outside any item in a row before the pool gives up
    MAX_BLIND_DEATHS = 3

    def __init__(self, n, setup, setup_args=(), start_method=None, name="tarproc-worker", timeout=None):
        _check_can_start(name)
        self.ctx = get_context(start_method)
        self.fork = self.ctx.get_start_method() == "fork"
        self.setup = setup
        self.setup_args = tuple(setup_args)
        self.name = name
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.closed = False
        self.broken = None
        self.blind = 0
        self.mark = self.ctx.RawArray("i", n)
        self.timeout = timeout  # seconds one item may take; the worker is killed past it
        self.since = self.ctx.RawArray("d", n) if timeout else None
        self.wake_r, self.wake_w = os.pipe()
        self.workers = []
        self.n = n  # at most; one starts now, the others when work waits for a worker (send)
        self.grow_lock = threading.Lock()
        try:
            for i in range(min(n, 1)):
                self.workers.append(self._start_kept(i))
        except BaseException:
            self.close()
            raise
        self.collector = threading.Thread(target=self._collect, name=f"{name}-collector", daemon=True)
        self.collector.start()
        enter_crowd()  # (the switch interval stays the default while the pool's threads run)
        self.crowded = True

    def _parent_fds(self):
        fds = [self.wake_r, self.wake_w]
        for w in self.workers:
            if w is not None and not w.dead:
                fds += [w.tasks.fileno(), w.replies.fileno()]
        return fds

    def _start_kept(self, slot):
        from .procs import in_keeper

        return in_keeper(lambda: self._start(slot))

    def _start(self, slot):
        ctx = self.ctx
        t_read, t_write = ctx.Pipe(duplex=False)
        r_read, r_write = ctx.Pipe(duplex=False)
        self.mark[slot] = -1
        close = self._parent_fds() + [t_write.fileno(), r_read.fileno()] if self.fork else []
        w = _Worker()
        try:
            w.proc = ctx.Process(target=_child, name=f"{self.name}-{slot}", daemon=True,
                                 args=(_serve, (t_read, r_write, self.mark, slot, self.setup, self.setup_args,
                                                self.since), close))
            with _Starting(ctx):
                w.proc.start()
        except BaseException:
            t_write.close()
            r_read.close()
            raise
        finally:
            t_read.close()
            r_write.close()
        w.tasks, w.replies = t_write, r_read
        w.receiver = Receiver(r_read.fileno())
        w.inflight = collections.deque()
        w.slot = slot
        w.dead = False
        w.timed_out = False
        import queue

        w.feed = queue.SimpleQueue()
        w.feeder = threading.Thread(target=self._feed, args=(w,), name=f"{self.name}-feed-{slot}", daemon=True)
        w.feeder.start()
        return w

    def _feed(self, w):
        fd = w.tasks.fileno()
        while True:
            blob = w.feed.get()
            if blob is None:
                return
            try:
                send_pieces(fd, blob if type(blob) is list else [blob])
            except (OSError, ValueError):
                return  # the worker is gone: the collector sends its tasks again

    def _wants_worker(self):
        return self.broken is None and not self.closed and len(self.workers) < self.n \
            and all(w.inflight for w in self.workers)

    def _grow(self):
        """One more worker (the caller found every started one busy)."""
        with self.grow_lock:
            with self.lock:
                if not self._wants_worker() or _exiting():
                    return
            try:
                w = self._start_kept(len(self.workers))  # (only this lock adds workers)
            except Exception:  # noqa: BLE001 - no more processes: the started workers go on
                return
            with self.lock:
                self.workers.append(w)
                closed = self.closed
            if closed:  # (closed meanwhile: this one is not in close()'s list)
                stop_workers([w.proc])
                w.feed.put(None)
                return
        try:
            os.write(self.wake_w, b"w")  # the collector waits on the new worker too
        except OSError:
            pass

    def send(self, blob, reply):
        """Queue the message ``blob`` (bytes, or a list of buffers sent as
        one message, without joining them); ``reply(data, exc)`` is called later.
        When every started worker is busy and fewer than ``n`` run, one more
        starts first and takes it."""
        if self._wants_worker():
            self._grow()
        with self.lock:
            broken = self.broken
            if broken is None:
                w = min(self.workers, key=lambda w: len(w.inflight))
                w.inflight.append((blob, reply))
                w.feed.put(blob)
        if broken is not None:
            reply(None, WorkerError(broken))

    def _collect(self):
        from multiprocess.connection import wait

        while not self.closed:
            with self.lock:
                workers = [w for w in self.workers if not w.dead]
            by_fd = {}
            for w in workers:
                by_fd[w.replies.fileno()] = (w, False)
                by_fd[w.proc.sentinel] = (w, True)
            try:
                ready = wait(list(by_fd) + [self.wake_r], None if self.timeout is None else
                             min(1.0, self.timeout / 4))
            except (OSError, ValueError):
                if self.closed:
                    return
                continue
            if self.timeout is not None:
                self._expire(workers)
            for fd in ready:
                if self.closed:
                    return
                if fd == self.wake_r:  # a new worker, or the pool closes
                    try:
                        os.read(self.wake_r, 4096)
                    except OSError:
                        pass
                    continue
                if fd not in by_fd:
                    continue
                w, exited = by_fd[fd]
                if w.dead:
                    continue
                if exited:  # take the replies it sent before it ended
                    while not w.dead and w.replies.poll(0):
                        self._take(w)
                    if not w.dead:
                        self._died(w)
                else:
                    self._take(w)

    def _expire(self, workers):
        """Kill a worker whose item has run past the timeout (its death then
        fails that item alone, as any death does)."""
        import signal
        import time

        now = time.monotonic()
        for w in workers:
            if not w.dead and not w.timed_out and self.mark[w.slot] >= 0 \
                    and now - self.since[w.slot] > self.timeout:
                w.timed_out = True
                try:
                    os.kill(w.proc.pid, signal.SIGKILL)
                except OSError:
                    pass

    def _take(self, w):
        try:
            data = w.receiver.recv()
        except (EOFError, OSError):
            self._died(w)
            return
        with self.lock:
            if not w.inflight:
                return
            blob, reply = w.inflight.popleft()
        if data[:1] == b"\0":
            reply(None, WorkerError(bytes(data[1:]).decode("utf-8", "replace")))
        else:
            self.blind = 0
            reply(data, None)

    def _died(self, w):
        w.dead = True
        w.proc.join(5)
        how = f"timed out after {self.timeout:g} s" if w.timed_out else describe_exit(w.proc.exitcode)
        position = self.mark[w.slot]
        new = None
        with self.lock:
            pending = list(w.inflight)
            w.inflight.clear()
            if self.closed or _exiting():  # (at exit multiprocess terminates its daemons: none to replace)
                return
            try:
                new = self._start_kept(w.slot)
                self.workers[w.slot] = new
            except Exception as e:
                self.broken = f"worker process {w.proc.pid} ended ({how}) and cannot be replaced: {e}"
        w.feed.put(None)
        for c in (w.receiver, w.tasks, w.replies):
            try:
                c.close()
            except OSError:
                pass
        if not pending:
            return
        if self.broken is not None:
            for _, reply in pending:
                reply(None, WorkerError(self.broken))
            return
        head, rest = pending[0], pending[1:]
        if position >= 0:
            head[1](None, WorkerDied(f"worker process {w.proc.pid} died ({how})", position, how, w.timed_out))
        else:
            self.blind += 1
            if self.blind > self.MAX_BLIND_DEATHS:
                for _, reply in pending:
                    reply(None, WorkerError(f"worker processes keep ending outside any sample (last: {how})"))
                return
            rest = pending
        with self.lock:
            for blob, reply in rest:
                new.inflight.append((blob, reply))
                new.feed.put(blob)

    def close(self):
        """Stop the workers (idle or not) and the pool's threads."""
        if self.closed:
            return
        self.closed = True
        if os.getpid() != self.pid:  # a copy in a forked child: the workers are the parent's
            return
        if getattr(self, "crowded", False):
            self.crowded = False
            leave_crowd()
        workers = [w for w in self.workers if w is not None]
        stop_workers([w.proc for w in workers])
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass
        for w in workers:
            w.feed.put(None)
        collector = getattr(self, "collector", None)
        if collector is not None and collector is not threading.current_thread():
            collector.join(5)
        for w in workers:
            w.feeder.join(5)
            for c in (w.receiver, w.tasks, w.replies):
                try:
                    c.close()
                except OSError:
                    pass
        for fd in (self.wake_r, self.wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
