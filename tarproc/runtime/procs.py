"""Child processes: waiting with a deadline, killing process groups, dying with
the parent (``PR_SET_PDEATHSIG``), and telling whether a PID is alive.

The parent-death signal is tied to the *thread* that started the child, not
to the process: a child started from a thread that then ends (a thread pool
worker that opened a shard, a request thread, any ``threading.Thread`` that
made an iterator another thread goes on reading) would be killed under its
reader.  :func:`popen` and :func:`in_keeper` therefore start children from
the main thread, or from one daemon thread that lives as long as the process.
"""

import os



def _wait_exit(pid, timeout):
    """Wait up to ``timeout`` seconds for ``pid`` to exit (without reaping);
    True when it has exited."""
    import select

    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        import time

        deadline = time.monotonic() + timeout
        delay = 0.0005
        while time.monotonic() < deadline:
            try:
                r = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
            except ChildProcessError:
                return True
            if r is not None:
                return True
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return False
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    finally:
        os.close(pidfd)


def wait_nowait(pid):
    while True:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


def killpg(pgid):
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def pdeathsig():
    """In a child: die with the parent, so an upload is not completed with
    the partial data of a parent that was killed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass


def default_sigchld():
    """Put ``SIGCHLD`` back to its default when this process was started
    with it ignored (an inherited ``SIG_IGN``, as some daemons and shells
    leave it): then the kernel reaps children at once, ``waitpid`` finds no
    status, and a command that failed would look like one that succeeded.
    Python lets only the main thread change a disposition; from another
    thread (a library user's worker thread) the C library's ``signal`` does
    it (``SIG_DFL`` runs no Python handler, so Python's own record of it
    does not matter)."""
    import signal
    import threading

    try:
        if signal.getsignal(signal.SIGCHLD) != signal.SIG_IGN:
            return
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            return
    except (ValueError, OSError):
        return
    try:
        import ctypes

        ctypes.CDLL(None).signal(int(signal.SIGCHLD), ctypes.c_void_p(0))  # SIG_DFL
    except Exception:
        pass


_WATCHDOG = (
    "import os,signal\n"
    "groups=set()\n"
    "buf=b''\n"
    "while True:\n"
    "    try:\n"
    "        b=os.read(0,4096)\n"
    "    except InterruptedError:\n"
    "        continue\n"
    "    except OSError:\n"
    "        b=b''\n"
    "    if not b:\n"
    "        break\n"
    "    buf+=b\n"
    "    *lines,buf=buf.split(b'\\n')\n"
    "    for line in lines:\n"
    "        n=int(line)\n"
    "        groups.add(n) if n>0 else groups.discard(-n)\n"
    "for g in groups:\n"
    "    try:\n"
    "        os.killpg(g,signal.SIGKILL)\n"
    "    except OSError:\n"
    "        pass\n"
)


class Watchdog:
    """A small helper process that kills the process groups registered with
    it (:meth:`add`, :meth:`discard`) once this process is gone, however it
    ended (``SIGKILL``, the OOM killer): it reads a pipe whose only writer is
    this process and, at end of file, kills every group still registered.
    For children that cannot get a parent-death signal (``posix_spawn`` has
    no hook to run ``prctl`` in the child) and for whole pipelines a shell
    runs (the signal reaches only the shell, not its own children).

    The helper starts on first :meth:`add`; when it cannot start, children
    simply run without it.  Registering is one short ``write``."""

    def __init__(self):
        self.fd = None
        self.proc = None
        self.pid = None
        self.failed = False
        import threading

        self.lock = threading.Lock()

    def _start(self):
        import subprocess
        import sys

        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            # its own session: a Ctrl-C to our terminal group does not end it early;
            # no parent-death signal: it must outlive us to do its work.  (The one process
            # the library starts without runtime/child.Child, which stands on this helper.)
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHDOG], stdin=r,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         close_fds=True, start_new_session=True)
        except OSError:
            os.close(w)
            self.failed = True
            return
        finally:
            os.close(r)
        self.fd = w
        self.pid = os.getpid()

    def _send(self, n):
        with self.lock:
            if self.fd is None or self.pid != os.getpid():
                if self.failed or n < 0:
                    return
                self._start()
                if self.fd is None:
                    return
            try:
                os.write(self.fd, b"%d\n" % n)
            except OSError:
                pass

    def fd_for_child(self):
        """The helper's pipe (started if need be), for a child to register
        its own group with before it runs its program (``b"PID\\n"``, one
        atomic write, in the forked child before ``exec``): a parent
        killed between the fork and :meth:`add` then leaves nothing behind.
        ``None`` without a helper."""
        with self.lock:
            if self.fd is None or self.pid != os.getpid():
                if self.failed:
                    return None
                self._start()
            return self.fd

    def add(self, pgid):
        """Kill process group ``pgid`` if this process dies before :meth:`discard`."""
        self._send(int(pgid))

    def discard(self, pgid):
        """``pgid`` has ended (call before reaping its leader: its number is then still taken)."""
        self._send(-int(pgid))

    def close(self):
        """Stop the helper (the groups still registered are killed)."""
        with self.lock:
            if self.fd is not None and self.pid == os.getpid():
                os.close(self.fd)
                self.fd = None
                try:
                    self.proc.wait(timeout=5)
                except Exception:
                    pass


# ---------------------------------------------------------------- reading


def pid_alive(pid):
    """Whether a process with this pid exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_KEEPER = None  # (pid, queue) of the thread that starts children for other threads


def _keeper_loop(jobs):
    while True:
        fn, box, done = jobs.get()
        try:
            box.append((True, fn()))
        except BaseException as e:  # handed to the caller
            box.append((False, e))
        done.set()


def in_keeper(fn):
    """``fn()``, called in a thread that lives as long as this process: the
    calling thread itself when it is the main thread, else one daemon
    thread kept for the purpose (made on first use, and again in a forked
    child).  For starting children whose parent-death signal must outlive
    the calling thread.  In the main thread, Ctrl-C, SIGTERM and SIGHUP
    are held while ``fn`` forks and handled once it returns
    (:class:`held_signals`)."""
    import threading

    if threading.current_thread() is threading.main_thread():
        with held_signals():
            return fn()
    global _KEEPER
    keeper = _KEEPER
    if keeper is None or keeper[0] != os.getpid():
        import queue

        with _KEEPER_LOCK:
            keeper = _KEEPER
            if keeper is None or keeper[0] != os.getpid():
                jobs = queue.SimpleQueue()
                threading.Thread(target=_keeper_loop, args=(jobs,), daemon=True, name="tarproc-keeper").start()
                keeper = _KEEPER = (os.getpid(), jobs)
    box = []
    done = threading.Event()
    keeper[1].put((fn, box, done))
    done.wait()
    ok, value = box[0]
    if ok:
        return value
    raise value


def popen(*args, **kwargs):
    """``subprocess.Popen(*args, **kwargs)`` started through :func:`in_keeper`,
    with ``preexec_fn`` (default :func:`pdeathsig`) run in the child."""
    import subprocess

    kwargs.setdefault("preexec_fn", pdeathsig)
    return in_keeper(lambda: subprocess.Popen(*args, **kwargs))


class held_signals:
    """``with held_signals():`` in the main thread: SIGINT, SIGTERM and
    SIGHUP that arrive inside the block are handled by their handlers when
    it ends.  A Python handler that runs inside an at-fork hook (logging's,
    the thread pool's) has its exception dropped by the interpreter
    ("Exception ignored"), so a Ctrl-C that lands while the main thread
    forks would be lost."""

    SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")

    def __enter__(self):
        import signal

        self.held = []
        self.saved = {}
        for name in self.SIGNALS:
            signum = getattr(signal, name)
            handler = signal.getsignal(signum)
            if callable(handler):  # (a Python handler: default_int_handler, the commands' SIGTERM)
                self.saved[signum] = handler
                signal.signal(signum, self._hold)
        return self

    def _hold(self, signum, frame):
        self.held.append(signum)

    def __exit__(self, *exc):
        import signal

        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(self.held):
            self.saved[signum](signum, None)  # (KeyboardInterrupt, Terminated: raised here)


def _reset_keeper_lock():
    global _KEEPER_LOCK
    import _thread

    _KEEPER_LOCK = _thread.allocate_lock()


_reset_keeper_lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_keeper_lock)  # a lock held by another thread at fork stays held


