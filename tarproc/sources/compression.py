"""Compressed inputs: gzip, bzip2, xz and zstd detected from the first bytes."""

import io

from ..errors import BadInput, TarprocError
from ..runtime.procs import _pdeathsig
from .open import BUFSIZE, _FdReader


_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)

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

    def __init__(self, stream, url, stall=None):
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
        from .open import _drain_stderr

        _drain_stderr(self.proc)
        self.reader = _FdReader(self.proc.stdout.fileno(), url, self.proc, closefd=False, what="zstd", stall=stall)
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
        # the stall hooks belong to the reading thread (zstd's output), not to the feeder thread
        stall = getattr(raw, "stall", None)
        if stall is not None:
            raw.stall = None
        if not consumed and isinstance(raw, _FdReader):
            # zstd is fed from a thread, which must not block inside the
            # buffered reader (holding its lock) when we stop early: the
            # interpreter would wait for that lock at exit
            stream = _Unbuffered(buffered, raw)
        return io.BufferedReader(_ZstdDecompressed(stream, url, stall), BUFSIZE), codec
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
