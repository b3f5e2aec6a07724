"""tarcreate (also tsv2tar): build a tar shard from a plan."""

from .base import make_parser, run, Reporter

EXAMPLES = """
tarcreate plan.tsv -o dataset.tar             # columns: __key__  @jpg  cls
tsv2tar -C images/ -k '%06d' plan.csv > dataset.tar
tarcreate files.txt -o dataset.tar.gz         # lines: 000001.jpg img/a.jpg
printf '0.txt text:hello\\n0.jpg file:a.jpg\\n' | tarcreate - > one.tar
tarcreate plan.txt -o out.tar                 # 0.png pipe:convert a.tif png:-
"""

NOTES = """\
Table plans (TSV/CSV; as tsv2tar): a header row of field names; '@name' columns
hold file paths whose bytes become field 'name', other columns hold the text of
their field; an optional __key__ column gives the keys, else -k numbers them.
Empty cells are left out.  The fields of a sample are written in sorted order.
Line plans (as the Go port's create): 'TARPATH SOURCE' per line, SOURCE is
text:TEXT, file:PATH, pipe:CMD or a path; members are written in plan order;
'#' lines and blank lines are ignored.
Every referenced file is checked before anything is written: a missing one is
an error naming the plan line, and no output is made.  Member names that are
absolute or contain '..' are refused.
Exit status: 0 ok, 1 a pipe: command failed (nothing written), 2 bad plan,
missing file or bad usage."""


def build_parser(prog="tarcreate"):
    p = make_parser(prog, "Build a tar shard from a plan (a TSV/CSV table or TARPATH SOURCE lines).",
                    EXAMPLES, NOTES)
    p.add_argument("plan", nargs="?", default="-", help="the plan file ('-' or nothing: stdin)")
    p.add_argument("-o", "--output", default="-", metavar="URL",
                   help="output URL; compression from the name (.tgz .tar.gz .tar.bz2 .tar.xz .tar.zst) "
                        "(default: stdout)")
    p.add_argument("-C", "--dir", default=None, metavar="DIR",
                   help="relative paths in the plan (and pipe: commands) are taken from DIR")
    p.add_argument("-f", "--delim", default=None, metavar="CHAR",
                   help="column delimiter of a table plan ('\\t' or 'tab' for tab; default: from the name "
                        "or the first line)")
    p.add_argument("-k", "--key", default="{index:09d}", metavar="FORMAT",
                   help="keys of table rows without a __key__ column: '{index:06d}', '%%06d', "
                        "'{record:09d}' (default {index:09d})")
    p.add_argument("--plan-format", choices=("auto", "table", "lines"), default="auto",
                   help="the plan's format (default: detected)")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per member on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="no warnings")
    return p


def main(argv, prog="tarcreate"):
    from ..create import read_plan, write_plan

    args = build_parser(prog).parse_args(argv)
    rep = Reporter(prog, args.verbose, args.quiet, False)
    items = read_plan(args.plan, args.plan_format, args.delim, args.key, args.dir)
    if not items:
        rep.info("the plan makes no members (writing an empty archive)")
    n = write_plan(items, args.output, args.dir,
                   on_item=(lambda item, size: rep.info(f"{item.name} ({size} bytes) from {item.where}"))
                   if args.verbose else None)
    rep.info(f"{n} members written")
    return 0


def entry():
    import os
    import sys

    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "tarcreate"
    prog = prog if prog in ("tarcreate", "tsv2tar") else "tarcreate"
    run(prog, lambda argv: main(argv, prog))
