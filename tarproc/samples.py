"""Samples: grouping tar members into samples and back, and the small stages.

A sample is a ``dict`` of field name to ``bytes`` plus ``__key__`` (``str``).
Entries whose names start and end with ``__`` (``__source__``) are metadata:
they travel with the sample and are never written as members.

The key of a member is its directory plus the part of its file name before the
first dot; the field is the rest (``train/n0142.jpg`` -> ``train/n0142``,
``jpg``; ``a.b/c.seg.png`` -> ``a.b/c``, ``seg.png``).  Consecutive members with
the same key form one sample.  This is the WebDataset convention.

A *stage* is a function from an iterator of samples to an iterator of samples,
built from its parameters: ``take(10)(samples)``.  :func:`pipeline` chains them.
"""

from .errors import BadArchive, BadSample, UsageError
from .tario import TYPE_NAMES, REGULAR, TarReader, TarWriter


class Stats:
    """Counts of what a command did: samples read, written, skipped, failed,
    and members skipped by reason."""

    __slots__ = ("read", "written", "skipped", "failed", "members_skipped", "reasons", "inputs")

    def __init__(self):
        self.read = self.written = self.skipped = self.failed = 0
        self.members_skipped = 0
        self.reasons = {}
        self.inputs = 0

    def skip_member(self, reason):
        self.members_skipped += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def summary(self):
        text = f"samples read {self.read}, written {self.written}, skipped {self.skipped}, failed {self.failed}"
        if self.members_skipped:
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.reasons.items()))
            text += f"; members skipped {self.members_skipped} ({why})"
        return text

    def as_dict(self):
        return {
            "read": self.read, "written": self.written, "skipped": self.skipped,
            "failed": self.failed, "members_skipped": self.members_skipped,
            "reasons": dict(self.reasons),
        }


def is_meta(name):
    return name.startswith("__") and name.endswith("__")


