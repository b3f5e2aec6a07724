"""Map a shell command or a Python function over samples, in parallel.

Two entry points, both taking an iterable of samples and returning an
iterator of samples in input order (or as they finish, ``ordered=False``)::

    from tarproc import iter_samples, write_samples
    from tarproc.proc import map_command, map_function

    samples = iter_samples("small.tar")
    out = map_command(samples, "gm mogrify -resize 256x256 *.jpg", parallel=4)
    write_samples("out.tar", out)

    def to_gray(sample):                      # runs in worker processes
        ...
        return sample                         # a sample, a list of samples, or None
    write_samples("gray.tar", map_function(iter_samples("small.tar"), to_gray))

**Command mode** (:func:`map_command`).  For each sample a private working
directory (mode 0700) is made under one run directory (``workdir``, default
``$TMPDIR``); the fields are written there as ``sample.<field>`` plus
``sample.__key__``; the command runs there with ``bash -c`` (or the
``interpreter``), stdin from ``/dev/null``, stdout and stderr to a log that is
passed to ``echo`` (default: our stderr) or stored in a field (``add_log``).
Each command starts in its own session, so the whole process group can be
killed: on ``timeout``, when the command exits (no stray background
processes survive it), and when the iterator is closed.  Afterwards the
regular files ``sample.*`` form the output sample with the same key (or the
content of ``sample.__key__``); symbolic links are refused and never
followed, FIFOs and other special files are ignored.  With ``subdirs`` every
subdirectory becomes a sample (key from its ``sample.__key__`` or
``KEY/NAME``); with ``multi`` files ``sample-N.*`` become samples with key
``KEY-N``.  The directories are removed when the sample is done and when the
iterator is closed (Ctrl-C, SIGTERM, an error), unless ``keepdir``.

The commands run from a small pool of threads in this process, so a sample
costs one ``fork``/``exec`` of the interpreter and a few file operations;
samples are read ahead by at most ``2 * parallel``, so memory stays bounded.

**Function mode** (:func:`map_function`).  The function runs in ``parallel``
persistent worker processes (forked), each fed over its own pipe.  Samples
travel in batches pickled once by the C pickler; the function receives a
sample dict and returns a sample, a list of samples or ``None`` (drop).  A
returned sample without ``__key__`` gets the input's key; ``str`` values are
encoded as UTF-8.  The function can be given as a callable or as
``"module:function"`` / ``"path/to/file.py:function"``.

**Errors** follow ``error_handling``: ``"skip"`` drops a failed sample,
``"ignore"`` keeps what it produced (for a function: the input sample),
``"abort"`` raises :class:`~tarproc.errors.SampleFailed` after every sample
before it has been yielded.  Every failure is passed to ``on_error(message)``
(default: a line on stderr) with the key, the exit status and the last lines
of output, and counted in ``stats.failed``.
"""

import os
import sys
import threading

from .errors import BadSample, SampleFailed, UsageError, describe_exit

ERROR_MODES = ("skip", "ignore", "abort")
#: Lines of a failed command's output shown in its report.
TAIL_LINES = 10


# ---------------------------------------------------------------- helpers


