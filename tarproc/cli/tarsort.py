"""tarsort: sort or shuffle samples, in bounded memory (external merge sort)."""

from typing import Annotated, Literal, Optional

from .base import Retries, resume_of
from .base import GroupSize, group_size_of
from .base import MaxBadShards, OnBadShard
from .base import (BlobThreshold, Args, BraceExpand, FileList, Inputs, Output, ProgressFlag, Quiet, Seed, Strict, Verbose,
                   command, opt, parse_size, progress_stage, read_inputs, run, Reporter)

EXAMPLES = """
tarsort < data.tar > sorted.tar                     # by __key__
gsutil cat gs://bucket/file.tar | tarsort -S shuffle | tarsplit -n 1000 -o 'out-%06d.tar'
tarsort -s cls -S int -r data.tar -o by-class.tar   # by the number in each .cls, descending
tarsort --sortkey cls --sorttype int --update data.tar > one-per-class.tar   # the last sample of each class
tarsort -S shuffle --seed 1 --memory 2GiB --tmpdir /scratch 'shard-{000..999}.tar' > mixed.tar
"""

NOTES = """
Memory stays near --memory: beyond it sorted runs are spilled to a private
directory under --tmpdir and merged; it is removed on exit, failure, Ctrl-C
and SIGTERM. The sort is stable (equal keys keep input order, also with -r)
and keeps samples with equal sort fields; --update keeps only the last sample read for each sort
key (the one that came last in the input; not with -S shuffle). Samples with one __key__
come out side by side and read back as one sample: that regroups a sample scattered
in its input, but when a field repeats it is refused (exit 2); use --update, or make
the keys unique (tarcat --rekey). text order is byte order
(like LC_ALL=C sort), also for names that are not UTF-8; float puts NaN first (like sort -g).
exit status: 0 ok, 1 the output could not be written, 2 bad usage, unreadable
input, a sample without the sort field (or not a number for int/float), or
two samples with one __key__ and a field in common.
"""


@command("Sort the samples inside tar shards (or shuffle them), in bounded memory.", EXAMPLES, NOTES)
def tarsort_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    output: Output = "-",
    sortkey: Annotated[str, opt("-s", "--sortkey", metavar="FIELD",
                       help="sort by the content of this field (default: __key__, the sample key)")] = "__key__",
    sorttype: Annotated[Literal["text", "int", "float", "shuffle"], opt(
        "-S", "--sorttype", help="how to compare: text (bytes), int, float, or shuffle (random order) "
                                 "(default: text)")] = "text",
    reverse: Annotated[bool, opt("-r", "--reverse", help="descending order (stable)")] = False,
    update: Annotated[bool, opt("--update", "-u", "--unique",
                      help="keep one sample per sort key: the last one read (the original's --update, "
                           "an 'insert or replace' by sort key)")] = False,
    seed: Seed = None,
    memory: Annotated[str, opt("--memory", metavar="BYTES",
                      help="memory for samples before spilling runs to --tmpdir: 64MB, 1GiB "
                           "(default: 512MB)")] = "512MB",
    tmpdir: Annotated[Optional[str], opt("--tmpdir", "-t", metavar="DIR",
                      help="directory for the sorted runs (default: $TMPDIR or /tmp)")] = None,
    strict: Strict = False,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    retries: Retries = None,
    blob_threshold: BlobThreshold = None,
    group_size: GroupSize = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
    braceexpand: BraceExpand = False,
):
    import contextlib
    import gc
    import types

    import tarproc as S
    from ..stages.sort import sort_samples
    from ..sinks.output import open_sink

    args = Args(locals())
    rep = Reporter("tarsort", args.verbose, args.quiet, args.progress)
    memory = parse_size(args.memory)
    stats = S.Stats()
    spill = types.SimpleNamespace(runs=0)  # sort_samples counts the runs it spills here
    gc.disable()  # samples hold no reference cycles; collecting millions of dicts costs much
    ordered = sort_samples(read_inputs(args, rep, stats), key=args.sortkey, sorttype=args.sorttype,
                           reverse=args.reverse, seed=args.seed, memory=memory, tmpdir=args.tmpdir, stats=spill,
                           unique=args.update, stale_seconds=args.settings.foreign_stale_seconds)
    with contextlib.closing(ordered), open_sink(args.output, stall=rep.stall, group_size=group_size_of(args), settings=args.settings) as sink:
        writer = S.SampleWriter(sink, stats)  # refuses a key right after itself: it would read back as one sample
        for sample in progress_stage(rep, stats)(ordered):
            writer.write(sample)
        writer.close()
    rep.done(stats)
    rep.info(f"sorted runs spilled to disk: {spill.runs}")
    if args.update:
        rep.info(f"samples replaced by a later one with the same sort key: {getattr(spill, 'dropped', 0)}")
    return 0


def entry():
    run("tarsort", tarsort_command)
