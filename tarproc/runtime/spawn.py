"""Starting per-sample commands cheaply, and the loop that runs them
(command mode, :func:`~tarproc.stages.command.map_command`).

:class:`~tarproc.runtime.child.Spawner` starts a command with
``posix_spawn`` (one of the two ways :mod:`tarproc.runtime.child` starts a
child): in a directory given by descriptor, in a new session watched by a
watchdog, with stdin, stdout and stderr from descriptors.

:func:`spawn_loop` keeps ``parallel`` commands running: samples are read
ahead in one thread (at most ``window``, by a
:class:`~tarproc.runtime.window.Window`, which also hands the results out
in order and paces the stall hook), the next sample's directory is
prepared while commands run, a command that exits is replaced at once (one
more thread calls ``posix_spawn``), and exits are waited for on pidfds
(``epoll``), with a waiting thread per command only where pidfds are
missing."""

import collections
import os
import threading
import time

from .child import Spawner  # noqa: F401 - (posix_spawn: one way runtime/child starts a child)
from .procs import killpg, wait_nowait
from .window import Window


class _Poller:
    """``epoll`` (another thread may register while we wait), else ``poll``."""

    def __init__(self):
        import select

        self.ep = select.epoll() if hasattr(select, "epoll") else None
        self.p = select.poll() if self.ep is None else None
        self.threadsafe = self.ep is not None

    def register(self, fd):
        (self.ep or self.p).register(fd, 1)  # EPOLLIN == POLLIN

    def unregister(self, fd):
        (self.ep or self.p).unregister(fd)

    def wait(self, timeout):
        if self.ep is not None:
            return self.ep.poll(-1 if timeout is None else timeout)
        return self.p.poll(None if timeout is None else timeout * 1000)

    def close(self):
        if self.ep is not None:
            self.ep.close()


