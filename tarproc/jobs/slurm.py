"""kujob as a Slurm job array: the sbatch script, ``sbatch``, waiting with
``squeue`` and the per-id report.

One array task per shard id.  Task N runs ``kujob --task-index N -s PATTERN --
COMMAND`` (the same code as a local run and a Kubernetes pod), so the script
carries the pattern and the command, not a copy of the id list, and stays
self-contained.  ``--array`` lists only the positions to run (all of them, or
with ``done_if`` those whose output is missing), with ``%N`` as the throttle.
A cluster takes array indexes below its ``MaxArraySize`` (``scontrol show
config``; 1001 by default): :func:`submit` splits a larger set into several
arrays (:func:`split_indexes`), each task adding its array's offset to its
index, so a task's number, log and record are the shard's position whatever
the array; with a throttle the arrays run one after another.

Results do not come from Slurm's accounting (a fresh single-node install has
none): each task writes its exit status to ``<log_dir>/<name>-<array job
id>.exit/<N>`` (written under a temporary name, then renamed), and
:func:`wait` reads those files once ``squeue`` no longer lists the arrays.
A task with no record was cancelled, timed out or killed before its shell
could write one (a SIGTERM from Slurm is recorded as 143).

Retries run inside the task: ``kujob --retries N`` reruns a failing command
at once, in the same allocation.  That needs no requeue permission and
counts per shard, like Kubernetes' ``backoffLimitPerIndex``.

Nothing here prints: messages go to the ``status`` callback.
"""

import os
import re
import shlex
import shutil
import subprocess
import time

from ..errors import EXIT_FAILED, TarprocError, UsageError, describe_exit
from .k8s import check_command_syntax, derive_name
from .local import Result, Summary, check_done_template, expand_ids, fill, is_done, uses_shell

