"""Reading many shards concurrently, in worker processes.

Worker processes open the shards (download, decompress, parse the tar,
group into samples), so that work runs on every core; the parent only
collects.  Each worker owns a fixed share of the shard list (worker ``i`` of
``n`` reads shards ``i``, ``i+n``, …, in order) and sends its samples back in
batches over its own pipe; the parent takes one batch from each worker in
turn.  The output order therefore depends only on the shard list, the number
of workers and the options, never on timing: the same input and options give
the same bytes.  Every sample of every shard is delivered exactly once.

Workers are started by the toolkit's one worker pool module
(:mod:`tarproc.runtime.pool`, on ``multiprocess``; ``start_method`` chooses
``fork``, ``spawn`` or ``forkserver``) and send their batches as pool
messages written with ``writev`` (no joins); the parent reads each batch into
a reused buffer and hands out views.

Two forms of the samples can come back:

* :func:`parallel_samples` — sample dicts (pickled by the workers);
* :func:`parallel_encoded` — each sample already encoded as tar members by
  :class:`~tarproc.core.grouping.SampleWriter` in the worker (``bytes`` holding
  complete, padded members), so the parent writes them with no per-member
  work at all.  This is what ``tarpcat`` uses.

Errors: a damaged or unreadable shard ends the iteration with
:class:`~tarproc.errors.BadInput` naming the shard, after every sample read
before the damage, unless ``on_bad_shard`` (a policy name or a
:class:`~tarproc.sources.badshards.BadShards`, as for
:func:`~tarproc.iter_samples`) says to skip it: with ``"partial"`` the
samples read before the damage are kept, with ``"skip"`` the worker holds
each shard's samples until it ends and drops them when it breaks.  A skipped
shard is reported in one line (to ``warn`` unless a ``BadShards`` says
otherwise) and its URL added to ``failed``.  ``ignore_errors`` is
``on_bad_shard="partial"``.

The encoded forms apply the writers' rule for one key side by side
(:class:`~tarproc.core.grouping.SideBySide`) to the order they give, with the
key and names the workers send with each sample's bytes.
"""

import os
import struct
from array import array

from ..errors import EXIT_FAILED, BadInput, OutputError, TarprocError, UsageError
from ..core.stats import Stats
from .resume import RETRIES, STALL_TIMEOUT

#: A worker sends a batch when it holds this many bytes or samples.
BATCH_BYTES = 256 << 10
BATCH_SAMPLES = 512
_PIPE_SIZE = 1 << 20

# Messages from a worker (pool messages, see tarproc.runtime.pool) start with
# a header (kind, count):
#   _CONTROL: a pickled tuple (("start", url), ("warn", url, msg), ...);
#   _SAMPLES: a pickled list of sample dicts (parallel_samples);
#   _TAR:     ``count`` native uint64 sample lengths, a native uint64 m, m
#             bytes of a pickled pair of lists (keys, names_of) of its samples
#             (of every one in mode "tar-all", which parallel_encoded
#             shuffles, else of the first and last), then the samples' tar
#             members back to back.
#   _SAMPLES_PART, _TAR_PART: the same, for the complete samples of a batch
#             sent early because the worker's input stalled; the batch goes on
#             in the next message, so the parent stays with this worker (the
#             turns, hence the output order, do not depend on timing).
#   _PIECES:  one sample holding large fields: a pickled list of its tar
#             pieces, ``bytes`` or a blob reference (core.blob.handover), so
#             a blob crosses as its spool file's name, never its bytes, and
#             its key and names_of.
_HEADER = struct.Struct("<BQ")
_U64 = struct.Struct("=Q")
_CONTROL, _SAMPLES, _TAR, _PIECES, _SAMPLES_PART, _TAR_PART = 1, 2, 3, 4, 5, 6


class _Out:
    """The worker's end of its pipe."""

    def __init__(self, conn, spooler=None):
        import pickle

        from ..runtime.pool import send_pieces

        self.spooler = spooler
        self.conn = conn
        self.fd = conn.fileno()
        self.send = send_pieces
        self.dumps = pickle.dumps

    def control(self, *msg):
        self.send(self.fd, [_HEADER.pack(_CONTROL, 0), self.dumps(msg, protocol=5)])

    def samples(self, batch, part=False):
        self.send(self.fd, [_HEADER.pack(_SAMPLES_PART if part else _SAMPLES, len(batch)),
                            self.dumps(batch, protocol=5)])

    def pieces(self, pieces, meta):
        from ..core.blob import Blob, handover

        refs = [handover(p, self.spooler) if type(p) is Blob else bytes(p) for p in pieces]
        self.send(self.fd, [_HEADER.pack(_PIECES, 1), self.dumps((refs, meta), protocol=5)])

    def tar(self, lengths, metas, pieces, part=False):
        metas = self.dumps(metas, protocol=5)  # (keys, names)
        pieces[0] = (_HEADER.pack(_TAR_PART if part else _TAR, len(lengths)) + array("Q", lengths).tobytes()
                     + _U64.pack(len(metas)) + metas)
        self.send(self.fd, pieces)


