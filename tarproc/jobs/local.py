"""kujob's core: shard ids from brace patterns, ``{}`` filled into a command,
``--done-if`` checks, and the local runner (one command per shard, ``-j`` at
once, retries, a summary)."""

import os
import re
import shutil
import subprocess
import sys
import threading
import time

from ..errors import UsageError, describe_exit


PLACEHOLDER = "{}"
# Characters that may be pasted into a shell command line as they are, in any
# quoting context ('...', "...", bare): no quotes, no $, no backslash, no space.
_SHELL_SAFE = re.compile(r"[A-Za-z0-9._,+=:@%/-]+\Z")
_SHELL_CHARS = re.compile(r"[\s|&;<>()$`\\\"'*?\[\]#~!{}]")
def expand_ids(patterns, settings=None):
    """Shard ids from brace patterns, in order: ``["{00..02}"]`` -> ``00 01 02``.

    Several patterns are concatenated.  Duplicate ids are refused (two runs
    would write the same output), and more than ``settings.max_urls``."""
    import itertools

    from ..core.limits import MAX_URLS, bounded_list
    from ..sources.shardlist import expand_braces

    if isinstance(patterns, str):
        patterns = [patterns]
    # expanded lazily and bounded: '{0..999999999}' is a one-line error, not gigabytes
    ids = bounded_list(itertools.chain.from_iterable(expand_braces(p, "shard pattern") for p in patterns), "the shard ids",
                       max_urls=MAX_URLS if settings is None else settings.max_urls)
    if not ids:
        raise UsageError("no shard ids (give -s PATTERN, e.g. -s '{0000..0999}')")
    seen = set()
    for i in ids:
        if i == "":
            raise UsageError(f"empty shard id in {patterns!r}")
        if any(ord(c) < 32 or ord(c) == 127 for c in i):
            # a newline would split the one-line-per-shard outputs: the
            # commands of --dry-run, the [id] log prefixes, the failed list
            raise UsageError(f"shard id {i!r} has a control character (newline, tab, ...)")
        if i in seen:
            raise UsageError(f"shard id {i!r} appears twice in {' '.join(patterns)!r}")
        seen.add(i)
    return ids


def uses_shell(command):
    """A command given as ONE argument with spaces or shell characters in it
    (``'tarcat in-{}.tar | gzip > out-{}.tgz'``) runs with ``sh -c``;
    anything else runs directly, without a shell."""
    return len(command) == 1 and bool(_SHELL_CHARS.search(command[0].replace(PLACEHOLDER, "")))


def fill(command, shard_id):
    """The argv for one shard: every ``{}`` in every argument replaced by the id.

    Without a shell the id is passed verbatim, whatever it contains.  For a
    shell command (see :func:`uses_shell`) the id is pasted into the shell
    text, so it must be shell-safe (letters, digits and ``._,+=:@%/-``);
    other ids are refused rather than quoted, because no quoting is right in
    every context (inside ``'...'``, ``"..."`` and bare words).  A shell
    command can always use ``"$KUJOB_ID"`` instead."""
    if uses_shell(command):
        if not _SHELL_SAFE.match(shard_id):
            raise UsageError(f"shard id {shard_id!r} is not safe to paste into a shell command; "
                             f"pass the command as separate arguments, or use \"$KUJOB_ID\"")
        return ["/bin/sh", "-c", command[0].replace(PLACEHOLDER, shard_id)]
    return [arg.replace(PLACEHOLDER, shard_id) for arg in command]


def check_command(command, ids=()):
    """Refuse an empty command, a program that is not on PATH, or an id that
    cannot go into a shell command (exit 2) before anything runs, instead of
    failing every shard the same way."""
    if not command:
        raise UsageError("no command: put it after '--', e.g. kujob -s '{0..9}' -- tarcat in-{}.tar -o out-{}.tar")
    if uses_shell(command):
        for shard_id in ids:
            fill(command, shard_id)
        return
    if PLACEHOLDER in command[0]:
        return  # a program per id (./step-{}.sh): a missing one fails its shard, naming it
    if shutil.which(command[0]) is None:
        raise UsageError(f"command not found: {command[0]}")


def done_path(template, shard_id):
    return template.replace(PLACEHOLDER, shard_id)


def check_done_template(template, nids=1, settings=None):
    """Refuse a ``--done-if`` that cannot be checked, or one without ``{}``
    over several ids: every shard would check the same output, and the
    first to make it would mark all the others done."""
    from ..runtime.schemes import has_command, scheme_of

    if nids > 1 and PLACEHOLDER not in template:
        raise UsageError(f"--done-if {template!r} has no {{}}: every one of the {nids} shards would check the "
                         f"same output (give e.g. out-{{}}.tar)")
    scheme = scheme_of(template)
    if scheme in ("-", "pipe"):
        raise UsageError(f"--done-if {template!r}: give a file name or a URL, e.g. out-{{}}.tar")
    if scheme != "file" and not has_command("EXISTS", template, settings):
        raise UsageError(f"--done-if {template!r}: cannot check whether a {scheme}:// URL exists "
                         f"(set TARPROC_EXISTS_{scheme.upper()} to a command that can)")


