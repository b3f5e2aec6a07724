"""Function mode: a Python function on every sample, in parallel (:func:`map_function`).

**Function mode** (:func:`map_function`).  The function runs in ``parallel``
persistent worker processes (forked), each fed over its own pipe.  Samples
travel in batches pickled once by the C pickler; the function receives a
sample dict and returns a sample, a list of samples or ``None`` (drop).  A
returned sample without ``__key__`` gets the input's key (one with a
``__key__`` that is not a writable key fails); ``str`` values are
encoded as UTF-8.  The function can be given as a callable or as
``"module:function"`` / ``"path/to/file.py:function"``.

**Errors** follow ``error_handling``: ``"skip"`` drops a failed sample,
``"ignore"`` keeps what it produced (for a function: the input sample),
``"abort"`` raises :class:`~tarproc.errors.SampleFailed` after every sample
before it has been yielded.  Every failure is passed to ``on_error(message)``
(default: a line on stderr) with the key, the exit status and the last lines
of output, and counted in ``stats.failed``.
"""

import os
import struct
import sys
import threading

from ..errors import SampleFailed, UsageError
from ..core.blob import Blob
from ..core.rules import bad_field_name, bad_key, is_meta
from ..runtime.engine import Result, check_max_failures, check_mode, default_parallel, handler, stderr_report


def load_function(spec):
    """``"module:function"`` or ``"path/to/file.py:function"`` to a callable."""
    if callable(spec):
        return spec
    where, sep, name = str(spec).rpartition(":")
    if not sep or not where or not name:
        raise UsageError(f"--map {spec!r}: expected module:function or path/to/file.py:function")
    import importlib
    import importlib.util

    try:
        if where.endswith(".py") or os.sep in where:
            path = os.path.abspath(where)
            if not os.path.isfile(path):
                raise UsageError(f"--map {spec!r}: file {where!r} not found")
            modname = "_tarproc_map_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
            module = sys.modules.get(modname)
            if module is None or getattr(module, "__file__", None) != path:
                loader_spec = importlib.util.spec_from_file_location(modname, path)
                module = importlib.util.module_from_spec(loader_spec)
                sys.modules[modname] = module
                loader_spec.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"--map {spec!r}: cannot load {where!r}: {type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"--map {spec!r}: {where!r} has no function {name!r}")
    return fn


def _normalize(result, sample):
    """A function's return value as a list of samples, or raise TypeError."""
    if result is None:
        return []
    items = [result] if isinstance(result, dict) else result
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"function returned {type(result).__name__}, expected a dict, a list of dicts or None")
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise TypeError(f"function returned a list containing {type(item).__name__}, expected dicts")
        clean = {}
        for field, value in item.items():
            if not isinstance(field, str):
                raise TypeError(f"field name {field!r} is not a str")
            if is_meta(field):
                clean[field] = value
                continue
            why = bad_field_name(field)
            if why:
                raise TypeError(why)
            if isinstance(value, str):
                value = value.encode("utf-8")
            elif isinstance(value, (bytearray, memoryview)):
                value = bytes(value)
            elif not isinstance(value, (bytes, Blob)):
                raise TypeError(f"field {field!r} is {type(value).__name__}, not bytes, str or Blob")
            clean[field] = value
        if "__key__" not in clean:
            clean["__key__"] = sample.get("__key__")
        else:  # said here, as this input sample's failure, not by the writer about a key of no sample
            key = clean["__key__"]
            why = f"not a str but {type(key).__name__}" if not isinstance(key, str) else bad_key(key)
            if why:
                raise TypeError(f"function returned __key__ {clean['__key__']!r} ({why}; leave __key__ out "
                                f"to keep the input's)")
        out.append(clean)
    return out


class _BytesFields:
    """Wraps the function: large fields (blobs) are loaded into ``bytes``
    before it sees the sample (the default of ``map_function``)."""

    def __init__(self, fn):
        self.spec = fn
        self.fn = None

    def __call__(self, sample):
        if self.fn is None:
            self.fn = load_function(self.spec)
        if Blob in map(type, sample.values()):
            sample = {k: v.read() if type(v) is Blob else v for k, v in sample.items()}
        return self.fn(sample)


def _apply(fn, sample):
    """``(key, outputs, None)`` or ``(key, [], error, traceback)`` of one sample."""
    if not isinstance(sample, dict):
        return (None, [], f"TypeError: a sample is a dict, not {type(sample).__name__}", b"")
    key = sample.get("__key__")
    try:
        return (key, _normalize(fn(sample), sample), None)
    except Exception as e:
        return (key, [], f"{type(e).__name__}: {e}", user_traceback(e))