class _Collect:
    """A write-only stream that keeps what is written, as a list of pieces
    (the first one reserved for the frame header)."""

    __slots__ = ("pieces", "write", "write_blob")

    def __init__(self):
        self.pieces = [b""]
        self.write = self.write_blob = self.pieces.append


def _worker(conn, urls, mode, strict, header_defaults, hold=False, resume=None):
    """Body of a worker process (started by :func:`tarproc.runtime.pool.start_worker`,
    which sets its signals and makes it die with the parent): read ``urls``
    in order, send batches.  ``mode``: "samples", "tar" or "tar-all" (the
    key and field names of every sample, not only of a batch's ends).  ``hold``:
    a shard's samples are held until it ends (``on_bad_shard="skip"``)."""
    from ..core.grouping import SampleWriter, names_of
    from ..runtime.stall import Stall
    from .samples import iter_samples
    from .badshards import held as hold_shard
    from ..core.blob import Blob

    import signal

    signal.signal(signal.SIGTERM, _on_term)  # told to stop: end our input commands too
    out = _Out(conn, (resume or {}).get("spooler"))
    stall = Stall()  # the input is about to wait: send the complete samples of the batch so far
    send = out.control
    tar = mode != "samples"
    every = mode == "tar-all"
    try:
        for url in urls:
            send("start", url)
            stats = Stats()
            batch = []
            lengths = []
            keys = []  # the keys and names_of of every sample of the batch, or of its first and last
            names = []
            last = None
            size = 0
            held = 0  # samples and bytes of the current batch, including those sent early
            held_size = 0
            if tar:
                coll = _Collect()
                writer = SampleWriter(coll, **header_defaults)
                tw = writer.tar

            def flush(failed=False, part=False):
                nonlocal batch, lengths, keys, names, size, held, held_size
                if tar:
                    if failed:  # drop the pieces of a sample cut off by the error
                        pieces = coll.pieces
                        total = 0
                        for k in range(1, len(pieces)):
                            if total >= size:
                                del pieces[k:]
                                break
                            total += len(pieces[k])
                    if lengths or (held and not part):
                        if len(lengths) > 1 and not every:
                            keys.append(last.get("__key__"))
                            names.append(names_of(last))
                        out.tar(lengths, (keys, names), coll.pieces, part)
                        del coll.pieces[1:]
                else:
                    if batch or (held and not part):
                        out.samples(batch, part)
                batch = []
                lengths = []
                keys = []
                names = []
                size = 0
                if not part:
                    held = held_size = 0

            def early():
                if lengths or batch:
                    flush(part=True)

            stall.hooks[:] = [early]

            try:
                def warn(message, url=url):
                    send("warn", url, message)

                if tar:
                    before = tw.bytes_written
                    # raw: unchanged samples go out as the bytes they were read from
                    samples = iter_samples([url], stats, strict=strict, warn=warn, stall=stall, raw=True,
                                           **(resume or {}))
                    for sample in hold_shard(samples) if hold else samples:
                        # large fields: sent alone, by reference (a sample copied as read has none)
                        if getattr(sample, "raw", None) is None and Blob in map(type, sample.values()):
                            flush()
                            one = _Collect()
                            SampleWriter(one, **header_defaults).write(sample)
                            out.pieces(one.pieces[1:], (sample.get("__key__"), names_of(sample)))
                            continue
                        writer.write(sample)
                        after = tw.bytes_written
                        if every or not lengths:
                            keys.append(sample.get("__key__"))
                            names.append(names_of(sample))
                        last = sample
                        lengths.append(after - before)
                        size += after - before
                        held += 1
                        held_size += after - before
                        before = after
                        if held_size >= BATCH_BYTES or held >= BATCH_SAMPLES:
                            flush()
                else:
                    samples = iter_samples([url], stats, strict=strict, warn=warn, stall=stall, **(resume or {}))
                    for sample in hold_shard(samples) if hold else samples:
                        if Blob in map(type, sample.values()):  # large fields cross as references to their files
                            from ..core.blob import handover

                            sample = {k: _Ref(handover(v, out.spooler)) if type(v) is Blob else v for k, v in sample.items()}
                        batch.append(sample)
                        n = sum(len(v) for k, v in sample.items() if type(v) is bytes)
                        size += n
                        held += 1
                        held_size += n
                        if held_size >= BATCH_BYTES or held >= BATCH_SAMPLES:
                            flush()
            except TarprocError as e:
                flush(True)
                send("error", url, str(e), stats.as_dict(), e.exit_code == EXIT_FAILED)  # (a full disk: not the shard's fault)
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
        conn.close()
        from ..core.blob import remove_spool_files

        remove_spool_files()  # a process pool ends its workers with os._exit: no atexit