def split_name(name):
    """``(key, field)`` of a member name, or ``None`` when the file name has
    no dot or starts with one (such members are skipped)."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot <= slash + 1:
        return None
    return name[:dot], name[dot + 1 :]


def unsafe_name(name):
    """Why a member name is refused, or ``None`` when it is acceptable.

    Absolute names, ``..`` components, empty names and control characters
    are refused: they are the ways a name can escape a directory or break a
    line-oriented tool downstream."""
    if not name:
        return "empty member name"
    if name.startswith("/"):
        return f"absolute member name {name!r}"
    if ".." in name and ".." in name.split("/"):
        return f"member name {name!r} has a '..' component"
    if not name.isprintable() and any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"member name {name!r} has control characters"
    return None


def group(members, source="-", stats=None):
    """Group consecutive members with the same key into samples.

    Non-regular members and names without an extension are skipped and
    counted in ``stats``; a field that repeats inside one sample raises
    :class:`BadSample`; an unsafe name raises :class:`BadArchive`."""
    if stats is None:
        stats = Stats()
    current = None
    key = None
    for m in members:
        name = m.name
        if m.type != REGULAR:
            stats.skip_member(TYPE_NAMES.get(m.type, "special files"))
            continue
        why = unsafe_name(name)
        if why:
            raise BadArchive(source, m.offset, why)
        slash = name.rfind("/")
        dot = name.find(".", slash + 1)
        if dot <= slash + 1:
            stats.skip_member("names without an extension")
            continue
        k = name[:dot]
        field = name[dot + 1 :]
        if k != key:
            if current is not None:
                stats.read += 1
                yield current
            current = {"__key__": k, "__source__": source}
            key = k
        elif field in current:
            raise BadSample(k, f"field {field!r} appears twice (offset {m.offset})", source)
        current[field] = m.data
    if current is not None:
        stats.read += 1
        yield current


def sample_members(sample):
    """The ``(name, data)`` members of a sample, fields in sorted order."""
    key = sample.get("__key__")
    if not isinstance(key, str) or not key:
        raise BadSample(key, "sample has no __key__")
    if key.endswith("/") or "." in key[key.rfind("/") + 1 :]:
        raise BadSample(key, "key has a dot in its file name or ends in '/': it would not read back as one sample")
    out = []
    for field in sorted(sample):
        if is_meta(field):
            continue
        value = sample[field]
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif not isinstance(value, (bytes, bytearray, memoryview)):
            raise BadSample(key, f"field {field!r} is {type(value).__name__}, not bytes or str")
        if not field or "/" in field:
            raise BadSample(key, f"bad field name {field!r}")
        out.append((key + "." + field, value))
    return out


class SampleWriter:
    """Write samples to a binary stream as tar members (see :class:`TarWriter`
    for the header defaults, which are keyword arguments here too)."""

    def __init__(self, stream, stats=None, **header_defaults):
        self.tar = TarWriter(stream, **header_defaults)
        self.stats = stats if stats is not None else Stats()

    def write(self, sample):
        key = sample.get("__key__")
        write = self.tar.write
        if isinstance(key, str) and key and "." not in key[key.rfind("/") + 1 :] and not key.endswith("/"):
            # fast path for well-formed samples
            for field in sorted(sample):
                if field[:2] == "__" and field[-2:] == "__":
                    continue
                value = sample[field]
                if type(value) is not bytes or "/" in field or not field:
                    break
            else:
                for field in sorted(sample):
                    if field[:2] == "__" and field[-2:] == "__":
                        continue
                    write(key + "." + field, sample[field])
                self.stats.written += 1
                return
        for name, value in sample_members(sample):
            write(name, value)
        self.stats.written += 1

    @property
    def bytes_written(self):
        return self.tar.bytes_written

    def close(self):
        self.tar.close()


# ---------------------------------------------------------------- reading URLs


def iter_samples(urls, stats=None, strict=False, warn=None):
    """Yield the samples of one URL or a list of URLs, in order.

    Each sample gets ``__source__`` (its URL; ``stdin`` for ``-``).  ``warn(message)`` receives
    warnings (a shard cut off at a block boundary); with ``strict`` those are
    errors.  Damage raises :class:`~tarproc.errors.BadInput` after every
    sample before it has been yielded."""
    from .urls import expand_urls, open_source

    if isinstance(urls, str):
        urls = expand_urls([urls])
    if stats is None:
        stats = Stats()
    for url in urls:
        stream = open_source(url)
        stats.inputs += 1
        name = "stdin" if url == "-" else url
        try:
            reader = TarReader(stream, name, strict=strict, warn=warn)
            yield from group(reader.members(), name, stats)
        finally:
            stream.close()


def write_samples(url, samples, stats=None, **header_defaults):
    """Write samples to an output URL (``-`` for stdout); the output appears
    under its final name only when complete.  Returns the number written."""
    from .urls import open_sink

    stats = stats if stats is not None else Stats()
    with open_sink(url) as sink:
        writer = SampleWriter(sink, stats, **header_defaults)
        for sample in samples:
            writer.write(sample)
        writer.close()
    return stats.written


# ---------------------------------------------------------------- stages


def pipeline(source, *stages):
    """Apply stages in order: ``pipeline(samples, take(10), rekey("{index}"))``."""
    for stage in stages:
        source = stage(source)
    return source


def take(n):
    """Stage: the first ``n`` samples (stops pulling input after them)."""

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

    def stage(samples):
        for index, sample in enumerate(samples):
            old = sample["__key__"]
            names = _KeyFields(
                index=index, key=old, basename=old.rsplit("/", 1)[-1],
                dirname=old.rsplit("/", 1)[0] if "/" in old else "", source=sample.get("__source__", ""),
            )
            try:
                new = fmt.format_map(names)
            except (ValueError, IndexError, KeyError) as e:
                raise UsageError(f"--rekey {fmt!r}: {e}") from None
            sample = dict(sample)
            sample["__key__"] = new
            yield sample

    return stage


def shuffle(bufsize, seed=None, rng=None):
    """Stage: mix samples through a buffer of ``bufsize`` samples (memory is
    bounded by the buffer); reproducible with ``seed``."""
    import random

    def stage(samples):
        r = rng or random.Random(seed)
        buf = []
        for sample in samples:
            if len(buf) < bufsize:
                buf.append(sample)
                continue
            i = r.randrange(len(buf))
            out, buf[i] = buf[i], sample
            yield out
        r.shuffle(buf)
        yield from buf

    return stage


def count_into(stats, attr="written"):
    """Stage: count samples passing through into ``stats.<attr>``."""

    def stage(samples):
        for sample in samples:
            setattr(stats, attr, getattr(stats, attr) + 1)
            yield sample

    return stage
