"""tarcheck: check tar shards for what breaks training pipelines."""

from typing import Annotated, Optional

from ..core.limits import safe_text
from .base import Args, BraceExpand, FileList, Inputs, Retries, command, open_inputs, opt, positive, resume_of, run

EXAMPLES = """
tarcheck data.tar                              # summary and problems; exit 1 if any
tarcheck 'shard-{0000..0146}.tar'              # per shard and in total, keys across shards
tarcheck --json shards/*.tar | jq .total       # machine-readable report
curl -sL https://host/shard-0000.tar | tarcheck
tarcheck -q data.tar && echo clean             # only the exit status (and problems)
tarcheck --index index.json -p 4               # shards against their index: size, sha256
"""

NOTES = """\
Reported as problems: keys that come back after other keys (a sample split
apart), the same key in more than one shard, fields repeated inside a sample,
samples missing fields that most samples have, members readers skip (no
extension, links, devices, FIFOs), names that are not UTF-8 or escape a
directory, empty files, shards cut off before the end-of-archive marker, and
shards without samples.  Each shard and the total get a summary: samples,
members, bytes, compression, size on disk, fields with counts and bytes.
A shard that cannot be opened or is damaged is reported as the problem
'unreadable' (and its error on stderr: one line naming the shard and byte
offset); the other shards are still checked.
With --index INDEX, the shards the index names are checked against it
instead: their size and, when the index has one (tarindex --checksum), the
SHA-256 of their bytes; one line per bad shard on stdout.
Exit status: 0 clean, 1 problems found (with --index: a shard differs from
its index), 2 bad usage or a damaged/unreadable shard (after checking all
the others)."""


@command("Check tar shards: split samples, duplicate keys, missing fields, skipped members.", EXAMPLES, NOTES)
def tarcheck_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    json: Annotated[bool, opt("--json", help="write the report as JSON on stdout")] = False,
    majority: Annotated[float, opt("--majority", metavar="FRACTION",
                        help="a field counts as expected when more than this fraction of samples have it "
                             "(default 0.5)")] = 0.5,
    strict: Annotated[bool, opt("--strict", help="a shard without the end-of-archive marker is an error "
                                                 "(exit 2), not a problem")] = False,
    retries: Retries = None,
    quiet: Annotated[bool, opt("-q", "--quiet", help="print only the problems")] = False,
    verbose: Annotated[bool, opt("-v", "--verbose",
                       help="accepted for symmetry (the report is verbose)")] = False,
    index: Annotated[Optional[str], opt("--index", metavar="INDEX",
                     help="check the shards INDEX names against it (size, and sha256 when it has one)")] = None,
    parallel: Annotated[int, opt("-p", "--parallel", metavar="N", parser=positive(),
                        help="with --index: check N shards at once")] = 1,
    braceexpand: BraceExpand = False,
):
    return main(Args(locals()))


def main(args, prog="tarcheck"):
    import json
    import sys

    from ..sinks import check
    from ..errors import UsageError

    if not 0.0 <= args.majority < 1.0:
        raise UsageError("--majority must be in [0, 1)")
    if getattr(args, "index", None) is not None:
        return check_index(args, prog)
    urls = open_inputs(args)
    out = sys.stdout

    unreadable = []

    def on_shard(rep):
        for p in rep["problems"]:
            if p["kind"] == "unreadable":  # the error line on stderr too, as for any unreadable input
                unreadable.append(rep["url"])
                print(f"{prog}: {safe_text(p['examples'][0], lines=True)}", file=sys.stderr, flush=True)
        if args.json:  # streamed: the shards' reports are not kept
            out.write(("" if first[0] else ",\n") + _indent(json.dumps(rep, indent=2, ensure_ascii=False), 4))
            first[0] = False
            out.flush()
            return
        if args.quiet:
            lines = [f"{rep['url']}:"] + [check.format_problem(p) for p in rep["problems"]] if rep["problems"] else []
        else:
            lines = check.format_shard(rep)
        if lines:
            out.write("\n".join(lines) + "\n")
            out.flush()

    first = [True]
    if args.json:
        out.write('{\n  "shards": [\n')
    report = check.check_shards(urls, args.majority, args.strict, on_shard, keep=False, settings=args.settings,
                                **resume_of(args))
    if args.json:
        out.write(f'\n  ],\n  "total": {_indent(json.dumps(report["total"], indent=2, ensure_ascii=False), 2)[2:]},'
                  f'\n  "ok": {json.dumps(report["ok"])}\n}}\n')
    elif args.quiet:
        if report["total"]["problems"]:
            out.write("\n".join(["total:"] + [check.format_problem(p) for p in report["total"]["problems"]]) + "\n")
    else:
        out.write("\n".join(check.format_total(report)) + "\n")
    return 0 if report["ok"] else 2 if unreadable else 1


def check_index(args, prog):
    """``tarcheck --index``: every shard of the index against its entry."""
    import json
    import sys

    from ..core.limits import shorten
    from ..errors import UsageError
    from ..sinks.verify import verify_index

    if args.inputs or args.filelist:
        raise UsageError("--index checks the shards the index names: give no shards with it")
    out = sys.stdout
    counts = {"bad": 0, "unreadable": 0, "sha256": 0, "size": 0, "nothing": 0}

    def on_shard(rep):
        if rep["unreadable"]:
            counts["unreadable"] += 1
            print(f"{prog}: {rep['problem']}", file=sys.stderr, flush=True)
        elif not rep["ok"]:
            counts["bad"] += 1
        else:
            counts[rep["checked"]] += 1
        if args.json:
            out.write(json.dumps(rep, ensure_ascii=False) + "\n")
        elif not rep["ok"]:
            out.write(f"{shorten(rep['url'])}: {rep['problem'] if not rep['unreadable'] else 'unreadable'}\n")
        out.flush()

    reports = verify_index(args.index, parallel=args.parallel, on_shard=on_shard, settings=args.settings)
    if not args.json and not args.quiet:
        bad = counts["bad"] + counts["unreadable"]
        line = f"{args.index}: {len(reports)} shards, {bad} bad" if bad else f"{args.index}: {len(reports)} shards ok"
        how = [f"{counts[k]} by {k}" for k in ("sha256", "size") if counts[k]]
        if counts["nothing"]:
            how.append(f"{counts['nothing']} with nothing to check (no size or sha256 in the index)")
        out.write(line + (f" ({', '.join(how)})" if how else "") + "\n")
    return 2 if counts["unreadable"] else 1 if counts["bad"] else 0


def _indent(text, n):
    pad = " " * n
    return "\n".join(pad + line for line in text.split("\n"))


def entry():
    run("tarcheck", tarcheck_command)
