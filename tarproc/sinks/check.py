"""Checking shards for what silently breaks training pipelines.

:func:`check_shards` reads every member of every shard with the tar codec
directly (so it sees what grouping would skip) and returns a report dict::

    {"ok": bool,
     "shards": [{"url", "compression", "size", "tar_bytes", "members",
                 "samples", "fields": {name: {"count", "bytes"}},
                 "skipped": {reason: n}, "problems": [...]}, ...],
     "total": {"shards", "samples", "members", "tar_bytes", "size",
               "fields", "problems": [...]}}

A problem is ``{"kind", "message", "count", "examples"}``.  Kinds, per shard:
``split_samples`` (a key comes back after other keys with other fields: one
sample in two parts), ``duplicate_fields``
(a field repeats inside one sample), ``missing_fields`` (samples lack a field
most samples have), ``skipped_members`` (no extension, links, special files),
``non_utf8_names``, ``unsafe_names`` (absolute or ``..``), ``too_many_fields``
(more distinct field names than ``TARPROC_CHECK_FIELDS``, 10,000: the rest are
counted together as ``(other fields)``), ``metadata_fields``
(``KEY.__x__``: a field named like metadata), ``empty_files``,
``truncated`` (no end-of-archive marker), ``after_end_marker`` (members after a zero
block or the end-of-archive marker: read here, never seen by tarfile or webdataset),
``conflicting_names`` (a member named by both a GNU long name and a different
pax path: readers disagree on its name),
``trailing_data`` (bytes after
it that are not tar: ignored by readers), ``no_samples``, ``unreadable``
(the shard cannot be opened, or is damaged: a bad checksum, input ending
inside a member; its example is the error line, its counts are those read
before the damage); ``duplicate_keys`` (the same key in more than one shard,
or back in its shard with a field it had: a sample repeated).  Directories
are counted, not reported: ``tar c dir`` writes them and every reader skips
them.  An unreadable shard does not stop the
check: the other shards are checked and reported.
Memory stays bounded however many keys there are: every key is remembered
exactly (:class:`SeenKeys`), the first :data:`~tarproc.core.limits.CHECK_KEYS`
in memory and the rest in a temporary SQLite database on disk (in ``TMPDIR``,
deleted when the check ends; SQLite's page cache is bounded).
"""

from ..core.pack import SizesOnly
from ..core import limits
from ..core.limits import shorten
from ..core.rules import SKIPPED, UNSAFE, classify
from ..errors import BadInput
from ..sources.resume import RETRIES, STALL_TIMEOUT
from ..core.passthru import fast_members
from ..core.tario import TYPE_NAMES, REGULAR, DIRECTORY, TarReader

#: The message of ``duplicate_keys``.
DUPLICATE = "keys seen before: in an earlier shard, or in this one with a field they had (a sample repeated)"
#: How many example keys or names a problem lists.
EXAMPLES = 5
OTHER = "(other fields)"


#: The field sets told apart when a key comes back (:meth:`SeenKeys.fields_id`).
FIELD_SETS = 1 << 12


