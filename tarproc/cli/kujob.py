"""kujob: run one command per shard, here (a small process pool), on
Kubernetes (an Indexed Job whose pods run kujob for their own shard) or on
Slurm (a job array whose tasks do the same)."""

import os
import sys
from typing import Annotated, List, Optional

import typer

from ..core.limits import safe_text
from .base import Args, ProgressFlag, Quiet, Verbose, command, opt, replaced, run, seconds

EXAMPLES = """
kujob -s '{0000..0009}' -j 4 -- tarcat -c 100 in-{}.tar -o small-{}.tar
kujob -s '{0000..0999}' --done-if ocr-{}.tar --retries 2 -- \\
    tarproc -p 16 -c 'run-ocr *.png' scanned-{}.tar -o ocr-{}.tar
kujob -s '{00..99}' -- 'tarcat in-{}.tar | gzip > out-{}.tar.gz'   # one string: sh -c
kujob -s '{0000..0999}' -n -- tarcat in-{}.tar -o out-{}.tar      # show the commands only
kujob --k8s --image ghcr.io/me/ocr:1 --cpu 16 --memory 8Gi --parallelism 50 \\
    -s '{0000..0999}' -- tarproc -p 16 -c 'run-ocr *.png' \\
    gs://g1000/scanned-{}.tar -o gs://g1000/ocr-{}.tar > job.json
kujob --k8s --apply --image IMAGE -s '{0000..0999}' -- CMD ...   # kubectl apply -f -
kujob --task-index 7 -s '{0000..0999}' -- CMD ...                 # shard 0007 only
kujob --slurm --cpus-per-task 16 --mem 8G --time 2:00:00 -j 50 --done-if ocr-{}.tar \\
    -s '{0000..0999}' -- tarproc -p 16 -c 'run-ocr *.png' scanned-{}.tar -o ocr-{}.tar > job.sh
kujob --slurm --wait --partition gpu -s '{0000..0999}' -- CMD ...  # sbatch, wait, report per id
"""

NOTES = """\
Every {} in every argument of the command is replaced by the shard id; the
command runs without a shell, unless it is ONE argument containing spaces or
shell characters, which runs with sh -c (ids pasted into a shell command must
be made of letters, digits and ._,+=:@%/-).  Each run also sees KUJOB_ID
(the id) and KUJOB_INDEX (its 0-based position) in its environment.  The
children's output (stdout and stderr) goes to stderr, each line prefixed
with [id].

exit status: 0 every shard ok (or skipped by --done-if), 1 some shards failed
(their ids are listed at the end), 2 bad usage (bad pattern, command not
found, kubectl missing for --apply, sbatch missing for --submit)."""


@command("Run a command once per shard id: locally with a process pool, on Kubernetes as an Indexed Job, "
         "or on Slurm as a job array.",
         EXAMPLES, NOTES, context={"allow_interspersed_args": False})
