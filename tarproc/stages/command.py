"""Command mode: a shell command on every sample, in parallel (:func:`map_command`).

**Command mode** (:func:`map_command`).  For each sample a private working
directory (mode 0700) is made under one run directory (``workdir``, default
``$TMPDIR``); the fields are written there as ``sample.<field>`` plus
``sample.__key__``; the command runs there with ``bash -c`` (or the
``interpreter``), stdin from ``/dev/null``, stdout and stderr captured together and
passed to ``echo`` (default: our stderr) or stored in a field (``add_log``).
Each command starts in its own session, so the whole process group can be
killed: on ``timeout``, when the command exits (no stray background
processes survive it), and when the iterator is closed.  Every sample gets a
fresh directory with an unpredictable name and a fresh output pipe, never reused, so
a process that escapes its group (``setsid``) cannot write into another
sample.  Directories are removed through descriptors (``unlinkat``), without
following symbolic links and without recursion, whatever the command left
(a symlink in place of its directory, a tree thousands of levels deep,
directories without permissions).  Afterwards the
regular files ``sample.*`` form the output sample with the same key (or the
content of ``sample.__key__``); symbolic links are refused and never
followed, FIFOs and other special files are ignored.  With ``subdirs`` every
subdirectory becomes a sample (key from its ``sample.__key__`` or
``KEY/NAME``); with ``multi`` files ``sample-N.*`` become samples with key
``KEY-N``.  With ``per_command=N`` one command gets up to N consecutive
samples, the ``i``-th one's files named ``sample-<i>.*`` in one directory,
and each sample's outputs are collected back into it (see
:meth:`CommandRunner._prepare_batch`).  Small input files the command left alone are not read back (see
:func:`read_files`).  A sample's directory is removed once its outputs are
collected, by a thread (:class:`~tarproc.runtime.workdir.Remover`), and
everything is gone when the iterator is closed (Ctrl-C, SIGTERM, an error),
unless ``keepdir``.

The commands are started with ``posix_spawn`` and waited for on pidfds by
one loop (:func:`~tarproc.runtime.spawn.spawn_loop`): a sample costs one
``exec`` of the interpreter, one directory, one file per field, and no
thread hand-off but the start; the next sample's directory is made while
the commands run, and a command that exits is replaced before its outputs
are read.  Its stdout and stderr go through a pipe that is read while it
runs (beyond :data:`~tarproc.runtime.capture.SPILL_BYTES` into an unnamed
file) and closed when it exits, so a process that escaped its group cannot
write into another sample's output.  Samples are read ahead by at most
``2 * parallel + 2``, so memory stays bounded.

**Errors** follow ``error_handling``: ``"skip"`` drops a failed sample,
``"ignore"`` keeps what it produced (for a function: the input sample),
``"abort"`` raises :class:`~tarproc.errors.SampleFailed` after every sample
before it has been yielded.  Every failure is passed to ``on_error(message)``
(default: a line on stderr) with the key, the exit status and the last lines
of output, and counted in ``stats.failed``.
"""

import os
import sys
import time

from ..errors import UsageError, describe_exit
from ..core.blob import Blob, Spooler
from ..core.limits import quote
from ..core.rules import bad_field_name, bad_key, is_extra_meta, is_meta
from ..runtime.engine import (Result, check_max_failures, check_mode, default_parallel, handler, stderr_echo,
                              stderr_report)
from ..runtime.capture import Capture
from ..runtime.procs import close_at_exit
from ..runtime.spawn import Spawner, spawn_loop
from .collect import COARSE, Quota, dir_entries, read_files, settled
from ..runtime.workdir import Remover, remove_entry, remove_root


