"""tarcat (also tarcats, tarscat): concatenate the samples of tar shards."""

from typing import Annotated, Optional

from .base import GroupSize, group_size_of
from .base import MaxBadShards, OnBadShard, missing_keys_warning
from .base import (BlobThreshold, TmpDir, BraceExpand, Args, FileList, Fields, Inputs, Output,
                   ProgressFlag, Quiet, Seed, Skip,
                   Slice, Strict, Retries, Verbose, command, nonneg, open_inputs, opt, progress_stage, read_inputs,
                   run, Reporter, selection_stages)
from .fieldcheck import FieldCheck

EXAMPLES = """
tarcat -c 10 big.tar > small.tar                 # the first 10 samples
curl -sL https://host/shard-0000.tar | tarcat -c 10 > small.tar
tarcat 'shard-{0000..0146}.tar' -o all.tar.gz    # brace range in, gzip out
tarcat -f 'img=jpg;png cls' --rekey '{index:09d}' data.tar -o clean.tar
gsutil cat gs://b/big.tgz | tarscat -c 10 > small.tar   # returns at once
tarcat --cleanup out/                            # remove leftovers of killed writers
tarcat --keys val-keys.txt 'shard-{0000..0146}.tar' -o val.tar   # a subset by key
tarcat --on-bad-shard skip --max-bad-shards 3 'shard-{0000..0146}.tar' -o all.tar  # leave out damaged shards
tarcat --cleanup s3://bucket/out/                # ... and temporary objects (TARPROC_REMOTE_COMMIT=move)
"""

NOTES = """\
Downloaders are not options: gs://, s3://, http(s):// URLs are read with
gsutil, aws and curl, changed with TARPROC_READ_* (see docs/tarcat.md)."""

DOWNLOADER_HINT = "-c is the sample count; downloaders are set with TARPROC_READ_* (see docs/tarcat.md)"

TarcatCount = Annotated[Optional[int], opt("-c", "--count", metavar="N", parser=nonneg(hint=DOWNLOADER_HINT),
                                           help="stop after N samples (and stop reading)")]