def user_traceback(e):
    """The traceback of ``e`` with tarproc's own frames left out (the user's
    function and what it called), as bytes; empty when no frame is the
    user's (the function returned something that is not a sample: the
    message says all)."""
    import os
    import traceback

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    te = traceback.TracebackException.from_exception(e)
    seen = set()
    t = te
    while t is not None and id(t) not in seen:  # the exception and those it was raised from/during
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if not f.filename.startswith(package)])
        t = t.__cause__ or t.__context__
    if not te.stack:
        return b""
    return "".join(te.format()).encode("utf-8", "replace")


#: A batch ends at this many bytes of field values (or at ``batch`` samples):
#: with at most 2 x parallel + 2 batches in flight, the samples held in
#: this process (sent, or back and waiting for their turn) stay within a
#: few tens of MiB however large the samples are.
BATCH_BYTES = 2 << 20
#: Fields this large cross to the workers beside a batch's pickle, not
#: copied into it: the message is written from the samples' own bytes.
BESIDE = 8192
_HEAD = struct.Struct("!II")


def pack_batch(batch):
    """A batch of samples as the buffers of one message (:func:`unpack_batch`
    reads it): a pickle of the batch in which the large ``bytes`` fields of
    plain ``dict`` samples are out-of-band buffers, followed by those
    buffers themselves, so this process copies nothing it read.  (Looked
    for when the batch's first sample has such a field: a batch of small
    samples is pickled as it is, without a look at every field.)"""
    import pickle

    first = batch[0] if batch else None
    if type(first) is not dict or not any(type(v) is bytes and len(v) >= BESIDE for v in first.values()):
        head = pickle.dumps(batch, protocol=5)
        return [_HEAD.pack(len(head), 0), head]
    PB = pickle.PickleBuffer
    shallow = []
    for sample in batch:
        if type(sample) is dict:
            for v in sample.values():
                if type(v) is bytes and len(v) >= BESIDE:
                    sample = {k: PB(v) if type(v) is bytes and len(v) >= BESIDE else v for k, v in sample.items()}
                    break
        shallow.append(sample)
    bufs = []
    head = pickle.dumps(shallow, protocol=5, buffer_callback=bufs.append)
    bufs = [b.raw() for b in bufs]
    lengths = struct.pack(f"!{len(bufs)}Q", *map(len, bufs))
    return [_HEAD.pack(len(head), len(bufs)) + lengths, head] + bufs


def unpack_batch(blob):
    """The samples of a message written by :func:`pack_batch` (a buffer)."""
    import pickle

    view = memoryview(blob)
    size, n = _HEAD.unpack_from(view, 0)
    at = _HEAD.size + 8 * n
    lengths = struct.unpack_from(f"!{n}Q", view, _HEAD.size)
    head = view[at : at + size]
    at += size
    bufs = []
    for length in lengths:
        bufs.append(view[at : at + length])
        at += length
    batch = pickle.loads(head, buffers=bufs)
    if n:
        for sample in batch:
            if type(sample) is dict:
                for k in [k for k, v in sample.items() if type(v) is memoryview]:
                    sample[k] = bytes(sample[k])
    return batch


def _worker_setup(spec):
    """In a worker: the handler of pickled batches (see
    :class:`~tarproc.runtime.pool.TaskPool`); ``mark[slot]`` tells the pool
    which sample is in hand."""
    import pickle

    if isinstance(spec, tuple):  # ("dill", bytes): a callable sent to a spawned worker
        import dill

        spec = dill.loads(spec[1])
    fn = load_function(spec)
    dumps, proto = pickle.dumps, pickle.HIGHEST_PROTOCOL

    def handle(blob, mark, slot):
        batch = unpack_batch(blob)
        del blob
        results = []
        for i, sample in enumerate(batch):
            mark[slot] = i
            results.append(_apply(fn, sample))
        return dumps(results, protocol=proto)

    return handle


