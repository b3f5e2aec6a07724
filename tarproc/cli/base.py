"""What every command shares: option bundles, error-to-exit-code mapping,
signal and broken-pipe handling, verbose and progress output.

Commands are built on :mod:`argparse` (standard library, ~20 ms to start),
not typer (120-200 ms here with pydantic and rich): every stage of a
pipeline pays the start-up, see ``bench/startup.py``.
"""

import argparse
import os
import signal
import sys

from ..errors import EXIT_USAGE, TarprocError, UsageError


class _Version(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("tarproc")
        except PackageNotFoundError:
            v = "unknown (not installed)"
        print(f"{parser.prog} (tarproc) {v}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def make_parser(prog, summary, examples, notes=""):
    """A parser whose help ends with examples (every command has some)."""
    epilog = "examples:\n" + "\n".join("  " + line for line in examples.strip("\n").splitlines())
    if notes:
        epilog += "\n\n" + notes.strip("\n")
    p = _Parser(prog=prog, description=summary, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action=_Version, help="show the version and exit")
    p.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    return p


def add_inputs(p, nargs="*"):
    p.add_argument("inputs", nargs=nargs, metavar="URL",
                   help="input shards: paths, '-', pipe:CMD, http(s)://, gs://, s3://; brace patterns "
                        "like shard-{0000..0146}.tar are expanded (default: stdin)")
    p.add_argument("-T", "--filelist", metavar="FILE", help="read input URLs from FILE, one per line ('-' for stdin)")
    p.add_argument("-b", "--braceexpand", action="store_true", help=argparse.SUPPRESS)


def add_output(p, default="-"):
    p.add_argument("-o", "--output", default=default, metavar="URL",
                   help=f"output URL; compression from the name (.tgz .tar.gz .tar.bz2 .tar.xz .tar.zst) "
                        f"(default: {'stdout' if default == '-' else default})")


def add_selection(p, count_flag=True):
    if count_flag:
        p.add_argument("-c", "--count", type=int, default=None, metavar="N",
                       help="stop after N samples (and stop reading)")
    p.add_argument("-s", "--skip", type=int, default=0, metavar="N", help="skip the first N samples")
    p.add_argument("--slice", default=None, metavar="START:STOP[:STEP]", help="keep samples by index")


def add_fields(p, flag=("-f", "--fields")):
    p.add_argument(*flag, dest="fields", default=None, metavar="SPEC",
                   help="keep only these fields: 'jpg cls'; 'jpg;png' takes the first present; "
                        "'img=jpg;png' renames; samples missing one are skipped")


def add_verbosity(p):
    p.add_argument("-v", "--verbose", action="store_true", help="report inputs and a final summary on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="no warnings, only errors")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show a progress line on stderr (default: when stderr is a terminal)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")


def add_strict(p):
    p.add_argument("--strict", action="store_true",
                   help="treat a shard that ends without the end-of-archive marker as an error")


def parse_size(text):
    """``1e9``, ``100MB``, ``64MiB``, ``1GiB``, ``512k`` to a number of bytes."""
    t = str(text).strip()
    units = {"": 1, "k": 1000, "m": 10**6, "g": 10**9, "t": 10**12,
             "kb": 1000, "mb": 10**6, "gb": 10**9, "tb": 10**12,
             "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "b": 1}
    i = len(t)
    while i and t[i - 1].isalpha():
        i -= 1
    num, unit = t[:i].strip(), t[i:].lower()
    try:
        value = float(num) * units[unit]
    except (ValueError, KeyError):
        raise UsageError(f"bad size {text!r} (use e.g. 1e9, 100MB, 64MiB, 1GiB)") from None
    if value < 0:
        raise UsageError(f"bad size {text!r}: negative")
    return int(value)


class Reporter:
    """Diagnostics on stderr: warnings (unless quiet), verbose lines, and a
    progress line that is shown only on a terminal (or when asked)."""

    def __init__(self, prog, verbose=False, quiet=False, progress=None):
        self.prog = prog
        self.verbose = verbose
        self.quiet = quiet
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._last = 0.0
        self._shown = False

    def warn(self, message):
        if not self.quiet:
            self._clear()
            print(f"{self.prog}: warning: {message}", file=sys.stderr, flush=True)

    def say(self, message):
        """A line on stderr whatever the verbosity (failures, summaries)."""
        self._clear()
        print(f"{self.prog}: {message}", file=sys.stderr, flush=True)

    def info(self, message):
        if self.verbose:
            self._clear()
            print(f"{self.prog}: {message}", file=sys.stderr, flush=True)

    def tick(self, stats):
        if not self.progress:
            return
        import time

        now = time.monotonic()
        if now - self._last < 0.25:
            return
        self._last = now
        sys.stderr.write(f"\r{self.prog}: {stats.read} read, {stats.written} written \x1b[K")
        sys.stderr.flush()
        self._shown = True

    def _clear(self):
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            self._shown = False

    def done(self, stats, force=False):
        self._clear()
        if self.verbose or force:
            print(f"{self.prog}: {stats.summary()}", file=sys.stderr, flush=True)


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


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM so cleanup code runs."""


def _on_sigterm(signum, frame):
    raise Terminated()


def run(prog, main, argv=None):
    """Run ``main(argv)`` as command ``prog`` and exit with its status.

    Library errors become one line on stderr and their exit code; a closed
    downstream pipe ends the command quietly (exit by SIGPIPE, like ``cat``);
    Ctrl-C and SIGTERM run cleanup and exit 130/143.  ``--debug`` (or
    ``TARPROC_DEBUG=1``) shows the traceback."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv or os.environ.get("TARPROC_DEBUG") == "1"
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = main(argv) or 0
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_sigpipe()
    except TarprocError as e:
        if debug:
            import traceback

            traceback.print_exc()
        print(f"{prog}: {e}", file=sys.stderr)
        code = e.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        code = 130
    except Terminated:
        code = 143
    except MemoryError:
        print(f"{prog}: out of memory", file=sys.stderr)
        code = EXIT_USAGE
    except OSError as e:
        if debug:
            import traceback

            traceback.print_exc()
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"{prog}: {where}{e.strerror or e}", file=sys.stderr)
        code = EXIT_USAGE
    except Exception as e:  # a bug: still one line, traceback on request
        if debug:
            import traceback

            traceback.print_exc()
        print(f"{prog}: internal error: {type(e).__name__}: {e} (run with --debug for the traceback)",
              file=sys.stderr)
        code = EXIT_USAGE
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_sigpipe()
    sys.exit(code)


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


def read_inputs(args, rep, stats, urls=None):
    """The samples of every input in turn (``-v`` names each one)."""
    from ..samples import iter_samples

    for url in open_inputs(args) if urls is None else urls:
        rep.info(f"reading {'stdin' if url == '-' else url}")
        yield from iter_samples([url], stats, strict=args.strict, warn=rep.warn)


def selection_stages(args, middle=(), slice_parser=None):
    """Stages for the shared selection options, in their order of meaning:
    ``--skip``, ``--slice``, then ``middle`` (filters such as ``-f``), then
    ``-c/--count`` (which counts what the filters let through)."""
    from .. import samples as S

    stages = []
    if getattr(args, "skip", 0):
        stages.append(S.skip(args.skip))
    if getattr(args, "slice", None):
        sl = (slice_parser or S.parse_slice)(args.slice)
        stages.append(S.slice_samples(sl.start, sl.stop, sl.step))
    stages.extend(middle)
    if getattr(args, "count", None) is not None:
        stages.append(S.take(args.count))
    return stages


def open_inputs(args):
    """The list of input URLs from positional arguments and ``-T``."""
    from ..urls import expand_urls

    return expand_urls(args.inputs, args.filelist)