def _on_term(signum, frame):
    """SIGTERM in a worker (the parent stops it: an error, --count reached,
    the parent itself told to stop): end the worker's input commands
    (``pipe:``, downloads: their process groups) and its spool files, then
    exit at once."""
    from ..core.blob import remove_spool_files
    from ..runtime.child import when_started
    from .open import stop_sources

    def stop():
        try:
            stop_sources()
            remove_spool_files()
        finally:
            os._exit(143)

    when_started(stop)  # (an input command being started is registered first, then ended)


class _Ref:
    """A blob in a pickled sample (see :func:`tarproc.core.blob.handover`)."""

    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref

    def __reduce__(self):
        return (_Ref, (self.ref,))


def _add_stats(stats, d):
    stats.skipped += d["skipped"]
    stats.members_skipped += d["members_skipped"]
    for reason, n in d["reasons"].items():
        stats.reasons[reason] = stats.reasons.get(reason, 0) + n
    stats.inputs += 1


def _parallel(urls, workers, mode, strict=False, ignore_errors=False, warn=None, info=None,
              stats=None, failed=None, header_defaults=None, start_method=None, stall=None, on_bad_shard=None,
              resume=None):
    """Start the workers now; return a generator of their batches, taken in
    deterministic turns.  Closing the generator stops the workers."""
    from ..runtime.pool import Receiver, get_context, start_worker

    from .badshards import as_bad_shards

    urls = list(url_list(urls, (resume or {}).get("settings")))
    if not urls:
        return iter(())
    bad = as_bad_shards("partial" if ignore_errors and on_bad_shard in (None, "fail") else on_bad_shard, warn)
    hold = bad is not None and bad.policy == "skip"
    from ..runtime.procs import fit_workers

    workers = fit_workers(max(1, min(workers or os.cpu_count() or 1, len(urls))))[0]
    stats = stats if stats is not None else Stats()
    ctx = get_context(start_method)
    procs = []
    conns = []
    readers = []
    try:
        for i in range(workers):
            p, conn = start_worker(ctx, _worker, (urls[i::workers], mode, strict, header_defaults or {}, hold, resume),
                                   parent_fds=[c.fileno() for c in conns], name=f"tarpcat-{i}",
                                   pipe_size=_PIPE_SIZE)
            procs.append(p)
            conns.append(conn)
            readers.append(Receiver(conn.fileno(), reuse=True, size=BATCH_BYTES + (BATCH_BYTES >> 2)))
    except BaseException:
        _stop(procs, readers, conns)
        raise
    return _collect(urls, workers, procs, readers, conns, bad, warn, info, stats, failed, stall, mode)


def _stop(procs, readers, conns):
    # SIGTERM first: a worker ends its input commands (their own process
    # groups, which SIGKILL would leave running), then SIGKILL what is left
    from ..runtime.pool import stop_workers

    stop_workers(procs, timeout=2)
    for r in readers:
        r.close()
    for c in conns:
        c.close()
    # spool files a worker was still writing (killed, or ended by os._exit
    # without atexit); those handed over to us are locked by us and stay
    from ..core.blob import remove_spools_of

    for p in procs:
        if p.pid is not None:
            remove_spools_of(p.pid)


def poll_ready(fd):
    """Whether a read on ``fd`` would return at once."""
    import select

    return bool(select.select([fd], [], [], 0)[0])


