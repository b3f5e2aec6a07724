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

Every mode (counts and sizes, ``shards=N``, ``fractions``) writes through
one :class:`ShardRotator` per sequence of shards, which also makes each
shard's index entry from what it wrote (:mod:`tarproc.sinks.index` builds
the index from them, as ``tarindex`` does from what it reads).

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
    ``samples`` and ``bytes`` (uncompressed tar bytes, end marker included),
    ``info`` (its :class:`~tarproc.sinks.scan.ShardIndex`) and, for
    ``fractions``, the name of its ``split`` (else ``None``)."""

    __slots__ = ("name", "index", "samples", "bytes", "info", "split")

    def __init__(self, name, index, samples=0, nbytes=0, split=None):
        self.name = name
        self.index = index
        self.samples = samples
        self.bytes = nbytes
        self.info = None
        self.split = split

    def as_dict(self):
        d = {"name": self.name, "index": self.index, "samples": self.samples, "bytes": self.bytes}
        if self.split is not None:
            d["split"] = self.split
        return d

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


class ShardNames:
    """The names of one sequence of shards: ``names(i)`` fills ``pattern``
    (``%06d``-style or ``{shard:06d}``) with the shard number ``i``.  The
    pattern is checked once, when this is made (``start``: the first number
    it will fill): its placeholders' widths are bounded, it has a shard
    number, and no two of a range of probed numbers get the same name
    (:class:`UsageError` otherwise).  ``root``: the directory the user's
    pattern spells out (:func:`pattern_root`; given when ``pattern`` has
    ``{split}`` filled in already)."""

    def __init__(self, pattern, start=0, root=None):
        check_widths(pattern, "bad shard name pattern")
        name = _fill(pattern, start)
        if name == pattern.replace("%%", "%") and ("%" in pattern or "{" in pattern):
            raise UsageError(f"shard name pattern {pattern!r} has no shard number")
        seen = {}
        for i in _PROBES + (start,):
            other = _fill(pattern, i)
            if other in seen and seen[other] != i:
                raise UsageError(f"shard name pattern {pattern!r} gives shards {seen[other]} and {i} the same "
                                 f"name {other!r} (use e.g. out-%06d.tar)")
            seen[other] = i
        self.pattern = pattern
        self.root = root if root is not None else pattern_root(pattern)

    def __call__(self, index):
        return _fill(self.pattern, index)


def shard_name(pattern, index):
    """Fill a shard-name pattern with the shard number (checking the pattern
    as :class:`ShardNames` does)."""
    return ShardNames(pattern, index)(index)


def pattern_root(pattern):
    """The directory a shard-name pattern names literally: the part before
    its first placeholder, up to the last ``/`` (``out/`` of
    ``out/{split}/%06d.tar``; ``.`` when there is none)."""
    cut = min([i for i in (pattern.find("%"), pattern.find("{")) if i >= 0] or [len(pattern)])
    return os.path.dirname(pattern[:cut]) or "."


def make_shard_dir(name, pattern, root=None):
    """Create the directories of the local shard ``name`` that its
    ``pattern``'s placeholders make below its literal root (what the user
    wrote, which must exist: a missing one is refused, as for every output).
    A shard whose directory would be outside the root (a ``..`` component,
    a symbolic link below the root leading out of it) is refused: nothing is
    created outside the output's own tree."""
    from ..errors import OutputError
    from ..sources.open import scheme_of

    d = os.path.dirname(name)
    if not d or scheme_of(name) != "file" or os.path.isdir(d) and not os.path.islink(d):
        return
    root = root if root is not None else pattern_root(pattern)
    rel = os.path.relpath(d, root) if root != "." else os.path.normpath(d)
    parts = [] if rel == "." else rel.split(os.sep)
    if ".." in parts or os.path.isabs(rel) or (root == "." and os.path.isabs(d)):
        if not os.path.isdir(d):
            raise OutputError(f"{name}: the shard's directory is outside {root}/, the directory the pattern names")
        return  # an existing directory the user named: nothing to create
    if not os.path.isdir(root):
        raise OutputError(f"{name}: directory {root} does not exist (no command makes the directory of its output)")
    try:
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
    from ..core.limits import hide_credentials
    from ..errors import describe_exit
    from ..runtime.child import Child
    from ..sources.open import scheme_of

    def post(shard):
        cmd = fill_command(template, shard.name, shard.index)
        try:
            # stdin is /dev/null: the post command must not eat tarsplit's input;
            # its stdout and stderr go to our stderr; its own session: an
            # interrupted split ends the command's children too
            child = Child(cmd, shard.name, "post command", stdout="stderr", stderr="inherit", env=env,
                          session=True)
        except OSError as e:
            raise OutputError(hide_credentials(f"{shard.name}: cannot run post command {cmd!r}: {e.strerror}")) from None
        try:
            rc = child.wait()
        except BaseException:  # Ctrl-C, SIGTERM: what it started goes too (a '&' of a finished one stays)
            child.kill()
            raise
        if rc != 0:
            raise OutputError(hide_credentials(f"{child.name}: post command {cmd!r} failed with {describe_exit(rc)}"))
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
                  inputs=(), group_size=None, index=False, settings=None, **header_defaults):
    """Write ``samples`` to shards named by ``pattern`` (see :class:`ShardNames`)
    and yield a :class:`Shard` for each shard as it is completed.

    A shard is closed before a sample that would make it hold more than
    ``max_count`` samples or more than ``max_size`` bytes (as written, end
    marker included); a sample larger than ``max_size`` on its own gets a
    shard to itself.  Shards are numbered from ``start``; after ``maxshards``
    shards no more input is read.  ``compression`` is passed to
    :func:`~tarproc.sinks.output.open_sink` (``"auto"``: from the name).  ``post(shard)``
    runs after each shard is complete (and before it is yielded).
    ``group_size``: groups of a ``.tar.gz``/``.tar.zst`` shard, ``settings``:
    the client commands and commit settings of the shards (see
    :func:`~tarproc.sinks.output.open_sink`).

    ``shards=N`` writes exactly N shards of equal counts instead (see
    :func:`split_exact`; ``total`` is the number of samples);
    ``fractions='train=0.8,val=0.2'`` sends each sample to a split by a
    stable hash of its key and ``seed`` (see :func:`split_fractions`).
    ``inputs``: local files no shard may replace (see :func:`input_guard`).

    Every shard's ``info`` is its :class:`~tarproc.sinks.scan.ShardIndex`
    (its sample count; with ``index``, also where each sample is and its key,
    taken from what was written, and for a grouped ``.tar.gz``/``.tar.zst``
    the seek record of its groups: ``write_shard_index`` of the ``info`` of
    the shards is what ``tarindex`` would write for them)."""
    from ..sources.shardlist import as_url

    pattern = as_url(pattern, "pattern")
    common = {"compression": compression, "post": post, "stats": stats if stats is not None else Stats(),
              "guard": input_guard(inputs), "group_size": group_size, "index": index, "settings": settings,
              "header_defaults": header_defaults}
    if shards is not None:
        if fractions is not None or max_count is not None or max_size is not None or maxshards is not None:
            raise UsageError("shards=N cannot be combined with fractions, a count, a size or maxshards")
        yield from split_exact(samples, pattern, shards, total, start, **common)
        return
    if fractions is not None:
        if maxshards is not None or start:
            raise UsageError("fractions cannot be combined with maxshards or start")
        yield from split_fractions(samples, pattern, fractions, seed, max_count, max_size, **common)
        return
    _check_limits(max_count, max_size)
    if maxshards is not None and maxshards < 1:
        return
    rot = ShardRotator(ShardNames(pattern, start), start, max_count=max_count, max_size=max_size,
                       maxshards=maxshards, **common)
    yield from rotate(samples, [rot])


