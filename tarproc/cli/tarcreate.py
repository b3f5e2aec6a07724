"""tarcreate (also tsv2tar): build a tar shard from a plan."""

from typing import Annotated, List, Literal, Optional

import typer

from .base import (output_directory_exists, OUTPUT_HELP, Args, GroupSize, ProgressFlag, group_size_of, command, opt,
                   positive, run, Reporter)

EXAMPLES = """
tarcreate plan.tsv -o dataset.tar             # columns: __key__  @jpg  cls
tsv2tar -C images/ -k '%06d' plan.csv > dataset.tar
tarcreate files.txt -o dataset.tar.gz         # lines: 000001.jpg img/a.jpg
printf '0.txt text:hello\\n0.jpg file:a.jpg\\n' | tarcreate - > one.tar
tarcreate plan.txt -o out.tar                 # 0.png pipe:convert a.tif png:-
tarcreate --tree images/ --tree annotations/trimaps/:trimap --key base --require jpg,trimap.png -o pets.tar
tarcreate train.parquet -o train.tar          # a row per sample: __key__, binary and text columns
"""

NOTES = """\
Table plans (TSV/CSV; as tsv2tar): a header row of field names; '@name' columns
hold file paths whose bytes become field 'name', other columns hold the text of
their field; an optional __key__ column gives the keys, else -k numbers them.
Empty cells are left out.  The fields of a sample are written in sorted order.
Line plans (as the Go port's create): 'TARPATH SOURCE' per line, SOURCE is
text:TEXT, file:PATH, pipe:CMD or a path; members are written in plan order;
'#' lines and blank lines are ignored.
Parquet tables (a name ending in .parquet or a file starting with PAR1; needs
pyarrow: pip install 'tarproc[parquet]'): a row per sample, a column per field
(binary as is, strings as UTF-8, numbers as text, lists and structs as JSON,
'@name' columns of paths or URLs fetched; null: no field), read in batches.
Every referenced file is checked before anything is written: a missing one is
an error naming the plan line, and no output is made.  Member names that are
absolute or contain '..' are refused.
Trees (--tree DIR[:PREFIX], s3://BUCKET/PREFIX/, gs://...): every file is a
field of the sample its --key rule names (path: directories and the name up to
its first dot, below the tree's root; base: the name up to its first dot; or a
regex with a group 'key'), PREFIX.FIELD for a DIR:PREFIX tree; samples in key
order (as tarsort), checked whole before anything is written.  Hidden files,
files without an extension, links to directories and special files are left
out with a warning; links to files are followed; see docs/tarcreate.md.
Exit status: 0 ok, 1 a pipe: command failed (nothing written), 2 bad plan,
missing file or bad usage."""


@command("Create a tar file from a plan (a TSV/CSV table, a Parquet table or TARPATH SOURCE lines) or from "
         "trees of files (--tree).", EXAMPLES, NOTES)
def tarcreate_command(
    plan: Annotated[str, typer.Argument(metavar="[PLAN]", show_default=False,
                    help="the plan file ('-' or nothing: stdin)")] = "-",
    output: Annotated[str, opt("-o", "--output", metavar="URL", help=OUTPUT_HELP, callback=output_directory_exists)] = "-",
    group_size: GroupSize = None,
    dir: Annotated[Optional[str], opt("-C", "--dir", metavar="DIR",
                   help="relative paths in the plan (and pipe: commands) are taken from DIR")] = None,
    delim: Annotated[Optional[str], opt("-f", "--delim", metavar="CHAR",
                     help="column delimiter of a table plan ('\\t' or 'tab' for tab; default: from the name or "
                          "the first line)")] = None,
    key: Annotated[str, opt("-k", "--key", metavar="FORMAT",
                   help="keys of table rows without a __key__ column: '{index:06d}', '%06d', '{record:09d}' "
                        "(default {index:09d}); with --tree, the key rule: path, base or a regex with a group "
                        "'key' (default path)")] = "{index:09d}",
    plan_format: Annotated[Literal["auto", "table", "lines", "parquet"], opt(
        "--plan-format", help="the plan's format (default: detected)")] = "auto",
    tree: Annotated[Optional[List[str]], opt("--tree", metavar="DIR[:PREFIX]",
                    help="make samples of the files below DIR (or an s3:// or gs:// prefix), keyed by --key; "
                         "DIR:PREFIX names its fields PREFIX.FIELD; repeat to join trees")] = None,
    require: Annotated[Optional[str], opt("--require", metavar="FIELDS",
                       help="with --tree: fields every sample must have, 'jpg,trimap.png'")] = None,
    missing: Annotated[Literal["stop", "skip", "keep"], opt(
        "--missing", metavar="stop|skip|keep",
        help="with --require, a sample missing a field: stop (exit 2, nothing written), skip (leave it out, "
             "warn) or keep (default: stop)")] = "stop",
    dry_run: Annotated[bool, opt("--dry-run", help="with --tree: list the samples as a table plan (__key__, "
                                                   "@FIELD paths) on stdout; no file is read")] = False,
    parallel: Annotated[int, opt("-p", "--parallel", metavar="N", parser=positive(),
                        help="with a bucket --tree: objects fetched at once (default: 4)")] = 4,
    max_size: Annotated[Optional[str], opt("-s", "--max-size", metavar="BYTES",
                        help="with --tree: write shards of at most BYTES (100MB, 1GiB) named by -o "
                             "'pets-%06d.tar', as tarsplit -s does")] = None,
    max_count: Annotated[Optional[int], opt("-n", "--max-count", metavar="N", parser=positive(),
                         help="with --tree: write shards of at most N samples named by -o, as tarsplit -n")] = None,
    progress: ProgressFlag = None,
    verbose: Annotated[bool, opt("-v", "--verbose", help="one line per member on stderr")] = False,
    quiet: Annotated[bool, opt("-q", "--quiet", help="no warnings")] = False,
):
    args = Args(locals())
    return main(args, args.prog)