def default_parallel():
    """All the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _stderr_report(prog):
    def report(message):
        sys.stderr.flush()
        print(f"{prog}: {message}", file=sys.stderr, flush=True)

    return report


def _stderr_echo(data):
    if data:
        sys.stderr.flush()
        try:
            sys.stderr.buffer.write(data)
            sys.stderr.buffer.flush()
        except (AttributeError, ValueError):
            sys.stderr.write(data.decode("utf-8", "replace"))
            sys.stderr.flush()


def _tail(data, n=TAIL_LINES):
    text = data.decode("utf-8", "replace").rstrip("\n")
    if not text:
        return ""
    lines = text.splitlines()[-n:]
    return "\n" + "\n".join("  | " + line for line in lines)


def bad_field_name(field):
    """Why ``field`` cannot be a file name suffix (``None`` if it can)."""
    if not isinstance(field, str) or not field:
        return "empty field name"
    if "/" in field or "\0" in field:
        return f"field name {field!r} contains '/' or NUL"
    if field in (".", ".."):
        return f"field name {field!r}"
    return None


def bad_key(key):
    """Why ``key`` cannot be written as a sample key (``None`` if it can)."""
    if not isinstance(key, str) or not key:
        return "empty key"
    if "\0" in key or key.startswith("/") or ".." in key.split("/"):
        return f"unsafe key {key!r}"
    if key.endswith("/") or "." in key[key.rfind("/") + 1 :]:
        return f"key {key!r} has a dot in its file name or ends in '/'"
    return None


def _check_mode(error_handling):
    if error_handling not in ERROR_MODES:
        raise UsageError(f"error handling must be one of {', '.join(ERROR_MODES)}, not {error_handling!r}")


# ---------------------------------------------------------------- the engine


class _Result:
    """What a job hands back to the main thread."""

    __slots__ = ("key", "outputs", "error", "log", "sample")

    def __init__(self, key, outputs=(), error=None, log=b"", sample=None):
        self.key = key
        self.outputs = outputs  # list of samples
        self.error = error  # None or message (str)
        self.log = log  # the command's output (bytes)
        self.sample = sample  # the input (function mode, for "ignore")


def _engine(samples, submit, window, ordered, handle, on_stall=None, finish=None):
    """Read ``samples`` in a thread, ``submit(index, item, done)`` each, at
    most ``window`` unfinished; yield ``handle(result)``'s samples in input
    order (or as they finish).  ``done(index, results)`` may be called from
    any thread with the item's result.  ``finish(n)`` (called in the reader
    thread after ``n`` items) returns how many results to expect.  An error
    while reading is raised after every result before it has been handled."""
    import queue

    inbox = queue.SimpleQueue()
    slots = threading.Semaphore(window)
    closing = threading.Event()

    def done(index, result):
        inbox.put(("done", index, result))

    def reader():
        n = 0
        error = None
        try:
            for item in samples:
                while not slots.acquire(timeout=1.0):
                    if closing.is_set():
                        return
                if closing.is_set():
                    return
                submit(n, item, done)
                n += 1
        except BaseException as e:  # forwarded to the main thread
            error = e
        total = n
        if finish is not None:
            try:
                total = finish(n)
            except BaseException as e:
                error = error or e
        inbox.put(("end", total, error))

    thread = threading.Thread(target=reader, name="tarproc-reader", daemon=True)
    thread.start()
    total = None
    error = None
    emitted = 0
    pending = {}
    try:
        while total is None or emitted < total:
            try:
                kind, index, payload = inbox.get_nowait()
            except queue.Empty:
                if on_stall is not None:
                    on_stall()
                kind, index, payload = inbox.get()
            if kind == "done":
                if ordered:
                    pending[index] = payload
                    while emitted in pending:
                        result = pending.pop(emitted)
                        emitted += 1
                        slots.release()
                        yield from handle(result)
                else:
                    emitted += 1
                    slots.release()
                    yield from handle(payload)
            else:
                total = index
                error = payload
        if error is not None:
            raise error
    finally:
        closing.set()


# ---------------------------------------------------------------- command mode


class CommandRunner:
    """Runs one command per sample in a private directory; thread-safe.

    ``run(index, sample)`` returns a :class:`_Result`.  ``close()`` kills every
    running command's process group and removes the run directory."""

    def __init__(self, command=None, script=None, interpreter="bash", base="sample", subdirs=False,
                 multi=False, timeout=None, workdir=None, keepdir=False, add_log=None):
        import tempfile

        if (command is None) == (script is None):
            raise UsageError("give a command or a script (not both)")
        if not base or "/" in base or "\0" in base or base in (".", ".."):
            raise UsageError(f"bad base name {base!r}")
        if add_log is not None and bad_field_name(add_log):
            raise UsageError(f"--add-log: {bad_field_name(add_log)}")
        if subdirs and multi:
            raise UsageError("subdirectories (-S) and multiple outputs (-m) cannot be combined")
        if timeout is not None and timeout <= 0:
            raise UsageError("the timeout must be > 0 seconds")
        if script is not None:
            if not os.path.isfile(script):
                raise UsageError(f"script {script!r} not found")
            self.argv = [interpreter, os.path.abspath(script)]
        else:
            self.argv = [interpreter, "-c", command]
        import shutil

        exe = shutil.which(interpreter)
        if exe is None:
            raise UsageError(f"interpreter {interpreter!r} not found")
        self.argv[0] = exe
        self.base = base
        self.subdirs = subdirs
        self.multi = multi
        self.timeout = timeout
        self.keepdir = keepdir
        self.add_log = add_log
        self.parent = workdir or tempfile.gettempdir()
        if not os.path.isdir(self.parent):
            raise UsageError(f"working directory base {self.parent!r} does not exist")
        self.root = None
        self.devnull = None
        self.lock = threading.Lock()
        self.local = threading.local()
        self.fds = []
        self.running = set()
        self.closed = False

    def start(self):
        """Make the run directory (mode 0700); ``close()`` removes it."""
        import tempfile

        self.root = tempfile.mkdtemp(prefix="tarproc-", dir=self.parent)
        self.devnull = os.open(os.devnull, os.O_RDONLY)

    # -- one sample

    def run(self, index, sample):
        key = sample.get("__key__")
        if not isinstance(key, str) or not key:
            return _Result(key, error="sample has no __key__")
        d = dfd = None
        try:
            d, logfd = self._slot(index)
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            why = self._write_fields(dfd, sample)
            if why:
                return _Result(key, error=why)
            os.close(dfd)
            dfd = None
            status = self._execute(d, logfd)
            log = self._read_log(logfd)
            if status == "closed":
                return _Result(key, error="stopped", log=log)
            if status == "timeout":
                return _Result(key, error=f"timed out after {self.timeout:g} s (process group killed)", log=log)
            outputs, why = self._collect(d, key, sample)
            if why:
                return _Result(key, outputs, error=why, log=log)
            if status != 0:
                return _Result(key, outputs, error="command " + ("failed with " if status > 0 else "") + describe_exit(status), log=log)
            if self.add_log is not None:
                for out in outputs:
                    out[self.add_log] = log
            return _Result(key, outputs, log=log)
        except OSError as e:
            return _Result(key, error=f"working directory: {e.strerror or e}")
        finally:
            if dfd is not None:
                os.close(dfd)
            if d is not None and not self.keepdir:
                self._clear(d)

    def _slot(self, index):
        """The working directory and log descriptor for a sample.  Each
        worker thread reuses one directory, emptied after every sample
        (creating and removing a directory per sample costs milliseconds on
        a journaling file system); ``keepdir`` gives every sample its own."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        if self.keepdir:
            d = os.path.join(self.root, f"{index:06d}")
            os.mkdir(d, 0o700)
            logfd = os.open(d + ".log", flags, 0o600)
            with self.lock:
                self.fds.append(logfd)
            return d, logfd
        local = self.local
        d = getattr(local, "dir", None)
        if d is None:
            with self.lock:
                n = len(self.fds)
                d = os.path.join(self.root, f"w{n}")
                logfd = os.open(d + ".log", flags, 0o600)
                self.fds.append(logfd)
            os.mkdir(d, 0o700)
            local.dir, local.logfd = d, logfd
        else:
            logfd = local.logfd
            os.ftruncate(logfd, 0)
            os.lseek(logfd, 0, os.SEEK_SET)
        return d, logfd

    def _clear(self, d):
        """Empty a reused working directory (or make it anew if the command
        replaced it or changed its mode)."""
        import stat

        try:
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            dfd = None
        try:
            if dfd is not None:
                st = os.fstat(dfd)
                if stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid():
                    with os.scandir(dfd) as it:
                        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
                    for name, is_dir in names:
                        if is_dir:
                            _remove_tree(os.path.join(d, name))
                        else:
                            os.unlink(name, dir_fd=dfd)
                    return
        except OSError:
            pass
        finally:
            if dfd is not None:
                os.close(dfd)
        _remove_tree(d)
        try:
            os.mkdir(d, 0o700)
        except OSError:
            pass

    def _write_fields(self, dfd, sample):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        for field, value in sample.items():
            if field[:2] == "__" and field[-2:] == "__" and field != "__key__":
                continue
            why = bad_field_name(field)
            if why:
                return why
            if isinstance(value, str):
                value = value.encode("utf-8", "surrogateescape")  # keys keep non-UTF-8 bytes
            elif not isinstance(value, (bytes, bytearray, memoryview)):
                return f"field {field!r} is {type(value).__name__}, not bytes or str"
            fd = os.open(f"{self.base}.{field}", flags, 0o644, dir_fd=dfd)
            try:
                view = memoryview(value)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            finally:
                os.close(fd)
        return None

    def _execute(self, d, logfd):
        import subprocess

        with self.lock:
            if self.closed:
                return "closed"
            proc = subprocess.Popen(self.argv, cwd=d, stdin=self.devnull, stdout=logfd, stderr=logfd,
                                    close_fds=True, start_new_session=True)
            self.running.add(proc)
        timed_out = False
        try:
            if self.timeout is not None:
                timed_out = not _wait_exit(proc.pid, self.timeout)
                if timed_out:
                    _killpg(proc.pid)
            # Wait for the exit without reaping: the group id cannot be reused
            # while the leader is a zombie, so killing the group is safe.
            _wait_nowait(proc.pid)
            _killpg(proc.pid)
            rc = proc.wait()
        finally:
            with self.lock:
                self.running.discard(proc)
        if self.closed:
            return "closed"
        return "timeout" if timed_out else rc

    def _read_log(self, logfd):
        os.lseek(logfd, 0, os.SEEK_SET)
        chunks = []
        while True:
            b = os.read(logfd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)

    def _collect(self, d, key, sample):
        """The output samples of a finished command, and an error or None."""
        meta = {k: v for k, v in sample.items() if k[:2] == "__" and k[-2:] == "__" and k != "__key__"}
        try:
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as e:
            return [], f"working directory vanished: {e.strerror}"
        problem = None
        try:
            if self.subdirs:
                groups = []
                for name, is_dir in _entries(dfd):
                    if is_dir:
                        groups.append((name, name))
                groups.sort()
                outputs = []
                for name, _ in groups:
                    try:
                        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
                    except OSError:
                        continue
                    try:
                        files, why = _read_files(sub, self.base + ".")
                    finally:
                        os.close(sub)
                    if why:
                        problem = problem or f"{name}/{why}"
                    if files:
                        outputs.append(self._make_sample(files, f"{key}/{name}", meta))
            elif self.multi:
                files, problem = _read_files(dfd, self.base + "-")
                per = {}
                for field, data in files.items():
                    n, dot, rest = field.partition(".")
                    if not dot or not n or not rest:
                        continue
                    per.setdefault(n, {})[rest] = data
                outputs = [self._make_sample(per[n], f"{key}-{n}", meta) for n in sorted(per, key=_natural)]
            else:
                files, problem = _read_files(dfd, self.base + ".")
                outputs = [self._make_sample(files, key, meta)] if files else []
        finally:
            os.close(dfd)
        seen = set()
        for out in outputs:
            k = out["__key__"]
            why = bad_key(k)
            if why:
                return [], f"output {why}"
            if k in seen:
                return [], f"two outputs have the same key {k!r}"
            seen.add(k)
        # an output with no fields besides its key is no output
        outputs = [o for o in outputs if any(not (f[:2] == "__" and f[-2:] == "__") for f in o)]
        return outputs, problem

    def _make_sample(self, files, key, meta):
        out = dict(meta)
        newkey = files.pop("__key__", None)
        if newkey is not None:
            text = newkey.decode("utf-8", "surrogateescape").strip()
            key = text or key
        for field in list(files):
            if field[:2] == "__" and field[-2:] == "__":
                del files[field]
        out.update(files)
        out["__key__"] = key
        return out

    # -- cleanup

    def kill_all(self):
        """Kill the process group of every running command (from any thread)."""
        with self.lock:
            self.closed = True
            procs = list(self.running)
        for proc in procs:
            _killpg(proc.pid)

    def close(self):
        self.kill_all()
        if self.devnull is not None:
            os.close(self.devnull)
            self.devnull = None
        with self.lock:
            fds, self.fds = self.fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if self.root is not None and not self.keepdir:
            _remove_tree(self.root)


def _natural(s):
    return (0, int(s), s) if s.isdigit() else (1, 0, s)



def _entries(dfd):
    """``(name, is_real_directory)`` of a directory given by descriptor."""
    with os.scandir(dfd) as it:
        for entry in it:
            try:
                yield entry.name, entry.is_dir(follow_symlinks=False)
            except OSError:
                continue


def _read_files(dfd, prefix):
    """``{suffix: bytes}`` of the regular files named ``prefix + suffix`` in a
    directory; ``(files, problem)``.  A symlink is a problem (the other files
    are still read), never followed;
    FIFOs, directories and other special files are ignored."""
    import stat

    files = {}
    problem = None
    with os.scandir(dfd) as it:
        entries = [e for e in it if e.name.startswith(prefix) and len(e.name) > len(prefix)]
    for entry in sorted(entries, key=lambda e: e.name):
        name = entry.name
        try:
            if entry.is_symlink():
                problem = problem or f"{name} is a symbolic link: refused"
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except OSError as e:
            import errno

            if e.errno == errno.ELOOP:
                problem = problem or f"{name} is a symbolic link: refused"
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            chunks = []
            while True:
                b = os.read(fd, max(1 << 16, st.st_size + 1))
                if not b:
                    break
                chunks.append(b)
            files[name[len(prefix):]] = b"".join(chunks) if len(chunks) != 1 else chunks[0]
        finally:
            os.close(fd)
    return files, problem


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


def _wait_nowait(pid):
    while True:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


def _killpg(pgid):
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _remove_tree(path):
    """Remove a directory tree, also one whose modes the command changed."""
    import shutil

    if not os.path.lexists(path):
        return
    try:
        shutil.rmtree(path)
        return
    except OSError:
        pass
    for top, dirs, _ in os.walk(path):
        for name in dirs:
            p = os.path.join(top, name)
            try:
                if not os.path.islink(p):
                    os.chmod(p, 0o700)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


class _ThreadPool:
    """``n`` daemon threads running ``fn(index, item)`` for submitted items."""

    def __init__(self, n, fn):
        import queue

        self.fn = fn
        self.tasks = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"tarproc-worker-{i}", daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def _work(self):
        while True:
            task = self.tasks.get()
            if task is None:
                return
            index, item, done = task
            try:
                result = self.fn(index, item)
            except BaseException as e:  # a bug: report it as the sample's failure
                result = _Result(item.get("__key__") if isinstance(item, dict) else None,
                                 error=f"internal error: {type(e).__name__}: {e}")
            done(index, result)

    def submit(self, index, item, done):
        self.tasks.put((index, item, done))

    def stop(self, wait=None):
        for _ in self.threads:
            self.tasks.put(None)
        if wait:
            import time

            deadline = time.monotonic() + wait
            for t in self.threads:
                t.join(max(0.0, deadline - time.monotonic()))


def _handler(error_handling, stats, on_error, echo, quiet_log):
    """The main-thread part: count, report, apply the error policy."""

    def handle(result):
        if result.error is not None:
            if stats is not None:
                stats.failed += 1
            tail = _tail(result.log) if result.log else ""
            what = "aborting" if error_handling == "abort" else (
                "kept what it produced" if error_handling == "ignore" else "skipped")
            message = f"sample {result.key!r}: {result.error} ({what}){tail}"
            if error_handling == "abort":
                raise SampleFailed(message)
            on_error(message)
            if error_handling == "skip":
                return
        elif result.log and not quiet_log:
            echo(result.log)
        if not result.outputs:
            if stats is not None and result.error is None:
                stats.skipped += 1
            return
        yield from result.outputs

    return handle


def _stall():
    from .urls import _on_stall

    _on_stall()


def map_command(samples, command=None, parallel=None, *, script=None, interpreter="bash", base="sample",
                error_handling="skip", subdirs=False, multi=False, ordered=True, timeout=None,
                workdir=None, keepdir=False, add_log=None, stats=None, on_error=None, echo=None,
                quiet=False, prog="tarproc"):
    """Run ``command`` (a shell command line, or ``script=FILE``) on every
    sample; yield the output samples (see the module documentation).

    ``parallel`` commands run at once (default: all cores).  ``echo(bytes)``
    receives each successful command's output (default: stderr; ``quiet``
    drops it; with ``add_log`` it is stored in that field instead).
    Closing the iterator (or an exception in the consumer) kills running
    commands and removes the working directories."""
    _check_mode(error_handling)
    parallel = parallel or default_parallel()
    if parallel < 1:
        raise UsageError("parallel must be >= 1")
    runner = CommandRunner(command, script, interpreter, base, subdirs, multi, timeout, workdir, keepdir, add_log)
    return _run_commands(samples, runner, parallel, error_handling, ordered, stats,
                         on_error or _stderr_report(prog), echo or _stderr_echo, quiet or add_log is not None)


def _run_commands(samples, runner, parallel, error_handling, ordered, stats, on_error, echo, quiet_log):
    runner.start()
    pool = None
    try:
        pool = _ThreadPool(parallel, runner.run)
        handle = _handler(error_handling, stats, on_error, echo, quiet_log)
        yield from _engine(samples, pool.submit, 2 * parallel + 2, ordered, handle, on_stall=_stall)
    finally:
        runner.kill_all()
        if pool is not None:
            pool.stop(wait=10)
        runner.close()
        if runner.keepdir:
            on_error(f"working directories kept in {runner.root}")


# ---------------------------------------------------------------- function mode


def load_function(spec):
    """``"module:function"`` or ``"path/to/file.py:function"`` to a callable."""
    if callable(spec):
        return spec
    where, sep, name = str(spec).rpartition(":")
    if not sep or not where or not name:
        raise UsageError(f"--map {spec!r}: expected module:function or path/to/file.py:function")
    import importlib
    import importlib.util

    try:
        if where.endswith(".py") or os.sep in where:
            path = os.path.abspath(where)
            if not os.path.isfile(path):
                raise UsageError(f"--map {spec!r}: file {where!r} not found")
            modname = "_tarproc_map_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
            module = sys.modules.get(modname)
            if module is None or getattr(module, "__file__", None) != path:
                loader_spec = importlib.util.spec_from_file_location(modname, path)
                module = importlib.util.module_from_spec(loader_spec)
                sys.modules[modname] = module
                loader_spec.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"--map {spec!r}: cannot load {where!r}: {type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"--map {spec!r}: {where!r} has no function {name!r}")
    return fn


_FN = None


def _worker_init(spec):
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    global _FN
    _FN = load_function(spec)


def _normalize(result, sample):
    """A function's return value as a list of samples, or raise TypeError."""
    if result is None:
        return []
    items = [result] if isinstance(result, dict) else result
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"function returned {type(result).__name__}, expected a dict, a list of dicts or None")
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise TypeError(f"function returned a list containing {type(item).__name__}, expected dicts")
        clean = {}
        for field, value in item.items():
            if not isinstance(field, str):
                raise TypeError(f"field name {field!r} is not a str")
            if field[:2] == "__" and field[-2:] == "__":
                clean[field] = value
                continue
            why = bad_field_name(field)
            if why:
                raise TypeError(why)
            if isinstance(value, str):
                value = value.encode("utf-8")
            elif isinstance(value, (bytearray, memoryview)):
                value = bytes(value)
            elif not isinstance(value, bytes):
                raise TypeError(f"field {field!r} is {type(value).__name__}, not bytes or str")
            clean[field] = value
        if "__key__" not in clean:
            clean["__key__"] = sample.get("__key__")
        out.append(clean)
    return out


