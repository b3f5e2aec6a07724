"""tar2tsv: one table row per sample (TSV, CSV or JSON lines)."""

from typing import Annotated, Literal, Optional

from .base import output_format, Retries, resume_of
from .base import MaxBadShards, OnBadShard
from .base import (BlobThreshold, TmpDir, Args, BraceExpand, Count, FileList, Inputs, Strict,
                   command, nonneg, opt, positive, read_inputs, run, Reporter, selection_stages)
from .fieldcheck import FieldCheck

EXAMPLES = """
tar2tsv -f cls small.tar                      # __key__ and cls, with a header row
tar2tsv -f 'cls json.label jpg;png' data.tar  # a value inside JSON; image size in bytes
tar2tsv -f jpg --hash --nokey --noheader data.tar | sort | uniq -d   # duplicate images
tar2tsv -c 100 --format csv data.tar > first100.csv
tar2tsv --format jsonl -f 'label=json.label' 'shard-{0000..0009}.tar' | head
tar2tsv --format parquet 'shard-{0000..0009}.tar' -o train.parquet   # a row per sample, images as binary
"""

NOTES = """\
Text fields are written as UTF-8 text; binary fields (images, arrays, anything
that is not UTF-8) as their size in bytes, or their sha256 with --hash.
'json.label' addresses a value inside the JSON field 'json' (nested: json.a.b,
list items: json.boxes.0).  A missing field is an empty cell.  TSV escapes
backslash, tab, newline and CR as \\\\ \\t \\n \\r, and other control characters
(escape sequences, C1, U+2028/9, bidi overrides) as \\xHH or \\uHHHH in every format, so
every row is one line and nothing from a sample can drive the terminal.
Without -f the columns are every field of the first 1000 samples (--scan N),
whose rows are held back until the header can be written; a field first seen later is named
once on stderr (use -f to choose columns and stream at once).  JSON lines
without -f: each object has its own sample's fields.
Parquet (needs pyarrow: pip install 'tarproc[parquet]'): a row per sample;
the fields themselves, not sizes: a column is a string when all its values in
the first row group are text by the rule above (UTF-8 all through), else
binary (--binary keeps columns binary); a missing field is null; written in
row groups of at most 10,000 rows or 32 MiB.
Exit status: 0 ok, 2 bad usage or unreadable input."""


@command("Extract textual information from tar files: one table row per sample, its key and chosen fields.", EXAMPLES, NOTES)
def tar2tsv_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    fields: Annotated[Optional[str], opt("-f", "--fields", metavar="SPEC",
                      help="columns: 'cls json.label'; 'jpg;png' takes the first present; 'img=jpg;png' "
                           "names the column (default: every field of the first --scan samples)")] = None,
    count: Count = None,
    skip: Annotated[int, opt("--skip", metavar="N", parser=nonneg(), help="skip the first N samples")] = 0,
    slice: Annotated[Optional[str], opt("-s", "--slice", metavar="SLICE",
                     help="samples by index, as the original tar2tsv: 'STOP', 'START,STOP[,STEP]' or "
                          "'START:STOP[:STEP]'")] = None,
    nokey: Annotated[bool, opt("--nokey", help="no __key__ column")] = False,
    noheader: Annotated[bool, opt("--noheader", help="no header row")] = False,
    hash: Annotated[bool, opt("--hash", help="binary fields as their sha256 instead of their size")] = False,
    scan: Annotated[int, opt("--scan", metavar="N", parser=positive(),
                    help="without -f, the columns are the fields of the first N samples (default 1000; "
                         "they are held back until then)")] = 1000,
    format: Annotated[Literal["tsv", "csv", "jsonl", "jsonlines", "parquet"], opt(
                      "--format", metavar="tsv|csv|jsonl|parquet",
                      callback=output_format("tsv", "csv", "jsonl", "parquet"),
                      help="output format: tsv, csv, jsonl (also called jsonlines) or parquet (default tsv)")] = "tsv",
    output: Annotated[str, opt("-o", "--output", metavar="URL",
                      help="output URL, written only when the command succeeds (default: stdout)")] = "-",
    binary: Annotated[Optional[str], opt("--binary", metavar="COLUMNS",
                      help="with --format parquet: these columns are binary whatever they hold ('txt json'; "
                           "'*': all)")] = None,
    strict: Strict = False,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    retries: Retries = None,
    blob_threshold: BlobThreshold = None,
    tmpdir: TmpDir = None,
    verbose: Annotated[bool, opt("-v", "--verbose", help="report inputs and a summary on stderr")] = False,
    quiet: Annotated[bool, opt("-q", "--quiet", help="no warnings")] = False,
    braceexpand: BraceExpand = False,
):
    return main(Args(locals()))


