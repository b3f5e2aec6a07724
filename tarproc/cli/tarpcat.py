"""tarpcat: read many shards concurrently and write their samples to one output."""

import argparse

from .base import (add_inputs, add_output, add_strict, add_verbosity, make_parser, open_inputs, run,
                   Reporter)

EXAMPLES = """
tarpcat -w 4 'shard-{0000..0146}.tgz' -o all.tar        # four reader processes
tarpcat --shuffle 5000 --seed 1 'train-{000..099}.tar' | tarsplit -n 1000 -o mixed
tarpcat -T shards.txt -c 100 > first100.tar
tarpcat --ignore-errors 'gs://bucket/shard-{0000..0999}.tar' > all.tar
"""

NOTES = """
Worker i of N reads shards i, i+N, ... in order, and the output takes one batch
of samples from each worker in turn: the order depends only on the shard list,
the options and -w, never on timing. Every sample appears exactly once.
exit status: 0 ok (also when --ignore-errors skipped shards), 1 the output could
not be written, 2 bad usage or a damaged/unreadable shard (named on stderr).
"""


def build_parser(prog="tarpcat"):
    import os

    p = make_parser(prog, "Read many tar shards concurrently (in worker processes) and write their samples "
                          "to one output.", EXAMPLES, NOTES)
    add_inputs(p)
    add_output(p)
    p.add_argument("-w", "--workers", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="reader processes (default: the number of cores)")
    p.add_argument("-p", dest="workers", type=int, help=argparse.SUPPRESS)  # the original's flag
    p.add_argument("-c", "--count", type=int, default=None, metavar="N",
                   help="stop after N samples (and stop the readers)")
    p.add_argument("-s", "--shuffle", type=int, default=0, metavar="N",
                   help="shuffle the shard list and mix samples through a buffer of N samples")
    p.add_argument("--seed", type=int, default=None, help="random seed for --shuffle (reproducible)")
    p.add_argument("--ignore-errors", action="store_true",
                   help="skip the rest of a damaged or unreadable shard (say so, count it) instead of "
                        "failing with exit 2")
    add_strict(p)
    add_verbosity(p)
    return p


def main(argv):
    from .. import samples as S
    from ..errors import UsageError
    from ..pcat import parallel_encoded, parallel_encoded_batches
    from ..tario import BLOCK
    from ..urls import open_sink

    args = build_parser().parse_args(argv)
    if args.workers is None or args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.count is not None and args.count < 0:
        raise UsageError("--count must be >= 0")
    rep = Reporter("tarpcat", args.verbose, args.quiet, args.progress)
    stats = S.Stats()
    failed = []
    urls = open_inputs(args) if args.count != 0 else []
    common = dict(workers=args.workers, strict=args.strict, ignore_errors=args.ignore_errors, warn=rep.warn,
                  info=rep.info, stats=stats, failed=failed)
    # The workers are started (forked) here, before the output is opened.
    if args.shuffle or args.count is not None:
        source = parallel_encoded(urls, shuffle=args.shuffle, seed=args.seed, **common)
        batches = None
    else:
        batches = parallel_encoded_batches(urls, **common)
        source = None
    written = 0
    try:
        with open_sink(args.output) as sink:
            write = sink.write
            if batches is not None:
                for lengths, data in batches:
                    write(data)
                    written += len(lengths)
                    rep.tick(stats)
            elif args.count != 0:
                for blob in source:
                    write(blob)
                    written += 1
                    if written == args.count:
                        break
            write(bytes(2 * BLOCK))
    finally:
        for gen in (batches, source):  # stops the workers
            if gen is not None and hasattr(gen, "close"):
                gen.close()
    stats.written = written
    rep.done(stats)
    if failed:
        rep.warn(f"{len(failed)} shard(s) failed and were skipped: {', '.join(failed[:5])}"
                 f"{' ...' if len(failed) > 5 else ''}")
    return 0


def entry():
    run("tarpcat", main)
