"""tarsort: sort or shuffle samples, in bounded memory (external merge sort)."""

from .base import (add_inputs, add_output, add_strict, add_verbosity, make_parser, parse_size,
                   progress_stage, read_inputs, run, Reporter)

EXAMPLES = """
tarsort < data.tar > sorted.tar                     # by __key__
gsutil cat gs://bucket/file.tar | tarsort -S shuffle | tarsplit -n 1000 -o 'out-%06d.tar'
tarsort -s cls -S int -r data.tar -o by-class.tar   # by the number in each .cls, descending
tarsort -S shuffle --seed 1 --memory 2GiB --tmpdir /scratch 'shard-{000..999}.tar' > mixed.tar
"""

NOTES = """
Memory stays near --memory: beyond it sorted runs are spilled to a private
directory under --tmpdir and merged; it is removed on exit, failure, Ctrl-C
and SIGTERM. The sort is stable (equal keys keep input order, also with -r)
and keeps duplicates. text order is byte order (like LC_ALL=C sort).
exit status: 0 ok, 1 the output could not be written, 2 bad usage, unreadable
input, or a sample without the sort field (or not a number for int/float).
"""


def build_parser(prog="tarsort"):
    p = make_parser(prog, "Sort (or shuffle) the samples of tar shards, in bounded memory.", EXAMPLES, NOTES)
    add_inputs(p)
    add_output(p)
    p.add_argument("-s", "--sortkey", default="__key__", metavar="FIELD",
                   help="sort by the content of this field (default: __key__, the sample key)")
    p.add_argument("-S", "--sorttype", default="text", choices=("text", "int", "float", "shuffle"),
                   help="how to compare: text (bytes), int, float, or shuffle (random order) (default: text)")
    p.add_argument("-r", "--reverse", action="store_true", help="descending order (stable)")
    p.add_argument("--seed", type=int, default=None, help="random seed for -S shuffle (reproducible)")
    p.add_argument("--memory", default="512MB", metavar="BYTES",
                   help="memory for samples before spilling runs to --tmpdir: 64MB, 1GiB (default: 512MB)")
    p.add_argument("--tmpdir", "-t", default=None, metavar="DIR",
                   help="directory for the sorted runs (default: $TMPDIR or /tmp)")
    add_strict(p)
    add_verbosity(p)
    return p


def main(argv):
    import contextlib
    import gc
    import types

    from .. import samples as S
    from ..sort import sort_samples
    from ..urls import open_sink

    args = build_parser().parse_args(argv)
    rep = Reporter("tarsort", args.verbose, args.quiet, args.progress)
    memory = parse_size(args.memory)
    stats = S.Stats()
    spill = types.SimpleNamespace(runs=0)  # sort_samples counts the runs it spills here
    gc.disable()  # samples hold no reference cycles; collecting millions of dicts costs much
    ordered = sort_samples(read_inputs(args, rep, stats), key=args.sortkey, sorttype=args.sorttype,
                           reverse=args.reverse, seed=args.seed, memory=memory, tmpdir=args.tmpdir, stats=spill)
    with contextlib.closing(ordered), open_sink(args.output) as sink:
        writer = S.SampleWriter(sink, stats)
        for sample in progress_stage(rep, stats)(ordered):
            writer.write(sample)
        writer.close()
    rep.done(stats)
    rep.info(f"sorted runs spilled to disk: {spill.runs}")
    return 0


def entry():
    run("tarsort", main)
