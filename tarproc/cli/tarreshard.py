"""tarreshard: shuffle or sort a shard set of any size exactly, into full shards, on kujob's engines."""

from typing import Annotated, List, Literal, Optional

from .base import (Args, FileList, Inputs, ProgressFlag, Quiet, Reporter, Seed, Verbose, command, nonneg, opt,
                   output_directory_exists, parse_size, positive, run)

EXAMPLES = """
tarreshard -S shuffle --seed 1 -n 1000 -o 'shuffled-%06d.tar' 'in-{000..099}.tar'
tarreshard -S text -n 1000 -o 'sorted/%06d.tar' -j 4 'in-{000..099}.tar'     # by __key__, as tarsort
tarreshard --sortkey cls -S int -s 100MB -o out 'in-{000..099}.tar'
tarreshard -S shuffle --fractions 'train=0.9,val=0.1' -n 1000 -o 'out/{split}-%06d.tar' 'in-{000..099}.tar'
tarreshard --slurm --work s3://bucket/work -n 10000 -o 's3://bucket/shuffled-%06d.tar' 's3://bucket/in-{0000..9999}.tar'
tarreshard --k8s --image IMAGE --apply --work s3://bucket/work -n 10000 -o 's3://bucket/out-%06d.tar' 's3://bucket/in-{0000..9999}.tar'
"""

NOTES = """
Steps (tasks): map (one per input: ONE intermediate object of its samples grouped by
bucket, and its index), plan (1), reduce (one per bucket: its slice of every map object by
ranged reads, shuffled or sorted within --memory; the shards it holds whole written),
cut (1) and copy (one per bucket: the shards shared by two buckets, or with -s every shard,
assembled by byte ranges). Every output shard is full except the last (of each split),
numbered from 000000. Each task's outputs appear when it succeeds; a rerun with the same
--work does only the tasks not done. The same inputs, options, --seed and --buckets give
the same bytes with any -j and any engine. --work is removed after success unless
--keep-work. exit status: 0 ok, 1 a task failed (named), 2 bad usage or unreadable input.
"""

#: What --k8s asks for a pod beyond --memory (the interpreter, buffers, clients).
POD_OVERHEAD = 512 << 20


@command("Shuffle or sort a shard set of any size exactly into new full shards, on kujob's engines.",
         EXAMPLES, NOTES)
