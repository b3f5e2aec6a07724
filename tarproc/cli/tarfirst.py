"""tarfirst: write the raw bytes of the first matching field of a tar shard."""

from .base import add_inputs, add_strict, make_parser, open_inputs, run, Reporter

EXAMPLES = """
tarfirst small.tar > first.jpg                    # the first image of any usual type
tarfirst -f 'jpg;png' -S 'int(_.cls) == 3' small.tar > three.png
tarfirst -f json -n 5 data.tar                    # the 5th sample's JSON
tarfirst -S '_.__key__.endswith("n0142")' -o img.jpg data.tar
curl -sL https://host/shard-0000.tar | tarfirst -f jpg | display   # stops reading at the match
"""

NOTES = """\
-S/--select is a Python expression over the sample '_': fields as attributes
(_.cls) or items (_["seg.png"]), values are bytes (int(_.cls), float(_.x) work;
_.cls == "3" compares as text; _.json.json parses JSON).  A sample without a
field the expression uses does not match.  Reading stops at the match.
Exit status: 0 written, 1 nothing matched, 2 bad usage or unreadable input."""


def build_parser(prog="tarfirst"):
    from ..show import DEFAULT_FIRST_FIELDS

    p = make_parser(prog, "Write the raw bytes of the first sample field that matches.", EXAMPLES, NOTES)
    add_inputs(p)
    p.add_argument("-f", "--field", "--fields", dest="field", default=DEFAULT_FIRST_FIELDS, metavar="FIELDS",
                   help=f"fields to take, the first present wins (default: {DEFAULT_FIRST_FIELDS})")
    p.add_argument("-S", "--select", default=None, metavar="EXPR",
                   help="Python expression over the sample '_' that must be true")
    p.add_argument("-n", "--nth", type=int, default=1, metavar="N", help="take the N-th match (default 1)")
    p.add_argument("-s", "--skip", type=int, default=0, metavar="N", help="skip the first N samples")
    p.add_argument("-o", "--output", default="-", metavar="FILE",
                   help="write to FILE (appears complete or not at all) instead of stdout")
    add_strict(p)
    p.add_argument("-v", "--verbose", action="store_true", help="name the member written on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="no warnings")
    return p


def main(argv, prog="tarfirst"):
    import sys

    from .. import samples as S
    from ..errors import UsageError
    from ..show import find_match

    args = build_parser(prog).parse_args(argv)
    rep = Reporter(prog, args.verbose, args.quiet, False)
    if args.nth < 1 or args.skip < 0:
        raise UsageError("-n must be >= 1 and --skip >= 0")
    urls = open_inputs(args)
    samples = S.iter_samples(urls, strict=args.strict, warn=rep.warn)
    source = S.skip(args.skip)(samples) if args.skip else samples
    try:
        found = find_match(source, args.field, args.select, args.nth)
    finally:
        samples.close()  # closes the input: stop reading at the match
    if found is None:
        print(f"{prog}: no sample matched", file=sys.stderr)
        return 1
    key, field, data = found
    rep.info(f"{key}.{field} ({len(data)} bytes)")
    if args.output == "-":
        out = sys.stdout.buffer
        out.write(data)
        out.flush()
    else:
        from ..urls import open_sink

        with open_sink(args.output, compression=None) as sink:
            sink.write(data)
    return 0


def entry():
    run("tarfirst", main)
