"""tarsplit: cut a stream of samples into shards by count and size."""

from typing import Annotated, Optional

from .base import output_directory_exists, Retries, resume_of
from .base import GroupSize, group_size_of
from .base import MaxBadShards, OnBadShard
from .base import (replaced, BlobThreshold, TmpDir, Args, BraceExpand, FileList, Inputs, ProgressFlag, Quiet, Strict, Verbose, command, nonneg,
                   opt, parse_size, positive, progress_stage, read_inputs, run, Reporter)

EXAMPLES = """
tar -cf - --sort=name -C /data/raw train | tarsplit -s 1e9 -o imagenet_train --maxshards 2
tarsort -S shuffle < all.tar | tarsplit -n 1000 -o 'out-%06d.tar'
tarsplit -n 20 -o _test data.tar               # _test-000000.tar, _test-000001.tar, ...
tarsplit -s 100MB -z -o train big.tar          # train-000000.tar.gz, ... (sizes before gzip)
tarsplit -n 1000 -o 'train-{shard:06d}.tar' -p 'gsutil cp %s gs://bucket/ && rm %s' data.tar
tarsplit -n 1000 -o 'gs://bucket/train-%06d.tar' --manifest shards.json data.tar
tarsplit --shards 8 -o 'rank-{shard:02d}.tar' --index index.json data.tar   # 8 equal shards + index
mkdir -p out && tarsplit --fractions 'train=0.8,val=0.1,test=0.1' --seed 1 -o 'out/{split}-%06d.tar' data.tar
mkdir -p fx && tarsplit --fractions 'train=0.9,val=0.1' -n 500 -o 'fx/{split}-%06d.tar' --index 'fx/{split}.json' data.tar
"""

NOTES = """
post commands (-p, -C): every %s is the shard's name; {shard} its name, {abspath},
{basename} (train-000003.tar), {base} (train-000003), {ext} (.tar), {dirname}, {index} (3).
Each shard is committed (appears under its final name) when it is closed; killed
or failing at any moment, every file with a final name is a whole shard and the
shard in progress is discarded. -p/-C run on committed shards only.
exit status: 0 ok, 1 a shard could not be written or its post command failed,
2 bad usage or unreadable input.
"""


