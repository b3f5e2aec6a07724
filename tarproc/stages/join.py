"""Joining shard sets that share keys: :func:`join_samples`.

The inputs are named by position: ``A`` (the first, whose samples lead:
their keys, order and metadata are the output's), ``B``, ``C``, ... and
then the tables, in the order given.  A sample of the output holds the
fields of the samples with its key in every input.

**Semantics** (``how``):

* ``strict`` (default): every input has exactly A's keys; a key missing
  from an input, or one an input has that A lacks, is a
  :class:`~tarproc.errors.BadInput` naming the key, its input and its shard.
* ``inner``: only the keys every input has.
* ``left``: every sample of A, with the fields of the inputs that have its key.

A field in two inputs is refused (``BadSample`` naming the key and both
inputs) unless one is renamed: ``rename={"B": {"jpg": "jpg_hr"}}`` (on the
command line ``-r B:jpg=jpg_hr``).

**Order** (``order``):

* ``input`` (default): the inputs are *aligned*, the usual case when B was
  made from A: one streaming pass, samples matched in turn, memory flat.  A
  sample of A whose key is not the next one of B is missing from B
  (``left``, ``inner``) or an error (``strict``).  So B's keys must come in
  A's order; B may lack some of A's samples, but a key of B that A does not
  have at that point is an error when the join ends (use ``order="key"``).
  A key that comes twice in each input is matched in turn (first with first).
* ``key``: any order.  Every shard input is sorted by key with the external
  merge sort of ``tarsort`` (:func:`~tarproc.stages.sort.sort_samples`,
  within ``memory`` shared between the inputs, spilling to ``tmpdir``) and
  the sorted streams are merged; the output comes in key order (bytes order,
  as ``tarsort``).  Here a key that comes twice in one input is an error
  naming it and its shard: there is no order to pair the copies by.

Why sort-merge and not lookups through ``tarindex`` offsets
(:class:`~tarproc.sources.indexed.IndexedDataset`): it reads every input
once, front to back, so it works for every source the toolkit reads (stdin,
``pipe:``, compressed shards, http/gs/s3 where a lookup is a request per
sample), needs no index built first, keeps memory within a budget whatever
the sizes, and costs two sequential passes where lookups cost a random read
per sample.

**Tables** (:mod:`tarproc.sources.columns`): a keyed table (TSV, CSV, JSON
lines with ``__key__``) is held in memory by key (within ``memory``) and
joined in either order, by key; a ``.npy`` array adds row ``i`` to the
``i``-th sample of A as field ``npy`` (its row count must be A's sample
count).

**Fast path.** In input order, when the samples of every input were read as
the bytes a writer writes (see :mod:`tarproc.core.passthru`), nothing is
renamed and the fields of each input sort after those of the one before
(``cls jpg`` + ``txt``), the joined sample is the inputs' bytes one after the
other: no member is encoded again.
"""

from ..core.limits import quote, shown
from ..core.passthru import RawSample
from ..core.rules import bad_field_name, is_meta
from ..errors import BadInput, BadSample, UsageError

HOWS = ("strict", "inner", "left")
ORDERS = ("input", "key")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Most field names the fast path's cache of sample shapes holds (each
#: shape: the dict keys of the samples joined), whatever the inputs.
SHAPE_NAMES = 16384


def input_names(n):
    """The names of ``n`` inputs: ``A``, ``B``, ... (at most 26)."""
    if n > len(LETTERS):
        raise UsageError(f"at most {len(LETTERS)} inputs and tables can be joined, not {n}")
    return list(LETTERS[:n])


def parse_renames(specs, names):
    """``{input name: {field: new name}}`` from ``'B:jpg=jpg_hr'`` strings
    (several renames of one input: ``'B:jpg=jpg_hr,cls=label'``)."""
    out = {}
    for spec in specs or ():
        name, sep, rest = spec.partition(":")
        name = name.strip().upper()
        pairs = rest.replace(",", " ").split()
        if not sep or name not in names or not pairs:
            raise UsageError(f"--rename {spec!r}: write INPUT:FIELD=NEW, INPUT one of {', '.join(names)} "
                             f"(the inputs in order, then the tables)")
        for pair in pairs:
            old, eq, new = pair.partition("=")
            if not eq or not old or not new:
                raise UsageError(f"--rename {spec!r}: write INPUT:FIELD=NEW")
            for f in (old, new):
                why = bad_field_name(f) or (f"{quote(f)} is a metadata name" if is_meta(f) else None)
                if why:
                    raise UsageError(f"--rename {spec!r}: {why}")
            mine = out.setdefault(name, {})
            if old.lower() in mine:
                raise UsageError(f"--rename {spec!r}: field {old!r} of {name} renamed twice")
            mine[old.lower()] = new
    for name, mapping in out.items():
        targets = list(mapping.values())
        for t in targets:
            if targets.count(t) > 1:
                raise UsageError(f"--rename: two fields of {name} renamed to {t!r}")
    return out