def kujob_command(
    shards: Annotated[List[str], opt("-s", "--ids", metavar="PATTERN",
                      help="shard ids as a brace pattern, e.g. '{0000..0999}' or '{a,b,c}-{0..3}' (repeat to add "
                           "more)")],
    jobs: Annotated[Optional[int], opt("-j", "--jobs", metavar="N",
                    help=f"run N shards at once (default: the number of cores, {os.cpu_count() or 1} "
                         f"here)")] = None,
    retries: Annotated[int, opt("--retries", metavar="N",
                       help="run a failing shard up to N more times (on Kubernetes: "
                            "backoffLimitPerIndex); exit status 2 (usage or bad input) is not retried")] = 0,
    retry_all: Annotated[bool, opt("--retry-all", help="with --retries: retry exit status 2 too")] = False,
    done_if: Annotated[Optional[str], opt("--done-if", metavar="TEMPLATE",
                       help="skip a shard when this file or URL exists, e.g. 'ocr-{}.tar' (tarproc writes files "
                            "atomically, so an existing output is complete); a shard that exits 0 without "
                            "creating it counts as failed")] = None,
    dry_run: Annotated[bool, opt("-n", "--dry-run",
                       help="print the command of every shard that would run (one per line) and exit")] = False,
    index: Annotated[Optional[str], opt("--task-index", metavar="N",
                     help="one shard (what each Kubernetes pod runs): run only the shard at 0-based position N "
                          "of the pattern")] = None,
    index_replaced: replaced("--index", "--task-index") = None,
    shards_replaced: replaced("--shards", "-s/--ids") = None,
    index_from_env: Annotated[bool, opt("--index-from-env",
                              help="take N from $JOB_COMPLETION_INDEX (set by Kubernetes in an Indexed "
                                   "Job)")] = False,
    k8s: Annotated[bool, opt("--k8s", help="print a batch/v1 Indexed Job manifest as JSON instead of "
                                           "running")] = False,
    image: Annotated[Optional[str], opt("--image", metavar="IMAGE",
                     help="container image with tarproc and the command installed")] = None,
    name: Annotated[Optional[str], opt("--name", metavar="NAME",
                    help="Job name, a DNS-1123 label (default: kujob-<program>-<hash of the job>)")] = None,
    namespace: Annotated[Optional[str], opt("--namespace", metavar="NS",
                         help="namespace of the Job (default: kubectl's)")] = None,
    parallelism: Annotated[Optional[int], opt("--parallelism", metavar="P",
                           help="pods at once (default: the number of shards, at most 100)")] = None,
    cpu: Annotated[str, opt("--cpu", metavar="N",
                   help="CPU request and limit per pod, e.g. 16 or 500m (default: 1)")] = "1",
    memory: Annotated[str, opt("--memory", metavar="M",
                      help="memory request and limit per pod, e.g. 8Gi (default: 2Gi)")] = "2Gi",
    max_failed: Annotated[Optional[int], opt("--max-failed", metavar="N",
                          help="once more than N shards have failed, start no more (with --k8s: "
                               "maxFailedIndexes fails the whole Job; default: run every shard)")] = None,
    env: Annotated[Optional[List[str]], opt("-e", "--env", metavar="NAME=VALUE",
                   help="environment variable for the pods (repeatable)")] = None,
    ttl: Annotated[Optional[int], opt("--ttl", metavar="SECONDS",
                   help="delete the finished Job after SECONDS (ttlSecondsAfterFinished)")] = None,
    kujob: Annotated[str, opt("--kujob", metavar="PATH",
                     help="kujob inside the image (default: kujob)")] = "kujob",
    apply: Annotated[bool, opt("--apply", help="pipe the manifest to 'kubectl apply -f -' (KUJOB_KUBECTL "
                                               "overrides the kubectl command)")] = False,
    # Slurm (print an sbatch job array script; -j, --retries, --done-if, --name, -e and --kujob apply too)
    slurm_: Annotated[bool, opt("--slurm", help="Slurm: print the sbatch script of a job array, one task per "
                                                "shard id (-j N: at most N at once)")] = False,
    submit: Annotated[bool, opt("--submit", help="Slurm: submit it with sbatch and print the job id (one a line: "
                                                 "several arrays past the cluster's MaxArraySize)")] = False,
    wait: Annotated[bool, opt("--wait", help="Slurm: submit, wait for every task, report per id (exit 1 naming "
                                             "the failed ids); Ctrl-C cancels the arrays")] = False,
    partition: Annotated[Optional[str], opt("--partition", metavar="P", help="Slurm: sbatch --partition")] = None,
    account: Annotated[Optional[str], opt("--account", metavar="A", help="Slurm: sbatch --account")] = None,
    time: Annotated[Optional[str], opt("--time", metavar="T", help="Slurm: time limit per task, e.g. 90 "
                                                                   "(minutes), 2:00:00, 1-00:00:00")] = None,
    mem: Annotated[Optional[str], opt("--mem", metavar="M", help="Slurm: memory per task, e.g. 8G, 500M (a bare "
                                                                 "number is megabytes)")] = None,
    cpus_per_task: Annotated[Optional[int], opt("--cpus-per-task", metavar="N",
                             help="Slurm: CPUs per task")] = None,
    log_dir: Annotated[Optional[str], opt("--log-dir", metavar="DIR", help="Slurm: task logs and exit records "
                                                                           "(default: kujob-logs)")] = None,
    sbatch: Annotated[Optional[List[str]], opt("--sbatch", metavar="LINE",
                      help="Slurm: extra #SBATCH option, e.g. --sbatch gres=gpu:1 or --sbatch=--gres=gpu:1 "
                           "(repeatable)")] = None,
    poll: Annotated[Optional[float], opt("--poll", metavar="SECONDS", parser=seconds(),
                    help="Slurm: squeue interval for --wait (default: 10)")] = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
    command_: Annotated[Optional[List[str]], typer.Argument(
        metavar="-- COMMAND...", show_default=False, help="the command, with {} for the shard id")] = None,
):
    args = Args(locals())
    args.command = list(args.command_ or [])
    args.env = list(args.env or [])
    args.slurm, args.sbatch = args.slurm_, list(args.sbatch or [])
    return main(args, args.extra.get("after"), args.prog)


