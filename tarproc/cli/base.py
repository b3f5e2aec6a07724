"""What every command shares: the typer app factory, option bundles (defined
once, used by every command that has the option), the error-to-exit-code
mapping, signal and broken-pipe handling, and the one progress line.

Every command is a single-command typer app (shell completion with
``--install-completion`` / ``--show-completion``; help and parsing from one
definition).  typer is pinned to 0.27.x: 0.28+ imports pydantic at start-up
(see README.md, "Design decisions", and ``bench/startup.py``).  rich is never
imported by a command: help and usage errors are click's plain formatting
(``rich_markup_mode=None``), and the progress line is drawn here.

Adding an option to a command: declare a parameter with one of the bundles
below (``count: Count = None``) or a new ``Annotated[type, typer.Option(...)]``;
a new shared option belongs here, once.
"""

import io
import os
import signal
import sys
from typing import Annotated, List, Literal, Optional

import typer

from ..errors import EXIT_FAILED, EXIT_USAGE, TarprocError, TooManyBadShards, UsageError
from . import interrupted_early  # noqa: E402

# ---------------------------------------------------------------- option bundles


def opt(*decls, help, metavar=None, **kw):
    """A typer option whose help text says its own default (typer's
    ``[default: ...]`` is turned off: our texts say it in words)."""
    return typer.Option(*decls, help=help, metavar=metavar, show_default=False, **kw)


def nonneg(what="N", hint=None):
    """A parser for counts: an integer >= 0.  ``hint`` is added to the
    message for a value that is not a number (an old flag's meaning)."""

    def parse(text):
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{text!r} is not a whole number" + (f"; {hint}" if hint else "")) from None
        if value < 0:
            raise typer.BadParameter(f"{value} is negative (must be 0 or more)")
        return _not_huge(text, value)

    parse.__name__ = what
    return parse


def _not_huge(text, value):
    """A count past what an index holds (2**63 - 1) is a usage error, not an
    OverflowError deep inside (``--shards 1e30`` as digits)."""
    if value > sys.maxsize:
        raise typer.BadParameter(f"{text[:30]}{'...' if len(text) > 30 else ''} is too large "
                                 f"(at most {sys.maxsize})")
    return value


def positive(what="N"):
    """A parser for an integer >= 1."""

    def parse(text):
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{text!r} is not a whole number") from None
        if value < 1:
            raise typer.BadParameter(f"{value} must be at least 1")
        return _not_huge(text, value)

    parse.__name__ = what
    return parse


#: Longest duration an option takes (a year): more is a typo, and socket and
#: wait timeouts past what a C timeval holds fail deep inside.
MAX_SECONDS = 365 * 86400


def seconds(zero_ok=False):
    """THE parser of duration options (``--timeout``, tarserve's
    ``--*-timeout``, kujob ``--poll``): a finite number of seconds, > 0 (or
    >= 0 with ``zero_ok``), at most :data:`MAX_SECONDS`; ``nan``, ``inf``
    and negative values are one usage line."""

    def parse(text):
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{text!r} is not a number of seconds") from None
        if not (value >= 0 if zero_ok else value > 0) or value > MAX_SECONDS:
            raise typer.BadParameter(f"{text!r}: seconds must be {'0' if zero_ok else 'more than 0'} to "
                                     f"{MAX_SECONDS} (a year)")
        return value

    parse.__name__ = "SECONDS"
    return parse


def replaced(old, new, flag=False):
    """A hidden option ``old``: an original tarproc long option whose name
    means something else in another command now.  Giving it is a usage
    error that names ``new`` (the parameter is named ``*_replaced``)."""

    def refuse(value):
        if value:
            raise typer.BadParameter(f"{old} is {new} in this command")
        return value

    return Annotated[Optional[bool] if flag else Optional[str],
                     opt(old, hidden=True, callback=refuse, help=f"replaced by {new}")]


def output_directory_exists(value):
    """Callback of every option that names an output file (``-o``,
    ``--offsets``, ``--manifest``, ``--index``, ``--grid``, ``--failed-keys``):
    the directory it names must exist; no command makes one (a typo would
    put files at the root).  Only the directories a shard-name pattern's
    placeholders make below it are created (tarsplit).  One usage line,
    exit 2, before any input is read (docs/commit.md)."""
    if not value or value == "-":
        return value
    from ..runtime.schemes import scheme_of

    if scheme_of(value) != "file" or value.endswith("/"):
        return value  # (a name of a directory is refused as such when the output is opened)
    from ..sinks.split import pattern_root

    d = pattern_root(value)  # (a plain name: its directory)
    if not os.path.isdir(d):
        import shlex

        raise typer.BadParameter(f"directory {d} does not exist (commands make no output directory: "
                                 f"mkdir -p {shlex.quote(d)})")
    return value


#: Names of the same output format accepted by every command that writes it
#: (tar2tsv ``--format jsonl``, tar2json ``-f jsonlines``): name -> the one it means.
FORMAT_ALIASES = {"jsonl": "jsonlines", "jsonlines": "jsonlines"}


def output_format(*names):
    """Callback of a ``--format`` option whose own names are ``names``: an
    alias in :data:`FORMAT_ALIASES` becomes the name of those it means."""

    def parse(value):
        if value in names or value is None:
            return value
        meant = FORMAT_ALIASES.get(value)
        for name in names:
            if meant is not None and FORMAT_ALIASES.get(name) == meant:
                return name
        return value

    return parse


