"""Tables from samples: one row per sample, one column per requested field.

:func:`parse_columns` reads a column spec (``"cls json.label img=jpg;png"``);
:func:`rows` turns samples into rows of cell values; :func:`format_row`
writes a row as one line of TSV, CSV or JSON.

Cell values: text fields (UTF-8 without NUL) as text; binary fields (images,
anything not UTF-8) as their size in bytes, or their sha256 with ``hash``;
``json.a.b`` addresses a value inside a JSON field (nested keys, list
indices); a missing field is an empty cell (``null`` in JSON lines).
"""



from ..core.blob import Blob

from ..core import limits
from ..errors import UsageError
from ..core.rules import is_extra_meta

#: Field extensions that are always shown as size/hash, never as text.
BINARY_EXTS = frozenset(("jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "gif", "bmp", "tif", "tiff", "webp",
                         "npy", "npz", "pth", "pt", "pyd", "pickle", "mp3", "wav", "flac", "mp4", "webm", "avi"))

_MISSING = object()


class Column:
    """One output column: a header name and candidate field paths."""

    __slots__ = ("name", "candidates")

    def __init__(self, name, candidates):
        self.name = name
        self.candidates = candidates

    def __repr__(self):
        return f"Column({self.name!r}, {self.candidates!r})"


def parse_columns(spec):
    """``"cls json.label img=jpg;png"`` -> list of :class:`Column`.  The
    header is the rename (``img``) or the spec item as written."""
    if isinstance(spec, (list, tuple)):
        spec = " ".join(spec)
    cols = []
    for item in spec.replace(",", " ").split():
        name, eq, alts = item.partition("=")
        if not eq:
            name, alts = item, item
        candidates = [a for a in alts.split(";") if a]
        if not candidates or not name:
            raise UsageError(f"bad field spec {item!r}")
        cols.append(Column(name, candidates))
    if not cols:
        raise UsageError("empty field spec")
    return cols


def is_binary(field, data, settings=None):
    """Whether a field is shown as size/hash: by its extension, or when its
    first :data:`~tarproc.core.limits.PREVIEW_BYTES` (``settings.preview_bytes``)
    have a NUL or are not UTF-8 (a character cut at the end of the prefix is allowed)."""
    if field.rsplit(".", 1)[-1].lower() in BINARY_EXTS:
        return True
    prefix = limits.head(data, None if settings is None else settings.preview_bytes)
    if b"\0" in prefix:
        return True
    try:
        prefix.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(prefix) - 3 or len(prefix) == limits.size_of(data):
            return True
    return False


def _walk(obj, path):
    for part in path:
        if isinstance(obj, dict):
            if part not in obj:
                return _MISSING
            obj = obj[part]
        elif isinstance(obj, list):
            try:
                obj = obj[int(part)]
            except (ValueError, IndexError):
                return _MISSING
        else:
            return _MISSING
    return obj


def lookup(sample, path, settings=None):
    """The value of ``path`` in ``sample``: a field name (``cls``,
    ``seg.png``), or a field followed by a path inside its JSON
    (``json.label``, ``meta.json.boxes.0``; nested at most
    ``settings.json_depth`` deep).  Returns ``(field, value)`` with
    value ``bytes`` for whole fields or a JSON value, or ``None``."""
    depth = None if settings is None else settings.json_depth
    if path in sample and not is_extra_meta(path):
        return path, sample[path]
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        field = ".".join(parts[:i])
        if field in sample:
            data = sample[field]
            if type(data) is Blob:
                return None  # a spooled field is too large to parse as JSON
            try:
                obj = limits.json_loads(bytes(data), depth)
            except ValueError:  # also UnicodeDecodeError, and JSON nested too deeply
                return None
            value = _walk(obj, parts[i:])
            return None if value is _MISSING else (field, value)
    return None


def cell(sample, column, hash=False, native=False, settings=None):
    """The value of one column for one sample: ``str`` (or, with
    ``native``, a JSON value for JSON lines), ``None`` when missing.
    ``settings``: the preview and JSON depth bounds (default: the defaults)."""
    for path in column.candidates:
        if path == "__key__":
            return sample.get("__key__")
        found = lookup(sample, path, settings)
        if found is None:
            continue
        field, value = found
        if type(value) is Blob:  # large: its size (or hash), never loaded
            if hash:
                return value.sha256().hexdigest()
            return len(value) if native else str(len(value))
        if isinstance(value, (bytes, bytearray, memoryview)):
            if is_binary(field, value, settings):
                if hash:
                    import hashlib

                    return hashlib.sha256(value).hexdigest()
                return len(value) if native else str(len(value))
            if native and field.rsplit(".", 1)[-1].lower() == "json":
                try:  # a JSON field as the value it holds (depth-bounded; Blobs never get here)
                    return limits.json_loads(bytes(value), None if settings is None else settings.json_depth)
                except ValueError:  # not JSON after all (or too deep): its text
                    pass
            return bytes(value).decode("utf-8", "replace")
        if native:
            return value
        if isinstance(value, str):
            return value
        return limits.json_dumps(value, ensure_ascii=False, separators=(",", ":"))
    return None


def default_columns(sample):
    """The columns for the fields of ``sample`` (when none are asked for)."""
    from ..core.rules import is_meta

    return [Column(k, [k]) for k in sorted(sample) if not is_meta(k)]


