"""Cutting a stream of samples into shards.

:func:`split_samples` writes samples to numbered shards, closing a shard
*before* the sample that would make it exceed a sample count or a byte size;
samples are never split.  Sizes are the shard's bytes exactly as
:class:`~tarproc.core.tario.TarWriter` writes them (headers, padding and the
1024-byte end-of-archive marker), before compression.  Every shard goes
through :func:`~tarproc.sinks.output.open_sink` and is committed (published under
its final name) when it is closed, also inside a CLI's commit gate: a
failure mid-stream leaves the shards committed before it and no partial one.

After each shard is committed an optional ``post`` callback (see
:func:`post_command`) runs; its failure stops the split.

    for shard in split_samples(samples, "out-%06d.tar", max_count=1000):
        print(shard.name, shard.samples, shard.bytes)
"""

import os

from ..core.limits import check_widths
from ..errors import OutputError, UsageError
from ..core.grouping import SampleWriter
from ..core.grouping import written_size as sample_size  # the writer rule (sinks/index imports it from here)
from ..core.stats import Stats
from ..core.tario import BLOCK

#: The end-of-archive marker every shard ends with.
END_MARKER = 2 * BLOCK


class Shard:
    """A finished shard: ``name`` (URL as written), ``index`` (its number),
    ``samples`` and ``bytes`` (uncompressed tar bytes, end marker included)."""

    __slots__ = ("name", "index", "samples", "bytes")

    def __init__(self, name, index, samples=0, nbytes=0):
        self.name = name
        self.index = index
        self.samples = samples
        self.bytes = nbytes

    def as_dict(self):
        return {"name": self.name, "index": self.index, "samples": self.samples, "bytes": self.bytes}

    def __repr__(self):
        return f"Shard({self.name!r}, index={self.index}, samples={self.samples}, bytes={self.bytes})"


#: Name endings of shards: a prefix ending in one keeps it after the number.
_TAR_ENDINGS = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz2", ".txz", ".tzst", ".tar")


def shard_pattern(output, compress=False):
    """The shard-name pattern of an ``-o`` value: a name with ``%d``-style or
    ``{shard...}`` placeholders is used as given; anything else is a prefix
    that gets ``-000000.tar`` (``.tar.gz`` with ``compress``).  A prefix that
    already ends like a shard (``part.tar``, ``part.tar.gz``) gets the number
    before that ending (``part-000000.tar.gz``), so its compression holds."""
    if "%" in output or "{" in output:
        return output
    base = output.rsplit("/", 1)[-1]
    if not base or base in (".", ".."):
        # `-o outdir/` would give outdir/-000000.tar, a name that reads as an option
        raise UsageError(f"-o {output!r} names a directory, not a prefix: give a prefix inside it, e.g. "
                         f"{output.rstrip('/') or '.'}/shard (shard-000000.tar, ...)")
    for ending in _TAR_ENDINGS:
        if base.endswith(ending) and len(base) > len(ending):
            if compress and ending == ".tar":
                ending, output = ".tar.gz", output + ".gz"
            return output[: -len(ending)] + "-%06d" + ending
    return output + ("-%06d.tar.gz" if compress else "-%06d.tar")


def _fill(pattern, index):
    try:
        if "{" in pattern:
            return pattern.format(shard=index, index=index)
        return pattern % index
    except (KeyError, IndexError, ValueError, TypeError, AttributeError) as e:
        raise UsageError(f"bad shard name pattern {pattern!r}: {e} (use e.g. out-%06d.tar or out-{{shard:06d}}.tar)") from None


#: Shard numbers whose names must all differ: a pattern that cuts the number
#: (``%.1s``, ``{shard!s:.2}``) makes two shards share a name, and the later
#: one would silently replace the earlier.
_PROBES = tuple(range(21)) + tuple(i for k in range(2, 8) for i in (10 ** k - 1, 10 ** k, 10 ** k + 1))
_checked = set()


