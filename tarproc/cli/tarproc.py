"""tarproc: run a shell command or a Python function on every sample, in parallel."""

from typing import Annotated, List, Literal, Optional

import typer

from .base import given, output_directory_exists, Retries, resume_of
from .base import GroupSize, group_size_of
from .base import MaxBadShards, OnBadShard, missing_keys_warning, seconds
from .base import (replaced, BlobThreshold, TmpDir, spooler_of, Args, FileList, Output, ProgressFlag, Quiet, StartMethod, Strict, Verbose, command, nonneg, open_inputs, opt,
                   positive, progress_stage, read_inputs, run, Reporter, selection_stages, Slice)

EXAMPLES = """
tarproc -p 5 -c 'gm mogrify -resize 256x256 *.jpg' small.tar > out.tar
tarproc -p 2 --per-command 50 -c 'gm mogrify -resize 128x96 *.jpg' in.tar > out.tar  # one gm per 50 samples
gsutil cat gs://b/scans-0042.tar | tarproc -p 16 -c 'run-ocr *.png' -o gs://b/ocr-0042.tar
tarproc -c 'cp sample.txt sample.x.txt' data.tar -o out.tar   # add a field
tarproc -c 'rm sample.png' data.tar > nopng.tar                 # drop a field
tarproc -e abort --timeout 60 -s ocr.sh scans.tar -o ocr.tar    # stop at the first failure
tarproc --max-failures 1% -c 'run-ocr *.png' scans.tar -o ocr.tar  # allow 1% failed samples
tarproc -m -c 'gm convert sample.pdf sample-%d.png' docs.tar > pages.tar  # one sample per page
tarproc --mode lines -c 'curl -sf "$(cat sample.txt)" -o sample.html' urls.txt > pages.tar
tarproc --map resize.py:resize -p 8 images.tar > small.tar      # a Python function, no shell
tarproc --failed-keys failed.txt --max-failures 5% -c CMD in.tar -o a.tar; tarproc --keys failed.txt -c CMD in.tar -o b.tar
"""

NOTES = """
Each sample is extracted into a private working directory, its fields as
sample.<field> (and sample.__key__); the command runs there (stdin /dev/null, its output to stderr);
the regular files sample.* left afterwards become the output sample. Output is in
input order. The output is written (committed under its name) only on exit 0.
A command that is not found (exit 127) on the first sample stops the run at once.
Exit status: 0 ok (failed samples within --max-failures), 1 more samples failed
(or -e abort stopped the run), 2 usage or unreadable input.
"""


@command("Run a shell command (or a Python function) on every sample of tar shards, in parallel; collect the "
         "results into a new tar.", EXAMPLES, NOTES)