def _map_batch(blob):
    """In a worker: apply the function to a pickled batch of samples."""
    import pickle

    batch = pickle.loads(blob)
    results = []
    fn = _FN
    for sample in batch:
        key = sample.get("__key__")
        try:
            outputs = _normalize(fn(sample), sample)
            results.append((key, outputs, None))
        except Exception as e:
            import traceback

            tb = traceback.format_exc().encode("utf-8", "replace")
            results.append((key, [], f"{type(e).__name__}: {e}", tb))
    return pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)


def map_function(samples, fn, parallel=None, *, error_handling="skip", ordered=True, batch=32, stats=None,
                 on_error=None, prog="tarproc"):
    """Apply ``fn`` (a callable, ``"module:function"`` or
    ``"path/file.py:function"``) to every sample in ``parallel`` worker
    processes; yield the samples it returns, in input order unless
    ``ordered=False``.  Samples travel in batches of up to ``batch``."""
    _check_mode(error_handling)
    parallel = parallel or default_parallel()
    if parallel < 1:
        raise UsageError("parallel must be >= 1")
    if batch < 1:
        raise UsageError("batch must be >= 1")
    if not callable(fn):
        load_function(fn)  # fail early, with a clear message, in this process
    return _run_function(samples, fn, parallel, error_handling, ordered, batch, stats,
                         on_error or _stderr_report(prog))


