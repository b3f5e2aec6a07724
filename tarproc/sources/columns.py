"""Tables as sources of fields, for joins (:func:`tarproc.join_samples`).

Two kinds:

* **Keyed tables** (:class:`KeyedTable`): TSV, CSV or JSON lines with a
  ``__key__`` column; every other column is a field of the sample with that
  key.  Read whole into a dictionary (so the rows may come in any order),
  within a byte budget: a table larger than the budget is an error that says
  so, never a slow swap.  TSV values are unescaped as ``tar2tsv`` escapes them
  (``\\\\ \\t \\n \\r``); CSV is RFC 4180 with the same backslash escapes;
  JSON lines hold one object per line, strings become their UTF-8 bytes,
  other values their compact JSON.  An empty cell (``null`` in JSON) is a
  field the sample does not get.
* **Row arrays** (:class:`RowArray`): a ``.npy`` array whose row ``i`` goes
  to the ``i``-th sample of the first input, as a ``.npy`` field (one row,
  written with ``numpy.save``).  The file is memory-mapped: rows are read as
  they are used, whatever its size.  numpy is imported here, only when such
  a table is given.

Every size read from a table is bounded: a line (:data:`MAX_LINE`), the
number of columns (:data:`MAX_COLUMNS`) and the table's total (the budget).
"""

import os

from ..core.limits import quote, shown
from ..core.rules import bad_field_name, bad_key, is_meta
from ..errors import BadInput, UsageError

#: Longest table line (bytes); a longer one is an error naming its line.
MAX_LINE = 16 << 20
#: Most columns of a table.
MAX_COLUMNS = 4096
#: What one row costs in memory besides its bytes (its list, dict, key string).
ROW_OVERHEAD = 300
#: What one cell costs besides its bytes (a bytes object, a slot of the row's dict).
CELL_OVERHEAD = 100

FORMATS = ("tsv", "csv", "jsonl")


def table_format(path):
    """The format of a table file from its name: ``tsv``, ``csv``, ``jsonl`` or ``npy``."""
    name = os.path.basename(path).lower()
    for ext, fmt in ((".tsv", "tsv"), (".tab", "tsv"), (".csv", "csv"), (".jsonl", "jsonl"),
                     (".ndjson", "jsonl"), (".json", "jsonl"), (".npy", "npy")):
        if name.endswith(ext):
            return fmt
    raise UsageError(f"--table {path}: unknown table format (name it .tsv, .csv, .jsonl or .npy)")


def open_table(path, budget=512 << 20, settings=None):
    """A :class:`KeyedTable` or :class:`RowArray` for ``path`` (by its
    extension); ``settings``: the bounds of a JSON-lines row (``json_depth``)."""
    if table_format(path) == "npy":
        return RowArray(path)
    return KeyedTable(path, budget, json_depth=settings.json_depth if settings is not None else None)