def _collect(urls, workers, procs, readers, conns, bad, warn, info, stats, failed, stall=None,
             mode="tar"):
    """The batches of the workers, in turns: ``(lengths, data)`` or ``(None,
    pieces)`` in mode "tar" (checked with SideBySide in this order); with
    their ``(keys, names)`` third in mode "tar-all"; sample lists in "samples"."""
    import pickle

    from ..core.grouping import SideBySide
    from ..errors import describe_exit

    hsize = _HEADER.size
    every = mode == "tar-all"
    side = SideBySide()
    check, restart = side.check, side.restart

    loads = pickle.loads
    try:
        active = list(range(workers))
        turn = 0
        while active:
            turn %= len(active)
            i = active[turn]
            reader = readers[i]
            while True:
                if stall and not poll_ready(conns[i].fileno()):
                    stall()  # about to wait for this worker: flush what buffers our output
                try:
                    view = reader.recv()
                except (EOFError, OSError):
                    procs[i].join(5)
                    raise BadInput(f"worker {i} ended unexpectedly ({describe_exit(procs[i].exitcode)}; shards "
                                   f"{', '.join(urls[i::workers][:3])}...)") from None
                kind, count = _HEADER.unpack_from(view)
                view = view[hsize:]
                if kind == _TAR or kind == _TAR_PART:
                    stats.read += count
                    head = 8 * count
                    lengths = view[:head].cast("Q").tolist()
                    m = _U64.unpack_from(view, head)[0]
                    head += 8
                    keys, names = loads(view[head : head + m])
                    data = view[head + m :]
                    del view
                    if every:
                        yield lengths, data, (keys, names)
                    else:
                        if count:
                            check(keys[0], names[0])  # next to the last sample written
                            if count > 1:  # the worker's writer checked the rest, up to the last
                                restart(keys[1], names[1])
                        yield lengths, data
                    del data  # so that the buffer can be reused
                    if kind == _TAR_PART:  # the batch goes on: same worker
                        continue
                    turn += 1
                    break
                if kind == _PIECES:
                    from ..core.blob import take

                    refs, (key, names) = loads(view)
                    view.release()
                    pieces = [take(p) if type(p) is tuple else p for p in refs]
                    stats.read += 1
                    if every:
                        yield None, pieces, ([key], [names])
                    else:
                        check(key, names)
                        yield None, pieces
                    turn += 1
                    break
                if kind == _SAMPLES or kind == _SAMPLES_PART:
                    batch = loads(view)
                    view.release()
                    for sample in batch:
                        for k, v in sample.items():
                            if type(v) is _Ref:
                                from ..core.blob import take

                                sample[k] = take(v.ref)
                    stats.read += len(batch)
                    yield batch
                    if kind == _SAMPLES_PART:
                        continue
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
                        from ..core.limits import shown

                        info(f"reading {shown(msg[1])}")
                elif kind == "done":
                    _add_stats(stats, msg[2])
                elif kind == "warn":
                    if warn is not None:
                        warn(msg[2])
                elif kind == "error":
                    _add_stats(stats, msg[3])
                    if len(msg) > 4 and msg[4]:  # an output not written (a spool file on a full disk)
                        raise OutputError(msg[2])
                    if bad is None:
                        raise BadInput(msg[2])
                    bad.add(msg[1], msg[2], msg[3]["read"])
                    if failed is not None:
                        failed.append(msg[1])
        if bad is not None:
            bad.check(len(urls))
    finally:
        _stop(procs, readers, conns)


def url_list(urls, settings=None):
    """A pattern string expanded (``"shard-{0..9}.tar"``), or the URLs of a
    list (at most ``settings.max_urls`` of them)."""
    from ..core.limits import MAX_URLS, bounded_list

    from .shardlist import as_urls

    return bounded_list(as_urls(urls), "the shard list", max_urls=settings.max_urls if settings else MAX_URLS)


def _shuffled_urls(urls, shuffle, seed, settings=None):
    urls = url_list(urls, settings)
    if shuffle and len(urls) > 1:
        import random

        random.Random(seed).shuffle(urls)
    return urls