class _Batcher:
    """Groups samples into batches in the reader thread (:meth:`group` is
    what the engine reads, one item per batch, so the engine's per-item work
    is per batch) and sends them pickled.  A partial batch is sent when the
    input is about to block (a stall hook), so a slow input still streams.
    ``acquire()`` is called before a batch is started (it bounds the batches
    in flight)."""

    def __init__(self, pool, size, acquire):
        self.pool = pool
        self.size = size
        self.acquire = acquire
        self.buf = []
        self.done = None
        self.thread = None
        self.n = 0

    def group(self, samples):
        self.thread = threading.get_ident()
        yield []  # the engine hands over its ``done`` with the first item
        size = self.size
        acquire = self.acquire
        for sample in samples:
            buf = self.buf
            if not buf:
                acquire()
            buf.append(sample)
            if len(buf) >= size:
                self.buf = []
                yield buf

    def submit(self, index, batch, done):
        self.done = done
        if batch:
            self._send(batch)

    def flush(self):
        if not self.buf or self.done is None or threading.get_ident() != self.thread:
            return
        batch, self.buf = self.buf, []
        self._send(batch)

    def _send(self, batch):
        import pickle

        index = self.n
        self.n += 1
        done = self.done
        blob = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)

        def reply(data, exc):
            done(index, (batch, data, exc))

        self.pool.send(blob, reply)

    def finish(self, n_items):
        self.flush()
        return self.n


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

    from . import urls

    urls._stall_hooks.clear()  # the parent's outputs are not ours to flush
    urls._pdeathsig()  # never outlive the parent
    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass
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


