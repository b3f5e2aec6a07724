"""tarpcat: read many shards concurrently and write their samples to one output."""

import os
from typing import Annotated, Optional

from .base import Retries, resume_of
from .base import GroupSize, group_size_of
from .base import MaxBadShards, OnBadShard, bad_shards_of, end_bad_shards
from .base import (BlobThreshold, TmpDir, spooler_of, Args, BraceExpand, Count, FileList, Inputs, Output, ProgressFlag, Quiet, Seed, StartMethod,
                   Strict, Verbose,
                   command, nonneg, open_inputs, opt, positive, run, Reporter)

EXAMPLES = """
tarpcat -w 4 'shard-{0000..0146}.tgz' -o all.tar        # four reader processes
tarpcat --shuffle 5000 --seed 1 'train-{000..099}.tar' | tarsplit -n 1000 -o mixed
tarpcat -T shards.txt -c 100 > first100.tar
tarpcat --on-bad-shard skip --max-bad-shards 5 'gs://bucket/shard-{0000..0999}.tar' > all.tar
"""

NOTES = """
Worker i of N reads shards i, i+N, ... in order, and the output takes one batch
of samples from each worker in turn: the order depends only on the shard list,
the options and -w, never on timing. Every sample appears exactly once.
Two samples with one key side by side are one sample read back: written when
their fields differ, refused when a field would come twice (as every writer).
With --on-bad-shard skip each worker holds a shard's samples until the shard
ends (in memory, then in a temporary file) and drops them if it breaks.
exit status: 0 ok (also when bad shards were skipped within --max-bad-shards),
1 more bad shards than allowed, or the output could not be written, 2 bad usage,
a damaged/unreadable shard (named on stderr) or a field twice under one key
side by side.
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
                             hidden=True, help="the same as --on-bad-shard partial with no limit "
                                                   "(--max-bad-shards)")] = False,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    start_method: StartMethod = None,
    strict: Strict = False,
    retries: Retries = None,
    blob_threshold: BlobThreshold = None,
    tmpdir: TmpDir = None,
    group_size: GroupSize = None,
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
    if args.ignore_errors:  # the older flag: the rest of a bad shard skipped, any number of them
        args.on_bad_shard = "partial" if args.on_bad_shard == "fail" else args.on_bad_shard
    bad = bad_shards_of(args, rep)
    spooler = spooler_of(args)  # handed to the workers (with the settings)
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
    common = dict(workers=args.workers, strict=args.strict, warn=rep.warn, on_bad_shard=bad,
                  info=rep.info, stats=stats, failed=failed, start_method=args.start_method, stall=stall,
                  spooler=spooler, settings=args.settings, **resume_of(args))
    # The workers are started (forked) here, before the output is opened.
    if args.shuffle or args.count is not None:
        source = parallel_encoded(urls, shuffle=args.shuffle, seed=args.seed, **common)
        batches = None
    else:
        batches = parallel_encoded_batches(urls, **common)
        source = None
    written = 0
    try:
        with open_sink(args.output, stall=stall, group_size=group_size_of(args), settings=args.settings) as sink:
            write = sink.write
            if batches is not None:
                for lengths, data in batches:
                    if lengths is None:  # one sample with large fields
                        sink.start_bytes(_pieces_size(data))
                        write_pieces(sink, data)
                        written += 1
                        continue
                    if sink.grouped:  # groups of whole samples: tell the sink where each one starts
                        view, at = memoryview(data), 0
                        for n in lengths:
                            sink.start_bytes(n)
                            write(view[at:at + n])
                            at += n
                    else:
                        write(data)
                    written += len(lengths)
                    rep.tick(stats, written)
            elif args.count != 0:
                for blob in source:
                    if type(blob) is list:  # a sample with large fields
                        sink.start_bytes(_pieces_size(blob))
                        write_pieces(sink, blob)
                    else:
                        sink.start_bytes(len(blob))
                        write(blob)
                    written += 1
                    rep.tick(stats, written)
                    if written == args.count:
                        break
            if written != args.count:  # all the input was read
                end_bad_shards(bad, rep, args, stats)
            write(bytes(2 * BLOCK))
    finally:
        for gen in (batches, source):  # stops the workers
            if gen is not None and hasattr(gen, "close"):
                gen.close()
    stats.written = written
    rep.done(stats)
    return 0


def _pieces_size(pieces):
    """About the bytes of a sample given as pieces (bytes and blobs)."""
    try:
        return sum(len(p) for p in pieces)
    except TypeError:
        return 0


def entry():
    run("tarpcat", tarpcat_command)