def shard_name(pattern, index):
    """Fill a shard-name pattern with the shard number."""
    if pattern not in _checked:
        check_widths(pattern, "bad shard name pattern")
    name = _fill(pattern, index)
    if pattern not in _checked:
        if name == pattern.replace("%%", "%") and ("%" in pattern or "{" in pattern):
            raise UsageError(f"shard name pattern {pattern!r} has no shard number")
        seen = {}
        for i in _PROBES + (index,):
            other = _fill(pattern, i)
            if other in seen and seen[other] != i:
                raise UsageError(f"shard name pattern {pattern!r} gives shards {seen[other]} and {i} the same "
                                 f"name {other!r} (use e.g. out-%06d.tar)")
            seen[other] = i
        if len(_checked) < 1000:
            _checked.add(pattern)
    return name


def pattern_root(pattern):
    """The directory a shard-name pattern names literally: the part before
    its first placeholder, up to the last ``/`` (``out/`` of
    ``out/{split}/%06d.tar``; ``.`` when there is none)."""
    cut = min([i for i in (pattern.find("%"), pattern.find("{")) if i >= 0] or [len(pattern)])
    return os.path.dirname(pattern[:cut]) or "."


def make_shard_dir(name, pattern):
    """Create the directories of the local shard ``name`` that its
    ``pattern`` names: the literal root (what the user wrote) and, below it,
    the directories the placeholders make.  A shard whose directory would
    be outside the root (a ``..`` component, a symbolic link below the root
    leading out of it) is refused: nothing is created outside the output's
    own tree."""
    from ..errors import OutputError
    from ..sources.open import scheme_of

    d = os.path.dirname(name)
    if not d or scheme_of(name) != "file" or os.path.isdir(d) and not os.path.islink(d):
        return
    root = pattern_root(pattern)
    rel = os.path.relpath(d, root) if root != "." else os.path.normpath(d)
    parts = [] if rel == "." else rel.split(os.sep)
    if ".." in parts or os.path.isabs(rel) or (root == "." and os.path.isabs(d)):
        if not os.path.isdir(d):
            raise OutputError(f"{name}: the shard's directory is outside {root}/, the directory the pattern names")
        return  # an existing directory the user named: nothing to create
    try:
        os.makedirs(root, exist_ok=True)
        real_root = os.path.realpath(root)
        cur = root
        for part in parts:
            cur = os.path.join(cur, part)
            if os.path.islink(cur) and os.path.commonpath([os.path.realpath(cur), real_root]) != real_root:
                raise OutputError(f"{name}: {cur} is a symbolic link out of {root}/: not followed")
            if not os.path.isdir(cur):
                os.mkdir(cur)
    except OSError as e:
        raise OutputError(f"{name}: cannot create directory {e.filename or d}: {e.strerror}") from None


def placeholders(name, index):
    """The values a post command can use for a shard: ``shard`` (its name),
    ``abspath``, ``basename``, ``dirname``, ``base``, ``ext`` and ``index``."""
    from ..sources.open import scheme_of

    local = scheme_of(name) == "file"
    basename = name.rstrip("/").rsplit("/", 1)[-1]
    if basename.endswith((".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst")):
        cut = basename.rfind(".tar.")
    else:
        cut = basename.rfind(".")
    base, ext = (basename[:cut], basename[cut:]) if cut > 0 else (basename, "")
    return {
        "shard": name,
        "abspath": os.path.abspath(name) if local else name,
        "basename": basename,
        "dirname": os.path.dirname(os.path.abspath(name)) if local else name.rsplit("/", 1)[0],
        "base": base,
        "ext": ext,
        "index": str(index),
    }


def fill_command(template, name, index):
    """Fill every ``%s`` (the shard name) and every ``{shard}``, ``{abspath}``,
    ``{basename}``, ``{dirname}``, ``{base}``, ``{ext}``, ``{index}`` in a
    shell command template.  Values are shell-quoted when they need it."""
    import re
    import shlex

    values = placeholders(name, index)

    def quoted(v):
        return shlex.quote(v)

    def sub(m):
        word = m.group(1)
        if word not in values:
            return m.group(0)
        return quoted(values[word])

    out = template.replace("%s", "\0S\0")
    out = re.sub(r"\{(\w+)\}", sub, out)
    return out.replace("\0S\0", quoted(name))


