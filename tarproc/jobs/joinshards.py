"""Joining shard by shard: :func:`join_shards` joins shard ``i`` of every
input into output ``i`` (``tarjoin -o 'ab-{0000..0099}.tar' -p N``), each
output committed when its own pair succeeds, pairs joined in worker
processes of the toolkit's pool (:mod:`tarproc.runtime.pool`).  The join of
one pair is :func:`tarproc.stages.join.join_samples`."""

from ..core.limits import quote, shown
from ..errors import BadInput, UsageError
from ..stages.join import input_names, join_samples


def join_shards(inputs, outputs, tables=(), how="strict", order="input", rename=None, parallel=1,
                memory=512 << 20, tmpdir=None, strict=False, blob_threshold=None, spool_dir=None, start_method=None,
                done=None, warn=None, settings=None):
    """Join shard by shard: ``inputs`` is a list of shard lists of one length
    (``[[a0, a1], [b0, b1]]``), ``outputs`` a list of that length; pair ``i``
    (``a_i`` with ``b_i`` ...) is joined by :func:`join_samples` into
    ``outputs[i]``, which is committed as soon as its own join succeeds
    (a failed pair leaves nothing under its name).  ``parallel`` pairs are
    joined at once, in worker processes of the toolkit's pool
    (:mod:`tarproc.runtime.pool`; ``start_method`` as there).  ``done(i,
    written)`` is called as each pair completes.  Raises the error of the
    first pair (in order) that failed, after every pair has ended.

    ``tables``: keyed tables (TSV, CSV, JSON lines; not ``.npy`` arrays,
    whose rows follow A's order across all pairs), read once here (and
    shared with the workers as the processes fork); with ``how="strict"``
    a row no pair used is an error once every pair has ended (the outputs
    of the pairs are then already committed).  ``warn`` hears once of a
    rename that met no field in any pair."""
    from ..sources.columns import KeyedTable, RowArray, open_table

    inputs = [list(x) for x in inputs]
    outputs = list(outputs)
    if not inputs or any(len(x) != len(outputs) for x in inputs):
        raise UsageError("join shard by shard: every input needs as many shards as there are outputs ("
                         + ", ".join(f"{n}: {len(x)}" for n, x in zip(input_names(len(inputs)), inputs))
                         + f"; outputs: {len(outputs)})")
    if isinstance(tables, str):
        tables = [tables]
    opened = [t if isinstance(t, (KeyedTable, RowArray)) else open_table(t, memory, settings) for t in tables or ()]
    for t in opened:
        if t.format == "npy":
            raise UsageError(f"{shown(t.path)}: a .npy table's rows follow A's samples in order across all "
                             f"shards: join it in one pass, not shard by shard")
        t.partial = True
    spec = dict(how=how, order=order, rename=rename, memory=memory, tmpdir=tmpdir, strict=strict,
                blob_threshold=blob_threshold, spool_dir=spool_dir, tables=opened, settings=settings)
    pairs = [[x[i] for x in inputs] for i in range(len(outputs))]
    results = [None] * len(pairs)
    if parallel <= 1 or len(pairs) <= 1:
        for i, (urls, out) in enumerate(zip(pairs, outputs)):
            results[i] = _join_pair(urls, out, spec)
            if done is not None and results[i][0] == 0:
                done(i, results[i][1])
    else:
        _join_pool(pairs, outputs, spec, parallel, start_method, results, done)
    if warn is not None:  # a warning every pair that ended gave (a rename no pair used), once
        ended = [r[3] for r in results if r[0] == 0]
        for message in (ended[0] if ended else ()):
            if all(message in w for w in ended[1:]):
                warn(message)
    for code, what, used, _ in results:
        for table, keys in zip(opened, used):
            for key in keys:  # (rows the workers used, marked in this process's copy)
                table.get(key)
    for code, what, used, _ in results:
        if code != 0:
            error = BadInput(what)
            error.exit_code = code
            raise error
    if how == "strict":
        names = input_names(len(inputs) + len(opened))[len(inputs):]
        for name, table in zip(names, opened):
            extra = table.unused()
            if extra is not None:
                raise BadInput(f"key {quote(extra[0])} of {name} ({shown(table.path)} line {extra[1]}) is not "
                               f"in A (in any pair)")
    return sum(r[1] for r in results)


def _join_pair(urls, output, spec):
    """Join one pair into ``output``: ``(0, samples written, keys of table rows used, warnings)``
    or ``(exit code, message, keys..., warnings)``."""
    from ..core.blob import Spooler
    from ..core.grouping import SampleWriter
    from ..errors import TarprocError
    from ..sinks.output import open_sink

    warnings = []
    try:
        # in input order large members of plain files pass as regions of them (as tarcat's: 64 KiB on)
        region = (64 << 10) if spec["order"] == "input" else None
        spooler = Spooler(spec["blob_threshold"], spec["spool_dir"], region)
        samples = join_samples([[u] for u in urls], spec["tables"], how=spec["how"], order=spec["order"],
                               rename=spec["rename"], memory=spec["memory"], tmpdir=spec["tmpdir"],
                               strict=spec["strict"], spooler=spooler, raw=True, warn=warnings.append,
                               settings=spec.get("settings"))
        with open_sink(output, defer=False, settings=spec.get("settings")) as sink:
            writer = SampleWriter(sink)
            for sample in samples:
                writer.write(sample)
            writer.close()
        return 0, writer.stats.written, _used(spec["tables"]), warnings
    except TarprocError as e:
        return e.exit_code, _about(output, e), _used(spec["tables"]), warnings


def _about(output, error):
    """The message of a pair's error, naming its output once (an error of the output names it already)."""
    text = str(error)
    return text if text.startswith((output + ":", shown(output) + ":")) else f"{shown(output)}: {text}"


def _used(tables):
    out = []
    for t in tables:
        out.append(t.fresh)
        t.fresh = []
    return out


def _on_term(signum, frame):
    raise SystemExit(128 + signum)  # through the join: its output is discarded, its inputs closed


def _pair_setup(pairs, outputs, spec):
    """In a worker: the handler of a pair's index.  SIGTERM (the pool stopping
    it: an error, Ctrl-C, the command told to stop) ends the pair in hand
    with its cleanup (its partial output removed), not a bare exit."""
    import pickle
    import signal

    signal.signal(signal.SIGTERM, _on_term)

    def handler(blob, mark, slot):
        i = pickle.loads(blob)
        mark[slot] = 0
        return pickle.dumps(_join_pair(pairs[i], outputs[i], spec))

    return handler


def _join_pool(pairs, outputs, spec, parallel, start_method, results, done):
    import pickle
    import threading

    from ..runtime.pool import TaskPool

    left = threading.Semaphore(0)
    pool = TaskPool(min(parallel, len(pairs)), _pair_setup, (pairs, outputs, spec), start_method=start_method,
                    name="tarjoin")
    try:
        def reply_for(i):
            def reply(data, exc):
                if exc is not None:
                    results[i] = (getattr(exc, "exit_code", 2), _about(outputs[i], exc),
                                  [[] for _ in spec["tables"]], [])
                else:
                    results[i] = pickle.loads(data)
                left.release()
            return reply

        for i in range(len(pairs)):
            pool.send(pickle.dumps(i), reply_for(i))
        for _ in range(len(pairs)):
            left.acquire()
        if done is not None:
            for i, (code, what, used, _) in enumerate(results):
                if code == 0:
                    done(i, what)
    finally:
        pool.close()
