"""tarreshard's tasks: an exact shuffle or sort of a shard set, as MapReduce
through storage.  Five steps, each a set of tasks that commit on success:
``map`` (one task per input shard: its samples grouped by bucket into ONE
intermediate object plus a small index of where each bucket starts),
``plan`` (one task: the map indexes turned into one small object per
bucket: its slices of every map object and its global position), ``reduce``
(one task per bucket: its slice of every map object read with ranged reads,
shuffled or sorted within ``memory``, the output shards it holds whole
written under their final names, the samples of shards it shares with a
neighbour written to one piece object), ``cut`` (one task: which byte
ranges of which piece objects make each shared shard; with a size limit,
every shard: the cut by size needs every sample's size in order) and
``copy`` (one task per bucket: those shards assembled by byte concatenation
plus the end-of-archive marker).  A task's outputs appear only when it
exits 0 (the CLI's commit gate), its done marker last, so a rerun skips done
tasks and a killed task leaves nothing under a final name.  Everything a
task needs is in ``plan.json`` in the work directory, so every engine runs
the same ``tarreshard --task STEP --work URL --task-id ID``.
"""

import bisect
import io
import json
import os

from ..errors import BadInput, UsageError
from .workstore import CHUNK, RangeStream, exists, fetched, get_json, join, local_dirs, names_in, put  # noqa: F401

STEPS = ("map", "plan", "reduce", "cut", "copy")
#: The first shard ids a sort's bucket boundaries are sampled from, and the
#: samples read from each (the boundaries balance the buckets; any gives an exact sort).
SAMPLE_SHARDS = 32
SAMPLE_PER_SHARD = 1000
PLAN_VERSION = 1


# ---------------------------------------------------------------- work directory

def task_id(n):
    return f"{n:06d}"


def id_pattern(count):
    """kujob's shard pattern of ``count`` task ids (``000000`` ...)."""
    return "{000000..%06d}" % (count - 1) if count > 1 else "000000"


def done_template(step, work):
    """The object whose existence says that a task of ``step`` is done
    (``{}``: its id), for kujob's ``--done-if``."""
    return {"map": join(work, "map", "{}.json"), "plan": join(work, "plan", "done.json"),
            "reduce": join(work, "reduce", "{}.json"), "cut": join(work, "cut", "done.json"),
            "copy": join(work, "copy", "{}.done")}[step]


def done_ids(step, work, count, settings=None):
    """The ids of ``step``'s tasks that are done, from ONE listing of the
    step's folder (a directory, or the scheme's LIST: ``aws s3 ls``,
    ``gsutil ls``); ``None`` when the scheme cannot list (each task's
    marker is then checked on its own)."""
    folder, _, name = done_template(step, work).rpartition("/")
    names = names_in(folder, settings)
    if names is None:
        return None
    ids = [task_id(n) for n in range(count)]
    return {i for i in ids if name.replace("{}", i) in names}


def _slice_samples(url, start, end, stats, settings, spooler=None, data=None):
    """The samples of bytes ``start``..``end`` of an intermediate object
    (``data``: those bytes, read ahead; members past ``spooler.threshold``
    as blobs)."""
    from ..core.passthru import fast_group
    from ..core.tario import TarReader

    stream = io.BytesIO(data) if data is not None else io.BufferedReader(RangeStream(url, start, end, settings), 1 << 20)
    try:
        yield from fast_group(TarReader(stream, url, spooler=spooler), url, stats, False)
    finally:
        stream.close()


# ---------------------------------------------------------------- keys and buckets

def _encode_key(k):
    if isinstance(k, bytes):
        return ["b", k.hex()]
    if isinstance(k, tuple):
        return ["f", k[0], k[1]]
    return ["i", str(k)]


def _decode_key(e):
    if e[0] == "b":
        return bytes.fromhex(e[1])
    if e[0] == "f":
        return (bool(e[1]), float(e[2]))
    return int(e[1])


