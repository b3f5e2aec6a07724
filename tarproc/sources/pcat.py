"""Reading many shards concurrently, in worker processes.

Worker processes open the shards (download, decompress, parse the tar,
group into samples), so that work runs on every core; the parent only
collects.  Each worker owns a fixed share of the shard list (worker ``i`` of
``n`` reads shards ``i``, ``i+n``, …, in order) and sends its samples back in
batches over its own pipe; the parent takes one batch from each worker in
turn.  The output order therefore depends only on the shard list, the number
of workers and the options, never on timing: the same input and options give
the same bytes.  Every sample of every shard is delivered exactly once.

Workers send their batches over plain pipes with their own framing (a small
header, then the lengths and the encoded bytes written with ``writev``, no
joins); the parent reads each batch into a reused buffer and hands out views.

Two forms of the samples can come back:

* :func:`parallel_samples` — sample dicts (pickled by the workers);
* :func:`parallel_encoded` — each sample already encoded as tar members by
  :class:`~tarproc.samples.SampleWriter` in the worker (``bytes`` holding
  complete, padded members), so the parent writes them with no per-member
  work at all.  This is what ``tarpcat`` uses.

Errors: a damaged or unreadable shard ends the iteration with
:class:`~tarproc.errors.BadInput` naming the shard, after every sample read
before the damage.  With ``ignore_errors`` the rest of the shard is skipped
instead, ``warn(message)`` is told, and the URL is added to ``failed``.
"""

import os
import struct
import sys
from array import array

from ..errors import BadInput, TarprocError, UsageError
from ..core.stats import Stats

#: A worker sends a batch when it holds this many bytes or samples.
BATCH_BYTES = 256 << 10
BATCH_SAMPLES = 512
_PIPE_SIZE = 1 << 20

# Framing on the worker -> parent pipes (no multiprocessing Connection: its
# pickling and buffering copied every batch several times).  A frame is a
# header (kind, count, size) and ``size`` bytes:
#   _CONTROL: a pickled tuple (("start", url), ("warn", url, msg), ...);
#   _SAMPLES: a pickled list of sample dicts (parallel_samples);
#   _TAR:     ``count`` native uint64 sample lengths, then the samples'
#             tar members back to back (``size`` covers both).
_HEADER = struct.Struct("<BQQ")
_CONTROL, _SAMPLES, _TAR = 1, 2, 3
#: iovecs per writev call (Linux IOV_MAX is 1024)
_IOV = 1000


def _write_all(fd, pieces):
    """Write the buffers ``pieces`` to ``fd`` with writev, in groups under
    IOV_MAX, without joining them."""
    writev = os.writev
    for i in range(0, len(pieces), _IOV):
        chunk = pieces[i : i + _IOV]
        n = writev(fd, chunk)
        want = sum(map(len, chunk))
        if n < want:  # a partial write (a signal): finish the rest plainly
            rest = memoryview(b"".join(chunk))[n:]
            while rest:
                rest = rest[os.write(fd, rest):]


class _Out:
    """The worker's end of its pipe."""

    def __init__(self, fd):
        import pickle

        self.fd = fd
        self.dumps = pickle.dumps

    def control(self, *msg):
        blob = self.dumps(msg, protocol=5)
        _write_all(self.fd, [_HEADER.pack(_CONTROL, 0, len(blob)), blob])

    def samples(self, batch):
        blob = self.dumps(batch, protocol=5)
        _write_all(self.fd, [_HEADER.pack(_SAMPLES, len(batch), len(blob)), blob])

    def tar(self, lengths, pieces, size):
        head = array("Q", lengths).tobytes()
        pieces[0] = _HEADER.pack(_TAR, len(lengths), len(head) + size) + head
        _write_all(self.fd, pieces)


class _Collect:
    """A write-only stream that keeps what is written, as a list of pieces
    (the first one reserved for the frame header)."""

    __slots__ = ("pieces", "write")

    def __init__(self):
        self.pieces = [b""]
        self.write = self.pieces.append


