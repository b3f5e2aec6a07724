"""tarjoin: join shard sets (and tables) that share keys, field by field."""

from typing import Annotated, List, Literal, Optional

import typer

from .base import (output_directory_exists, Args, BlobThreshold, BraceExpand, ProgressFlag, Quiet, StartMethod, Strict, Verbose, command,
                   opt, parse_size, positive, progress_stage, read_inputs, refuse_terminal, run, Reporter,
                   spooler_of)

EXAMPLES = """
tarjoin images.tar captions.tar -o joined.tar             # same keys, same order: one pass
tarjoin 'img-{0000..0009}.tar' 'emb-{0000..0009}.tar' > joined.tar
tarjoin data.tar --table captions.jsonl -o captioned.tar  # a table's columns as fields
tarjoin data.tar --table clip.npy -r B:npy=clip.npy -o with-emb.tar   # a row per sample
tarjoin lr.tar hr.tar -r B:jpg=jpg_hr -o both.tar         # a field in both: rename one
tarjoin --how left data.tar labels.tar -o out.tar         # keep samples labels.tar lacks
tarjoin --order key shuffled-a.tar shuffled-b.tar -o by-key.tar   # any order: sort-merge
tarjoin -p 4 'a-{0000..0009}.tar' 'b-{0000..0009}.tar' -o 'ab-{0000..0009}.tar'   # pair by pair
kujob -j 8 -s '{0000..0009}' -- tarjoin a-{}.tar b-{}.tar -o ab-{}.tar   # a job per pair (--k8s, --slurm)
tarcat -f txt data.tar -o txt.tar && tarproc -c 'tr a-z A-Z < sample.txt > sample.up; rm sample.txt' \
    txt.tar -o up.tar && tarjoin data.tar up.tar -o data-up.tar   # split a column, compute, join back
"""

NOTES = """
Inputs are named A, B, C, ... in order, then the tables (--table) by the next letters.
A leads: the output has A's keys, order and metadata. --how: strict (default: every
input has exactly A's keys; a missing or extra key stops with one line naming the key
and its shard), inner (keys every input has), left (every sample of A). A field in two
inputs is refused unless renamed (-r B:jpg=jpg_hr). --order input (default): aligned
inputs, one streaming pass, flat memory; an input may lack samples (left, inner) but
its keys must come in A's order; a key that comes twice in each is matched in turn.
--order key: any order, each input sorted within --memory (tarsort's external sort),
output in key order; a key twice in one input is an error. With -o naming one output
per pair ('ab-{0000..0099}.tar'), shard i of every input is joined into output i;
-p N joins N pairs at once; each output is committed when its pair succeeds
(a keyed table is read once and shared by the pairs; a .npy table is refused there).
exit status: 0 ok, 1 an output could not be written, 2 bad usage, unreadable input,
a missing or extra key (strict), a field in two inputs, a duplicate key (--order key).
"""


