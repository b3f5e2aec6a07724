"""Outputs by URL (:func:`open_sink`) that commit only on success.

Every output that has a final name is written under a temporary name and
published by :meth:`Sink.commit`; :meth:`Sink.abort` (an error, Ctrl-C,
SIGTERM) discards it, and SIGKILL leaves only the temporary name, which
``tarcat --cleanup`` removes.  Nothing ever appears under the final name
unfinished:

=================  ==========================================================
``-``              stdout (a stream: nothing to commit)
``path``           written to ``.NAME.HOST-RANDOM.PID.tarproc-partial`` in the
                   same directory (locked while the writer lives, see
                   :mod:`tarproc.runtime.lease`), renamed by ``commit``
``http(s)://``,    spooled to such a file in ``$TARPROC_SPOOL_DIR`` (default
``gs://``,         ``$TMPDIR``/``/tmp``) and uploaded by ``commit`` with the
``s3://``          client (curl, gsutil, aws); with ``TARPROC_REMOTE_COMMIT=move``
                   (gs, s3) streamed to a temporary object beside the final
                   one and moved into place by ``commit`` (``gsutil mv``,
                   ``aws s3 mv``); see docs/commit.md for the figures
``pipe:CMD``       the stdin of a shell command (a stream: nothing to commit;
                   the command failing is an error naming it)
=================  ==========================================================

A client or command that fails is an :class:`~tarproc.errors.OutputError`
naming the URL, the exit status and the last line the client wrote on stderr.

In a command-line tool, :class:`CommitGate` holds the outputs closed while the
command runs: the CLI commits them only when the command exits 0.  Outside a
gate (library use, threads) ``close()`` commits at once.  Compression comes
from the name (``.tgz``/``.gz``, ``.bz2``, ``.xz``, ``.zst``).
"""

import contextvars
import io
import os
import sys

from ..errors import OutputError, UsageError
from ..runtime.child import Child
from ..runtime.lease import create_locked, is_stale
from ..runtime.schemes import as_url, command, has_command, scheme, scheme_of
from ..sources.raw import BUFSIZE, grow_pipe
from .partials import PARTIAL_SUFFIX, parse_partial, partial_name  # noqa: F401
from .remote import Client, cleanup_remote, run_client


REMOTE_SCHEMES = ("http", "https", "gs", "s3")

_gate = contextvars.ContextVar("tarproc_commit_gate", default=None)


def compression_for(url):
    """The compression an output name asks for (``None`` for plain tar).
    A ``pipe:`` command gets the plain tar: it compresses if it wants to."""
    if url.startswith("pipe:"):
        return None
    base = url.rsplit("/", 1)[-1].lower()
    if base.endswith((".tgz", ".gz")):
        return "gzip"
    if base.endswith((".tbz2", ".tbz", ".bz2")):
        return "bzip2"
    if base.endswith((".txz", ".xz")):
        return "xz"
    if base.endswith((".tzst", ".zst", ".zstd")):
        return "zstd"
    unknown = base.rsplit(".", 1)[-1] if "." in base else ""
    if unknown in UNWRITABLE_COMPRESSION:
        raise UsageError(f"{url}: cannot write .{url.rsplit('.', 1)[-1]} compression (use .tar, .tar.gz, "
                         ".tgz, .tar.bz2, .tar.xz or .tar.zst)")
    return None


#: Name suffixes of compressions we cannot write: refused rather than
#: writing a plain tar under a name that says otherwise.
UNWRITABLE_COMPRESSION = frozenset(("lz4", "tlz4", "z", "taz", "lzma", "tlz", "lz", "br", "sz", "lzo", "lzop",
                                    "zip", "7z", "rar"))


