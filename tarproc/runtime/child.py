"""THE way the library starts a child process: :class:`Child` (with
``subprocess``) and :class:`Spawner` (with ``posix_spawn``, for per-sample
commands).  Every process the library starts (inputs, decoder programs,
uploads and other client commands, tarsplit's post commands, kujob's
shards, per-sample commands) goes through one of them, and so gets the same
rules:

- **its own process group** (or session), so that :meth:`Child.kill` ends
  the child and everything it started (``pipe:a | b``, ``sh -c``'s
  children), and a Ctrl-C to the terminal's group reaches us first;
- **death with the parent**: the child gets a parent-death signal
  (:func:`~tarproc.runtime.procs.pdeathsig`, set from a thread that lives
  as long as the process: :func:`~tarproc.runtime.procs.popen`); a shell
  command that is one simple command is ``exec``'d, so the signal reaches
  the program itself (:func:`~tarproc.runtime.procs.exec_simple`); a
  compound shell command, a ``posix_spawn`` child (no hook to set the
  signal) and anything asked to be watched is registered with a
  :class:`~tarproc.runtime.procs.Watchdog`, which kills its whole group if
  this process dies, even by ``SIGKILL``;
- **a bounded stderr tail**: stderr is read as it comes by a thread that
  keeps its last ``tail_bytes`` (``TARPROC_TAIL_BYTES``, passed in by whoever
  holds the settings; default :data:`~tarproc.core.limits.TAIL_BYTES`, the
  setting's default) (a chatty child never blocks on a full pipe, never
  fills our memory or disk), and :meth:`Child.tail` gives its last line for
  the error message;
- **messages that name the URL with credentials removed**: ``name`` is
  kept through :func:`~tarproc.core.limits.hide_credentials`, the tail
  through :func:`~tarproc.core.limits.safe_text`;
- **exit statuses that are right with SIGCHLD ignored** (an inherited
  ``SIG_IGN`` makes the kernel reap children at once, and a failure look
  like success): the disposition is put back to the default before a
  child starts (:func:`~tarproc.runtime.procs.default_sigchld`);
- **valid standard streams with ours closed** (``2>&-``): a stream the child
  would inherit from a closed descriptor of ours is ``/dev/null`` instead,
  so the child's first ``open`` never becomes its fd 2 and receives its
  diagnostics.
"""

import os
import threading

from .procs import Watchdog, default_sigchld, exec_simple, killpg, pdeathsig, popen, wait_nowait

#: Characters of a child's last stderr line kept for a message.
TAIL_CHARS = 300

_SHARED = None  # (pid, Watchdog) for children that ask for one and bring none


def shared_watchdog():
    """The watchdog of this process (made on first use, and again in a
    forked child) for children that need one and were given none."""
    global _SHARED
    if _SHARED is None or _SHARED[0] != os.getpid():
        _SHARED = (os.getpid(), Watchdog())
    return _SHARED[1]


_TRACKED = {}  # {pgid: owner pid} of the children started with track=True and not yet ended
_STARTING = set()  # threads of this process inside Child(): the child may exist, not yet registered
_DEFERRED = []  # what a signal handler asked to run once those starts are complete (when_started)


def when_started(fn, this_thread=False):
    """For a signal handler that ends this process's children
    (:func:`stop_tracked`) and exits, or raises to unwind: call ``fn()`` now
    or, when a :class:`Child` is being started (its process may already
    run, not yet registered with :func:`stop_tracked` and the watchdog), as
    soon as that start is complete, so that what ``fn`` ends or unwinds
    finds the child registered.  (A handler that ran in that gap left the
    new child and its own children running.)  ``this_thread``: only a start
    in this thread counts, and ``fn`` runs in it (a handler that raises:
    the exception belongs to the main thread)."""
    me = threading.get_ident()
    if (me in _STARTING) if this_thread else _STARTING:
        _DEFERRED.append((fn, me if this_thread else None))
    else:
        fn()


def _run_deferred(me):
    for entry in list(_DEFERRED):
        fn, who = entry
        if who == me or (who is None and not _STARTING):
            try:
                _DEFERRED.remove(entry)
            except ValueError:  # (run by another thread meanwhile)
                continue
            fn()


def _forget_starts():
    _STARTING.clear()  # the threads that were starting children are not in a forked child
    _DEFERRED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_starts)