# ---------------------------------------------------------------- at exit

_AT_EXIT = None  # {generator: stop} (weak keys) of the stages to end at interpreter exit


def close_at_exit(gen, stop=None):
    """Register the generator ``gen`` of a stage that starts processes and
    threads (``map_command``, ``map_function``) to be ended at interpreter
    exit, if still open: ``gen.close()`` runs its cleanup while threads
    still run (during finalization they are frozen, and a cleanup that
    waits for one hung the exit for ever).  If it is running in another
    thread then, ``stop()`` is called instead (it kills what it started).
    Returns ``gen``."""
    global _AT_EXIT
    if _AT_EXIT is None:
        import atexit
        import weakref

        _AT_EXIT = weakref.WeakKeyDictionary()
        atexit.register(_close_all)
    _AT_EXIT[gen] = (os.getpid(), stop)
    return gen


def _close_all():
    live = _AT_EXIT
    if not live:
        return
    me = os.getpid()
    for gen, (owner, stop) in list(live.items())[::-1]:  # the last opened (the outer stage) first
        if owner != me:  # a forked child's copy: not ours to end
            continue
        try:
            if gen.gi_frame is None:
                continue
            if gen.gi_running:
                if stop is not None:
                    stop()
            else:
                gen.close()
        except Exception:  # noqa: BLE001 - exiting: end the others anyway
            pass


