"""Compressed inputs: gzip, bzip2, xz and zstd detected from the first bytes.

Decoding runs beside the tar parsing, never in its thread, so compressed
input costs about what the decoder costs (the parser and the decoder each
keep a core busy, as with ``tar -xzf``):

* gzip, bzip2 and xz from a pipe, a download or a small file: a thread
  decodes with :mod:`zlib`, :mod:`bz2` or :mod:`lzma` (they release the GIL
  while they work) into a bounded queue of chunks of at most 1 MiB; from a
  file of 1 MiB or more, the same decoder runs as a program of its own
  (:mod:`tarproc.sources.unzip`, see :data:`FILE_PROGRAMS`), unless it is
  gzip that barely compresses (:data:`PROGRAM_MIN_RATIO`);
* zstd (and any codec given a program in :data:`PROGRAMS`): the program
  decodes and we read its output through a pipe.  A plain file is handed to
  it as its stdin; any other input (a pipe, a download) is fed to it by a
  small thread that moves the bytes with ``splice``.

Either way a damaged or truncated stream is one :class:`BadInput` naming the
input and the codec; closing early (``-c N``) stops the program and the
thread; concatenated streams (``cat a.gz b.gz``) read as one; a stream that
decodes to more than ``TARPROC_MAX_RATIO`` (1000) times its compressed bytes,
once past ``TARPROC_RATIO_FLOOR`` (256 MiB), is refused as a compression bomb.
"""

import io
import os

from ..core.limits import check_ratio
from ..errors import BadInput, TarprocError
from ..runtime.child import Child
from .raw import BUFSIZE, FdReader, grow_pipe
from . import unzip


def zstd_module():
    """The zstd binding: the standard library's ``compression.zstd``
    (Python 3.14+) or its backport, ``backports.zstd`` (same API); for the
    grouped zstd writer (:mod:`tarproc.sinks.grouped`) and the seek readers
    (:mod:`tarproc.sources.seekable`, :mod:`tarproc.sources.seekscan`)."""
    try:
        from compression import zstd  # noqa: F401
    except ImportError:
        from backports import zstd
    return zstd


_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)

#: Bytes of an input looked at to tell its compression.
SNIFF_BYTES = 16


def codec_of(head):
    """The compression of a stream from its first bytes (at least
    :data:`SNIFF_BYTES` of them, fewer at end of input), or ``None``.

    A zstd stream may start with skippable frames (magic ``0x184D2A50`` to
    ``0x184D2A5F``, little-endian, then a 4-byte length): ``pzstd`` writes
    one first, and ``zstd -dc`` reads it.  lz4 frames use the same magic
    range, so what follows the skippable frame decides when it is in ``head``."""
    head = bytes(head)
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    pos = 0
    while len(head) >= pos + 8 and head[pos] & 0xF0 == 0x50 and head[pos + 1 : pos + 4] == b"\x2a\x4d\x18":
        pos += 8 + int.from_bytes(head[pos + 4 : pos + 8], "little")
        if len(head) < pos + 4:
            return "zstd"  # the next frame is beyond what was looked at: zstd decides
    if pos and head[pos : pos + 4] in (b"\x28\xb5\x2f\xfd", b""):
        return "zstd"
    return None

#: Programs that decode a codec to stdout (the first one on PATH is used);
#: codecs not listed here are decoded in-process, in a thread.  Measured on
#: a 300 MB shard of small members (``bench/README.md``): ``gzip -dc`` spends
#: 1.2 s of CPU where zlib in a thread spends 0.5 s and stays ahead of the
#: parser (which waited for it 0.07 s in 4 s); ``gzip``, ``xz`` and
#: ``bzip2`` read their input in whole blocks (32 KiB, 8 KiB, 5,000 bytes)
#: and hold back what arrived of a stream that is still arriving.  zstd has
#: no decoder in Python 3.11's standard library.
PROGRAMS = {
    "zstd": (("zstd", "-dcq"),),
}
#: Programs for a codec when the input is a plain file of at least
#: :data:`FILE_PROGRAM_FROM` bytes (whole, so a program that holds back a
#: partial block delays nothing).  ``python`` stands for this interpreter
#: running :mod:`tarproc.sources.unzip`: the standard library's decoders
#: in a process of their own.  Measured on a 300 MB shard of small members
#: (6 MB gzipped, ``bench/README.md``; CPU seconds of the decoder alone):
#: zlib 0.6 s, ``gzip -dc`` 1.1 s, ``pigz -dc`` 0.85 s (0.5 s of it in the
#: kernel, and it ignores junk after the last stream); the same decoder in
#: a thread of ours shares the GIL with the parser (1.80 s against 1.70 s
#: for 276 MB of small members).  Pipes and downloads keep the thread: it
#: decodes what has arrived at once.
FILE_PROGRAMS = {
    "gzip": (("python",),),
    "bzip2": (("python",),),
    "xz": (("python",),),
}
#: Smaller compressed files are decoded in a thread (no process to start).
FILE_PROGRAM_FROM = 1 << 20
#: A gzip file whose first :data:`PROBE_BYTES` decode to less than this many
#: times their size (JPEGs, PNGs, anything already compressed: tar headers
#: alone make the ratio) is decoded in the thread too: inflating stored or
#: incompressible blocks costs next to nothing, so a program saves no CPU and
#: adds its start and a pipe hop per file (15 gzipped shards of JPEGs,
#: ``bench/bench_core.py --gzip``: 2.14x ``tar -xzOf``'s time with a program
#: per shard, 0.68x in the thread; bench/RESULTS.md).
PROGRAM_MIN_RATIO = 1.5
PROBE_BYTES = 256 << 10
#: Words in a decoder's message that say its input ended too early.
_TRUNCATED_WORDS = ("unexpected end", "premature end", "incomplete", "truncated", "missing trailer")


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


