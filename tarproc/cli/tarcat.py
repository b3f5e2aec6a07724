"""tarcat (also tarcats, tarscat): concatenate the samples of tar shards."""

from .base import (add_fields, add_inputs, add_output, add_selection, add_strict, add_verbosity,
                   make_parser, open_inputs, progress_stage, read_inputs, run, Reporter,
                   selection_stages)

EXAMPLES = """
tarcat -c 10 big.tar > small.tar                 # the first 10 samples
curl -sL https://host/shard-0000.tar | tarcat -c 10 > small.tar
tarcat 'shard-{0000..0146}.tar' -o all.tar.gz    # brace range in, gzip out
tarcat -f 'img=jpg;png cls' --rekey '{index:09d}' data.tar -o clean.tar
gsutil cat gs://b/big.tgz | tarscat -c 10 > small.tar   # returns at once
tarcat --cleanup out/                            # remove leftovers of killed writers
"""


def build_parser(prog="tarcat"):
    p = make_parser(prog, "Concatenate the samples of tar shards into one tar stream.", EXAMPLES)
    add_inputs(p)
    add_output(p)
    add_selection(p)
    add_fields(p)
    p.add_argument("--rekey", metavar="FORMAT",
                   help="new keys from {index}, {key}, {basename}, {dirname}, {source}, e.g. '{index:09d}'")
    p.add_argument("--shuffle", type=int, default=0, metavar="N",
                   help="shuffle samples through a buffer of N (and the list of inputs)")
    p.add_argument("--seed", type=int, default=None, help="random seed for --shuffle")
    add_strict(p)
    add_verbosity(p)
    p.add_argument("--cleanup", metavar="DIR",
                   help="remove the temporary files (.NAME.PID.tarproc-partial) that killed writers left in DIR, "
                        "and exit")
    return p


def main(argv, prog="tarcat"):
    from .. import samples as S
    from ..urls import open_sink

    args = build_parser(prog).parse_args(argv)
    rep = Reporter(prog, args.verbose, args.quiet, args.progress)
    if args.cleanup is not None:
        import os

        from ..errors import UsageError
        from ..urls import cleanup_partials

        if not os.path.isdir(args.cleanup):
            raise UsageError(f"--cleanup {args.cleanup}: not a directory")
        for path in cleanup_partials(args.cleanup, all_names=True):
            rep.info(f"removed {path}")
        return 0
    stats = S.Stats()
    urls = open_inputs(args)
    if args.shuffle > 0 and len(urls) > 1:
        import random

        random.Random(args.seed).shuffle(urls)

    stages = [S.shuffle(args.shuffle, args.seed)] if args.shuffle > 0 else []
    stages += selection_stages(args, [S.select_fields(args.fields, stats)] if args.fields else [])
    if args.rekey:
        stages.append(S.rekey(args.rekey))
    stages.append(progress_stage(rep, stats))

    with open_sink(args.output) as sink:
        writer = S.SampleWriter(sink, stats)
        for sample in S.pipeline(read_inputs(args, rep, stats, urls), *stages):
            writer.write(sample)
        writer.close()
    rep.done(stats)
    return 0


def tarcat():
    run("tarcat", lambda argv: main(argv, "tarcat"))


def tarcats():
    run("tarcats", lambda argv: main(argv, "tarcats"))


def tarscat():
    run("tarscat", lambda argv: main(argv, "tarscat"))