def stop_tracked():
    """Kill every child (its whole process group) started with ``track=True``
    by this process and not yet ended: for a signal handler or an exit path
    that cannot unwind to the readers (a job process told to stop).  Also
    run at exit."""
    me = os.getpid()
    for pgid, owner in list(_TRACKED.items()):
        if owner == me:  # never a parent's, in a forked child
            killpg(pgid)
        _TRACKED.pop(pgid, None)


def _track(pid):
    if not _TRACKED:
        import atexit

        atexit.register(stop_tracked)  # (registering twice is harmless: stop_tracked is idempotent)
    _TRACKED[pid] = os.getpid()


def _is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _inherited(fd):
    """Our descriptor ``fd`` for a child to inherit, or ``/dev/null`` when it
    is closed (``2>&-``)."""
    import subprocess

    return fd if _is_open(fd) else subprocess.DEVNULL


def _stream(value, std_fd):
    import subprocess

    if value is None:
        return subprocess.DEVNULL
    if value == "pipe":
        return subprocess.PIPE
    if value == "inherit":
        return _inherited(std_fd)
    if value == "stderr":  # (a child's stdout sent to our stderr: post commands)
        return _inherited(2)
    return value


def _drain(stream, limit=None):
    """Read a child's stderr to its end in a daemon thread, keeping only its
    last ``limit`` bytes (:class:`~tarproc.core.limits.Tail`; ``None``: the
    default): a chatty child never blocks on a full pipe, never fills our
    memory.  Returns the thread; ``thread.tail`` is the tail."""
    import threading

    from ..core.limits import Tail

    tail = Tail(limit)

    def drain():
        fd = stream.fileno()
        try:
            while True:
                b = os.read(fd, 1 << 16)
                if not b:
                    break
                tail.write(b)
        except (OSError, ValueError):
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass

    t = threading.Thread(target=drain, name="tarproc-stderr", daemon=True)
    t.tail = tail
    t.start()
    return t


def first_word(cmd):
    """The program of a command, for messages (``curl``, ``aws``)."""
    if isinstance(cmd, (list, tuple)):
        return os.path.basename(str(cmd[0])) if cmd else "command"
    words = cmd.split()
    return words[0] if words else "command"


def _startable(program):
    """Whether ``program`` (an argument vector's first word) names an
    executable file (looked up in ``PATH`` when it has no ``/``)."""
    import shutil

    path = program if "/" in program else shutil.which(program)
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def _setup(session, watchdog_fd=None):
    def setup():
        if session:
            os.setsid()
        else:
            os.setpgid(0, 0)
        if watchdog_fd is not None:  # registered before the command runs (see Watchdog.fd_for_child)
            try:
                os.write(watchdog_fd, b"%d\n" % os.getpid())
            except OSError:
                pass
        pdeathsig()
    return setup