def _where(sample):
    src = sample.get("__source__") if sample is not None else None
    return f" ({shown(src)})" if src else ""


class _Cursor:
    """One shard input read in turn, with its next sample in hand."""

    __slots__ = ("name", "it", "head", "renames", "last")

    def __init__(self, name, samples, renames):
        self.name = name
        self.it = iter(samples)
        self.renames = renames
        self.last = None  # the shard of the sample before head (to say where an input ended)
        self.head = next(self.it, None)

    def advance(self):
        self.last = self.head.get("__source__")
        self.head = next(self.it, None)

    def close(self):
        close = getattr(self.it, "close", None)
        if close is not None:
            close()


def _add(out, names, sample, who, renames, key, applied=None):
    """Add the fields of ``sample`` (input ``who``) to ``out``; ``names``
    maps each output field to the input it came from; ``applied`` collects
    ``(who, field)`` of the renames used."""
    for field, value in sample.items():
        if field[:2] == "__" and field[-2:] == "__":
            continue
        if renames and field in renames:
            if applied is not None:
                applied.add((who, field))
            field = renames[field]
        if field in names:
            if names[field] == who:
                raise BadSample(key, f"two fields of {who}{_where(sample)} are named {field!r} after --rename "
                                     f"{who}:...={field}", out.get("__source__"))
            raise BadSample(key, f"field {field!r} is in {names[field]} and in {who}{_where(sample)}: rename "
                                 f"one, e.g. --rename {who}:{field}={field}_{who.lower()}",
                            out.get("__source__"))
        names[field] = who
        out[field] = value


def _concatenable(names):
    """Whether samples with these dict keys (a tuple per input, A first) can be
    joined by concatenating their raw bytes: only ``__key__`` and
    ``__source__`` besides fields, and each input's fields sorting after the
    previous input's (what a writer would write, in that order)."""
    last = None
    for i, keys in enumerate(names):
        fields = [k for k in keys if not is_meta(k)]
        if len(fields) + 2 != len(keys) or "__key__" not in keys or "__source__" not in keys or not fields:
            return False
        if i and fields[0] <= last:
            return False
        last = fields[-1]
    return True