#: Words that make a shell command more than one simple command.
_SHELL_WORDS = frozenset("if then else elif fi for while until do done case esac in { } ! [[ ]] function "
                         "time select coproc exec".split())


def exec_simple(cmd):
    """``exec CMD`` when ``CMD`` is one simple command (``aws s3 cp - URL``),
    else ``CMD``.  ``sh -c`` (dash) forks a simple command rather than
    replacing itself: the client was then a grandchild that the parent-death
    signal (:func:`~tarproc.runtime.procs.pdeathsig`) never reached, and
    after a SIGKILL of the parent it read end-of-input and published the
    partial data.  With ``exec`` the client is the process that dies with the
    parent.  Pipelines, lists, redirections, assignments and compound
    commands stay as they are (their first process only dies)."""
    import shlex
    import shutil

    if "\n" in cmd or "\r" in cmd:
        return cmd
    try:
        lex = shlex.shlex(cmd, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:
        return cmd
    if not words or words[0] in _SHELL_WORDS or set("=$`\\") & set(words[0]):
        return cmd
    if shutil.which(words[0]) is None:  # a shell builtin (exit, :, cd), or not found: left to the shell
        return cmd
    if any(set(w) <= set("();<>|&") for w in words):
        return cmd
    return "exec " + cmd


#: Descriptors one running command holds in the parent (directory, output
#: pipe, pidfd, a spilled log, a few blobs), and those kept for the rest.
FDS_PER_COMMAND = 6
FDS_RESERVED = 32


def fit_parallel(parallel):
    """``(n, limit)``: how many commands can run at once given the open-file
    limit, raising the soft limit towards the hard one when ``parallel``
    needs it (each running command holds :data:`FDS_PER_COMMAND`
    descriptors); ``n < parallel`` only when the hard limit is too low."""
    try:
        import resource
    except ImportError:
        return parallel, None
    need = FDS_RESERVED + FDS_PER_COMMAND * parallel
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (OSError, ValueError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= need:
        return parallel, soft
    return max(1, (soft - FDS_RESERVED) // FDS_PER_COMMAND), soft


#: Descriptors one worker process holds in the parent (its task and reply
#: pipes, and a few the start-up uses), and the memory one is reckoned to
#: take (an interpreter with the function's imports; a forked one shares most
#: pages at first, but they diverge as it runs).
FDS_PER_WORKER = 6
MEMORY_PER_WORKER = 64 << 20


def _available_memory():
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def fit_workers(parallel):
    """``(n, why)``: how many worker processes (``map_function``, tarpcat)
    may start at once: as many as the open-file limit allows (as
    :func:`fit_parallel` for commands) and as the available memory holds at
    :data:`MEMORY_PER_WORKER` each.  ``why`` says what cut ``n`` below
    ``parallel`` (None when nothing did)."""
    limit = fit_parallel(max(1, parallel * FDS_PER_WORKER // FDS_PER_COMMAND))[1]  # (raises the soft limit)
    n, why = parallel, None
    if limit is not None:
        by_fds = max(1, (limit - FDS_RESERVED) // FDS_PER_WORKER)
        if by_fds < n:
            n, why = by_fds, f"the open-file limit of {limit} (ulimit -n)"
    memory = _available_memory()
    if memory is not None:
        by_memory = max(1, memory // MEMORY_PER_WORKER)
        if by_memory < n:
            n, why = by_memory, f"the available memory ({memory >> 20} MiB, {MEMORY_PER_WORKER >> 20} MiB a worker)"
    return n, why