DEFAULT_LOG_DIR = "kujob-logs"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}\Z")
_TIME = re.compile(r"(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE|unlimited|infinite)\Z")
_MEM = re.compile(r"(\d+)\s*(?:([KMGTkmgt])(?:i?B|i)?)?\Z")
_WORDS = re.compile(r"[A-Za-z0-9_.,+:=@-]+\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_GONE = ("Invalid job id", "invalid job id")
# an sbatch option that is --dependency (sbatch takes any unambiguous prefix, --dep on)
_DEPENDENCY = re.compile(r"(?:--dep[a-z]*(?:=|\s+)|-d\s*)(\S+)\Z")


def merge_dependency(header, ours):
    """The ``--dependency`` of an array: the user's (an ``--sbatch`` line)
    and ours (held by other arrays) both, or either."""
    theirs = [m.group(1) for m in map(_DEPENDENCY.match, header) if m]
    user = theirs[-1] if theirs else None  # (as sbatch: the last one given)
    if not ours or not user:
        return ours or user
    if "?" in user:
        raise UsageError(f"--sbatch --dependency={user}: a dependency with '?' (any of) cannot be combined with "
                         f"the one kujob adds ({ours}); use ',' (all of)")
    return f"{user},{ours}"


class Part:
    """One submitted array of a job: its job id, its offset, its positions."""

    def __init__(self, offset, positions, job_id=None):
        self.offset = offset
        self.positions = positions
        self.job_id = job_id


def array_spec(indexes, throttle=None):
    """``[0, 1, 2, 5, 7, 8]`` -> ``0-2,5,7-8`` (plus ``%N`` with a throttle)."""
    parts = []
    start = prev = None
    for i in sorted(indexes):
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    spec = ",".join(parts)
    return f"{spec}%{int(throttle)}" if throttle else spec


#: MaxArraySize when ``scontrol show config`` does not say (Slurm's default).
DEFAULT_MAX_ARRAY_SIZE = 1001
#: Bytes of ``scontrol show config`` (a few KiB) or sbatch's answer read.
CONFIG_BYTES = 1 << 20
#: Bytes of squeue's line per task kept (``%F %K %T``: under 40).
QUEUE_LINE_BYTES = 64


def split_indexes(indexes, limit, max_tasks=None):
    """The positions ``indexes`` as arrays a cluster takes: ``[(offset,
    [array index, ...]), ...]``, every array index below ``limit``
    (MaxArraySize) and at most ``max_tasks`` per array; position = offset +
    array index.  Positions that all fit stay as they are (one array,
    offset 0); else each array starts at the first position left (the
    fewest arrays an offset can give)."""
    indexes = sorted(set(indexes))
    limit = max(1, int(limit))
    max_tasks = limit if max_tasks is None else max(1, int(max_tasks))
    if not indexes:
        return []
    if indexes[-1] < limit and len(indexes) <= max_tasks:
        return [(0, indexes)]
    parts = []
    for i in indexes:
        if not parts or i - parts[-1][0] >= limit or len(parts[-1][1]) >= max_tasks:
            parts.append((i, []))
        parts[-1][1].append(i - parts[-1][0])
    return parts


def slurm_memory(value):
    """Memory per node for ``--mem``: Slurm's own ``8G``, ``500M``, ``0``
    (a bare number is megabytes, as in sbatch), or ``8Gi``/``8GiB``/``8GB``
    (Slurm counts in powers of 1024 whatever the spelling)."""
    m = _MEM.match(str(value).strip())
    if not m:
        raise UsageError(f"bad --mem {value!r} (use e.g. 8G, 500M, 16GiB; a bare number is megabytes)")
    return m.group(1) + (m.group(2) or "").upper()


def _word(value, what):
    """A value for an ``#SBATCH`` line: one word of safe characters (no
    newline that could end the header and start a command)."""
    text = str(value)
    if not _WORDS.match(text):
        raise UsageError(f"bad {what} {value!r}: use letters, digits and ._,+:=@-")
    return text


def sbatch_line(line):
    """An extra header line: ``--gres=gpu:1``, ``gres=gpu:1`` (the dashes
    are added) or ``#SBATCH --gres=gpu:1``."""
    text = str(line).strip()
    if text.startswith("#SBATCH"):
        text = text[len("#SBATCH"):].strip()
    if text and text[0].isalpha():
        text = "--" + text
    if not text.startswith("-") or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UsageError(f"bad --sbatch {line!r}: give one sbatch option, e.g. --sbatch '--gres=gpu:1'")
    return text


def _path_ok(path):
    """A path sbatch can take in an ``#SBATCH`` line: no ``%`` or ``\\``
    (file name patterns), no ``"`` (the quotes around a path with spaces),
    no control characters."""
    return bool(path) and not any(c in path for c in '%\\"') and not any(ord(c) < 32 or ord(c) == 127 for c in path)


def _directive_path(path):
    return f'"{path}"' if any(c.isspace() for c in path) else path


def _log_dir(path, cwd):
    text = str(path)
    if not _path_ok(text):
        raise UsageError(f"bad --log-dir {path!r}: no '%', '\\', '\"' or control characters (Slurm would "
                         f"read them as file name patterns)")
    return os.path.normpath(os.path.join(cwd, text))


class ArrayJob:
    """A planned job array; :meth:`script` is the sbatch script.
    ``tail_bytes``: the stderr of a Slurm client kept for its message
    (``TARPROC_TAIL_BYTES``; ``None``: the default)."""

    def __init__(self, command, patterns, ids, indexes, name, log_dir, chdir, kujob, done_if, retries,
                 throttle, header, env, retry_all=False, tail_bytes=None):
        self.command = list(command)
        self.tail_bytes = tail_bytes
        self.retry_all = retry_all  # the task's kujob retries exit status 2 too
        self.patterns = list(patterns)
        self.ids = ids
        self.indexes = indexes  # 0-based positions in ids that this array runs
        self.name = name
        self.log_dir = log_dir
        self.chdir = chdir
        self.kujob = kujob
        self.done_if = done_if
        self.retries = retries
        self.throttle = throttle
        self.header = header  # sbatch options beyond the fixed ones
        self.env = env
        self.max_array_size = None  # the cluster's, as submit() found it
        self.parts = []  # the submitted arrays: Part (job id, offset, positions), set by submit()

    @property
    def empty(self):
        return not self.indexes

    @property
    def job_ids(self):
        return [p.job_id for p in self.parts]

    def log_path(self, job_id, index):
        return os.path.join(self.log_dir, f"{self.name}-{job_id}_{index}.log")

    def record_dir(self, job_id):
        return os.path.join(self.log_dir, f"{self.name}-{job_id}.exit")

    def task_argv(self):
        argv = [self.kujob, "--task-index", "$kujob_task"]
        for p in self.patterns:
            argv += ["-s", p]
        if self.retries:
            argv += ["--retries", str(self.retries)] + (["--retry-all"] if self.retry_all else [])
        if self.done_if:
            argv += ["--done-if", self.done_if]
        return argv + ["-v", "--"] + self.command

    def script(self, offset=0, indexes=None, dependency=None):
        """The sbatch script of the array that runs positions ``indexes``
        (default: all of the job's) as array indexes ``position - offset``
        (``offset`` 0: the positions themselves); ``dependency``: its
        ``--dependency`` value."""
        q = shlex.quote
        positions = self.indexes if indexes is None else indexes
        base = os.path.join(self.log_dir, self.name)
        # an array with an offset starts its log under another name, which the task renames to its position
        # (slurmd names it by array index; the two kinds of names never meet)
        output = base + ("-%A_%a.log" if offset == 0 else "-%A-index%a.log")
        header = [line for line in self.header if not _DEPENDENCY.match(line)]
        dependency = merge_dependency(self.header, dependency)
        head = [
            "#!/bin/bash",
            f"#SBATCH --job-name={self.name}",
            f"#SBATCH --array={array_spec([i - offset for i in positions], self.throttle)}",
            f"#SBATCH --output={_directive_path(output)}",
            f"#SBATCH --chdir={_directive_path(self.chdir)}",
        ] + [f"#SBATCH {line}" for line in header] + (
            [f"#SBATCH --dependency={dependency}"] if dependency else [])
        # only kujob's own --task-index is the task's number: a command argument that
        # reads $SLURM_ARRAY_TASK_ID is quoted like any other (as in a local run)
        task = " ".join('"$kujob_task"' if n == 2 else q(a) for n, a in enumerate(self.task_argv()))
        records = q(base + "-")
        where = "N" if offset == 0 else f"N + {offset}"
        body = [
            "",
            f"# kujob: {len(positions)} of {len(self.ids)} shard ids; array task N runs the shard at",
            f"# 0-based position {where} of the pattern, with the same kujob code as a local run.",
            "# Each task writes its exit status to <log dir>/<name>-<array job id>.exit/<position>",
            "# for 'kujob --wait'; a failing command is retried inside the task (--retries).",
            f"# The log directory must exist before sbatch: mkdir -p {q(self.log_dir)}",
            ": \"${SLURM_ARRAY_TASK_ID:?submit this script with sbatch: it is a job array}\"",
        ] + [f"export {name}={q(value)}" for name, value in self.env] + [
            f"kujob_task=$((SLURM_ARRAY_TASK_ID + {int(offset)}))",
        ] + ([f"mv -f {records}\"$SLURM_ARRAY_JOB_ID-index$SLURM_ARRAY_TASK_ID.log\" "
              f"{records}\"${{SLURM_ARRAY_JOB_ID}}_$kujob_task.log\" 2>/dev/null"] if offset else []) + [
            f"kujob_exit={records}\"$SLURM_ARRAY_JOB_ID\".exit",
            "kujob_record() {",
            "    mkdir -p \"$kujob_exit\" &&",
            "    printf '%s\\n' \"$1\" > \"$kujob_exit/$kujob_task.tmp\" &&",
            "    mv -f \"$kujob_exit/$kujob_task.tmp\" \"$kujob_exit/$kujob_task\"",
            "}",
            "trap 'kujob_record 143; exit 143' TERM",
            task,
            "kujob_status=$?",
            "kujob_record \"$kujob_status\"",
            "exit \"$kujob_status\"",
        ]
        return "\n".join(head + body) + "\n"


def plan(command, patterns, *, name=None, log_dir=DEFAULT_LOG_DIR, chdir=None, kujob=None, done_if=None,
         retries=0, retry_all=False, throttle=None, cpus_per_task=None, mem=None, time_limit=None, partition=None,
         account=None, sbatch=(), env=(), status=None, warn=None, check_threads=16, settings=None):
    """Plan the array for ``command`` over the ids of ``patterns``.

    With ``done_if``, ids whose output exists are left out (checked here, 16
    at a time, and again by each task).  Ids that cannot go into a shell
    command are refused, as for Kubernetes.  ``chdir`` (default: the current
    directory) is where the tasks run, so relative paths in the command mean
    what they mean here; ``log_dir`` is made absolute against it.  ``warn``
    hears about a program that is not on PATH here (it may be on the nodes)."""
    if isinstance(patterns, str):
        patterns = [patterns]
    patterns = list(patterns)
    ids = expand_ids(patterns, settings)
    check_command_syntax(command)
    if uses_shell(command):
        for shard_id in ids:
            fill(command, shard_id)
    if done_if:
        check_done_template(done_if, len(ids), settings)
    if warn and not uses_shell(command) and "{}" not in command[0] and shutil.which(command[0]) is None:
        warn(f"warning: {command[0]} is not on PATH here: every task fails unless the nodes have it")
    if int(retries) < 0:
        raise UsageError(f"bad --retries {retries}: must be 0 or more")
    if throttle is not None and int(throttle) < 1:
        raise UsageError(f"bad --jobs {throttle}: must be at least 1")
    if name is None:
        name = derive_name(command, patterns)
    elif not _NAME.match(name):
        raise UsageError(f"bad --name {name!r}: letters, digits and ._+- (at most 128, no '/')")
    chdir = os.path.abspath(chdir or os.getcwd())
    if not _path_ok(chdir):
        raise UsageError(f"cannot run tasks in {chdir!r}: sbatch cannot take '%', '\\', '\"' or control "
                         f"characters in --chdir; run kujob from another directory")
    header = []
    if cpus_per_task is not None:
        if int(cpus_per_task) < 1:
            raise UsageError(f"bad --cpus-per-task {cpus_per_task}: must be at least 1")
        header.append(f"--cpus-per-task={int(cpus_per_task)}")
    if mem is not None:
        header.append(f"--mem={slurm_memory(mem)}")
    if time_limit is not None:
        if not _TIME.match(str(time_limit)):
            raise UsageError(f"bad --time {time_limit!r} (use minutes, HH:MM:SS or D-HH:MM:SS)")
        header.append(f"--time={time_limit}")
    if partition is not None:
        header.append(f"--partition={_word(partition, '--partition')}")
    if account is not None:
        header.append(f"--account={_word(account, '--account')}")
    header += [sbatch_line(line) for line in sbatch]
    env_pairs = []
    for item in env or ():
        key, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(key):
            raise UsageError(f"bad --env {item!r} (use NAME=VALUE)")
        env_pairs.append((key, value))
    kujob = kujob or shutil.which("kujob") or "kujob"
    indexes = list(range(len(ids)))
    if done_if:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(1, check_threads)) as pool:
            done = list(pool.map(lambda i: is_done(done_if, i, settings), ids))
        indexes = [n for n in indexes if not done[n]]
        if status and len(indexes) < len(ids):
            status(f"{len(ids) - len(indexes)} of {len(ids)} shards are done ({done_if} exists): left out")
    return ArrayJob(command, patterns, ids, indexes, name, _log_dir(log_dir, chdir), chdir, kujob, done_if,
                    int(retries), throttle, header, env_pairs, retry_all=retry_all,
                    tail_bytes=settings.tail_bytes if settings is not None else None)