def cleanup_partials(path_or_dir, all_names=False, kept=None, settings=None):
    """Remove temporary files whose writer is dead (see
    :mod:`tarproc.runtime.lease`: a lock, never a PID, tells).

    With a file path, only that output's leftovers; with a directory (or
    ``all_names``), every ``.*.tarproc-partial`` file in it.  A URL prefix
    (``s3://b/dir/``, ``gs://b/dir/``) removes the temporary objects of
    ``TARPROC_REMOTE_COMMIT=move`` under it.  Returns the names removed;
    ``kept`` (a list) receives those of live writers.  ``settings``: the
    client commands and ``foreign_stale_seconds``."""
    if scheme_of(path_or_dir) in REMOTE_SCHEMES:
        return cleanup_remote(path_or_dir, settings)
    if os.path.isdir(path_or_dir):
        d, base = path_or_dir, None
    else:
        d, base = os.path.split(path_or_dir)
    removed = []
    try:
        names = os.listdir(d or ".")
    except OSError:
        return removed
    for name in names:
        parsed = parse_partial(name)
        if parsed is None:
            continue
        target, host, _pid = parsed
        if base is not None and not all_names and target != base:
            continue
        path = os.path.join(d, name)
        if not is_stale(path, host, stale_seconds=None if settings is None else settings.foreign_stale_seconds):
            if kept is not None:
                kept.append(path)
            continue
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed


def _is_special_file(path):
    """An existing output path that is not a regular file (device, FIFO)."""
    import stat

    try:
        return not stat.S_ISREG(os.stat(path).st_mode) and not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


class CommitGate:
    """Holds back the commits of the outputs closed while it is active (in
    this thread / context): ``commit()`` publishes them, ``abort()`` (or
    leaving the ``with`` block without committing) discards them.  The CLI
    runs every command inside one and commits only on exit status 0::

        with CommitGate() as gate:
            code = main(argv)
            if code == 0:
                gate.commit()
    """

    def __init__(self):
        self.pending = []
        self._token = None

    def __enter__(self):
        self._token = _gate.set(self)
        return self

    def __exit__(self, *exc):
        _gate.reset(self._token)
        self.abort()
        return False

    def commit(self):
        """Publish every held output in order; a failure aborts the rest."""
        try:
            while self.pending:
                self.pending[0].commit()
                self.pending.pop(0)
        finally:
            self.abort()

    def abort(self):
        while self.pending:
            self.pending.pop().abort()


class _Action:
    __slots__ = ("commit", "abort")

    def __init__(self, commit, abort):
        self.commit, self.abort = commit, abort


def commit_with_outputs(commit, abort):
    """Run ``commit()`` when the outputs closed so far are committed: at
    once, or, inside a :class:`CommitGate`, in its turn among them (then
    ``abort()`` when the gate discards them instead).  For an output that is
    not one file (tarindex's directory of per-shard sidecars)."""
    gate = _gate.get()
    if gate is None:
        commit()
    else:
        gate.pending.append(_Action(commit, abort))


_OPEN = None  # the sinks with a temporary file or a writer process (weak), aborted at exit if still open


def _abort_at_exit(sink):
    global _OPEN
    if _OPEN is None:
        import atexit
        import weakref

        _OPEN = weakref.WeakSet()
        atexit.register(_abort_open)
    sink.owner = os.getpid()
    _OPEN.add(sink)


def _abort_open():
    """At interpreter exit: discard every output still open (written by a
    daemon thread the exit is about to stop, or never closed), so that its
    temporary file is gone and no writer process publishes it."""
    me = os.getpid()
    for sink in list(_OPEN or ()):
        if getattr(sink, "owner", None) == me and sink.state in ("open", "finished"):
            try:
                sink.abort()
            except Exception:  # noqa: BLE001 - exiting: the others still
                pass


# ---------------------------------------------------------------- commit strategies


class Stream:
    """Written as it goes (stdout, a device or FIFO, a ``pipe:`` command):
    nothing to commit, nothing held by a :class:`CommitGate`; a failed run
    leaves the archive unterminated.  ``watch_reader``: the stall hook
    raises ``BrokenPipeError`` once the reader of the pipe has gone."""

    deferred = False

    def __init__(self, opener, watch_reader):
        self.opener = opener
        self.watch_reader = watch_reader

    def open(self, sink):
        return self.opener(sink)

    def commit(self, sink):
        pass

    def discard(self, sink, finished):
        pass

    def release(self, sink):
        pass


