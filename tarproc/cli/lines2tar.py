"""lines2tar: one sample per line of text, its fields split on a separator."""

from typing import Annotated, List, Optional

import typer

from .base import output_directory_exists, GroupSize, group_size_of
from .base import OUTPUT_HELP, Args, command, opt, replaced, run, Reporter

EXAMPLES = """
cat url-list | lines2tar -k url | tarproc -c 'curl -sL $(cat sample.url) > sample.html'
printf 'a.jpg\\t3\\nb.jpg\\t7\\n' | lines2tar -k 'path cls' > labels.tar
cut -f1,2 table.tsv | lines2tar -k '__key__ txt' -o texts.tar    # first column is the key
lines2tar -s , -k 'url cls' --keyformat 'line-{:06d}' list.csv > list.tar
"""

NOTES = """\
Each line (without its newline) is split on the separator into exactly as many
values as -k names; a line with another number of values is an error naming
its line number (exit 2; an -o file is then not made).  Values are stored as the bytes of the
line (no decoding; a CR before the newline stays).  Keys are --keyformat of
the line index (from 0, over all inputs), unless one of the -k names is
__key__: that column is then the key.  The input is read in chunks, so samples
come out while lines still arrive.
Exit status: 0 ok, 2 bad usage, unreadable input or a bad line."""


@command("Create a tar file from the lines of a text file: one sample per line.", EXAMPLES, NOTES)
def lines2tar_command(
    inputs: Annotated[Optional[List[str]], typer.Argument(metavar="[TEXT]...", show_default=False,
                      help="text inputs: paths, '-', URLs (default: stdin)")] = None,
    keys: Annotated[str, opt("-k", "--fields", metavar="NAMES",
                    help="field names of the values of a line, space separated; '__key__' makes that "
                         "value the key (default: txt)")] = "txt",
    keys_replaced: replaced("--keys", "-k/--fields") = None,
    separator: Annotated[str, opt("-s", "--separator", metavar="SEP",
                         help="what separates the values of a line ('\\t' or 'tab' for tab; default: "
                              "tab)")] = "\t",
    keyformat: Annotated[str, opt("--keyformat", metavar="FORMAT",
                         help="key from the line index (default '{:09d}')")] = "{:09d}",
    output: Annotated[str, opt("-o", "--output", metavar="URL", help=OUTPUT_HELP, callback=output_directory_exists)] = "-",
    group_size: GroupSize = None,
    verbose: Annotated[bool, opt("-v", "--verbose", help="a summary on stderr")] = False,
    quiet: Annotated[bool, opt("-q", "--quiet", help="no warnings")] = False,
):
    return main(Args(locals()))


def main(args, prog="lines2tar"):
    import tarproc as S
    from ..sources.lines import check_keyformat, check_keys, iter_line_samples
    from ..sinks.output import open_sink
    from .base import open_inputs
    from .guards import refuse_overwriting_inputs

    rep = Reporter(prog, args.verbose, args.quiet, False)
    sep = {"\\t": "\t", "tab": "\t", "TAB": "\t"}.get(args.separator, args.separator)
    keys = check_keys(args.keys)
    check_keyformat(args.keyformat)
    urls = open_inputs(args, prog, tar=False)  # a list, or lazy when long (expand_urls is a generator)
    urls = refuse_overwriting_inputs([args.output], urls, "choose another output name")
    stats = S.Stats()
    with open_sink(args.output, stall=rep.stall, group_size=group_size_of(args), settings=args.settings) as sink:
        writer = S.SampleWriter(sink, stats)
        for sample in iter_line_samples(urls, keys, sep, args.keyformat, stats, stall=rep.stall, settings=args.settings):
            writer.write(sample)
        writer.close()
    rep.done(stats)
    return 0


def entry():
    run("lines2tar", lines2tar_command)