# --------------------------------------------------------------------------- sbatch, squeue, scancel

def _tool(name):
    path = shutil.which(name)
    if path is None:
        raise UsageError(f"{name} is not on PATH: run this on a Slurm login node, or print the script "
                         f"(kujob --slurm ... > job.sh) and submit it there with 'sbatch job.sh'")
    return path


#: Characters of a Slurm client's message kept in an error line.
TAIL_CHARS = 1000


def _client(argv, name, timeout, input=None, stdout="pipe", tail_bytes=None, limit=None):
    """Run a Slurm client (``sbatch``, ``squeue``, ``scancel``) to its end as a
    :class:`~tarproc.runtime.child.Child` (its own process group, killed
    whole after ``timeout`` seconds with ``subprocess.TimeoutExpired``, or
    when we die; SIGCHLD at its default; ``/dev/null`` for a closed stream of
    ours); returns ``(stdout, exit status, last bytes of its stderr)`` (at
    most ``limit`` bytes of stdout, ``tail_bytes`` of stderr)."""
    from ..runtime.child import Child

    child = Child(argv, name, stdin="pipe" if input is not None else None, stdout=stdout, stderr="tail",
                  tail_bytes=tail_bytes)
    out = child.communicate(input, timeout, limit=limit)
    return out, child.returncode, child.kept_stderr()[0]