def post_command(template, delete=False, env=None):
    """A ``post(shard)`` callback running a shell command filled by
    :func:`fill_command`; a non-zero exit raises :class:`OutputError` naming
    the shard.  With ``delete``, a local shard is removed after the command
    succeeds (the original ``tarsplit -C``)."""
    import subprocess
    import sys

    from ..sources.open import scheme_of

    def post(shard):
        cmd = fill_command(template, shard.name, shard.index)
        try:
            # stdin is /dev/null: the post command must not eat tarsplit's input;
            # its own session: an interrupted split ends the command's children too
            proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(), env=env,
                                    start_new_session=True)
        except OSError as e:
            raise OutputError(f"{shard.name}: cannot run post command {cmd!r}: {e.strerror}") from None
        try:
            rc = proc.wait()
        except BaseException:  # Ctrl-C, SIGTERM: what it started goes too (a '&' of a finished one stays)
            from ..runtime.procs import killpg

            killpg(proc.pid)
            proc.wait()
            raise
        if rc != 0:
            raise OutputError(f"{shard.name}: post command {cmd!r} failed with exit status {rc}")
        if delete and scheme_of(shard.name) == "file":
            try:
                os.unlink(shard.name)
            except FileNotFoundError:
                pass  # the command moved it away
            except OSError as e:
                raise OutputError(f"{shard.name}: cannot delete after the command: {e.strerror}") from None

    return post


def input_guard(inputs):
    """A ``check(name)`` that refuses (:class:`UsageError`) a shard name that
    is one of the local files ``inputs``: committing the shard would replace
    an input, perhaps before it is read.  A symbolic link named like the
    shard is replaced, never its target, so it passes."""
    from ..sources.open import scheme_of

    real = {os.path.realpath(u) for u in inputs or ()
            if isinstance(u, str) and u != "-" and scheme_of(u) == "file" and os.path.isfile(u)}

    def check(name):
        if real and scheme_of(name) == "file" and not os.path.islink(name) and os.path.realpath(name) in real:
            raise UsageError(f"{name}: is also an input; writing this shard would replace it (choose another -o)")

    return check