def _worker(fd, close_fds, urls, mode, strict, header_defaults):
    """Body of a worker process: read ``urls`` in order, send batches."""
    import signal

    from ..runtime import procs, stall
    from ..core.grouping import SampleWriter
    from .samples import iter_samples

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    procs._pdeathsig()  # die with the parent: a SIGKILLed tarpcat must not leave us blocked on a full pipe
    stall._stall_hooks.clear()  # the parent's output buffers are not ours to flush
    for other in close_fds:  # the parent's ends of the pipes
        try:
            os.close(other)
        except OSError:
            pass
    out = _Out(fd)
    send = out.control
    tar = mode == "tar"
    try:
        for url in urls:
            send("start", url)
            stats = Stats()
            batch = []
            lengths = []
            size = 0
            if tar:
                coll = _Collect()
                writer = SampleWriter(coll, **header_defaults)
                tw = writer.tar

            def flush(failed=False):
                nonlocal batch, lengths, size
                if tar:
                    if failed:  # drop the pieces of a sample cut off by the error
                        pieces = coll.pieces
                        total = 0
                        for k in range(1, len(pieces)):
                            if total >= size:
                                del pieces[k:]
                                break
                            total += len(pieces[k])
                    if lengths:
                        out.tar(lengths, coll.pieces, size)
                        del coll.pieces[1:]
                else:
                    if batch:
                        out.samples(batch)
                batch = []
                lengths = []
                size = 0

            try:
                def warn(message, url=url):
                    send("warn", url, message)

                if tar:
                    before = tw.bytes_written
                    for sample in iter_samples([url], stats, strict=strict, warn=warn):
                        writer.write(sample)
                        after = tw.bytes_written
                        lengths.append(after - before)
                        size += after - before
                        before = after
                        if size >= BATCH_BYTES or len(lengths) >= BATCH_SAMPLES:
                            flush()
                else:
                    for sample in iter_samples([url], stats, strict=strict, warn=warn):
                        batch.append(sample)
                        size += sum(len(v) for k, v in sample.items() if type(v) is bytes)
                        if size >= BATCH_BYTES or len(batch) >= BATCH_SAMPLES:
                            flush()
            except TarprocError as e:
                flush(True)
                send("error", url, str(e), stats.as_dict())
                continue
            except (BrokenPipeError, EOFError):
                raise
            except Exception as e:  # a bug; still reported, never a hang
                flush(True)
                send("error", url, f"{url}: internal error: {type(e).__name__}: {e}", stats.as_dict())
                continue
            flush()
            send("done", url, stats.as_dict())
        send("end")
    except (BrokenPipeError, EOFError, OSError):
        pass  # the parent stopped reading (--count, an error): just end
    finally:
        os.close(fd)


def _add_stats(stats, d):
    stats.skipped += d["skipped"]
    stats.members_skipped += d["members_skipped"]
    for reason, n in d["reasons"].items():
        stats.reasons[reason] = stats.reasons.get(reason, 0) + n
    stats.inputs += 1


def _parallel(urls, workers, mode, strict=False, ignore_errors=False, warn=None, info=None,
              stats=None, failed=None, header_defaults=None):
    """Start the workers now; return a generator of their batches, taken in
    deterministic turns.  Closing the generator stops the workers."""
    import multiprocessing

    urls = list(urls)
    if not urls:
        return iter(())
    workers = max(1, min(workers or os.cpu_count() or 1, len(urls)))
    stats = stats if stats is not None else Stats()
    ctx = multiprocessing.get_context("fork")
    procs = []
    readers = []
    try:
        for i in range(workers):
            r, w = os.pipe()
            try:
                import fcntl

                fcntl.fcntl(w, 1031, _PIPE_SIZE)  # F_SETPIPE_SZ: fewer stalls between turns
            except (OSError, ImportError):
                pass
            readers.append(_Reader(r))
            try:
                p = ctx.Process(target=_worker,
                                args=(w, [x.fd for x in readers], urls[i::workers], mode, strict,
                                      header_defaults or {}),
                                daemon=True)
                p.start()
            finally:
                os.close(w)  # so later workers do not inherit this write end: EOF means the worker is gone
            procs.append(p)
    except BaseException:
        _stop(procs, readers)
        raise
    return _collect(urls, workers, procs, readers, ignore_errors, warn, info, stats, failed)


class _Reader:
    """The parent's end of a worker's pipe: reads frames into a buffer that
    is reused when nobody holds a view of it any more."""

    def __init__(self, fd):
        self.fd = fd
        self.file = open(fd, "rb", buffering=0, closefd=True)
        self.head = bytearray(_HEADER.size)
        self.buf = None
        self.base = 0

    def _fill(self, view):
        readinto = self.file.readinto
        pos = 0
        n = len(view)
        while pos < n:
            k = readinto(view[pos:])
            if not k:
                raise EOFError
            pos += k

    def frame(self):
        """Return (kind, count, view of the payload); the view is valid
        until the next call."""
        self._fill(memoryview(self.head))
        kind, count, size = _HEADER.unpack(self.head)
        buf = self.buf
        # reuse the buffer unless a view of it is still held (a consumer kept
        # a sample): then it must stay as it is
        if buf is None or len(buf) < size or sys.getrefcount(buf) != self.base:
            buf = None
            self.buf = None
            buf = bytearray(max(size, BATCH_BYTES + (BATCH_BYTES >> 2)))
            self.buf = buf
            self.base = sys.getrefcount(buf)
        view = memoryview(buf)[:size]
        self._fill(view)
        return kind, count, view

    def close(self):
        self.buf = None
        self.file.close()