def is_done(template, shard_id, settings=None):
    """True when the output named by ``template`` exists: a local file, or a
    URL whose existence command (the ``EXISTS`` command of
    :mod:`tarproc.runtime.schemes`, ``TARPROC_EXISTS_<SCHEME>``) succeeds.
    tarproc's writers make a file or object visible only when it is
    complete, so existing means complete.  A check that fails for another
    reason (no credentials) counts as "not done": the shard runs."""
    if not template:
        return False
    target = done_path(template, shard_id)
    from ..runtime.child import Child
    from ..runtime.schemes import command, has_command, scheme_of

    scheme = scheme_of(target)
    if scheme == "file":
        return os.path.exists(target)
    if scheme in ("-", "pipe") or not has_command("EXISTS", target, settings):
        return False
    cmd = command("EXISTS", target, settings)  # one pass: a key holding "{url}" stays quoted
    try:
        child = Child(["/bin/sh", "-c", cmd], target, stdout=None, stderr=None)
    except OSError:
        return False
    try:
        return child.wait(timeout=300) == 0
    except subprocess.TimeoutExpired:
        child.kill()
        return False
    except BaseException:
        child.kill()
        raise


# --------------------------------------------------------------------------- local runner

class Result:
    """What happened to one shard."""

    __slots__ = ("shard_id", "index", "status", "returncode", "attempts", "seconds", "message")

    def __init__(self, shard_id, index):
        self.shard_id = shard_id
        self.index = index
        self.status = "pending"  # pending | running | ok | failed | skipped
        self.returncode = None
        self.attempts = 0
        self.seconds = 0.0
        self.message = ""


class Summary:
    def __init__(self, results):
        self.results = results

    def ids(self, status):
        return [r.shard_id for r in self.results if r.status == status]

    @property
    def failed(self):
        return self.ids("failed")

    def counts(self):
        c = {"ok": 0, "failed": 0, "skipped": 0, "retried": 0}
        for r in self.results:
            if r.status in c:
                c[r.status] += 1
            if r.attempts > 1:
                c["retried"] += 1
        return c

    def line(self):
        c = self.counts()
        return (f"{len(self.results)} shards: {c['ok']} ok, {c['failed']} failed, "
                f"{c['skipped']} skipped (done), {c['retried']} retried")



def _is_binary(chunk, first=True):
    """Whether a command's stdout is not text: a NUL in ``chunk``, or, in
    the ``first`` chunk, bytes that are not UTF-8 (a character cut at the
    end is allowed; a later line in another encoding stays text)."""
    head = chunk[:8192]
    if b"\0" in head:
        return True
    if not first:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start < len(head) - 3
    return False