def tarreshard_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    output: Annotated[Optional[str], opt("-o", "--output", metavar="PREFIX|PATTERN", callback=output_directory_exists,
                      help="PREFIX gives PREFIX-000000.tar, ...; a PATTERN with %06d or {shard:06d} is used as "
                           "given ({split} with --fractions); any URL scheme")] = None,
    num_samples: Annotated[Optional[int], opt("-n", "--num-samples", "--maxcount", metavar="N", parser=nonneg(),
                           help="N samples per shard; 0: no limit (default: 100000 when -s is not given)")] = None,
    max_size: Annotated[Optional[str], opt("-s", "--max-size", "--maxsize", metavar="BYTES",
                        help="at most BYTES per shard as written (whole samples), as tarsplit cuts: 100MB, 1e9 "
                             "(default: no limit)")] = None,
    sortkey: Annotated[str, opt("--sortkey", metavar="FIELD",
                       help="sort by this field (default: __key__)")] = "__key__",
    sorttype: Annotated[Literal["text", "int", "float", "shuffle"], opt(
        "-S", "--sorttype", help="text (bytes), int, float, or shuffle (default: shuffle)")] = "shuffle",
    reverse: Annotated[bool, opt("-r", "--reverse", help="descending order (stable)")] = False,
    seed: Seed = None,
    fractions: Annotated[Optional[str], opt("--fractions", metavar="SPEC",
                         help="'train=0.9,val=0.1': each sample to a split by a stable hash of its key and "
                              "--seed (0 when not given), as tarsplit; each split its own shard set; -o holds "
                              "{split}")] = None,
    buckets: Annotated[Optional[int], opt("--buckets", metavar="N", parser=positive(),
                       help="reduce tasks (per split); the output depends on it (default: the number of "
                            "inputs)")] = None,
    memory: Annotated[str, opt("--memory", metavar="BYTES",
                      help="memory for samples in each task before spilling to --tmpdir (default: 512MB)")] = "512MB",
    tmpdir: Annotated[Optional[str], opt("--tmpdir", "-t", metavar="DIR",
                      help="the tasks' spill directory (default: $TMPDIR or /tmp)")] = None,
    work: Annotated[Optional[str], opt("--work", metavar="URL",
                    help="where the tasks keep their intermediate data, shared by the workers: a directory, "
                         "s3://, gs://, or an http server that takes PUT (default: a new directory under "
                         "--tmpdir; required with --slurm and --k8s)")] = None,
    keep_work: Annotated[bool, opt("--keep-work", help="keep the intermediate data after success")] = False,
    jobs: Annotated[Optional[int], opt("-j", "--jobs", metavar="N", parser=positive(),
                    help="tasks at once (local pool: default 1; --slurm: the array throttle; --k8s: "
                         "parallelism)")] = None,
    retries: Annotated[int, opt("--retries", metavar="N", parser=nonneg(),
                       help="rerun a failing task up to N times (default: 0)")] = 0,
    slurm: Annotated[bool, opt("--slurm", help="run each step as a Slurm job array, each held with "
                                               "--dependency=afterok on the one before; wait for them")] = False,
    log_dir: Annotated[Optional[str], opt("--log-dir", metavar="DIR",
                       help="--slurm: where task logs and exit records go (default: kujob-logs)")] = None,
    sbatch: Annotated[Optional[List[str]], opt("--sbatch", metavar="OPTION",
                      help="--slurm: one more sbatch option for every step (repeatable): "
                           "--sbatch=--partition=cpu")] = None,
    poll: Annotated[Optional[float], opt("--poll", metavar="SECONDS", help="--slurm: seconds between squeue "
                                                                          "checks (default: 10)")] = None,
    k8s: Annotated[bool, opt("--k8s", help="print the Kubernetes Indexed Jobs of the steps (a JSON list)")] = False,
    image: Annotated[Optional[str], opt("--image", metavar="IMAGE", help="--k8s: an image with tarproc")] = None,
    apply: Annotated[bool, opt("--apply", help="--k8s: apply each step's Job with kubectl (KUJOB_KUBECTL "
                                               "overrides it) when the one before has completed")] = False,
    name: Annotated[Optional[str], opt("--name", metavar="NAME",
                    help="--slurm, --k8s: job name prefix (default: tarreshard)")] = None,
    task: Annotated[Optional[str], opt("--task", metavar="STEP", hidden=True,
                    help="run one task of a step (what the engines run)")] = None,
    task_id: Annotated[Optional[str], opt("--task-id", metavar="ID", hidden=True, help="the task's id")] = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
):
    args = Args(locals())
    rep = Reporter("tarreshard", args.verbose, args.quiet, args.progress)
    if args.task is not None:
        return _task(args, rep)
    return _drive(args, rep)


def _task(args, rep):
    from ..errors import UsageError
    from ..jobs.reshard import STEPS, run_task

    if args.task not in STEPS or args.work is None or args.task_id is None or not args.task_id.isdigit():
        raise UsageError(f"--task takes one of {', '.join(STEPS)}, with --work URL and --task-id N")
    from .base import spooler_of

    rep.info(run_task(args.task, args.work, args.task_id, args.settings, args.tmpdir, rep.warn, spooler_of(args)))
    return 0