INPUTS_HELP = ("input shards: paths, '-', pipe:CMD, http(s)://, gs://, s3://; brace patterns like "
               "shard-{0000..0146}.tar are expanded (default: stdin)")
OUTPUT_HELP = ("output URL; compression from the name (.tgz .tar.gz .tar.bz2 .tar.xz .tar.zst; others such as "
               ".lz4 are refused) (default: stdout)")
FIELDS_HELP = ("keep only these fields: 'jpg cls'; 'jpg;png' takes the first present; 'img=jpg;png' "
               "renames; samples missing one are skipped")

Inputs = Annotated[Optional[List[str]], typer.Argument(metavar="[URL]...", help=INPUTS_HELP, show_default=False)]
FileList = Annotated[Optional[str], opt("-T", "--filelist", metavar="FILE",
                                        help="read input URLs from FILE, one per line ('-' for stdin)")]
BraceExpand = Annotated[bool, opt("-b", "--braceexpand", hidden=True,
                                  help="accepted for compatibility (patterns are always expanded)")]
Output = Annotated[str, opt("-o", "--output", metavar="URL", help=OUTPUT_HELP, callback=output_directory_exists)]
Count = Annotated[Optional[int], opt("-c", "--count", metavar="N", parser=nonneg(),
                                     help="stop after N samples (and stop reading)")]
Skip = Annotated[int, opt("-s", "--skip", metavar="N", parser=nonneg(), help="skip the first N samples")]
Slice = Annotated[Optional[str], opt("--slice", metavar="START:STOP[:STEP]", help="keep samples by index")]
Fields = Annotated[Optional[str], opt("-f", "--fields", metavar="SPEC", help=FIELDS_HELP)]
Verbose = Annotated[bool, opt("-v", "--verbose", help="report inputs and a final summary on stderr")]
Quiet = Annotated[bool, opt("-q", "--quiet", help="no warnings, only errors")]
ProgressFlag = Annotated[Optional[bool], opt("--progress/--no-progress",
                                             help="a progress bar on stderr (default: when stderr is a terminal)")]
Strict = Annotated[bool, opt("--strict", help="treat a shard that ends without the end-of-archive marker "
                                              "as an error")]
# damaged or unreadable shards (docs/reading.md, "Bad shards"): the same two options in every reading command
OnBadShard = Annotated[Literal["fail", "skip", "partial"], opt(
    "--on-bad-shard", metavar="fail|skip|partial",
    help="a damaged or unreadable shard stops the run (fail, exit 2), or is reported in one line and left out: "
         "whole (skip: samples read from it are dropped; each shard's samples are held until it ends) or "
         "after the samples read before the damage (partial); a summary ends the run, exit 1 unless "
         "--max-bad-shards allows them (default: fail)")]
MaxBadShards = Annotated[Optional[int], opt("--max-bad-shards", metavar="N", parser=nonneg(),
                         help="with --on-bad-shard skip|partial: up to N bad shards still exit 0 (default: 0; "
                              "every shard bad and no sample read is exit 1)")]
Retries = Annotated[Optional[int], opt("--retries", metavar="N", parser=nonneg(),
                                       help="resume a broken http(s)/s3/gs download where it broke, up to N times "
                                            "in a row (0: never) (default: $TARPROC_RETRIES or 5)")]
Seed = Annotated[Optional[int], opt("--seed", metavar="N", help="random seed (reproducible order)")]
StartMethod = Annotated[Optional[Literal["fork", "spawn", "forkserver"]], opt(
                                           "--start-method", metavar="fork|spawn|forkserver",
                                           help="how worker processes start (default: fork; spawn and "
                                                "forkserver start clean interpreters, as on macOS)")]

# large members (docs/blobs.md): where and from what size they go to spool files
BlobThreshold = Annotated[Optional[str], opt("--blob-threshold", metavar="SIZE",
                          help="members of this size or more are kept in a spool file, not in memory: 4MiB, "
                               "1GB, 0 for never (default: $TARPROC_BLOB_THRESHOLD or 4MiB)")]
# compressed outputs with random access (tarproc/sinks/grouped.py)
GroupSize = Annotated[Optional[str], opt("--group-size", metavar="SIZE",
                      help="a .tar.gz or .tar.zst output is cut into groups of whole samples of at most SIZE "
                           "bytes of tar, each decodable on its own, so an index (tarindex) reads one group "
                           "per sample; 0: one compressed stream (default: 1MiB)")]
TmpDir = Annotated[Optional[str], opt("--tmpdir", metavar="DIR",
                   help="directory for spool files of large members (default: $TMPDIR or /tmp)")]
#: Commands that only pass samples through take members of plain input files
#: from this size on as regions of the file, sent with sendfile (Spooler).
PASS_THROUGH_REGION = 64 << 10

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _epilog(examples, notes):
    # click rewraps paragraphs unless they start with a line holding only \b
    text = "\b\nexamples:\n" + "\n".join("  " + line for line in examples.strip("\n").splitlines())
    for para in notes.strip("\n").split("\n\n") if notes.strip() else []:
        text += "\n\n\b\n" + para.strip("\n")
    return text