def split_samples(samples, pattern, max_count=None, max_size=None, start=0, maxshards=None,
                  compression="auto", post=None, stats=None, shards=None, total=None, fractions=None, seed=0,
                  inputs=(), group_size=None, **header_defaults):
    """Write ``samples`` to shards named by ``pattern`` (see :func:`shard_name`)
    and yield a :class:`Shard` for each shard as it is completed.

    A shard is closed before a sample that would make it hold more than
    ``max_count`` samples or more than ``max_size`` bytes (as written, end
    marker included); a sample larger than ``max_size`` on its own gets a
    shard to itself.  Shards are numbered from ``start``; after ``maxshards``
    shards no more input is read.  ``compression`` is passed to
    :func:`~tarproc.sinks.output.open_sink` (``"auto"``: from the name).  ``post(shard)``
    runs after each shard is complete (and before it is yielded).
    ``group_size``: groups of a ``.tar.gz``/``.tar.zst`` shard (see
    :func:`~tarproc.sinks.output.open_sink`).

    ``shards=N`` writes exactly N shards of equal counts instead (see
    :func:`split_exact`; ``total`` is the number of samples);
    ``fractions='train=0.8,val=0.2'`` sends each sample to a split by a
    stable hash of its key and ``seed`` (see :func:`split_fractions`).
    ``inputs``: local files no shard may replace (see :func:`input_guard`)."""
    from .output import open_sink

    from ..sources.shardlist import as_url

    pattern = as_url(pattern, "pattern")
    guard = input_guard(inputs)

    if shards is not None:
        if fractions is not None or max_count is not None or max_size is not None or maxshards is not None:
            raise UsageError("shards=N cannot be combined with fractions, a count, a size or maxshards")
        yield from split_exact(samples, pattern, shards, total, start, compression, post, stats, guard=guard,
                               group_size=group_size, **header_defaults)
        return
    if fractions is not None:
        if maxshards is not None or start:
            raise UsageError("fractions cannot be combined with maxshards or start")
        yield from split_fractions(samples, pattern, fractions, seed, max_count, max_size, compression, post, stats,
                                   guard=guard, group_size=group_size, **header_defaults)
        return

    if max_count is not None and max_count < 1:
        raise UsageError(f"the sample count per shard must be at least 1 (got {max_count})")
    if max_size is not None and max_size < 1:
        raise UsageError(f"the shard size must be at least 1 byte (got {max_size})")
    if maxshards is not None and maxshards < 1:
        return
    stats = stats if stats is not None else Stats()
    count_limit = max_count if max_count is not None else float("inf")
    size_limit = max_size if max_size is not None else float("inf")
    index = start
    sink = writer = shard = None
    done = 0

    def finish(shard, writer, sink):
        """Close a full shard: end marker, commit under its final name, post command."""
        writer.close()
        shard.bytes = writer.bytes_written
        sink.close()
        if post is not None:
            post(shard)

    it = iter(samples)
    try:
        for sample in it:
            nbytes = sample_size(sample)
            if shard is not None and (shard.samples + 1 > count_limit
                                      or shard.bytes + nbytes + END_MARKER > size_limit):
                finish(shard, writer, sink)
                sink = None
                yield shard
                done += 1
                shard = None
                index += 1
                if maxshards is not None and done >= maxshards:
                    return
            if shard is None:
                name = shard_name(pattern, index)
                guard(name)
                make_shard_dir(name, pattern)
                sink = open_sink(name, compression, defer=False, group_size=group_size)  # each shard commits when closed
                writer = SampleWriter(sink, stats, **header_defaults)
                shard = Shard(name, index)
            writer.write(sample)
            shard.samples += 1
            shard.bytes += nbytes
        if shard is not None:
            finish(shard, writer, sink)
            sink = None
            yield shard
    finally:
        if sink is not None:
            sink.abort()
        close = getattr(it, "close", None)
        if close is not None:
            close()


# ---------------------------------------------------------------- exact counts and fractions
# (tarsplit --shards N and --fractions; the per-shard writing of split_samples
# above, in a push-based form so that several shard sequences can be open at once)


class IndexedShard(Shard):
    """A :class:`Shard` that also carries its :class:`~tarproc.sinks.index.ShardIndex`
    (``info``) and, for ``fractions``, the name of its split (``split``)."""

    __slots__ = ("info", "split")

    def __init__(self, name, index, split=None):
        super().__init__(name, index)
        self.info = None
        self.split = split

    def as_dict(self):
        d = super().as_dict()
        if self.split is not None:
            d["split"] = self.split
        return d