def _check_limits(max_count, max_size):
    if max_count is not None and max_count < 1:
        raise UsageError(f"the sample count per shard must be at least 1 (got {max_count})")
    if max_size is not None and max_size < 1:
        raise UsageError(f"the shard size must be at least 1 byte (got {max_size})")


class ShardRotator:
    """Write one sequence of shards, a sample at a time: the one place where
    shards are opened, filled, closed and indexed.

    A shard is opened for the first sample that has none: named by ``names``
    (a :class:`ShardNames`) with the next number from ``start``, refused by
    ``guard(name)`` (see :func:`input_guard`), its directories made
    (:func:`make_shard_dir`), written through
    :func:`~tarproc.sinks.output.open_sink` (``compression``,
    ``group_size``).  It is closed (:meth:`before`) before a sample that
    would make it hold more than ``max_count`` samples or more than
    ``max_size`` bytes, or (:meth:`write`) as soon as it holds ``counts[k]``
    samples when a schedule of counts is given (:func:`exact_counts`).
    Closing a shard writes its end marker, commits it under its final name
    on its own (also inside a :class:`~tarproc.sinks.output.CommitGate`),
    makes its :class:`~tarproc.sinks.scan.ShardIndex` (``shard.info``;
    with ``index``, from the offsets recorded as it was written: see
    :func:`~tarproc.sinks.index.written_shard_index`) and runs
    ``post(shard)``; a failure there stops the split.  After ``maxshards``
    shards the rotator is :attr:`full`.  ``split``: the name of a
    ``fractions`` split, carried by its shards.  ``defer=True`` leaves each
    shard's commit to the active :class:`~tarproc.sinks.output.CommitGate`
    (all of a task's shards appear when the task succeeds)."""

    def __init__(self, names, start=0, counts=None, max_count=None, max_size=None, maxshards=None,
                 compression="auto", post=None, stats=None, split=None, guard=None, group_size=None, index=False, settings=None,
                 header_defaults=None, defer=False):
        self.names = names
        self.defer = defer  # True: each shard's commit is left to the active CommitGate (tarreshard's tasks)
        self.next_index = start
        self.counts = counts
        self.max_count = max_count
        self.max_size = max_size
        self.maxshards = maxshards
        self.compression = compression
        self.group_size = group_size
        self.settings = settings
        self.post = post
        self.stats = stats if stats is not None else Stats()
        self.split = split
        self.guard = guard
        self.index = index
        self.header_defaults = header_defaults or {}
        self.shard = self.sink = self.writer = None
        self.starts = self.keys = None  # of the open shard, with index
        self.shards = 0  # shards finished
        self.samples = 0  # samples written, in all shards
        self.bytes = 0  # bytes of tar in finished shards

    @property
    def full(self):
        """Whether ``maxshards`` shards are finished (read no more input)."""
        return self.maxshards is not None and self.shards >= self.maxshards

    def before(self, sample):
        """Close the open shard if ``sample`` does not fit in it (by count or
        size; not with a schedule); returns the shard closed, or ``None``."""
        shard = self.shard
        if shard is None or self.counts is not None:
            return None
        if self.max_count is not None and shard.samples >= self.max_count:
            return self._finish()
        if self.max_size is not None and \
                self.writer.bytes_written + sample_size(sample) + END_MARKER > self.max_size:
            return self._finish()
        return None

    def write(self, sample):
        """Write ``sample``, opening a shard if none is open; returns the
        shard it completed (a schedule's count reached), or ``None``."""
        if self.shard is None:
            if self.counts is not None and self.shards >= len(self.counts):
                raise UsageError(f"the input has more samples than the {sum(self.counts)} counted or given "
                                 f"(--total)")
            self._open()
        if self.starts is not None:
            self.starts.append(self.writer.bytes_written)
            self.keys.append(sample.get("__key__"))
        self.writer.write(sample)
        self.shard.samples += 1
        self.samples += 1
        if self.counts is not None and self.shard.samples >= self.counts[self.shards]:
            return self._finish()
        return None

    def close(self):
        """Finish the open shard (and, with a schedule, the empty shards it
        still owes); returns the list of shards finished."""
        out = []
        if self.shard is not None:
            out.append(self._finish())
        if self.counts is not None:
            if self.samples < sum(self.counts):
                raise UsageError(f"the input has {self.samples} samples, fewer than the {sum(self.counts)} "
                                 f"counted or given (--total); {self.shards} shards written")
            while self.shards < len(self.counts):  # more shards than samples: empty shards
                self._open()
                out.append(self._finish())
        return out

    def abort(self):
        """Discard the open shard: nothing appears under its name."""
        sink, self.sink, self.shard = self.sink, None, None
        if sink is not None:
            sink.abort()

    def _open(self):
        from array import array

        from .output import open_sink

        name = self.names(self.next_index)
        if self.guard is not None:
            self.guard(name)
        make_shard_dir(name, self.names.pattern, self.names.root)
        self.sink = open_sink(name, self.compression, defer=self.defer, group_size=self.group_size, settings=self.settings)  # each shard commits when closed
        self.writer = SampleWriter(self.sink, self.stats, **self.header_defaults)
        self.shard = Shard(name, self.next_index, split=self.split)
        if self.index:
            self.starts, self.keys = array("Q"), []

    def _finish(self):
        from .index import written_shard_index

        shard, writer, sink = self.shard, self.writer, self.sink
        end = writer.bytes_written
        writer.close()
        shard.bytes = writer.bytes_written
        sink.close()  # committed under its final name
        self.sink = self.writer = self.shard = None
        shard.info = written_shard_index(shard.name, shard.samples, sink, self.starts, self.keys, end, shard.bytes)
        self.starts = self.keys = None
        if self.post is not None:
            self.post(shard)
        self.shards += 1
        self.bytes += shard.bytes
        self.next_index += 1
        return shard


