"""Opening inputs by URL (outputs: :mod:`tarproc.sinks.output`).

Inputs (:func:`open_source`) and outputs (:func:`open_sink`) are named by URL:

=================  ==========================================================
``-``              stdin / stdout
``path``           a local file; outputs go to a hidden temporary name in the
                   same directory and are renamed when complete
``pipe:CMD``       the stdout (input) or stdin (output) of a shell command
``http(s)://``     ``curl`` (output: HTTP PUT)
``gs://``          ``gsutil cat`` / ``gsutil cp - URL``
``s3://``          ``aws s3api get-object`` / ``aws s3 cp - URL``
                   (``AWS_ENDPOINT_URL`` is passed on as ``--endpoint-url``)
=================  ==========================================================

The schemes and their commands are one table, :mod:`tarproc.runtime.schemes`;
the command of each scheme can be replaced (``settings=``, a
:class:`~tarproc.settings.Settings`; at the command line the environment variables
``TARPROC_READ_<SCHEME>`` or ``TARPROC_WRITE_<SCHEME>``, scheme in upper case,
``HTTP``, ``HTTPS``, ``GS``, ``S3``), a shell command in which ``{url}`` stands
for the quoted URL (and ``{bucket}``, ``{key}`` for its parts).  A command
that exits non-zero is an error naming the URL.  Reads of ``http(s)``,
``s3`` and ``gs`` URLs with the commands of this module resume where they
broke (:mod:`tarproc.sources.resume`); these commands are the plain reads
of ``retries=0``.

Compression is detected from the first bytes of an input (gzip, bzip2, xz,
zstd) and chosen from the name of an output (``.tgz``/``.gz``, ``.bz2``,
``.xz``, ``.zst``).
"""

import io
import os

from ..core.limits import hide_credentials
from ..errors import BadInput
from ..runtime.child import Child, stop_tracked
from ..runtime.schemes import as_url, command, endpoint, fill_command, override, scheme, scheme_of  # noqa: F401
from .compression import wrap_compression
from .raw import BUFSIZE, REGION_BUFSIZE, FdReader  # noqa: F401
from .resume import RETRIES, STALL_TIMEOUT, Resuming, check_settings


def cannot_open(url, error):
    """The message for an input file that cannot be opened; a missing name
    with glob characters says where they are expanded (names given as
    arguments; never names read from a list, an index or a spec)."""
    import errno

    from ..core.limits import shown

    message = f"{shown(url)}: cannot open: {error.strerror}"
    if error.errno == errno.ENOENT and any(c in url for c in "*?["):
        message += (" (* ? [ ] are expanded in the names given as arguments, not in names read from a list, "
                    "an index or a spec: list the names, or use a brace pattern such as 'shard-{0000..0146}.tar')")
    return message


def stop_sources():
    """Kill every input command and decoder (its whole process group) this
    process started and has not closed: for a signal handler or an exit
    path that cannot unwind to the readers (a job process told to stop)."""
    stop_tracked()


def is_stdout(st):
    """Whether ``st`` (an ``os.stat_result``) is the file standard output
    writes to: an input that is refused ("input file is output file")."""
    try:
        out = os.fstat(1)
    except OSError:
        return False
    return (out.st_dev, out.st_ino) == (st.st_dev, st.st_ino)


def open_source(url, decompress=True, stall=None, retries=RETRIES, stall_timeout=STALL_TIMEOUT, settings=None):
    """Open an input by URL for reading; returns a buffered binary stream with
    ``.url`` and ``.compression`` attributes.  Compressed input is decoded.
    ``stall`` (a :class:`~tarproc.runtime.stall.Stall`) is called before a
    read that would block on an empty pipe.

    An ``http(s)://``, ``s3://`` or ``gs://`` read that breaks (reset, short
    body, no byte for ``stall_timeout`` seconds; ``None``: no limit) is
    resumed where it broke, up to ``retries`` times in a row, after checking
    that the object is still the same (:mod:`tarproc.sources.resume`);
    ``retries=0`` reads with one plain request as before.  ``-``, paths and
    ``pipe:`` cannot resume: they fail as they end.  ``settings`` (a
    :class:`~tarproc.settings.Settings`): its ``READ_<SCHEME>`` commands and
    compression-bomb bounds (default: none, the default bounds)."""
    check_settings(retries, stall_timeout)
    url = as_url(url)
    row = scheme(url)
    return _READERS[row.reader](url, row, decompress, stall, retries, stall_timeout, settings)


def read_all(url, limit, what, retries=RETRIES, settings=None):
    """The bytes of ``url`` as stored (not decoded), at most ``limit``: a
    longer one is a ``BadInput`` "``url``: ``what``" once ``limit + 1``
    bytes are read (so memory stays bounded).  ``retries``, ``settings``:
    as :func:`open_source`."""
    stream = open_source(url, decompress=False, retries=retries, settings=settings)
    try:
        data = stream.read(limit + 1)
    finally:
        stream.close()
    if len(data) > limit:
        raise BadInput(f"{url}: {what}")
    return data


