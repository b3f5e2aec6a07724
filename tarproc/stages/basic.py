"""The small stages: take, skip, slice, select and rename fields, rekey,
shuffle, and :func:`pipeline` to chain them.

A *stage* is a function from an iterator of samples to an iterator of samples,
built from its parameters: ``take(10)(samples)``."""

from ..core.limits import whole_number
from ..errors import UsageError
from ..core.rules import is_meta


def pipeline(source, *stages):
    """Apply stages in order: ``pipeline(samples, take(10), rekey("{index}"))``."""
    for stage in stages:
        source = stage(source)
    return source


_whole = whole_number  # (checked API arguments: one line, not a TypeError mid-run)


def take(n):
    """Stage: the first ``n`` samples (stops pulling input after them)."""
    n = _whole(n, "take: n")

    def stage(samples):
        if n <= 0:
            return
        for i, sample in enumerate(samples, 1):
            yield sample
            if i >= n:
                return

    return stage


def skip(n):
    """Stage: drop the first ``n`` samples."""
    n = _whole(n, "skip: n")

    def stage(samples):
        it = iter(samples)
        for _ in range(n):
            if next(it, None) is None:
                return
        yield from it

    return stage


def parse_slice(text):
    """``"START:STOP[:STEP]"`` (parts may be empty) to a ``slice``."""
    parts = text.split(":")
    if not 1 <= len(parts) <= 3:
        raise UsageError(f"bad slice {text!r}: expected START:STOP[:STEP]")
    try:
        nums = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        raise UsageError(f"bad slice {text!r}: expected whole numbers") from None
    if len(nums) == 1:
        nums = [nums[0], None]
    if any(x is not None and x < 0 for x in nums) or (len(nums) == 3 and nums[2] == 0):
        raise UsageError(f"bad slice {text!r}: numbers must be >= 0 and the step > 0")
    return slice(*nums)


def slice_samples(start=None, stop=None, step=None):
    """Stage: samples ``start``, ``start+step``, … before ``stop``; stops
    reading at ``stop``."""
    import itertools

    start = _whole(start, "slice_samples: start", none_ok=True)
    stop = _whole(stop, "slice_samples: stop", none_ok=True)
    step = _whole(step, "slice_samples: step", 1, none_ok=True)

    import sys

    # past sys.maxsize (islice's bound) no stream reaches: the same as sys.maxsize
    start, stop, step = (None if x is None else min(x, sys.maxsize) for x in (start, stop, step))

    def stage(samples):
        return itertools.islice(samples, start, stop, step)

    return stage


def parse_fields(spec):
    """Parse a field spec: ``"jpg cls"``, alternatives ``"jpg;png"``, renames
    ``"img=jpg;png"``.  Returns a list of ``(output name, [candidates])``;
    an alternative without a rename keeps the name of the field it found."""
    out = []
    for item in spec.replace(",", " ").split():
        name, eq, alts = item.partition("=")
        if not eq:
            name, alts = None, item
        candidates = [a for a in alts.split(";") if a]
        if not candidates or (eq and not name):
            raise UsageError(f"bad field spec {item!r}")
        out.append((name, candidates))
    if not out:
        raise UsageError("empty field spec")
    return out


def select_fields(spec, stats=None, keep_meta=True):
    """Stage: keep only the fields in ``spec`` (see :func:`parse_fields`).
    Samples that lack a requested field are dropped and counted as skipped."""
    wanted = parse_fields(spec) if isinstance(spec, str) else spec

    def stage(samples):
        for sample in samples:
            out = {k: v for k, v in sample.items() if is_meta(k)} if keep_meta else {"__key__": sample["__key__"]}
            for name, candidates in wanted:
                for c in candidates:
                    if c in sample:
                        out[name or c] = sample[c]
                        break
                else:
                    if stats is not None:
                        stats.skipped += 1
                    break
            else:
                yield out

    return stage


def rename_fields(mapping):
    """Stage: rename fields, ``{"jpeg": "jpg"}``; fields not named are kept."""

    def stage(samples):
        for sample in samples:
            yield {mapping.get(k, k): v for k, v in sample.items()}

    return stage


class _KeyFields(dict):
    def __missing__(self, name):
        raise UsageError(f"--rekey: unknown name {{{name}}} (use index, key, basename, dirname, source)")


def rekey(fmt):
    """Stage: new keys from a format string with ``{index}`` (0, 1, …),
    ``{key}``, ``{basename}``, ``{dirname}`` (of the old key) and
    ``{source}``, e.g. ``"{index:09d}"``."""
    from ..core.limits import check_widths

    check_widths(fmt, "--rekey")
    try:  # a trial with values of the right types: a bad spec ({key:d}) is refused now, not mid-stream
        fmt.format_map(_KeyFields(index=0, key="a/b", basename="b", dirname="a", source="s.tar"))
    except (ValueError, IndexError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"--rekey {fmt!r}: {e}") from None

    def stage(samples):
        for index, sample in enumerate(samples):
            old = sample["__key__"]
            names = _KeyFields(
                index=index, key=old, basename=old.rsplit("/", 1)[-1],
                dirname=old.rsplit("/", 1)[0] if "/" in old else "", source=sample.get("__source__", ""),
            )
            try:
                new = fmt.format_map(names)
            except (ValueError, IndexError, KeyError, TypeError, AttributeError) as e:
                raise UsageError(f"--rekey {fmt!r}: {e}") from None
            sample = dict(sample)
            sample["__key__"] = new
            yield sample

    return stage


def shuffle(bufsize, seed=None, rng=None):
    """Stage: mix samples through a buffer of ``bufsize`` samples (memory is
    bounded by the buffer); reproducible with ``seed``."""
    import random

    bufsize = _whole(bufsize, "shuffle: bufsize", 1)

    def stage(samples):
        from ..core.shuffle import buffer_shuffle

        return buffer_shuffle(samples, bufsize, rng or random.Random(seed))

    return stage


def count_into(stats, attr="written"):
    """Stage: count samples passing through into ``stats.<attr>``."""

    def stage(samples):
        for sample in samples:
            setattr(stats, attr, getattr(stats, attr) + 1)
            yield sample

    return stage