class _Source:
    """The compressed bytes: those already read while sniffing, then the
    rest of the input's file descriptor, read without Python's buffering
    (from another thread: no locks shared with the reading side)."""

    def __init__(self, raw, prefix):
        self.raw = raw
        # a descriptor read directly (a file, a pipe, a command's output), or a
        # reader of its own (a download that resumes: sources/resume.py)
        self.direct = isinstance(raw, FdReader)
        self.prefix = prefix
        self.count = 0  # compressed bytes handed on (for the bomb bound)
        self.ratio = {}  # max_ratio, ratio_floor of check_ratio (empty: the defaults)
        # stall hooks belong to the thread that parses, not to ours
        self.stall, raw.stall = getattr(raw, "stall", None), None

    def child_stdin(self):
        """The input's descriptor positioned at the start of the compressed
        bytes, when a decoder program can read it directly (a plain file);
        else ``None``."""
        raw = self.raw
        if not self.direct or raw.pollable or raw.proc is not None:
            return None
        try:
            pos = os.lseek(raw.fd, 0, os.SEEK_CUR) - len(self.prefix)
            if pos < 0:
                return None
            os.lseek(raw.fd, pos, os.SEEK_SET)
        except OSError:
            return None
        self.prefix = b""
        try:
            self.count = os.fstat(raw.fd).st_size - pos
        except OSError:
            pass
        return raw.fd

    def read(self, n=BUFSIZE):
        if self.prefix:
            out, self.prefix = self.prefix, b""
            self.count += len(out)
            return out
        if not self.direct:
            data = self.raw.read(n)  # BadInput when it cannot go on
            self.count += len(data)
            return data
        try:
            data = os.read(self.raw.fd, n)
        except OSError as e:
            raise BadInput(f"{self.raw.url}: read error: {e.strerror}") from None
        self.count += len(data)
        if not data:
            self.raw.eof = True
            self.raw.check_process()  # a failed download is not a short archive
        return data

    def pump(self, fd):
        """Copy everything to ``fd`` (a pipe), with ``splice`` where the kernel
        allows.  Returns when the input ends or ``fd``'s reader has gone."""
        try:
            while self.prefix:
                n = os.write(fd, self.prefix)
                self.prefix = self.prefix[n:]
                self.count += n
            splice = getattr(os, "splice", None) if self.direct else None
            while splice is not None:
                try:
                    n = splice(self.raw.fd, fd, BUFSIZE)
                except OSError as e:
                    import errno

                    if e.errno != errno.EINVAL:
                        raise
                    break  # this kind of input cannot be spliced: copy below
                if n == 0:
                    self.raw.eof = True
                    self.raw.check_process()
                    return
                self.count += n
            while True:
                data = self.read()
                if not data:
                    return
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
        except BrokenPipeError:
            return  # the decoder stopped: its exit status tells why
        except OSError as e:
            raise BadInput(f"{self.raw.url}: read error: {e.strerror}") from None

    def abort(self):
        """Stop a producing process, so a thread blocked reading it wakes."""
        if not self.direct:
            self.raw.abort()
            return
        child = self.raw.proc
        if child is not None and child.poll() is None:
            child.kill()

    def close(self):
        try:
            self.raw.close()
        except TarprocError:
            pass


def _file_size(fd):
    try:
        return os.fstat(fd).st_size
    except OSError:
        return 0


def _which(name):
    import shutil

    return shutil.which(name)


