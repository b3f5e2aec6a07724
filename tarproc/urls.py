"""Opening inputs and outputs by URL, compression, and shard-list expansion.

Inputs (:func:`open_source`) and outputs (:func:`open_sink`) are named by URL:

=================  ==========================================================
``-``              stdin / stdout
``path``           a local file; outputs go to a hidden temporary name in the
                   same directory and are renamed when complete
``pipe:CMD``       the stdout (input) or stdin (output) of a shell command
``http(s)://``     ``curl`` (output: HTTP PUT)
``gs://``          ``gsutil cat`` / ``gsutil cp - URL``
``s3://``          ``aws s3 cp URL -`` / ``aws s3 cp - URL`` (``AWS_ENDPOINT_URL``
                   is passed on as ``--endpoint-url``)
=================  ==========================================================

The command of each scheme can be replaced with an environment variable,
``TARPROC_READ_<SCHEME>`` or ``TARPROC_WRITE_<SCHEME>`` (scheme in upper case,
``HTTP``, ``HTTPS``, ``GS``, ``S3``), a shell command in which ``{url}`` stands
for the quoted URL.  A command that exits non-zero is an error naming the URL.

Compression is detected from the first bytes of an input (gzip, bzip2, xz,
zstd) and chosen from the name of an output (``.tgz``/``.gz``, ``.bz2``,
``.xz``, ``.zst``).
"""

import io
import os
import select
import sys

from .errors import BadInput, OutputError, TarprocError, UsageError

BUFSIZE = 1 << 20
PARTIAL_SUFFIX = ".tarproc-partial"

READ_COMMANDS = {
    "http": "curl -sSfL --retry 3 {url}",
    "https": "curl -sSfL --retry 3 {url}",
    "gs": "gsutil -q cat {url}",
    "s3": "aws s3 cp {endpoint}{url} -",
}
WRITE_COMMANDS = {
    "http": "curl -sSf -T - {url}",
    "https": "curl -sSf -T - {url}",
    "gs": "gsutil -q cp - {url}",
    "s3": "aws s3 cp {endpoint}- {url}",
}

_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)

# Sinks that buffer output register a flush here; a source about to block on
# an empty pipe calls them first, so output keeps pace with slow input.
_stall_hooks = []


def _on_stall():
    for hook in list(_stall_hooks):
        try:
            hook()
        except (BrokenPipeError, ValueError):
            pass


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


def _command_for(url, table, direction):
    scheme = scheme_of(url)
    template = os.environ.get(f"TARPROC_{direction}_{scheme.upper()}") or table.get(scheme)
    if template is None:
        raise UsageError(f"{url}: unknown URL scheme {scheme!r}")
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    endpoint = f"--endpoint-url {_quote(endpoint)} " if endpoint and scheme == "s3" else ""
    return template.replace("{endpoint}", endpoint).replace("{url}", _quote(url))