class _Joiner:
    def __init__(self, names, renames, tables, how, warn=None):
        self.names = names
        self.warn = warn
        self.applied = set()  # (input, field) of the renames used
        self.renames = renames
        self.tables = tables  # [(name, KeyedTable)]
        self.how = how
        self.joined = 0
        self.raw_ok = not tables and not any(renames.values())
        self._shapes = {}  # the dict keys of the inputs' samples -> _concatenable()
        self._held = 0  # names held by the keys of _shapes (bounded: see _remember)

    def combine(self, a, parts):
        """The joined sample of ``a`` (input A) and ``parts`` (``[(name, sample)]``)."""
        key = a["__key__"]
        if self.raw_ok and type(a) is RawSample and a.raw is not None:
            if not parts:
                return a
            if len(parts) == 1:
                b = parts[0][1]
                if type(b) is RawSample and b.raw is not None:
                    shape = (tuple(a), tuple(b))
                    ok = self._shapes.get(shape)
                    if ok is None:
                        ok = self._remember(shape)
                    if ok:
                        source = a["__source__"]
                        (pa, na), (pb, nb) = a.raw, b.raw
                        dict.update(a, b)  # (a dict method: the raw bytes are set below)
                        dict.__setitem__(a, "__source__", source)
                        a.raw = (pa + pb, na + nb)
                        return a
            elif all(type(s) is RawSample and s.raw is not None for _, s in parts):
                shape = (tuple(a),) + tuple(tuple(s) for _, s in parts)
                ok = self._shapes.get(shape)
                if ok is None:
                    ok = self._remember(shape)
                if ok:
                    source = a["__source__"]
                    pieces, members = list(a.raw[0]), a.raw[1]
                    for _, s in parts:
                        pieces += s.raw[0]
                        members += s.raw[1]
                        dict.update(a, s)
                    dict.__setitem__(a, "__source__", source)
                    a.raw = (pieces, members)
                    return a
        ra = self.renames.get("A")
        out = {k: v for k, v in a.items() if is_meta(k)}
        names = {}
        _add(out, names, a, "A", ra, key, self.applied)
        for name, s in parts:
            _add(out, names, s, name, self.renames.get(name), key, self.applied)
        for name, table in self.tables:
            row = table.get(key)
            if row is None:
                if self.how == "strict":
                    near = table.near(key)
                    raise BadInput(f"key {quote(key)}{_where(a)} has no row in {name} "
                                   f"({shown(table.path)}){_normal_form_note(key, near)}")
                if self.how == "inner":
                    return None
                continue
            fake = dict(row)
            _add(out, names, fake, name, self.renames.get(name), key, self.applied)
        return out

    def _remember(self, shape):
        ok = _concatenable(shape)
        # few shapes repeat; the bound is on the names the cache holds, not on its entries: samples
        # with many fields named anew in each (``k1.f1_0 ... k1.f1_999``) are each a new shape, and
        # 4096 of them held a million names (140 MB for 4000 samples of 200 fields)
        size = sum(map(len, shape))
        if self._held + size <= SHAPE_NAMES:
            self._shapes[shape] = ok
            self._held += size
        return ok

    def finish(self):
        if self.warn is not None:  # a rename that met no field: a typo (B:jgp=...) or the wrong input
            for name, mapping in self.renames.items():
                for old, new in mapping.items():
                    if (name, old) not in self.applied:
                        self.warn(f"--rename {name}:{old}={new} renamed nothing: no sample of {name} has "
                                  f"a field {old!r}")
        if self.how != "strict":
            return
        for name, table in self.tables:
            extra = None if table.partial else table.unused()
            if extra is not None:
                raise BadInput(f"key {quote(extra[0])} of {name} ({shown(table.path)} line {extra[1]}) is not in A")


def _rows(samples, array, name):
    """Stage: row ``i`` of ``array`` (a RowArray) as field ``npy`` of the ``i``-th sample."""
    n = 0
    total = len(array)
    for sample in samples:
        if n >= total:
            raise BadInput(f"{name} ({shown(array.path)}) has {total} rows: none for sample {n + 1} of A, "
                           f"key {quote(sample.get('__key__'))}{_where(sample)} (a row per sample of A, in order)")
        sample = dict(sample)
        if "npy" in sample:
            raise BadSample(sample.get("__key__"), f"field 'npy' is in A and in {name}: rename one, e.g. "
                                                   f"--rename {name}:npy=emb.npy", sample.get("__source__"))
        sample["npy"] = array.row(n)
        n += 1
        yield sample
    if n != total:
        raise BadInput(f"{name} ({shown(array.path)}) has {total} rows, A has {n} samples "
                       f"(a row per sample of A, in order)")


def _rename_npy(samples, new, name):
    """Stage: field ``npy`` (a row of table ``name``) renamed ``new``; a
    field ``new`` of A is refused as any field in two inputs is."""
    for s in samples:
        if new in s:
            raise BadSample(s.get("__key__"), f"field {new!r} is in A and in {name} (its npy renamed {new!r}): "
                                              f"rename one", s.get("__source__"))
        s[new] = s.pop("npy")
        yield s


def _as_samples(source, stats, strict, warn, stall, spooler, raw, settings=None):
    """A shard input: a URL, pattern or list of them (read here), or an iterable of samples."""
    from ..sources.samples import iter_samples
    import pathlib

    if isinstance(source, (str, bytes, pathlib.PurePath)) or (
            isinstance(source, (list, tuple)) and all(isinstance(u, (str, pathlib.PurePath)) for u in source)):
        return iter_samples(source, stats, strict=strict, warn=warn, stall=stall, spooler=spooler, raw=raw,
                            settings=settings)
    if isinstance(source, dict):
        raise UsageError("join_samples: each input is a URL, a pattern, a list of URLs or an iterable of samples, "
                         "not one sample")
    return iter(source)