SLURM_OPTIONS = ("submit", "wait", "partition", "account", "time", "mem", "cpus_per_task", "log_dir", "sbatch",
                 "poll")


def _this_kujob():
    """The running kujob's own path, so that tasks run the same one (None: look on PATH)."""
    me = os.path.abspath(sys.argv[0])
    return me if os.path.basename(me) == "kujob" and os.access(me, os.X_OK) else None


def slurm(args, command, prog):
    """--slurm: print the script, or submit it (and wait)."""
    from ..errors import UsageError
    from ..jobs import slurm

    shown = []  # a progress line is on the terminal

    def clear():
        if shown:
            sys.stderr.write("\r\x1b[K")
            shown.clear()

    def status(message):
        clear()
        print(f"{prog}: {safe_text(message, lines=True)}", file=sys.stderr, flush=True)

    def progress(c):
        if sys.stderr.isatty() if args.progress is None else args.progress:
            from .base import draw_line

            draw_line(f"{prog}: job {c['job']}: {c['finished']}/{c['total']} finished, {c['running']} "
                      f"running, {c['pending']} pending, {c['seconds']:.0f} s")
            shown.append(1)

    if args.index is not None or args.index_from_env or args.dry_run or args.k8s or args.apply:
        raise UsageError("--task-index, --index-from-env, --dry-run, --k8s and --apply do not go with --slurm")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"bad --jobs {args.jobs}: must be at least 1")
    if args.max_failed is not None:
        raise UsageError("--max-failed does not go with --slurm (a Slurm array runs every task; kujob reruns "
                         "only the missing ones with --done-if)")
    job = slurm.plan(command, args.shards, name=args.name, log_dir=args.log_dir or slurm.DEFAULT_LOG_DIR,
                     kujob=args.kujob if args.kujob != "kujob" else _this_kujob(), done_if=args.done_if,
                     retries=args.retries, retry_all=args.retry_all, throttle=args.jobs, settings=args.settings,
                     cpus_per_task=args.cpus_per_task, mem=args.mem,
                     time_limit=args.time, partition=args.partition, account=args.account, sbatch=args.sbatch,
                     env=args.env, status=status, warn=None if args.quiet else status)
    if job.empty:
        status(f"all {len(job.ids)} shards are done (--done-if {args.done_if}): nothing to submit")
        return 0
    if not (args.submit or args.wait):
        if max(job.indexes) >= slurm.DEFAULT_MAX_ARRAY_SIZE and not args.quiet:
            status(f"warning: array index {max(job.indexes)}: a cluster with the default MaxArraySize "
                   f"({slurm.DEFAULT_MAX_ARRAY_SIZE}) refuses indexes from {slurm.DEFAULT_MAX_ARRAY_SIZE}; "
                   f"--submit or --wait splits the tasks into arrays the cluster takes")
        sys.stdout.write(job.script())
        return 0
    job_ids = slurm.submit(job, status=status)  # (Ctrl-C meanwhile: the arrays submitted so far are cancelled)
    try:
        if len(job_ids) == 1:
            status(f"submitted job array {job_ids[0]}: {len(job.indexes)} tasks, logs in {job.log_dir}")
        else:
            chained = f", one after another (-j {args.jobs} in all)" if args.jobs else ""
            status(f"submitted job arrays {' '.join(job_ids)}: {len(job.indexes)} tasks in {len(job_ids)} arrays "
                   f"(MaxArraySize {job.max_array_size}){chained}, logs in {job.log_dir}")
        if not args.wait:
            print("\n".join(job_ids), flush=True)
            return 0
        summary = slurm.wait(job, poll=10.0 if args.poll is None else max(0.05, args.poll), status=status,
                             progress=progress, verbose=args.verbose, cancel_all=False)
    except BaseException:
        if args.wait:  # Ctrl-C while waiting, or before: --wait cancels what it submitted
            code = slurm.cancel(job_ids, job.tail_bytes)
            status(f"interrupted: {'cancelled' if code == 0 else 'could not cancel'} job array"
                   f"{'s' if len(job_ids) > 1 else ''} {' '.join(job_ids)} (scancel {' '.join(job_ids)})")
        raise
    clear()
    if args.verbose:
        status(slurm.summary_line(summary))
    for line in failed_key_lists(command, job.ids):  # tarproc --failed-keys FILE in the command
        status(line)
    if summary.failed:
        status(f"{len(summary.failed)} of {len(job.ids)} shards failed: {' '.join(summary.failed)}")
        return 1
    return 0


