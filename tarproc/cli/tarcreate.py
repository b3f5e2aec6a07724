"""tarcreate (also tsv2tar): build a tar shard from a plan."""

from typing import Annotated, Literal, Optional

import typer

from .base import OUTPUT_HELP, Args, GroupSize, group_size_of, command, opt, run, Reporter

EXAMPLES = """
tarcreate plan.tsv -o dataset.tar             # columns: __key__  @jpg  cls
tsv2tar -C images/ -k '%06d' plan.csv > dataset.tar
tarcreate files.txt -o dataset.tar.gz         # lines: 000001.jpg img/a.jpg
printf '0.txt text:hello\\n0.jpg file:a.jpg\\n' | tarcreate - > one.tar
tarcreate plan.txt -o out.tar                 # 0.png pipe:convert a.tif png:-
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
Exit status: 0 ok, 1 a pipe: command failed (nothing written), 2 bad plan,
missing file or bad usage."""


@command("Create a tar file from a plan (a TSV/CSV table or TARPATH SOURCE lines).", EXAMPLES, NOTES)
def tarcreate_command(
    plan: Annotated[str, typer.Argument(metavar="[PLAN]", show_default=False,
                    help="the plan file ('-' or nothing: stdin)")] = "-",
    output: Annotated[str, opt("-o", "--output", metavar="URL", help=OUTPUT_HELP)] = "-",
    group_size: GroupSize = None,
    dir: Annotated[Optional[str], opt("-C", "--dir", metavar="DIR",
                   help="relative paths in the plan (and pipe: commands) are taken from DIR")] = None,
    delim: Annotated[Optional[str], opt("-f", "--delim", metavar="CHAR",
                     help="column delimiter of a table plan ('\\t' or 'tab' for tab; default: from the name or "
                          "the first line)")] = None,
    key: Annotated[str, opt("-k", "--key", metavar="FORMAT",
                   help="keys of table rows without a __key__ column: '{index:06d}', '%06d', '{record:09d}' "
                        "(default {index:09d})")] = "{index:09d}",
    plan_format: Annotated[Literal["auto", "table", "lines", "parquet"], opt(
        "--plan-format", help="the plan's format (default: detected)")] = "auto",
    verbose: Annotated[bool, opt("-v", "--verbose", help="one line per member on stderr")] = False,
    quiet: Annotated[bool, opt("-q", "--quiet", help="no warnings")] = False,
):
    args = Args(locals())
    return main(args, args.prog)


def main(args, prog="tarcreate"):
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
                      max_plan=args.settings.max_plan)
    if not items:
        rep.info("the plan makes no members (writing an empty archive)")
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
    rep.info(f"{n} samples written")
    return 0


def entry():
    import os
    import sys

    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "tarcreate"
    prog = prog if prog in ("tarcreate", "tsv2tar") else "tarcreate"
    run(prog, tarcreate_command)
