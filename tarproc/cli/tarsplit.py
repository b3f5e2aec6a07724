"""tarsplit: cut a stream of samples into shards by count and size."""

from typing import Annotated, Optional

from .base import (Args, BraceExpand, FileList, Inputs, ProgressFlag, Quiet, Strict, Verbose, command, nonneg,
                   opt, parse_size, progress_stage, read_inputs, run, Reporter)

EXAMPLES = """
tar -cf - --sort=name -C /data/raw train | tarsplit -s 1e9 -o imagenet_train --maxshards 2
tarsort -S shuffle < all.tar | tarsplit -n 1000 -o 'out-%06d.tar'
tarsplit -n 20 -o _test data.tar               # _test-000000.tar, _test-000001.tar, ...
tarsplit -s 100MB -z -o train big.tar          # train-000000.tar.gz, ... (sizes before gzip)
tarsplit -n 1000 -o 'train-{shard:06d}.tar' -p 'gsutil cp %s gs://bucket/ && rm %s' data.tar
tarsplit -n 1000 -o 'gs://bucket/train-%06d.tar' --manifest shards.json data.tar
"""

NOTES = """
post commands (-p, -C): every %s is the shard's name; {shard} its name, {abspath},
{basename} (train-000003.tar), {base} (train-000003), {ext} (.tar), {dirname}, {index} (3).
A shard appears under its final name only when complete; killed at any moment,
every file with a final name is a whole shard.
exit status: 0 ok, 1 a shard could not be written or its post command failed,
2 bad usage or unreadable input.
"""


@command("Split a tar file (or stream) into shards of at most N samples and/or BYTES bytes.", EXAMPLES, NOTES)
def tarsplit_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    num_samples: Annotated[int, opt("-n", "--num-samples", "--maxcount", metavar="N", parser=nonneg(),
                           help="at most N samples per shard; 0: no limit (default: 100000)")] = 100000,
    max_size: Annotated[str, opt("-s", "--max-size", "--maxsize", metavar="BYTES",
                        help="at most BYTES per shard as written, before compression: 1e9, 100MB, 1GiB; "
                             "0: no limit (default: 1e9)")] = "1e9",
    output: Annotated[str, opt("-o", "--output", metavar="PREFIX|PATTERN",
                      help="PREFIX gives PREFIX-000000.tar, PREFIX-000001.tar, ...; a PATTERN with %06d or "
                           "{shard:06d} is used as given; may be a URL (gs://, s3://, pipe:...) "
                           "(default: temp)")] = "temp",
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
    command_: Annotated[Optional[str], opt("-C", "--command", metavar="CMD",
                        help="like --post, and the shard is deleted after the command succeeds")] = None,
    nodelete: Annotated[bool, opt("--nodelete", help="with -C: keep the shard")] = False,
    manifest: Annotated[Optional[str], opt("--manifest", metavar="FILE",
                        help="write a JSON list of the shards (name, index, samples, bytes) to FILE")] = None,
    strict: Strict = False,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
    braceexpand: BraceExpand = False,
):
    import json

    from .. import samples as S
    from ..split import post_command, shard_pattern, split_samples
    from ..errors import UsageError
    from ..urls import compression_for, open_sink

    args = Args(locals())
    args.command = args.command_
    if args.output in ("-", "") or args.output.startswith("-"):
        raise UsageError(f"-o {args.output!r}: tarsplit writes several shards, not one stream; give a PREFIX "
                         f"or a PATTERN such as 'out-%06d.tar' (tarcat writes one stream)")
    rep = Reporter("tarsplit", args.verbose, args.quiet, args.progress)
    max_size = parse_size(args.max_size) if args.max_size not in (None, "", "0") else None
    max_count = args.num_samples if args.num_samples and args.num_samples > 0 else None
    pattern = shard_pattern(args.output, args.compress)
    compression = "auto"
    if args.compress and compression_for(pattern.replace("%", "").replace("{", "")) is None:
        compression = "gzip"
    posts = []
    if args.post:
        posts.append(post_command(args.post))
    if args.command:
        posts.append(post_command(args.command, delete=not args.nodelete))

    def post(shard):
        for p in posts:
            p(shard)

    stats = S.Stats()


    shards = []
    total_bytes = 0
    try:
        samples = progress_stage(rep, stats)(read_inputs(args, rep, stats))
        for shard in split_samples(samples, pattern, max_count=max_count, max_size=max_size,
                                   start=args.start, maxshards=args.maxshards, compression=compression,
                                   post=post if posts else None, stats=stats):
            shards.append(shard)
            total_bytes += shard.bytes
            rep.info(f"{shard.name}: {shard.samples} samples, {shard.bytes} bytes")
    finally:
        if args.manifest:
            with open_sink(args.manifest, compression=None) as sink:
                sink.write((json.dumps([s.as_dict() for s in shards], indent=1) + "\n").encode())
    rep.done(stats)
    rep.info(f"{len(shards)} shards, {sum(s.samples for s in shards)} samples, {total_bytes} bytes")
    return 0


def entry():
    run("tarsplit", tarsplit_command)