class SeenKeys:
    """The keys seen so far and where each was last seen (a whole number:
    :meth:`where`, its shard and field set): exact, in bounded memory.  The first ``limit`` keys (default
    :data:`~tarproc.core.limits.CHECK_KEYS`) are kept in a dict; from then on
    all keys are in a private temporary SQLite database (on disk in
    ``TMPDIR``, unlinked at once by SQLite, with a 16 MiB page cache)."""

    def __init__(self, limit=None):
        from ..core import limits

        self.limit = limits.CHECK_KEYS if limit is None else limit
        self.shards = []  # shard names, by number
        self._mem = {}
        self._db = None
        self._field_sets = {}  # frozenset of field names -> its number (from 1)
        self._sets_by_id = {}

    def new_shard(self, name):
        """Number a shard (the value :meth:`visit` remembers)."""
        self.shards.append(name)
        return len(self.shards) - 1

    def where(self, shard, fields):
        """The value :meth:`visit` remembers for a sample of shard number
        ``shard`` with the field names ``fields`` (one int)."""
        return shard * FIELD_SETS + self.fields_id(fields)

    def fields_id(self, fields):
        """A number for a set of field names, ``0`` (unknown) past
        :data:`FIELD_SETS` distinct sets (bounded)."""
        ids = self._field_sets
        n = ids.get(fields)
        if n is None:
            if len(ids) >= FIELD_SETS - 1:
                return 0
            n = ids[fields] = len(ids) + 1
            self._sets_by_id[n] = fields
        return n

    def fields_of(self, value):
        """The field set of a remembered value (``None``: unknown)."""
        return self._sets_by_id.get(value % FIELD_SETS)

    def visit(self, key, shard):
        """Remember that ``key`` (``str``) was seen at ``shard`` (a shard
        number, or :meth:`where`); returns the value it was last seen at
        before, or ``None`` when it is new."""
        db = self._db
        if db is None:
            mem = self._mem
            before = mem.get(key)
            mem[key] = shard
            if before is None and len(mem) > self.limit:
                self._spill()
            return before
        raw = key.encode("utf-8", "surrogateescape")
        row = db.execute("SELECT s FROM k WHERE key = ?", (raw,)).fetchone()
        if row is None:
            db.execute("INSERT INTO k VALUES (?, ?)", (raw, shard))
            return None
        if row[0] != shard:
            db.execute("UPDATE k SET s = ? WHERE key = ?", (shard, raw))
        return row[0]

    def _spill(self):
        import sqlite3

        db = sqlite3.connect("", isolation_level=None)  # "": private, on disk, deleted on close
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA cache_size = -16384")
        db.execute("CREATE TABLE k (key BLOB PRIMARY KEY, s INTEGER) WITHOUT ROWID")
        db.execute("BEGIN")
        db.executemany("INSERT INTO k VALUES (?, ?)",
                       ((k.encode("utf-8", "surrogateescape"), v) for k, v in self._mem.items()))
        self._mem = {}
        self._db = db

    def __len__(self):
        if self._db is None:
            return len(self._mem)
        return self._db.execute("SELECT count(*) FROM k").fetchone()[0]

    def close(self):
        if self._db is not None:
            self._db.close()
            self._db = None
        self._mem = {}


def printable(name):
    """A name as text that can always be printed (in a report, JSON or
    not): credentials of a URL removed, controls and lone surrogates escaped
    as :func:`~tarproc.core.limits.safe_text` does, bytes that are not UTF-8
    as ``\\xNN`` escapes; not shortened (a report keeps whole names)."""
    from ..core.limits import safe_text

    return safe_text(name, float("inf"))  # (newlines too: a name never forges a line of the report)


class _Problems:
    def __init__(self):
        self.items = {}

    def add(self, kind, message, example=None, n=1):
        p = self.items.get(kind)
        if p is None:
            p = self.items[kind] = {"kind": kind, "message": message, "count": 0, "examples": []}
        p["count"] += n
        if example is not None and len(p["examples"]) < EXAMPLES:
            example = shorten(printable(example))
        else:
            example = None
        if example is not None and len(p["examples"]) < EXAMPLES and example not in p["examples"]:
            p["examples"].append(example)

    def as_list(self):
        return list(self.items.values())


def _source_size(url):
    import os

    from ..sources.open import scheme_of

    if scheme_of(url) == "file":
        try:
            return os.path.getsize(url)
        except OSError:
            return None
    return None