class Runner:
    """Run ``command`` once per shard id, ``jobs`` at a time.

    ``log`` is a binary stream (stderr) that receives every line the children
    write (stdout and stderr), each prefixed with ``[id] ``; whole lines only,
    so the output of concurrent shards never mixes inside a line.  ``status``
    is called with one-line messages about shards (failures, retries, and
    with ``verbose`` starts and successes); ``progress`` is called with the
    Runner after every change, for a progress line.  ``max_failed``: once
    more shards than this have failed, no new shard starts (the running
    ones finish); the others stay ``pending``."""

    def __init__(self, command, ids, jobs=1, retries=0, done_if=None, log=None, status=None,
                 progress=None, verbose=False, first_index=0, env=None, retry_all=False, settings=None,
                 max_failed=None):
        self.settings = settings  # the EXISTS_<SCHEME> commands of is_done
        # once more shards than this have failed, no new shard starts (those running finish: each
        # commits on its own); None: every shard runs
        self.max_failed = max_failed
        self.command = list(command)
        # exit status 2 (usage or bad input) is the same on every try: not
        # retried unless retry_all
        self.retry_all = retry_all
        self.ids = list(ids)
        self.jobs = max(1, int(jobs))
        self.retries = max(0, int(retries))
        self.done_if = done_if
        self.log = log if log is not None else sys.stderr.buffer
        self.status = status or (lambda message: None)
        self.progress = progress
        self.verbose = verbose
        self.env = env
        self.results = [Result(i, first_index + n) for n, i in enumerate(self.ids)]
        self._lock = threading.Lock()  # guards log writes and the result table
        self._procs = set()
        from ..runtime.procs import Watchdog

        self._watchdog = Watchdog()  # kills the shards' process groups if this process is killed
        self._stop = threading.Event()
        self._next = 0
        self.started = time.monotonic()

    # counts for the progress line
    def counts(self):
        c = {"pending": 0, "running": 0, "ok": 0, "failed": 0, "skipped": 0}
        for r in self.results:
            c[r.status] += 1
        return c

    def _say(self, message):
        with self._lock:
            self.status(message)

    def _changed(self):
        if self.progress:
            with self._lock:
                self.progress(self)

    def _take(self):
        with self._lock:
            if self._stop.is_set() or self._next >= len(self.results):
                return None
            if self.max_failed is not None and sum(r.status == "failed" for r in self.results) > self.max_failed:
                return None  # the allowance is spent: the rest are not started
            r = self.results[self._next]
            self._next += 1
            return r

    def _worker(self):
        while True:
            r = self._take()
            if r is None:
                return
            try:
                self._run_one(r)
            except BaseException as e:  # never lose a shard's status to a bug
                r.status = "failed"
                r.message = f"{type(e).__name__}: {e}"
                self._say(f"[{r.shard_id}] failed: {r.message}")
            self._changed()

    def _run_one(self, r):
        if self.done_if and is_done(self.done_if, r.shard_id, self.settings):
            r.status = "skipped"
            if self.verbose:
                self._say(f"[{r.shard_id}] skipped, {done_path(self.done_if, r.shard_id)} exists")
            return
        argv = fill(self.command, r.shard_id)
        env = dict(os.environ if self.env is None else self.env)
        env["KUJOB_ID"] = r.shard_id
        env["KUJOB_INDEX"] = str(r.index)
        r.status = "running"
        self._changed()
        t0 = time.monotonic()
        while not self._stop.is_set():
            r.attempts += 1
            if self.verbose:
                again = f" (attempt {r.attempts})" if r.attempts > 1 else ""
                self._say(f"[{r.shard_id}] start{again}: {_shell_line(argv)}")
            r.returncode, r.message = self._exec(argv, env, r.shard_id)
            if r.returncode == 0 and self.done_if and not is_done(self.done_if, r.shard_id, self.settings):
                r.returncode = None
                r.message = f"exited 0 but {done_path(self.done_if, r.shard_id)} does not exist"
            if r.returncode == 0:
                r.status = "ok"
                r.seconds = time.monotonic() - t0
                if self.verbose:
                    self._say(f"[{r.shard_id}] ok ({r.seconds:.1f} s)")
                return
            if self._stop.is_set():
                break
            if r.attempts <= self.retries and r.returncode == 2 and not self.retry_all:
                self._say(f"[{r.shard_id}] exit status 2 (usage or bad input) is not retried (--retry-all retries it)")
                break
            if r.attempts <= self.retries:
                self._say(f"[{r.shard_id}] failed ({r.message}), retrying ({r.attempts}/{self.retries})")
                continue
            break
        r.status = "failed"
        r.seconds = time.monotonic() - t0
        self._say(f"[{r.shard_id}] failed ({r.message})")
        if (self.done_if and r.returncode is not None and not (self._stop.is_set() and "://" in self.done_if)
                and is_done(self.done_if, r.shard_id, self.settings)):
            # made by this run (it was checked missing before): not a tarproc
            # writer (a shell redirect '> out.tar' creates its file at once)
            self._say(f"[{r.shard_id}] warning: {done_path(self.done_if, r.shard_id)} exists although the shard "
                      f"failed: a rerun with --done-if would skip it; remove it")

    def _exec(self, argv, env, shard_id):
        from ..runtime.child import Child

        prefix = f"[{shard_id}] ".encode("utf-8", "surrogateescape")
        try:
            # its own session: stop() ends the whole pipeline a shell command
            # starts, not only the shell; the watchdog kills it if we die
            proc = Child(argv, shard_id, stdout="pipe", stderr="pipe", env=env, session=True, watch=True,
                         watchdog=self._watchdog)
        except OSError as e:
            return None, f"cannot run {argv[0]}: {e.strerror or e}"
        with self._lock:
            self._procs.add(proc)
            if self._stop.is_set():  # stop() ran while this one was starting
                _signal_group(proc, "SIGTERM")
        try:
            self._relay(proc, prefix)
            code = proc.wait()
        except BaseException:
            proc.kill()
            raise
        finally:
            with self._lock:
                self._procs.discard(proc)
        return code, describe_exit(code)

    def _relay(self, proc, prefix):
        """Copy the shard's output (stdout and stderr) to the log until its
        end: whole lines, each prefixed; a line over 64 KiB is cut into
        prefixed pieces, and a last line without newline gets one.  Binary
        stdout (a NUL or bytes that are not UTF-8 in what came first: a tar
        written to stdout, a forgotten ``-o``) is counted, not copied: one
        line ``N bytes of binary output on stdout (forgot -o?)`` at the end.

        The shard ends when its command exits, as a pod or a Slurm task
        does: what it left running in its process group (``cmd &``, a
        helper that keeps stdout open) would otherwise hold the output open
        and kujob with it.  ``LEFTOVER_GRACE`` seconds after the command
        exits, the rest of its group gets SIGTERM, 5 s later SIGKILL, and
        kujob stops reading (a process that left the group may keep the
        pipe: it is not waited for)."""
        import select

        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        poller = select.poll()
        pending = {out_fd: b"", err_fd: b""}
        for fd in pending:
            poller.register(fd, select.POLLIN)
        binary = None  # bytes of binary stdout, once stdout is seen to be binary
        seen_out = False
        try:
            exitfd = os.pidfd_open(proc.pid)  # readable once the command has exited (it is not reaped)
            poller.register(exitfd, select.POLLIN)
        except (AttributeError, OSError):
            exitfd = None
        deadline = None  # after the command exited: when to signal what is left of its group
        signals = ["SIGTERM", "SIGKILL", None]
        open_fds = set(pending)
        try:
            while open_fds:
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                if exitfd is None and deadline is None:
                    timeout = 0.2
                ready = {f for f, _ in poller.poll(None if timeout is None else int(timeout * 1000) + 1)}
                data_fds = ready & open_fds
                for fd in data_fds:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        open_fds.discard(fd)
                        poller.unregister(fd)
                        continue
                    if fd == out_fd and binary is None and not pending[fd] and _is_binary(chunk, not seen_out):
                        binary = 0
                    seen_out = seen_out or fd == out_fd
                    if fd == out_fd and binary is not None:
                        binary += len(chunk)
                        continue
                    buf = pending[fd] + chunk
                    lines, start = [], 0
                    while True:
                        cut = buf.find(b"\n", start, start + (1 << 16))
                        if cut >= 0:
                            lines.append(prefix + buf[start:cut + 1])
                            start = cut + 1
                        elif len(buf) - start >= 1 << 16:
                            lines.append(prefix + buf[start:start + (1 << 16)] + b"\n")
                            start += 1 << 16
                        else:
                            break
                    pending[fd] = buf[start:]
                    if lines:
                        with self._lock:
                            self._write_log(b"".join(lines))
                if data_fds:
                    continue
                if deadline is None:
                    if exitfd is not None and exitfd in ready or exitfd is None and _exited(proc.pid):
                        if exitfd is not None:
                            poller.unregister(exitfd)
                        deadline = time.monotonic() + LEFTOVER_GRACE
                    continue
                if time.monotonic() >= deadline:
                    sig = signals.pop(0)
                    if sig is None:
                        break  # a process outside the group holds the output: not ours to wait for
                    _signal_group(proc, sig)  # the leader is not reaped yet: the group id is still its own
                    deadline = time.monotonic() + 5
        finally:
            rest = b"".join(prefix + pending[fd] + b"\n" for fd in (out_fd, err_fd) if pending[fd])
            if binary:
                rest += prefix + f"{binary} bytes of binary output on stdout (forgot -o?)\n".encode()
            if rest:
                with self._lock:
                    self._write_log(rest)
            if exitfd is not None:
                os.close(exitfd)
            proc.stdout.close()
            proc.stderr.close()

    def _write_log(self, data):
        clear = getattr(self.progress, "clear", None)
        if clear:
            clear()
        try:
            self.log.write(data)
            self.log.flush()
        except (BrokenPipeError, ValueError):
            pass

    def run(self):
        """Run every shard; returns a :class:`Summary`.  Ctrl-C or SIGTERM in
        the calling thread terminates the running children, then re-raises."""
        threads = [threading.Thread(target=self._worker, daemon=True, name=f"kujob-{n}")
                   for n in range(min(self.jobs, len(self.results)))]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
                    self._changed()
        except BaseException:
            self.stop()
            for t in threads:
                t.join(10)
            raise
        finally:
            self._watchdog.close()
        return Summary(self.results)

    def stop(self):
        """Start no new shard and terminate the running ones (SIGTERM, then
        SIGKILL after 5 s)."""
        self._stop.set()
        with self._lock:
            procs = list(self._procs)
        for p in procs:
            _signal_group(p, "SIGTERM")
        deadline = time.monotonic() + 5
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(p, "SIGKILL")  # what is left of its group


#: Seconds a shard's leftover processes may go on after its command exited.
LEFTOVER_GRACE = 1.0


def _exited(pid):
    """Whether the child ``pid`` has exited, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(proc, name):
    """Signal the process group of a job (the leader not yet reaped, so the
    group id is still its own)."""
    import signal

    try:
        os.killpg(proc.pid, getattr(signal, name))
    except (ProcessLookupError, PermissionError):
        pass


def _shell_line(argv):
    import shlex

    return " ".join(shlex.quote(a) for a in argv)