class CommandRunner:
    """Runs one command per sample in a private directory, in three steps
    driven by :func:`~tarproc.runtime.spawn.spawn_loop`: ``prepare`` (the
    directory and field files), ``spawn``, ``finish`` (collect the outputs,
    remove the directory).  ``close()`` removes the run directory."""

    def __init__(self, command=None, script=None, interpreter="bash", base="sample", subdirs=False,
                 multi=False, timeout=None, workdir=None, keepdir=False, add_log=None, spooler=None,
                 per_command=1):
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
        _check_per_command(per_command, subdirs, multi, add_log)
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
        if "\0" in "".join(self.argv):
            raise UsageError("the command contains a NUL byte")
        self.base = base
        self.per_command = per_command  # samples in one command's directory (see _prepare_batch)
        # a command naming sample.FIELD run on several samples at once: its files are sample-NNNNNN.FIELD
        text = command if command is not None else _head(script)
        self.batch_hint = (f"; with --per-command the files are {base}-NNNNNN.FIELD, not {base}.FIELD"
                           if per_command > 1 and f"{base}." in text else "")
        self.subdirs = subdirs
        self.multi = multi
        self.timeout = timeout
        self.keepdir = keepdir
        self.add_log = add_log
        self.spooler = spooler if spooler is not None else Spooler()
        self.parent = workdir or tempfile.gettempdir()
        if not os.path.isdir(self.parent):
            raise UsageError(f"working directory base {self.parent!r} does not exist")
        self.argv[0] = os.path.abspath(exe)  # the command starts in another directory
        self.spawner = Spawner(self.argv)
        self.root = None
        self.rootfd = None
        self.remover = None
        self.devnull = None
        self.tmpfile = hasattr(os, "O_TMPFILE")
        self.names = {}  # field -> its file name (a field name checked once, not per sample)
        self.random = b""  # random bytes for directory names, drawn in blocks
        self.closed = False
        self.aborted = False
        import threading

        self.ended = threading.Event()  # set once closed (see abort)
        self.any_ok = False  # a sample succeeded: exit 127 is then the sample's own failure
        self.not_found = False  # the command was not found: the run stops, nothing more starts
        self.keep_log = True  # False: a successful command's output is not wanted
        self.capture_spill = None  # bytes of output kept in memory (None: capture.SPILL_BYTES)
        self.tail_bytes = None  # bytes of a failed command's output kept for its message (None: limits.TAIL_BYTES)
        self.noted = False  # the files a command left that are not outputs: said once a run
        self.notes = True  # False (quiet): no such note

    def uncollected(self, key, names, batch=0):
        """Once a run: a note naming the files a successful command left in
        its directory that are not outputs (``thumb.png`` beside
        ``sample.jpg``), which would otherwise vanish without a word; else
        ``None``.  ``batch``: the samples of a ``per_command`` job."""
        if self.noted or self.subdirs or not names:
            return None
        if batch:
            prefix = self.base + "-"
            left = [n for n in names if not (n.startswith(prefix) and _position(n[len(prefix):], batch) is not None)]
        else:
            heads = (self.base + ".", self.base + "-") if self.multi else (self.base + ".",)
            left = [n for n in names if not n.startswith(heads)]
        if not left:
            return None
        self.noted = True
        left.sort()
        shown = ", ".join(quote(n) for n in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        pattern = f"{self.base}-NNNNNN.*" if batch else f"{self.base}-N.*" if self.multi else f"{self.base}.*"
        example = f"{self.base}-{'000000' if batch else '1' if self.multi else ''}".rstrip("-") + f".{left[0]}"
        return (f"warning: sample {quote(key)}: the command left {shown}, not collected: only files named "
                f"{pattern} are outputs (e.g. {example}); said once")

    def start(self):
        """Make the run directory (mode 0700); ``close()`` removes it."""
        import tempfile

        self.pid = os.getpid()
        self.root = tempfile.mkdtemp(prefix="tarproc-", dir=self.parent)
        self.rootfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        if not self.keepdir:
            self.remover = Remover(self.rootfd)
        self.devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    # -- one sample: prepare (directory, fields), spawn, finish (collect, clean up)

    def prepare(self, index, sample):
        """A :class:`_Job` ready to start, or a failed :class:`Result`
        (with ``per_command`` > 1, ``sample`` is a list: :meth:`_prepare_batch`)."""
        if self.per_command > 1:
            return self._prepare_batch(index, sample)
        if not isinstance(sample, dict):
            return Result(None, error=f"a sample is a dict, not {type(sample).__name__}")
        key = sample.get("__key__")
        if not isinstance(key, str) or not key:
            return Result(key, error="sample has no __key__")
        job = _Job(index, key, sample)
        try:
            job.name, job.dfd, job.log = self._slot(index)
            written = None if self.subdirs or self.multi or COARSE is None else {}
            why = self._write_fields(job.dfd, sample, written)
            job.written = written
        except OSError as e:
            why = self._workdir_failed(e, job, discard=True)
        if why:
            self.discard(job)
            return Result(key, error=why)
        return job

    def spawn(self, job):
        """Start the command of a prepared job; None, or a failed result."""
        if self.closed or self.not_found:  # (after "command not found" no other sample starts)
            return self.finish(job, "closed")
        # the command starts in the directory we hold open, not in whatever
        # a path names by then
        cwd = f"/proc/self/fd/{job.dfd}" if self.spawner.libc is None and os.path.isdir("/proc/self/fd") \
            else os.path.join(self.root, job.name)
        if job.written:
            job.started = time.clock_gettime_ns(COARSE)
        try:
            job.handle = self.spawner.spawn(job.dfd, cwd, self.devnull, job.log.child_fd())
        except OSError as e:
            return self.finish(job, f"could not start {self.argv[0]}: {e.strerror or e}")
        job.log.started()
        job.pid = self.spawner.pid(job.handle)
        if self.timeout is not None:
            job.deadline = time.monotonic() + self.timeout
        return None

    def finish(self, job, status):
        """The result of a job whose command has exited with ``status`` (or
        ``"timeout"``, ``"closed"``, an error message); removes its directory."""
        if job.batch is not None:
            return self._finish_batch(job, status)
        key, log = job.key, job.log
        try:
            log.finish()
            if status == "closed":
                return Result(key, error="stopped", log=log.tail())
            if status == "timeout":
                return Result(key, error=f"timed out after {self.timeout:g} s (process group killed)",
                               log=log.tail())
            if isinstance(status, str):
                return Result(key, error=status)
            written = None
            if job.written and status == 0 and settled(os.fstat(job.dfd).st_ctime_ns) <= job.started \
                    <= time.clock_gettime_ns(COARSE):
                written = (job.written, job.started)  # no entry added, removed or renamed by the command
            outputs, why = self._collect(job.dfd, key, job.sample, job.names, written)
            if why:
                return Result(key, outputs, error=why, log=log.tail())
            if status == 127 and not self.any_ok:
                self.not_found = True
                last = log.tail().decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
                return Result(key, error=f"command not found (exit status 127){': ' + last[0][:300] if last[0] else ''}",
                               fatal=True)
            if status != 0:
                return Result(key, outputs, error="command " + ("failed with " if status > 0 else "")
                               + describe_exit(status), log=log.tail())
            self.any_ok = True
            if self.add_log is not None:
                text = log.take(self.spooler.threshold)
                for out in outputs:
                    out[self.add_log] = text
                return Result(key, outputs)
            note = self.uncollected(key, job.names) if self.notes else None
            if not self.keep_log or log.size() == 0:
                return Result(key, outputs, note=note)
            job.log = None  # the main loop copies and closes it
            return Result(key, outputs, log=log, note=note)
        except OSError as e:
            return Result(key, error=self._workdir_failed(e, job))
        finally:
            self.discard(job)

    # -- several samples in one command's directory (per_command > 1)

    def _prepare_batch(self, index, batch):
        """One job for a list of samples: the ``i``-th sample's fields are
        written as ``BASE-<i>.FIELD`` (``i`` in six digits) in one directory.
        A sample that cannot be written fails alone (its files are removed);
        a :class:`_Batch` of failures when none can."""
        job = _Job(index, None, None)
        entries = []  # per position: the sample (to run), or its failed Result
        try:
            job.name, job.dfd, job.log = self._slot(index)
        except OSError as e:
            why = self._workdir_failed(e, job)
            return _Batch([Result(s.get("__key__") if isinstance(s, dict) else None, error=why) for s in batch])
        written = {} if COARSE is not None else None
        for i, sample in enumerate(batch):
            if not isinstance(sample, dict):
                entries.append(Result(None, error=f"a sample is a dict, not {type(sample).__name__}"))
                continue
            key = sample.get("__key__")
            if not isinstance(key, str) or not key:
                entries.append(Result(key, error="sample has no __key__"))
                continue
            made = []
            try:
                why = self._write_fields(job.dfd, sample, written, f"{self.base}-{i:06d}", made)
            except OSError as e:
                why = self._workdir_failed(e, job, discard=True)
            if why:
                for name in made:  # the command does not see a half-written sample
                    try:
                        os.unlink(name, dir_fd=job.dfd)
                    except OSError:
                        pass
                    if written is not None:
                        written.pop(name, None)
                entries.append(Result(key, error=why))
                continue
            entries.append(sample)
        job.batch = entries
        job.key = _Keys(e["__key__"] if isinstance(e, dict) else e.key for e in entries)
        job.written = written
        if not any(isinstance(e, dict) for e in entries):
            self.discard(job)
            return _Batch(entries)
        return job

    def _finish_batch(self, job, status):
        """The per-sample results of a batch job (see :meth:`finish`)."""
        log, entries = job.log, job.batch
        runs = [e["__key__"] for e in entries if isinstance(e, dict)]
        where = f"one command for {len(runs)} samples, {quote(runs[0])} to {quote(runs[-1])}" \
            if len(runs) > 1 else "one command for this sample"
        first = True  # the command's output goes with the first failure's report

        def failed(key, outputs, why):
            nonlocal first
            tail, first = (log.tail() if first else b""), False
            return Result(key, outputs, error=why, log=tail)

        try:
            log.finish()
            if isinstance(status, str):
                why = "stopped" if status == "closed" else status if status != "timeout" \
                    else f"timed out after {self.timeout:g} s (process group killed)"
                return _Batch([failed(e["__key__"], (), f"{why} ({where})") if isinstance(e, dict) else e
                               for e in entries])
            written = None
            if job.written and status == 0 and settled(os.fstat(job.dfd).st_ctime_ns) <= job.started \
                    <= time.clock_gettime_ns(COARSE):
                written = (job.written, job.started)
            collected = self._collect_batch(job, written)
            results = []
            if status == 127 and not self.any_ok:
                self.not_found = True
                last = log.tail().decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
                for e in entries:
                    if not isinstance(e, dict):
                        results.append(e)
                        continue
                    results.append(Result(e["__key__"], error="command not found (exit status 127)"
                                           + (": " + last[0][:300] if last[0] else ""), fatal=True))
                    break  # (the run stops here)
                return _Batch(results)
            why = None if status == 0 else ("command " + ("failed with " if status > 0 else "")
                                            + describe_exit(status) + f" ({where}{self.batch_hint})")
            note = None
            if status == 0:
                self.any_ok = True
                if self.notes:
                    note = self.uncollected(runs[0], job.names, len(entries))
            for i, e in enumerate(entries):
                if not isinstance(e, dict):
                    results.append(e)
                    continue
                outputs, problem = collected.get(i, ([], None))
                if problem or why:
                    results.append(failed(e["__key__"], outputs, problem or why))
                else:
                    results.append(Result(e["__key__"], outputs, note=note))
                    note = None
            if status == 0 and self.keep_log and log.size():
                for r in results:  # printed once, as the first written sample's is
                    if r.error is None:
                        r.log = log
                        job.log = None  # the main loop copies and closes it
                        break
            return _Batch(results)
        except OSError as e:
            why = self._workdir_failed(e, job)
            return _Batch([Result(e_["__key__"], error=why) if isinstance(e_, dict) else e_ for e_ in entries])
        finally:
            self.discard(job)

    def _collect_batch(self, job, written):
        """``{position: (outputs, problem)}`` of a finished batch: the regular
        files ``BASE-<i>.FIELD`` for each position ``i`` run, read in one pass
        over the directory and within one memory budget (see :class:`Quota`);
        other names are ignored."""
        import stat

        prefix = self.base + "-"
        files, _ = read_files(job.dfd, prefix, self.spooler, job.names, written)
        n = len(job.batch)
        per = {}
        for name, data in files.items():
            i = _position(name, n)
            if i is not None:
                per.setdefault(i, {})[name[7:]] = data
        problems = {}
        for name in job.names:  # a symbolic link fails its sample (never followed)
            if name.startswith(prefix) and name[len(prefix):] not in files:
                i = _position(name[len(prefix):], n)
                if i is not None and i not in problems:
                    try:
                        if stat.S_ISLNK(os.lstat(name, dir_fd=job.dfd).st_mode):
                            problems[i] = f"{name} is a symbolic link: refused"
                    except OSError:
                        pass
        out = {}
        for i, e in enumerate(job.batch):
            if not isinstance(e, dict):
                continue
            meta = {k: v for k, v in e.items() if is_extra_meta(k)}
            got = per.get(i)
            outputs = [self._make_sample(got, e["__key__"], meta)] if got else []
            out[i] = self._checked(outputs, problems.get(i))
        return out

    def discard(self, job):
        """Close a job's descriptors and remove its directory."""
        if job.log is not None:
            job.log.close()
            job.log = None
        if job.dfd is not None:
            dfd, job.dfd = job.dfd, None
            if job.name is not None and self.remover is not None:
                self.remover.put(job.name, dfd, job.names or None)  # closes dfd
            else:
                os.close(dfd)
        elif job.name is not None and not self.keepdir:
            remove_entry(self.rootfd, job.name)

    def _slot(self, index):
        """A fresh working directory for a sample (name, descriptor) and a
        fresh log.  The name is unpredictable and never reused, so nothing
        left running by an earlier sample can write into this one's files;
        everything is made relative to the run directory's descriptor."""
        while True:
            if len(self.random) < 4:
                self.random = os.urandom(512)
            name = f"{index:06d}-{self.random[:4].hex()}"
            self.random = self.random[4:]
            try:
                os.mkdir(name, 0o700, dir_fd=self.rootfd)
                break
            except FileExistsError:
                continue
        dfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self.rootfd)
        try:
            if not self.keepdir:
                return name, dfd, Capture(spill=self._spill, spill_bytes=self.capture_spill, tail_bytes=self.tail_bytes)
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            return name, dfd, Capture(file=os.open(name + ".log", flags, 0o600, dir_fd=self.rootfd),
                                      tail_bytes=self.tail_bytes)
        except BaseException:
            os.close(dfd)
            raise

    def _workdir_failed(self, e, job, discard=False):
        """A sample's failure in its working directory (why, a line), or, on
        a full or failing disk, the error that stops the run: the disk is
        not the sample's fault, and every next sample would fail the same."""
        from ..errors import is_write_error, write_failed

        where = os.path.join(self.root or self.parent, getattr(job, "name", None) or "")
        if is_write_error(e):
            if discard:  # (else the caller's ``finally`` does)
                self.discard(job)
            raise write_failed(where, "a sample's files for its command", e,
                               "working directories go under --working-dir or TMPDIR")
        return f"working directory {where}: {e.strerror or e}"

    def _spill(self):
        """An unnamed file in the run directory, for a command's long output."""
        if self.tmpfile:
            try:
                return os.open(".", os.O_RDWR | os.O_TMPFILE | os.O_CLOEXEC, 0o600, dir_fd=self.rootfd)
            except OSError:
                self.tmpfile = False
        import secrets

        name = f"log-{secrets.token_hex(8)}"
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=self.rootfd)
        os.unlink(name, dir_fd=self.rootfd)
        return fd

    def _write_fields(self, dfd, sample, written=None, stem=None, made=None):
        """Write a sample's fields as files ``STEM.FIELD`` in ``dfd`` (``stem``
        default: the base name); note in ``written`` (a dict) what each small
        file holds (see :func:`read_files`), and in ``made`` (a list) the
        name of every file made."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        names = self.names
        for field, value in sample.items():
            name = names.get(field)
            if name is None:
                if type(field) is str and is_extra_meta(field):
                    continue
                why = bad_field_name(field)
                if why:
                    return why
                if len(names) < 4096:  # (bounded: every sample may bring new field names)
                    names[field] = f"{self.base}.{field}"
                name = f"{self.base}.{field}"
            if stem is not None:
                name = f"{stem}.{field}"
            if made is not None:
                made.append(name)
            if isinstance(value, str):
                value = value.encode("utf-8", "surrogateescape")  # keys keep non-UTF-8 bytes
            elif type(value) is Blob:  # large: a hard link to its spool file, or a streamed copy
                value.link_or_copy_to(name, dfd)
                continue
            elif not isinstance(value, (bytes, bytearray, memoryview)):
                return f"field {field!r} is {type(value).__name__}, not bytes or str"
            fd = os.open(name, flags, 0o644, dir_fd=dfd)
            try:
                if type(value) is not bytes:
                    value = memoryview(value).cast("B")
                n = os.write(fd, value) if len(value) else 0
                if n < len(value):  # a short write (not on a local file system): the rest
                    view = memoryview(value)[n:]
                    while view:
                        view = view[os.write(fd, view):]
                if written is not None and type(value) is bytes and len(value) < self.spooler.threshold:
                    written[name] = value
            finally:
                os.close(fd)
        return None

    def _collect(self, dfd, key, sample, names=None, written=None):
        """The output samples of a finished command in directory ``dfd``, and
        an error or None; ``names`` gets the names of its entries; ``written``:
        see :func:`read_files`."""
        meta = {k: v for k, v in sample.items() if is_extra_meta(k)}
        problem = None
        names = [] if names is None else names
        if self.subdirs:
            quota = Quota(self.spooler)  # one for all the subdirectories
            groups = []
            for name, is_dir in dir_entries(dfd):
                names.append(name)
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
                    files, why = read_files(sub, self.base + ".", self.spooler, quota=quota)
                finally:
                    os.close(sub)
                if why:
                    problem = problem or f"{name}/{why}"
                if files:
                    outputs.append(self._make_sample(files, f"{key}/{name}", meta))
        elif self.multi:
            files, problem = read_files(dfd, self.base + "-", self.spooler, names)
            per = {}
            for field, data in files.items():
                n, dot, rest = field.partition(".")
                if not dot or not n or not rest:
                    continue
                per.setdefault(n, {})[rest] = data
            outputs = [self._make_sample(per[n], f"{key}-{n}", meta) for n in sorted(per, key=_natural)]
        else:
            files, problem = read_files(dfd, self.base + ".", self.spooler, names, written)
            outputs = [self._make_sample(files, key, meta)] if files else []
        return self._checked(outputs, problem)

    def _checked(self, outputs, problem=None):
        """``(outputs, problem)``, or ``([], why)`` when an output would not
        read back (a bad key or field name, two with the same key)."""
        seen = set()
        for out in outputs:
            k = out["__key__"]
            why = bad_key(k)
            if why:
                return [], f"output {why}"
            if k in seen:
                return [], f"two outputs have the same key {quote(k)}"
            seen.add(k)
            for field in out:
                if field not in self.names and not (field[:2] == "__" and field[-2:] == "__"):
                    why = bad_field_name(field)
                    if why:
                        return [], f"output {why}: it would not read back"
        # an output with no fields besides its key is no output
        outputs = [o for o in outputs if any(not is_meta(f) for f in o)]
        return outputs, problem

    def _make_sample(self, files, key, meta):
        out = dict(meta)
        newkey = files.pop("__key__", None)
        if newkey is not None:
            text = newkey.decode("utf-8", "surrogateescape").strip()
            key = text or key
        for field in list(files):
            if is_meta(field):
                del files[field]
        out.update(files)
        out["__key__"] = key
        return out

    # -- cleanup

    def abort(self):
        """At interpreter exit, from another thread than the one running the
        loop (which is about to be frozen): the loop stops (its iterator
        raises :class:`~tarproc.errors.SampleFailed`, so no consumer takes
        the end for a complete input), and its cleanup runs in its own
        thread; this waits a few seconds for it."""
        self.aborted = True
        wake = getattr(self, "wake", None)
        if wake is not None:
            wake()
        self.ended.wait(5)

    def close(self):
        self.closed = True
        if getattr(self, "pid", os.getpid()) != os.getpid():  # a copy in a forked child: not ours to remove
            return
        if self.devnull is not None:
            os.close(self.devnull)
            self.devnull = None
        self.spawner.watchdog.close()
        if self.rootfd is not None:
            try:
                if self.remover is not None:
                    self.remover.close()  # the directories handed to it are gone
            finally:
                if not self.keepdir:
                    remove_root(self.root, self.rootfd)
                os.close(self.rootfd)
                self.rootfd = None


class _Job:
    """A sample's command: its directory (name, descriptor), log, process."""

    __slots__ = ("index", "key", "sample", "name", "dfd", "log", "handle", "pid", "pidfd", "deadline", "timed_out",
                 "names", "written", "started", "batch")

    def __init__(self, index, key, sample):
        self.index, self.key, self.sample = index, key, sample
        self.names = []  # what the directory held when its outputs were read
        self.written = None  # {file name: bytes} of the small files we wrote
        self.started = 0  # the coarse real-time clock (ns) just before the command started
        self.name = self.dfd = self.log = self.handle = self.pid = self.pidfd = self.deadline = None
        self.timed_out = False
        self.batch = None  # several samples: per position, the sample or its failed Result