def check_shard(url, majority=0.5, keys_seen=None, strict=False, retries=RETRIES, stall_timeout=STALL_TIMEOUT,
                settings=None):
    """The report of one shard (see the module doc).  ``keys_seen`` (a
    :class:`SeenKeys`) collects keys across shards for ``duplicate_keys``.
    ``retries``, ``stall_timeout``: resuming a broken download (see
    :func:`~tarproc.sources.open.open_source`); ``settings``: its
    ``check_keys``, ``check_fields`` and reading settings (default: the defaults)."""
    from ..sources.open import open_source

    check_fields = limits.CHECK_FIELDS if settings is None else settings.check_fields

    probs = _Problems()
    fields = {}
    skipped = {}
    signatures = {}  # frozenset of fields -> [count, example key]
    have = {}  # field -> number of samples that have it
    own = keys_seen is None
    if own:
        keys_seen = SeenKeys(None if settings is None else settings.check_keys)
    me = keys_seen.new_shard("stdin" if url == "-" else url)
    members = samples = 0
    key = None
    current = None
    directories = 0
    warnings = []

    def close_sample():
        nonlocal samples
        if current is None:
            return
        samples += 1
        # a key seen before: one sample in two parts (split), or a sample repeated (a field again)
        sig = frozenset(current)
        before = keys_seen.visit(key, keys_seen.where(me, sig))
        if before is not None:
            shard, earlier = before // FIELD_SETS, keys_seen.fields_of(before)
            if shard != me:
                probs.add("duplicate_keys", DUPLICATE, f"{key} (also in {printable(keys_seen.shards[shard])})")
            elif earlier is None or earlier.isdisjoint(sig):
                probs.add("split_samples", "keys that come back after other keys with other fields (one sample "
                          "split in two)", key)
            else:
                probs.add("duplicate_keys", DUPLICATE, f"{key} (again in this shard)")
        for f in current:
            have[f] = have.get(f, 0) + 1
        entry = signatures.get(sig)
        if entry is None:
            if len(signatures) < check_fields:  # bounded: examples only
                signatures[sig] = [1, key]
        else:
            entry[0] += 1

    name_of = "stdin" if url == "-" else url
    tar_bytes, truncated, compression, stream, reader = 0, False, None, None, None
    try:
        stream = open_source(url, retries=retries, stall_timeout=stall_timeout, settings=settings)
        # only sizes are needed: large members are read past, never stored
        reader = TarReader(stream, name_of, strict=strict, warn=warnings.append, spooler=SizesOnly())
        for m, parts in fast_members(reader, split_names=True):
            members += 1
            name = m.name
            if parts is None:  # (a name split on the fast path is a sample name: ASCII, a regular file)
                try:
                    name.encode("utf-8")
                except UnicodeEncodeError:
                    probs.add("non_utf8_names", "member names that are not UTF-8", name)
                parts = classify(name) if m.type == REGULAR else None  # THE name rule (core/rules.py)
            if m.type != REGULAR:
                if m.type == DIRECTORY:
                    directories += 1
                    continue
                reason = TYPE_NAMES.get(m.type, "special files")
                skipped[reason] = skipped.get(reason, 0) + 1
                probs.add("skipped_members", "members skipped by readers (links, special files, no extension)",
                          f"{name} ({reason})")
                continue
            if type(parts) is not tuple:
                if parts.kind == SKIPPED:
                    reason = parts.why
                    skipped[reason] = skipped.get(reason, 0) + 1
                    probs.add("skipped_members", "members skipped by readers (links, special files, no extension)",
                              f"{name} ({reason})")
                elif parts.kind == UNSAFE:
                    probs.add("unsafe_names", "member names that escape a directory or have control characters",
                              name)
                else:
                    probs.add("metadata_fields", "member names whose field is a metadata name (__...__): readers "
                              "refuse them", name)
                continue
            k, field = parts
            size = len(m.data)
            if size == 0:
                probs.add("empty_files", "empty files", name)
            if k != key:
                close_sample()
                key = k
                current = set()
            if field not in fields and len(fields) >= check_fields:
                # bounded: past the limit, new field names share one bucket
                probs.add("too_many_fields", f"more distinct field names than {check_fields:,} "
                          f"(TARPROC_CHECK_FIELDS): the rest are counted as {OTHER}", name)
                field = OTHER
            if field in current and field != OTHER:
                probs.add("duplicate_fields", "fields that repeat inside one sample", name)
            current.add(field)
            f = fields.get(field)
            if f is None:
                f = fields[field] = {"count": 0, "bytes": 0}
            f["count"] += 1
            f["bytes"] += size
        close_sample()
        tar_bytes = reader.offset
        truncated = reader.truncated
        if reader.after_end is not None and reader.trailing != reader.after_end:
            probs.add("after_end_marker", "members after a zero block or an end-of-archive marker (tarfile, "
                      "webdataset and tar without -i stop there and never see them)",
                      f"offset {reader.after_end}")
        if reader.name_conflict is not None:
            at, long_name, path = reader.name_conflict
            probs.add("conflicting_names", "member (the first shown) named by both a GNU long name and a "
                      "different pax path: GNU tar and tarproc read the pax path, tarfile, bsdtar and webdataset "
                      "the long name when it comes first",
                      f"offset {at}: long name {shorten(long_name)!r}, pax path {shorten(path)!r}")
        if reader.trailing is not None:
            probs.add("trailing_data", "data after the end-of-archive marker (readers ignore it)",
                      f"offset {reader.trailing}")
        compression = stream.compression
        stream.close()
    except BaseException as e:
        if not isinstance(e, (BadInput, OSError)):
            if stream is not None:
                stream.close()
            raise
        # an unreadable or damaged shard is a problem of this shard: the others are still checked
        close_sample()
        if stream is not None:
            compression = getattr(stream, "compression", None)
            try:
                stream.close()
            except (BadInput, OSError):
                pass
        message = str(e) if isinstance(e, BadInput) else f"{name_of}: {e.strerror or e}"
        probs.add("unreadable", "the shard cannot be opened or is damaged (counts are up to the damage)",
                  message)
        tar_bytes = reader.offset if reader is not None else 0
    finally:
        if own:
            keys_seen.close()
    if truncated:
        probs.add("truncated", "the shard ends without the end-of-archive marker (cut off?)")
    if samples == 0 and "unreadable" not in probs.items:
        probs.add("no_samples", "the shard has no samples")
    # fields most samples have, missing in some
    # (linear: a field's examples are found by walking the signatures until
    # EXAMPLES lack it; the ones passed have it, at most have[field] of them)
    for field in sorted(fields):
        n_have = have.get(field, 0)
        if majority * samples < n_have < samples:
            missing = samples - n_have
            examples = []
            for sig, (_, ex) in signatures.items():
                if field not in sig:
                    examples.append(ex)
                    if len(examples) == EXAMPLES:
                        break
            for ex in examples:
                probs.add("missing_fields", "missing fields (that most samples have)",
                          f"{ex} (no {field})", n=0)
            probs.add("missing_fields", "missing fields (that most samples have)", n=missing)
    return {
        "url": printable(name_of),
        "compression": compression,
        "size": _source_size(url),
        "tar_bytes": tar_bytes,
        "members": members,
        "directories": directories,
        "samples": samples,
        "fields": {printable(k): fields[k] for k in sorted(fields)},
        "skipped": dict(sorted(skipped.items())),
        "problems": probs.as_list(),
        "warnings": warnings,
    }