class SubmitError(TarprocError):
    """sbatch refused the job or failed (exit 1: the cluster said no, not the user)."""

    exit_code = EXIT_FAILED


def max_array_size(tail_bytes=None):
    """``(MaxArraySize, max_array_tasks)`` of the cluster, from ``scontrol
    show config`` (its first :data:`CONFIG_BYTES`); 1001 (Slurm's default,
    tasks: the same) when scontrol cannot say.  0 means the cluster takes no
    job arrays."""
    size = tasks = None
    try:
        out, code, _ = _client([_tool("scontrol"), "show", "config"], "scontrol", 60, tail_bytes=tail_bytes,
                               limit=CONFIG_BYTES)
    except (subprocess.TimeoutExpired, UsageError, OSError):
        out, code = b"", 1
    if code == 0:
        for line in out.decode("utf-8", "replace").splitlines():
            key, _, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if key == "MaxArraySize" and value.isdigit() and len(value) < 10:
                size = int(value)
            elif key == "SchedulerParameters":
                m = re.search(r"(?:^|,)max_array_tasks=(\d{1,9})(?:,|$)", value)
                tasks = int(m.group(1)) if m else None
    size = DEFAULT_MAX_ARRAY_SIZE if size is None else size
    return size, (size if tasks is None else min(size, tasks))