@command("Split a tar file (or stream) into shards of at most N samples and/or BYTES bytes.", EXAMPLES, NOTES)
def tarsplit_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    num_samples: Annotated[Optional[int], opt("-n", "--num-samples", "--maxcount", metavar="N", parser=nonneg(),
                           help="at most N samples per shard; 0: no limit (default: 100000)")] = None,
    max_size: Annotated[Optional[str], opt("-s", "--max-size", "--maxsize", metavar="BYTES",
                        help="at most BYTES per shard as written, before compression: 1e9, 100MB, 1GiB; "
                             "0: no limit (default: 1e9)")] = None,
    output: Annotated[str, opt("-o", "--output", metavar="PREFIX|PATTERN", callback=output_directory_exists,
                      help="PREFIX gives PREFIX-000000.tar, PREFIX-000001.tar, ...; a PATTERN with %06d or "
                           "{shard:06d} is used as given; may be a URL (gs://, s3://, pipe:...) "
                           "(default: temp, in the current directory, said on stderr)")] = None,
    compress: Annotated[bool, opt("-z", "--compress",
                        help="gzip the shards (a PREFIX gets .tar.gz; a pattern ending .tgz/.tar.gz/.tar.zst "
                             "compresses without -z)")] = False,
    start: Annotated[int, opt("--start", metavar="N", parser=nonneg(),
                     help="number the shards from N (default: 0)")] = 0,
    maxshards: Annotated[Optional[int], opt("--maxshards", metavar="N", parser=nonneg(),
                         help="stop after N shards (and stop reading input)")] = None,
    post: Annotated[Optional[str], opt("-p", "--post", metavar="CMD",
                    help="shell command run after each shard is complete (see below); failure stops with "
                         "exit 1")] = None,
    command_: Annotated[Optional[str], opt("-C", "--post-delete", metavar="CMD",
                        help="like --post, and the shard is deleted after the command succeeds")] = None,
    command_replaced: replaced("--command", "-C/--post-delete") = None,
    nodelete: Annotated[bool, opt("--nodelete", help="with -C: keep the shard")] = False,
    manifest: Annotated[Optional[str], opt("--manifest", metavar="FILE", callback=output_directory_exists,
                        help="write a JSON list of the shards (name, index, samples, bytes) to FILE")] = None,
    shards: Annotated[Optional[int], opt("--shards", metavar="N", parser=positive(),
                      help="exactly N shards whose sample counts differ by at most 1 (total from --total, or "
                           "a counting pass: files are read twice, stdin is spooled to a temporary "
                           "file)")] = None,
    total: Annotated[Optional[str], opt("--total", metavar="N|INDEX",
                     help="with --shards: the number of input samples, or an index JSON (tarindex) of the "
                          "inputs")] = None,
    fractions: Annotated[Optional[str], opt("--fractions", metavar="SPEC",
                         help="'train=0.8,val=0.1,test=0.1': each sample goes to a split by a stable hash of "
                              "its key (and --seed); -o must contain {split}; -n/-s limit each split's "
                              "shards")] = None,
    seed: Annotated[int, opt("--seed", metavar="N",
                    help="seed of the --fractions hash (default: 0)")] = 0,
    index: Annotated[Optional[str], opt("--index", metavar="FILE", callback=output_directory_exists,
                     help="write a tarindex index (JSON, offsets, and for .tar.gz/.tar.zst shards in groups "
                          "their seek record) of the shards written; with --fractions one per split, named with "
                          "{split}: 'idx/{split}.json'")] = None,
    strict: Strict = False,
    allow_truncated: Annotated[bool, opt("--allow-truncated",
                               help="commit the shard holding the end of an input that ended without its "
                                    "end-of-archive marker (default: that shard is not committed, exit 1: "
                                    "the input may be a failed command's output)")] = False,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    retries: Retries = None,
    blob_threshold: BlobThreshold = None,
    tmpdir: TmpDir = None,
    group_size: GroupSize = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
    braceexpand: BraceExpand = False,
):
    import json

    import tarproc as S
    from ..sinks.split import post_command, shard_pattern, split_samples
    from ..errors import UsageError
    from ..sinks.output import compression_for, open_sink
    from .base import open_inputs

    args = Args(locals())
    args.command = args.command_
    unnamed = args.output is None
    if unnamed:
        args.output = "temp"  # the original's default
    if args.output in ("-", "") or args.output.startswith("-"):
        raise UsageError(f"-o {args.output!r}: tarsplit writes several shards, not one stream; give a PREFIX "
                         f"or a PATTERN such as 'out-%06d.tar' (tarcat writes one stream)")
    rep = Reporter("tarsplit", args.verbose, args.quiet, args.progress)
    exact = args.shards is not None
    if exact and (args.num_samples is not None or args.max_size is not None or args.maxshards is not None
                  or args.fractions):
        raise UsageError("--shards N cannot be combined with -n, -s, --maxshards or --fractions")
    if args.total is not None and not exact:
        raise UsageError("--total goes with --shards N")
    if args.fractions and (args.maxshards is not None or args.start):
        raise UsageError("--fractions cannot be combined with --maxshards or --start")
    if args.max_size is None and not exact:
        args.max_size = "1e9"
    if args.num_samples is None and not exact:
        args.num_samples = 100000
    max_size = parse_size(args.max_size) if args.max_size not in (None, "", "0") else None
    max_count = args.num_samples if args.num_samples and args.num_samples > 0 else None
    pattern = shard_pattern(args.output, args.compress)
    if unnamed:  # shards appear in the current directory: say so once, whatever -q
        import os

        rep.say(f"no -o given: writing the shards as {pattern} in {os.getcwd()} (-o PREFIX names them)")
    compression = "auto"
    if args.compress and compression_for(pattern.replace("%", "").replace("{", "")) is None:
        compression = "gzip"
    posts = []
    if args.post:
        posts.append(post_command(args.post))
    if args.command:
        posts.append(post_command(args.command, delete=not args.nodelete))
        if args.index and not args.nodelete:
            rep.warn(f"--index {args.index} names the local shards, which -C deletes once its command has run: "
                     f"index the shards where they went (tarindex URL ... -o INDEX), or add --nodelete")

    def post(shard):
        for p in posts:
            p(shard)

    stats = S.Stats()


    import itertools

    from .base import URLS_AHEAD
    from .guards import refuse_outputs_among_shards, refuse_overwriting_inputs, refuse_shared_outputs

    index_of = _index_names(args.index, args.fractions)  # split (None without --fractions) -> index file
    urls = open_inputs(args)
    ahead = urls if isinstance(urls, list) else list(itertools.islice(urls, URLS_AHEAD))
    if ahead is not urls:
        urls = itertools.chain(ahead, urls)
    # before anything is written (the manifest is written also when the run fails)
    from ..sinks.index import index_files

    written = [f for path in index_of.values() for f in index_files(path)]
    refuse_overwriting_inputs([args.manifest, *written], ahead, "choose another --manifest or --index")
    refuse_shared_outputs([("--manifest", args.manifest), *(("--index", f) for f in written)])
    splits = [part.split("=")[0].strip() for part in args.fractions.split(",")] if args.fractions else []
    refuse_outputs_among_shards([("--manifest", args.manifest), *(("--index", f) for f in written)], pattern,
                                splits)

    shards = []
    total_bytes = 0
    spooled = None
    mode = {}
    try:
        if exact:
            if args.total is not None:
                total = _total_from(args.total, rep)
            else:
                if not isinstance(urls, list):  # read twice: a long lazy list is held (bounded)
                    from ..core.limits import bounded_list

                    urls = bounded_list(urls, "--shards without --total", max_urls=args.settings.max_urls)
                if "-" in urls:
                    if urls != ["-"]:
                        raise UsageError("--shards without --total reads its input twice: stdin cannot be mixed "
                                         "with other inputs")
                    spooled = _spool_stdin(rep)
                    urls = [spooled]
                total = _count_samples(urls, args, rep)
            mode = {"shards": args.shards, "total": total, "max_count": None, "max_size": None}
        elif args.fractions:
            mode = {"fractions": args.fractions, "seed": args.seed}
        samples = progress_stage(rep, stats)(read_inputs(args, rep, stats, urls, pass_through=True, raw=True))
        if not args.allow_truncated:
            samples = _refuse_truncated(samples, stats, shards)
        kw = {"max_count": max_count, "max_size": max_size, "maxshards": args.maxshards, "inputs": ahead, **mode}
        for shard in split_samples(samples, pattern, start=args.start, compression=compression,
                                   group_size=group_size_of(args), index=bool(args.index), settings=args.settings,
                                   post=post if posts else None, stats=stats, **kw):
            shards.append(shard)
            total_bytes += shard.bytes
            rep.info(f"{shard.name}: {shard.samples} samples, {shard.bytes} bytes")
        if args.index:
            from ..sinks.index import write_shard_index

            for split, path in index_of.items():  # one index per split: never one that mixes them
                write_shard_index([s.info for s in shards if split is None or s.split == split], path,
                                  warn=rep.warn, settings=args.settings)
    finally:
        if spooled is not None:
            import os

            os.unlink(spooled)
        if args.manifest:
            # the manifest lists the committed shards, also when the run fails
            with open_sink(args.manifest, compression=None, defer=False, settings=args.settings) as sink:
                sink.write((json.dumps([s.as_dict() for s in shards], indent=1) + "\n").encode())
    if args.fractions:
        _report_splits(rep, shards, args.quiet, args.fractions)
    rep.done(stats)
    rep.info(f"{len(shards)} shards, {sum(s.samples for s in shards)} samples, {total_bytes} bytes")
    return 0