def _natural(s):
    return (0, int(s), s) if s.isdigit() else (1, 0, s)


#: The largest ``per_command``: positions in a batch have six digits.
PER_COMMAND_MAX = 100_000
#: Large fields (blobs, each holding a descriptor) in one batch's input samples.
BATCH_BLOBS = 8


def _check_per_command(per_command, subdirs, multi, add_log):
    if type(per_command) is not int or not 1 <= per_command <= PER_COMMAND_MAX:
        raise UsageError(f"--per-command must be a whole number from 1 to {PER_COMMAND_MAX}, not {per_command!r}")
    if per_command > 1:
        for flag, bad in (("-S/--subdirs", subdirs), ("-m/--multi", multi), ("--add-log", add_log is not None)):
            if bad:
                raise UsageError(f"--per-command N (several samples in one directory) does not go with {flag}")


def _head(path, size=1 << 16):
    """The first ``size`` bytes of a script, as text ("" when unreadable)."""
    try:
        with open(path, "rb") as f:
            return f.read(size).decode("utf-8", "replace")
    except OSError:
        return ""


def _position(name, n):
    """The position ``i`` of ``"<i>.FIELD"`` (six ASCII digits, ``i < n``), or None."""
    digits = name[:6]
    if name[6:7] != "." or not (digits.isascii() and digits.isdigit()):
        return None
    i = int(digits)
    return i if i < n else None


