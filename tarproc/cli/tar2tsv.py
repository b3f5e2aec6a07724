"""tar2tsv: one table row per sample (TSV, CSV or JSON lines)."""

from .base import add_inputs, add_strict, make_parser, read_inputs, run, Reporter, selection_stages

EXAMPLES = """
tar2tsv -f cls small.tar                      # __key__ and cls, with a header row
tar2tsv -f 'cls json.label jpg;png' data.tar  # a value inside JSON; image size in bytes
tar2tsv -f jpg --hash --nokey --noheader data.tar | sort | uniq -d   # duplicate images
tar2tsv -c 100 --format csv data.tar > first100.csv
tar2tsv --format jsonl -f 'label=json.label' 'shard-{0000..0009}.tar' | head
"""

NOTES = """\
Text fields are written as UTF-8 text; binary fields (images, arrays, anything
that is not UTF-8) as their size in bytes, or their sha256 with --hash.
'json.label' addresses a value inside the JSON field 'json' (nested: json.a.b,
list items: json.boxes.0).  A missing field is an empty cell.  TSV escapes
backslash, tab, newline and CR as \\\\ \\t \\n \\r so every row is one line.
Without -f the columns are the fields of the first sample.
Exit status: 0 ok, 2 bad usage or unreadable input."""


def build_parser(prog="tar2tsv"):
    p = make_parser(prog, "Write one table row per sample: the key and chosen fields.", EXAMPLES, NOTES)
    add_inputs(p)
    p.add_argument("-f", "--fields", default=None, metavar="SPEC",
                   help="columns: 'cls json.label'; 'jpg;png' takes the first present; 'img=jpg;png' "
                        "names the column (default: the fields of the first sample)")
    p.add_argument("-c", "--count", type=int, default=None, metavar="N", help="stop after N samples")
    p.add_argument("--skip", type=int, default=0, metavar="N", help="skip the first N samples")
    p.add_argument("-s", "--slice", default=None, metavar="SLICE",
                   help="samples by index, as the original tar2tsv: 'STOP', 'START,STOP[,STEP]' "
                        "or 'START:STOP[:STEP]'")
    p.add_argument("--nokey", action="store_true", help="no __key__ column")
    p.add_argument("--noheader", action="store_true", help="no header row")
    p.add_argument("--hash", action="store_true", help="binary fields as their sha256 instead of their size")
    p.add_argument("--format", choices=("tsv", "csv", "jsonl"), default="tsv", help="output format (default tsv)")
    add_strict(p)
    p.add_argument("-v", "--verbose", action="store_true", help="report inputs and a summary on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="no warnings")
    return p


def parse_old_slice(text):
    """The original's ``-s``: ``"10"`` (stop), ``"5,10"``, ``"5,10,2"``, or
    the ``START:STOP:STEP`` form."""
    from ..errors import UsageError
    from ..samples import parse_slice

    if ":" in text:
        return parse_slice(text)
    parts = [p.strip() for p in text.split(",")]
    try:
        nums = [int(p) if p else None for p in parts]
    except ValueError:
        raise UsageError(f"bad slice {text!r}: expected STOP or START,STOP[,STEP]") from None
    if not 1 <= len(nums) <= 3 or any(n is not None and n < 0 for n in nums):
        raise UsageError(f"bad slice {text!r}: expected STOP or START,STOP[,STEP] (numbers >= 0)")
    if len(nums) == 1:
        return slice(None, nums[0])
    if len(nums) == 3 and nums[2] == 0:
        raise UsageError(f"bad slice {text!r}: the step must be > 0")
    return slice(*nums)


def main(argv, prog="tar2tsv"):
    import sys

    from .. import samples as S
    from .. import table as T
    from ..errors import UsageError

    args = build_parser(prog).parse_args(argv)
    rep = Reporter(prog, args.verbose, args.quiet, False)
    if (args.count is not None and args.count < 0) or args.skip < 0:
        raise UsageError("--count and --skip must be >= 0")
    columns = T.parse_columns(args.fields) if args.fields else None
    stats = S.Stats()
    stages = selection_stages(args, slice_parser=parse_old_slice)
    out = sys.stdout
    fmt = args.format
    header_done = args.noheader or fmt == "jsonl"
    if not header_done and columns is not None:
        names = (["__key__"] if not args.nokey else []) + [c.name for c in columns]
        out.write(T.format_row(names, fmt))
        header_done = True
    n = 0
    for names, values in T.rows(S.pipeline(read_inputs(args, rep, stats), *stages), columns, key=not args.nokey,
                                hash=args.hash, native=fmt == "jsonl"):
        if not header_done:
            out.write(T.format_row(names, fmt))
            header_done = True
        out.write(T.format_row(values, fmt, names))
        n += 1
        if n % 256 == 0:
            out.flush()
    out.flush()
    stats.written = n
    rep.done(stats)  # "written" counts rows
    return 0


def entry():
    run("tar2tsv", main)