def _unescape(text):
    if "\\" not in text:
        return text
    out = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}.get(nxt, "\\" + nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _lines(f, path):
    """``(line number, text)`` of a binary file, each line bounded by :data:`MAX_LINE`."""
    number = 0
    while True:
        line = f.readline(MAX_LINE + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            raise BadInput(f"{shown(path)}: line {number}: longer than {MAX_LINE} bytes")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput(f"{shown(path)}: line {number}: not UTF-8") from None
        if number == 1 and text.startswith("\ufeff"):  # a byte-order mark (tables saved by spreadsheets)
            text = text[1:]
        yield number, text.rstrip("\r\n") if text.endswith("\n") else text


class KeyedTable:
    """The rows of a TSV/CSV/JSON-lines table by ``__key__``: :meth:`get`
    gives a row's fields (``bytes``) and marks it used; :meth:`unused` the
    first row never asked for."""

    def __init__(self, path, budget=512 << 20, json_depth=None):
        self.path = path
        self.json_depth = json_depth  # JSON nesting parsed (None: limits.JSON_DEPTH)
        self.format = table_format(path)
        self.rows = {}  # key -> [fields, line, used]
        self.columns = {}  # column name -> the one string of that name (rows share it)
        self.used = 0
        self.fresh = []  # keys first asked for since the caller last emptied it (joins shard by shard)
        self.partial = False  # True: each join sees part of the inputs, so unused rows are checked by the caller
        held = 0
        try:
            f = open(path, "rb")
        except OSError as e:
            raise BadInput(f"{shown(path)}: cannot open table: {e.strerror}") from None
        with f:
            for line, key, fields in self._read(f):
                why = bad_key(key) if isinstance(key, str) else "the key is not text"
                if why:
                    raise BadInput(f"{shown(path)}: line {line}: {why}")
                if key in self.rows:
                    raise BadInput(f"{shown(path)}: line {line}: key {quote(key)} appears twice (first on line "
                                   f"{self.rows[key][1]}): a key has one row")
                # (measured: 540 bytes a row of two short cells; counting 226 let a table take 2.4x its budget)
                held += ROW_OVERHEAD + len(key) + sum(CELL_OVERHEAD + len(v) for v in fields.values())
                if held > budget:
                    raise BadInput(f"{shown(path)}: larger than the memory budget ({budget} bytes) at line "
                                   f"{line}; give more --memory, or make the table a shard set "
                                   f"(tarcreate) and join it with --order key")
                self.rows[key] = [fields, line, False]

    def _read(self, f):
        path = self.path
        if self.format == "jsonl":
            from ..core.limits import json_dumps, json_loads

            for number, text in _lines(f, path):
                if not text.strip():
                    continue
                try:
                    obj = json_loads(text, self.json_depth)
                except ValueError as e:
                    raise BadInput(f"{shown(path)}: line {number}: not JSON: {e}") from None
                if not isinstance(obj, dict):
                    raise BadInput(f"{shown(path)}: line {number}: not a JSON object")
                if len(obj) > MAX_COLUMNS:
                    raise BadInput(f"{shown(path)}: line {number}: more than {MAX_COLUMNS} columns")
                key = obj.pop("__key__", None)
                if key is None:
                    raise BadInput(f"{shown(path)}: line {number}: no __key__")
                fields = {}
                for name, value in obj.items():
                    name = self._column(name, number)
                    if value is None:
                        continue
                    fields[name] = value.encode("utf-8", "surrogatepass") if isinstance(value, str) \
                        else json_dumps(value, finite=True, separators=(",", ":")).encode()
                yield number, key, fields
            return
        rows = self._delimited(f)
        header = next(rows, None)
        if header is None:
            return
        number, names = header
        if len(names) > MAX_COLUMNS:
            raise BadInput(f"{shown(path)}: line {number}: more than {MAX_COLUMNS} columns")
        if "__key__" not in names:
            raise BadInput(f"{shown(path)}: line {number}: the header has no __key__ column")
        seen = set()
        for name in names:
            if name in seen:
                raise BadInput(f"{shown(path)}: line {number}: column {quote(name)} appears twice")
            seen.add(name)
            if name != "__key__":
                self._column(name, number)
        at = names.index("__key__")
        for number, cells in rows:
            if cells == [""]:
                continue
            if len(cells) != len(names):
                raise BadInput(f"{shown(path)}: line {number}: {len(cells)} cells, the header has {len(names)}")
            fields = {name: _unescape(cell).encode("utf-8", "surrogatepass")
                      for i, (name, cell) in enumerate(zip(names, cells)) if i != at and cell != ""}
            yield number, _unescape(cells[at]), fields

    def _delimited(self, f):
        if self.format == "tsv":
            for number, text in _lines(f, self.path):
                yield number, text.split("\t")
            return
        import csv

        def texts():
            for number, text in _lines(f, self.path):
                self._line = number
                yield text + "\n"  # (a quoted cell may hold a line end)

        self._line = 0
        start = 1  # the line the current row starts on
        old = csv.field_size_limit()
        csv.field_size_limit(MAX_LINE)
        try:
            # strict: a quote left open is an error, not the rest of the table read into one cell
            for cells in csv.reader(texts(), strict=True):
                yield self._line, cells
                start = self._line + 1
        except csv.Error as e:
            if start >= self._line:
                raise BadInput(f"{shown(self.path)}: line {self._line}: bad CSV: {e}") from None
            raise BadInput(f"{shown(self.path)}: the row from line {start} to line {self._line}: bad CSV: {e} "
                           f"(a quote opened on line {start} and never closed?)") from None
        finally:
            csv.field_size_limit(old)

    def _column(self, name, line):
        """``name`` as the column's one string (checked when first seen)."""
        known = self.columns.get(name)
        if known is not None:
            return known
        why = bad_field_name(name) or (f"column {quote(name)} is a metadata name" if is_meta(name) else None)
        if why:
            raise BadInput(f"{shown(self.path)}: line {line}: {why}")
        if len(self.columns) >= MAX_COLUMNS:
            raise BadInput(f"{shown(self.path)}: line {line}: more than {MAX_COLUMNS} columns")
        self.columns[name] = name
        return name

    def __len__(self):
        return len(self.rows)

    def get(self, key):
        """The fields of ``key``'s row (marked used), or ``None``."""
        row = self.rows.get(key)
        if row is None:
            return None
        if not row[2]:
            row[2] = True
            self.used += 1
            self.fresh.append(key)
        return row[0]

    def near(self, key):
        """The key of a row that differs from ``key`` only in Unicode
        normalization, or ``None`` (for the message of a key with no row)."""
        import unicodedata

        want = unicodedata.normalize("NFC", key)
        if want == key and key.isascii():
            return None
        return next((k for k in self.rows if k != key and unicodedata.normalize("NFC", k) == want), None)

    def unused(self):
        """``(key, line)`` of the first row (in file order) never asked for, or ``None``."""
        if self.used == len(self.rows):
            return None
        best = None
        for key, (fields, line, used) in self.rows.items():
            if not used and (best is None or line < best[1]):
                best = (key, line)
        return best


class RowArray:
    """A ``.npy`` array read row by row (memory-mapped): :meth:`row` gives
    row ``i`` as the bytes of a one-row ``.npy`` file."""

    format = "npy"
    columns = frozenset(("npy",))

    def __init__(self, path):
        import numpy as np

        self.path = path
        try:
            with open(path, "rb") as f:
                magic = f.read(6)
        except OSError as e:
            raise BadInput(f"{shown(path)}: cannot open table: {e.strerror}") from None
        if magic != b"\x93NUMPY":  # (np.load would take it for a pickle and suggest allow_pickle)
            raise BadInput(f"{shown(path)}: not a .npy file (it does not start with \\x93NUMPY)")
        try:
            self.array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            why = "an array of Python objects (refused: reading it would run pickle)" \
                if "allow_pickle" in str(e) or "Python objects" in str(e) else str(e)
            raise BadInput(f"{shown(path)}: not a .npy array that can be read: {why}") from None
        if not hasattr(self.array, "shape") or self.array.ndim < 1:
            raise BadInput(f"{shown(path)}: a 0-dimensional array has no rows")
        self.rows = self.array.shape[0]

    def __len__(self):
        return self.rows

    def row(self, i):
        import io

        import numpy as np

        out = io.BytesIO()
        np.save(out, np.ascontiguousarray(self.array[i]), allow_pickle=False)
        return out.getvalue()