def _drive(args, rep):
    import json
    import os
    import shutil
    import sys
    import tempfile

    from ..core.limits import bounded_list
    from ..errors import UsageError
    from ..jobs import reshard as R
    from ..sinks.split import ShardNames, parse_fractions, shard_pattern
    from .base import open_inputs

    if not args.output or args.output.startswith("-"):
        raise UsageError("give -o PREFIX or -o PATTERN (e.g. -o 'out-%06d.tar'): tarreshard writes shards")
    if (args.slurm or args.k8s) and not args.work:
        raise UsageError("--slurm and --k8s need --work URL: a place every worker reads and writes (s3://, gs://, "
                         "a shared directory)")
    if args.slurm and args.k8s:
        raise UsageError("--slurm or --k8s, not both")
    if (args.image or args.apply) and not args.k8s:
        raise UsageError("--image and --apply go with --k8s")
    if args.k8s and not args.image:
        raise UsageError("--k8s needs --image IMAGE (an image with tarproc installed)")
    max_size = parse_size(args.max_size) if args.max_size not in (None, "", "0") else None
    max_count = args.num_samples
    if max_count is None:
        max_count = None if max_size is not None else 100000
    elif max_count == 0:
        max_count = None
    if max_count is None and max_size is None:
        raise UsageError("-n 0 needs -s SIZE: shards need a limit")
    memory = parse_size(args.memory)
    if memory < 1:
        raise UsageError("--memory must be positive")
    pattern = shard_pattern(args.output)
    splits = parse_fractions(args.fractions) if args.fractions else None
    if splits and "{split}" not in pattern:
        raise UsageError(f"-o {args.output!r}: with --fractions the pattern names each split with {{split}}, e.g. "
                         f"'out/{{split}}-%06d.tar'")
    if not splits and "{split}" in pattern:
        raise UsageError(f"-o {args.output!r}: {{split}} is filled in only with --fractions")
    namings = [ShardNames(pattern if split is None else pattern.replace("{split}", split))
               for split in ([s for s, _ in splits] if splits else [None])]
    if args.sorttype != "shuffle" and args.seed is not None and not splits:
        rep.warn("--seed is used by -S shuffle and --fractions only")
    urls = bounded_list(open_inputs(args), "the inputs", max_urls=args.settings.max_urls)
    buckets = args.buckets or max(1, len(urls))
    if buckets * max(1, len(splits or ())) > args.settings.max_urls:
        raise UsageError(f"--buckets {buckets}: more tasks per step than TARPROC_MAX_URLS "
                         f"({args.settings.max_urls})")
    if args.sorttype == "shuffle" and args.reverse:
        raise UsageError("-r goes with a sort, not with -S shuffle")
    if "-" in urls and urls != ["-"]:
        raise UsageError("stdin cannot be mixed with other inputs (each input is read by its own task)")
    _refuse_outputs_on_inputs(urls, namings)
    _check_local_inputs(urls, args.settings)
    made_work = False
    work = args.work
    if work is None:
        base = args.tmpdir or tempfile.gettempdir()
        work = tempfile.mkdtemp(prefix="tarreshard-", dir=base)
        made_work = True
    work = work.rstrip("/") or work
    try:
        return _run_steps(args, rep, work, made_work, urls, buckets, splits, pattern, max_count, max_size, memory)
    except BaseException:
        if made_work and not R.exists(R.join(work, "map"), args.settings):
            shutil.rmtree(work, ignore_errors=True)  # (nothing done yet: a new directory left behind helps no one)
        raise


