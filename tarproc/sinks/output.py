"""Outputs by URL (:func:`open_sink`): ``-``, local files written under a
temporary name and renamed when complete, ``pipe:CMD``, and ``http(s)://``,
``gs://``, ``s3://`` through their clients; compression from the name."""

import io
import os
import sys

from ..errors import OutputError, UsageError
from ..runtime.procs import _pdeathsig, pid_alive
from ..sources.open import BUFSIZE, _command_for, scheme_of


PARTIAL_SUFFIX = ".tarproc-partial"

WRITE_COMMANDS = {
    "http": "curl -sSf -T - {url}",
    "https": "curl -sSf -T - {url}",
    "gs": "gsutil -q cp - {url}",
    "s3": "aws s3 cp {endpoint}- {url}",
}

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
    if base.endswith((".tzst", ".zst")):
        return "zstd"
    return None


def partial_name(path, pid=None):
    """The temporary name an output file is written under until complete:
    hidden, in the same directory, with the writer's pid."""
    d, base = os.path.split(path)
    return os.path.join(d, f".{base}.{pid or os.getpid()}{PARTIAL_SUFFIX}")


def cleanup_partials(path_or_dir, all_names=False):
    """Remove temporary files left by killed writers (whose pid is gone).

    With a file path, only that output's leftovers; with a directory (or
    ``all_names``), every ``*.tarproc-partial`` file in it.  Returns the paths
    removed."""
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
        if not (name.startswith(".") and name.endswith(PARTIAL_SUFFIX)):
            continue
        stem = name[1 : -len(PARTIAL_SUFFIX)]
        target, _, pid = stem.rpartition(".")
        if not pid.isdigit() or (base is not None and not all_names and target != base):
            continue
        if int(pid) == os.getpid() or pid_alive(int(pid)):
            continue
        try:
            os.unlink(os.path.join(d, name))
            removed.append(os.path.join(d, name))
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


class Sink:
    """A binary output opened by URL.  ``write`` bytes, then ``close()`` to
    commit (rename into place, wait for the upload) or ``abort()`` to discard.
    As a context manager it commits on success and aborts on an exception."""

    def __init__(self, url, compression="auto", stall=None):
        self.url = url
        self.compression = compression_for(url) if compression == "auto" else compression
        self.proc = None
        self.tmp = None
        self.closed = False
        self.fd = None
        scheme = scheme_of(url)
        if scheme == "-":
            if os.isatty(1) and not os.environ.get("TARPROC_ALLOW_TTY"):
                raise UsageError("refusing to write a tar archive to a terminal (use -o FILE or a pipe)")
            self.fd = os.dup(1)
        elif scheme == "file" and _is_special_file(url):
            # /dev/null, a FIFO, /dev/stdout: write straight into it; a rename
            # would replace the device with a regular file
            try:
                self.fd = os.open(url, os.O_WRONLY)
            except OSError as e:
                raise OutputError(f"{url}: cannot open: {e.strerror}") from None
        elif scheme == "file":
            d = os.path.dirname(url) or "."
            if not os.path.isdir(d):
                raise OutputError(f"{url}: directory {d} does not exist")
            cleanup_partials(url)
            self.tmp = partial_name(url)
            try:
                self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as e:
                raise OutputError(f"{url}: cannot create: {e.strerror}") from None
        else:
            import subprocess

            cmd = url[5:] if scheme == "pipe" else _command_for(url, WRITE_COMMANDS, "WRITE")
            try:
                self.proc = subprocess.Popen(
                    cmd, shell=True, stdin=subprocess.PIPE, preexec_fn=_pdeathsig,
                    stdout=sys.stderr.fileno() if scheme != "pipe" else None,
                )
            except OSError as e:
                raise OutputError(f"{url}: cannot start {cmd!r}: {e.strerror}") from None
            self.fd = os.dup(self.proc.stdin.fileno())
            self.proc.stdin.close()
        self._zproc = None
        raw = io.FileIO(self.fd, "wb", closefd=True)
        self._raw = raw
        self.stream = self._open_compressor(raw)
        self._hook = None
        self._stall = stall
        if stall is not None and self.compression is None:
            self._hook = self.flush  # errors become OutputError naming the URL
            stall.add(self._hook)

    def _open_compressor(self, raw):
        codec = self.compression
        if codec is None:
            return io.BufferedWriter(raw, BUFSIZE)
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
            import subprocess

            try:
                self._zproc = subprocess.Popen(["zstd", "-q", "-c"], stdin=subprocess.PIPE, stdout=raw.fileno(),
                                               preexec_fn=_pdeathsig)
            except FileNotFoundError:
                raise OutputError(f"{self.url}: zstd output needs the zstd program, which is not installed") from None
            return io.BufferedWriter(self._zproc.stdin, BUFSIZE)
        raise UsageError(f"unknown compression {codec!r}")

    def write(self, data):
        try:
            return self.stream.write(data)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(f"{self.url}: write failed: {e.strerror or e}") from None

    def blob_fd(self):
        """For :meth:`Blob.copy_to <tarproc.core.blob.Blob.copy_to>`: flush and
        give the descriptor to ``sendfile`` into, or ``None`` when the output
        is compressed."""
        if self.compression is not None:
            return None
        self.flush()
        return self.fd

    def flush(self):
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(f"{self.url}: write failed: {e.strerror or e}") from None

    def _unhook(self):
        if self._hook is not None:
            self._stall.remove(self._hook)

    def close(self):
        """Finish the output: flush, close, rename into place / wait for the
        writer process.  Raises :class:`OutputError` if any of that fails."""
        if self.closed:
            return
        self.closed = True
        self._unhook()
        try:
            self.stream.close()
            if self._zproc is not None and self._zproc.wait() != 0:
                raise OutputError(f"{self.url}: zstd failed with exit status {self._zproc.returncode}")
            if self.tmp is not None:
                if not self._raw.closed:
                    os.fsync(self.fd)
                    self._raw.close()
                os.rename(self.tmp, self.url)
                self.tmp = None
            elif not self._raw.closed:
                self._raw.close()
            if self.proc is not None:
                rc = self.proc.wait()
                if rc != 0:
                    raise OutputError(f"{self.url}: writer command failed with exit status {rc}")
        except BrokenPipeError:
            self._discard()
            raise
        except OSError as e:
            self._discard()
            raise OutputError(f"{self.url}: write failed: {e.strerror or e}") from None
        except BaseException:
            self._discard()
            raise

    def _discard(self):
        for proc in (self._zproc, self.proc):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for f in (self.stream, self._raw):
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

    def abort(self):
        """Discard the output: nothing appears under the final name and an
        upload in progress is killed rather than completed."""
        if self.closed:
            return
        self.closed = True
        self._unhook()
        self._discard()

    def __enter__(self):
        return self

    def __exit__(self, etype, value, tb):
        if etype is None:
            self.close()
        else:
            self.abort()
        return False


def open_sink(url, compression="auto", stall=None):
    """Open an output by URL; see :class:`Sink`.  With ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall` also given to the source) buffered
    output is flushed whenever the input is about to block."""
    return Sink(url, compression, stall)


# ---------------------------------------------------------------- shard lists