def check_shards(urls, majority=0.5, strict=False, on_shard=None, keep=True, retries=RETRIES,
                 stall_timeout=STALL_TIMEOUT, settings=None):
    """Check every shard of ``urls`` (a pattern string or a list of URLs);
    returns the report dict.  ``on_shard(report)`` is called as each shard is
    done (for streaming output).  Duplicate keys are looked for across shards.

    The total is summed as the shards are done; with ``keep=False`` the
    shards' reports are not kept (the report's ``"shards"`` is empty), so
    memory stays flat over any number of shards: give ``on_shard`` to see
    them.  ``total["bad_shards"]`` counts the shards with problems.
    ``settings``: as for :func:`check_shard`."""
    from ..sources.shardlist import as_urls

    urls = as_urls(urls)
    keys_seen = SeenKeys(None if settings is None else settings.check_keys)
    shards = []
    total_fields = {}
    total_probs = []
    total = {"shards": 0, "samples": 0, "members": 0, "tar_bytes": 0, "size": 0, "bad_shards": 0}
    try:
        for url in urls:
            rep = check_shard(url, majority, keys_seen, strict, retries, stall_timeout, settings)
            if keep:
                shards.append(rep)
            for k, v in rep["fields"].items():
                if k not in total_fields and len(total_fields) >= (
                        limits.CHECK_FIELDS if settings is None else settings.check_fields):
                    k = OTHER  # bounded across shards too
                t = total_fields.setdefault(k, {"count": 0, "bytes": 0})
                t["count"] += v["count"]
                t["bytes"] += v["bytes"]
            for name in ("samples", "members", "tar_bytes"):
                total[name] += rep[name]
            total["shards"] += 1
            total["size"] = None if total["size"] is None or rep["size"] is None else total["size"] + rep["size"]
            total["bad_shards"] += bool(rep["problems"])
            for p in rep["problems"]:  # cross-shard problems are summed in the total too
                if p["kind"] == "duplicate_keys":
                    for t in total_probs:
                        if t["kind"] == "duplicate_keys":
                            t["count"] += p["count"]
                            t["examples"] = (t["examples"] + p["examples"])[:EXAMPLES]
                            break
                    else:
                        total_probs.append(dict(p, examples=list(p["examples"])))
            if on_shard is not None:
                on_shard(rep)
    finally:
        keys_seen.close()
    if not total["shards"]:
        total["size"] = None
    total["fields"] = {k: total_fields[k] for k in sorted(total_fields)}
    total["problems"] = total_probs
    ok = not total["bad_shards"] and not total_probs
    return {"ok": ok, "shards": shards, "total": total}


