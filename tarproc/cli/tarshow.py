"""tarshow: show what is in the samples of tar shards (text, terminal images, contact sheets)."""

from typing import Annotated, Literal, Optional

from .base import output_directory_exists, MaxBadShards, OnBadShard
from .base import (BlobThreshold, TmpDir, spooler_of, Args, BraceExpand, Count, FileList, Inputs, Skip,
                   Slice, Strict, Retries, command, opt, positive, read_inputs, run, Reporter, selection_stages)
from .fieldcheck import FieldCheck

EXAMPLES = """
tarshow -c 2 small.tar                        # the first two samples, every field
tarshow -c 3 -f 'jpg;png cls' data.tar        # chosen fields; images drawn in a terminal
curl -sL https://host/shard-0000.tar | tarshow -c 5 --skip 100
tarshow --grid sheet.png -c 16 -f 'jpg;png' data.tar   # contact sheet with keys
tarshow -f depth.npy -N -C viridis data.tar   # arrays through a colormap
tarshow -d 0 --format original 'data.tar#0,3' # the first four samples, as the original showed them
"""

NOTES = """\
Each sample is a block: its key, then one line per field with its size and a
preview (text and JSON as text, numbers as numbers, images as <jpg 640x480 RGB,
52 KB>, arrays as <npy float32 64x64, 16 KB>, other binary data as hex).
When stdout is a terminal and an image field is asked for with -f, the images
are drawn below their block with 24-bit colour half-block characters, as wide
as the terminal.  Piped, tarshow prints the original tarshow's lines
('cls                 <TAB>b'746''), which scripts written for it grep;
--format blocks gives the blocks there too, --format original on a terminal.  -d waits between samples (the
original's display delay; 0 = no wait).  'URL#START,END' shows samples START
to END (END included) of URL.  Exit status: 0 ok, 2 bad usage
or unreadable input."""


@command("Show data inside tar files: keys, fields, sizes, previews and images of each sample.", EXAMPLES, NOTES)
def tarshow_command(
    inputs: Inputs = None,
    filelist: FileList = None,
    count: Count = None,
    skip: Skip = 0,
    slice: Slice = None,
    fields: Annotated[Optional[str], opt("-f", "--field", "--fields", metavar="SPEC",
                      help="show only these fields, in this order: 'jpg cls'; 'jpg;png' shows the first "
                           "present")] = None,
    grid: Annotated[Optional[str], opt("--grid", metavar="FILE.png", callback=output_directory_exists,
                    help="write a contact sheet of the first -c images (default 25) with their keys, instead "
                         "of the text report")] = None,
    columns: Annotated[Optional[int], opt("--columns", metavar="N", parser=positive(),
                       help="images per row of the contact sheet (default: a square)")] = None,
    thumb: Annotated[int, opt("--thumb", metavar="PX", help="thumbnail size in the sheet (default 128)")] = 128,
    normalize: Annotated[bool, opt("-N", "--normalize",
                         help="stretch image and array values to their full range")] = False,
    cmap: Annotated[Optional[str], opt("-C", "--cmap", metavar="NAME",
                    help="colormap for grayscale images and 2-D arrays: gray, viridis, magma, inferno, "
                         "plasma, hot, jet, coolwarm")] = None,
    images: Annotated[Literal["auto", "always", "never"], opt(
        "--images", help="draw images requested with -f: auto = when stdout is a terminal (default)")] = "auto",
    width: Annotated[Optional[int], opt("-w", "--width", metavar="COLS", parser=positive(),
                     help="width of terminal images and previews (default: the terminal's)")] = None,
    quick: Annotated[bool, opt("-q", "--quick", help="never draw images (as the original tarshow)")] = False,
    silent: Annotated[bool, opt("--silent", help="no text blocks (only images)")] = False,
    verbatim_keys: Annotated[bool, opt("--verbatim-keys",
                             help="accepted for compatibility (field names are always lower-cased, as "
                                  "webdataset reads them)")] = False,
    use_keyboard: Annotated[bool, opt("--use-keyboard", help="accepted for compatibility with the original "
                                                              "(no effect: tarshow never waits for input)")] = False,
    delay: Annotated[float, opt("-d", "--delay", metavar="SECONDS",
                     help="wait this long after each sample (default 0: no wait)")] = 0.0,
    format: Annotated[Literal["auto", "blocks", "original"], opt(
        "--format", help="auto (default): blocks on a terminal, original when piped; blocks: a block per "
                         "sample with sizes and previews; original: the original tarshow's lines, "
                         "'NAME<TAB>VALUE' with values as Python shows them (b'746'), cut at 60 characters")] = "auto",
    strict: Strict = False,
    on_bad_shard: OnBadShard = "fail",
    max_bad_shards: MaxBadShards = None,
    retries: Retries = None,
    blob_threshold: BlobThreshold = None,
    tmpdir: TmpDir = None,
    verbose: Annotated[bool, opt("-v", "--verbose", help="report inputs on stderr")] = False,
    quiet: Annotated[bool, opt("--quiet", help="no warnings")] = False,
    braceexpand: BraceExpand = False,
):
    return main(Args(locals()))


def _choose(sample, wanted):
    """The field names of ``sample`` chosen by a parsed field spec (the first
    present candidate; the first candidate when none is)."""
    out = []
    for _name, candidates in wanted:
        out.append(next((c for c in candidates if c in sample), candidates[0]))
    return out


