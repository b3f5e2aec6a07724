"""Reading many shards concurrently, in worker processes.

Worker processes open the shards (download, decompress, parse the tar,
group into samples), so that work runs on every core; the parent only
collects.  Each worker owns a fixed share of the shard list (worker ``i`` of
``n`` reads shards ``i``, ``i+n``, …, in order) and sends its samples back in
batches over its own pipe; the parent takes one batch from each worker in
turn.  The output order therefore depends only on the shard list, the number
of workers and the options, never on timing: the same input and options give
the same bytes.  Every sample of every shard is delivered exactly once.

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

from .errors import BadInput, TarprocError, UsageError
from .samples import Stats

#: A worker sends a batch when it holds this many bytes or samples.
BATCH_BYTES = 256 << 10
BATCH_SAMPLES = 512
_PIPE_SIZE = 1 << 20


class _Collect:
    """A write-only stream that keeps what is written, as a list of pieces."""

    __slots__ = ("pieces", "write")

    def __init__(self):
        self.pieces = []
        self.write = self.pieces.append


def _worker(conn, urls, mode, strict, header_defaults):
    """Body of a worker process: read ``urls`` in order, send batches."""
    import signal

    from . import urls as U
    from .samples import SampleWriter, iter_samples

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    U._pdeathsig()  # die with the parent: a SIGKILLed tarpcat must not leave us blocked on a full pipe
    U._stall_hooks.clear()  # the parent's output buffers are not ours to flush
    send = conn.send
    try:
        for url in urls:
            send(("start", url))
            stats = Stats()
            batch = []
            size = 0
            if mode == "tar":
                out = _Collect()
                writer = SampleWriter(out, **header_defaults)
                pieces = out.pieces
                join = b"".join
                lengths = []
            try:
                def warn(message, url=url):
                    send(("warn", url, message))

                for sample in iter_samples([url], stats, strict=strict, warn=warn):
                    if mode == "tar":
                        writer.write(sample)
                        blob = join(pieces)
                        pieces.clear()
                        batch.append(blob)
                        lengths.append(len(blob))
                        size += len(blob)
                    else:
                        batch.append(sample)
                        size += sum(len(v) for k, v in sample.items() if type(v) is bytes)
                    if size >= BATCH_BYTES or len(batch) >= BATCH_SAMPLES:
                        send(("batch", url, (lengths, join(batch)) if mode == "tar" else batch))
                        batch = []
                        lengths = []
                        size = 0
            except TarprocError as e:
                if batch:
                    send(("batch", url, (lengths, b"".join(batch)) if mode == "tar" else batch))
                send(("error", url, str(e), stats.as_dict()))
                continue
            except Exception as e:  # a bug; still reported, never a hang
                if batch:
                    send(("batch", url, (lengths, b"".join(batch)) if mode == "tar" else batch))
                send(("error", url, f"{url}: internal error: {type(e).__name__}: {e}", stats.as_dict()))
                continue
            if batch:
                send(("batch", url, (lengths, b"".join(batch)) if mode == "tar" else batch))
            send(("done", url, stats.as_dict()))
        send(("end",))
    except (BrokenPipeError, EOFError, OSError):
        pass  # the parent stopped reading (--count, an error): just end
    finally:
        conn.close()


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
    conns = []
    try:
        for i in range(workers):
            r, w = ctx.Pipe(duplex=False)
            try:
                import fcntl

                fcntl.fcntl(w.fileno(), 1031, _PIPE_SIZE)  # F_SETPIPE_SZ: fewer stalls between turns
            except (OSError, ImportError):
                pass
            p = ctx.Process(target=_worker, args=(w, urls[i::workers], mode, strict, header_defaults or {}),
                            daemon=True)
            p.start()
            w.close()  # so later workers do not inherit this write end: EOF means the worker is gone
            procs.append(p)
            conns.append(r)
    except BaseException:
        _stop(procs, conns)
        raise
    return _collect(urls, workers, procs, conns, ignore_errors, warn, info, stats, failed)


def _stop(procs, conns):
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join()
    for c in conns:
        c.close()


def _collect(urls, workers, procs, conns, ignore_errors, warn, info, stats, failed):
    try:
        active = list(range(workers))
        turn = 0
        while active:
            turn %= len(active)
            i = active[turn]
            conn = conns[i]
            while True:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    raise BadInput(f"worker {i} ended unexpectedly (shards {', '.join(urls[i::workers][:3])}...)") \
                        from None
                kind = msg[0]
                if kind == "batch":
                    payload = msg[2]
                    stats.read += len(payload[0]) if type(payload) is tuple else len(payload)
                    yield payload
                    turn += 1
                    break
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
        _stop(procs, conns)


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
    from .samples import shuffle as shuffle_stage

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
                        yield data[pos : pos + n]
                        pos += n
                else:
                    view = memoryview(data)
                    for n in lengths:
                        yield view[pos : pos + n]
                        pos += n
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
    from .samples import shuffle as shuffle_stage

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