def shuffle_bucket(seed, key, shard, n, buckets):
    """The bucket of the ``n``-th sample of input ``shard``: a seeded hash
    of its key and position (BLAKE2b), spread evenly over ``buckets``."""
    import hashlib

    h = hashlib.blake2b(f"{seed}\0{shard}\0{n}\0{key}".encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return (int.from_bytes(h, "big") * buckets) >> 64


def sample_boundaries(urls, sortkey, sorttype, buckets, settings=None, warn=None):
    """Bucket boundaries of a sort: quantiles of the sort keys of the first
    :data:`SAMPLE_PER_SHARD` samples of up to :data:`SAMPLE_SHARDS` inputs
    spread over the list (they balance the buckets; the sort is exact
    whatever they are)."""
    import itertools

    from ..sources.samples import iter_samples
    from ..stages.sort import key_function

    keyfunc = key_function(sortkey, sorttype)
    step = max(1, len(urls) // SAMPLE_SHARDS)
    keys = []
    for url in urls[::step][:SAMPLE_SHARDS]:
        for sample in itertools.islice(iter_samples([url], warn=warn, settings=settings), SAMPLE_PER_SHARD):
            keys.append(keyfunc(sample))
    keys.sort()
    if not keys:
        return []
    return [_encode_key(keys[len(keys) * j // buckets]) for j in range(1, buckets)]


class Bucketer:
    """``sample, shard, n -> global bucket`` for a plan: the split (with
    ``fractions``) times the buckets per split, plus the bucket (a seeded
    hash for a shuffle; the key range for a sort, in output order)."""

    def __init__(self, plan):
        from ..stages.sort import key_function

        self.plan = plan
        self.buckets = plan["buckets"]
        self.splits = plan["splits"]
        self.shuffle = plan["sorttype"] == "shuffle"
        if not self.shuffle:
            self.keyfunc = key_function(plan["sortkey"], plan["sorttype"])
            self.bounds = [_decode_key(e) for e in plan["boundaries"]]

    def __call__(self, sample, shard, n):
        if self.shuffle:
            b = shuffle_bucket(self.plan["seed"], sample.get("__key__"), shard, n, self.buckets)
        else:
            b = bisect.bisect_right(self.bounds, self.keyfunc(sample))
            if self.plan["reverse"]:
                b = self.buckets - 1 - b
        if self.splits:
            from ..sinks.split import split_of

            name = split_of(sample.get("__key__"), self.splits, self.plan["split_seed"])
            b += [s for s, _ in self.splits].index(name) * self.buckets
        return b


# ---------------------------------------------------------------- the plan

def task_counts(plan):
    """Tasks of each step."""
    r = plan["buckets"] * max(1, len(plan["splits"] or ()))
    return {"map": len(plan["inputs"]), "plan": 1, "reduce": r, "cut": 1, "copy": r}


def split_names(plan):
    return [s for s, _ in plan["splits"]] if plan["splits"] else [None]


def load_plan(work, settings=None):
    plan = get_json(join(work, "plan.json"), settings)
    if plan.get("version") != PLAN_VERSION:
        raise UsageError(f"{join(work, 'plan.json')}: not a plan of this tarreshard (version {plan.get('version')})")
    return plan


def publish_plan(work, plan, settings=None):
    """Write ``plan.json`` into the work directory (at once), or check that
    the one there is this run's (a rerun): the same inputs and options.  A
    plan without a seed takes the one already there.  Returns the plan."""
    url = join(work, "plan.json")
    if exists(url, settings):
        old = load_plan(work, settings)
        if plan.get("seed") is None:
            plan["seed"] = old.get("seed")
        if plan.get("boundaries") is None:
            plan["boundaries"] = old.get("boundaries")
        if old != plan:
            diff = sorted(k for k in set(old) | set(plan) if old.get(k) != plan.get(k))
            raise UsageError(f"{work} holds the work of another run ({', '.join(diff)} differ): give another "
                             f"--work, or remove it")
        return old
    if plan.get("seed") is None:
        import random

        plan["seed"] = random.SystemRandom().randrange(1 << 63)
    put(url, json.dumps(plan, indent=1).encode(), settings, defer=False)
    return plan


# ---------------------------------------------------------------- the steps

def run_task(step, work, tid, settings=None, tmpdir=None, warn=None, spooler=None):
    """Run one task of ``step``; returns a one-line summary.  ``spooler``
    (a :class:`~tarproc.core.blob.Spooler`): large members as blobs."""
    plan = load_plan(work, settings)
    n = int(tid)
    count = task_counts(plan)[step]
    if not 0 <= n < count:
        raise UsageError(f"--task-id {tid}: {step} has tasks 000000 to {task_id(count - 1)}")
    task = {"map": map_task, "plan": plan_task, "reduce": reduce_task, "cut": cut_task, "copy": copy_task}[step]
    try:
        return task(plan, work, n, settings, tmpdir, warn, spooler)
    except (KeyError, TypeError, IndexError, AttributeError) as e:  # a work object not as the steps write it
        raise BadInput(f"{work}: {step} {task_id(n)}: the work data is not what tarreshard wrote ({type(e).__name__}: "
                       f"{e}); remove it and run again") from None


def map_task(plan, work, i, settings, tmpdir, warn, spooler=None):
    """Input ``i`` to ``map/ID.tar`` (samples grouped by bucket, in input
    order within a bucket) and ``map/ID.json`` (``[bucket, start, end,
    count]`` of each bucket present)."""
    from ..core.grouping import SampleWriter
    from ..core.stats import Stats
    from ..sinks.output import open_sink
    from ..sources.samples import iter_samples
    from ..stages.sort import sort_samples

    url = plan["inputs"][i]
    bucketer = Bucketer(plan)
    stats = Stats()
    counter = iter(range(1 << 62))

    def tagged(samples):
        for sample in samples:
            sample["__bucket__"] = bucketer(sample, i, next(counter))
            yield sample

    samples = tagged(iter_samples([url], stats, warn=warn, spooler=spooler, settings=settings))
    ordered = sort_samples(samples, memory=plan["memory"], tmpdir=tmpdir, keyfunc=lambda s: s["__bucket__"],
                           stale_seconds=settings.foreign_stale_seconds if settings is not None else None)
    out = join(work, "map", task_id(i) + ".tar")
    local_dirs(out)
    index = []
    with open_sink(out, compression=None, settings=settings) as sink:
        writer = SampleWriter(sink, repeated_keys=True)
        for sample in ordered:
            b = sample.pop("__bucket__")
            if not index or index[-1][0] != b:
                if index:
                    index[-1][2] = writer.bytes_written
                index.append([b, writer.bytes_written, None, 0])
            writer.write(sample)
            index[-1][3] += 1
        if index:
            index[-1][2] = writer.bytes_written
    put(join(work, "map", task_id(i) + ".json"),
        json.dumps({"input": url, "samples": stats.read, "buckets": index}).encode(), settings)
    return f"map {task_id(i)}: {url}: {stats.read} samples in {len(index)} buckets"


def plan_task(plan, work, _n, settings, tmpdir, warn, spooler=None):
    """The map indexes to ``reduce-in/ID.json`` for each bucket: its slices
    (``[map id, start, end, count]``), its first sample's position in its
    split and the split's total."""
    counts = task_counts(plan)
    nb = counts["reduce"]
    slices = [[] for _ in range(nb)]
    totals = [0] * nb
    for i in range(counts["map"]):
        idx = get_json(join(work, "map", task_id(i) + ".json"), settings)
        for b, start, end, n in idx["buckets"]:
            slices[b].append([i, start, end, n])
            totals[b] += n
    per = plan["buckets"]
    split_totals = []
    for g in range(nb):
        s, first = divmod(g, per)
        if first == 0:
            split_totals.append(sum(totals[g:g + per]))
            pos = 0
        put(join(work, "reduce-in", task_id(g) + ".json"),
            json.dumps({"start": pos, "count": totals[g], "total": split_totals[s], "slices": slices[g]}).encode(),
            settings)
        pos += totals[g]
    put(join(work, "plan", "done.json"), json.dumps({"samples": split_totals}).encode(), settings)
    return f"plan: {sum(totals)} samples in {nb} buckets"


def pattern_of(plan, g):
    split = split_names(plan)[g // plan["buckets"]]
    return plan["pattern"] if split is None else plan["pattern"].replace("{split}", split)


def root_of(plan):
    """The directory the user's pattern names: a split's directory below it is made, nothing above."""
    from ..sinks.split import pattern_root

    return pattern_root(plan["pattern"])


def reduce_task(plan, work, g, settings, tmpdir, warn, spooler=None):
    """Bucket ``g``: its slices read, shuffled or sorted, then the shards it
    holds whole written (count cutting) and the rest to ``reduce/ID.tar``
    with ``reduce/ID.json`` (its segments, one per output shard; with a size
    limit every sample, one segment, and each sample's size)."""
    import itertools

    from ..core.grouping import SampleWriter, written_size
    from ..core.stats import Stats
    from ..sinks.output import open_sink
    from ..sinks.split import ShardNames, ShardRotator
    from ..stages.sort import sort_samples

    info = get_json(join(work, "reduce-in", task_id(g) + ".json"), settings)
    stats = Stats()
    slices = ((join(work, "map", task_id(i) + ".tar"), a, b) for i, a, b, _ in info["slices"])
    samples = itertools.chain.from_iterable(
        _slice_samples(url, a, b, stats, settings, spooler, data) for url, a, b, data in fetched(slices, settings))
    if plan["sorttype"] == "shuffle":
        kw = {"sorttype": "shuffle", "seed": f"{plan['seed']}/{g}"}
    else:
        kw = {"key": plan["sortkey"], "sorttype": plan["sorttype"], "reverse": plan["reverse"]}
    ordered = sort_samples(samples, memory=plan["memory"], tmpdir=tmpdir,
                           stale_seconds=settings.foreign_stale_seconds if settings is not None else None, **kw)
    start, count, total = info["start"], info["count"], info["total"]
    N = plan["max_count"]
    by_size = plan["max_size"] is not None
    owned = (0, 0)  # the output shards this bucket holds whole: [first, end)
    if not by_size and count:
        first = -(-start // N)
        last_end = start + count
        k_end = last_end // N if last_end < total else -(-total // N)
        if k_end > first:
            owned = (first, k_end)
    lo, hi = owned[0] * N if owned[1] else None, min(owned[1] * N, total) if owned[1] else None
    piece = join(work, "reduce", task_id(g) + ".tar")
    local_dirs(piece)
    segments, sizes, shards = [], [], []
    rot = None
    if owned[1]:
        pattern = pattern_of(plan, g)
        counts = [min(N, total - k * N) for k in range(*owned)]
        rot = ShardRotator(ShardNames(pattern, owned[0], root=root_of(plan)), owned[0], counts, settings=settings, defer=True,
                           guard=_guard(plan["inputs"]))
    sink = writer = None  # the piece object, opened for its first sample (none when the bucket shares nothing)
    try:
        for j, sample in enumerate(ordered):
            p = start + j
            if rot is not None and lo <= p < hi:
                done = rot.write(sample)
                if done is not None:
                    shards.append(done.index)
                continue
            if sink is None:
                sink = open_sink(piece, compression=None, settings=settings)
                writer = SampleWriter(sink)  # refuses what the shard writer refuses (a field twice under one key)
            k = None if by_size else p // N
            if not segments or segments[-1][4] != k or segments[-1][0] + segments[-1][1] != p:
                segments.append([p, 0, writer.bytes_written, None, k])
            if by_size:
                sizes.append(written_size(sample))
            writer.write(sample)
            segments[-1][1] += 1
            segments[-1][3] = writer.bytes_written
        if rot is not None:
            shards.extend(s.index for s in rot.close())
        if sink is not None:
            sink.close()
    except BaseException:
        if rot is not None:
            rot.abort()
        if sink is not None:
            sink.abort()
        raise
    if stats.read != count:
        raise BadInput(f"bucket {task_id(g)}: {stats.read} samples read, its index says {count}: the work "
                       f"directory changed since the plan")
    put(join(work, "reduce", task_id(g) + ".json"),
        json.dumps({"segments": [s[:4] for s in segments], "sizes": sizes if by_size else None,
                    "shards": shards}).encode(), settings)
    return f"reduce {task_id(g)}: {count} samples, {len(shards)} shards written, {len(segments)} pieces"


def _guard(inputs):
    from ..sinks.split import input_guard

    return input_guard(inputs)


def cut_task(plan, work, _n, settings, tmpdir, warn, spooler=None):
    """Which byte ranges of which piece objects make each output shard not
    written whole by a reduce task: ``cut/ID.json`` for each copy task (a
    shard goes to the task of the bucket it starts in), then
    ``cut/done.json`` (the shards of each split)."""
    from ..sinks.split import END_MARKER, ShardNames

    counts = task_counts(plan)
    per = plan["buckets"]
    N, S = plan["max_count"], plan["max_size"]
    jobs = [[] for _ in range(counts["copy"])]
    nshards = []
    for s, split in enumerate(split_names(plan)):
        names = ShardNames(pattern_of(plan, s * per), root=root_of(plan))
        shards = {}  # count cutting: shard -> [owner task, samples, ranges]
        cur = None  # size cutting: [number, samples, bytes, owner, ranges]
        written = 0
        number = 0
        for g in range(s * per, (s + 1) * per):
            red = get_json(join(work, "reduce", task_id(g) + ".json"), settings)
            written = max(written, max(red["shards"], default=-1) + 1)
            if S is None:
                for p, n, a, b in red["segments"]:
                    k = p // N
                    entry = shards.setdefault(k, [g, 0, []])
                    entry[1] += n
                    _add_range(entry[2], g, a, b)
                continue
            seg = red["segments"]
            if not seg:
                continue
            pos = seg[0][2]
            for size in red["sizes"]:
                if cur is not None and ((N is not None and cur[1] >= N) or cur[2] + size + END_MARKER > S):
                    shards[cur[0]] = [cur[3], cur[1], cur[4]]
                    cur = None
                if cur is None:
                    cur = [number, 0, 0, g, []]
                    number += 1
                cur[1] += 1
                cur[2] += size
                _add_range(cur[4], g, pos, pos + size)
                pos += size
        if cur is not None:
            shards[cur[0]] = [cur[3], cur[1], cur[4]]
        for k, (owner, n, ranges) in sorted(shards.items()):
            jobs[owner].append({"shard": k, "name": names(k), "samples": n, "ranges": ranges})
        nshards.append(max(written, max(shards, default=-1) + 1))
    for t, shards in enumerate(jobs):
        put(join(work, "cut", task_id(t) + ".json"), json.dumps({"shards": shards}).encode(), settings)
    busy = [task_id(t) for t, shards in enumerate(jobs) if shards]  # (the local pool runs only these)
    put(join(work, "cut", "done.json"), json.dumps({"shards": nshards, "busy": busy}).encode(), settings)
    return f"cut: {sum(len(j) for j in jobs)} shards to assemble"


def _add_range(ranges, g, a, b):
    if ranges and ranges[-1][0] == g and ranges[-1][2] == a:
        ranges[-1][2] = b
    else:
        ranges.append([g, a, b])


def copy_task(plan, work, t, settings, tmpdir, warn, spooler=None):
    """Assemble the shards of ``cut/ID.json``: their byte ranges of the
    piece objects, concatenated, and the end-of-archive marker."""
    from ..sinks.output import open_sink
    from ..sinks.split import END_MARKER, make_shard_dir

    job = get_json(join(work, "cut", task_id(t) + ".json"), settings)
    guard = _guard(plan["inputs"])
    for shard in job["shards"]:
        name = shard["name"]
        guard(name)
        make_shard_dir(name, pattern_of(plan, t), root_of(plan))
        with open_sink(name, settings=settings) as sink:
            for g, a, b in shard["ranges"]:
                stream = RangeStream(join(work, "reduce", task_id(g) + ".tar"), a, b, settings)
                try:
                    while True:
                        chunk = stream.read(CHUNK)
                        if not chunk:
                            break
                        sink.write(chunk)
                finally:
                    stream.close()
            sink.write(bytes(END_MARKER))
    put(join(work, "copy", task_id(t) + ".done"), b"", settings)
    return f"copy {task_id(t)}: {len(job['shards'])} shards"


def work_objects(plan, work, local=True):
    """Every object the steps write into the work directory (removed after
    success); ``local=False``: without the piece objects, listed apart."""
    counts = task_counts(plan)
    for i in range(counts["map"]):
        yield join(work, "map", task_id(i) + ".tar")
        yield join(work, "map", task_id(i) + ".json")
    yield join(work, "plan", "done.json")
    for g in range(counts["reduce"]):
        yield join(work, "reduce-in", task_id(g) + ".json")
        if local:
            yield join(work, "reduce", task_id(g) + ".tar")  # (absent when its bucket shared nothing)
        yield join(work, "reduce", task_id(g) + ".json")
        yield join(work, "cut", task_id(g) + ".json")
        yield join(work, "copy", task_id(g) + ".done")
    yield join(work, "cut", "done.json")
    if plan.get("stdin"):
        yield plan["stdin"]
    yield join(work, "plan.json")


def remove_work(plan, work, settings=None):
    """Remove the work objects (a local directory: its files, then its
    empty directories; else one REMOVE per object).  Returns ``False`` when
    the scheme has no REMOVE command (http: ``TARPROC_REMOVE_HTTP``)."""
    from ..runtime.schemes import has_command, scheme_of

    if scheme_of(work) == "file":
        for url in work_objects(plan, work):
            try:
                os.unlink(url)
            except FileNotFoundError:
                pass
        from ..sinks.output import cleanup_partials

        for d in ("map", "plan", "reduce-in", "reduce", "cut", "copy", "input"):
            cleanup_partials(join(work, d), settings=settings)  # a killed task's (its lock is free)
            try:
                os.rmdir(join(work, d))
            except OSError:
                pass
        try:
            os.rmdir(work)
        except OSError:
            pass
        return True
    if not has_command("REMOVE", work, settings):
        return False
    from concurrent.futures import ThreadPoolExecutor

    from ..sinks.remote import run_client

    def remove(url):
        try:
            run_client("REMOVE", url, "remove", settings)
        except Exception:  # noqa: BLE001 - an object never written (an empty bucket's) is not an error
            pass

    listing = names_in(join(work, "reduce"), settings)
    pieces = [join(work, "reduce", n) for n in sorted(listing) if n.endswith(".tar")]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(remove, pieces + list(work_objects(plan, work, local=False))))
    return True