def _refuse_truncated(samples, stats, shards):
    """The samples, stopped with an :class:`~tarproc.errors.OutputError`
    (exit 1) as soon as an input has ended without its end-of-archive
    marker: the shard being written (its last samples) is then not
    committed.  `tarproc ... | tarsplit` commits whole-looking shards of a
    failed upstream otherwise (the reader only warns)."""
    from ..errors import OutputError

    def refuse():
        raise OutputError(f"an input ended without its end-of-archive marker (a failed upstream command?): the "
                          f"shard holding its end is not committed ({len(shards)} shard"
                          f"{'' if len(shards) == 1 else 's'} before it are); --allow-truncated commits it")

    for sample in samples:
        if stats.truncated:
            refuse()
        yield sample
    if stats.truncated:
        refuse()


# ---- exact shards, splits and indexes (issue 16)


def _index_names(index, fractions):
    """``--index``: the index file of each split (``{split}`` in the name
    filled in), or ``{None: index}`` without ``--fractions``.  One index for
    several splits is refused: a dataset over it would read them all."""
    from ..errors import UsageError

    if not index:
        return {}
    if not fractions:
        if "{split}" in index:
            raise UsageError(f"--index {index!r}: {{split}} is filled in only with --fractions")
        return {None: index}
    from ..sinks.split import parse_fractions

    names = [name for name, _ in parse_fractions(fractions)]
    if "{split}" not in index:
        if len(names) > 1:
            raise UsageError(f"--index {index!r}: one index for the {len(names)} splits would mix them; name one "
                             f"per split with {{split}}, e.g. --index 'idx/{{split}}.json'")
        return {names[0]: index}
    paths = {name: index.replace("{split}", name) for name in names}
    if len(set(paths.values())) < len(paths):
        raise UsageError(f"--index {index!r}: the splits' index names collide")
    return paths