class _ProgramDecompressed(io.RawIOBase):
    """The output of a decoder program; a plain file is its stdin, any other
    input is fed to it by a thread."""

    def __init__(self, argv, codec, url, source, tail_bytes=None):
        self.url = url
        self.codec = codec
        self.source = source
        self.program = os.path.basename(argv[0])
        self.feed_error = None
        self.thread = None
        self.decoded = 0
        direct = source.child_stdin()
        try:
            # its stderr's tail read as it comes (a chatty decoder never blocks)
            self.proc = Child(argv, url, self.program, stdin=direct if direct is not None else "pipe", track=True,
                              tail_bytes=tail_bytes)
        except OSError as e:
            source.close()
            raise BadInput(f"{url}: cannot start {self.program}: {e.strerror}") from None
        grow_pipe(self.proc.stdout.fileno())
        # the reading side may stall (and flush outputs), never the feeder
        self.reader = FdReader(self.proc.stdout.fileno(), url, closefd=False, stall=source.stall)
        if direct is not None:
            source.close()  # the program has its own copy of the descriptor
        else:
            import threading

            feed_to = self.proc.stdin  # the feeder owns and closes it

            def feed():
                try:
                    source.pump(feed_to.fileno())
                except BaseException as e:  # an upstream failure: reported at the end
                    self.feed_error = e
                finally:
                    try:
                        feed_to.close()
                    except OSError:
                        pass
                    source.close()

            self.thread = threading.Thread(target=feed, daemon=True, name="tarproc-feed")
            self.thread.start()

    def readable(self):
        return True

    def readinto(self, buf):
        n = self.reader.readinto(buf)
        if n == 0:
            self._finish()
        self.decoded += n
        check_ratio(self.url, self.codec, self.decoded, self.source.count, **self.source.ratio)
        return n

    def _finish(self):
        rc = self.proc.wait()
        if self.thread is not None:
            # after a clean exit the decoder has read its input to the end,
            # so the feeder is done; after a failure it may wait on input
            self.thread.join(30 if rc == 0 else 1)
            if isinstance(self.feed_error, TarprocError):
                raise self.feed_error
        if rc != 0:
            text = self.proc.tail()
            what = "truncated" if any(w in text.lower() for w in _TRUNCATED_WORDS) else "damaged"
            detail = f" ({text})" if text else f" ({self.program} exit status {rc})"
            raise BadInput(f"{self.url}: {self.codec} stream is {what}{detail}")
        if self.feed_error is not None and not isinstance(self.feed_error, BrokenPipeError):
            raise BadInput(f"{self.url}: reading the input failed: {self.feed_error}")

    def close(self):
        if self.closed:
            return
        try:
            if self.proc.poll() is None:
                self.proc.kill()  # stopped early (-c N, an error downstream)
            self.proc.wait()
            self.source.abort()
            if self.thread is not None:
                self.thread.join(1)  # a thread blocked on a silent pipe is a daemon: left behind
            self.proc.stdout.close()  # stderr belongs to its drain thread
        finally:
            super().close()


# ------------------------------------------------------- in-process decoding


class _ThreadDecompressed(io.RawIOBase):
    """Decode in a thread into a bounded queue of chunks."""

    def __init__(self, codec, url, source):
        import queue
        import threading

        self.url = url
        self.codec = codec
        self.source = source
        self.queue = queue.Queue(maxsize=8)
        self.stopping = False
        self.pending = b""
        self.pos = 0
        self.done = False
        self.thread = threading.Thread(target=self._run, daemon=True, name="tarproc-decode")
        self.thread.start()

    def _run(self):
        from ..runtime.overlap import short_switch

        with short_switch():  # (zlib decodes without the GIL; else it waits 5 ms for it after each chunk)
            self._decode()

    def _decode(self):
        put = self.queue.put
        source, url, codec = self.source, self.url, self.codec
        decoded = 0
        try:
            for chunk in unzip.decoded_chunks(codec, source.read):
                decoded += len(chunk)
                check_ratio(url, codec, decoded, source.count, **source.ratio)
                put(chunk)
                if self.stopping:
                    return
            put(None)
        except BaseException as e:
            put(e)
        finally:
            self.source.close()

    def readable(self):
        return True

    def readinto(self, buf):
        if self.pos >= len(self.pending):
            if self.done:
                return 0
            stall = self.source.stall
            if stall and self.queue.empty():
                stall()
            item = self.queue.get()
            if item is None:
                self.done = True
                return 0
            if isinstance(item, BaseException):
                self.done = True
                raise self._error(item) from None
            self.pending, self.pos = item, 0
        n = min(len(buf), len(self.pending) - self.pos)
        buf[:n] = memoryview(self.pending)[self.pos : self.pos + n]
        self.pos += n
        return n

    def _error(self, e):
        if isinstance(e, TarprocError):
            return e
        if isinstance(e, EOFError):
            return BadInput(f"{self.url}: {self.codec} stream is truncated")
        if isinstance(e, MemoryError):
            return e
        return BadInput(f"{self.url}: {self.codec} stream is damaged ({e})")

    def close(self):
        if self.closed:
            return
        self.stopping = True
        self.source.abort()
        try:  # unblock a decoder waiting for room in the queue
            while True:
                self.queue.get_nowait()
        except Exception:
            pass
        self.thread.join(1)
        super().close()