def _open_stdout(sink):
    if os.isatty(1) and not sink.settings.allow_tty:
        raise UsageError("refusing to write a tar archive to a terminal (use -o FILE or a pipe)")
    fd = os.dup(1)
    grow_pipe(fd)  # stdout a pipe: 1 MiB, so a buffer (or sendfile) moves in one go, not 16
    return fd


def _open_device(sink):
    # /dev/null, a FIFO, /dev/stdout: write straight into it; a rename
    # would replace the device with a regular file
    try:
        return os.open(sink.url, os.O_WRONLY)
    except OSError as e:
        raise OutputError(f"{sink.url}: cannot open: {e.strerror}") from None


def _open_command(sink):
    r, w = os.pipe()
    try:
        # its stdout is ours: it writes where it likes; its stderr is shown when it succeeded
        sink.client = Client(sink.url[5:], sink.url, r, stdout="inherit", replay=True,
                             tail_bytes=sink.settings.tail_bytes)
    finally:
        os.close(r)
    return w


class LocalFile(Stream):
    """A local file: written under a temporary name beside the final one
    (locked while the writer lives), renamed into place by ``commit``."""

    deferred = True

    def __init__(self):
        super().__init__(None, False)

    def open(self, sink):
        url = sink.url
        if os.path.isdir(url) or url.endswith("/"):
            raise OutputError(f"{url}: names a directory, not a file")
        # a symbolic link is replaced by the committed file, never written
        # through: its target (a git-annex or DVC cache object, a shared
        # input) is not ours to change
        d = os.path.dirname(sink.path) or "."
        if not os.path.isdir(d):
            raise OutputError(f"{url}: directory {d} does not exist")
        cleanup_partials(sink.path, settings=sink.settings)
        return sink._create_partial(sink.path)

    def commit(self, sink):
        os.rename(sink.tmp, sink.path)
        sink.tmp = None


class SpoolUpload(LocalFile):
    """A remote object (the default): spooled to a temporary file in
    ``$TARPROC_SPOOL_DIR`` and uploaded by the client at ``commit``."""

    def open(self, sink):
        url = sink.url
        command("WRITE", url, sink.settings)  # unknown scheme: a usage error now
        spool = sink.settings.spool_dir or __import__("tempfile").gettempdir()
        if not os.path.isdir(spool):
            raise OutputError(f"{url}: spool directory {spool} does not exist (TARPROC_SPOOL_DIR)")
        return sink._create_partial(os.path.join(spool, url.rstrip("/").rsplit("/", 1)[-1][:100] or "output"))

    def commit(self, sink):
        cmd = command("WRITE", sink.url, sink.settings)
        fd = os.open(sink.tmp, os.O_RDONLY)
        try:
            sink.client = Client(cmd, sink.url, fd, tail_bytes=sink.settings.tail_bytes)
        finally:
            os.close(fd)
        client, sink.client = sink.client, None
        try:
            client.wait()
        except BaseException:
            client.kill()
            raise
        finally:
            sink.client = client if client.running else None

    def release(self, sink):
        if sink.tmp is not None:
            try:
                os.unlink(sink.tmp)
            except OSError:
                pass
            sink.tmp = None


class Move(Stream):
    """A remote object with ``TARPROC_REMOTE_COMMIT=move``: streamed by the
    client to a temporary object beside the final one, moved into place by
    ``commit`` (a server-side move); removed when discarded."""

    deferred = True

    def __init__(self):
        super().__init__(None, False)

    def open(self, sink):
        sink.tmp_url = partial_name(sink.url)
        cmd = command("WRITE", sink.tmp_url, sink.settings)
        r, w = os.pipe()
        try:
            sink.client = Client(cmd, sink.url, r, tail_bytes=sink.settings.tail_bytes)
        finally:
            os.close(r)
        return w

    def commit(self, sink):
        run_client("MOVE", sink.url, "move", sink.settings, src=sink.tmp_url)
        sink.tmp_url = None

    def discard(self, sink, finished):
        if sink.tmp_url is not None and finished:
            try:
                run_client("REMOVE", sink.tmp_url, "remove", sink.settings)
            except Exception:
                pass  # tarcat --cleanup removes it later