def tarproc_command(
    inputs: Annotated[Optional[List[str]], typer.Argument(
        metavar="[URL]...", show_default=False,
        help="input shards (or text files with --mode): paths, '-', pipe:CMD, http(s)://, gs://, s3://; brace "
             "patterns are expanded (default: stdin)")] = None,
    filelist: FileList = None,
    output: Output = "-",
    command_: Annotated[Optional[str], opt("-c", "--command", metavar="CMD",
                        help="what to run (one of -c, -s, --map): a shell command run in each sample's "
                             "directory")] = None,
    script: Annotated[Optional[str], opt("-s", "--script", metavar="FILE",
                      help="script run (with --interpreter) in each sample's directory")] = None,
    map: Annotated[Optional[str], opt("--map", metavar="MODULE:FUNC",
                   help="apply a Python function to each sample dict in worker processes (module:function or "
                        "path/to/file.py:function); it returns a sample, a list of samples, or None to "
                        "drop")] = None,
    interpreter: Annotated[str, opt("--interpreter", metavar="PROG",
                           help="interpreter for -s FILE and -c CMD (PROG -c CMD) (default: bash)")] = "bash",
    parallel: Annotated[Optional[int], opt("-p", "--parallel", metavar="N", parser=nonneg(),
                        help="samples processed at once (default, or 0: all cores)")] = None,
    base: Annotated[str, opt("-b", "--base", metavar="NAME",
                    help="file name base of the fields: NAME.jpg (default: sample)")] = "sample",
    error_handling: Annotated[Literal["skip", "ignore", "abort"], opt(
        "-e", "--error-handling",
        help="a failed sample is dropped (skip, counted against --max-failures), kept as produced (ignore: no "
             "limit unless --max-failures is given), or stops the run with no output (abort) (default: "
             "skip)")] = "skip",
    max_failures: Annotated[str, opt("--max-failures", metavar="N|N%",
                            help="failed samples allowed (a number, or a percentage of the samples read): "
                                 "within it they are reported and not written and the exit is 0; past it, exit 1 "
                                 "and no output (default: 0)")] = "0",
    subdirs: Annotated[bool, opt("-S", "--subdirs",
                       help="each subdirectory the command makes is one output sample (key from its "
                            "sample.__key__, or KEY/NAME)")] = False,
    multi: Annotated[bool, opt("-m", "--multi", help="files sample-N.* are output samples (key KEY-N)")] = False,
    count: Annotated[Optional[int], opt("--count", metavar="N", parser=nonneg(),
                     help="process only the first N samples")] = None,
    add_log: Annotated[Optional[str], opt("--add-log", metavar="FIELD",
                       help="store the command's output (stdout and stderr) in this field instead of "
                            "stderr")] = None,
    mode: Annotated[Literal["tar", "lines", "pages", "keys"], opt(
        "--mode", help="input is tar shards (default), or text: one sample per line, per form-feed page, or "
                       "per key (line); the text is in field txt")] = "tar",
    timeout: Annotated[Optional[float], opt("--timeout", metavar="SECONDS", parser=seconds(),
                       help="kill a sample's command (its whole process group), or the --map worker running "
                            "it, after this long; the sample fails")] = None,
    unordered: Annotated[bool, opt("--unordered",
                         help="write results as they finish, not in input order")] = False,
    workdir: Annotated[Optional[str], opt("-w", "--working-dir", "--working_dir", metavar="DIR",
                       help="where working directories are made (default: $TMPDIR or /tmp)")] = None,
    keepdir: Annotated[bool, opt("--keepdir", help="keep the working directories (for debugging)")] = False,
    batch: Annotated[int, opt("--batch", metavar="N", parser=positive(),
                     help="--map: samples sent to a worker at once (default: 32)")] = 32,
    per_command: Annotated[int, opt("--per-command", metavar="N", parser=positive(),
                           help="-c/-s: give one command up to N samples, the i-th sample's fields as "
                                "sample-<i>.FIELD (i in six digits) in one directory; its files sample-<i>.* "
                                "are collected back into sample i; a failed command fails all its samples "
                                "(default: 1)")] = 1,
    start_method: StartMethod = None,
    map_blobs: Annotated[Literal["bytes", "blob"], opt("--map-blobs", metavar="bytes|blob",
                         help="--map: give large fields (docs/blobs.md) to the function as bytes "
                              "(loaded in the worker) or as tarproc.Blob objects to stream from")] = "bytes",
    skip: Annotated[int, opt("--skip", metavar="N", parser=nonneg(), help="skip the first N samples")] = 0,
    slice: Slice = None,
    strict: Strict = False,
    keys: Annotated[Optional[str], opt("--keys", metavar="FILE",
                    help="process only the samples whose keys are listed in FILE, one per line (e.g. the "
                         "list of failed keys of an earlier run)")] = None,
    failed_keys: Annotated[Optional[str], opt("--failed-keys", metavar="FILE", callback=output_directory_exists,
                           help="write the keys of the samples that failed to FILE, one per line (written "
                                "when all the input was processed, exit 0 or 1; rerun them with --keys FILE)")] = None,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    retries: Retries = None,
    blob_threshold: BlobThreshold = None,
    tmpdir: TmpDir = None,
    group_size: GroupSize = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
    silent_replaced: replaced("--silent", "-q/--quiet", flag=True) = None,
):
    args = Args(locals())
    args.command = args.command_
    return main(args, args.prog)