def _run_steps(args, rep, work, made_work, urls, buckets, splits, pattern, max_count, max_size, memory):
    import os
    import shutil
    import sys

    from ..errors import UsageError
    from ..jobs import reshard as R

    stdin = None
    if "-" in urls:
        stdin = R.join(work, "input", "stdin.tar")
        _spool_stdin(stdin, args.settings)
        urls = [stdin]
    plan = {"version": R.PLAN_VERSION, "inputs": urls, "buckets": buckets, "sorttype": args.sorttype,
            "sortkey": args.sortkey, "reverse": args.reverse, "seed": args.seed, "boundaries": None,
            "splits": splits, "split_seed": args.seed or 0, "pattern": pattern, "max_count": max_count,
            "max_size": max_size, "memory": memory, "stdin": stdin}
    if args.sorttype == "shuffle":
        plan["boundaries"] = []
    elif not R.exists(R.join(work, "plan.json"), args.settings):
        from ..stages.sort import key_function

        key_function(args.sortkey, args.sorttype)  # (a bad sort type: one line before any work)
        plan["boundaries"] = R.sample_boundaries(urls, args.sortkey, args.sorttype, buckets, args.settings, rep.warn)
    plan = R.publish_plan(work, plan, args.settings)
    counts = R.task_counts(plan)
    me = shutil.which("tarreshard") or os.path.abspath(sys.argv[0])
    results = {}
    if args.k8s:
        return _k8s(args, rep, plan, work, counts)
    try:
        for step in R.STEPS:
            command = [me, "--task", step, "--work", work, "--task-id", "{}"]
            if args.tmpdir:
                command += ["--tmpdir", os.path.abspath(args.tmpdir)]
            if args.verbose:
                command.append("-v")
            if args.slurm:
                break
            summary = _local(args, rep, step, command, counts[step], work)
            results[step] = summary
            if summary.failed:
                break
        if args.slurm:
            results = _slurm(args, rep, me, work, counts)
    except BaseException:
        if made_work:
            rep.say(f"the work so far is in {work}: rerun with --work {work} to go on from it")
        raise
    for step in R.STEPS:
        if step in results:
            c = results[step].counts()
            empty = sum(getattr(r, "message", None) == "empty" for r in results[step].results)
            rep.say(f"{step}: {counts[step]} tasks: {c['ok']} ok, {c['skipped'] - empty} done before, "
                    + (f"{empty} with nothing to do, " if empty else "") + f"{c['failed']} failed"
                    + (f" ({' '.join(results[step].failed)})" if results[step].failed else ""))
    failed = [step for step in R.STEPS if step in results and results[step].failed]
    if failed or len(results) < len(R.STEPS):
        rep.say(f"stopped at {failed[0] if failed else 'a step'}: rerun the same command"
                + (f" with --work {work}" if made_work else "") + " to do what is missing")
        # a map task that ended with 2 could not read its input: the run's status too
        bad_input = failed[:1] == ["map"] and all(r.returncode == 2 for r in results["map"].results
                                                  if r.status == "failed")
        return 2 if bad_input else 1
    _finish(args, rep, plan, work)
    return 0


def _check_local_inputs(urls, settings):
    """A local input that cannot be read, or is not a tar archive, is one
    line (exit 2) before any work is done: its first block is read here (a
    task's failure would come after the work folder is made, among the
    pool's lines; a compressed input is only opened: no decoder is started
    for each of thousands of inputs)."""
    from ..core.tario import TarReader
    from ..runtime.schemes import scheme_of
    from ..sources.open import open_source

    COMPRESSED = (b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"BZh", b"\xfd7zXZ")  # gzip, zstd, bzip2, xz

    for url in urls:
        if url == "-" or scheme_of(url) != "file":
            continue
        with open_source(url, decompress=False, retries=0, settings=settings) as f:
            if f.peek(4)[:4].startswith(COMPRESSED):  # (its first header is its map task's to read)
                continue
            for _ in TarReader(f, source=url, strict=False, warn=lambda text: None).members():
                break


def _refuse_outputs_on_inputs(urls, namings, probe=100000):
    """Before any task: an output shard among the first ``probe`` of each
    split named like a local input is refused (a reduce task would replace
    it, perhaps before another task has read it)."""
    import os

    from ..errors import UsageError
    from ..runtime.schemes import scheme_of

    local = {os.path.realpath(u): u for u in urls if scheme_of(u) == "file" and os.path.isfile(u)}
    if not local:
        return
    for names in namings:
        for k in range(probe):
            name = names(k)
            if os.path.realpath(name) in local:
                raise UsageError(f"-o: shard {k} would be {name}, which is an input: choose another -o")


def _spool_stdin(url, settings):
    import sys

    from ..jobs.workstore import local_dirs
    from ..sinks.output import open_sink

    local_dirs(url)
    with open_sink(url, compression=None, defer=False, settings=settings) as sink:
        stream = sys.stdin.buffer
        while True:
            chunk = stream.read(1 << 20)
            if not chunk:
                break
            sink.write(chunk)


