"""tarfirst: write the raw bytes of the first matching field of a tar shard."""

from typing import Annotated, Optional

from .base import output_directory_exists, Retries, resume_of
from .base import MaxBadShards, OnBadShard, bad_shards_of, end_bad_shards
from .base import (BlobThreshold, TmpDir, spooler_of, Args, BraceExpand, FileList, Inputs, Strict, command,
                   nonneg, open_inputs, opt, positive, run, Reporter)
from .fieldcheck import FieldCheck

from ..sinks.show import DEFAULT_FIRST_FIELDS as DEFAULT_FIELDS

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


@command("Dump the first matching file from a tar file: the raw bytes of the first sample field that matches.", EXAMPLES, NOTES)
def tarfirst_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    field: Annotated[str, opt("-f", "--field", "--fields", metavar="FIELDS",
                     help=f"fields to take, the first present wins (default: {DEFAULT_FIELDS})")] = DEFAULT_FIELDS,
    select: Annotated[Optional[str], opt("-S", "--select", metavar="EXPR",
                      help="Python expression over the sample '_' that must be true")] = None,
    nth: Annotated[int, opt("-n", "--nth", metavar="N", parser=positive(),
                   help="take the N-th match (default 1)")] = 1,
    skip: Annotated[int, opt("-s", "--skip", metavar="N", parser=nonneg(), help="skip the first N samples")] = 0,
    output: Annotated[str, opt("-o", "--output", metavar="FILE", callback=output_directory_exists,
                      help="write to FILE (appears complete or not at all) instead of stdout")] = "-",
    strict: Strict = False,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    retries: Retries = None,
    blob_threshold: BlobThreshold = None,
    tmpdir: TmpDir = None,
    verbose: Annotated[bool, opt("-v", "--verbose", help="name the member written on stderr")] = False,
    quiet: Annotated[bool, opt("-q", "--quiet", help="no warnings")] = False,
    braceexpand: BraceExpand = False,
):
    return main(Args(locals()))


def main(args, prog="tarfirst"):
    import sys

    import tarproc as S
    from ..core.limits import safe_text
    from ..sinks.show import find_match

    from .guards import refuse_overwriting_inputs

    rep = Reporter(prog, args.verbose, args.quiet, False)
    # -o naming an input (first.jpg meant) would replace a shard by one field
    urls = refuse_overwriting_inputs([args.output], open_inputs(args), "tarfirst writes one field")
    spooler = spooler_of(args)
    bad = bad_shards_of(args, rep, spooler)
    samples = S.iter_samples(urls, strict=args.strict, warn=rep.warn, spooler=spooler, on_bad_shard=bad,
                             settings=args.settings, **resume_of(args))
    source = S.skip(args.skip)(samples) if args.skip else samples
    check = FieldCheck(rep, args.field)
    misses = {}  # what -S could not find, counted
    try:
        found = find_match(check.before(source), args.field, args.select, args.nth,
                           json_depth=args.settings.json_depth, misses=misses)
    finally:
        samples.close()  # closes the input: stop reading at the match
    end_bad_shards(bad, rep, args)  # those met before the match (or all, when none matched)
    if found is None:
        wanted = {c for _n, cands in S.parse_fields(args.field) for c in cands}
        why = f" (-f {args.field!r}: none of the {check.n_in} samples has these fields; {check._have()})" \
            if check.n_in and not wanted & check.names else ""
        if not why and misses:  # -S used what the samples do not have: say what
            n = check.n_in
            found_not = "; ".join(f"{what} in {count} of the {n} sample{'s' * (n != 1)}"
                                  for what, count in misses.items())
            why = f" (-S: {found_not}; {check._have()})"
        print(safe_text(f"{prog}: no sample matched{why}", lines=True), file=sys.stderr)
        return 1
    key, field, data = found
    rep.info(f"{key}.{field} ({len(data)} bytes)")
    if args.output == "-" and sys.stdout.isatty():
        _show_on_terminal(prog, data)
    elif args.output == "-":
        out = sys.stdout.buffer
        if hasattr(data, "copy_to"):  # a large field (Blob): streamed
            data.copy_to(out)
        else:
            out.write(data)
        out.flush()
    else:
        from ..sinks.output import open_sink

        with open_sink(args.output, compression=None, settings=args.settings) as sink:
            data.copy_to(sink) if hasattr(data, "copy_to") else sink.write(data)
    return 0


def _show_on_terminal(prog, data):
    """A field written to a terminal is shown to a person: text with its
    controls escaped (no escape sequence or OSC 52 clipboard write of a
    value reaches the terminal, as ``cat -v``); binary data or more than
    1 MiB is refused, as tarcat refuses a tar (exit 2).  In a pipe or a file
    the bytes are written as they are."""
    import sys

    from ..core import limits
    from ..errors import UsageError

    size = limits.size_of(data)
    head = limits.head(data, 1 << 20)
    binary = b"\0" in head
    if not binary:
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as e:
            binary = e.start < len(head) - 3
    if binary or size > len(head):
        raise UsageError(f"refusing to write {size:,} bytes of {'binary data' if binary else 'text'} to a terminal "
                         f"(use -o FILE or a pipe)")
    sys.stdout.write(limits.safe_text(head, limit=1 << 21, lines=True))
    sys.stdout.flush()


def entry():
    run("tarfirst", tarfirst_command)