class Child:
    """One child process.  ``command`` is a shell command (``str``) or an
    argument vector; ``name`` is what messages name (a URL, a shard; its
    credentials are hidden); ``what`` the program they name (default: the
    command's first word).

    ``stdin``, ``stdout``: ``None`` (``/dev/null``), ``"pipe"``,
    ``"inherit"`` (ours, ``/dev/null`` when ours is closed), ``"stderr"``
    (stdout only: to our stderr) or a descriptor.  ``stderr``: ``"tail"``
    (read as it comes, its last bytes kept for :meth:`tail` and
    :meth:`kept_stderr`: at most ``tail_bytes``, default
    :data:`~tarproc.core.limits.TAIL_BYTES`, ``TARPROC_TAIL_BYTES``'s
    default), ``"pipe"`` (read by the caller, who bounds what it keeps),
    ``"inherit"``, ``None`` or a descriptor.  ``session``: a new session rather than a new process group.
    ``watch``: register the group with a watchdog (``None``: when the shell
    command is not one simple command); ``watchdog``: which one (default
    :func:`shared_watchdog`).  ``track``: killed by :func:`stop_tracked`.
    Raises ``OSError`` when it cannot start (see :meth:`start_error`)."""

    def __init__(self, command, name="", what=None, stdin=None, stdout="pipe", stderr="tail", env=None, cwd=None,
                 pass_fds=(), session=False, watch=None, watchdog=None, track=False, tail_bytes=None):
        import subprocess

        from ..core.limits import hide_credentials

        self.name = hide_credentials(str(name))
        self.what = what or first_word(command)
        self.command = command
        shell = isinstance(command, str)
        if shell:
            cmd = exec_simple(command)
            if watch is None:
                watch = not cmd.startswith("exec ") and not command.startswith("exec ")
        else:
            cmd = list(command)
        default_sigchld()  # an inherited SIG_IGN would make every exit status 0
        err = stderr
        if stderr in ("tail", "pipe"):
            err = subprocess.PIPE
        elif stderr == "inherit":
            err = _inherited(2)
        elif stderr is None:
            err = subprocess.DEVNULL
        dog = (watchdog or shared_watchdog()) if watch else None
        me = threading.get_ident()
        _STARTING.add(me)  # from the fork to the registration: see when_started
        try:
            self.proc = popen(cmd, shell=shell, stdin=_stream(stdin, 0), stdout=_stream(stdout, 1), stderr=err,
                              env=env, cwd=cwd, pass_fds=pass_fds,
                              # (only a program that will start: a shell command, or an executable
                              # file, so no group is registered whose leader never ran and whose
                              # number could be reused)
                              preexec_fn=_setup(session, dog.fd_for_child() if dog is not None
                                                and (shell or _startable(cmd[0])) else None))
            try:
                self.pid = self.proc.pid
                self.args = self.proc.args
                self.stdin, self.stdout, self.stderr = self.proc.stdin, self.proc.stdout, self.proc.stderr
                self.returncode = None
                self.watchdog = dog
                if dog is not None:
                    dog.add(self.pid)  # (already registered by the child itself when the helper runs)
                self.tracked = track
                if track:
                    _track(self.pid)
                self._drain = None
                if stderr == "tail":
                    self._drain = _drain(self.proc.stderr, tail_bytes)
            except BaseException:  # (a signal handler raised here: the child is not left running)
                killpg(self.proc.pid)
                self.proc.wait()
                raise
        finally:
            _STARTING.discard(me)
            if _DEFERRED:
                _run_deferred(me)

    @staticmethod
    def start_error(name, command, error):
        """The message for a child that could not start (``OSError``)."""
        from ..core.limits import hide_credentials

        return hide_credentials(f"{name}: cannot start {command!r}: {error.strerror or error}")

    def poll(self):
        if self.returncode is None and self.proc.poll() is not None:
            self._ended()
        return self.proc.returncode

    def _ended(self):
        if self.returncode is not None:
            return
        if self.watchdog is not None:
            self.watchdog.discard(self.pid)
            self.watchdog = None
        if self.tracked:
            _TRACKED.pop(self.pid, None)
        self.returncode = self.proc.returncode

    def wait(self, timeout=None):
        """Wait for the end (``subprocess.TimeoutExpired`` after ``timeout``
        seconds); its exit code (``-N``: killed by signal N)."""
        if self.returncode is not None:
            return self.returncode
        if self.watchdog is not None and timeout is None:
            wait_nowait(self.pid)  # exited, not reaped: its group number is still ours to discard
            self.watchdog.discard(self.pid)
            self.watchdog = None
        self.proc.wait(timeout)
        self._ended()
        return self.returncode

    def signal_group(self, sig):
        """Send ``sig`` to the child's process group."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self):
        """Kill the child and everything it started (its process group, which
        outlives a leader that has exited), and wait for it."""
        killpg(self.pid)
        return self.wait()

    def tail(self):
        """The last non-blank line the child wrote on stderr (at most
        :data:`TAIL_CHARS` characters, safe to show: credentials hidden,
        controls escaped), or ``""``."""
        from ..core.limits import safe_text

        drain = self._drain
        if drain is None:
            return ""
        drain.join(5)
        lines = [ln for ln in drain.tail.getvalue().decode("utf-8", "replace").splitlines() if ln.strip()]
        return safe_text(lines[-1].strip(), TAIL_CHARS) if lines else ""

    def kept_stderr(self):
        """``(bytes, dropped)``: the last bytes the child wrote on stderr (at
        most its ``tail_bytes``) and how many came before them."""
        drain = self._drain
        if drain is None:
            return b"", 0
        drain.join(5)
        return drain.tail.getvalue(), drain.tail.dropped

    def tail_line(self):
        """``": LAST LINE"`` of :meth:`tail`, or ``""``: the end of an error message."""
        text = self.tail()
        return ": " + text if text else ""

    def failed(self, what=None):
        """``PROGRAM failed with exit status N: LAST LINE`` (``what`` replaces
        the program's name)."""
        from ..errors import describe_exit

        return f"{what or self.what} failed with {describe_exit(self.returncode)}{self.tail_line()}"

    def failure(self, what=None):
        """``NAME: PROGRAM failed with exit status N: LAST LINE``: the one
        line of a failed child."""
        return f"{self.name}: {self.failed(what)}"

    def communicate(self, input=None, timeout=None, limit=None):
        """Feed ``input`` (bytes) to the child's stdin (when it is a pipe, then
        closed), read its stdout (when it is a pipe) to the end and wait for
        it; returns the stdout (``bytes``, ``b""`` without a pipe; with
        ``limit``, its first ``limit`` bytes, the rest read and dropped).  After
        ``timeout`` seconds the whole group is killed and
        ``subprocess.TimeoutExpired`` raised (as ``subprocess.run`` does);
        an exception in the caller's thread (Ctrl-C) kills it too."""
        import threading
        import time

        out = []

        def feed():
            try:
                if input:
                    self.proc.stdin.write(input)
            except (OSError, ValueError):  # (it exited without reading: its status tells)
                pass
            finally:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass

        def read():
            try:
                if limit is None:
                    out.append(self.proc.stdout.read())
                    return
                kept = bytearray()
                read_some = getattr(self.proc.stdout, "read1", self.proc.stdout.read)
                while True:
                    chunk = read_some(1 << 16)
                    if not chunk:
                        break
                    kept += chunk[:max(0, limit - len(kept))]
                out.append(bytes(kept))
            except (OSError, ValueError):
                pass

        threads = []
        if self.proc.stdin is not None:
            threads.append(threading.Thread(target=feed, name="tarproc-stdin", daemon=True))
        if self.proc.stdout is not None:
            threads.append(threading.Thread(target=read, name="tarproc-stdout", daemon=True))
        for t in threads:
            t.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self.wait(timeout)
            for t in threads:  # (a descendant may still hold the pipe: bounded by the same deadline)
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
                if t.is_alive():
                    import subprocess

                    raise subprocess.TimeoutExpired(self.args, timeout)
        except BaseException:
            killpg(self.pid)
            if self.returncode is None:
                self.wait()
            raise
        finally:
            if self.proc.stdout is not None:
                for t in threads:
                    t.join(1)
                try:
                    self.proc.stdout.close()
                except OSError:
                    pass
        return out[0] if out else b""

    def close_pipes(self):
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass


def run(command, name, what=None, stdin=None, error=None, accept=None, **kw):
    """Run ``command`` to its end as a :class:`Child` and return its stdout
    (``bytes``); a failure (or a start that failed) raises ``error``
    (an exception class) with :meth:`Child.failure`'s message, unless
    ``accept(child, out)`` says the failure is an answer (``aws s3 ls`` of an
    empty prefix exits 1)."""
    try:
        child = Child(command, name, what, stdin=stdin, stdout="pipe", **kw)
    except OSError as e:
        raise error(Child.start_error(name, command, e)) from None
    try:
        out = child.stdout.read()
    except BaseException:
        child.kill()
        raise
    finally:
        child.stdout.close()
    child.wait()
    if child.returncode != 0 and not (accept is not None and accept(child, out)):
        raise error(child.failure(what))
    return out


class Spawner:
    """Per-sample commands started with ``posix_spawn`` (the second way a
    :class:`Child` starts, for ``map_command``: no fork of a large
    interpreter, the argument vector built once).  ``spawn(dfd, cwd, stdin,
    out)`` starts ``argv`` (``argv[0]`` a path) in directory ``dfd``
    (``cwd``: a path to it, for the fallback) and returns a handle for
    :meth:`pid` and :meth:`reap`.

    The child starts in a new session (its own group), with stdin, stdout
    and stderr from descriptors, ``SIGPIPE`` and ``SIGXFSZ`` at their
    defaults and every other descriptor closed; posix_spawn has no hook to
    set a parent-death signal in the child, so its group is registered with
    :attr:`watchdog`.  Where the C library lacks the needed calls, a
    :class:`Child` starts it, with the same effect."""

    def __init__(self, argv):
        self.argv = list(argv)
        self.libc = None
        default_sigchld()  # an inherited SIG_IGN would make every exit status 0
        # the watchdog kills the command's group (its session) if we die; its helper
        # starts now, not at the first command's registration (starting a Python
        # takes tens of milliseconds, in which a parent SIGKILLed left the first
        # commands running with nothing registered)
        self.watchdog = Watchdog()
        self.watchdog.fd_for_child()
        try:
            self._setup_libc()
        except (OSError, AttributeError, ImportError, ValueError):
            self.libc = None

    def _setup_libc(self):
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        for name in ("posix_spawn", "posix_spawn_file_actions_addfchdir_np", "posix_spawn_file_actions_addclosefrom_np",
                     "posix_spawn_file_actions_adddup2", "posix_spawnattr_setsigdefault"):
            getattr(libc, name)  # AttributeError: use the fallback
        # the file actions are built holding the GIL (a CDLL call releases and retakes it: with
        # other threads running, each such call can be a thread switch); only posix_spawn waits
        held = ctypes.PyDLL(None)
        self._actions = tuple(getattr(held, "posix_spawn_file_actions_" + name) for name in
                              ("init", "adddup2", "addfchdir_np", "addclosefrom_np", "destroy"))
        args = [os.fsencode(a) for a in self.argv]
        if any(b"\0" in a for a in args):
            raise ValueError("NUL in an argument")
        self._args = args  # keeps the buffers alive
        self._argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
        self._path = args[0]
        self._attr = ctypes.create_string_buffer(1024)  # posix_spawnattr_t (336 bytes on glibc)
        self._sigs = ctypes.create_string_buffer(256)  # sigset_t (128 bytes)
        if libc.posix_spawnattr_init(self._attr) != 0:
            raise OSError("posix_spawnattr_init failed")
        libc.sigemptyset(self._sigs)
        for sig in ("SIGPIPE", "SIGXFSZ"):  # what Popen's restore_signals resets
            if hasattr(signal, sig):
                libc.sigaddset(self._sigs, int(getattr(signal, sig)))
        empty = ctypes.create_string_buffer(256)
        libc.sigemptyset(empty)
        libc.posix_spawnattr_setsigdefault(self._attr, self._sigs)
        libc.posix_spawnattr_setsigmask(self._attr, empty)
        # POSIX_SPAWN_SETSIGDEF 0x04, POSIX_SPAWN_SETSIGMASK 0x08, POSIX_SPAWN_SETSID 0x80 (glibc)
        if libc.posix_spawnattr_setflags(self._attr, ctypes.c_short(0x04 | 0x08 | 0x80)) != 0:
            raise OSError("posix_spawnattr_setflags failed")
        self._fa = ctypes.create_string_buffer(1024)  # posix_spawn_file_actions_t (80 bytes on glibc)
        self._pid = ctypes.c_int()
        self._environ = ctypes.c_void_p.in_dll(libc, "environ")
        self._byref = ctypes.byref
        self.libc = libc

    def spawn(self, dfd, cwd, stdin, out):
        libc = self.libc
        if libc is None:
            return Child(self.argv, self.argv[0], cwd=cwd, stdin=stdin, stdout=out, stderr=out, session=True,
                         watch=True, watchdog=self.watchdog)
        fa = self._fa
        init, dup2, fchdir, closefrom, destroy = self._actions
        if init(fa) != 0:
            raise OSError("posix_spawn_file_actions_init failed")
        try:
            if dup2(fa, stdin, 0) or dup2(fa, out, 1) or dup2(fa, out, 2) or fchdir(fa, dfd) or closefrom(fa, 3):
                raise OSError(f"bad descriptor for posix_spawn ({stdin}, {out}, {dfd})")
            err = libc.posix_spawn(self._byref(self._pid), self._path, fa, self._attr, self._argv,
                                   self._environ)  # the current environment (os.environ writes go through putenv)
        finally:
            destroy(fa)
        if err:
            raise OSError(err, os.strerror(err))
        self.watchdog.add(self._pid.value)
        return self._pid.value

    @staticmethod
    def pid(handle):
        return handle if isinstance(handle, int) else handle.pid

    def reap(self, handle):
        """Wait for the (exited) process; its exit code (``-N``: signal N)."""
        if not isinstance(handle, int):
            return handle.wait()
        self.watchdog.discard(handle)  # before the wait: its number stays taken until then
        while True:
            try:
                _, status = os.waitpid(handle, 0)
                return os.waitstatus_to_exitcode(status)
            except InterruptedError:
                continue
            except ChildProcessError:  # reaped by someone else (SIGCHLD ignored)
                return 0