def main(args, prog="tarcreate"):
    if args.tree:
        from .trees import main_trees

        return main_trees(args, prog)
    if args.require or args.dry_run or args.missing != "stop" or args.max_size or args.max_count:
        from ..errors import UsageError

        raise UsageError("--require, --missing, --dry-run, -s and -n go with --tree")
    from ..sinks.plan import write_plan
    from ..sources.create import read_plan

    rep = Reporter(prog, args.verbose, args.quiet, False)
    from .base import note_terminal

    note_terminal(prog, [args.plan], "the plan")
    if args.plan_format == "parquet" or (args.plan_format == "auto" and _is_parquet(args.plan)):
        return parquet_main(args, rep)
    if args.plan != "-":
        from .guards import refuse_overwriting_inputs, refuse_reading_stdout

        refuse_reading_stdout([args.plan])
        refuse_overwriting_inputs([args.output], [args.plan], "the plan")
    items = read_plan(args.plan, args.plan_format, args.delim, args.key, args.dir,
                      max_plan=args.settings.max_plan, warn=rep.warn)
    if not items:
        rep.warn("the plan makes no members: the archive is empty")
    n = write_plan(items, args.output, args.dir, group_size=group_size_of(args), settings=args.settings,
                   on_item=(lambda item, size: rep.info(f"{item.name} ({size} bytes) from {item.where}"))
                   if args.verbose else None)
    rep.info(f"{n} members written")
    return 0


def _is_parquet(plan):
    import sys

    from ..sources.parquet import looks_parquet

    if plan != "-":
        return looks_parquet(plan)
    if sys.stdin.isatty():  # a plan typed in: never Parquet, and a peek would take its first Ctrl-D
        return False
    try:
        return looks_parquet(plan, sys.stdin.buffer.peek(4)[:4])
    except (OSError, ValueError):
        return False


def parquet_main(args, rep):
    """A Parquet table to samples (sources/parquet.py, sinks/parquet.py)."""
    import os

    from ..sinks.parquet import table_to_tar
    from ..sources.parquet import ParquetTable
    from .guards import refuse_overwriting_inputs, refuse_reading_stdout

    if args.plan != "-":
        refuse_reading_stdout([args.plan])
        refuse_overwriting_inputs([args.output], [args.plan], "the table")
    from ..errors import UsageError

    if args.dir is not None and not os.path.isdir(args.dir):
        raise UsageError(f"-C {args.dir}: not a directory")
    if args.delim is not None:
        raise UsageError("-f/--delim is for TSV/CSV plans, not a Parquet table")
    table = ParquetTable(args.plan, args.key, args.dir, warn=rep.warn, settings=args.settings)
    try:
        n = table_to_tar(table, args.output, group_size_of(args), args.settings)
    finally:
        table.close()
    if not n:
        rep.warn(f"{table.name}: no sample: the archive is empty")
    rep.info(f"{n} samples written")
    return 0


def entry():
    import os
    import sys

    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "tarcreate"
    prog = prog if prog in ("tarcreate", "tsv2tar") else "tarcreate"
    run(prog, tarcreate_command)