def _show_version(value):
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("tarproc")
        except PackageNotFoundError:
            v = "unknown (not installed)"
        typer.echo(f"{current_prog()} (tarproc) {v}")
        raise typer.Exit(0)


def current_prog():
    """The program name of the command being run (the ``prog_name`` that
    :func:`run` gives click: its context, not a module global)."""
    from typer._click.globals import get_current_context

    ctx = get_current_context(silent=True)
    name = ctx.find_root().info_name if ctx is not None else None
    return name or "tarproc"


def given(name):
    """Whether the option of parameter ``name`` was given on the command
    line (not its default): for options that mean something only beside
    another."""
    from typer._click.core import ParameterSource
    from typer._click.globals import get_current_context

    ctx = get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE


def _run_extra():
    """What :func:`run` was given as ``extra`` (a dict; click's context object)."""
    from typer._click.globals import get_current_context

    ctx = get_current_context(silent=True)
    return (ctx.find_root().obj if ctx is not None else None) or {}


_VERSION = typer.Option("--version", help="show the version and exit", is_eager=True,
                        callback=_show_version, show_default=False)
_DEBUG = typer.Option("--debug", help="show the Python traceback of an error", show_default=False)


def command(summary, examples, notes="", context=None):
    """Decorator: make ``fn`` the one command of a typer app (kept as
    ``fn.app``), with ``--version``, ``--debug``, shell completion and a help
    that ends with ``examples`` (every command has some) and ``notes``."""
    import functools
    import inspect

    def deco(fn):
        app = typer.Typer(add_completion=True, rich_markup_mode=None, pretty_exceptions_enable=False,
                          context_settings=dict(CONTEXT, **(context or {})))

        @functools.wraps(fn)
        def wrapper(**kw):
            kw.pop("version", None)
            kw.pop("debug", None)
            try:
                return fn(**kw)
            except BrokenPipeError:  # before typer's own handler (which exits 1)
                _quiet_sigpipe()

        sig = inspect.signature(fn)
        extra = [inspect.Parameter("debug", inspect.Parameter.KEYWORD_ONLY, default=False,
                                   annotation=Annotated[bool, _DEBUG]),
                 inspect.Parameter("version", inspect.Parameter.KEYWORD_ONLY, default=False,
                                   annotation=Annotated[bool, _VERSION])]
        params = list(sig.parameters.values())
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind == p.POSITIONAL_OR_KEYWORD else p
                  for p in params]
        wrapper.__signature__ = sig.replace(parameters=params + extra)
        wrapper.__annotations__ = dict(getattr(fn, "__annotations__", {}),
                                       debug=extra[0].annotation, version=extra[1].annotation)
        app.command(help=summary, epilog=_epilog(examples, notes))(wrapper)
        wrapper.app = app
        return wrapper

    return deco


class Args:
    """The parsed options as attributes (``args.count``), for the helpers
    below, with ``args.prog`` (the program name) and ``args.settings`` (the
    :class:`~tarproc.settings.Settings` of the ``TARPROC_*`` variables, read
    here, at the edge: a bad value is one line, exit 2)."""

    def __init__(self, values):
        from ..settings import Settings

        self.__dict__.update(values)
        self.prog = current_prog()
        self.extra = _run_extra()
        self.settings = Settings.from_environ(os.environ)

    def __getattr__(self, name):  # an option this command does not have
        return None


from ..core.units import format_size, parse_size  # noqa: E402,F401  (parse_size re-exported for the commands)


# ---------------------------------------------------------------- progress


def _human(n, unit):
    if unit != "B":
        return f"{n:,.0f}" if n >= 1000 else f"{n:.0f}"
    return format_size(n)