def join_samples(inputs, tables=(), how="strict", order="input", rename=None, memory=512 << 20, tmpdir=None,
                 stats=None, strict=False, warn=None, stall=None, spooler=None, raw=False, settings=None):
    """Join the samples of ``inputs`` that share a key; yield the joined samples.

    ``inputs``: shard sets, each a URL or brace pattern
    (``"b-{0000..0009}.tar"``), a list of URLs, or an iterable of sample
    dicts; they are named ``A``, ``B``, ... in order.  ``tables``: paths of
    TSV/CSV/JSON-lines tables with a ``__key__`` column, or of ``.npy``
    arrays (a row per sample of A), named by the letters after the inputs
    (or tables opened with :func:`tarproc.sources.columns.open_table`).
    ``how``: ``"strict"`` (default), ``"inner"`` or ``"left"``; ``order``:
    ``"input"`` (aligned inputs, one streaming pass) or ``"key"`` (any order:
    sort-merge within ``memory`` bytes, runs in ``tmpdir``; output in key
    order).  ``rename``: ``{"B": {"jpg": "jpg_hr"}}`` or a list of
    ``"B:jpg=jpg_hr"`` strings.  ``stats``, ``strict``, ``warn``, ``stall``,
    ``spooler`` and ``raw`` are passed to the readers
    (:func:`~tarproc.sources.samples.iter_samples`); ``warn`` (a function
    of one message) also hears of a rename that met no field.  See the module
    documentation for the semantics; errors are
    :class:`~tarproc.errors.BadInput` (a missing or extra key, naming it and
    its shard) and :class:`~tarproc.errors.BadSample` (a field in two inputs).
    Close the iterator if you stop early (``contextlib.closing``)."""
    from ..core.stats import Stats
    from ..sources.columns import KeyedTable, RowArray, open_table

    if how not in HOWS:
        raise UsageError(f"how must be one of {', '.join(HOWS)}, not {how!r}")
    if order not in ORDERS:
        raise UsageError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__iter__"):
        raise UsageError("join_samples: inputs is a list of inputs (each a URL, pattern or samples)")
    inputs = list(inputs)
    if isinstance(tables, str):
        tables = [tables]
    tables = list(tables or ())
    if not inputs:
        raise UsageError("join_samples: no input")
    names = input_names(len(inputs) + len(tables))
    if rename is None:
        rename = {}
    elif not isinstance(rename, dict):
        rename = parse_renames(rename, names)
    else:
        rename = {str(k).upper(): {str(f).lower(): n for f, n in v.items()} for k, v in rename.items()}
        for k, mapping in rename.items():
            if k not in names:
                raise UsageError(f"rename: no input {k!r} (inputs: {', '.join(names)})")
            for new in mapping.values():
                why = bad_field_name(new) or (f"{quote(new)} is a metadata name" if is_meta(new) else None)
                if why:
                    raise UsageError(f"rename {k}: {why}")
    if memory < 1:
        raise UsageError("the memory budget must be positive")
    stats = stats if stats is not None else Stats()
    opened = [t if isinstance(t, (KeyedTable, RowArray)) else open_table(t, memory, settings) for t in tables]
    keyed = [(names[len(inputs) + i], t) for i, t in enumerate(opened) if t.format != "npy"]
    arrays = [(names[len(inputs) + i], t) for i, t in enumerate(opened) if t.format == "npy"]
    raw = raw and order == "input"
    streams = [_as_samples(src, stats, strict, warn, stall, spooler, raw, settings) for src in inputs]
    for name, array in arrays:  # rows in A's input order, before any sort
        other = sorted(set(rename.get(name, ())) - {"npy"})
        if other:
            raise UsageError(f"rename {name}:{other[0]}: {name} is a .npy table, whose one field is npy")
        streams[0] = _rows(streams[0], array, name)
        new = rename.get(name, {}).get("npy")
        if new and new != "npy":
            streams[0] = _rename_npy(streams[0], new, name)
    joiner = _Joiner(names, {k: v for k, v in rename.items() if k not in dict(arrays)}, keyed, how, warn)
    if order == "key":
        return _by_key(streams, names, joiner, how, memory, tmpdir)
    return _in_order(streams, names, joiner, how)


