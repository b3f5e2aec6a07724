"""tarpcat: read many shards concurrently and write their samples to one output."""

import os
from typing import Annotated, Optional

from .base import (BlobThreshold, TmpDir, spooler_of, Args, BraceExpand, Count, FileList, Inputs, Output, ProgressFlag, Quiet, Seed, StartMethod,
                   Strict, Verbose,
                   command, nonneg, open_inputs, opt, positive, run, Reporter)

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
Two samples with one key side by side are one sample read back: written when
their fields differ, refused when a field would come twice (as every writer).
exit status: 0 ok (also when --ignore-errors skipped shards), 1 the output could
not be written, 2 bad usage, a damaged/unreadable shard (named on stderr) or a
field twice under one key side by side.
"""


@command("Read, shuffle and combine many tar shards in parallel (worker processes) into one output.",
         EXAMPLES, NOTES)
def tarpcat_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    output: Output = "-",
    workers: Annotated[int, opt("-w", "--workers", metavar="N", parser=positive(),
                       help="reader processes (default: the number of cores)")] = os.cpu_count() or 1,
    workers_p: Annotated[Optional[int], opt("-p", metavar="N", parser=positive(), hidden=True,
                         help="the original tarpcat's name of -w")] = None,
    count: Count = None,
    shuffle: Annotated[int, opt("-s", "--shuffle", metavar="N", parser=nonneg(),
                       help="shuffle the shard list and mix samples through a buffer of N samples")] = 0,
    seed: Seed = None,
    ignore_errors: Annotated[bool, opt("--ignore-errors",
                             help="skip the rest of a damaged or unreadable shard (say so, count it) instead "
                                  "of failing with exit 2")] = False,
    start_method: StartMethod = None,
    strict: Strict = False,
    blob_threshold: BlobThreshold = None,
    tmpdir: TmpDir = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
    braceexpand: BraceExpand = False,
):
    import tarproc as S
    from ..sources.pcat import parallel_encoded, parallel_encoded_batches, write_pieces
    from ..core.tario import BLOCK
    from ..sinks.output import open_sink

    args = Args(locals())
    if args.workers_p is not None:
        args.workers = args.workers_p
    rep = Reporter("tarpcat", args.verbose, args.quiet, args.progress)
    spooler = spooler_of(args)  # the workers inherit it through the environment
    if args.blob_threshold is not None:
        os.environ["TARPROC_BLOB_THRESHOLD"] = str(spooler.threshold if spooler.threshold != float("inf") else 0)
    if args.tmpdir is not None:
        os.environ["TMPDIR"] = os.path.abspath(args.tmpdir)
    stats = S.Stats()
    failed = []
    urls = open_inputs(args) if args.count != 0 else []
    from ..runtime.procs import fit_workers

    fitted, why = fit_workers(args.workers)
    if fitted < args.workers and (not isinstance(urls, list) or len(urls) > fitted):
        rep.warn(f"-w {args.workers} worker processes are more than {why} allows: starting {fitted}")
    from ..runtime.stall import Stall

    stall = Stall()  # waiting for a worker flushes the output (slow inputs show at once)
    common = dict(workers=args.workers, strict=args.strict, ignore_errors=args.ignore_errors, warn=rep.warn,
                  info=rep.info, stats=stats, failed=failed, start_method=args.start_method, stall=stall)
    # The workers are started (forked) here, before the output is opened.
    if args.shuffle or args.count is not None:
        source = parallel_encoded(urls, shuffle=args.shuffle, seed=args.seed, **common)
        batches = None
    else:
        batches = parallel_encoded_batches(urls, **common)
        source = None
    written = 0
    try:
        with open_sink(args.output, stall=stall) as sink:
            write = sink.write
            if batches is not None:
                for lengths, data in batches:
                    if lengths is None:  # one sample with large fields
                        write_pieces(sink, data)
                        written += 1
                        continue
                    write(data)
                    written += len(lengths)
                    rep.tick(stats, written)
            elif args.count != 0:
                for blob in source:
                    if type(blob) is list:  # a sample with large fields
                        write_pieces(sink, blob)
                    else:
                        write(blob)
                    written += 1
                    rep.tick(stats, written)
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
    run("tarpcat", tarpcat_command)