def _total_from(value, rep):
    """--total: a number, or an index JSON whose sample counts are summed."""
    if value.strip().isdigit():
        return int(value)
    from ..errors import UsageError
    from ..sources.indexed import IndexedDataset

    try:
        return len(IndexedDataset(value))
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"--total {value!r}: neither a number nor a readable index ({e})") from None


def _spool_stdin(rep):
    """Copy stdin to a temporary file on disk (not memory), to read it twice."""
    import os
    import tempfile

    from ..errors import writing

    fd, path = tempfile.mkstemp(prefix="tarsplit-stdin-", suffix=".spool")
    try:
        with open(os.dup(0), "rb", buffering=0) as src, os.fdopen(fd, "wb", buffering=0) as out:
            while data := src.read(1 << 20):
                with writing(path, "a copy of stdin (the counting pass reads it twice)",
                             "choose the place with --tmpdir or TMPDIR"):
                    view = memoryview(data)
                    while view:
                        view = view[out.write(view):]
    except BaseException:
        os.unlink(path)
        raise
    rep.info(f"stdin spooled to {path} for the counting pass")
    return path


def _count_samples(urls, args, rep):
    import tarproc as S

    from ..sources.badshards import BadShards

    stats = S.Stats()
    n = 0
    bad = BadShards(args.on_bad_shard) if args.on_bad_shard not in (None, "fail") else None  # told in the 2nd pass
    for url in urls:
        for _ in S.iter_samples([url], stats, strict=args.strict, warn=rep.warn, on_bad_shard=bad,
                                settings=args.settings, **resume_of(args)):
            n += 1
    rep.info(f"counting pass: {n} samples")
    return n


def _report_splits(rep, shards, quiet, spec):
    from ..sinks.split import parse_fractions

    totals = {}
    for shard in shards:
        t = totals.setdefault(shard.split, [0, 0, 0])
        t[0] += shard.samples
        t[1] += shard.bytes
        t[2] += 1
    if not quiet:
        for name, (n, b, k) in totals.items():
            rep.say(f"{name}: {n} samples, {b} bytes, {k} shards")
    # a split that got no sample has no shard: an empty result, said
    for name, _ in parse_fractions(spec):
        if name not in totals:
            rep.warn(f"{name}: no sample fell in this split: no shard written for it")


def entry():
    run("tarsplit", tarsplit_command)