def strategy_for(url, settings=None):
    """How the output ``url`` is written and committed, from its scheme's
    :attr:`~tarproc.runtime.schemes.Scheme.writer` (``settings``:
    ``remote_commit`` and the client commands)."""
    row = scheme(url)
    if row.writer == "stdout":
        return Stream(_open_stdout, True)
    if row.writer == "file":
        return Stream(_open_device, True) if _is_special_file(url) else LocalFile()
    if row.writer == "pipe":
        return Stream(_open_command, False)
    return Move() if remote_mode(row.name, settings) == "move" else SpoolUpload()


def writev_all(fd, pieces, most=1024):
    """Write every byte of the bytes-like ``pieces`` to ``fd``, ``most`` of
    them a call (``os.writev``; a short write goes on where it stopped).
    Returns the bytes written."""
    total = 0
    while pieces:
        chunk = pieces[:most]
        n = os.writev(fd, chunk)
        total += n
        if n == sum(map(len, chunk)):
            pieces = pieces[most:]
            continue
        k = 0  # a short write: on from the first byte not written
        while n >= len(chunk[k]):
            n -= len(chunk[k])
            k += 1
        pieces = [memoryview(chunk[k]).cast("B")[n:]] + pieces[k + 1:]
    return total


class ClosesOnSuccess:
    """An output's ``with`` block: :meth:`close` when it ends normally,
    ``abort()`` when it raises (the error goes on), so nothing half written
    is committed."""

    def __enter__(self):
        return self

    def __exit__(self, etype, value, tb):
        if etype is None:
            self.close()
        else:
            self.abort()
        return False