def submit(job, after=(), limit=None, status=None):
    """Create the log directory and submit the job with ``sbatch``, as one
    array or, past the cluster's MaxArraySize, several (``limit``:
    ``(MaxArraySize, tasks per array)``, default :func:`max_array_size`);
    returns their job ids (``job.parts`` keeps which runs what).  With a
    throttle the arrays run one after another (``afterany``), so ``-j N``
    holds for the whole job; ``after``: job ids every array waits for
    (``afterok``).  A refusal by sbatch is a :class:`SubmitError` that
    carries sbatch's own message; it, or Ctrl-C meanwhile, cancels the
    arrays already submitted (an interruption said through ``status``)."""
    if job.empty:
        raise UsageError("nothing to submit: every shard is done")
    sbatch = _tool("sbatch")
    size, per_array = max_array_size(job.tail_bytes) if limit is None else limit
    if size < 1:
        raise SubmitError("this cluster takes no job arrays (MaxArraySize = 0 in scontrol show config)")
    job.max_array_size = size
    parts = [Part(offset, [offset + i for i in local]) for offset, local in split_indexes(job.indexes, size, per_array)]
    os.makedirs(job.log_dir, exist_ok=True)
    job.parts = []
    try:
        for n, part in enumerate(parts):
            deps = ([f"afterok:{':'.join(after)}"] if after else []) + (
                [f"afterany:{job.parts[-1].job_id}"] if job.throttle and job.parts else [])
            try:
                part.job_id = _sbatch(sbatch, job, job.script(part.offset, part.positions, ",".join(deps) or None))
            except SubmitError as e:
                if len(parts) == 1:
                    raise
                where = (f"array {n + 1} of {len(parts)} (positions {part.positions[0]}-{part.positions[-1]}, "
                         f"MaxArraySize {size})")
                raise SubmitError(str(e).replace("sbatch failed:", f"sbatch failed on {where}:", 1)) from None
            job.parts.append(part)
    except BaseException as e:
        if job.parts:
            ids = job.job_ids
            code = cancel(ids, job.tail_bytes)
            done = f"{'cancelled' if code == 0 else 'could not cancel'} the arrays already submitted (scancel " \
                   f"{' '.join(ids)})"
            job.parts = []
            if isinstance(e, SubmitError):
                raise SubmitError(f"{e}; {done}") from None
            if status:
                status(f"interrupted: {done}")
        raise
    return job.job_ids