def format_shard(rep):
    """Lines of text summarising one shard's report."""
    from .show import human_size

    comp = rep["compression"] or "uncompressed"
    size = f", {human_size(rep['size'])} on disk" if rep["size"] is not None else ""
    lines = [f"{rep['url']}: {rep['samples']} samples, {rep['members']} members, "
             f"{human_size(rep['tar_bytes'])} tar ({comp}{size})"]
    lines.extend(format_fields(rep["fields"]))
    if rep.get("directories"):
        lines.append(f"  directories: {rep['directories']} (ignored)")
    for p in rep["problems"]:
        lines.append(format_problem(p))
    if not rep["problems"]:
        lines.append("  ok")
    return lines


def format_fields(fields):
    from .show import human_size

    if not fields:
        return ["  fields: none"]
    return ["  fields: " + ", ".join(f"{k} {v['count']} ({human_size(v['bytes'])})" for k, v in fields.items())]


def format_problem(p):
    ex = f": {', '.join(p['examples'])}" if p["examples"] else ""
    more = " …" if p["count"] > len(p["examples"]) and p["examples"] else ""
    return f"  PROBLEM {p['kind']}: {p['count']} {p['message']}{ex}{more}"


def format_total(report):
    from .show import human_size

    t = report["total"]
    size = f", {human_size(t['size'])} on disk" if t["size"] is not None else ""
    lines = [f"total: {t['shards']} shards, {t['samples']} samples, {t['members']} members, "
             f"{human_size(t['tar_bytes'])} tar{size}"]
    lines.extend(format_fields(t["fields"]))
    for p in t["problems"]:
        lines.append(format_problem(p))
    bad = t["bad_shards"]
    lines.append("ok" if report["ok"] else f"problems found in {bad} of {t['shards']} shards")
    return lines
