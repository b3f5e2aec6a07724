"""The worker processes of function mode: persistent workers fed batches over
pipes (one pickling per batch each way)."""

import os
import threading

from ..errors import SampleFailed, describe_exit


# Frames on the pipes between the parent and its function workers: a header
# (kind, size) and ``size`` bytes.  Tasks: _TASK + a pickled batch.  Replies:
# _REPLY + the pickled results, or _FAILED + a pickled "Type: message".
_TASK, _REPLY, _FAILED = 1, 2, 3


def _frame_header():
    import struct

    return struct.Struct("<BQ")


def _read_frame(f, header):
    """Read one frame from the unbuffered file ``f``; None at end of file."""
    head = bytearray(header.size)
    if not _read_into(f, memoryview(head), eof_ok=True):
        return None
    kind, size = header.unpack(head)
    data = bytearray(size)
    _read_into(f, memoryview(data))
    return kind, data


def _read_into(f, view, eof_ok=False):
    pos = 0
    n = len(view)
    while pos < n:
        k = f.readinto(view[pos:])
        if not k:
            if eof_ok and pos == 0:
                return False
            raise EOFError("worker pipe closed in the middle of a message")
        pos += k
    return True


def _write_frame(fd, header, kind, blob):
    pieces = [header.pack(kind, len(blob)), blob]
    total = len(pieces[0]) + len(blob)
    n = os.writev(fd, pieces)
    if n < total:
        rest = memoryview(b"".join(pieces))[n:]
        while rest:
            rest = rest[os.write(fd, rest):]


def _fn_worker(task_fd, reply_fd, close_fds, spec):
    """Body of a function worker: read batches, apply the function, reply."""
    import pickle

    from . import procs, stall

    stall._stall_hooks.clear()  # the parent's outputs are not ours to flush
    procs._pdeathsig()  # never outlive the parent
    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    from ..stages.function import _map_batch, _worker_init

    _worker_init(spec)
    header = _frame_header()
    tasks = open(task_fd, "rb", buffering=0)
    try:
        while True:
            frame = _read_frame(tasks, header)
            if frame is None:
                break
            try:
                reply = _map_batch(frame[1])
                kind = _REPLY
            except Exception as e:
                reply = pickle.dumps(f"{type(e).__name__}: {e}")
                kind = _FAILED
            del frame
            _write_frame(reply_fd, header, kind, reply)
    except (BrokenPipeError, EOFError):
        pass  # the parent is gone or stopped us
    finally:
        os.close(reply_fd)


class _WorkerFailed(SampleFailed):
    """A worker died or could not run a batch."""


class _FnPool:
    """``parallel`` persistent worker processes, each fed over its own pipe;
    a batch goes to the worker with the fewest batches in hand, and one
    thread per worker reads its replies (in the order of its batches)."""

    def __init__(self, parallel, spec):
        import collections
        import multiprocessing

        self.header = _frame_header()
        self.procs = []
        self.task_fds = []
        self.reply_files = []
        self.queues = []  # per worker: the reply callbacks of its batches in hand
        self.lock = threading.Lock()
        self.threads = []
        self.closed = False
        ctx = multiprocessing.get_context("fork")
        # Workers inherit the signal dispositions at fork: no Python handler
        # for SIGTERM and Ctrl-C is the parent's business.
        import signal

        saved = {sig: signal.signal(sig, disp) for sig, disp in ((signal.SIGTERM, signal.SIG_DFL),
                                                                  (signal.SIGINT, signal.SIG_IGN))}
        try:
            for _ in range(parallel):
                task_r, task_w = os.pipe()
                reply_r, reply_w = os.pipe()
                self.task_fds.append(task_w)
                self.reply_files.append(open(reply_r, "rb", buffering=0))
                self.queues.append(collections.deque())
                ours = self.task_fds + [f.fileno() for f in self.reply_files]
                try:
                    p = ctx.Process(target=_fn_worker, args=(task_r, reply_w, ours, spec), daemon=True)
                    p.start()
                finally:
                    os.close(task_r)  # EOF on our pipes means the other side is gone
                    os.close(reply_w)
                self.procs.append(p)
        except BaseException:
            for sig, disp in saved.items():
                signal.signal(sig, disp)
            self.close()
            raise
        for sig, disp in saved.items():
            signal.signal(sig, disp)
        for i in range(parallel):
            t = threading.Thread(target=self._receive, args=(i,), name=f"tarproc-map-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def send(self, blob, reply):
        """Send a pickled batch; ``reply(data, exc)`` is called from a
        receiver thread with the pickled results or an exception."""
        with self.lock:
            i = min(range(len(self.queues)), key=lambda k: len(self.queues[k]))
            self.queues[i].append(reply)
        try:
            _write_frame(self.task_fds[i], self.header, _TASK, blob)
        except OSError as e:
            if not self.closed:
                raise _WorkerFailed(f"worker {i} is gone ({e})") from None
            raise

    def _receive(self, i):
        import pickle

        f = self.reply_files[i]
        queue = self.queues[i]
        header = self.header
        failure = None
        try:
            while True:
                frame = _read_frame(f, header)
                if frame is None:
                    break
                kind, data = frame
                with self.lock:
                    reply = queue.popleft()
                if kind == _REPLY:
                    reply(data, None)
                else:
                    reply(None, _WorkerFailed(pickle.loads(data)))
        except Exception as e:
            failure = e
        if self.closed:
            return
        # the worker died (killed, os._exit in the function): fail what it had
        p = self.procs[i]
        p.join(1)
        how = describe_exit(p.exitcode) if p.exitcode is not None else str(failure or "closed its pipe")
        with self.lock:
            pending = list(queue)
            queue.clear()
        for reply in pending:
            reply(None, _WorkerFailed(f"worker process {p.pid} ended unexpectedly ({how})"))

    def close(self):
        self.closed = True
        for fd in self.task_fds:
            try:
                os.close(fd)  # idle workers see the end and exit
            except OSError:
                pass
        self.task_fds = [-1] * len(self.task_fds)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        for t in self.threads:
            t.join(5)
        for f in self.reply_files:
            f.close()