class _Rotator:
    """Write one sequence of shards, a sample at a time: a shard is closed
    before a sample that would exceed ``max_count``/``max_size``, or as soon
    as it holds ``counts[k]`` samples when a schedule of counts is given."""

    def __init__(self, pattern, start=0, counts=None, max_count=None, max_size=None, compression="auto",
                 post=None, stats=None, split=None, header_defaults=None, guard=None, group_size=None):
        from .index import ShardIndex

        self.group_size = group_size
        self._ShardIndex = ShardIndex
        self.pattern = pattern
        self.index = start
        self.counts = counts
        self.count_limit = max_count if max_count is not None else float("inf")
        self.size_limit = max_size if max_size is not None else float("inf")
        self.compression = compression
        self.post = post
        self.stats = stats if stats is not None else Stats()
        self.split = split
        self.header_defaults = header_defaults or {}
        self.guard = guard
        self.shard = self.sink = self.writer = None
        self.done = []  # every finished shard
        self.samples = 0
        self.bytes = 0

    def _open(self):
        from array import array

        from .output import open_sink

        name = shard_name(self.pattern, self.index)
        if self.guard is not None:
            self.guard(name)
        make_shard_dir(name, self.pattern)
        self.sink = open_sink(name, self.compression, defer=False, group_size=self.group_size)  # each shard commits when closed
        self.writer = SampleWriter(self.sink, self.stats, **self.header_defaults)
        self.shard = IndexedShard(name, self.index, self.split)
        info = self.shard.info = self._ShardIndex(name)
        info.compression = getattr(self.sink, "compression", None)
        info.starts, info.keys = array("Q"), []

    def _finish(self):
        shard, writer, sink = self.shard, self.writer, self.sink
        info = shard.info
        info.end = writer.bytes_written
        info.nsamples = shard.samples
        writer.close()
        shard.bytes = info.filesize = writer.bytes_written
        if info.compression:  # offsets are in the tar before compression: counts only
            info.starts = info.keys = info.end = info.filesize = None
        self.sink = None
        sink.close()
        if self.post is not None:
            self.post(shard)
        self.done.append(shard)
        self.bytes += shard.bytes
        self.shard = None
        self.index += 1
        return shard

    def write(self, sample):
        """Write a sample; returns the list of shards finished by it."""
        out = []
        if self.counts is not None and len(self.done) >= len(self.counts):
            raise UsageError(f"the input has more samples than the {sum(self.counts)} counted or given (--total)")
        nbytes = sample_size(sample) if self.size_limit != float("inf") else 0
        if self.shard is not None and self.counts is None and (
                self.shard.samples + 1 > self.count_limit or self.shard.bytes + nbytes + END_MARKER > self.size_limit):
            out.append(self._finish())
        if self.shard is None:
            self._open()
        info = self.shard.info
        info.starts.append(self.writer.bytes_written)
        info.keys.append(sample.get("__key__"))
        self.writer.write(sample)
        self.shard.samples += 1
        self.shard.bytes += nbytes
        self.samples += 1
        if self.counts is not None and self.shard.samples >= self.counts[len(self.done)]:
            out.append(self._finish())
        return out

    def close(self):
        """Finish the open shard (and, with a schedule, the empty shards it
        still owes); returns the shards finished."""
        out = []
        if self.shard is not None:
            out.append(self._finish())
        if self.counts is not None:
            if self.samples < sum(self.counts):
                raise UsageError(f"the input has {self.samples} samples, fewer than the {sum(self.counts)} "
                                 f"counted or given (--total); {len(self.done)} shards written")
            while len(self.done) < len(self.counts):  # more shards than samples: empty shards
                self._open()
                out.append(self._finish())
        return out

    def abort(self):
        if self.sink is not None:
            self.sink.abort()
            self.sink = None


def exact_counts(total, shards):
    """Sample counts of ``shards`` shards holding ``total`` samples, differing by at most 1."""
    if shards < 1:
        raise UsageError(f"the number of shards must be at least 1 (got {shards})")
    if total < 0:
        raise UsageError(f"the total number of samples must be >= 0 (got {total})")
    base, extra = divmod(total, shards)
    return [base + 1] * extra + [base] * (shards - extra)