def _local(args, rep, step, command, n, work):
    """One step on kujob's local pool: the tasks not done (one listing of
    the work folder; else each one's marker checked by the pool)."""
    import sys

    from ..jobs.local import Result, Runner, Summary, expand_ids
    from ..jobs.reshard import done_ids, done_template, id_pattern

    ids = expand_ids(id_pattern(n))
    done = done_ids(step, work, n, args.settings)
    todo = [i for i in ids if done is None or i not in done]
    empty = set()
    if step == "copy":  # only the copy tasks that have shards to assemble (the others would write a marker)
        from ..jobs.reshard import get_json, join

        busy = set(get_json(join(work, "cut", "done.json"), args.settings)["busy"])
        empty = {i for i in todo if i not in busy}
        todo = [i for i in todo if i in busy]
    if step in ("plan", "cut") and todo:  # one small task: run here, not as one more process
        return _in_process(args, rep, step, work, todo[0])
    runner = Runner(command, todo, jobs=args.jobs or 1, retries=args.retries,
                    done_if=done_template(step, work) if done is None else None,
                    log=sys.stderr.buffer, status=rep.say, verbose=False, settings=args.settings)
    skipped = [Result(i, k) for k, i in enumerate(ids) if i not in todo]
    for r in skipped:
        r.status = "skipped"
        if step == "copy" and r.shard_id in empty:
            r.message = "empty"
    return Summary(runner.run().results + skipped)


def _in_process(args, rep, step, work, tid):
    """The one task of ``plan`` or ``cut`` in this process, committed on its
    own (its own commit gate), as a task's outputs are."""
    from ..errors import TarprocError
    from ..jobs.local import Result, Summary
    from ..jobs.reshard import run_task
    from ..sinks.output import CommitGate
    from .base import spooler_of

    r = Result(tid, 0)
    r.attempts = 1
    try:
        with CommitGate() as gate:
            rep.info(run_task(step, work, tid, args.settings, args.tmpdir, rep.warn, spooler_of(args)))
            gate.commit()
        r.status = "ok"
    except TarprocError as e:
        r.status = "failed"
        rep.say(f"[{tid}] {e}")
    return Summary([r])


def _slurm(args, rep, me, work, counts):
    """Submit every step as arrays (several past MaxArraySize) held by
    ``afterok`` on every array of the step before, then wait for each step
    in turn; a failed step, a refused sbatch or Ctrl-C cancels the arrays
    not finished."""
    from ..jobs import slurm
    from ..jobs.reshard import STEPS, done_ids, done_template, id_pattern

    def status(message):
        rep.say(message)

    tail = args.settings.tail_bytes if args.settings is not None else None
    limit = slurm.max_array_size(tail)
    jobs, after, submitted = [], [], []
    try:
        for step in STEPS:
            command = [me, "--task", step, "--work", work, "--task-id", "{}"]
            if args.tmpdir:
                command += ["--tmpdir", args.tmpdir]
            done = done_ids(step, work, counts[step], args.settings) if not after else set()
            job = slurm.plan(command, [id_pattern(counts[step])], name=f"{args.name or 'tarreshard'}-{step}",
                             log_dir=args.log_dir or slurm.DEFAULT_LOG_DIR,
                             done_if=done_template(step, work) if done is None else None,
                             retries=args.retries, throttle=args.jobs, sbatch=list(args.sbatch or ()),
                             settings=args.settings, status=rep.info, mem=None)
            if done is not None:  # (one listing here, not one existence check per task)
                job.indexes = [k for k in job.indexes if job.ids[k] not in done]
            if job.empty:
                jobs.append((step, job, None))
                continue
            try:
                ids = slurm.submit(job, after=after, limit=limit, status=status)
            except slurm.SubmitError as e:
                before, submitted = submitted, []
                if before:
                    code = slurm.cancel(before, tail)
                    raise slurm.SubmitError(f"{step}: {e}; {'cancelled' if code == 0 else 'could not cancel'} the "
                                            f"steps before (scancel {' '.join(before)})") from None
                raise
            submitted = submitted + ids  # (first: a Ctrl-C from here on cancels them)
            jobs.append((step, job, ids))
            rep.info(f"{step}: submitted job array{'s' if len(ids) > 1 else ''} {' '.join(ids)} ({len(job.indexes)} "
                     f"tasks)" + (f", held by afterok:{':'.join(after)}" if after else ""))
            after = ids
        results = {}
        for n, (step, job, ids) in enumerate(jobs):
            if ids is None:
                from ..jobs.local import Result, Summary

                results[step] = Summary([Result(i, k) for k, i in enumerate(job.ids)])
                for r in results[step].results:
                    r.status = "skipped"
                continue
            later = [i for _, _, more in jobs[n + 1:] for i in more or ()]
            summary = slurm.wait(job, poll=10.0 if args.poll is None else max(0.05, args.poll), status=status,
                                 cancel_all=False)
            submitted = later  # (the arrays not finished)
            results[step] = summary
            if summary.failed:
                slurm.cancel(later, tail)
                break
        return results
    except BaseException:
        if submitted:  # Ctrl-C (while waiting, or between two sbatch): this step's arrays and those held behind
            code = slurm.cancel(submitted, tail)
            rep.say(f"interrupted: {'cancelled' if code == 0 else 'could not cancel'} job arrays "
                    f"{' '.join(submitted)} (scancel {' '.join(submitted)})")
        raise


