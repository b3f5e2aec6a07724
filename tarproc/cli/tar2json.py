"""tar2json: samples as YAML documents, indented JSON objects or JSON lines."""

from typing import Annotated, Literal, Optional

from .base import output_format, Retries, resume_of
from .base import MaxBadShards, OnBadShard
from .base import (Args, BraceExpand, Count, FileList, Inputs, Strict, command, opt, read_inputs, replaced, run,
                   Reporter, selection_stages)

EXAMPLES = """
tar2json -k 'cls wnid' data.tar               # one YAML document per sample
tar2json -a data.tar                          # the field names of the first 100 samples
tar2json -f jsonlines -k '__key__ cls json.label' data.tar | jq -r .label
tar2json -f json -c 3 'shard-{0000..0009}.tar#0,2'
"""

NOTES = """\
Without -k a record has __key__ and every field of its sample; with -k exactly
the names given ('cls json.label img=jpg;png', as tar2tsv -f; add __key__ to
get the key).  Text fields are strings, a json field the value it holds;
binary fields (images, arrays, anything that is not UTF-8) their size in
bytes, or their sha256 with --hash; a missing field is null.
yaml: one '---' document per sample, 'name: value' lines, strings plain where
PyYAML would write them plain (txt: a) and double-quoted where they need quotes
(no YAML library needed to write it; any YAML reader reads it).  json: one
indented object per sample, separated by blank lines (a stream jq reads).
jsonlines: one object per line.
Exit status: 0 ok, 2 bad usage or unreadable input."""


@command("Extract parts of a tar file and output in YAML/JSON format: one record per sample.", EXAMPLES, NOTES)
def tar2json_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    keys: Annotated[Optional[str], opt("-k", "--fields", metavar="SPEC",
                    help="what to extract: 'cls json.label img=jpg;png' (default: __key__ and every "
                         "field)")] = None,
    keys_replaced: replaced("--keys", "-k/--fields") = None,
    available: Annotated[bool, opt("-a", "--available",
                         help="list the field names seen in the first 100 samples, one per line, and "
                              "exit")] = False,
    format: Annotated[Literal["yaml", "json", "jsonlines", "jsonl"], opt(
                      "-f", "--format", metavar="yaml|json|jsonlines", callback=output_format("yaml", "json", "jsonlines"),
                      help="yaml, json or jsonlines (also called jsonl) (default yaml)")] = "yaml",
    count: Count = None,
    skip: Annotated[int, opt("--skip", metavar="N", help="skip the first N samples")] = 0,
    hash: Annotated[bool, opt("--hash", help="binary fields as their sha256 instead of their size")] = False,
    strict: Strict = False,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    retries: Retries = None,
    verbose: Annotated[bool, opt("-v", "--verbose", help="report inputs and a summary on stderr")] = False,
    quiet: Annotated[bool, opt("-q", "--quiet", help="no warnings")] = False,
    braceexpand: BraceExpand = False,
):
    return main(Args(locals()))


def main(args, prog="tar2json"):
    import sys

    import tarproc as S
    from ..errors import UsageError
    from ..sinks.records import available_fields, format_record, record, record_columns

    if args.skip < 0:
        raise UsageError("--skip must be >= 0")
    rep = Reporter(prog, args.verbose, args.quiet, False)
    columns = record_columns(args.keys)
    stats = S.Stats()
    samples = S.pipeline(read_inputs(args, rep, stats), *selection_stages(args))
    out = sys.stdout  # (a failed write names stdout, exit 1: cli/base)
    n = 0
    if args.available:
        for name in available_fields(samples):
            out.write(name + "\n")
        out.flush()
        return 0
    for sample in samples:
        out.write(format_record(record(sample, columns, args.hash, args.settings), args.format))
        n += 1
        if n % 64 == 0:
            out.flush()
    out.flush()
    stats.written = n
    rep.done(stats)
    return 0


def entry():
    run("tar2json", tar2json_command)