class _Keys(tuple):
    """The keys of a batch job's samples (its ``key``): a result the loop
    makes for the whole job (it could not start) is one for each of them."""


class _Batch:
    """The results of a batch job, one per sample, in input order."""

    __slots__ = ("results",)

    def __init__(self, results):
        self.results = results


def _batches(samples, n, budget):
    """Lists of up to ``n`` consecutive samples, cut earlier so that one
    holds at most ``budget`` bytes in memory and :data:`BATCH_BLOBS` large
    fields (a sample past either is alone in its list).  An error while
    reading comes after the samples read before it."""
    batch, size, blobs = [], 0, 0
    try:
        for sample in samples:
            more = more_blobs = 0
            if isinstance(sample, dict):
                for value in sample.values():
                    if type(value) is Blob:
                        more_blobs += 1
                    elif isinstance(value, (bytes, bytearray, memoryview, str)):
                        more += len(value)
            if batch and (size + more > budget or blobs + more_blobs > BATCH_BLOBS):
                out, batch, size, blobs = batch, [], 0, 0
                yield out
            batch.append(sample)
            size += more
            blobs += more_blobs
            if len(batch) >= n:
                out, batch, size, blobs = batch, [], 0, 0
                yield out
    except GeneratorExit:
        raise
    except BaseException:
        if batch:
            out, batch = batch, []
            yield out
        raise
    if batch:
        yield batch