def _open_stdin(url, row, decompress, stall, retries, stall_timeout, settings):
    raw = FdReader(0, "-" if url == "-" else url, closefd=False, stall=stall)
    return _finish_opening(raw, "-", url, row.name, decompress, settings)


def _open_file(url, row, decompress, stall, retries, stall_timeout, settings):
    try:
        fd = os.open(url, os.O_RDONLY)
    except OSError as e:
        raise BadInput(cannot_open(url, e)) from None
    import stat

    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise BadInput(f"{url}: is a directory")
    if stat.S_ISREG(st.st_mode) and is_stdout(st):
        # `tarcat a.tar >> a.tar` would read its own output forever
        # (and `> a.tar` has already been emptied by the shell), as GNU cat says
        os.close(fd)
        raise BadInput(f"{url}: input file is output file (standard output)")
    return _finish_opening(FdReader(fd, url), url, url, row.name, decompress, settings)


def _open_pipe(url, row, decompress, stall, retries, stall_timeout, settings):
    return _open_command(url[5:], url, row, decompress, stall, "command", settings)


def _open_client(url, row, decompress, stall, retries, stall_timeout, settings):
    own = override("READ", row.name, settings) is None
    if own and row.resumable and retries:
        shown = hide_credentials(url)
        raw = Resuming(url, row.name, shown, InputChildren(shown, _tail_bytes(settings)), retries=retries,
                       stall_timeout=stall_timeout, stall=stall, settings=settings)
        try:
            return _finish_opening(raw, url, url, row.name, decompress, settings)
        except BaseException:
            raw.close()
            raise
    cmd = command("READ", url, settings)
    what = cmd.split()[0]
    if own:
        # our own one-program templates: the shell becomes the program, which so
        # keeps the parent-death signal (a reader killed outright leaves no curl)
        cmd = "exec " + cmd
    return _open_command(cmd, url, row, decompress, stall, what, settings)


def _open_command(cmd, url, row, decompress, stall, what, settings=None):
    child = start_input(cmd, url, tail_bytes=_tail_bytes(settings))
    raw = FdReader(child.stdout.fileno(), child.name, child, closefd=False, what=what, stall=stall)
    raw._keep = child.stdout
    return _finish_opening(raw, url, url, row.name, decompress, settings)


#: How each kind of input (:attr:`~tarproc.runtime.schemes.Scheme.reader`) is opened.
_READERS = {"stdin": _open_stdin, "file": _open_file, "pipe": _open_pipe, "client": _open_client}


def _tail_bytes(settings):
    return settings.tail_bytes if settings is not None else None


def start_input(cmd, url, pass_fds=(), tail_bytes=None):
    """Start an input command (a :class:`~tarproc.runtime.child.Child`
    whose stdout we read), tracked for :func:`stop_sources`; the last
    ``tail_bytes`` of its stderr are kept for its error message
    (``TARPROC_TAIL_BYTES``; ``None``: the default).  (Being outside
    the terminal's foreground group, it cannot prompt on the terminal: a
    ``pipe:ssh ...`` source needs keys or an agent, as in any pipeline.)"""
    try:
        return Child(cmd, url, stdout="pipe", stderr="tail", pass_fds=pass_fds, track=True, tail_bytes=tail_bytes)
    except OSError as e:
        raise BadInput(Child.start_error(hide_credentials(url), cmd, e)) from None


class InputChildren:
    """How :class:`~tarproc.sources.resume.Resuming` starts and ends the
    commands of one input: as :func:`start_input` does."""

    def __init__(self, shown="", tail_bytes=None):
        self.shown = shown
        self.tail_bytes = tail_bytes

    def start(self, cmd, pass_fds=()):
        return start_input(cmd, self.shown, pass_fds, self.tail_bytes)

    def finish(self, child):
        """Wait for a command whose output ended: ``(status, stderr tail)``."""
        rc = child.wait()
        tail = child.tail_line()
        child.stdout.close()
        return rc, tail

    def kill(self, child):
        """End a command and everything it started (its process group)."""
        child.kill()
        child.stdout.close()


def _finish_opening(raw, name, url, scheme, decompress, settings=None):
    stream, codec = wrap_compression(raw, "stdin" if name == "-" else hide_credentials(name), settings=settings) if decompress else (io.BufferedReader(raw, BUFSIZE), None)
    stream.url = name
    stream.compression = codec
    if codec is None and type(stream) is io.BufferedReader and stream.raw is raw and not raw.pollable:
        # A plain regular file: large members become regions of it (no copy),
        # which the reader seeks over.  A small buffer, so that a seek wastes
        # little of what was read ahead.
        pos = stream.tell()
        stream.detach()
        raw.seek(pos)
        stream = io.BufferedReader(raw, REGION_BUFSIZE)
        stream.url = name
        stream.compression = None
        stream.region_source = (raw.fd, name if scheme == "file" else None)
    return stream