def _pdeathsig():
    """In a child: die with the parent, so an upload is not completed with
    the partial data of a parent that was killed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass


# ---------------------------------------------------------------- reading


class _FdReader(io.RawIOBase):
    """Raw reader over a file descriptor, optionally the stdout of a process.

    Before a read that would block on an empty pipe it flushes buffered
    outputs (see ``_stall_hooks``).  At end of input it waits for the process
    and raises :class:`BadInput` naming the URL if it failed, so a failed
    download is never mistaken for a short archive.
    """

    def __init__(self, fd, url, proc=None, closefd=True, what=None):
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
        if self.pollable and _stall_hooks:
            ready, _, _ = select.select([self.fd], [], [], 0)
            if not ready:
                _on_stall()
        try:
            n = os.readv(self.fd, [buf])
        except OSError as e:
            raise BadInput(f"{self.url}: read error: {e.strerror}") from None
        if n == 0:
            self.eof = True
            self._check_process()
        return n

    def _check_process(self):
        proc = self.proc
        if proc is None:
            return
        rc = proc.wait()
        err = _tail_of_stderr(proc)
        if rc != 0:
            what = self.what or "command"
            raise BadInput(f"{self.url}: {what} failed with exit status {rc}{err}")

    def close(self):
        if self.closed:
            return
        try:
            if self.proc is not None and self.proc.poll() is None:
                # Stopped reading early (e.g. --count): stop the producer.
                self.proc.kill()
                self.proc.wait()
            if self.closefd:
                os.close(self.fd)
        finally:
            super().close()


def _tail_of_stderr(proc):
    stream = getattr(proc, "_tarproc_stderr", None)
    if stream is None:
        return ""
    try:
        text = stream.read().decode("utf-8", "replace").strip()
        stream.close()
    except (OSError, ValueError):
        return ""
    if not text:
        return ""
    return ": " + text.splitlines()[-1][:300]


class _Prefixed(io.RawIOBase):
    """Give back bytes already read (for sniffing), then read on."""

    def __init__(self, prefix, stream):
        self.prefix = prefix
        self.stream = stream

    def readable(self):
        return True

    def readinto(self, buf):
        if self.prefix:
            n = min(len(buf), len(self.prefix))
            buf[:n] = self.prefix[:n]
            self.prefix = self.prefix[n:]
            return n
        data = self.stream.read(len(buf))
        buf[: len(data)] = data
        return len(data)


class _Decompressed(io.RawIOBase):
    """Read a compressed stream through a Python decompressor, turning its
    errors into :class:`BadInput` that names the URL and the codec."""

    def __init__(self, inner, url, codec):
        self.inner = inner
        self.url = url
        self.codec = codec

    def readable(self):
        return True

    def readinto(self, buf):
        try:
            # readinto1: what one block decodes to, without waiting to fill
            # ``buf`` (which could wait on input that is still arriving)
            return self.inner.readinto1(buf)
        except EOFError:
            raise BadInput(f"{self.url}: {self.codec} stream is truncated") from None
        except (TarprocError, BrokenPipeError):
            raise  # from below the decoder: a failed download, a full disk on stall-flush
        except (OSError, ValueError) as e:  # bad CRC, corrupt data
            raise BadInput(f"{self.url}: {self.codec} stream is damaged: {e}") from None
        except Exception as e:  # zlib.error, lzma.LZMAError
            raise BadInput(f"{self.url}: {self.codec} stream is damaged: {e}") from None

    def close(self):
        if not self.closed:
            try:
                self.inner.close()
            except Exception:
                pass
            super().close()


class _ZstdDecompressed(io.RawIOBase):
    """zstd has no decoder in Python 3.11's standard library: decode with the
    ``zstd`` program, fed from a thread."""

    def __init__(self, stream, url):
        import subprocess
        import threading

        self.url = url
        try:
            self.proc = subprocess.Popen(
                ["zstd", "-dc", "-q"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, preexec_fn=_pdeathsig,
            )
        except FileNotFoundError:
            raise BadInput(f"{url}: input is zstd-compressed but the zstd program is not installed") from None
        self.proc._tarproc_stderr = self.proc.stderr
        self.reader = _FdReader(self.proc.stdout.fileno(), url, self.proc, closefd=False, what="zstd")
        self.feed_error = None

        def feed():
            try:
                while True:
                    chunk = stream.read(BUFSIZE)
                    if not chunk:
                        break
                    self.proc.stdin.write(chunk)
                    self.proc.stdin.flush()  # zstd gets input as it arrives
            except Exception as e:  # upstream failure or zstd exited
                self.feed_error = e
            finally:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass

        self.thread = threading.Thread(target=feed, daemon=True)
        self.thread.start()

    def readable(self):
        return True

    def readinto(self, buf):
        try:
            n = self.reader.readinto(buf)
        except BadInput:
            if isinstance(self.feed_error, BadInput):
                raise self.feed_error from None
            raise
        if n == 0:
            self.thread.join()
            if isinstance(self.feed_error, BadInput):
                raise self.feed_error
        return n

    def close(self):
        if not self.closed:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdout, self.proc.stderr):
                f.close()
            super().close()


class _ShortReads:
    """``read(n)`` returns the bytes available now (at least one, unless at
    end of input), as a pipe does.  Decompressors read fixed-size blocks;
    through a plain buffered reader each of those would wait for its whole
    block, so a small compressed sample, or ``-c N`` on input that is still
    arriving, would wait for more input or for its end."""

    def __init__(self, buffered):
        self.read1 = buffered.read1
        self.close = buffered.close

    def read(self, n=-1):
        if n is None or n < 0:
            parts = []
            while True:
                piece = self.read1(BUFSIZE)
                if not piece:
                    return b"".join(parts)
                parts.append(piece)
        return self.read1(n) if n else b""


class _Unbuffered:
    """The bytes already in ``buffered`` (never blocks for them), then reads
    straight from its raw reader, without the buffered reader's lock."""

    def __init__(self, buffered, raw):
        self.pre = buffered.read1(BUFSIZE) if buffered.peek(1) else b""
        self.raw = raw
        self.buffered = buffered  # owns raw: closes it when collected

    def read(self, n=BUFSIZE):
        if self.pre:
            out, self.pre = self.pre, b""
            return out
        buf = bytearray(n)
        k = self.raw.readinto(buf)
        return bytes(buf[:k])