def _batch_budget(spooler):
    """Bytes of a batch's input samples held in memory: one sample's budget
    (16 MiB when nothing is spooled)."""
    from ..core.pack import sample_budget

    budget = sample_budget(spooler)
    return budget if budget != float("inf") else 16 << 20


def _each_sample(handle):
    """The loop's ``handle`` for batch jobs: their results sample by sample."""
    def each(result):
        if type(result) is _Batch:
            for r in result.results:
                yield from handle(r)
        elif type(result.key) is _Keys:  # the whole job failed in the loop (it could not start)
            for i, key in enumerate(result.key):
                yield from handle(Result(key, error=result.error, log=result.log if i == 0 else b"",
                                          fatal=result.fatal))
        else:
            yield from handle(result)

    return each



def map_command(samples, command=None, parallel=None, *, script=None, interpreter="bash", base="sample",
                error_handling="skip", subdirs=False, multi=False, ordered=True, timeout=None,
                workdir=None, keepdir=False, add_log=None, stats=None, on_error=None, echo=None,
                quiet=False, prog="tarproc", stall=None, spooler=None, per_command=1, capture_spill=None,
                tail_bytes=None, max_failures=None):
    """Run ``command`` (a shell command line, or ``script=FILE``) on every
    sample; yield the output samples (see the module documentation).

    ``parallel`` commands run at once (default: all cores).  ``echo(bytes)``
    receives each successful command's output (default: stderr; ``quiet``
    drops it; with ``add_log`` it is stored in that field instead).
    Closing the iterator (or an exception in the consumer) kills running
    commands and removes the working directories.  ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall`) is told when no result is ready.
    Works from any thread.

    A large field (:class:`~tarproc.core.blob.Blob`) is hard-linked (or
    streamed) into the working directory; output files of
    ``spooler.threshold`` bytes or more come back as blobs.

    ``per_command=N`` gives one command up to N consecutive samples: the
    ``i``-th sample's fields are ``BASE-<i>.FIELD`` (``i`` in six digits,
    from ``000000``) and its key ``BASE-<i>.__key__``, all in one directory,
    so that ``gm mogrify ... *.jpg`` starts once for N samples; the files
    ``BASE-<i>.*`` left afterwards are sample ``i``'s outputs.  A command
    that fails fails every sample it had (each reported, counted, and
    listed on its own).  Not with ``subdirs``, ``multi`` or ``add_log``.

    A command's output past ``capture_spill`` bytes (default 256 KiB) goes to
    a file; at most ``tail_bytes`` of a failed command's output (default
    8 KiB) are kept for its message.  ``max_failures=N``: once more than N
    samples have failed, stop (:class:`~tarproc.errors.TooManyFailures`,
    the commands running killed); ``None``: run on."""
    check_mode(error_handling)
    check_max_failures(max_failures)
    parallel = parallel or default_parallel()
    if parallel < 1:
        raise UsageError("parallel must be >= 1")
    from ..runtime.procs import fit_parallel

    parallel = fit_parallel(parallel)[0]  # (the soft open-file limit raised if need be)
    runner = CommandRunner(command, script, interpreter, base, subdirs, multi, timeout, workdir, keepdir, add_log,
                           spooler, per_command)
    runner.keep_log = not (quiet or add_log is not None)
    runner.notes = not quiet
    runner.capture_spill = capture_spill
    runner.tail_bytes = tail_bytes
    gen = _run_commands(samples, runner, parallel, error_handling, ordered, stats,
                        on_error or stderr_report(prog), _log_echo(echo), quiet or add_log is not None, stall,
                        max_failures)
    return close_at_exit(gen, runner.abort)