def _in_order(streams, names, joiner, how):
    cursors = []
    try:
        for i, s in enumerate(streams[1:], 1):
            cursors.append(_Cursor(names[i], s, None))
        for a in streams[0]:
            key = a["__key__"]
            parts = []
            drop = False
            for c in cursors:
                b = c.head
                if b is not None and b["__key__"] == key:
                    parts.append((c.name, b))
                    c.advance()
                    continue
                if how == "strict":
                    here = (f"{c.name} has key {quote(b['__key__'])}{_where(b)} in its place"
                            f"{_normal_form_note(key, b['__key__'])}" if b is not None
                            else f"{c.name} has ended" + (f" (its last shard: {shown(c.last)})" if c.last else ""))
                    raise BadInput(f"key {quote(key)}{_where(a)} is missing from {c.name}: {here} (inputs joined "
                                   f"in input order have the same keys in the same order; --order key joins "
                                   f"any order, --how left/inner allow missing keys)")
                if how == "inner":
                    drop = True
            if drop:
                continue
            out = joiner.combine(a, parts)
            if out is None:
                continue
            joiner.joined += 1
            yield out
        for c in cursors:
            b = c.head
            if b is not None:
                why = ("is not in A" if how == "strict" else
                       "is not in A, or not in A's order (inputs joined in input order keep A's order; "
                       "--order key joins any order)")
                raise BadInput(f"key {quote(b['__key__'])} of {c.name}{_where(b)} {why}")
        joiner.finish()
    finally:
        for c in cursors:
            c.close()
        close = getattr(streams[0], "close", None)
        if close is not None:
            close()


def _by_key(streams, names, joiner, how, memory, tmpdir):
    from .sort import key_function, sort_samples

    share = max(1, memory // len(streams))
    sorted_streams = [sort_samples(s, memory=share, tmpdir=tmpdir) for s in streams]
    keyf = key_function("__key__", "text")
    cursors = []
    try:
        for i, s in enumerate(sorted_streams):
            cursors.append(_Cursor(names[i], _unique(s, names[i], keyf), None))
        while True:
            live = [c for c in cursors if c.head is not None]
            if not live:
                break
            low = min(keyf(c.head) for c in live)
            here = [c for c in cursors if c.head is not None and keyf(c.head) == low]
            a = cursors[0].head if here[0] is cursors[0] else None
            if a is None:  # a key A lacks
                c = here[0]
                if how == "strict":
                    head = cursors[0].head
                    note = _normal_form_note(c.head["__key__"], head["__key__"] if head is not None else None)
                    raise BadInput(f"key {quote(c.head['__key__'])} of {c.name}{_where(c.head)} is not in A"
                                   + note.replace(" there ", " in A "))
                for c in here:
                    c.advance()
                continue
            if how != "left" and len(here) < len(cursors):
                if how == "strict":
                    missing = next(c for c in cursors if c not in here)
                    other = missing.head["__key__"] if missing.head is not None else None
                    raise BadInput(f"key {quote(a['__key__'])}{_where(a)} is missing from {missing.name}"
                                   f"{_normal_form_note(a['__key__'], other)}")
                for c in here:
                    c.advance()
                continue
            parts = [(c.name, c.head) for c in here[1:]]
            out = joiner.combine(a, parts)
            for c in here:
                c.advance()
            if out is None:
                continue
            joiner.joined += 1
            yield out
        joiner.finish()
    finally:
        for c in cursors:
            c.close()
        for s in sorted_streams:
            s.close()


def _unique(samples, name, keyf):
    """A sorted input, refusing a key that comes twice (in key order there is no pairing of copies)."""
    last = None
    prev = None
    for s in samples:
        k = keyf(s)
        if k == last:
            raise BadInput(f"key {quote(s['__key__'])} comes twice in {name}{_where(prev)}{_where(s)}: "
                           f"duplicate keys cannot be joined in key order (make them unique, e.g. tarcat --rekey, "
                           f"or keep one with tarsort --update)")
        last, prev = k, s
        yield s


def _normal_form_note(key, other):
    """A note for two keys that differ only in Unicode normalization (they
    look the same in a message, and keys are compared as they are): ``""``
    when ``other`` is ``None`` or not such a key."""
    if other is None or other == key:
        return ""
    import unicodedata

    if unicodedata.normalize("NFC", key) != unicodedata.normalize("NFC", other):
        return ""
    return (f" (the key {ascii(other)} there differs from {ascii(key)} only in Unicode normalization; "
            f"keys are compared byte for byte)")