def _sbatch(sbatch, job, script):
    out, code, stderr = _client([sbatch, "--parsable"], "sbatch", 300, input=script.encode("utf-8", "surrogateescape"),
                                tail_bytes=job.tail_bytes, limit=CONFIG_BYTES)
    if code != 0:
        from ..core.limits import safe_text

        why = stderr.decode("utf-8", "replace").strip().replace("\n", "; ") or describe_exit(code)
        raise SubmitError(f"sbatch failed: {safe_text(why, TAIL_CHARS)}")
    job_id = out.decode(errors="replace").strip().split(";")[0]
    if not job_id.isdigit():
        from ..core.limits import safe_text

        raise SubmitError(f"sbatch printed no job id: {safe_text(repr(out.decode(errors='replace')), TAIL_CHARS)}")
    return job_id


def _ids(job_ids):
    return [job_ids] if isinstance(job_ids, str) else list(job_ids)


def queue_states(job_ids, tail_bytes=None, tasks=None):
    """``{(array job id, array index): state}`` of the tasks of the arrays
    ``job_ids`` (one id or a list; ``tasks``: how many they hold, which
    bounds what is read) that Slurm still lists (pending, running,
    completing); ``{}`` once they are gone.  ``None`` when squeue itself
    failed (controller busy): try again later."""
    ids = _ids(job_ids)
    limit = QUEUE_LINE_BYTES * ((tasks or 4000001 * len(ids)) + 1)
    try:
        out, code, stderr = _client([_tool("squeue"), "-h", "-r", f"--jobs={','.join(ids)}", "-o", "%F %K %T"],
                                    ",".join(ids), 120, tail_bytes=tail_bytes, limit=limit)
    except subprocess.TimeoutExpired:
        return None
    if code != 0:
        return {} if any(g in stderr.decode("utf-8", "replace") for g in _GONE) else None
    states = {}
    for line in out.decode("utf-8", "replace").splitlines():
        words = line.split()
        if len(words) == 3 and words[1].isdigit():
            states[(words[0], int(words[1]))] = words[2]
    return states


def cancel(job_ids, tail_bytes=None):
    """``scancel JOB_ID...``: the whole arrays; returns scancel's exit status."""
    ids = _ids(job_ids)
    if not ids:
        return 0
    try:
        return _client([_tool("scancel")] + ids, ",".join(ids), 60, stdout=None, tail_bytes=tail_bytes)[1]
    except (subprocess.TimeoutExpired, UsageError, OSError):
        return None


