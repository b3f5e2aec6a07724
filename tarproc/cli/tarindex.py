"""tarindex: index shards (sample counts for wids; per-sample offsets, and for
compressed shards where decoding restarts, for random access with
tarproc.IndexedDataset)."""

from typing import Annotated, Optional

from .guards import refuse_overwriting_inputs
from .base import (output_directory_exists, Args, BraceExpand, FileList, Inputs, ProgressFlag, Quiet, Strict, Retries, Verbose, command, open_inputs, resume_of,
                   opt, positive, run, Reporter)

EXAMPLES = """
tarindex 'shard-{0000..0146}.tar' -o index.json      # index.json + index.offsets.d/ + index.keys
tarindex -T shards.txt -o data/index.json --name imagenet-train
tarindex 'https://host/data/shard-{0000..0009}.tar' -o index.json -p 8   # 8 shards at once
tarindex 'shard-{0000..0146}.tar.gz' -o index.json   # + index.seek: one group (or checkpoint span) per sample
tarcat big.tar.xz -o big.tar.zst && tarindex big.tar.zst -o index.json   # xz: rewrite in zstd frames first
tarindex --checksum 'shard-*.tar' -o index.json && tarcheck --index index.json
tarindex shard-*.tar > counts.json                  # stdout: counts only, shards by absolute path
python3 -c 'import tarproc; ds = tarproc.IndexedDataset("index.json"); print(len(ds), ds[7]["__key__"])'
python3 -c 'import tarproc; ds = tarproc.IndexedDataset("index.json"); print(ds.index_of(ds.key(7)))'
"""

NOTES = """
The JSON is a wids index ("__kind__": "wids-shard-index-v1", a shardlist of url/nsamples);
a local shard is named relative to the index's directory when that name finds it
both through and around symbolic links, else by its absolute real path (always on
stdout). The byte range and key of every sample go to a sidecar per shard
(INDEX.offsets.d/NNNNNN.offsets: 12 bytes + the key per sample, written as each
shard is read), and a table of key hashes for IndexedDataset.index_of (INDEX.keys:
16 bytes per sample). For .tar.gz and .tar.zst shards the ranges are in the decoded
tar, and INDEX.seek says where decoding restarts: the groups tarproc writes
(--group-size), zstd frames, full-flush points (pigz --independent), or, for gzip
compressed as one stream (gzip, GNU tar -z), checkpoints every --checkpoint-spacing
bytes. xz, bzip2 and one-frame zstd shards get counts only (a warning says so, and
their entry has "offsets": false). See docs/tarindex.md.
A local uncompressed shard is read as tar -t reads it: headers, seeking over
large members. Each entry keeps the shard's size and, where the store gives one,
its mtime, ETag or Last-Modified (IndexedDataset compares them); --checksum adds
the SHA-256 of every shard (tarcheck --index verifies it).

exit status: 0 ok, 1 the index could not be written, 2 bad usage or unreadable input.
"""


@command("Index tar shards (.tar, .tar.gz, .tar.zst): sample counts (wids) and per-sample offsets.", EXAMPLES,
         NOTES)