@command("Concatenate the samples of tar shards into one tar stream.", EXAMPLES, NOTES)
def tarcat_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    output: Output = "-",
    count: TarcatCount = None,
    skip: Skip = 0,
    slice: Slice = None,
    fields: Fields = None,
    rekey: Annotated[Optional[str], opt("--rekey", metavar="FORMAT",
                     help="new keys from {index}, {key}, {basename}, {dirname}, {source}, e.g. "
                          "'{index:09d}'")] = None,
    shuffle: Annotated[int, opt("--shuffle", metavar="N", parser=nonneg(),
                       help="shuffle samples through a buffer of N (and the list of inputs)")] = 0,
    seed: Seed = None,
    keys: Annotated[Optional[str], opt("--keys", metavar="FILE",
                    help="keep only the samples whose keys are listed in FILE (one per line, '-' for "
                         "stdin)")] = None,
    exclude_keys: Annotated[Optional[str], opt("--exclude-keys", metavar="FILE",
                            help="drop the samples whose keys are listed in FILE (one per line, '-' for "
                                 "stdin)")] = None,
    strict: Strict = False,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    retries: Retries = None,
    blob_threshold: BlobThreshold = None,
    tmpdir: TmpDir = None,
    group_size: GroupSize = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
    cleanup: Annotated[Optional[str], opt("--cleanup", metavar="DIR|URL",
                       help="remove the temporary files (.NAME.HOST-RANDOM.PID.tarproc-partial, .tarproc-spool.PID.*) that killed "
                            "writers left in DIR (a live writer's, in any PID namespace, are kept: they are "
                            "locked), or the temporary objects under an s3:// or gs:// prefix, and exit")] = None,
    braceexpand: BraceExpand = False,
    maxout: Annotated[Optional[int], opt("--maxout", metavar="N", parser=nonneg(), hidden=True,
                      help="the original tarcat's name for -c")] = None,
    eof: Annotated[bool, opt("--eof", hidden=True, help="accepted for compatibility (no effect)")] = False,
    output_mode: Annotated[Optional[str], opt("--output-mode", hidden=True,
                           help="accepted for compatibility (no effect)")] = None,
):
    import tarproc as S
    from ..sinks.output import open_sink
    args = Args(locals())
    if args.maxout is not None:  # the original tarcat's -c
        args.count = args.maxout if args.count is None else min(args.count, args.maxout)
    prog = args.prog
    rep = Reporter(prog, args.verbose, args.quiet, args.progress)
    if args.cleanup is not None:
        import os

        from ..errors import UsageError
        from ..sinks.output import cleanup_partials

        from ..sources.open import scheme_of

        if scheme_of(args.cleanup) == "file" and not os.path.isdir(args.cleanup):
            raise UsageError(f"--cleanup {args.cleanup}: not a directory")
        if scheme_of(args.cleanup) not in ("file", "s3", "gs"):
            raise UsageError(f"--cleanup {args.cleanup}: give a directory or an s3:// or gs:// prefix")
        kept = []
        for path in cleanup_partials(args.cleanup, all_names=True, kept=kept, settings=args.settings):
            rep.info(f"removed {path}")
        for path in kept:
            rep.info(f"kept {path} (its writer is alive)")
        if scheme_of(args.cleanup) == "file":
            from ..core.blob import stale_spools

            for path in stale_spools(args.cleanup):  # spool files of large members (.tarproc-spool.PID.*)
                try:
                    os.unlink(path)
                    rep.info(f"removed {path}")
                except OSError:
                    pass
            from ..stages.sort import cleanup_stale

            for path in cleanup_stale(args.cleanup, args.settings.foreign_stale_seconds):  # sort runs of a killed tarsort (tarsort-PID-HOST-*/)
                rep.info(f"removed {path}")
        return 0
    stats = S.Stats()
    urls = open_inputs(args)  # lazy: the first input opens before the rest is expanded
    if args.shuffle > 0:
        from ..sources.shardlist import shuffle_urls

        urls = shuffle_urls(urls, args.seed, args.settings.max_urls)  # bounded: a longer list is shuffled through a buffer

    stages = [S.shuffle(args.shuffle, args.seed)] if args.shuffle > 0 else []
    if args.keys or args.exclude_keys:
        from ..errors import UsageError
        from ..stages.keys import read_keys, select_keys

        if args.keys and args.exclude_keys:
            raise UsageError("give --keys or --exclude-keys, not both")
        keyfile = args.keys or args.exclude_keys
        if keyfile == "-" and isinstance(urls, list) and "-" in urls:  # (a long lazy list is not consumed)
            raise UsageError("the key list and the samples cannot both come from stdin")
        keys = read_keys(keyfile, args.settings)

        missing = missing_keys_warning(rep, keys, keyfile)  # every listed key is looked for: say which never came
        stages.insert(0, select_keys(keys, exclude=bool(args.exclude_keys), stats=stats,
                                     on_missing=None if args.exclude_keys else missing))
    middle = []
    if args.fields:
        check = FieldCheck(rep, args.fields)
        middle = [check.before, S.select_fields(args.fields, stats), check.after]
    stages += selection_stages(args, middle)
    if args.rekey:
        stages.append(S.rekey(args.rekey))
    stages.append(progress_stage(rep, stats))

    with open_sink(args.output, stall=rep.stall, group_size=group_size_of(args), settings=args.settings) as sink:
        writer = S.SampleWriter(sink, stats)
        # samples that go out as they came in are copied as the bytes they were read from
        raw = not (args.fields or args.rekey or args.shuffle)
        for sample in S.pipeline(read_inputs(args, rep, stats, urls, pass_through=True, raw=raw), *stages):
            writer.write(sample)
        writer.close()
    rep.done(stats)
    return 0


def tarcat():
    run("tarcat", tarcat_command)


def tarcats():
    run("tarcats", tarcat_command)


def tarscat():
    run("tarscat", tarcat_command)