def escape_controls(text):
    """``text`` with the characters a terminal acts on written as ``\\xHH`` or
    ``\\uHHHH`` (:func:`~tarproc.core.limits.escape_unsafe`, the rule of
    :func:`~tarproc.core.limits.safe_text`), so no escape sequence from a
    sample reaches a terminal and a row stays one line for any reader."""
    return limits.escape_unsafe(text)


def escape_tsv(text):
    """Backslash-escape so a value fits in one TSV cell on one line: ``\\``,
    tab, newline and CR as ``\\\\ \\t \\n \\r``, other controls as
    :func:`escape_controls` does."""
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return escape_controls(text)


def format_row(values, fmt, names=None):
    """One line (with its newline) for a row of cell values.

    ``tsv``: cells joined by tabs, backslash escapes for ``\\`` tab,
    newline and CR; ``csv``: RFC 4180 quoting, newlines inside values
    written as ``\\n`` so each row stays one line; ``jsonl``: one JSON object
    keyed by ``names``."""
    if fmt == "tsv":
        return "\t".join("" if v is None else escape_tsv(str(v)) for v in values) + "\n"
    if fmt == "csv":
        out = []
        for v in values:
            s = "" if v is None else str(v)
            if "\n" in s or "\r" in s or "\\" in s:
                s = s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
            s = escape_controls(s)
            if any(c in s for c in ',"') or s != s.strip(" "):
                s = '"' + s.replace('"', '""') + '"'
            out.append(s)
        return ",".join(out) + "\n"
    if fmt == "jsonl":
        # JSON escapes C0 controls itself; the others are only found inside
        # strings, where \\uHHHH is the same character.
        line = limits.json_dumps(dict(zip(names, values)), finite=True, ensure_ascii=False)
        return (limits.UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", line) if limits.UNSAFE.search(line) else line) + "\n"
    raise UsageError(f"unknown format {fmt!r} (tsv, csv or jsonl)")


def rows(samples, columns=None, key=True, hash=False, native=False, settings=None):
    """Yield ``(names, values)`` per sample; ``names`` is the header (the
    same list every time).  With ``columns=None`` the columns are the fields
    of the first sample.  ``settings``: see :func:`cell`."""
    names = None
    for sample in samples:
        if columns is None:
            columns = default_columns(sample)
        if names is None:
            names = (["__key__"] if key else []) + [c.name for c in columns]
        values = [sample.get("__key__")] if key else []
        values.extend(cell(sample, c, hash, native, settings) for c in columns)
        yield names, values



#: Bytes counted for a held row and for each of its cells, besides the text
#: (Python's objects: a list, a dict entry).
ROW_OVERHEAD, CELL_OVERHEAD = 200, 120


def scanned_rows(samples, scan, key=True, hash=False, settings=None, warn=None):
    """The columns of a table without a column spec: every field of the
    first ``scan`` samples (sorted), and its rows.  What is held until the
    header can be written is each sample's row of cells (a binary field is
    its size, never its bytes), at most ``settings.scan_memory`` bytes of
    them (``TARPROC_SCAN_MEMORY``): past it the scan ends early and
    ``warn`` says so.  A field first seen after the scan has no column:
    ``warn`` names it (20 times at most).  Returns ``(columns, rows)``,
    ``rows`` as :func:`rows` yields them."""
    from collections import deque

    from ..core.rules import is_meta

    samples = iter(samples)
    budget = limits.SCAN_MEMORY if settings is None else settings.scan_memory
    head = deque()  # (key, {field: cell}) of the samples scanned
    names = set()
    held = 0
    for sample in samples:
        cells = {k: cell(sample, Column(k, [k]), hash, False, settings) for k in sample if not is_meta(k)}
        head.append((sample.get("__key__"), cells))
        names.update(cells)
        held += ROW_OVERHEAD + sum(CELL_OVERHEAD + len(k) + len(v or "") for k, v in cells.items())
        if len(head) >= scan:
            break
        if held > budget:
            sample = next(samples, None)
            if sample is not None:  # (more to come: the scan is cut short)
                import itertools

                samples = itertools.chain((sample,), samples)
                if warn is not None:
                    warn(f"columns taken from the first {len(head)} samples, not {scan}: their rows reached "
                         f"the memory bound ({budget} bytes, TARPROC_SCAN_MEMORY; use -f)")
            break
    sample = None  # (its bytes are not held)
    scanned = len(head)
    columns = [Column(k, [k]) for k in sorted(names)]
    header = (["__key__"] if key else []) + [c.name for c in columns]

    def all_rows():
        while head:
            k, cells = head.popleft()
            yield header, ([k] if key else []) + [cells.get(c.name) for c in columns]
        known = set(names)
        told = 0
        for sample in samples:
            new = [k for k in sample if k not in known and not is_meta(k)]
            if new:
                known.update(new)
                if warn is not None and told == 20:
                    warn("more fields not in the columns: not reported")
                elif warn is not None and told < 20:
                    warn(f"sample {sample['__key__']!r}: field{'s' * (len(new) > 1)} {', '.join(sorted(new))} "
                         f"not in the columns (taken from the first {scanned} samples; use -f or --scan)")
                told += 1
            values = [sample.get("__key__")] if key else []
            values.extend(cell(sample, c, hash, False, settings) for c in columns)
            yield header, values

    return columns, all_rows()