def parallel_encoded(urls, workers=None, shuffle=0, seed=None, strict=False, ignore_errors=False,
                     warn=None, info=None, stats=None, failed=None, start_method=None, stall=None,
                     on_bad_shard=None, retries=RETRIES, stall_timeout=STALL_TIMEOUT, spooler=None, settings=None,
                     **header_defaults):
    """Yield the samples of ``urls``, read by ``workers`` processes (default:
    the number of cores), each as the ``bytes`` of its tar members (as
    :class:`~tarproc.core.grouping.SampleWriter` writes them, so concatenating them
    and two zero blocks is a valid tar); a sample with large fields comes as a
    list of pieces, ``bytes`` and :class:`~tarproc.core.blob.Blob` (see
    :func:`write_pieces`).  With ``shuffle`` > 0 the shard list
    is shuffled and the samples are mixed through a buffer of ``shuffle``
    samples, reproducibly with ``seed``.  ``urls`` is a pattern string or a
    list; ``start_method``: ``fork`` (default), ``spawn`` or ``forkserver``.  A worker whose
    input stalls sends the samples it has at once; ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall`, e.g. also given to the sink) is
    called before waiting for a worker, so output keeps pace with slow input.
    Two samples that come side by side with one key and a common field (from
    shards that share keys) raise :class:`~tarproc.errors.BadSample` before
    the second is given (see the module documentation).  ``retries`` and
    ``stall_timeout``: resuming broken downloads, ``spooler`` and
    ``settings``: as for :func:`~tarproc.sources.samples.iter_samples`, in
    every worker."""
    import random

    from ..core.shuffle import buffer_shuffle

    from ..core.limits import whole_number

    shuffle = whole_number(shuffle, "--shuffle")
    urls = _shuffled_urls(urls, shuffle, seed, settings)

    batches = _parallel(urls, workers, "tar-all" if shuffle > 0 else "tar", strict, ignore_errors, warn, info,
                        stats, failed, header_defaults, start_method, stall, on_bad_shard,
                        {"retries": retries, "stall_timeout": stall_timeout, "spooler": spooler, "settings": settings})

    def blobs():
        try:
            for lengths, data in batches:
                if lengths is None:  # one sample with large fields: a list of pieces (bytes, Blob)
                    yield data
                    continue
                pos = 0
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

    if shuffle <= 0:
        return blobs()

    def with_names():
        for lengths, data, (keys, names) in batches:
            if lengths is None:
                yield data, keys[0], names[0]
                continue
            pos = 0
            for n, key, nm in zip(lengths, keys, names):  # copies: a view would pin its whole batch in memory
                yield bytes(data[pos : pos + n]), key, nm
                pos += n
            del data

    def shuffled():  # the side-by-side rule on the order they come out in
        from ..core.grouping import SideBySide

        mixed = buffer_shuffle(with_names(), shuffle, random.Random(seed))
        try:
            yield from SideBySide().checked(mixed)
        finally:
            mixed.close()
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    return shuffled()


def write_pieces(out, pieces):
    """Write an encoded sample given as a list of pieces (``bytes`` or
    :class:`~tarproc.core.blob.Blob`, copied in chunks) to ``out``."""
    for p in pieces:
        if hasattr(p, "copy_to"):
            p.copy_to(out)
        else:
            out.write(p)


def parallel_encoded_batches(urls, workers=None, strict=False, ignore_errors=False, warn=None, info=None,
                             stats=None, failed=None, start_method=None, stall=None, on_bad_shard=None,
                             retries=RETRIES, stall_timeout=STALL_TIMEOUT, spooler=None, settings=None,
                             **header_defaults):
    """Like :func:`parallel_encoded` without shuffling, but yields
    ``(lengths, data)`` batches: ``data`` holds ``len(lengths)`` encoded
    samples back to back (the fastest way to copy everything).  A sample with
    large fields comes alone as ``(None, pieces)``: a list of ``bytes`` and
    :class:`~tarproc.core.blob.Blob` to write in turn (:func:`write_pieces`).
    A batch whose first sample has the key and a field of the last sample
    given raises :class:`~tarproc.errors.BadSample` instead."""
    return _parallel(url_list(urls, settings), workers, "tar", strict, ignore_errors, warn, info, stats, failed,
                     header_defaults, start_method, stall, on_bad_shard,
                        {"retries": retries, "stall_timeout": stall_timeout, "spooler": spooler, "settings": settings})


def parallel_samples(urls, workers=None, shuffle=0, seed=None, strict=False, ignore_errors=False,
                     warn=None, info=None, stats=None, failed=None, start_method=None, stall=None,
                     on_bad_shard=None, retries=RETRIES, stall_timeout=STALL_TIMEOUT, spooler=None, settings=None):
    """Yield the sample dicts of ``urls`` read by ``workers`` processes; see
    :func:`parallel_encoded` for ``shuffle`` and ``seed`` and the module
    documentation for the order and for errors."""
    import random

    from ..core.shuffle import buffer_shuffle

    from ..core.limits import whole_number

    shuffle = whole_number(shuffle, "shuffle")
    urls = _shuffled_urls(urls, shuffle, seed, settings)

    batches = _parallel(urls, workers, "samples", strict, ignore_errors, warn, info, stats, failed, None,
                        start_method, stall, on_bad_shard,
                        {"retries": retries, "stall_timeout": stall_timeout, "spooler": spooler, "settings": settings})

    def samples():
        try:
            for batch in batches:
                yield from batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    if shuffle > 0:
        return buffer_shuffle(samples(), shuffle, random.Random(seed))
    return samples()
