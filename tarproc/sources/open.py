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

The command of each scheme can be replaced with an environment variable,
``TARPROC_READ_<SCHEME>`` or ``TARPROC_WRITE_<SCHEME>`` (scheme in upper case,
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
import select

from ..core.limits import hide_credentials
from ..errors import BadInput, UsageError
from ..runtime.procs import killpg, pdeathsig, exec_simple, popen
from .resume import RETRIES, STALL_TIMEOUT, Resuming, check_settings


BUFSIZE = 1 << 20
#: Read-ahead for plain files, whose large members are seeked over.
REGION_BUFSIZE = 32 << 10
#: Schemes whose reads resume where they broke (with our own read commands).
RESUMABLE = ("http", "https", "s3", "gs")
READ_COMMANDS = {
    "http": "curl -gsSfL --retry 3 {url}",  # -g: brackets and braces in a URL are its own, not a glob
    "https": "curl -gsSfL --retry 3 {url}",
    "gs": "gsutil -q cat {url}",
    # one GET: `aws s3 cp URL -` retries a broken part itself, and was seen to splice a
    # replaced object's bytes onto the old one's (aws-cli 1.46, moto)
    "s3": "aws s3api get-object {endpoint}--bucket {bucket} --key {key} /dev/fd/3 3>&1 1>/dev/null",
}
def cannot_open(url, error):
    """The message for an input file that cannot be opened; a missing name
    with glob characters says that they are not expanded (the shell left a
    quoted or unmatched ``shard-*.tar`` as it was)."""
    import errno

    from ..core.limits import shown

    message = f"{shown(url)}: cannot open: {error.strerror}"
    if error.errno == errno.ENOENT and any(c in url for c in "*?["):
        message += (" (tarproc does not expand * ? [ ] in names: leave the pattern unquoted for the shell, "
                    "or use a brace pattern such as 'shard-{0000..0146}.tar')")
    return message


def scheme_of(url):
    if url == "-":
        return "-"
    if url.startswith("pipe:"):
        return "pipe"
    head, sep, _ = url.partition("://")
    if sep and head.isalnum():
        return head.lower()
    return "file"


def _quote(s):
    import shlex

    return shlex.quote(s)


def command_for(url, table, direction):
    scheme = scheme_of(url)
    template = os.environ.get(f"TARPROC_{direction}_{scheme.upper()}") or table.get(scheme)
    if template is None:
        raise UsageError(f"{url}: unknown URL scheme {scheme!r}")
    return fill_command(template, url, scheme)


def fill_command(template, url, scheme=None, **more):
    """THE filling of a client command template (``TARPROC_READ_*``,
    ``WRITE``, ``MOVE``, ``REMOVE``, ``LIST``, ``EXISTS``): ``{url}``,
    ``{bucket}``, ``{key}`` and every name of ``more`` replaced by its value
    quoted for the shell, ``{endpoint}`` by ``--endpoint-url URL `` (s3 with
    ``AWS_ENDPOINT_URL``), all in ONE pass: a key or path that holds
    ``{url}`` must never have another value put inside its quotes (that
    would end them, and run what follows)."""
    import re

    scheme = scheme or scheme_of(url)
    bucket, _, key = url.partition("://")[2].partition("/")
    values = {"endpoint": _endpoint(scheme), "bucket": _quote(bucket), "key": _quote(key), "url": _quote(url)}
    values.update((k, _quote(v)) for k, v in more.items())
    names = "|".join(re.escape(k) for k in values)
    return re.sub(r"\{(" + names + r")\}", lambda m: values[m.group(1)], template)


def _endpoint(scheme):
    """``--endpoint-url URL `` for the aws CLI when ``AWS_ENDPOINT_URL`` is set."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    return f"--endpoint-url {_quote(endpoint)} " if endpoint and scheme == "s3" else ""


class _FdReader(io.RawIOBase):
    """Raw reader over a file descriptor, optionally the stdout of a process.

    Before a read that would block on an empty pipe it calls ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall`: buffered outputs flush).  At end of input it waits for the process
    and raises :class:`BadInput` naming the URL if it failed, so a failed
    download is never mistaken for a short archive.
    """

    def __init__(self, fd, url, proc=None, closefd=True, what=None, stall=None):
        self.stall = stall
        self.fd = fd
        self.url = url
        self.proc = proc
        self.closefd = closefd
        self.what = what
        try:
            import stat

            self.pollable = not stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            self.pollable = True
        self.eof = False

    def readable(self):
        return True

    def readinto(self, buf):
        if self.eof:
            return 0
        stall = self.stall
        if stall and self.pollable:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0)
            except (OSError, ValueError):  # a closed descriptor: the read below says so
                ready = True
            if not ready:
                stall()
        try:
            n = os.readv(self.fd, [buf])
        except OSError as e:
            raise BadInput(f"{self.url}: read error: {e.strerror}") from None
        if n == 0:
            self.eof = True
            self._check_process()
        return n

    def seekable(self):
        return not self.pollable

    def seek(self, pos, whence=0):
        return os.lseek(self.fd, pos, whence)

    def tell(self):
        return os.lseek(self.fd, 0, 1)

    def _check_process(self):
        proc = self.proc
        if proc is None:
            return
        rc = proc.wait()
        _LIVE.pop(proc.pid, None)
        err = _tail_of_stderr(proc)
        if rc != 0:
            what = self.what or "command"
            raise BadInput(f"{self.url}: {what} failed with exit status {rc}{err}")

    def close(self):
        if self.closed:
            return
        try:
            if self.proc is not None and self.proc.poll() is None:
                # Stopped reading early (e.g. --count): stop the producer,
                # and everything it started (``pipe:a | b``, ``sh -c``'s
                # children): it runs in its own process group.
                killpg(self.proc.pid)
                self.proc.wait()
            if self.proc is not None:
                _LIVE.pop(self.proc.pid, None)
            if self.closefd:
                os.close(self.fd)
        finally:
            super().close()


def _drain_stderr(proc):
    """Read a child's stderr as it comes, keeping only its tail (bounded,
    :data:`~tarproc.core.limits.TAIL_BYTES`): a chatty child never blocks on
    a full pipe and never fills our memory."""
    from ..core.limits import drain_tail

    proc._tarproc_stderr = drain_tail(proc.stderr)


def _tail_of_stderr(proc):
    """The last line of a finished child's stderr (at most 300 characters)."""
    thread = getattr(proc, "_tarproc_stderr", None)
    if thread is None:
        return ""
    thread.join(5)
    text = thread.tail.getvalue().decode("utf-8", "replace").strip()
    if not text:
        return ""
    return ": " + text.splitlines()[-1][-300:]


def _child_setup():
    """In an input command's child: its own process group, killed as a
    whole when the reader stops early, and death with us.  (Being outside
    the terminal's foreground group, it cannot prompt on the terminal: a
    ``pipe:ssh ...`` source needs keys or an agent, as in any pipeline.)"""
    os.setpgid(0, 0)
    pdeathsig()


#: Process groups of the input commands this process started and has not
#: yet ended: {pgid: owner pid}.  They run in their own groups, so a signal
#: to our group does not reach them; :func:`stop_sources` ends them (also at
#: exit), and the kernel's parent-death signal ends the shell of one whose
#: reader was killed outright.
_LIVE = {}


def stop_sources():
    """Kill every input command (its whole process group) this process
    started and has not closed: for a signal handler or an exit path that
    cannot unwind to the readers (a job process told to stop)."""
    me = os.getpid()
    for pgid, owner in list(_LIVE.items()):
        if owner == me:  # never a parent's, in a forked child
            killpg(pgid)
        _LIVE.pop(pgid, None)


def _track(proc):
    if not _LIVE:
        import atexit

        atexit.register(stop_sources)  # (registering twice is harmless: stop_sources is idempotent)
    _LIVE[proc.pid] = os.getpid()


def is_stdout(st):
    """Whether ``st`` (an ``os.stat_result``) is the file standard output
    writes to: an input that is refused ("input file is output file")."""
    try:
        out = os.fstat(1)
    except OSError:
        return False
    return (out.st_dev, out.st_ino) == (st.st_dev, st.st_ino)


def open_source(url, decompress=True, stall=None, retries=RETRIES, stall_timeout=STALL_TIMEOUT):
    """Open an input by URL for reading; returns a buffered binary stream with
    ``.url`` and ``.compression`` attributes.  Compressed input is decoded.
    ``stall`` (a :class:`~tarproc.runtime.stall.Stall`) is called before a
    read that would block on an empty pipe.

    An ``http(s)://``, ``s3://`` or ``gs://`` read that breaks (reset, short
    body, no byte for ``stall_timeout`` seconds; ``None``: no limit) is
    resumed where it broke, up to ``retries`` times in a row, after checking
    that the object is still the same (:mod:`tarproc.sources.resume`);
    ``retries=0`` reads with one plain request as before.  ``-``, paths and
    ``pipe:`` cannot resume: they fail as they end."""
    from .shardlist import as_url

    check_settings(retries, stall_timeout)
    url = as_url(url)
    scheme = scheme_of(url)
    if scheme == "-":
        raw = _FdReader(0, "-" if url == "-" else url, closefd=False, stall=stall)
        name = "-"
    elif scheme == "file":
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
        raw = _FdReader(fd, url)
        name = url
    else:
        shown = hide_credentials(url)
        if scheme == "pipe":
            # one simple command is exec'ed: it is then the process that dies with us
            cmd, what = exec_simple(url[5:]), "command"
        else:
            override = os.environ.get(f"TARPROC_READ_{scheme.upper()}")
            if not override and scheme in RESUMABLE and retries:
                raw = Resuming(url, scheme, shown, _Children(shown), retries=retries, stall_timeout=stall_timeout,
                               stall=stall, endpoint=_endpoint(scheme))
                try:
                    return _finish_opening(raw, url, url, scheme, decompress)
                except BaseException:
                    raw.close()
                    raise
            cmd = command_for(url, READ_COMMANDS, "READ")
            what = cmd.split()[0]
            if not override:
                # our own one-program templates: the shell becomes the program, which so
                # keeps the parent-death signal (a reader killed outright leaves no curl)
                cmd = "exec " + cmd
        proc = _start_process(cmd, shown)
        raw = _FdReader(proc.stdout.fileno(), shown, proc, closefd=False, what=what, stall=stall)
        raw._keep = proc.stdout
        name = url
    return _finish_opening(raw, name, url, scheme, decompress)


def _start_process(cmd, shown, pass_fds=()):
    """Start an input command: its own process group, dying with us,
    tracked for :func:`stop_sources`, its stderr's tail drained."""
    import subprocess

    try:
        proc = popen(
            cmd, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, preexec_fn=_child_setup, pass_fds=pass_fds,
        )
    except OSError as e:
        raise BadInput(hide_credentials(f"{shown}: cannot start {cmd!r}: {e.strerror}")) from None
    _track(proc)
    _drain_stderr(proc)
    return proc


class _Children:
    """How :class:`~tarproc.sources.resume.Resuming` starts and ends the
    commands of one input: through the helpers above (process group,
    parent-death signal, tracking, stderr tail, kill of the group)."""

    def __init__(self, shown=""):
        self.shown = shown

    def start(self, cmd, pass_fds=()):
        return _start_process(cmd, self.shown, pass_fds)

    def finish(self, proc):
        """Wait for a command whose output ended: ``(status, stderr tail)``."""
        rc = proc.wait()
        _LIVE.pop(proc.pid, None)
        tail = hide_credentials(_tail_of_stderr(proc))
        proc.stdout.close()
        return rc, tail

    def kill(self, proc):
        """End a command and everything it started (its process group)."""
        killpg(proc.pid)
        proc.wait()
        _LIVE.pop(proc.pid, None)
        proc.stdout.close()


def _finish_opening(raw, name, url, scheme, decompress):
    from .compression import _wrap_compression

    stream, codec = _wrap_compression(raw, "stdin" if name == "-" else hide_credentials(name)) if decompress else (io.BufferedReader(raw, BUFSIZE), None)
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