# ------------------------------------------------------------------ sniffing


def _sniff(buffered):
    """The first :data:`SNIFF_BYTES` bytes (more when already buffered), and
    the bytes read to get them when they had to be consumed (``None`` when
    they are still in the buffer)."""
    head = buffered.peek(SNIFF_BYTES)
    if len(head) >= SNIFF_BYTES:
        return head[:4096], None
    got = b""  # a slow pipe gave fewer: wait for more, or EOF, while they can change the answer
    while len(got) < SNIFF_BYTES and not _decided(got):
        piece = buffered.read1(BUFSIZE)  # what is buffered, else one read
        if not piece:
            break
        got += piece
    return got[:4096], got


def _decided(head):
    """Whether more bytes after ``head`` cannot change :func:`codec_of`'s
    answer: a stream that began with ``first`` (lines2tar, a plain tar on
    a slow pipe) is decided at once, so its first line is not held back
    waiting for :data:`SNIFF_BYTES`."""
    if not head:
        return False
    for magic, _ in _MAGIC:
        if len(head) < len(magic) and magic.startswith(head):
            return False
    if head[0] & 0xF0 == 0x50 and b"\x2a\x4d\x18".startswith(bytes(head[1:4])):
        return False  # maybe a zstd skippable frame: codec_of looks further
    return True


def _gzip_ratio(prefix):
    """Decoded bytes per compressed byte of the start of a gzip file
    (``prefix``: its first bytes; at most :data:`PROBE_BYTES` decoded, so
    a bomb costs nothing here); ``inf`` when they do not decode (the
    decoder says what is wrong)."""
    import zlib

    data = prefix[:PROBE_BYTES]
    d = zlib.decompressobj(31)
    try:
        out = d.decompress(data, PROBE_BYTES)
    except zlib.error:
        return float("inf")
    used = len(data) - len(d.unconsumed_tail) - len(d.unused_data)
    return len(out) / used if used > 0 else float("inf")


def wrap_compression(raw, url, programs=None, settings=None):
    """``(stream, codec)``: ``raw`` (a :class:`~tarproc.sources.raw.FdReader`) buffered and,
    when its first bytes say so, decoded.  ``programs`` replaces
    :data:`PROGRAMS` (``{}``: decode in-process).  ``settings``: its
    ``max_ratio`` and ``ratio_floor`` bound the decoded bytes, its
    ``tail_bytes`` the stderr a decoder program's message is taken from."""
    buffered = io.BufferedReader(raw, BUFSIZE)
    head, got = _sniff(buffered)
    codec = codec_of(head)
    if codec is None:
        if got is None:
            return buffered, None
        return io.BufferedReader(_Prefixed(got, buffered), BUFSIZE), None
    # the decoder reads raw's descriptor from here on: take what is buffered
    prefix = buffered.read1(BUFSIZE) if got is None else got
    buffered.detach()
    source = _Source(raw, prefix)
    if settings is not None:
        source.ratio = {"max_ratio": settings.max_ratio, "ratio_floor": settings.ratio_floor}
    candidates = (PROGRAMS if programs is None else programs).get(codec, ())
    if programs is None and not raw.pollable and raw.proc is None and _file_size(raw.fd) >= FILE_PROGRAM_FROM \
            and (codec != "gzip" or _gzip_ratio(prefix) >= PROGRAM_MIN_RATIO):
        candidates += FILE_PROGRAMS.get(codec, ())
    for argv in candidates:
        if argv == ("python",):
            import sys

            argv = (sys.executable, "-I", "-S", unzip.__file__, codec)
        path = _which(argv[0])
        if path:
            tail = settings.tail_bytes if settings is not None else None
            return io.BufferedReader(_ProgramDecompressed((path,) + argv[1:], codec, url, source, tail), BUFSIZE), codec
    if codec == "zstd":
        source.close()
        raise BadInput(f"{url}: input is zstd-compressed but the zstd program is not installed")
    return io.BufferedReader(_ThreadDecompressed(codec, url, source), BUFSIZE), codec
