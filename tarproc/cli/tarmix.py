"""tarmix: mix the samples of several sources by weight, as a spec says."""

from typing import Annotated, Optional

import typer

from .guards import refuse_overwriting_inputs
from .base import GroupSize, group_size_of
from .base import MaxBadShards, OnBadShard, bad_shards_of, end_bad_shards
from .base import (Args, Count, Output, ProgressFlag, Quiet, Seed, Strict, Verbose, command, nonneg, opt,
                   progress_stage, run, Reporter)

EXAMPLES = """
tarmix mix.json -c 10000 -o mixed.tar         # 10,000 samples drawn by weight
tarmix --rekey '{index:09d}' mix.json > mixed.tar   # new keys: sources share key names
tarmix --seed 1 mix.yaml | tarsplit -n 1000 -o 'mixed-%06d.tar'
echo '{"sources": [{"shards": "a-{0..9}.tar", "weight": 3}, {"shards": "b.tar", "nrepeats": 100}]}' | tarmix -
"""

NOTES = """\
The mix is specified by a YAML (or JSON) file that looks something like this:

    shuffle: 1000                  # shuffle the mixed samples through a buffer of 1000
    sources:
      - shards: "data1-{000..999}.tar"
        weight: 1                  # sources are picked with probability proportional to weight
        probability: 0.9           # a picked sample is kept with this probability
        shuffle: 10000             # shuffle this source's shards and samples (buffer size)
      - shards: "data2-{000..100}.tar"
        weight: 1.7
        nstreams: 10               # read this many of its shards at once, mixing them
        nrepeats: 5                # go through the source this often
        allow_missing: true        # skip shards that cannot be opened (with a warning)

The mix ends when a source that is picked has no samples left (as the
original tarmix), or after -c samples.  The YAML accepted is the block form
above: mappings, '- ' lists, quoted or plain scalars, '#' comments; anything
else (flow collections, anchors, multi-line strings) is an error that asks
for JSON.  The original's 'convert' and 'rename' keys are refused: use
tarcat -f 'new=old' on the output.  Two samples in a row with the same key
(sources often number their samples alike) are an error: --rekey gives new
keys.  --seed makes the mix reproducible.
Exit status: 0 ok, 1 the output could not be written, 2 bad spec, bad usage or
unreadable input."""


@command("Randomly mix data sources to one tar stream, as specified by a YAML (or JSON) file.", EXAMPLES, NOTES)
def tarmix_command(
    spec: Annotated[str, typer.Argument(metavar="SPEC", show_default=False,
                    help="the mix spec: a YAML or JSON file ('-' for stdin)")],
    output: Output = "-",
    count: Count = None,
    skip: Annotated[int, opt("--skip", metavar="N", parser=nonneg(),
                    help="skip the first N mixed samples")] = 0,
    shuffle: Annotated[Optional[int], opt("--shuffle", metavar="N", parser=nonneg(),
                       help="shuffle buffer for the mixed samples (default: the spec's 'shuffle')")] = None,
    seed: Seed = None,
    rekey: Annotated[Optional[str], opt("--rekey", metavar="FORMAT",
                     help="new keys from {index}, {key}, {basename}, {dirname}, {source}, e.g. '{index:09d}' "
                          "(sources often share key names)")] = None,
    eof: Annotated[bool, opt("--eof", hidden=True, help="accepted for compatibility (no effect)")] = False,
    output_mode: Annotated[Optional[str], opt("--output-mode", hidden=True,
                           help="accepted for compatibility (no effect)")] = None,
    group_size: GroupSize = None,
    strict: Strict = False,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
):
    return main(Args(locals()))


def main(args, prog="tarmix"):
    import tarproc as S
    from ..sources.open import open_source
    from ..stages.mix import distinct_neighbours, load_spec, mix_sources
    from ..sinks.output import open_sink

    rep = Reporter(prog, args.verbose, args.quiet, args.progress)
    refuse_overwriting_inputs([args.output], [args.spec], "it is the mix spec")
    stream = open_source(args.spec, decompress=False, settings=args.settings)
    try:
        chunks, size = [], 0
        while size <= 1 << 20:
            chunk = stream.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        stream.close()
    if len(data) > 1 << 20:
        from ..errors import UsageError

        raise UsageError(f"{args.spec}: a mix spec larger than 1 MiB")
    name = "stdin" if args.spec == "-" else args.spec
    spec = load_spec(data.decode("utf-8", "replace"), name, origin=args.spec)
    _refuse_output_among_shards(args.output, spec, args.settings.max_urls)
    stats = S.Stats()
    stages = []
    if args.skip:
        stages.append(S.skip(args.skip))
    if args.count is not None:
        stages.append(S.take(args.count))
    if args.rekey:
        stages.append(S.rekey(args.rekey))
    stages.append(distinct_neighbours("; give new keys with --rekey '{index:09d}'"))
    stages.append(progress_stage(rep, stats))
    bad = bad_shards_of(args, rep)
    mixed = mix_sources(spec, seed=args.seed, stats=stats, strict=args.strict, warn=rep.warn,
                        shuffle=args.shuffle, on_bad_shard=bad, settings=args.settings)
    with open_sink(args.output, group_size=group_size_of(args), settings=args.settings) as sink:
        writer = S.SampleWriter(sink, stats)
        for sample in S.pipeline(mixed, *stages):
            writer.write(sample)
        end_bad_shards(bad, rep, args, stats)
        writer.close()
    rep.done(stats)
    return 0


def _refuse_output_among_shards(output, spec, max_urls):
    """-o naming a shard of a source is refused: a mix is not an edited copy
    of its sources (it ends when one runs out), so the commit would destroy it."""
    import itertools

    from ..sources.shardlist import expand_urls

    for src in spec["sources"]:
        urls = itertools.islice(expand_urls([src["shards"]], globs=False), max_urls + 1)
        checked = refuse_overwriting_inputs([output], urls, "a mix does not keep its sources")
        if checked is urls:  # the output is not an existing local file: nothing to check
            return
        for _ in checked:
            pass


def entry():
    run("tarmix", tarmix_command)