def _clock(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def terminal_columns():
    """The width of the terminal stderr is on ($COLUMNS when set; 80 when
    it cannot be told), asked at every redraw so a resize is followed.  A
    width of 0 is unknown, not narrow (``script`` without a size, some CI
    consoles): $COLUMNS or 80."""
    try:
        columns = int(os.environ["COLUMNS"])
        if columns > 0:
            return max(10, columns)
    except (KeyError, ValueError):
        pass
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 0
    return max(10, columns) if columns > 0 else 80


def draw_line(line):
    """Draw ``line`` in place on stderr (``\\r``, the line, erase to its
    end), cut to one character less than the terminal's width: a line that
    reached the last column would wrap, and every redraw would scroll."""
    width = terminal_columns() - 1
    if len(line) > width:
        line = line[:width - 1] + "…"
    sys.stderr.write(f"\r{line}\x1b[K")
    sys.stderr.flush()


class Progress:
    """The one progress line of every command, on stderr.

    With a known ``total``: a bar with percent, rate and ETA; without: a
    counter with rate and elapsed time.  Shown when ``enabled`` (default:
    when stderr is a terminal; ``--progress``/``--no-progress`` decide), at
    most 4 times a second, redrawn in place (``\\r`` … erase to end of line);
    :meth:`clear` erases it before other output goes to stderr.  Drawn here
    rather than with rich's Live display: the line must be cleared and
    redrawn around lines other threads write (kujob's children), and a
    command that never shows it pays no import."""

    WIDTH = 20

    def __init__(self, prog, enabled=None, total=None, unit="samples"):
        self.prog = prog
        self.enabled = sys.stderr.isatty() if enabled is None else bool(enabled)
        self.total = total
        self.unit = unit
        self.shown = False
        self._last = 0.0
        self._start = None

    def update(self, done, text=None, force=False):
        if not self.enabled:
            return
        import time

        now = time.monotonic()
        if self._start is None:
            self._start = now
        if not force and now - self._last < 0.25:
            return
        self._last = now
        elapsed = now - self._start
        rate = done / elapsed if elapsed > 0 else 0.0
        unit = "" if self.unit == "B" else " " + self.unit
        rate_text = f"{_human(rate, self.unit)}{unit}/s"
        head = f"{self.prog}: " + (text + " " if text else "")
        if self.total:
            frac = min(1.0, done / self.total)
            filled = int(frac * self.WIDTH)
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            eta = _clock((self.total - done) / rate) if rate > 0 and done < self.total else "-:--:--"
            amount = "" if text else f"{_human(done, self.unit)}/{_human(self.total, self.unit)}{unit} "
            line = f"{head}{frac * 100:3.0f}% [{bar}] {amount}{rate_text}, ETA {eta}"
            if len(line) >= terminal_columns():  # a narrow terminal: the bar goes first
                line = f"{head}{frac * 100:3.0f}% {amount}{rate_text}, ETA {eta}"
        else:
            amount = "" if text else f"{_human(done, self.unit)}{unit}, "
            line = f"{head}{amount}{rate_text}, {_clock(elapsed)}"
        draw_line(line)
        self.shown = True

    def clear(self):
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False


class Reporter:
    """Diagnostics on stderr: warnings (unless quiet), verbose lines, and the
    progress line (see :class:`Progress`)."""

    def __init__(self, prog, verbose=False, quiet=False, progress=None, total=None, unit="samples"):
        self.prog = prog
        self.verbose = verbose
        self.quiet = quiet
        self.bar = Progress(prog, progress, total, unit)
        self.position = None  # bytes read so far, when the total is in bytes
        self.bad_shards = None  # --on-bad-shard's record (bad_shards_of), checked once at the end
        from ..runtime.stall import Stall

        # the command's source calls it before blocking on an empty pipe; its
        # sink (and --map's batcher) flush then: output keeps pace with input
        self.stall = Stall()

    @property
    def progress(self):
        return self.bar.enabled

    def warn(self, message):
        if not self.quiet:
            self.bar.clear()
            print(f"{self.prog}: warning: {_clip(message)}", file=sys.stderr, flush=True)

    def say(self, message):
        """A line on stderr whatever the verbosity (failures, summaries)."""
        self.bar.clear()
        print(f"{self.prog}: {_clip(message)}", file=sys.stderr, flush=True)

    def info(self, message):
        if self.verbose:
            self.bar.clear()
            print(f"{self.prog}: {_clip(message)}", file=sys.stderr, flush=True)

    def tick(self, stats, done=None):
        if not self.bar.enabled:
            return
        if done is None:
            done = self.position if self.position is not None else stats.read
        self.bar.update(done)

    def done(self, stats, force=False, summary=None):
        """End of the command: the progress line cleared, the bad shards'
        summary if the input did not end (``-c N``; it may raise
        :class:`~tarproc.errors.TooManyBadShards`), the summary with ``-v``
        (``summary``: what the command did, in its words, instead of the
        counts of samples read and written)."""
        self.bar.clear()
        end_bad_shards(self.bad_shards, self)  # (no "N of M shards": not all were read)
        if self.verbose or force:
            print(f"{self.prog}: {_clip(summary or stats.summary())}", file=sys.stderr, flush=True)


def progress_stage(reporter, stats):
    """Stage: tick the progress line per sample."""

    def stage(samples):
        if not reporter.progress:
            yield from samples
            return
        for sample in samples:
            reporter.tick(stats)
            yield sample

    return stage


# ---------------------------------------------------------------- running a command


from .guards import Terminated, on_sigterm  # noqa: E402,F401 (Terminated is part of this module's API)


#: Spellings of an option a user may try that a command does not have, and
#: what to use instead: an unknown option says so ("did you mean"), in place
#: of click's own hint (close spellings of the command's options).
SPELLINGS = {
    "tarsort": {"--shuffle": "-S shuffle", "--random": "-S shuffle", "--numeric": "-S int",
                "--key": "-s/--sortkey FIELD"},
    "tarsplit": {"--shuffle": "tarsort -S shuffle before tarsplit"},
    "tarproc": {"--shuffle": "tarsort -S shuffle (or tarcat --shuffle N) before tarproc"},
}


def _usage_error(prog, e):
    """A click usage error as two lines: the usage, and what was wrong."""
    ctx = getattr(e, "ctx", None)
    usage = ctx.get_usage().strip() if ctx is not None else ""
    if usage:
        print(usage.splitlines()[0], file=sys.stderr)
    message = e.format_message() if hasattr(e, "format_message") else str(e)
    hint = SPELLINGS.get(prog, {}).get(getattr(e, "option_name", None))
    if hint:
        message = f"No such option: {e.option_name} (did you mean {hint}?)"
    print(f"{prog}: error: {_clip(message)}", file=sys.stderr)


def run(prog, cmd, argv=None, extra=None):
    """Run the typer command ``cmd`` (a function made by :func:`command`) as
    program ``prog`` and exit with its status.

    The outputs the command closed are committed (published under their
    final names) only when it returns 0; any other end discards them.
    Usage errors are the usage line and one error line, exit 2.  Library
    errors become one line on stderr and their exit code; a closed
    downstream pipe ends the command quietly (exit by SIGPIPE, like ``cat``);
    Ctrl-C, SIGTERM and SIGHUP run cleanup and exit 130/143/129.  ``--debug`` (or
    ``TARPROC_DEBUG=1``) shows the traceback.  ``extra`` (a dict) reaches the
    command as ``args.extra`` (kujob's command after ``--``)."""
    from typer._click.exceptions import ClickException, UsageError as ClickUsageError
    from typer.main import get_command

    argv = sys.argv[1:] if argv is None else list(argv)
    from .guards import hold_closed_std_fds

    hold_closed_std_fds()
    _std_streams()
    from ..runtime.procs import default_sigchld

    default_sigchld()  # started with SIGCHLD ignored: exit statuses would be lost
    if signal.getsignal(signal.SIGINT) is interrupted_early:  # (imported: Ctrl-C is KeyboardInterrupt again)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    debug = "--debug" in argv or os.environ.get("TARPROC_DEBUG") == "1"
    signal.signal(signal.SIGTERM, on_sigterm)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL:  # not under nohup
        signal.signal(signal.SIGHUP, on_sigterm)
    code = 0
    from ..sinks.output import CommitGate

    try:
        # Outputs commit only when the command exits 0 (the commit hook).
        with CommitGate() as gate:
            code = _once(get_command(cmd.app)).main(argv, prog_name=prog, standalone_mode=False, obj=extra)
            code = code if isinstance(code, int) else 0
            if code == 130:
                _drop_stdout()
                print(f"{prog}: interrupted", file=sys.stderr)
            _flush_stdout()
            if code == 0:
                gate.commit()
    except BrokenPipeError:
        _quiet_sigpipe()
    except ClickException as e:
        if isinstance(e, ClickUsageError):
            _usage_error(prog, e)
        else:
            print(f"{prog}: error: {_clip(e.format_message())}", file=sys.stderr)
        code = EXIT_USAGE
    except typer.Abort:  # Ctrl-C, as click reports it
        _drop_stdout()
        print(f"{prog}: interrupted", file=sys.stderr)
        code = 130
    except TarprocError as e:
        if debug:
            import traceback

            traceback.print_exc()
        print(f"{prog}: {_clip(e.text(_name_chars()))}", file=sys.stderr)
        code = e.exit_code
    except KeyboardInterrupt:
        _drop_stdout()
        print(f"{prog}: interrupted", file=sys.stderr)
        code = 130
    except Terminated as e:
        _drop_stdout()
        code = e.code
    except MemoryError:
        print(f"{prog}: out of memory", file=sys.stderr)
        code = EXIT_USAGE
    except OSError as e:
        if debug:
            import traceback

            traceback.print_exc()
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        from ..errors import is_write_error

        code = EXIT_FAILED if is_write_error(e) else EXIT_USAGE  # (a write path not named yet: still exit 1)
        where = where or ("write failed: " if code == EXIT_FAILED else "")
        if not where and _stdout_closed():  # a text command writing to a stdout closed at start
            where, code = "stdout: write failed: ", 1
            _drop_stdout()
        print(f"{prog}: {_clip(where + str(e.strerror or e))}", file=sys.stderr)
    except Exception as e:  # a bug: still one line, traceback on request
        if debug:
            import traceback

            traceback.print_exc()
        print(f"{prog}: internal error: {type(e).__name__}: {_clip(str(e))} (run with --debug for the traceback)",
              file=sys.stderr)
        code = EXIT_USAGE
    try:
        _flush_stdout()
    except BrokenPipeError:
        _quiet_sigpipe()
    except TarprocError as e:  # (the error that stopped the command may have been this one, said already)
        if code == 0:
            print(f"{prog}: {_clip(e.text(_name_chars()))}", file=sys.stderr)
            code = e.exit_code
    sys.exit(code)


def _once(click_cmd):
    """``click_cmd`` refusing an option that takes one value given twice
    (``-c 'x' -c2`` ran ``2``): one line, exit 2, for every command."""
    from typer._click.exceptions import ClickException

    make = click_cmd.make_parser

    def make_parser(ctx):
        parser = make(ctx)
        parse = parser.parse_args

        def parse_args(args):
            opts, largs, order = parse(args=args)
            seen = set()
            for p in order:
                if p in seen and not (p.multiple or getattr(p, "count", False) or getattr(p, "is_flag", False)):
                    raise ClickException(f"option {'/'.join(p.opts)} given more than once (it takes one value)")
                seen.add(p)
            return opts, largs, order

        parser.parse_args = parse_args
        return parser

    click_cmd.make_parser = make_parser
    return click_cmd


def _std_streams():
    """After :func:`~tarproc.cli.guards.hold_closed_std_fds`: a stderr that was
    closed at start (Python then leaves ``sys.stderr`` as None, and ``print``
    to None writes to stdout, the data) goes to /dev/null; stdout and stderr
    escape what their encoding cannot hold (a non-UTF-8 name on a strict
    ``PYTHONIOENCODING=utf-8``) instead of failing."""
    import io

    from ..core.limits import escaping_stream

    if sys.stderr is None:
        sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False), encoding="utf-8",
                                      errors="backslashreplace", write_through=True)
    # closed stdin or stdout: streams over the /dev/null held there, whose
    # reads (stdin) and writes (stdout) fail with EBADF as on a closed
    # descriptor, so a command says "stdout: Bad file descriptor" instead of
    # an internal error on None
    if sys.stdout is None:
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), encoding="utf-8", errors="strict")
    if sys.stdin is None:
        sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding="utf-8", errors="surrogateescape")
    out = sys.stdout
    buffered = type(getattr(out, "buffer", None)) is io.BufferedWriter
    raw = getattr(out.buffer, "raw", None) if buffered else getattr(out, "buffer", None)
    if isinstance(out, io.TextIOWrapper) and type(raw) is io.FileIO and raw.fileno() == 1:
        # a text command's failed write names stdout, exit 1 (not a bare errno, exit 2)
        raw = _Stdout(1, "wb", closefd=False)
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw) if buffered else raw, encoding=out.encoding,
                                      errors=out.errors, line_buffering=out.line_buffering,
                                      write_through=out.write_through)
    escaping_stream(sys.stdout)
    escaping_stream(sys.stderr)


