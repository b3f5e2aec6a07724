"""The library's exceptions.

Every error the library raises on purpose is a :class:`TarprocError`.  Each
carries the exit code a command should end with, so the CLI layer turns any of
them into one line on stderr and that code, and never needs a traceback.
"""

from .core.shorten import quote, shorten

EXIT_OK = 0
EXIT_FAILED = 1  # some samples (or an output) failed
EXIT_USAGE = 2  # bad usage, unreadable or damaged input


class TarprocError(Exception):
    """Base class of every error raised by tarproc on purpose."""

    exit_code = EXIT_USAGE

    def text(self, name_chars=None):
        """The message with the names this error carries (:class:`BadArchive`'s
        source, :class:`BadSample`'s key and source) cut to ``name_chars``
        characters (``TARPROC_NAME_CHARS``: a command shows its errors so;
        ``str(error)`` uses the default).  Names inside the problem text are
        cut where the error is made, deep in the library (a tar header's
        parser, a writer), where no settings reach: at the default."""
        return str(self)


class UsageError(TarprocError):
    """The caller asked for something that cannot be done (bad option value)."""


class BadInput(TarprocError):
    """An input cannot be opened or read (missing file, failed download)."""


class BadArchive(BadInput):
    """The tar stream is damaged or malicious.

    ``source`` names the input, ``offset`` is the byte offset (in the
    uncompressed stream) of the header or data where the problem is.
    ``bound``: the ``TARPROC_*`` variable of the bound the archive went
    over, when that is the problem (the archive may be sound: the bound was
    set lower than it needs), else ``None``.
    """

    def __init__(self, source, offset, problem, bound=None):
        self.source = source
        self.offset = offset
        self.problem = problem
        self.bound = bound
        super().__init__(self.text())

    def text(self, name_chars=None):
        source, offset = shorten(self.source, name_chars), self.offset
        where = f"{source}: offset {offset}" if offset is not None else f"{source}"
        return f"{where}: {self.problem}"


class BadSample(BadInput):
    """A sample breaks the sample rules (duplicate field, unwritable key)."""

    def __init__(self, key, problem, source=None):
        self.key = key
        self.source = source
        self.problem = problem
        super().__init__(self.text())

    def text(self, name_chars=None):
        prefix = f"{shorten(self.source, name_chars)}: " if self.source else ""
        what = "sample" if self.key is None else f"sample {quote(self.key, name_chars)}"
        return f"{prefix}{what}: {self.problem}"


class OutputError(TarprocError):
    """An output could not be written or committed (disk full, upload failed)."""

    exit_code = EXIT_FAILED


def write_failed(path, what, error, hint=None):
    """The error for a write that failed (a full disk, a quota, a file
    size limit, a failing device): one line naming the file and what was
    being written there, exit 1 (an output not written).  Every write path
    of the library and the commands says so: outputs, spool files,
    sidecars, indexes, key lists, copies of stdin, sort runs."""
    hint = f" ({hint})" if hint else ""
    return OutputError(f"{path}: cannot write {what}: {getattr(error, 'strerror', None) or error}{hint}")


def is_write_error(error):
    """Whether an ``OSError`` says the storage is full or failing (no space,
    quota, file too large, I/O error) rather than that the path is wrong."""
    import errno

    return getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


class writing:
    """``with writing(path, what):`` turns an ``OSError`` of the writes
    inside (not a closed pipe) into :func:`write_failed`'s error."""

    def __init__(self, path, what, hint=None):
        self.path, self.what, self.hint = path, what, hint

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if kind is not None and issubclass(kind, OSError) and not issubclass(kind, BrokenPipeError):
            raise write_failed(self.path, self.what, error, self.hint) from None
        return False


class SampleFailed(TarprocError):
    """Processing a sample failed and the error policy says stop."""

    exit_code = EXIT_FAILED


class TooManyFailures(SampleFailed):
    """More samples failed than ``max_failures`` allows: the run stopped at
    the failure that spent the allowance (``failed``, ``allowed``)."""

    def __init__(self, failed, allowed):
        self.failed, self.allowed = failed, allowed
        super().__init__(f"{failed} sample{'s' * (failed != 1)} failed, more than max_failures={allowed}: stopped")


def describe_exit(code):
    """How a child process ended, for messages: ``exit status 3``,
    ``killed by SIGKILL``, or ``did not start`` (``None``)."""
    if code is None:
        return "did not start"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class TooManyBadShards(TarprocError):
    """More shards were damaged or unreadable (and skipped) than allowed."""

    exit_code = EXIT_FAILED