def _run_function(samples, fn, parallel, error_handling, ordered, batch, stats, on_error):
    import pickle

    from . import urls

    # Batches in flight: enough to keep every worker busy, few enough that
    # memory stays bounded.
    window = 2 * parallel + 2
    slots = threading.Semaphore(window)
    closing = [False]

    def acquire():
        if not slots.acquire(blocking=False):
            while not slots.acquire(timeout=1.0):
                if closing[0]:
                    raise SampleFailed("stopped")

    pool = _FnPool(parallel, fn)
    batcher = _Batcher(pool, batch, acquire)
    hook = batcher.flush
    urls._stall_hooks.insert(0, hook)
    per_sample = _handler(error_handling, stats, on_error, None, True)

    def handle(payload):
        slots.release()
        inputs, reply, exc = payload
        if exc is not None:
            if isinstance(exc, _WorkerFailed):
                raise SampleFailed(f"worker process failed: {exc}")
            raise SampleFailed(f"worker process failed: {type(exc).__name__}: {exc}")
        for sample, item in zip(inputs, pickle.loads(reply)):
            key, outputs, error = item[0], item[1], item[2]
            if error is None:
                if outputs:  # the common case, without the per-sample handler
                    yield from outputs
                else:
                    yield from per_sample(_Result(key, outputs))
            else:
                kept = [sample] if error_handling == "ignore" else []
                yield from per_sample(_Result(key, kept, error=f"function raised {error}", log=item[3]))

    try:
        yield from _engine(batcher.group(samples), batcher.submit, 1 << 30, ordered, handle, on_stall=_stall,
                           finish=batcher.finish)
    finally:
        closing[0] = True
        if hook in urls._stall_hooks:
            urls._stall_hooks.remove(hook)
        pool.close()