def main(args, prog="tarshow"):
    import shutil
    import sys

    import tarproc as S
    from ..sinks import show
    from ..errors import UsageError

    rep = Reporter(prog, args.verbose, args.quiet, False)
    if args.cmap is not None and args.cmap not in show.COLORMAPS:
        raise UsageError(f"unknown colormap {args.cmap!r} (choose from {', '.join(sorted(show.COLORMAPS))})")
    if args.thumb < 8 or (args.columns is not None and args.columns < 1):
        raise UsageError("--thumb must be >= 8 and --columns >= 1")
    if not 0 <= args.delay <= 86400:
        raise UsageError("--delay must be 0 to 86400 seconds")
    wanted = S.parse_fields(args.fields) if args.fields else None
    stats = S.Stats()
    count, args.count = args.count, None if args.grid else args.count  # with --grid, -c counts images
    stages = selection_stages(args)
    check = FieldCheck(rep, args.fields)
    stages.append(check.before)
    args.count = count
    out = sys.stdout
    tty = out.isatty()
    layout = args.format if args.format != "auto" else ("blocks" if tty else "original")
    draw = wanted is not None and not args.quick and (
        args.images == "always" or (args.images == "auto" and tty))
    spooler = spooler_of(args)
    if not draw and not args.grid:
        # only previews: large members are read past, keeping their first bytes (a bomb fills no disk)
        spooler = show.prefix_only(spooler, args.settings.preview_bytes)
    samples = S.pipeline(read_inputs(args, rep, stats, spooler=spooler), *stages)

    if args.grid:
        return _grid(args, samples, wanted, rep, check)

    term = shutil.get_terminal_size((100, 40))
    columns = args.width or (term.columns if tty else 100)
    first = True
    found = set()  # the -f items some sample had
    for sample in samples:
        if args.delay and not first:
            import time

            time.sleep(args.delay)
        names = _choose(sample, wanted) if wanted else None
        if layout == "original":
            if not args.silent:
                out.write("".join(_original_lines(sample, names)) + "\n")
            names = names if draw else None
        elif not args.silent:
            if not first:
                out.write("\n")
            wide = max((len(k) for k in (names or sample)), default=8)
            out.write("\n".join(show.format_sample(sample, names, max(16, columns - wide - 16), args.settings)) + "\n")
        first = False
        if draw:
            for name in names:
                if name not in sample:
                    continue
                img = _image(show, rep, sample, name, args, (2 * columns, 4 * term.lines))
                if img is None:
                    continue
                lines = show.ansi_image(img, columns, max(4, term.lines - 2))
                out.write("\n".join(lines) + "\n")
        out.flush()
        stats.written += 1
        if wanted and len(found) < len(wanted):
            found.update(i for i, (_n, cands) in enumerate(wanted) if any(c in sample for c in cands))
    if wanted:
        check.missing([";".join(cands) for i, (_n, cands) in enumerate(wanted) if i not in found])
    rep.done(stats)
    return 0


def _original_lines(sample, names=None):
    """The original tarshow's lines: ``NAME`` padded to 20, a tab, the value
    as Python prints it (``b'746'``) cut at 60 characters; sorted by name,
    with ``__key__`` and ``__source__``."""
    from ..core import limits

    shown = sorted(sample) if names is None else sorted(set(names + ["__key__", "__source__"]) & set(sample))
    out = []
    for k in shown:
        v = sample[k]
        if isinstance(v, (str, int, float)) or not hasattr(v, "__len__"):
            text = str(v)[:60]
        else:  # bytes, or a large field (a Blob, a Prefix): its head
            text = repr(limits.head(v, 64))[:60]  # the same first 60 characters as str(v), without copying v
        out.append(f"{limits.safe_text(k):20s}\t{limits.safe_text(text)}\n")
    return out


def _image(show, rep, sample, name, args, max_size):
    """The field as an image, or None; one over the pixel budget is a warning."""
    from ..core import limits

    try:
        return show.to_image(name, sample[name], args.normalize, args.cmap, max_size=max_size,
                             max_pixels=args.settings.max_pixels)
    except limits.OverBudget as e:
        rep.warn(f"sample {limits.quote(sample.get('__key__'))}: {name}: not drawn: {e}")
        return None


def _grid(args, samples, wanted, rep, check):
    from ..sinks import show
    from ..core.rules import is_meta
    from ..sinks.output import open_sink

    limit = 25 if args.count is None else args.count
    show.check_sheet(limit, args.columns, args.thumb)  # before anything is read or decoded
    items = []
    if limit > 0:
        for sample in samples:
            names = _choose(sample, wanted) if wanted else sorted(k for k in sample if not is_meta(k))
            for name in names:
                if name in sample and (wanted or show.looks_like_image(name, sample[name])
                                       or show.ext_of(name) == "npy"):
                    img = _image(show, rep, sample, name, args, (args.thumb, args.thumb))
                    if img is not None:
                        items.append((sample["__key__"], img))
                        break
            if len(items) >= limit:
                break
    if limit > 0 and not items:
        # a blank sheet would look like a result: say why there is none, write nothing
        n = check.n_in
        what = f"-f {args.fields!r} names no image or array" if wanted else "no field is an image or array"
        where = f"{what} in the {n} sample{'s' * (n != 1)} read ({check._have()})" if n else "no samples read"
        rep.say(f"no image to draw: {where}; {args.grid} not written")
        return 1
    sheet = show.contact_sheet(items, args.columns, args.thumb)
    import io

    buf = io.BytesIO()
    sheet.save(buf, format="JPEG" if args.grid.lower().endswith((".jpg", ".jpeg")) else "PNG")
    with open_sink(args.grid, compression=None, settings=args.settings) as sink:
        sink.write(buf.getvalue())
    rep.info(f"wrote a contact sheet of {len(items)} images ({sheet.width}x{sheet.height}) to {args.grid}")
    return 0


def entry():
    run("tarshow", tarshow_command)