@command("Join the samples of shard sets (and tables) that share keys into one shard set.", EXAMPLES, NOTES)
def tarjoin_command(
    inputs: Annotated[Optional[List[str]], typer.Argument(
        metavar="[URL]...", show_default=False,
        help="the inputs A, B, ...: each a shard set, as a path, '-', pipe:CMD, http(s)://, gs://, s3:// or "
             "a brace pattern like 'b-{0000..0146}.tar' (default: stdin)")] = None,
    output: Annotated[str, opt("-o", "--output", metavar="URL", callback=output_directory_exists,
                      help="output URL (default: stdout); a brace pattern naming one output per shard of "
                           "each input joins shard by shard")] = "-",
    table: Annotated[Optional[List[str]], opt("--table", metavar="FILE",
                     help="a TSV/CSV/JSON-lines table with a __key__ column (its columns become fields), "
                          "or a .npy array (row i becomes field npy of A's i-th sample); repeatable")] = None,
    how: Annotated[Literal["strict", "inner", "left"], opt(
        "--how", help="strict (default): the same keys in every input; inner: keys every input has; "
                      "left: every sample of A")] = "strict",
    order: Annotated[Literal["input", "key"], opt(
        "--order", help="input (default): aligned inputs, one streaming pass; key: any order, sort-merge "
                        "within --memory, output in key order")] = "input",
    rename: Annotated[Optional[List[str]], opt("-r", "--rename", metavar="INPUT:FIELD=NEW",
                      help="rename fields of one input: 'B:jpg=jpg_hr', 'C:txt=caption,json=meta'; "
                           "repeatable")] = None,
    parallel: Annotated[int, opt("-p", "--parallel", metavar="N", parser=positive(),
                        help="with one output per pair: join N pairs at once, in worker processes "
                             "(default: 1)")] = 1,
    memory: Annotated[str, opt("--memory", metavar="BYTES",
                      help="memory for tables and for --order key's sort before spilling: 64MB, 1GiB "
                           "(default: 512MB)")] = "512MB",
    tmpdir: Annotated[Optional[str], opt("--tmpdir", "-t", metavar="DIR",
                      help="directory for sort runs and spool files (default: $TMPDIR or /tmp)")] = None,
    start_method: StartMethod = None,
    strict: Strict = False,
    blob_threshold: BlobThreshold = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    progress: ProgressFlag = None,
    braceexpand: BraceExpand = False,
):
    import os

    import tarproc as S
    from ..core.limits import bounded_list, shown
    from ..errors import UsageError
    from ..sinks.output import open_sink
    from ..sources.shardlist import expand_urls
    from ..jobs.joinshards import join_shards
    from ..stages.join import input_names, join_samples, parse_renames
    from .guards import refuse_one_stream_twice, refuse_overwriting_inputs

    args = Args(locals())
    rep = Reporter("tarjoin", args.verbose, args.quiet, args.progress)
    memory = parse_size(args.memory)
    if memory < 1:
        raise UsageError("--memory must be positive")
    if args.tmpdir is not None and not os.path.isdir(args.tmpdir):
        raise UsageError(f"--tmpdir {shown(args.tmpdir)}: no such directory")
    patterns = list(args.inputs or ["-"])
    tables = list(args.table or [])
    names = input_names(len(patterns) + len(tables))
    renames = parse_renames(args.rename, names)
    if patterns.count("-") > 1:
        raise UsageError("only one input can be stdin ('-')")
    refuse_one_stream_twice(patterns, "a join reads its inputs side by side")
    for t in tables:
        if t == "-" or not os.path.isfile(t):
            raise UsageError(f"--table {shown(t)}: not a file (a table is read from a local file)")
    outputs = bounded_list(expand_urls([args.output], globs=False), "the outputs", max_urls=args.settings.max_urls) if "{" in args.output else [args.output]
    if not outputs:
        raise UsageError(f"-o {shown(args.output)}: names no output")
    pairwise = len(outputs) > 1
    output = outputs[0]
    if args.parallel > 1 and not pairwise:
        raise UsageError("-p joins shard by shard: give -o a brace pattern with one output per shard "
                         "of each input (e.g. -o 'ab-{0000..0099}.tar')")
    shard_lists = []
    for p in patterns:
        if pairwise:
            urls = bounded_list(expand_urls([p]), "the shard list", max_urls=args.settings.max_urls)
        else:
            urls = expand_urls([p])
        shard_lists.append(refuse_overwriting_inputs(outputs, urls, "a join keeps its inputs"))
    refuse_overwriting_inputs(outputs, tables, "a join keeps its tables")
    refuse_terminal("tarjoin", patterns)

    if pairwise:
        from ..sources.open import scheme_of

        same = [os.path.realpath(o) if scheme_of(o) == "file" else o for o in outputs]  # (x.tar, ./x.tar)
        if len(set(same)) != len(same):
            raise UsageError(f"-o {shown(args.output)}: names one output twice")
        if args.order == "key" and args.parallel > 1:
            memory = max(1, memory // args.parallel)

        def done(i, written):
            rep.info(f"{outputs[i]}: {written} samples")

        written = join_shards(shard_lists, outputs, tables, how=args.how, order=args.order, rename=renames,
                              parallel=args.parallel, memory=memory, tmpdir=args.tmpdir, strict=args.strict,
                              blob_threshold=parse_size(args.blob_threshold) if args.blob_threshold
                              else args.settings.blob_threshold,
                              spool_dir=args.tmpdir, start_method=args.start_method, done=done, warn=rep.warn,
                              settings=args.settings)
        rep.info(f"{len(outputs)} outputs, {written} samples")
        if not written and args.how == "inner":
            rep.warn("no key is in every input (--how inner): the outputs are empty")
        return 0

    stats = S.Stats()
    pass_through = args.order == "input"
    spooler = spooler_of(args, pass_through=pass_through)
    raw = args.order == "input"
    streams = [read_inputs(args, rep, stats, shard_lists[0], spooler=spooler, raw=raw)]
    for urls in shard_lists[1:]:
        streams.append(S.iter_samples(urls, S.Stats(), strict=args.strict, warn=rep.warn, stall=rep.stall,
                                      spooler=spooler, raw=raw, settings=args.settings))
    joined = join_samples(streams, tables, how=args.how, order=args.order, rename=renames, memory=memory,
                          tmpdir=args.tmpdir, warn=rep.warn, settings=args.settings)
    import contextlib

    with contextlib.closing(joined), open_sink(output, stall=rep.stall, settings=args.settings) as sink:
        writer = S.SampleWriter(sink, stats)
        for sample in progress_stage(rep, stats)(joined):
            writer.write(sample)
        writer.close()
    if stats.read and not stats.written and args.how == "inner":  # an empty output is a result: say why
        rep.warn(f"no key is in every input (--how inner): none of the {stats.read} samples of A joined, the "
                 "output is empty")
    rep.done(stats)
    return 0


def entry():
    run("tarjoin", tarjoin_command)