# ---------------------------------------------------------------- text inputs

TEXT_MODES = ("lines", "pages", "keys")


def iter_text_samples(urls, mode="lines", stats=None, field="txt"):
    """Samples from text inputs, one per line (``lines``), per form-feed
    separated page (``pages``) or per line naming a key (``keys``).  The text
    goes in field ``txt``; keys are the running index (``000000000``, …), or
    for ``keys`` the line itself (blank lines are skipped)."""
    from .urls import expand_urls, open_source

    if mode not in TEXT_MODES:
        raise UsageError(f"text mode must be one of {', '.join(TEXT_MODES)}, not {mode!r}")
    if isinstance(urls, str):
        urls = expand_urls([urls])
    sep = b"\f" if mode == "pages" else b"\n"
    index = 0
    for url in urls:
        stream = open_source(url)
        if stats is not None:
            stats.inputs += 1
        try:
            rest = b""
            chunk = True
            while chunk:
                chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
                if chunk:
                    pieces = (rest + chunk).split(sep)
                    rest = pieces.pop()
                else:  # the end: what is left, unless it is a trailing blank page
                    pieces = [rest] if rest and not (mode == "pages" and not rest.strip(b"\n")) else []
                for piece in pieces:
                    sample = _text_sample(piece, mode, index, field, url)
                    if sample is not None:
                        index += 1
                        if stats is not None:
                            stats.read += 1
                        yield sample
        finally:
            stream.close()


def _text_sample(piece, mode, index, field, url):
    source = "stdin" if url == "-" else url
    if mode == "keys":
        key = piece.strip().decode("utf-8", "surrogateescape")
        if not key:
            return None
        why = bad_key(key)
        if why:
            raise BadSample(key, why, source)
        return {"__key__": key, field: key.encode("utf-8", "surrogateescape"), "__source__": source}
    if mode == "pages" and piece.startswith(b"\n"):
        piece = piece[1:]  # the newline that usually follows a form feed
    return {"__key__": f"{index:09d}", field: piece, "__source__": source}
