"""Grouping tar members into samples and back.

A sample is a ``dict`` of field name to ``bytes`` plus ``__key__`` (``str``);
see :mod:`tarproc.core.rules` for keys, fields and metadata.  Consecutive
members with the same key form one sample (the WebDataset convention)."""

from ..errors import BadArchive, BadSample, TarprocError
from .blob import Blob
from .pack import Packer, sample_budget
from .limits import quote
from .passthru import RawSample
from .rules import MAX_NAME_BYTES, SKIPPED, bad_field_name, bad_key, classify, is_meta, starts_another, unsafe_name
from .stats import Stats
from .tario import BLOCK, REGULAR, TYPE_NAMES, TarWriter, member_size


def group(members, source="-", stats=None, spooler=None):
    """Group consecutive members with the same key into samples.

    Non-regular members and names without an extension are skipped and
    counted in ``stats``; a field that repeats inside one sample raises
    :class:`BadSample`; an unsafe name raises :class:`BadArchive`.  With a
    ``spooler``, a sample's fields past :func:`~tarproc.core.pack.sample_budget`
    bytes become blobs of one spool file (a sample of thousands of members)."""
    if stats is None:
        stats = Stats()
    current = None
    key = None
    budget = sample_budget(spooler)
    held = 0
    pack = None
    members = iter(members)
    while True:
        try:
            m = next(members, None)
        except TarprocError as e:
            if current is not None and starts_another(e, key):  # the sample before it is whole: give it first
                stats.read += 1
                done, current = current, None
                yield done
            raise
        if m is None:
            break
        if m.type != REGULAR:
            stats.skip_member(TYPE_NAMES.get(m.type, "special files"))
            continue
        parts = classify(m.name)  # THE name rule (rules.py)
        if type(parts) is not tuple:
            if parts.kind == SKIPPED:
                stats.skip_member(parts.why)
                continue
            raise BadArchive(source, m.offset, parts.why)
        k, field = parts
        if k != key:
            if current is not None:
                stats.read += 1
                yield current
            current = {"__key__": k, "__source__": source}
            key = k
            held = 0
            pack = None
        elif field in current:
            raise BadSample(k, f"field {field!r} appears twice (offset {m.offset})", source)
        data = m.data
        if type(data) is bytes:
            held += len(data)
            if held > budget:
                if pack is None:
                    pack = Packer(spooler)
                data = pack.add_bytes(data)
        current[field] = data
    if current is not None:
        stats.read += 1
        yield current


def _check_names(sample):
    """Raise :class:`BadSample` unless ``sample`` is a dict whose names are all ``str``."""
    if not isinstance(sample, dict):
        raise BadSample(None, f"not written: a sample is a dict, not {type(sample).__name__}")
    key = sample.get("__key__")
    for field in sample:
        if not isinstance(field, str):
            raise BadSample(key, f"not written: field name {quote(field)} is {type(field).__name__}, not a str")
    return key


def sample_members(sample):
    """The ``(name, data)`` members of a sample, fields in sorted order:
    THE writer rule (every writer of samples, and the sizes tarsplit
    counts, ask this).  A sample whose key or field names would not read
    back as themselves (:func:`~tarproc.core.rules.bad_key`,
    :func:`~tarproc.core.rules.bad_field_name`) raises :class:`BadSample`."""
    key = sample.get("__key__") if type(sample) is dict or type(sample) is RawSample else None
    if (type(key) is str and key and len(key) <= 65536 and "." not in key[key.rfind("/") + 1 :]
            and not key.endswith("/") and unsafe_name(key) is None):
        # the common sample at once: a good key, bytes values, plain field names (is_meta inlined)
        try:
            fields = [f for f in sorted(sample) if f[:2] != "__" or f[-2:] != "__"]
        except TypeError:  # a name that is not a str: said below
            fields = None
        if fields is not None:
            out = []
            for field in fields:
                value = sample[field]
                if (type(field) is not str or type(value) is not bytes or "/" in field or not field.isprintable()
                        or len(field) > 4096):
                    break
                out.append((key + "." + field, value))
            else:
                return out
    return _checked_members(sample)


def _checked_members(sample):
    key = _check_names(sample)
    if key is None or key == "":
        raise BadSample(key, "sample has no __key__")
    if not isinstance(key, str):
        raise BadSample(key, f"not written: its __key__ is {type(key).__name__}, not a str")
    why = bad_key(key)
    if why:
        raise BadSample(key, f"not written: {why}: it would not read back")
    out = []
    for field in sorted(sample):
        if is_meta(field):
            continue
        value = sample[field]
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif isinstance(value, memoryview) and (value.itemsize != 1 or not value.c_contiguous):
            # len() of a memoryview counts items, not bytes: its bytes, as one run
            value = value.cast("B") if value.c_contiguous else value.tobytes()
        elif not isinstance(value, (bytes, bytearray, memoryview, Blob)):
            raise BadSample(key, f"field {field!r} is {type(value).__name__}, not bytes, str or Blob")
        why = bad_field_name(field)
        name = key + "." + field
        if not why and len(name) > MAX_NAME_BYTES // 4:
            why = unsafe_name(name)
        if why:
            raise BadSample(key, f"not written, bad field name: {why}: it would not read back")
        out.append((name, value))
    return out