def main(args, prog="tarproc"):
    import tarproc as S
    from ..errors import SampleFailed, TooManyFailures, UsageError
    from ..sinks.output import open_sink
    from ..sources.text import iter_text_samples
    from ..stages.command import map_command
    from ..stages.function import map_function
    from ..runtime.engine import default_parallel

    chosen = [o for o, v in (("-c", args.command), ("-s", args.script), ("--map", args.map)) if v is not None]
    if len(chosen) != 1:
        raise UsageError("give exactly one of -c CMD, -s FILE, --map MODULE:FUNC"
                         + (f" (got {' and '.join(chosen)})" if chosen else ""))
    if args.map is not None:
        for flag, bad in (("-S", args.subdirs), ("-m", args.multi),
                          ("--add-log", args.add_log is not None), ("--keepdir", args.keepdir),
                          ("--per-command", args.per_command != 1), ("--interpreter", given("interpreter")),
                          ("-b/--base", given("base")), ("-w/--working-dir", given("workdir"))):
            if bad:
                raise UsageError(f"{flag} applies to commands, not to --map")
    else:  # (one option, one meaning: these mean nothing without --map)
        for flag, name in (("--batch", "batch"), ("--start-method", "start_method"), ("--map-blobs", "map_blobs")):
            if given(name):
                raise UsageError(f"{flag} applies to --map, not to commands ({'-c' if args.command else '-s'})")
    parallel = args.parallel or default_parallel()
    rep = Reporter(prog, args.verbose, args.quiet, args.progress)
    if args.map is None:
        from ..runtime.procs import fit_parallel

        fitted, limit = fit_parallel(parallel)
        if fitted < parallel:
            rep.warn(f"-p {parallel} needs more open files than the limit of {limit} (ulimit -n) allows: "
                     f"running {fitted} command{'s' if fitted > 1 else ''} at once")
            parallel = fitted
    else:
        from ..runtime.procs import fit_workers

        fitted, why = fit_workers(parallel)
        if fitted < parallel:
            rep.warn(f"-p {parallel} worker processes are more than {why} allows: starting {fitted}")
            parallel = fitted
    stats = S.Stats()
    allowance = parse_allowance(args.max_failures)
    if args.error_handling == "ignore" and args.max_failures == "0":
        allowance = _Allowance(fraction=1.0)  # -e ignore: failed samples are kept, the run goes on
    if args.error_handling == "abort" and args.max_failures not in ("0", "0%"):
        raise UsageError("-e abort stops at the first failure; it does not go with --max-failures")

    if args.mode != "tar" and (args.on_bad_shard != "fail" or args.max_bad_shards is not None):
        raise UsageError("--on-bad-shard and --max-bad-shards apply to tar shards, not to --mode " + args.mode)
    if args.script is not None:
        from .guards import refuse_reading_stdout

        refuse_reading_stdout([args.script])  # `tarproc -s x.sh in.tar > x.sh`
    urls = open_inputs(args, tar=args.mode == "tar")
    if args.failed_keys is not None:  # a file of its own: never the output, an input, the script or -T's list
        from .guards import refuse_overwriting_inputs, refuse_shared_outputs

        if args.failed_keys == "-":
            raise UsageError("--failed-keys needs a file of its own (not '-', not the output)")
        refuse_shared_outputs([("-o", args.output), ("--failed-keys", args.failed_keys)])
        why = "--failed-keys needs a file of its own"
        refuse_overwriting_inputs([args.failed_keys], [u for u in (args.script, args.filelist) if u], why)
        urls = refuse_overwriting_inputs([args.failed_keys], urls, why)
    if args.mode == "tar":
        # the inputs are named now, while fd 1 is still stdout (see _stdout_to_stderr)
        inputs = read_inputs(args, rep, stats, urls=urls)
    else:
        inputs = iter_text_samples(urls, args.mode, stats, stall=rep.stall,
                                   settings=args.settings, **resume_of(args))
    if args.keys == "-" and ("-" in (args.inputs or []) or not (args.inputs or args.filelist)):
        raise UsageError("the key list and the samples cannot both come from stdin")
    middle = []
    if args.keys is not None:
        from ..stages.keys import read_keys, select_keys

        keys = read_keys(args.keys, args.settings)
        middle.append(select_keys(keys, stats=stats, on_missing=missing_keys_warning(rep, keys, args.keys)))
    # --skip, --slice, --keys, --count, as in tarcat
    inputs = S.pipeline(inputs, *selection_stages(args, middle=middle))
    report = rep.say
    if args.failed_keys is not None:
        from ..sinks.keylist import KeyList

        report = _Failures(rep.say, KeyList(args.failed_keys, args.settings))

    def transformed():
        if args.map is not None:
            return map_function(inputs, args.map, parallel, error_handling=args.error_handling,
                                ordered=not args.unordered, batch=args.batch, stats=stats,
                                on_error=report, prog=prog, start_method=args.start_method,
                                stall=rep.stall, blobs=args.map_blobs, timeout=args.timeout,
                                tail_bytes=args.settings.tail_bytes, max_failures=allowance.stop_after)
        return map_command(inputs, args.command, parallel, script=args.script,
                           interpreter=args.interpreter, base=args.base,
                           error_handling=args.error_handling, subdirs=args.subdirs,
                           multi=args.multi, ordered=not args.unordered, timeout=args.timeout,
                           workdir=args.workdir, keepdir=args.keepdir, add_log=args.add_log,
                           stats=stats, on_error=report, quiet=args.quiet, prog=prog,
                           stall=rep.stall, spooler=spooler_of(args), per_command=args.per_command,
                           capture_spill=args.settings.capture_spill, tail_bytes=args.settings.tail_bytes,
                           max_failures=allowance.stop_after)

    if args.output != "-":
        results = transformed()  # a usage error before the output file is made
    try:
        with open_sink(args.output, stall=rep.stall, group_size=group_size_of(args), settings=args.settings) as sink:  # committed by the CLI only on exit 0
            if args.output == "-":
                # the sink writes to its own copy of stdout; what a --map function
                # prints (here, at import, or in a worker) goes to stderr, never into the tar
                _stdout_to_stderr()
                results = transformed()
            writer = S.SampleWriter(sink, stats)
            try:
                for sample in progress_stage(rep, stats)(results):
                    writer.write(sample)
            finally:
                results.close()
            failed = bool(stats.failed) and allowance.exceeded(stats.failed, stats.read)
            if failed:
                # decided before the end-of-archive marker: the output is discarded (a file is
                # never published; a stream is left unterminated, so its readers see a cut archive)
                sink.abort()
            else:
                writer.close()
            if isinstance(report, _Failures):  # all the input was processed: the list is complete
                report.keys.commit()
                rep.info(f"{report.keys.count} failed keys written to {args.failed_keys}")
    except TooManyFailures as e:
        # the allowance is spent: stopped there, the samples in flight dropped (their commands killed)
        rep.done(stats, force=True)
        where = ("on stdout, the archive is left without its end-of-archive marker"
                 if args.output == "-" else "no output written")
        unlisted = "; --failed-keys not written" if isinstance(report, _Failures) else ""
        rep.say(f"{e.failed} sample{'s' * (e.failed != 1)} failed, more than --max-failures {args.max_failures}: "
                f"stopped there (the samples after it not processed){unlisted}; {where}")
        return 1
    except SampleFailed:
        rep.done(stats)  # the failure is the one line (the summary with -v)
        raise
    finally:
        if isinstance(report, _Failures):
            report.keys.abort()  # (once committed, nothing) a run that stopped early: its list would be incomplete
    # an empty output is a result: say why (a key list's own skips are said by its warning)
    if stats.skipped and not stats.written and not stats.failed and not getattr(args, "keys", None) \
            and not getattr(args, "exclude_keys", None):
        made = ("the function returned no sample" if args.map is not None
                else f"the command left no {args.base}.* file")
        rep.warn(f"no sample written: {made} for any of the {stats.skipped} samples it ran on (each skipped)")
    rep.done(stats, force=stats.failed > 0)
    if failed:
        where = ("on stdout, the archive is left without its end-of-archive marker"
                 if args.output == "-" else "no output written")
        rep.say(f"{stats.failed} of {stats.read} samples failed, more than --max-failures {args.max_failures}: "
                f"{where}")
        return 1
    return 0