def map_function(samples, fn, parallel=None, *, error_handling="skip", ordered=True, batch=32, stats=None,
                 on_error=None, prog="tarproc", start_method=None, stall=None, blobs="bytes", timeout=None,
                 tail_bytes=None, max_failures=None):
    """Apply ``fn`` (a callable -- lambdas and closures too --,
    ``"module:function"`` or ``"path/file.py:function"``) to every sample in
    ``parallel`` worker processes; yield the samples it returns, in input
    order unless ``ordered=False``.  Samples travel in batches of up to
    ``batch`` samples that end at :data:`BATCH_BYTES` of field values, so
    the batches in flight bound memory in bytes.  ``start_method`` is
    ``"fork"`` (default where available), ``"spawn"`` or ``"forkserver"``.  ``parallel=1`` inside a daemon process
    (a DataLoader worker) runs ``fn`` in this process, and is the default
    there (a ``multiprocess`` daemon, such as a ``map_function`` worker,
    cannot start workers of its own).  ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall`) sends partial batches when the
    input is about to block.  Works from any thread.

    Large fields (:class:`~tarproc.core.blob.Blob`) cross to the workers as
    references to their files.  With ``blobs="bytes"`` (the default) the
    worker loads them, so ``fn`` sees only ``bytes``: a 3 GB member costs
    3 GB in that worker.  With ``blobs="blob"`` ``fn`` gets the blob itself
    (``len``, ``open()``, ``copy_to``, ``path``/``offset``, ``read(n)``) and
    can stream; it may also return blobs.

    ``timeout`` (seconds): a sample whose ``fn`` runs longer fails (its
    worker is killed and replaced; the rest of its batch runs again).  It
    needs worker processes: with ``parallel=1`` inside a daemon it is not
    applied.  ``tail_bytes``: the bytes of a failed sample's traceback shown
    (default :data:`~tarproc.core.limits.TAIL_BYTES`, ``TARPROC_TAIL_BYTES``).
    ``max_failures=N``: once more than N samples have failed, stop
    (:class:`~tarproc.errors.TooManyFailures`, the workers' batches in
    flight dropped); ``None``: run on."""
    if blobs not in ("bytes", "blob"):
        raise UsageError(f"blobs must be 'bytes' or 'blob', not {blobs!r}")
    if blobs == "bytes":
        if not callable(fn):
            load_function(fn)
        fn = _BytesFields(fn)

    check_mode(error_handling)
    from ..runtime.pool import get_context, in_daemon

    if parallel is None and in_daemon():
        parallel = 1  # a DataLoader worker, a Pool worker, a map_function worker: already one of many
    parallel = parallel or default_parallel()
    if parallel < 1:
        raise UsageError("parallel must be >= 1")
    from ..runtime.procs import fit_workers

    parallel = fit_workers(parallel)[0]  # bounded by open files and memory (the CLI warns)
    if batch < 1:
        raise UsageError("batch must be >= 1")
    if start_method is not None:
        get_context(start_method)  # a clear message for a bad name, here
    if not callable(fn):
        load_function(fn)  # fail early, with a clear message, in this process
    on_error = on_error or stderr_report(prog)
    check_max_failures(max_failures)
    if parallel == 1 and in_daemon():
        return _run_inline(samples, fn, error_handling, stats, on_error, tail_bytes, max_failures)
    from ..runtime.procs import close_at_exit

    if timeout is not None and not timeout > 0:
        raise UsageError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return close_at_exit(_run_function(samples, fn, parallel, error_handling, ordered, batch, stats, on_error,
                                       start_method, stall, timeout, tail_bytes, max_failures))


def _run_inline(samples, fn, error_handling, stats, on_error, tail_bytes=None, max_failures=None):
    """``map_function`` in this process (no worker)."""
    fn = load_function(fn)
    per_sample = handler(error_handling, stats, on_error, None, True, tail_bytes, max_failures)
    for sample in samples:
        item = _apply(fn, sample)
        if item[2] is None:
            if item[1]:
                yield from item[1]
            else:
                yield from per_sample(Result(item[0], item[1]))
        else:
            kept = [sample] if error_handling == "ignore" else []
            yield from per_sample(Result(item[0], kept, error=f"function raised {item[2]}", log=item[3]))


def _submit(pool, batch, finish):
    """Send ``batch`` to the pool; ``finish((batch, results, exc))`` gets
    the pickled results (or a list).  When the worker dies on a sample, that
    sample alone fails and the rest of the batch is sent again."""
    import pickle

    from ..runtime.pool import WorkerDied

    def reply(data, exc):
        if isinstance(exc, WorkerDied) and 0 <= exc.position < len(batch):
            p = exc.position
            why = f"{exc.how} (worker process killed)" if exc.timed_out else f"worker process died ({exc.how})"
            failure = (batch[p].get("__key__"), [], why, b"", "died")
            rest = batch[:p] + batch[p + 1 :]
            if not rest:
                finish((batch, [failure], None))
                return

            def merge(payload):
                results, exc2 = payload[1], payload[2]
                if exc2 is not None:
                    finish((batch, None, exc2))
                    return
                results = results if isinstance(results, list) else pickle.loads(results)
                results.insert(p, failure)
                finish((batch, results, None))

            _submit(pool, rest, merge)
        else:
            finish((batch, data, exc))

    pool.send(pack_batch(batch), reply)