def _log_echo(echo):
    """The echo of a command's output: the default copies it to stderr in
    chunks; a caller's ``echo(bytes)`` gets it whole."""
    def copy(log):
        if isinstance(log, Capture):
            if echo is None:
                sys.stderr.flush()
                out = getattr(sys.stderr, "buffer", None)
                if out is None:
                    log.copy_to(lambda b: sys.stderr.write(b.decode("utf-8", "replace")))
                else:
                    log.copy_to(out.write)
                    out.flush()
            else:
                data = log.read()
                log.close()
                echo(data)
        else:
            (echo or stderr_echo)(log)

    return copy


def _run_commands(samples, runner, parallel, error_handling, ordered, stats, on_error, echo, quiet_log, stall=None,
                  max_failures=None):
    runner.start()
    try:
        handle = handler(error_handling, stats, on_error, echo, quiet_log, runner.tail_bytes, max_failures)
        if runner.per_command > 1:  # the loop runs lists of samples, a job each
            samples, handle = _batches(samples, runner.per_command, _batch_budget(runner.spooler)), _each_sample(handle)
        yield from spawn_loop(samples, runner, parallel, 2 * parallel + 2, ordered, handle, on_stall=stall)
    finally:
        try:
            runner.close()
        finally:
            runner.ended.set()
        if runner.keepdir:
            on_error(f"working directories kept in {runner.root}")