def tarindex_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    output: Annotated[str, opt("-o", "--output", metavar="URL", callback=output_directory_exists,
                      help="the index JSON (default: stdout, counts only: offsets need a file beside the "
                           "index)")] = "-",
    offsets: Annotated[Optional[str], opt("--offsets", metavar="FILE", callback=output_directory_exists,
                       help="where the offsets go: the per-shard sidecars in FILE.d/, the key table "
                            "in FILE with .keys for .offsets (default: the index's name with .offsets for "
                            ".json)")] = None,
    no_offsets: Annotated[bool, opt("--no-offsets", help="counts only, no sidecar")] = False,
    checkpoint_spacing: Annotated[Optional[str], opt("--checkpoint-spacing", metavar="SIZE",
                                  help="a gzip shard compressed as one stream (by gzip, GNU tar) gets a "
                                       "checkpoint every SIZE bytes of tar: smaller reads less per sample, "
                                       "and costs 32 KiB of index per checkpoint (default: 4MiB)")] = None,
    parallel: Annotated[int, opt("-p", "--parallel", metavar="N", parser=positive(),
                        help="index N shards at once (threads; helps remote shards and --checksum)")] = 1,
    checksum: Annotated[bool, opt("--checksum", help="record the SHA-256 of every shard (reads all its bytes; "
                                                     "verify with tarcheck --index)")] = False,
    name: Annotated[Optional[str], opt("--name", metavar="NAME",
                    help="the dataset's name (the index's \"name\", as widsindex writes)")] = None,
    strict: Strict = False,
    retries: Retries = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
    braceexpand: BraceExpand = False,
):
    import tarproc as S
    from ..errors import UsageError
    from ..sinks.index import index_shards

    args = Args(locals())
    if args.no_offsets and args.offsets:
        raise UsageError("give --offsets FILE or --no-offsets, not both")
    from ..core.limits import bounded_list

    urls = bounded_list(open_inputs(args), "the shard list", max_urls=args.settings.max_urls)  # (a long list comes as an iterator)
    urls = refuse_overwriting_inputs([args.output, args.offsets], urls, "an index describes its shards")
    rep = Reporter("tarindex", args.verbose, args.quiet, args.progress, total=len(urls), unit="shards")
    offsets = False if args.no_offsets else (args.offsets or True)
    from ..sinks.index import index_files

    written = index_files(args.output, offsets if args.output != "-" or isinstance(offsets, str) else False)
    urls = refuse_overwriting_inputs(written, urls, "an index describes its shards")
    rep = Reporter("tarindex", args.verbose, args.quiet, args.progress, total=len(urls), unit="shards")
    if args.output == "-" and offsets is True and not args.quiet:
        rep.say("index on stdout: counts only (give -o FILE, or --offsets FILE, for per-sample offsets)")
    if args.output == "-" and offsets is True:
        offsets = False
    if offsets:  # a server that ignores Range found now, not at the first sample read (one request a server)
        from ..sources.ranges import probe_servers

        probe_servers(urls, args.settings)
    stats = S.Stats()
    done = [0, 0]
    amp = [0, 0]  # compressed shards: bytes fetched and sample bytes, every sample read alone

    def progress(info):
        done[0] += 1
        done[1] += info.nsamples
        if info.amplification is not None:
            amp[:] = [x + y for x, y in zip(amp, info.amplification)]
        rep.info(f"{info.url}: {info.nsamples} samples" + (f" ({info.compression}: counts only)"
                                                            if info.compression and info.seek is None else ""))
        rep.bar.update(done[0], text=f"{done[0]}/{len(urls)} shards, {done[1]} samples")

    spacing = None
    if args.checkpoint_spacing is not None:
        from ..core.units import parse_size

        spacing = parse_size(args.checkpoint_spacing)
        if not 64 << 10 <= spacing <= 1 << 30:
            raise UsageError(f"--checkpoint-spacing {args.checkpoint_spacing}: give 64KiB to 1GiB")
    index_shards(urls, args.output, offsets=offsets, name=args.name, stats=stats, strict=args.strict,
                 warn=rep.warn, progress=progress, checkpoint_spacing=spacing, parallel=args.parallel,
                 checksum=args.checksum, settings=args.settings, **resume_of(args))
    # what it did: not "samples read 2000, written 0" (an index writes no samples)
    text = f"indexed {done[0]} shard{'' if done[0] == 1 else 's'}, {done[1]} samples"
    text += f" into {'stdout' if args.output == '-' else args.output}"
    if stats.members_skipped:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(stats.reasons.items()))
        text += f"; members skipped {stats.members_skipped} ({why})"
    if amp[1]:
        text += f"; compressed shards: {amp[0] / amp[1]:.2f} bytes fetched per sample byte (one sample read alone)"
    rep.done(stats, summary=text)
    return 0


def entry():
    run("tarindex", tarindex_command)
