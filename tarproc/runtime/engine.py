"""What both engines share beside their window (:mod:`tarproc.runtime.window`):
a sample's :class:`Result`, the error policy (``skip``, ``ignore``,
``abort``) applied to results in the consuming thread (:func:`handler`), and
the default reporting of failures and of commands' output on stderr."""

import os
import sys

from ..core.limits import quote
from ..errors import SampleFailed, TooManyFailures, UsageError


ERROR_MODES = ("skip", "ignore", "abort")
#: Lines of a failed command's output shown in its report.
TAIL_LINES = 10
#: Failures reported with their output's last lines; later ones get one line
#: each (key and reason), so a run where most samples fail stays readable.
DETAILED_FAILURES = 20


# ---------------------------------------------------------------- helpers


def default_parallel():
    """All the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def stderr_report(prog):
    """The default ``on_error``: ``prog: message`` on stderr, each line clipped."""

    def report(message):
        from ..core.limits import message_text

        sys.stderr.flush()
        print(f"{prog}: {message_text(message)}", file=sys.stderr, flush=True)

    return report


def stderr_echo(data):
    """The default echo of a command's output (bytes): copied to stderr."""
    if data:
        sys.stderr.flush()
        try:
            sys.stderr.buffer.write(data)
            sys.stderr.buffer.flush()
        except (AttributeError, ValueError):
            sys.stderr.write(data.decode("utf-8", "replace"))
            sys.stderr.flush()


def _tail(data, n=TAIL_LINES, limit=None):
    """The last ``n`` lines of a command's output for a message; at most
    ``limit`` bytes of it (default :data:`~tarproc.core.limits.TAIL_BYTES`,
    ``TARPROC_TAIL_BYTES``) are looked at."""
    from ..core.limits import TAIL_BYTES

    limit = TAIL_BYTES if limit is None else limit
    text = bytes(data[-limit:]).decode("utf-8", "replace").rstrip("\n")
    if not text:
        return ""
    lines = text.splitlines()[-n:]
    return "\n" + "\n".join("  | " + line for line in lines)


def _traceback_signature(log, limit=None):
    """What makes two tracebacks the same error: their frame lines and the
    exception's type (not its message, which names the sample's values)."""
    from ..core.limits import TAIL_BYTES

    lines = bytes(log[-(TAIL_BYTES if limit is None else limit):]).decode("utf-8", "replace").rstrip("\n").splitlines()
    frames = tuple(line for line in lines if line.startswith("  File "))
    return frames, lines[-1].split(":", 1)[0] if lines else ""


def check_max_failures(max_failures):
    """Refuse a ``max_failures`` that is not ``None`` or a whole number >= 0."""
    if max_failures is not None and (type(max_failures) is not int or max_failures < 0):
        raise UsageError(f"max_failures must be a whole number >= 0 or None, not {max_failures!r}")


def check_mode(error_handling):
    """Refuse an error policy that is not one of :data:`ERROR_MODES`."""
    if error_handling not in ERROR_MODES:
        raise UsageError(f"error handling must be one of {', '.join(ERROR_MODES)}, not {error_handling!r}")


# ---------------------------------------------------------------- results


class Result:
    """What one sample's job hands back to the consuming thread: the
    outputs, or an error (with the command's output or the function's
    traceback in ``log``)."""

    __slots__ = ("key", "outputs", "error", "log", "sample", "fatal", "note")

    def __init__(self, key, outputs=(), error=None, log=b"", sample=None, fatal=False, note=None):
        self.note = note  # a line for on_error that is not a failure (files a command left uncollected)
        self.fatal = fatal  # stops the run whatever the error policy (command not found)
        self.key = key
        self.outputs = outputs  # list of samples
        self.error = error  # None or message (str)
        self.log = log  # the command's output (bytes)
        self.sample = sample  # the input (function mode, for "ignore")


def handler(error_handling, stats, on_error, echo, quiet_log, tail_bytes=None, max_failures=None):
    """``handle(result)``, the consuming thread's part: count, report, apply the error policy.  An
    ``on_error`` with a ``failed(key)`` method is also given the key of
    every failed sample (``tarproc --failed-keys``).  ``tail_bytes``: the
    bytes of a failed sample's output (or traceback) looked at for its
    message (default :data:`~tarproc.core.limits.TAIL_BYTES`).
    ``max_failures``: once more samples than this have failed (each
    reported), :class:`~tarproc.errors.TooManyFailures` stops the run there
    instead of running on to an output that will not be written (the work
    in flight is dropped as when the consumer closes the iterator)."""

    reported = 0
    tracebacks = {}  # a traceback's frames and exception type -> the first key it was shown for
    failed_key = getattr(on_error, "failed", None)

    def handle(result):
        nonlocal reported
        if result.note is not None:
            on_error(result.note)
        if result.error is not None:
            if stats is not None:
                stats.failed += 1
            if failed_key is not None:
                failed_key(result.key)
            reported += 1
            traceback = bool(result.log) and bytes(result.log[:10]) == b"Traceback "
            # a command's last lines; a --map traceback (the user's frames) whole, within TAIL_BYTES
            tail = _tail(result.log, 200 if traceback else TAIL_LINES, tail_bytes) \
                if result.log and reported <= DETAILED_FAILURES else ""
            if tail and traceback:  # --map: the same error shown in full once
                sig = _traceback_signature(result.log, tail_bytes)
                if sig in tracebacks:
                    tail = f" (traceback as for sample {quote(tracebacks[sig])})"
                elif len(tracebacks) < 1000:
                    tracebacks[sig] = result.key
            if reported == DETAILED_FAILURES + 1:
                tail = (f"\n  (more than {DETAILED_FAILURES} samples failed: from here on, "
                        "one line each, without their output)")
            if result.fatal:
                raise SampleFailed(f"sample {result.key!r}: {result.error}: stopped")
            # one vocabulary: a sample whose command or function fails is
            # "failed" (here and in the summary); "skipped" is only for
            # samples left out on purpose (a filter, a command that made nothing)
            what = "failed: aborting" if error_handling == "abort" else (
                "failed: kept what it produced" if error_handling == "ignore" else "failed: not written")
            message = f"sample {quote(result.key)}: {result.error} ({what}){tail}"
            if error_handling == "abort":
                raise SampleFailed(message)
            on_error(message)
            if max_failures is not None and reported > max_failures:
                raise TooManyFailures(reported, max_failures)
            if error_handling == "skip":
                return
        elif result.log and not quiet_log:
            echo(result.log)
        if not result.outputs:
            if stats is not None and result.error is None:
                stats.skipped += 1
            return
        yield from result.outputs

    return handle