def rotate(samples, rotators, route=None):
    """Write ``samples`` through :class:`ShardRotator` s and yield each shard
    as it is completed: every sample goes to ``route(sample)`` (default: the
    one rotator); reading stops when that rotator is :attr:`~ShardRotator.full`.
    At the end every rotator is closed in turn; on an error, or when the
    caller stops early, their open shards are discarded and ``samples``
    closed."""
    it = iter(samples)
    if route is None:
        rot = rotators[0]

        def route(_):
            return rot
    try:
        for sample in it:
            rot = route(sample)
            done = rot.before(sample)
            if done is not None:
                yield done
                if rot.full:
                    return
            done = rot.write(sample)
            if done is not None:
                yield done
        for rot in rotators:
            yield from rot.close()
    finally:
        for rot in rotators:
            rot.abort()
        close = getattr(it, "close", None)
        if close is not None:
            close()


def exact_counts(total, shards):
    """Sample counts of ``shards`` shards holding ``total`` samples, differing by at most 1."""
    if shards < 1:
        raise UsageError(f"the number of shards must be at least 1 (got {shards})")
    if total < 0:
        raise UsageError(f"the total number of samples must be >= 0 (got {total})")
    from ..core import limits

    if shards > limits.MAX_URLS:  # (the counts are a list)
        raise UsageError(f"{shards} shards: more than {limits.MAX_URLS} (TARPROC_MAX_URLS)")
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