def spawn_loop(samples, runner, parallel, window, ordered, handle, on_stall=None):
    """Run ``runner``'s commands on ``samples``, ``parallel`` at a time; yield
    ``handle(result)``'s samples in input order (or as they finish).
    ``runner`` provides ``prepare(index, sample)`` (a job, or a finished
    result), ``spawn(job)`` (None, or a result when it could not start),
    ``finish(job, status)`` (the result), ``discard(job)`` and the attributes
    ``timeout``, ``closed``, ``aborted``, ``any_ok`` and ``spawner`` (and gets
    ``wake()``: to be called after setting ``aborted``); a job has ``index``, ``log``,
    ``handle``, ``pid``, ``pidfd``, ``deadline`` and ``timed_out``.
    ``on_stall()`` is called before waiting when results were handed out
    since its last call, at most every
    :data:`~tarproc.runtime.window.STALL_GAP` seconds (the wait is then cut
    short), so output keeps pace without a flush per sample.

    This thread prepares, collects and hands out; the commands are started
    by one more thread (``posix_spawn`` returns only once the child has
    called ``exec``, which under load can take a while), which registers
    them with the ``epoll`` this thread waits on."""
    import queue

    inbox = Window(window, ordered, on_stall).start(samples)
    poller = _Poller()
    poller.register(inbox.rfd)
    running = {}  # pidfd (or -pid without pidfds) -> job
    pipes = {}  # the read end of a running job's output pipe -> job
    exited = collections.deque()  # jobs whose waiting thread saw them exit (no pidfds)
    failed = collections.deque()  # results of jobs that did not start
    prepared = collections.deque()
    inflight = 0  # started or being started, not yet ended
    have_pidfd = hasattr(os, "pidfd_open")

    def waiter(job):
        wait_nowait(job.pid)
        exited.append(job)
        inbox.wake()

    def start(job):  # in the starting thread (or this one without epoll)
        failure = runner.spawn(job)
        if failure is not None:
            failed.append((job.index, failure))
            inbox.wake()
            return
        job.pidfd = None
        if have_pidfd:
            try:
                job.pidfd = os.pidfd_open(job.pid)
            except OSError:
                pass
        rfd = getattr(job.log, "rfd", None)
        if rfd is not None:  # its output is read while it runs
            pipes[rfd] = job
            poller.register(rfd)
        if job.pidfd is not None:
            running[job.pidfd] = job
            poller.register(job.pidfd)
        else:
            running[-job.pid] = job
            threading.Thread(target=waiter, args=(job,), daemon=True).start()

    def starter():
        while True:
            job = jobs.get()
            if job is None:
                return
            try:
                start(job)
            except BaseException as e:  # a bug: the sample's failure
                from .engine import Result

                if running.get(job.pidfd) is job or running.get(-(job.pid or 0)) is job:
                    continue  # it runs and is waited for: its exit gives its result
                if job.pid is not None:
                    killpg(job.pid)
                    runner.spawner.reap(job.handle)
                runner.discard(job)
                failed.append((job.index, Result(job.key, error=f"internal error: {type(e).__name__}: {e}")))
                inbox.wake()

    jobs = queue.SimpleQueue()
    thread = None
    if poller.threadsafe:
        thread = threading.Thread(target=starter, name="tarproc-spawn", daemon=True)
        thread.start()

    def next_job():
        while inbox.items:
            index, sample = inbox.take()
            job = runner.prepare(index, sample)
            if not hasattr(job, "pid"):  # failed before it started
                inbox.put(index, job)
                continue
            return job
        return None

    def unpipe(job):
        rfd = getattr(job.log, "rfd", None)
        if rfd is not None and pipes.pop(rfd, None) is not None:
            poller.unregister(rfd)

    def end(job):
        nonlocal inflight
        unpipe(job)
        if job.pidfd is not None:
            poller.unregister(job.pidfd)
            del running[job.pidfd]
            os.close(job.pidfd)
        else:
            del running[-job.pid]
        killpg(job.pid)  # any process left in its group
        status = runner.spawner.reap(job.handle)
        if job.timed_out:
            status = "timeout"
        inflight -= 1
        if status != 127 or runner.any_ok:  # (127 first: "command not found" stops the run at once)
            fill()  # the next command starts before this one's output is collected
        inbox.put(job.index, runner.finish(job, status))

    def fill():
        nonlocal inflight
        while inflight < parallel:
            job = prepared.popleft() if prepared else next_job()
            if job is None:
                break
            inflight += 1
            if thread is not None:
                jobs.put(job)
            else:
                start(job)
        if not prepared and inflight >= parallel:
            job = next_job()  # prepared while the commands run
            if job is not None:
                prepared.append(job)

    runner.wake = inbox.wake  # runner.abort() (at exit, from another thread) wakes us to stop
    me = os.getpid()
    try:
        while True:
            if runner.aborted:
                from ..errors import SampleFailed

                raise SampleFailed("stopped: the interpreter is exiting")
            while failed:
                index, result = failed.popleft()
                inflight -= 1
                inbox.put(index, result)
            fill()
            # hand out what is done, in order (the reader's slots go back in batches)
            for result in inbox.ready():
                yield from handle(result)
            if inbox.finished():
                break
            # set before looking: the reader then wakes us after its next sample
            inbox.waiting = inflight < parallel or not prepared
            if inbox.items and inflight < parallel or failed:
                inbox.waiting = False
                continue
            # flush what was handed out, at most every STALL_GAP (one write per sample
            # costs); and every ALIVE_GAP anyway: the hook raises once the reader has gone
            timeout = inbox.pace()
            if runner.timeout is not None and inflight:
                now = time.monotonic()
                timeout = min(runner.timeout, runner.timeout if timeout is None else timeout)  # one being started has a later deadline
                for job in list(running.values()):
                    if job.timed_out:
                        continue
                    if job.deadline <= now:
                        job.timed_out = True
                        killpg(job.pid)
                    else:
                        timeout = min(timeout, job.deadline - now + 0.001)
            ready = poller.wait(timeout) if inflight or not inbox.ended else []
            inbox.waiting = False
            done = [running[fd] for fd, _ in ready if fd in running]  # before a closed pidfd's number is reused
            for fd, _ in ready:
                if fd == inbox.rfd:
                    inbox.drain()
                elif fd in pipes and not pipes[fd].log.pump():  # at its end
                    poller.unregister(fd)
                    pipes.pop(fd).log.finish()
            for job in done:
                end(job)
            while exited:
                end(exited.popleft())
        inbox.check()
    finally:
        if os.getpid() != me:  # a copy in a forked child: the commands and directories are the parent's
            return
        runner.closed = True  # what is still queued is not started
        if thread is not None:
            jobs.put(None)
            thread.join(10)
        inbox.close()
        for job in list(running.values()):
            killpg(job.pid)
        for job in list(running.values()):
            unpipe(job)
            try:
                if job.pidfd is not None:
                    os.close(job.pidfd)
                else:
                    wait_nowait(job.pid)
                runner.spawner.reap(job.handle)
            except OSError:
                pass
            runner.finish(job, "closed")
        for job in prepared:
            runner.discard(job)
        poller.close()