def parse_fractions(spec):
    """``'train=0.8,val=0.1,test=0.1'`` (or a dict) to a list of ``(name,
    fraction)``; names are letters, digits, ``_`` and ``-``; fractions are
    positive and add up to 1."""
    import re

    items = list(spec.items()) if isinstance(spec, dict) else []
    if isinstance(spec, str):
        for part in spec.replace(" ", "").split(","):
            if not part:
                continue
            name, eq, value = part.partition("=")
            try:
                items.append((name, float(value)))
            except ValueError:
                raise UsageError(f"bad fraction {part!r} in {spec!r} (use e.g. 'train=0.8,val=0.1,test=0.1')") from None
            if not eq:
                raise UsageError(f"bad fraction {part!r} in {spec!r} (use e.g. 'train=0.8,val=0.1,test=0.1')")
    if not items:
        raise UsageError("no fractions given (use e.g. 'train=0.8,val=0.1,test=0.1')")
    names = [n for n, _ in items]
    for name, value in items:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", str(name)):
            raise UsageError(f"bad split name {name!r}: use letters, digits, '_' and '-'")
        if not (0 < value <= 1):
            raise UsageError(f"fraction of {name!r} must be in (0, 1] (got {value})")
    if len(set(names)) != len(names):
        raise UsageError(f"a split is named twice in {spec!r}")
    if abs(sum(v for _, v in items) - 1) > 1e-6:
        raise UsageError(f"fractions add up to {sum(v for _, v in items):g}, not 1")
    return [(str(n), float(v)) for n, v in items]


def split_of(key, fractions, seed=0):
    """The split a key goes to: a stable hash of ``seed`` and the key (BLAKE2b),
    as a number in [0, 1), against the cumulative fractions in their order.
    The same key always lands in the same split, whatever else is in the stream."""
    import hashlib

    h = hashlib.blake2b(f"{seed}\0{key}".encode("utf-8", "surrogateescape"), digest_size=8).digest()
    u = int.from_bytes(h, "big") / 2.0**64
    acc = 0.0
    for name, frac in fractions:
        acc += frac
        if u < acc:
            return name
    return fractions[-1][0]


def split_exact(samples, pattern, shards, total=None, start=0, compression="auto", post=None, stats=None,
                guard=None, group_size=None, **header_defaults):
    """Write ``samples`` to exactly ``shards`` shards whose sample counts
    differ by at most one (the first ``total % shards`` get one more), and
    yield each :class:`IndexedShard` as it is completed.  ``total`` is the
    number of samples (default: ``len(samples)``); an input with more or
    fewer samples is a :class:`UsageError`."""
    if total is None:
        try:
            total = len(samples)
        except TypeError:
            raise UsageError("shards=N needs the total number of samples (total=, or a sequence)") from None
    rot = _Rotator(pattern, start, exact_counts(total, shards), compression=compression, post=post, stats=stats,
                   header_defaults=header_defaults, guard=guard, group_size=group_size)
    it = iter(samples)
    try:
        for sample in it:
            yield from rot.write(sample)
        yield from rot.close()
    finally:
        rot.abort()
        close = getattr(it, "close", None)
        if close is not None:
            close()


def split_fractions(samples, pattern, fractions, seed=0, max_count=None, max_size=None, compression="auto",
                    post=None, stats=None, guard=None, group_size=None, **header_defaults):
    """Send each sample to a split chosen by :func:`split_of` and write each
    split to its own shards, named by ``pattern`` with ``{split}`` filled in
    (``'out/{split}-%06d.tar'``); yields each :class:`IndexedShard` as it is
    completed.  Per-split totals: ``fractions_summary`` of the shards."""
    fr = parse_fractions(fractions)
    if "{split}" not in pattern:
        raise UsageError(f"output pattern {pattern!r} has no {{split}} (e.g. 'out/{{split}}-%06d.tar')")
    rots = {}
    for name, _ in fr:
        pat = pattern.replace("{split}", name)
        if "%" not in pat and "{" not in pat:
            pat = shard_pattern(pat)
        rots[name] = _Rotator(pat, 0, None, max_count, max_size, compression, post, stats, split=name,
                              header_defaults=header_defaults, guard=guard, group_size=group_size)
    if max_count is not None and max_count < 1:
        raise UsageError(f"the sample count per shard must be at least 1 (got {max_count})")
    it = iter(samples)
    try:
        for sample in it:
            yield from rots[split_of(sample.get("__key__"), fr, seed)].write(sample)
        for rot in rots.values():
            yield from rot.close()
    finally:
        for rot in rots.values():
            rot.abort()
        close = getattr(it, "close", None)
        if close is not None:
            close()