class _Stdout(io.FileIO):
    """stdout's file for the text commands (``print``): a write that fails
    (a full disk, a closed stdout) is an :class:`~tarproc.errors.OutputError`
    naming stdout; a closed pipe stays a ``BrokenPipeError``."""

    def write(self, b):
        try:
            return super().write(b)
        except BrokenPipeError:
            raise
        except OSError as e:
            from ..errors import OutputError

            _drop_stdout()  # what is still buffered cannot fail again at exit
            raise OutputError(f"stdout: write failed: {e.strerror or e}") from None


def _flush_stdout():
    """Flush what is buffered for stdout; a write that fails (other than a
    closed pipe: stdout closed at start, a full disk) is an
    :class:`~tarproc.errors.OutputError` naming stdout, and what is left in
    the buffer is dropped, so the exit cannot fail on it again."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        from ..errors import OutputError

        _drop_stdout()
        raise OutputError(f"stdout: write failed: {e.strerror or e}") from None



def _stdout_closed():
    """Whether stdout was closed at start (fd 1 holds /dev/null opened for
    reading: :func:`~tarproc.cli.guards.hold_closed_std_fds`)."""
    import fcntl

    try:
        return fcntl.fcntl(1, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    except OSError:
        return True


def _drop_stdout():
    """After a signal: what is still buffered for stdout is dropped (stdout
    now goes to /dev/null), so the exit cannot block on a pipe nobody reads."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def _clip(message):
    """Every message line goes through the one function that makes text
    safe to show (credentials removed, controls escaped, lines bounded to
    four times ``TARPROC_NAME_CHARS``)."""
    from ..core.limits import message_text

    return message_text(message, 4 * _name_chars())