def split_exact(samples, pattern, shards, total=None, start=0, **options):
    """Write ``samples`` to exactly ``shards`` shards whose sample counts
    differ by at most one (the first ``total % shards`` get one more), and
    yield each :class:`Shard` as it is completed.  ``total`` is the
    number of samples (default: ``len(samples)``); an input with more or
    fewer samples is a :class:`UsageError`.  ``options``: those of
    :class:`ShardRotator`."""
    if total is None:
        try:
            total = len(samples)
        except TypeError:
            raise UsageError("shards=N needs the total number of samples (total=, or a sequence)") from None
    counts = exact_counts(total, shards)
    rot = ShardRotator(ShardNames(pattern, start), start, counts, **options)
    yield from rotate(samples, [rot])


def split_fractions(samples, pattern, fractions, seed=0, max_count=None, max_size=None, **options):
    """Send each sample to a split chosen by :func:`split_of` and write each
    split to its own shards, named by ``pattern`` with ``{split}`` filled in
    (``'out/{split}-%06d.tar'``); yields each :class:`Shard` as it is
    completed (its ``split`` says which).  ``options``: those of
    :class:`ShardRotator`."""
    fr = parse_fractions(fractions)
    if "{split}" not in pattern:
        raise UsageError(f"output pattern {pattern!r} has no {{split}} (e.g. 'out/{{split}}-%06d.tar')")
    rots = {}
    for name, _ in fr:
        pat = pattern.replace("{split}", name)
        if "%" not in pat and "{" not in pat:
            pat = shard_pattern(pat)
        rots[name] = ShardRotator(ShardNames(pat, root=pattern_root(pattern)), 0, None, max_count, max_size,
                                  split=name, **options)
    _check_limits(max_count, max_size)
    yield from rotate(samples, list(rots.values()), lambda sample: rots[split_of(sample.get("__key__"), fr, seed)])