class Sink(ClosesOnSuccess):
    """A binary output opened by URL.  ``write`` bytes, then ``close()``
    (complete it and commit, or hand it to the active :class:`CommitGate`)
    or ``abort()`` to discard.  ``commit()`` publishes it at once.  As a
    context manager it closes on success and aborts on an exception.

    ``defer=False`` commits at ``close()`` even inside a gate (tarsplit's
    shards: each is committed as it is closed).  ``settings`` (a
    :class:`~tarproc.settings.Settings`; default: the defaults): the
    ``WRITE``/``MOVE``/``REMOVE`` client commands, ``spool_dir``,
    ``remote_commit`` and ``allow_tty``."""

    def __init__(self, url, compression="auto", stall=None, defer=True, group_size=None, settings=None):
        from ..settings import DEFAULTS
        from .grouped import DEFAULT_GROUP_SIZE

        url = as_url(url, "output")
        self.url = url
        self.settings = settings = DEFAULTS if settings is None else settings
        self.path = url  # a local output's final path (a symlink's target)
        self.compression = compression_for(url) if compression == "auto" else compression
        self.defer = defer
        self.group_size = DEFAULT_GROUP_SIZE if group_size is None else _check_group_size(group_size)
        self._cutter = None  # the compressor that ends groups (sinks/grouped.py), when there are groups
        self._written = self._group_start = 0  # bytes of tar written; where the current group began
        self.client = None  # a streaming writer process (pipe:, move mode)
        self.tmp = None  # local temporary file (file, spool)
        self.tmp_url = None  # temporary object (move mode)
        self.lockfd = None
        self.state = "open"  # -> finished -> committed | aborted
        self.owner = os.getpid()  # a copy in a child made by os.fork leaves the output alone (_drop_copy)
        self.strategy = strategy_for(url, settings)
        fd = self.strategy.open(self)
        self._zproc = None
        if self.tmp is not None or self.client is not None:
            _abort_at_exit(self)
        self._raw = io.FileIO(fd, "wb", closefd=True)
        self.stream = self._open_compressor(self._raw)
        self._hook = None
        self._stall = stall
        if stall is not None and self.compression is None:
            self._hook = self._on_stall  # errors become OutputError naming the URL
            stall.add(self._hook)

    def _create_partial(self, path):
        """Create and lock the temporary file; return a writable descriptor
        (the lock stays on ``self.lockfd`` until commit or abort)."""
        for _ in range(100):
            tmp = partial_name(path)
            try:
                self.lockfd = create_locked(tmp)
            except (FileExistsError, FileNotFoundError):
                continue
            except OSError as e:
                raise OutputError(f"{self.url}: cannot create {tmp}: {e.strerror}") from None
            self.tmp = tmp
            return os.dup(self.lockfd)
        raise OutputError(f"{self.url}: cannot create a temporary file beside it")

    def _open_compressor(self, raw):
        codec = self.compression
        if codec is None:
            return io.BufferedWriter(raw, BUFSIZE)
        if codec in ("gzip", "zstd") and self.group_size:
            from .grouped import grouped_compressor

            self._cutter = grouped_compressor(codec, raw)
            return io.BufferedWriter(self._cutter, BUFSIZE)
        if codec == "gzip":
            import gzip

            return io.BufferedWriter(gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0), BUFSIZE)
        if codec == "bzip2":
            import bz2

            return io.BufferedWriter(bz2.BZ2File(raw, "wb"), BUFSIZE)
        if codec == "xz":
            import lzma

            return io.BufferedWriter(lzma.LZMAFile(raw, "wb"), BUFSIZE)
        if codec == "zstd":
            try:
                self._zproc = Child(["zstd", "-q", "-c"], self.url, stdin="pipe", stdout=raw.fileno(),
                                    tail_bytes=self.settings.tail_bytes)
            except FileNotFoundError:
                raise OutputError(f"{self.url}: zstd output needs the zstd program, which is not installed") from None
            except OSError as e:
                raise OutputError(Child.start_error(self.url, "zstd", e)) from None
            return io.BufferedWriter(self._zproc.stdin, BUFSIZE)
        raise UsageError(f"unknown compression {codec!r}")

    # -- writing

    def _write_failed(self, e):
        """The error of a failed write: names this output, or for a remote
        one the local file it is spooled to (the disk that is full)."""
        if self.tmp is not None and isinstance(self.strategy, SpoolUpload):
            from ..errors import write_failed

            return write_failed(self.tmp, f"the local copy of {self.url} (uploaded at the end)", e,
                                "choose the place with TARPROC_SPOOL_DIR")
        return OutputError(f"{self.url}: write failed: {e.strerror or e}")

    def _broken_pipe(self):
        """A write hit a closed pipe: downstream of stdout closed (quiet, the
        caller ends by SIGPIPE), or the writer process died (loud)."""
        if self.client is None and self._zproc is None:
            raise BrokenPipeError
        self._fail_from_processes()

    def _fail_from_processes(self):
        client, zproc = self.client, self._zproc
        self.abort(keep_clients=True)
        if client is not None:
            client.wait(early=True)  # raises OutputError
        if zproc is not None:
            zproc.wait()
            raise OutputError(zproc.failure())
        raise BrokenPipeError

    def write(self, data):
        try:
            n = self.stream.write(data)
            self._written += n
            return n
        except BrokenPipeError:
            self._broken_pipe()
        except OSError as e:
            raise self._write_failed(e) from None

    def write_pieces(self, pieces):
        """Write the bytes-like ``pieces`` in order: gathered, one ``writev``
        for up to 1,024 of them, when the output is not compressed."""
        if self.compression is not None:
            for p in pieces:
                self.write(p)
            return
        try:
            self.stream.flush()
            self._written += writev_all(self._raw.fileno(), pieces)
        except BrokenPipeError:
            self._broken_pipe()
        except OSError as e:
            raise self._write_failed(e) from None

    # -- groups of samples (sinks/grouped.py)

    @property
    def grouped(self):
        """Whether this output is cut into groups of whole samples (a
        ``.tar.gz``/``.tar.zst`` with ``group_size`` > 0)."""
        return self._cutter is not None

    def written_groups(self):
        """The groups of a grouped output once it is closed: ``(groups,
        decoded, compressed)``, ``groups`` a list of ``(compressed start,
        compressed end, decoded start, CRC-32 of the compressed bytes)``
        (what ``tarindex`` finds reading the file), ``decoded`` the bytes of
        tar, ``compressed`` the bytes written; ``None`` without groups."""
        cutter = self._cutter
        if cutter is None or not cutter.closed:
            return None
        return list(cutter.groups), cutter.decoded, cutter.compressed

    def start_sample(self, sample):
        """Called by :class:`~tarproc.SampleWriter` before it writes a sample:
        ends the current group first when the sample would take it past
        ``group_size`` bytes of tar."""
        if self._cutter is None:
            return
        if self._written - self._group_start:
            from .grouped import sample_bytes

            self.start_bytes(sample_bytes(sample))

    def start_bytes(self, size):
        """As :meth:`start_sample` for a sample of ``size`` bytes of tar (a
        writer that has them already encoded: tarpcat)."""
        in_group = self._written - self._group_start
        if self._cutter is not None and in_group and in_group + size > self.group_size:
            self.end_group()

    def end_group(self):
        """End the current group now (the next bytes start a new one)."""
        if self._cutter is None or self._written == self._group_start:
            return
        try:
            self.stream.flush()
            self._cutter.cut()
        except BrokenPipeError:
            self._broken_pipe()
        except OSError as e:
            raise self._write_failed(e) from None
        self._group_start = self._written

    def blob_fd(self):
        """For :meth:`Blob.copy_to <tarproc.core.blob.Blob.copy_to>`: flush and
        give the descriptor to ``sendfile`` into, or ``None`` when the output
        is compressed."""
        if self.compression is not None:
            return None
        self.flush()
        return self._raw.fileno()

    def write_blob(self, blob):
        """Write a :class:`~tarproc.core.blob.Blob`'s bytes: with ``sendfile``
        into the file (uncompressed), else through :meth:`write`.  A failed
        write (a full disk, a closed pipe) is handled as :meth:`write`
        handles it: an :class:`OutputError` naming this output."""
        fd = self.blob_fd()
        if fd is None:
            for piece in blob.chunks():
                self.write(piece)
            return
        try:
            blob.copy_to(fd)
        except BrokenPipeError:
            self._broken_pipe()
        except OSError as e:
            raise self._write_failed(e) from None
        self._written += blob.length

    def flush(self):
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._broken_pipe()
        except OSError as e:
            raise self._write_failed(e) from None

    def _on_stall(self):
        """The stall hook: flush, and on a stream whose reader has gone
        (the write end of a pipe polls POLLERR) raise BrokenPipeError even
        when there was nothing to write, so a command waiting on slow work
        learns at its next stall that nobody reads (``| head``)."""
        self.flush()
        if self.strategy.watch_reader and not self._raw.closed:
            import select

            poller = select.poll()
            poller.register(self._raw.fileno(), select.POLLOUT)
            for _fd, events in poller.poll(0):
                if events & select.POLLERR:
                    raise BrokenPipeError

    def _unhook(self):
        if self._hook is not None:
            self._stall.remove(self._hook)
            self._hook = None

    # -- finishing, committing, discarding

    def finish(self):
        """Complete the data under the temporary name (flush, sync, wait for
        the writer process); nothing is published yet."""
        if self.state != "open":
            return
        self._unhook()
        try:
            try:
                self.stream.close()
            except BrokenPipeError:
                self._broken_pipe()
            if self._zproc is not None and self._zproc.wait() != 0:
                if self.client is not None:
                    self._fail_from_processes()
                raise OutputError(self._zproc.failure())
            if self.tmp is not None and not self._raw.closed:
                os.fsync(self._raw.fileno())
            if not self._raw.closed:
                self._raw.close()
            if self.client is not None:
                client, self.client = self.client, None
                client.wait()
            self.state = "finished"
        except BrokenPipeError:  # the reader went away (raised by _broken_pipe): quiet, as for a write
            self.abort()
            raise
        except OSError as e:
            self.abort()
            raise self._write_failed(e) from None
        except BaseException:
            self.abort()
            raise

    def close(self):
        """Finish, then commit (or, inside a :class:`CommitGate`, leave the
        commit to the gate).  Raises :class:`OutputError` on failure."""
        if self.state != "open":
            return
        self._refuse_copy()
        self.finish()
        gate = _gate.get()
        if gate is not None and self.defer and self.strategy.deferred:
            gate.pending.append(self)
        else:
            self.commit()

    def commit(self):
        """Publish the output under its final name."""
        if self.state in ("open", "finished"):
            self._refuse_copy()
        if self.state == "open":
            self.finish()
        if self.state != "finished":
            return
        try:
            self.strategy.commit(self)
            self.state = "committed"
        except OSError as e:
            self.abort()
            raise OutputError(f"{self.url}: cannot commit: {e.strerror or e}") from None
        except BaseException:
            self.abort()
            raise
        self._release()

    def _release(self):
        self.strategy.release(self)
        if self.lockfd is not None:
            os.close(self.lockfd)
            self.lockfd = None

    def abort(self, keep_clients=False):
        """Discard the output: nothing appears under the final name; a
        writer process still running is killed, never left to complete."""
        if self.state in ("committed", "aborted"):
            return
        if os.getpid() != self.owner:
            self._drop_copy()
            return
        finished = self.state == "finished"
        self.state = "aborted"
        self._unhook()
        if self._zproc is not None and self._zproc.poll() is None:
            self._zproc.kill()
        if self.client is not None and not keep_clients:
            self.client.kill()
            self.client = None
        # after a signal (KeyboardInterrupt, SIGTERM's Terminated: not an
        # Exception) the raw file is closed first, so closing the buffered
        # stream cannot flush and block again on a pipe nobody reads
        signalled = not isinstance(sys.exc_info()[1], (Exception, type(None)))
        for f in (self._raw, self.stream) if signalled else (self.stream, self._raw):
            try:
                f.close()
            except Exception:
                pass
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None
        self.strategy.discard(self, finished)
        self._release()

    def _drop_copy(self):
        """In a child made by ``os.fork``, this object is a copy of its
        parent's output: the temporary file, the writer processes and the
        final name are the parent's.  Close the copy's descriptors without
        flushing its buffer (bytes the parent also holds) and touch nothing
        else."""
        self.state = "aborted"
        for f in (self._raw, self.stream):
            try:
                f.close()  # (the raw file first: the buffer has nowhere to go)
            except Exception:  # noqa: BLE001 - a copy's buffer is dropped
                pass
        if self.lockfd is not None:
            try:
                os.close(self.lockfd)
            except OSError:
                pass
            self.lockfd = None

    def _refuse_copy(self):
        if os.getpid() != self.owner:
            self._drop_copy()
            raise OutputError(f"{self.url}: opened by process {self.owner}; a forked copy of it cannot "
                              f"finish or publish it")


def remote_mode(scheme, settings=None):
    """How a remote output is committed: ``spool`` (default) or ``move``
    (``settings.remote_commit``, ``TARPROC_REMOTE_COMMIT=move``, for schemes
    with a server-side move)."""
    mode = "spool" if settings is None else settings.remote_commit
    if mode not in ("spool", "move"):
        raise UsageError(f"TARPROC_REMOTE_COMMIT={mode!r}: use spool or move")
    if mode == "move" and not has_command("MOVE", f"{scheme}://", settings):
        return "spool"
    return mode


def _check_group_size(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"group size {value!r}: give a number of bytes >= 0 (0: one compressed stream)")
    return value


def open_sink(url, compression="auto", stall=None, defer=True, group_size=None, settings=None):
    """Open an output by URL; see :class:`Sink`.  With ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall` also given to the source) buffered
    output is flushed whenever the input is about to block.  A ``.tar.gz``
    or ``.tar.zst`` output is cut into groups of whole samples of at most
    ``group_size`` bytes of tar (default 1 MiB; 0: one stream), each
    decodable on its own (see :mod:`tarproc.sinks.grouped`).  ``settings``:
    see :class:`Sink`."""
    return Sink(url, compression, stall, defer, group_size, settings)