def _name_chars():
    """``TARPROC_NAME_CHARS`` (read here, at the edge; a bad value is
    reported by the command itself, through ``args.settings``)."""
    try:
        from ..settings import Settings

        return Settings.from_environ(os.environ).name_chars
    except Exception:  # (this bounds the message of any error, its own too)
        from ..core.limits import NAME_CHARS

        return NAME_CHARS


def _quiet_sigpipe():
    """Downstream closed the pipe: end as a Unix tool does, by SIGPIPE,
    without a message (cleanup in ``finally`` blocks has already run)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
    except OSError:
        pass
    sys.stderr.flush()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    os._exit(141)


# ---------------------------------------------------------------- inputs


def refuse_terminal(prog, urls, what="a tar archive", allow_tty=None):
    """No input named and stdin is a terminal: nobody types a tar archive,
    so say what is wanted instead of waiting silently (exit 2), unless
    ``allow_tty`` (default: ``$TARPROC_ALLOW_TTY``)."""
    if allow_tty is None:
        allow_tty = bool(os.environ.get("TARPROC_ALLOW_TTY"))
    if "-" in urls and sys.stdin is not None and sys.stdin.isatty() and not allow_tty:
        raise UsageError(f"reading {what} from stdin, which is a terminal: give a file or URL, or pipe "
                         f"one in (see {prog} --help)")


#: Up to this many input URLs are expanded ahead (a list); beyond, the rest
#: stays lazy (an iterator), so a pattern naming 10^8 URLs costs nothing.
URLS_AHEAD = 1000


def open_inputs(args, prog=None, tar=True):
    """The input URLs from positional arguments and ``-T`` (stdin when none
    is given; for tar input, refused when stdin is a terminal; for text, a
    note says where the text is read from).  A list when there are at most
    :data:`URLS_AHEAD` of them, else an iterator that expands brace patterns
    and reads the file list as the inputs are used."""
    import itertools

    from ..sources.shardlist import expand_urls

    from .guards import refuse_reading_stdout

    lazy = expand_urls(args.inputs or [], getattr(args, "filelist", None), settings=args.settings)
    urls = list(itertools.islice(lazy, URLS_AHEAD + 1))
    if tar:
        refuse_terminal(prog or args.prog or current_prog(), urls, allow_tty=args.settings.allow_tty)
    else:
        note_terminal(prog or args.prog or current_prog(), urls)
    # the one place every command's inputs pass: `cmd in.tar > in.tar` is refused here
    urls = refuse_reading_stdout(urls if len(urls) <= URLS_AHEAD else itertools.chain(urls, lazy))
    return _refuse_outputs_on_inputs(args, urls)


def _refuse_outputs_on_inputs(args, urls):
    """Outputs that are never an edited copy of an input (``--failed-keys``,
    ``--grid``) must not be an input, and no output may be a list the
    command reads (``--keys``, ``--exclude-keys``, ``-T``): writing it
    would destroy it (the commit replaces it).  ``-o`` naming an input
    shard stays allowed: tarcat/tarsort/tarproc write a new copy and
    replace it only when complete."""
    from .guards import refuse_overwriting_inputs

    side = [getattr(args, "filelist", None)]
    if hasattr(args, "failed_keys") or hasattr(args, "exclude_keys"):  # (elsewhere --keys names fields)
        side += [getattr(args, "keys", None), getattr(args, "exclude_keys", None)]
    side = [f for f in side if isinstance(f, str) and f != "-"]
    own = [o for o in (getattr(args, "failed_keys", None), getattr(args, "grid", None)) if isinstance(o, str)]
    output = getattr(args, "output", None)
    if (args.prog or current_prog()) in ("tarsplit", "tarjoin"):
        output = None  # (a prefix or pattern of several outputs; tarjoin checks its own)
    outputs = [o for o in (getattr(args, "grid", None), output) if isinstance(o, str)]
    if side and outputs:
        refuse_overwriting_inputs(outputs, side, "it is a list this command reads")
    failed = getattr(args, "failed_keys", None)
    # (--failed-keys may be the --keys list: read whole at the start, replaced at the end; rerunning the failures)
    lists = [f for f in side if f != getattr(args, "keys", None)]
    if isinstance(failed, str) and lists:
        refuse_overwriting_inputs([failed], lists, "it is a list this command reads")
    return refuse_overwriting_inputs(own, urls, "it is not a copy of the input") if own else urls


def note_terminal(prog, urls, what="text"):
    """Text read from a terminal is possible (typed, or pasted): say so
    instead of waiting silently."""
    if "-" in urls and sys.stdin is not None and sys.stdin.isatty():
        print(f"{prog}: reading {what} from the terminal (end with Ctrl-D; see {prog} --help)", file=sys.stderr,
              flush=True)


def _sizes(urls):
    """The total size of local, uncompressed input files (progress in
    bytes), or ``None`` when any input is not such a file."""
    if not isinstance(urls, list) or len(urls) > 10000:
        return None
    total = 0
    sizes = []
    for url in urls:
        if url == "-" or ":" in url.split("/", 1)[0]:
            return None
        try:
            with open(url, "rb") as f:
                magic = f.read(4096)
                size = os.fstat(f.fileno()).st_size
        except OSError:
            return None
        from ..sources.compression import codec_of

        if codec_of(magic) is not None:
            return None
        sizes.append(size)
        total += size
    return sizes


def group_size_of(args):
    """The bytes of ``--group-size`` (``None``: the default)."""
    value = getattr(args, "group_size", None)
    if value is None:
        return None
    try:
        size = parse_size(value)
    except (ValueError, UsageError):
        size = -1
    if not isinstance(size, int) or size < 0:
        raise UsageError(f"--group-size {value}: not a size (1MiB, 512k, 0 for one stream)")
    return size


def spooler_of(args, pass_through=False):
    """The :class:`~tarproc.core.blob.Spooler` of ``--blob-threshold`` (or
    ``TARPROC_BLOB_THRESHOLD``), ``--tmpdir`` and ``TARPROC_SAMPLE_MEMORY``
    (``pass_through``: for commands that never look at field bytes)."""
    from ..core.blob import Spooler

    threshold = getattr(args, "blob_threshold", None)
    tmpdir = getattr(args, "tmpdir", None)
    if tmpdir is not None and not os.path.isdir(tmpdir):
        raise UsageError(f"--tmpdir {tmpdir}: no such directory")
    settings = args.settings
    return Spooler(parse_size(threshold) if threshold is not None else settings.blob_threshold, tmpdir,
                   PASS_THROUGH_REGION if pass_through else None, sample_memory=settings.sample_memory)


def resume_of(args):
    """The keywords of resuming broken downloads (``retries``,
    ``stall_timeout``) from ``--retries``, ``$TARPROC_RETRIES`` and
    ``$TARPROC_STALL_TIMEOUT`` (seconds without a byte; 0: no limit)."""
    settings = args.settings
    retries = getattr(args, "retries", None)
    if retries is None:
        retries = settings.retries
    return {"retries": retries, "stall_timeout": settings.stall_timeout or None}


def read_inputs(args, rep, stats, urls=None, pass_through=False, spooler=None, raw=False):
    """The samples of every input in turn (``-v`` names each one).  When
    the progress line is on and every input is a local uncompressed file,
    its total is their size and the position is estimated from the members
    read (each: a 512-byte header and its data rounded up to 512).  ``raw``:
    samples carry the bytes they were read from, for a writer to copy
    (only for commands that write samples unchanged, in order)."""
    # the inputs are named (and checked: open_inputs) now, before the command writes anything
    urls = open_inputs(args) if urls is None else urls
    return _read_inputs(args, rep, stats, urls, pass_through, spooler, raw)


def _read_inputs(args, rep, stats, urls, pass_through, spooler, raw):
    from ..core.rules import is_meta
    from ..sources.samples import iter_samples

    bad = bad_shards_of(args, rep, spooler)
    resume = resume_of(args)
    sizes = _sizes(urls) if rep.progress else None
    if sizes is not None:
        rep.bar.total, rep.bar.unit, rep.position = sum(sizes), "B", 0
    base = 0
    spooler = spooler_of(args, pass_through) if spooler is None else spooler
    for n, url in enumerate(urls):
        from ..core.limits import shown

        rep.info(f"reading {'stdin' if url == '-' else shown(url)}")
        samples = iter_samples([url], stats, strict=args.strict, warn=rep.warn, stall=rep.stall,
                               spooler=spooler, raw=raw, on_bad_shard=bad, settings=args.settings, **resume)
        if sizes is None:
            yield from samples
            continue
        here = 0
        for sample in samples:
            here += sum(512 + (len(v) + 511) // 512 * 512 for k, v in sample.items()
                        if not is_meta(k) and hasattr(v, "__len__"))
            rep.position = base + min(here, sizes[n])
            yield sample
        base += sizes[n]
        rep.position = base
    end_bad_shards(bad, rep, args, stats)


def bad_shards_of(args, rep, spooler=None):
    """The :class:`~tarproc.sources.badshards.BadShards` of ``--on-bad-shard``
    and ``--max-bad-shards`` (``None`` for the default, fail), reporting on
    stderr whatever the verbosity."""
    policy = getattr(args, "on_bad_shard", None) or "fail"
    limit = getattr(args, "max_bad_shards", None)
    if policy == "fail":
        if limit is not None:
            raise UsageError("--max-bad-shards goes with --on-bad-shard skip or partial")
        return None
    from ..sources.badshards import BadShards

    def report(line):
        rep.say(line)
        if bad.limit is not None and bad.count > bad.limit and not bad.ended:
            # the allowance is spent: the run fails whatever comes next, so it stops reading here
            from ..errors import TooManyBadShards

            bad.ended = True
            bad.max_bad = bad.limit
            raise TooManyBadShards(bad.summary() + "; stopped there, the shards after it not read")

    bad = BadShards(policy, None, report, spooler)  # the limit: checked once spent (report), or at the end
    bad.limit = limit if limit is not None else None if getattr(args, "ignore_errors", None) else 0
    bad.ended = False
    rep.bad_shards = bad
    return bad


def end_bad_shards(bad, rep, args=None, stats=None):
    """At the end of the input (once): the summary line of the bad shards,
    and :class:`~tarproc.errors.TooManyBadShards` (exit 1) past
    ``--max-bad-shards``.  :meth:`Reporter.done` calls it too, for a
    command that stopped reading early."""
    if bad is None or bad.ended:
        return
    bad.ended = True
    if bad.count:
        bad.max_bad = bad.limit
        inputs = stats.inputs if stats is not None else None
        if not bad.exceeded() and not bad.nothing_read(inputs):
            rep.say(bad.summary(inputs))
        bad.check(inputs)
        if bad.nothing_read(inputs):  # exit 1, the output not committed
            raise TooManyBadShards(f"every shard was bad and no sample was read: {bad.summary(inputs)}")


def missing_keys_warning(rep, keys, keyfile):
    """``on_missing`` of :func:`~tarproc.stages.keys.select_keys` for
    ``--keys FILE`` (tarcat, tarproc): one warning naming a few listed keys
    never found, written as in the key list."""
    from ..core.keylines import escape_key

    def missing(n, examples):
        shown = ", ".join(f"'{escape_key(k)}'" for k in examples)
        rep.warn(f"{n} of the {len(keys)} keys listed in {keyfile} were never found (e.g. {shown})")

    return missing


def _said_if_empty(stage, option, args):
    """``stage`` (``--skip``, ``--slice``), with one warning when the input
    had samples and the stage let none through (an empty output is a
    result: say why).  Nothing is said when the reading stops early."""

    def run(samples):
        seen = [0]

        def counted():
            for sample in samples:
                seen[0] += 1
                yield sample

        passed = 0
        for sample in stage(counted()):
            passed += 1
            yield sample
        if seen[0] and not passed and not getattr(args, "quiet", False):
            n = seen[0]
            said = _clip(f"{option} left none of the {n} sample{'s' * (n != 1)} read")
            print(f"{args.prog or current_prog()}: warning: {said}", file=sys.stderr, flush=True)

    return run


def selection_stages(args, middle=(), slice_parser=None):
    """Stages for the shared selection options, in their order of meaning:
    ``--skip``, ``--slice``, then ``middle`` (filters such as ``-f``), then
    ``-c/--count`` (which counts what the filters let through)."""
    import tarproc as S

    stages = []
    if getattr(args, "skip", 0):
        stages.append(_said_if_empty(S.skip(args.skip), f"--skip {args.skip}", args))
    if getattr(args, "slice", None):
        sl = (slice_parser or S.parse_slice)(args.slice)
        stages.append(_said_if_empty(S.slice_samples(sl.start, sl.stop, sl.step), f"--slice {args.slice}", args))
    stages.extend(middle)
    if getattr(args, "count", None) is not None:
        stages.append(S.take(args.count))
    return stages