def _k8s(args, rep, plan, work, counts):
    """The steps' Indexed Jobs: printed as a JSON list, or applied one after
    another (``kubectl wait`` for each to complete)."""
    import json
    import os
    import sys

    from ..jobs import k8s
    from ..jobs.reshard import STEPS, done_template, id_pattern

    mem = plan["memory"] + POD_OVERHEAD
    manifests = []
    for step in STEPS:
        command = ["tarreshard", "--task", step, "--work", work, "--task-id", "{}"]
        manifests.append(k8s.job_manifest(command, [id_pattern(counts[step])], args.image,
                                          name=f"{args.name or 'tarreshard'}-{step}", parallelism=args.jobs,
                                          memory=f"{-(-mem // (1 << 20))}Mi", retries=args.retries,
                                          done_if=done_template(step, work), settings=args.settings))
    if not args.apply:
        sys.stdout.write(json.dumps(manifests, indent=1, ensure_ascii=False) + "\n")
        return 0
    kubectl = os.environ.get("KUJOB_KUBECTL")
    for step, manifest in zip(STEPS, manifests):
        code = k8s.kubectl_apply(k8s.manifest_json(manifest), kubectl)
        if code != 0:
            rep.say(f"{step}: kubectl apply failed (exit {code})")
            return 1
        code = _kubectl_wait(kubectl, manifest["metadata"]["name"])
        if code != 0:
            rep.say(f"{step}: the job did not complete (kubectl wait exit {code}); rerun to go on")
            return 1
        rep.info(f"{step}: complete")
    _finish(args, rep, plan, work)
    return 0


def _finish(args, rep, plan, work):
    """The counts of the output, then the work removed (unless --keep-work)."""
    from ..jobs import reshard as R

    samples = R.get_json(R.join(work, "plan", "done.json"), args.settings)["samples"]
    shards = R.get_json(R.join(work, "cut", "done.json"), args.settings)["shards"]
    for split, n, k in zip(R.split_names(plan), samples, shards):
        rep.say(f"{(split + ': ') if split else ''}{n} samples in {k} shards")
    if args.keep_work:
        rep.info(f"work kept in {work}")
    elif not R.remove_work(plan, work, args.settings):
        from ..runtime.schemes import scheme_of

        scheme = scheme_of(work)
        rep.warn(f"--work {work}: no command removes a {scheme}:// object (TARPROC_REMOVE_{scheme.upper()}): "
                 f"the intermediate data stays there")


def _kubectl_wait(kubectl, name):
    import shlex

    from ..runtime.child import Child

    words = shlex.split(kubectl or "kubectl")
    child = Child(words + ["wait", "--for=condition=complete", "--timeout=-1s", f"job/{name}"], "kubectl wait",
                  stdout="inherit", stderr="inherit")
    return child.wait()


def entry():
    run("tarreshard", tarreshard_command)