def split_argv(argv):
    """Options before the first ``--``, the command after it (the command's
    own options are never taken for kujob's)."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


class Progress:
    """``kujob: 12/1000 done, 3 running, 1 failed, 40 skipped`` and a bar
    with rate and ETA (the shared progress line of :mod:`.base`)."""

    def __init__(self, prog, enabled):
        from .base import Progress as Line

        self.line = Line(prog, enabled, unit="shards")
        self.enabled = self.line.enabled

    def __call__(self, runner):
        if not self.enabled:
            return
        c = runner.counts()
        finished = c["ok"] + c["failed"] + c["skipped"]
        text = f"{finished}/{len(runner.results)} done, {c['running']} running"
        if c["failed"]:
            text += f", {c['failed']} failed"
        if c["skipped"]:
            text += f", {c['skipped']} skipped"
        self.line.total = len(runner.results)
        self.line.update(finished, text)

    def clear(self):
        self.line.clear()


def main(args, command, prog="kujob"):
    from .. import jobs
    from ..errors import UsageError

    if command is None:
        command = args.command
    elif args.command:
        raise UsageError(f"unexpected arguments before '--': {' '.join(args.command)}")

    if args.slurm:
        return slurm(args, command, prog)
    if any(getattr(args, o) not in (None, False, []) for o in SLURM_OPTIONS):
        raise UsageError("--submit, --wait, --partition, --account, --time, --mem, --cpus-per-task, --log-dir, "
                         "--sbatch and --poll go with --slurm")
    if args.apply and not args.k8s:
        raise UsageError("--apply goes with --k8s")
    if args.max_failed is not None and args.max_failed < 0:
        raise UsageError(f"bad --max-failed {args.max_failed}: must be 0 or more")
    if args.k8s:
        if args.index is not None or args.index_from_env:
            raise UsageError("--task-index/--index-from-env run one shard; they do not go with --k8s")
        manifest = jobs.job_manifest(
            command, args.shards, args.image, name=args.name, namespace=args.namespace,
            parallelism=args.parallelism, cpu=args.cpu, memory=args.memory, retries=args.retries,
            max_failed=args.max_failed, done_if=args.done_if, env=args.env, kujob=args.kujob, ttl=args.ttl,
            retry_all=args.retry_all, settings=args.settings)
        text = jobs.manifest_json(manifest)
        if args.apply:
            code = jobs.kubectl_apply(text, os.environ.get("KUJOB_KUBECTL"))  # (read here, at the edge)
            if code != 0:
                print(f"{prog}: kubectl apply failed (exit {code})", file=sys.stderr)
                return 1
            return 0
        sys.stdout.write(text)
        return 0

    ids = jobs.expand_ids(args.shards, args.settings)
    if args.done_if:
        jobs.check_done_template(args.done_if, len(ids), args.settings)
    first = 0
    first_only = args.index is not None or args.index_from_env
    if first_only:
        value = args.index
        if value is None:
            value = os.environ.get("JOB_COMPLETION_INDEX")
            if value is None:
                raise UsageError("JOB_COMPLETION_INDEX is not set (--index-from-env runs in a pod of an "
                                 "Indexed Job; here use --task-index N)")
        first, one = jobs.pick_index(ids, value)
        ids = [one]
    if args.retries < 0:
        raise UsageError(f"bad --retries {args.retries}: must be 0 or more")
    jobs.check_command(command, ids)
    if jobs.PLACEHOLDER not in " ".join(command) and not args.quiet:
        print(f"{prog}: warning: the command has no {{}}: every shard runs the same command "
              f"(it can read its id from $KUJOB_ID)", file=sys.stderr)

    if args.dry_run:
        import shlex

        for n, shard_id in enumerate(ids):
            if args.done_if and jobs.is_done(args.done_if, shard_id, args.settings):
                continue
            sys.stdout.write(" ".join(_shell_word(a) for a in jobs.fill(command, shard_id)) + "\n")
        return 0

    njobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if njobs < 1:
        raise UsageError(f"bad --jobs {njobs}: must be at least 1")
    from ..runtime.procs import fit_parallel

    fitted, limit = fit_parallel(min(njobs, len(ids)))  # as tarproc -p: what the open-file limit allows
    if fitted < min(njobs, len(ids)):
        if not args.quiet:
            print(f"{prog}: warning: -j {njobs} needs more open files than the limit of {limit} (ulimit -n) "
                  f"allows: running {fitted} shard{'s' if fitted > 1 else ''} at once", file=sys.stderr)
        njobs = fitted
    progress = Progress(prog, sys.stderr.isatty() if args.progress is None else args.progress)

    def status(message):
        progress.clear()
        print(f"{prog}: {safe_text(message, lines=True)}", file=sys.stderr, flush=True)

    runner = jobs.Runner(command, ids, jobs=njobs, retries=args.retries, retry_all=args.retry_all,
                         done_if=args.done_if,
                         log=sys.stderr.buffer, status=status, progress=progress,
                         verbose=args.verbose, first_index=first, settings=args.settings,
                         max_failed=args.max_failed)
    try:
        summary = runner.run()
    finally:
        progress.clear()
    if args.verbose:
        print(f"{prog}: {summary.line()}", file=sys.stderr, flush=True)
    for line in failed_key_lists(command, ids):  # tarproc --failed-keys FILE in the command
        print(f"{prog}: {line}", file=sys.stderr, flush=True)
    failed = summary.failed
    if failed:
        print(f"{prog}: {len(failed)} of {len(ids)} shards failed: {safe_text(' '.join(failed), lines=True)}",
              file=sys.stderr, flush=True)
        left = summary.ids("pending")
        if left:  # --max-failed spent: the rest were not started
            print(f"{prog}: more than --max-failed {args.max_failed} shards failed: {len(left)} not started "
                  f"({safe_text(' '.join(left[:10]), lines=True)}{' ...' if len(left) > 10 else ''})",
                  file=sys.stderr, flush=True)
        # one shard (a pod, a Slurm task) whose command exited 2: exit 2, so a
        # Kubernetes podFailurePolicy does not retry what cannot change
        return 2 if first_only and runner.results[0].returncode == 2 else 1
    return 0


def failed_key_lists(command, ids):
    """Lines for the summary: where the shards' lists of failed samples are,
    when the command has ``--failed-keys FILE`` (``tarproc``; FILE with
    ``{}``, e.g. ``failed-{}.txt``): each non-empty local list with its count
    of keys (a list on an object store is named as it is)."""
    import shlex

    from .. import jobs

    words = command
    if len(command) == 1:
        try:
            words = shlex.split(command[0])
        except ValueError:
            return []
    template = None
    for i, word in enumerate(words):
        if word == "--failed-keys" and i + 1 < len(words):
            template = words[i + 1]
        elif word.startswith("--failed-keys="):
            template = word.split("=", 1)[1]
    if template is None:
        return []
    lines = []
    for shard_id in ids:
        path = jobs.fill([template], shard_id)[0]
        if "://" in path:
            lines.append(f"[{shard_id}] failed keys (if any): {path}")
            continue
        try:
            with open(path, "rb") as f:
                n = sum(1 for line in f if line.strip())
        except OSError:
            continue  # not written: the shard failed or was skipped by --done-if
        if n:
            lines.append(f"[{shard_id}] {n} failed key{'' if n == 1 else 's'} in {path} (rerun them with "
                         f"tarproc --keys {shlex.quote(path)})")
    return lines


def _shell_word(arg):
    """One argument of a --dry-run line, quoted for the shell: as
    ``shlex.quote`` does, or in bash's ``$'...'`` form with escapes when it
    holds characters a terminal acts on (escape sequences, bidi overrides):
    the line still runs in bash, and shows no raw control."""
    import shlex

    from ..core.limits import UNSAFE

    if not UNSAFE.search(arg) and "\n" not in arg and "\t" not in arg and "\r" not in arg:
        return shlex.quote(arg)
    out = []
    for c in arg:
        if c in "\\'":
            out.append("\\" + c)
        elif UNSAFE.match(c) or c in "\n\t\r":
            o = ord(c)
            out.append(f"\\x{o:02x}" if o < 0x100 else (f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"))
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def entry():
    opts, after = split_argv(sys.argv[1:])  # the command after '--', split off before parsing
    run("kujob", kujob_command, opts, extra={"after": after})