def parse_old_slice(text):
    """The original's ``-s``: ``"10"`` (stop), ``"5,10"``, ``"5,10,2"``, or
    the ``START:STOP:STEP`` form."""
    from ..errors import UsageError
    from ..stages.basic import parse_slice

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


def main(args, prog="tar2tsv"):
    import sys

    import tarproc as S
    from ..sinks import table as T

    rep = Reporter(prog, args.verbose, args.quiet, False)
    columns = T.parse_columns(args.fields) if args.fields else None
    stats = S.Stats()
    stages = selection_stages(args, slice_parser=parse_old_slice)
    check = FieldCheck(rep, args.fields)
    stages.append(check.before)
    found = set()  # columns that had a value in some sample
    out = sys.stdout
    fmt = args.format
    header_done = args.noheader or fmt == "jsonl"
    if args.binary is not None and fmt != "parquet":
        from ..errors import UsageError

        raise UsageError("--binary is for --format parquet")
    if fmt == "parquet" or args.output != "-":
        from .guards import refuse_overwriting_inputs

        refuse_overwriting_inputs([args.output], list(args.inputs or ()), "the output")
    if fmt == "parquet":
        return parquet_main(args, rep, stats, columns, S.pipeline(read_inputs(args, rep, stats), *stages), check)
    if args.output != "-":
        out = _text_output(args)
    samples = S.pipeline(read_inputs(args, rep, stats), *stages)
    # -f '__key__ cls' has the key as a column of its own: not a second time in front
    key = not args.nokey and not any(c.name == "__key__" for c in columns or ())
    if columns is None and fmt == "jsonl":  # no header: each object has its own sample's fields
        rows = (row for sample in samples
                for row in T.rows([sample], T.default_columns(sample), key=key, hash=args.hash, native=True,
                                  settings=args.settings))
    else:
        if columns is None:  # the rows of the scanned samples are held, not the samples
            columns, rows = T.scanned_rows(samples, args.scan, key=key, hash=args.hash, settings=args.settings,
                                           warn=rep.warn)
        else:
            rows = T.rows(samples, columns, key=key, hash=args.hash, native=fmt == "jsonl", settings=args.settings)
        if not header_done:
            out.write(T.format_row((["__key__"] if key else []) + [c.name for c in columns], fmt))
            header_done = True
    n = 0
    for names, values in rows:
        if not header_done:
            out.write(T.format_row(names, fmt))
            header_done = True
        out.write(T.format_row(values, fmt, names))
        if args.fields and len(found) < len(columns):
            found.update(i for i, v in enumerate(values[1 if key else 0:]) if v is not None)
        n += 1
        if n % 256 == 0:
            out.flush()
    out.flush()
    if args.output != "-":
        out.done = True
        out.close()  # (committed when the command succeeds)
    if args.fields:
        check.missing([c.name for i, c in enumerate(columns) if i not in found])
    stats.written = n
    rep.done(stats)  # "written" counts rows
    return 0


def _text_output(args):
    """A text stream over ``-o URL`` (UTF-8; names kept byte for byte)."""
    import io

    from ..sinks.output import open_sink

    sink = open_sink(args.output, compression=None, settings=args.settings)

    class Closing(io.TextIOWrapper):
        done = False  # set when every row is written: a close before (an error, the end of the interpreter) discards

        def close(self):
            if self.done:
                self.flush()
                sink.close()
            else:
                sink.abort()
            super().close()

    return Closing(_Writable(sink), encoding="utf-8", errors="surrogateescape", newline="\n")


class _Writable:
    """The raw end of a text stream over a :class:`~tarproc.sinks.output.Sink`."""

    closed = False

    def __init__(self, sink):
        self.sink = sink

    def writable(self):
        return True

    def readable(self):
        return False

    def seekable(self):
        return False

    def write(self, data):
        self.sink.write(data)
        return len(data)

    def flush(self):
        pass

    def close(self):
        self.closed = True


def parquet_main(args, rep, stats, columns, samples, check):
    """``--format parquet``: the samples as one Parquet table (sinks/parquet.py)."""
    from ..errors import UsageError
    from ..sinks.parquet import TableWriter

    if args.hash:
        raise UsageError("--hash is for the text formats: Parquet holds the fields themselves")
    if args.noheader:
        raise UsageError("--noheader is for the text formats: a Parquet table always names its columns")
    binary = (args.binary or "").replace(",", " ").split()
    with TableWriter(args.output, columns, key=not args.nokey, binary=binary, scan=args.scan, warn=rep.warn,
                     settings=args.settings) as writer:
        for sample in samples:
            writer.write(sample)
    if args.fields:
        check.missing([c.name for c in writer.columns if c.name not in writer.found and c.name != "__key__"])
    stats.written = writer.written
    rep.done(stats)
    return 0


def entry():
    run("tar2tsv", tar2tsv_command)