def _sniff(buffered):
    """The first 6 bytes, and whether they had to be consumed to get them."""
    head = buffered.peek(6)
    if len(head) >= 6:
        return head[:6], False
    return buffered.read(6), True  # a slow pipe gave fewer: wait for 6 or EOF


def _wrap_compression(raw, url):
    buffered = io.BufferedReader(raw, BUFSIZE)
    head, consumed = _sniff(buffered)
    stream = io.BufferedReader(_Prefixed(head, buffered), BUFSIZE) if consumed else buffered
    codec = next((name for magic, name in _MAGIC if head.startswith(magic)), None)
    if codec is None:
        return stream, None
    stream = _ShortReads(stream)
    if codec == "zstd":
        if not consumed and isinstance(raw, _FdReader):
            # zstd is fed from a thread, which must not block inside the
            # buffered reader (holding its lock) when we stop early: the
            # interpreter would wait for that lock at exit
            stream = _Unbuffered(buffered, raw)
        return io.BufferedReader(_ZstdDecompressed(stream, url), BUFSIZE), codec
    if codec == "gzip":
        import gzip

        inner = gzip.GzipFile(fileobj=stream, mode="rb")
    elif codec == "bzip2":
        import bz2

        inner = bz2.BZ2File(stream, "rb")
    else:
        import lzma

        inner = lzma.LZMAFile(stream, "rb")
    return io.BufferedReader(_Decompressed(inner, url, codec), BUFSIZE), codec


def open_source(url, decompress=True):
    """Open an input by URL for reading; returns a buffered binary stream with
    ``.url`` and ``.compression`` attributes.  Compressed input is decoded."""
    scheme = scheme_of(url)
    if scheme == "-":
        raw = _FdReader(0, "-" if url == "-" else url, closefd=False)
        name = "-"
    elif scheme == "file":
        try:
            fd = os.open(url, os.O_RDONLY)
        except OSError as e:
            raise BadInput(f"{url}: cannot open: {e.strerror}") from None
        import stat

        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise BadInput(f"{url}: is a directory")
        raw = _FdReader(fd, url)
        name = url
    else:
        import subprocess

        if scheme == "pipe":
            cmd, what = url[5:], "command"
        else:
            cmd = _command_for(url, READ_COMMANDS, "READ")
            what = cmd.split()[0]
        try:
            proc = subprocess.Popen(
                cmd, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, preexec_fn=_pdeathsig,
            )
        except OSError as e:
            raise BadInput(f"{url}: cannot start {cmd!r}: {e.strerror}") from None
        proc._tarproc_stderr = proc.stderr
        raw = _FdReader(proc.stdout.fileno(), url, proc, closefd=False, what=what)
        raw._keep = proc.stdout
        name = url
    stream, codec = _wrap_compression(raw, "stdin" if name == "-" else name) if decompress else (io.BufferedReader(raw, BUFSIZE), None)
    stream.url = name
    stream.compression = codec
    return stream


# ---------------------------------------------------------------- writing


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


def pid_alive(pid):
    """Whether a process with this pid exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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

    def __init__(self, url, compression="auto", flush_on_stall=True):
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
        if flush_on_stall and self.compression is None:
            self._hook = self.flush  # errors become OutputError naming the URL
            _stall_hooks.append(self._hook)

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

    def flush(self):
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(f"{self.url}: write failed: {e.strerror or e}") from None

    def _unhook(self):
        if self._hook in _stall_hooks:
            _stall_hooks.remove(self._hook)

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


def open_sink(url, compression="auto"):
    """Open an output by URL; see :class:`Sink`."""
    return Sink(url, compression)


# ---------------------------------------------------------------- shard lists


def expand_urls(args=(), filelist=None):
    """Expand brace patterns (``shard-{0000..0146}.tar``) in every argument and
    in every line of the file list ``filelist`` (a URL, ``-`` for stdin).
    With neither, the input is stdin (``["-"]``)."""
    urls = []
    patterns = list(args)
    if filelist is not None:
        stream = open_source(filelist, decompress=False)
        try:
            text = stream.read().decode("utf-8", "surrogateescape")
        finally:
            stream.close()
        patterns += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    for pattern in patterns:
        if "{" in pattern and not pattern.startswith("pipe:"):
            import braceexpand

            try:
                urls.extend(braceexpand.braceexpand(pattern))
            except Exception as e:
                raise UsageError(f"bad brace pattern {pattern!r}: {e}") from None
        else:
            urls.append(pattern)
    if not urls and filelist is None:
        urls = ["-"]
    return urls