def _stop(procs, readers):
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join()
    for r in readers:
        r.close()


def _collect(urls, workers, procs, readers, ignore_errors, warn, info, stats, failed):
    import pickle

    loads = pickle.loads
    try:
        active = list(range(workers))
        turn = 0
        while active:
            turn %= len(active)
            i = active[turn]
            reader = readers[i]
            while True:
                try:
                    kind, count, view = reader.frame()
                except (EOFError, OSError):
                    raise BadInput(f"worker {i} ended unexpectedly (shards {', '.join(urls[i::workers][:3])}...)") \
                        from None
                if kind == _TAR:
                    stats.read += count
                    head = 8 * count
                    lengths = view[:head].cast("Q").tolist()
                    data = view[head:]
                    del view
                    yield lengths, data
                    del data  # so that the buffer can be reused
                    turn += 1
                    break
                if kind == _SAMPLES:
                    batch = loads(view)
                    view.release()
                    stats.read += len(batch)
                    yield batch
                    turn += 1
                    break
                msg = loads(view)
                view.release()
                kind = msg[0]
                if kind == "end":
                    active.remove(i)
                    break
                if kind == "start":
                    if info is not None:
                        info(f"reading {msg[1]}")
                elif kind == "done":
                    _add_stats(stats, msg[2])
                elif kind == "warn":
                    if warn is not None:
                        warn(msg[2])
                elif kind == "error":
                    _add_stats(stats, msg[3])
                    if not ignore_errors:
                        raise BadInput(msg[2])
                    if failed is not None:
                        failed.append(msg[1])
                    if warn is not None:
                        warn(f"skipping the rest of {msg[1]}: {msg[2]}")
    finally:
        _stop(procs, readers)


def _shuffled_urls(urls, shuffle, seed):
    urls = list(urls)
    if shuffle and len(urls) > 1:
        import random

        random.Random(seed).shuffle(urls)
    return urls


def parallel_encoded(urls, workers=None, shuffle=0, seed=None, strict=False, ignore_errors=False,
                     warn=None, info=None, stats=None, failed=None, **header_defaults):
    """Yield the samples of ``urls``, read by ``workers`` processes (default:
    the number of cores), each as the ``bytes`` of its tar members (as
    :class:`~tarproc.samples.SampleWriter` writes them, so concatenating them
    and two zero blocks is a valid tar).  With ``shuffle`` > 0 the shard list
    is shuffled and the samples are mixed through a buffer of ``shuffle``
    samples, reproducibly with ``seed``."""
    from ..stages.basic import shuffle as shuffle_stage

    if shuffle < 0:
        raise UsageError("--shuffle must be >= 0")
    urls = _shuffled_urls(urls, shuffle, seed)

    batches = _parallel(urls, workers, "tar", strict, ignore_errors, warn, info, stats, failed, header_defaults)

    def blobs():
        try:
            for lengths, data in batches:
                pos = 0
                if shuffle > 0:  # copies: a buffered view would pin its whole batch in memory
                    for n in lengths:
                        yield bytes(data[pos : pos + n])
                        pos += n
                else:
                    view = memoryview(data)
                    for n in lengths:
                        yield view[pos : pos + n]
                        pos += n
                    del view
                del data  # so that the reader can reuse its buffer
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    if shuffle > 0:
        return shuffle_stage(shuffle, seed)(blobs())
    return blobs()


def parallel_encoded_batches(urls, workers=None, strict=False, ignore_errors=False, warn=None, info=None,
                             stats=None, failed=None, **header_defaults):
    """Like :func:`parallel_encoded` without shuffling, but yields
    ``(lengths, data)`` batches: ``data`` holds ``len(lengths)`` encoded
    samples back to back (the fastest way to copy everything)."""
    return _parallel(list(urls), workers, "tar", strict, ignore_errors, warn, info, stats, failed,
                     header_defaults)


def parallel_samples(urls, workers=None, shuffle=0, seed=None, strict=False, ignore_errors=False,
                     warn=None, info=None, stats=None, failed=None):
    """Yield the sample dicts of ``urls`` read by ``workers`` processes; see
    :func:`parallel_encoded` for ``shuffle`` and ``seed`` and the module
    documentation for the order and for errors."""
    from ..stages.basic import shuffle as shuffle_stage

    if shuffle < 0:
        raise UsageError("shuffle must be >= 0")
    urls = _shuffled_urls(urls, shuffle, seed)

    batches = _parallel(urls, workers, "samples", strict, ignore_errors, warn, info, stats, failed)

    def samples():
        try:
            for batch in batches:
                yield from batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    if shuffle > 0:
        return shuffle_stage(shuffle, seed)(samples())
    return samples()