def read_record(job, job_id, index):
    """The exit status a task recorded, or None."""
    try:
        with open(os.path.join(job.record_dir(job_id), str(index))) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def log_tail(path, lines=5, limit=1 << 16):
    """The last few lines of a task's log (at most ``limit`` bytes read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def _parts(job, job_ids):
    """The job's submitted arrays; ``job_ids`` given for a job submitted
    elsewhere (the printed script through sbatch): one array, offset 0."""
    if job_ids is None or (job.parts and _ids(job_ids) == job.job_ids):
        return job.parts
    ids = _ids(job_ids)
    if len(ids) != 1:
        raise UsageError("job ids of arrays not submitted by submit(): give one (the printed script's)")
    return [Part(0, list(job.indexes), ids[0])]


def wait(job, job_ids=None, poll=10.0, status=None, progress=None, verbose=False, grace=None, also=(), cancel_all=True):
    """Wait until ``squeue`` no longer lists the job's arrays, then read
    each task's exit record; returns a :class:`Summary` over every id of
    the pattern (ids left out by ``done_if`` count as skipped).
    ``job_ids``: only for a job that :func:`submit` did not submit.

    Ctrl-C or SIGTERM while waiting cancels the arrays with ``scancel``
    (and the jobs ``also``, e.g. arrays held by these; said through
    ``status``) and re-raises (``cancel_all=False``: the caller cancels).  ``progress`` is called with a dict of counts
    after each poll."""
    say = status or (lambda message: None)
    parts = _parts(job, job_ids)
    ids = [p.job_id for p in parts]
    shown = " ".join(ids)
    started = time.monotonic()
    failures = 0
    try:
        while True:
            states = queue_states(ids, job.tail_bytes, tasks=len(job.indexes))
            if states is None:
                failures += 1
                if failures == 3:
                    say(f"squeue does not answer about job {shown}; still waiting")
            else:
                failures = 0
                if progress:
                    running = sum(1 for s in states.values() if s in ("RUNNING", "COMPLETING"))
                    progress({"job": shown, "total": len(job.indexes), "pending": len(states) - running,
                              "running": running, "finished": len(job.indexes) - len(states),
                              "seconds": time.monotonic() - started})
                if not states:
                    break
            time.sleep(poll)
    except BaseException:
        if not cancel_all:
            raise
        every = ids + [i for i in _ids(also) if i not in ids]
        code = cancel(every, job.tail_bytes)
        done = "cancelled" if code == 0 else "could not cancel"
        say(f"interrupted: {done} job array{'s' if len(every) > 1 else ''} {' '.join(every)} "
            f"(scancel {' '.join(every)})")
        raise
    # records on a shared file system may show up a little after the task ends
    grace = min(30.0, 3 * poll) if grace is None else grace
    deadline = time.monotonic() + grace
    by_part = [(p.job_id, n) for p in parts for n in p.positions]
    while any(read_record(job, j, n) is None for j, n in by_part) and time.monotonic() < deadline:
        time.sleep(min(poll, 1.0))
    return report(job, job_ids, status=say, verbose=verbose)


def report(job, job_ids=None, status=None, verbose=False, tail=5, max_tails=10):
    """The :class:`Summary` of a finished job from the tasks' records;
    failed ids are told through ``status`` with their log and its last
    lines (for the first ``max_tails`` failures)."""
    say = status or (lambda message: None)
    parts = _parts(job, job_ids)
    where = {n: p.job_id for p in parts for n in p.positions}
    results = [Result(i, n) for n, i in enumerate(job.ids)]
    tails = 0
    for r in results:
        if r.index not in where:
            r.status = "skipped"
            continue
        job_id = where[r.index]
        code = read_record(job, job_id, r.index)
        log = job.log_path(job_id, r.index)
        r.returncode = code
        r.attempts = 1
        if code == 0:
            r.status = "ok"
            if verbose:
                say(f"[{r.shard_id}] ok")
            continue
        r.status = "failed"
        if code is None:
            r.message = "no exit record: cancelled, timed out or killed before it could write one"
        elif code == 143:
            r.message = "terminated (SIGTERM: scancel or the time limit)"
        else:
            r.message = describe_exit(code)
        say(f"[{r.shard_id}] failed ({r.message}); log: {log}")
        if tails < max_tails:
            tails += 1
            for line in log_tail(log, tail):
                say(f"[{r.shard_id}]   {line}")
    return Summary(results)


def summary_line(summary):
    c = summary.counts()
    return (f"{len(summary.results)} shards: {c['ok']} ok, {c['failed']} failed, "
            f"{c['skipped']} skipped (done)")


__all__ = ["ArrayJob", "DEFAULT_LOG_DIR", "DEFAULT_MAX_ARRAY_SIZE", "Part", "SubmitError", "array_spec", "cancel",
           "max_array_size", "merge_dependency", "plan", "queue_states", "read_record", "report", "slurm_memory",
           "split_indexes", "submit", "summary_line", "wait"]