def written_size(sample):
    """Bytes a sample takes in a tar written by :class:`SampleWriter`
    (headers, data, padding; its members are :func:`sample_members`)."""
    if type(sample) is RawSample and (raw := getattr(sample, "raw", None)) is not None:
        return sum(map(len, raw[0]))  # (the bytes a writer writes for it: those it was read from)
    total = 0
    key = sample.get("__key__")
    if isinstance(key, str) and key.isascii() and len(key) < 90:
        for field, value in sample.items():
            if is_meta(field):
                continue
            if type(value) is not bytes or len(field) + len(key) >= 100 or not field.isascii():
                break
            size = len(value)
            total += BLOCK + size + (-size % BLOCK)
        else:
            return total
    return sum(member_size(name, len(value)) for name, value in sample_members(sample))


def written_twice(key, field):
    """The error for a sample written right after one with the same key
    when both have ``field`` (read back, the two are one sample)."""
    return BadSample(key, f"field {field!r} written twice: a sample with the same key came just before, and "
                          "read back the two are one sample (duplicate keys: make them unique, e.g. with "
                          "tarcat --rekey, or keep the last of each with tarsort --update)")


def names_of(sample):
    """A sample's names as :class:`SideBySide` takes them, cheap to make and
    to send between processes: its dict keys joined with "/" (which no field
    name holds; metadata names are left out when the names are needed)."""
    return "/".join(sample)


class SideBySide:
    """The rule of :class:`SampleWriter` for samples written side by side,
    for a writer that has only each sample's key and :func:`names_of`
    (``tarpcat`` merging samples its workers encoded): :meth:`check` them in
    output order; it raises :func:`written_twice`'s error when a field would
    come twice in one sample read back.  :meth:`restart` starts a new run of
    one key without a check (for a sample known to follow another key)."""

    __slots__ = ("key", "fields")

    def __init__(self):
        self.key = None
        self.fields = None  # the names of the run's sample, or the set of the run's fields

    def check(self, key, names):
        if key != self.key or key is None:
            self.key = key
            self.fields = names
            return
        fields = self.fields
        if type(fields) is not set:
            fields = self.fields = set(_fields(fields))
        new = _fields(names)
        for f in sorted(new):
            if f in fields:
                raise written_twice(key, f)
        fields.update(new)

    def restart(self, key, names):
        self.key = key
        self.fields = names

    def checked(self, items):
        """Check ``(obj, key, names)`` items in turn; yield each ``obj``."""
        check = self.check
        last = None
        for obj, key, names in items:
            if key == last:  # rare: the same key again
                check(key, names)
            else:
                last = self.key = key
                self.fields = names
            yield obj


def _fields(names):
    return [f for f in names.split("/") if f[:2] != "__" or f[-2:] != "__"]


class SampleWriter:
    """Write samples to a binary stream as tar members (see :class:`TarWriter`
    for the header defaults, which are keyword arguments here too).

    A sample whose key is the key of the sample just written is one sample
    with it when read back (by tarproc or webdataset): written when their
    fields differ, refused (:class:`BadSample`) when a field would come twice.  ``repeated_keys=True`` writes
    it anyway (``tarsort`` keeps duplicate keys next to each other)."""

    def __init__(self, stream, stats=None, repeated_keys=False, **header_defaults):
        self.tar = TarWriter(stream, **header_defaults)
        self._raw_ok = self.tar.canonical  # raw samples carry the bytes of canonical headers
        self.stats = stats if stats is not None else Stats()
        self._last_key = None
        self._last = None  # the last sample written (or the field names of its key so far)
        self._repeated_ok = repeated_keys
        # an output cut into groups of whole samples (a grouped .tar.gz/.tar.zst sink) is told where samples start
        self._start = stream.start_sample if getattr(stream, "grouped", False) else None

    def write(self, sample):
        if type(sample) is RawSample and self._raw_ok and self._start is None \
                and (raw := getattr(sample, "raw", None)) is not None:
            # the common case first: a sample read from plain headers, copied as read (what follows, in short)
            key = sample.get("__key__")
            if key != self._last_key or key is None:
                self._last_key = key
                self._last = sample
                self.tar.write_raw(*raw)
                self.stats.written += 1
                return
        if type(sample) is not dict and type(sample) is not RawSample:
            _check_names(sample)
        key = sample.get("__key__")
        if self._start is not None and key != self._last_key:
            self._start(sample)
        if key == self._last_key and key is not None and not self._repeated_ok:
            _check_names(sample)
            # read back, members of consecutive samples with one key are one sample (as in webdataset):
            # fine when their fields differ (a sample scattered in its input comes back whole), not when
            # a field repeats (it would read back twice in one sample)
            last = self._last
            fields = last if type(last) is set else {f for f in last if not is_meta(f)}
            twice = sorted(f for f in sample if f in fields and not is_meta(f))
            if twice:
                raise written_twice(key, twice[0])
            fields.update(f for f in sample if not is_meta(f))
            sample_fields = fields
        else:
            sample_fields = sample
        self._last_key = key
        self._last = sample_fields
        if type(sample) is RawSample and self._raw_ok:
            raw = getattr(sample, "raw", None)
            if raw is not None:  # the bytes it was read from are what we would write
                self.tar.write_raw(*raw)
                self.stats.written += 1
                return
        write = self.tar.write
        for name, value in sample_members(sample):
            write(name, value)
        self.stats.written += 1

    @property
    def bytes_written(self):
        return self.tar.bytes_written

    def close(self):
        self.tar.close()