class _Batcher:
    """Groups samples into batches in the window's reading thread (one
    window item per batch, so the per-item work is per batch) and sends them
    pickled.  A partial batch is sent when the input is about to block (a
    stall hook), so a slow input still streams.  A window slot is taken
    before a batch's first sample is read (it bounds the batches in
    flight)."""

    def __init__(self, pool, size, window):
        self.pool = pool
        self.size = size
        self.window = window
        self.buf = []
        self.thread = None

    def feed(self, samples):
        """The window's reading: ``window.start(feed=batcher.feed(samples))``."""

        def feed(window):
            self.thread = threading.get_ident()
            # batches grow 1, 2, 4, ... up to ``size``: the first results come out
            # after one sample's work, not a whole batch's, so output starts at once
            # and a reader that leaves early (``| head``) is noticed early
            # a batch also ends at BATCH_BYTES of field values, so the batches
            # in flight (the window's size) bound memory in bytes, not only in
            # samples: 32 samples of 3 MB each are 96 MB a batch
            size = 1
            full = self.size
            nbytes = 0
            for sample in samples:
                buf = self.buf
                if not buf:
                    window.acquire()
                    nbytes = 0
                buf.append(sample)
                if type(sample) is dict:
                    for v in sample.values():
                        if type(v) is bytes:
                            nbytes += len(v)
                if len(buf) >= size or nbytes >= BATCH_BYTES:
                    self.buf = []
                    size = min(2 * size, full)
                    window.add(buf)
            self.flush()

        return feed

    def submit(self, index, batch):
        """The window's ``on_item``: send the batch; its results come back
        into the window as item ``index``."""
        put = self.window.put
        _submit(self.pool, batch, lambda payload: put(index, payload))

    def flush(self):
        """The stall hook: the partial batch goes now (in the reading thread only)."""
        if not self.buf or threading.get_ident() != self.thread:
            return
        batch, self.buf = self.buf, []
        self.window.add(batch)


def _run_function(samples, fn, parallel, error_handling, ordered, batch, stats, on_error, start_method, stall,
                  timeout=None, tail_bytes=None, max_failures=None):
    import pickle

    from ..runtime.pool import TaskPool, get_context
    from ..runtime.window import Window

    spec = fn
    if callable(fn) and get_context(start_method).get_start_method() != "fork":
        # by value with the globals it uses (recurse), so a lambda that reads a
        # global of a script, a notebook or `python -c` finds it in the worker
        import dill

        spec = ("dill", dill.dumps(fn, recurse=True))
    pool = TaskPool(parallel, _worker_setup, (spec,), start_method=start_method, name="tarproc-map",
                    timeout=timeout)
    # Batches in flight: enough to keep every worker busy, few enough that
    # memory stays bounded.
    window = Window(2 * parallel + 2, ordered, on_stall=stall)
    batcher = _Batcher(pool, batch, window)
    hook = batcher.flush
    per_sample = handler(error_handling, stats, on_error, None, True, tail_bytes, max_failures)

    def handle(payload):
        inputs, reply, exc = payload
        if exc is not None:
            raise SampleFailed(f"worker process failed: {exc}")
        for sample, item in zip(inputs, reply if isinstance(reply, list) else pickle.loads(reply)):
            key, outputs, error = item[0], item[1], item[2]
            if error is None:
                if outputs:  # the common case, without the per-sample handler
                    yield from outputs
                else:
                    yield from per_sample(Result(key, outputs))
            elif len(item) > 4:  # the worker died on this sample
                kept = [sample] if error_handling == "ignore" else []
                yield from per_sample(Result(key, kept, error=error))
            else:
                kept = [sample] if error_handling == "ignore" else []
                yield from per_sample(Result(key, kept, error=f"function raised {error}", log=item[3]))

    try:
        if stall is not None:
            stall.add(hook, first=True)
        window.start(feed=batcher.feed(samples), on_item=batcher.submit)
        yield from window.results(handle)
    finally:
        window.close()
        if stall is not None:
            stall.remove(hook)
        pool.close()