class _Failures:
    """``on_error`` of ``--failed-keys``: the message on stderr, the key in the list."""

    def __init__(self, say, keys):
        self.say = say
        self.keys = keys

    def __call__(self, message):
        self.say(message)

    def failed(self, key):
        self.keys.add(key)


def _stdout_to_stderr():
    """Point file descriptor 1 at stderr (at /dev/null when stderr is closed)."""
    import os
    import sys

    sys.stdout.flush()
    try:
        os.dup2(2, 1)
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)


class _Allowance:
    """``--max-failures``: a count or a fraction of the samples read.  A
    count (or 0%) is spent as failures come: the run stops at the failure
    past it (``stop_after``); any other fraction of a total not known before
    the end is checked at the end (``-e abort`` stops at the first)."""

    def __init__(self, count=None, fraction=None):
        self.count = count
        self.fraction = fraction
        self.stop_after = count if count is not None else (0 if fraction == 0 else None)

    def exceeded(self, failed, total):
        if self.count is not None:
            return failed > self.count
        return failed > self.fraction * max(total, 0)


def parse_allowance(text):
    from ..errors import UsageError

    t = str(text).strip()
    try:
        if t.endswith("%"):
            value = float(t[:-1])
            if not 0 <= value <= 100:
                raise ValueError
            return _Allowance(fraction=value / 100)
        value = int(t)
        if value < 0:
            raise ValueError
        return _Allowance(count=value)
    except ValueError:
        raise UsageError(f"bad --max-failures {text!r}: a number of samples or a percentage, e.g. 10 or 1%") from None


def entry():
    run("tarproc", tarproc_command)
