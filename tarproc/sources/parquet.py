"""Parquet tables as samples: one row per sample, read a batch of rows at a
time (``tarcreate TABLE.parquet``).

The columns: ``__key__`` gives the keys (else a key format numbers the rows);
every other column is a field named after it; a column headed ``@name`` holds
paths (relative to a base directory) or ``http(s)://``/``s3://``/``gs://``
URLs whose bytes become field ``name``.  Cells become field bytes this way:
binary as they are, strings as UTF-8, numbers, booleans, decimals, dates and
times as the text Arrow casts them to (``3``, ``0.5``, ``true``,
``2024-01-31``), lists, structs and maps as JSON (bytes inside them as
base64 text); a struct of ``bytes`` and ``path`` (how Hugging Face stores an
``Image`` or ``Audio``) gives its bytes (or, when they are null, the file at
its path under the base directory, relative and without ``..``).  A null cell is no field.  Columns named like metadata
(``__index_level_0__``) are left out, with a warning.  Binary and string
cells reach the writer as views of Arrow's buffers (no copy); batches are
sized from each row group's bytes per row, so memory follows the batch, not
the table.  Everything wrong (no Parquet, damage, a bad key or column name)
is a :class:`~tarproc.errors.BadInput` naming the table and the row.
"""

import os

from ..errors import BadInput, UsageError
from ..core.limits import quote
from ..core.rules import bad_field_name, bad_key, is_meta

#: What the commands say when pyarrow is missing.
INSTALL_HINT = "pip install 'tarproc[parquet]'"
#: The first and last four bytes of a Parquet file.
MAGIC = b"PAR1"
#: Bytes of table cells decoded at a time (a batch's rows: this / bytes per row).
BATCH_BYTES = 16 << 20
#: Most rows in one batch.
BATCH_ROWS = 8192
#: Bytes read ahead within a column chunk (pages are read as needed).
READ_BUFFER = 1 << 20
#: URL schemes an ``@`` cell may name (anything else is a path).
URL_PREFIXES = ("http://", "https://", "s3://", "gs://")


def need_pyarrow(prog="tarproc"):
    """``(pyarrow, pyarrow.parquet)``, or a one-line :class:`UsageError`
    saying how to install it."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise UsageError(f"Parquet needs pyarrow, which is not installed: {INSTALL_HINT}") from None
    return pyarrow, pyarrow.parquet


def looks_parquet(path, head=None):
    """Whether ``path`` (or the first bytes ``head``) is a Parquet table: its
    name ends in ``.parquet``/``.pq`` or it starts with ``PAR1``."""
    if path.lower().endswith((".parquet", ".pq")):
        return True
    if head is None and path != "-":
        try:
            with open(path, "rb") as f:
                head = f.read(4)
        except OSError:
            return False
    return head is not None and head[:4] == MAGIC


class Column:
    """How one Parquet column becomes a field: ``name`` (the column),
    ``field`` (the field it fills, ``None`` for the key), ``fetch`` (an
    ``@`` column of paths or URLs)."""

    __slots__ = ("index", "name", "field", "fetch")

    def __init__(self, index, name, field, fetch):
        self.index = index
        self.name = name
        self.field = field
        self.fetch = fetch


def plan_columns(names, table, warn=None):
    """The :class:`Column` list of a table's column names (the key column
    first, or ``None`` in its place), checked: a field name that cannot
    read back (a ``/``, control characters), two columns that read back as
    one field (fields are lower-cased when read), ``@__key__``."""
    key = None
    cols = []
    seen = {}
    for i, name in enumerate(names):
        if name == "__key__":
            if key is not None:
                raise BadInput(f"{table}: two __key__ columns")
            key = Column(i, name, None, False)
            continue
        fetch = name.startswith("@")
        field = name[1:] if fetch else name
        if field == "__key__":
            raise BadInput(f"{table}: column {quote(name)}: the __key__ column holds keys, not paths")
        if is_meta(field):
            if warn is not None:
                warn(f"{table}: column {quote(name)} is named like metadata (__x__): left out (rename it to keep it)")
            continue
        why = bad_field_name(field)
        if why:
            raise BadInput(f"{table}: column {quote(name)}: {why}: it cannot be a field")
        low = field.lower()
        if low in seen:
            raise BadInput(f"{table}: columns {quote(seen[low])} and {quote(name)} are one field read back "
                           f"(field names are read in lower case): rename one")
        seen[low] = name
        cols.append(Column(i, name, field, fetch))
    return key, cols


class ParquetTable:
    """An open Parquet table (a path, or ``-`` for stdin: spooled to a
    temporary file when it is not a regular file) read as samples:
    ``iter(table)``.  ``key_format`` numbers the rows when there is no
    ``__key__`` column; ``basedir``: where relative ``@`` paths are;
    ``warn``: a function taking a warning line; ``settings``: the URL
    clients and bounds of ``@`` URLs."""

    def __init__(self, path, key_format="{index:09d}", basedir=None, warn=None, settings=None, tmpdir=None):
        self.pa, self.pq = need_pyarrow()
        self.name = "stdin" if path == "-" else path
        self.key_format = key_format
        self.basedir = basedir
        self.warn = warn
        self.settings = settings
        self._spool = None
        try:
            source = self._open(path, tmpdir)
            self.file = self.pq.ParquetFile(source, buffer_size=READ_BUFFER, pre_buffer=False)
            self.meta = self.file.metadata
            schema = self.file.schema_arrow
        except BadInput:
            raise
        except (OSError, self.pa.ArrowException, ValueError) as e:
            self.close()
            raise BadInput(f"{self.name}: not a readable Parquet table: {_arrow_text(e)}") from None
        self.key, self.columns = plan_columns(schema.names, self.name, warn)
        self.schema = schema
        for col in self.columns + ([self.key] if self.key else []):
            _converter(self.pa, schema.field(col.index).type, col, self.name)  # refuse what cannot be a field, now

    def _open(self, path, tmpdir):
        import stat
        import sys

        if path != "-":
            try:
                st = os.stat(path)
            except OSError as e:
                raise BadInput(f"{path}: cannot read the table: {e.strerror}") from None
            if not stat.S_ISREG(st.st_mode):
                raise BadInput(f"{path}: a Parquet table is read from a regular file (its index is at its end)")
            return path
        fd = sys.stdin.fileno()
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return os.fdopen(os.dup(fd), "rb")
        import shutil
        import tempfile

        # a pipe: the footer is at the end, so the table is spooled to disk (never held in memory)
        self._spool = tempfile.TemporaryFile(dir=tmpdir)
        shutil.copyfileobj(sys.stdin.buffer, self._spool, 1 << 20)
        self._spool.seek(0)
        return self._spool

    def close(self):
        if self._spool is not None:
            self._spool.close()
            self._spool = None

    def batch_rows(self, group):
        """Rows per batch for row group ``group``: about :data:`BATCH_BYTES`
        of uncompressed cells."""
        rg = self.meta.row_group(group)
        # the largest of what the footer declares (decoded pages are allocated at their declared sizes)
        declared = max(rg.total_byte_size, sum(max(rg.column(i).total_uncompressed_size,
                                                   rg.column(i).total_compressed_size)
                                               for i in range(rg.num_columns)))
        per_row = max(1, declared // max(1, rg.num_rows))
        return max(1, min(BATCH_ROWS, BATCH_BYTES // per_row))

    def __iter__(self):
        fields = [c.field for c in self.columns]
        for key, cells in self.rows():
            sample = {"__key__": key}
            for f, v in zip(fields, cells):
                if v is not None:
                    sample[f] = v
            yield sample

    def rows(self):
        """``(key, cells)`` of each row, checked, in order: ``cells`` in the
        order of :attr:`columns`, each bytes-like (``@`` cells fetched) or
        ``None``."""
        for keys, values in self.batches():
            yield from zip(keys, zip(*values) if values else ((),) * len(keys))

    def batches(self):
        """``(keys, values)`` of each batch of rows, checked, in order:
        ``values`` holds a list of cells per column of :attr:`columns`, each
        bytes-like (``@`` cells fetched) or ``None``."""
        cols = self.columns
        convs = [_converter(self.pa, self.schema.field(c.index).type, c, self.name) for c in cols]
        fetch = [k for k, (c, conv) in enumerate(zip(cols, convs)) if c.fetch or getattr(conv, "paths", False)]
        row = 0
        last_key = None
        for group, batch, keys, values in self._batches(convs):
            if fetch or not _plain_keys(keys, last_key):
                for i, key in enumerate(keys):
                    if (type(key) is not str or not key or key == last_key or key[0] == "/" or ".." in key
                            or not key.isprintable() or len(key) > 4096 or key[-1] == "/"
                            or "." in key[key.rfind("/") + 1:]):
                        self._refuse_key(row + i, key, last_key)  # (the common key passes the line above)
                    last_key = key
                    for k in fetch:
                        values[k][i] = self._fetched(row + i, cols[k], values[k][i])
            elif keys:
                last_key = keys[-1]
            row += len(keys)
            yield keys, values

    def _fetched(self, row, col, v):
        if v is None:
            return None
        if type(v) is _PathCell:  # a media struct's path (no bytes)
            return self._fetch_media(f"{self.name}: row {row}", col, str(v))
        if col.fetch:  # a path or URL
            return self._fetch(f"{self.name}: row {row}", col, bytes(v).decode("utf-8"))
        return v

    def _batches(self, convs):
        """``(group, batch, keys, values)`` of each batch: its keys, and the
        cells of each column (converted by ``convs``); a :class:`BadInput`
        naming the row group when one cannot be read.  The row groups are
        decoded a batch ahead in a thread (pyarrow releases the GIL while it
        decodes), so converting and writing a batch overlaps reading the next."""
        from ..runtime.overlap import read_ahead
        from .create import format_key

        pa = self.pa
        cols = self.columns
        keyconv = _converter(pa, self.schema.field(self.key.index).type, self.key, self.name) if self.key else None
        names = ([self.key.name] if self.key else []) + [c.name for c in cols]
        row = 0
        for group, batch in read_ahead(self._arrow_batches(names)):
            if batch is None:
                nrows = self.meta.row_group(group).num_rows
                values = []
            else:
                nrows = batch.num_rows
                values = [conv(batch.column(c.name), row) for c, conv in zip(cols, convs)]
            if keyconv is None:
                keys = [format_key(self.key_format, i) for i in range(row, row + nrows)]
            else:
                keys = keyconv(batch.column(self.key.name), row)
            yield group, batch, keys, values
            row += nrows

    def _arrow_batches(self, names):
        """``(group, batch)`` of each Arrow batch of the columns ``names``
        (``batch`` None for a row group's rows when no column is read)."""
        pa = self.pa
        row = 0
        for group in range(self.meta.num_row_groups):
            if not names:  # no column to read: the rows still count
                if self.meta.row_group(group).num_rows:
                    yield group, None
                continue
            batches = self.file.iter_batches(batch_size=self.batch_rows(group), row_groups=[group],
                                             columns=names, use_threads=False)
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                except (OSError, pa.ArrowException, ValueError) as e:
                    raise BadInput(f"{self.name}: row group {group} (from row {row}): cannot read it: "
                                   f"{_arrow_text(e)}") from None
                yield group, batch
                row += batch.num_rows

    def _refuse_key(self, row, key, last_key):
        """Raise the error of a key that is not a sample's (or pass a good one
        the quick test sent here)."""
        where = f"{self.name}: row {row}"
        if key is None:
            raise BadInput(f"{where}: the __key__ is null")
        why = bad_key(key)
        if why:
            raise BadInput(f"{where}: {why}")
        if key == last_key:
            raise BadInput(f"{where}: key {quote(key)} is the key of the row before: read back, the "
                           f"two rows would be one sample (make the keys unique)")

    def _fetch(self, where, col, value):
        from .create import PlanItem, item_bytes

        if not value:
            raise BadInput(f"{where}: column {quote(col.name)}: an empty path")
        if value.startswith(URL_PREFIXES):
            return self._fetch_url(where, col, value)
        path = value if not self.basedir or os.path.isabs(value) else os.path.join(self.basedir, value)
        if not os.path.isfile(path):
            raise BadInput(f"{where}: column {quote(col.name)}: {quote(path)} is not a file")
        return item_bytes(PlanItem(f"{where}, column {col.name}", col.field, "file", path))

    def _fetch_media(self, where, col, path):
        """The file a media struct without bytes names: only under ``-C DIR``
        (a table from elsewhere must not pick files of this machine to put in a
        shard), relative, without ``..``."""
        if self.basedir is None:
            raise BadInput(f"{where}: column {quote(col.name)} has no bytes, only the path {quote(path)}: give "
                           f"-C DIR to read such paths under DIR")
        if os.path.isabs(path) or ".." in path.split("/") or path.startswith(URL_PREFIXES):
            raise BadInput(f"{where}: column {quote(col.name)}: the path {quote(path)} is not a relative path "
                           f"under -C {self.basedir}")
        return self._fetch(where, col, path)

    def _fetch_url(self, where, col, url):
        import tempfile

        from .create import SMALL_FILE
        from .open import open_source
        from ..core.blob import Blob, SharedFile
        from ..errors import TarprocError

        try:
            with open_source(url, decompress=False, settings=self.settings) as f:
                head = f.read(SMALL_FILE + 1)
                if len(head) <= SMALL_FILE:
                    return head
                spool = tempfile.TemporaryFile()
                try:
                    spool.write(head)
                    while True:
                        piece = f.read(1 << 20)
                        if not piece:
                            break
                        spool.write(piece)
                    spool.flush()
                    size = spool.tell()
                    return Blob(SharedFile(os.dup(spool.fileno()), None, False), 0, size)
                finally:
                    spool.close()
        except TarprocError as e:
            raise BadInput(f"{where}: column {quote(col.name)}: {e}") from None
        except OSError as e:
            raise BadInput(f"{where}: column {quote(col.name)}: cannot read {quote(url)}: {e.strerror or e}") from None


def _plain_keys(keys, last_key):
    """Whether a batch's keys all pass the sample rule's quick test at
    once (C loops over the batch): strings, none empty, none repeating the
    one before, printable, no dot at all, no ``/`` at either end, at most
    4096 characters.  False sends the batch to the test key by key."""
    if not keys or set(map(type, keys)) != {str} or keys[0] == last_key:
        return not keys
    joined = "\n".join(keys)
    return (min(map(len, keys)) > 0 and max(map(len, keys)) <= 4096 and "." not in joined
            and "".join(keys).isprintable() and joined[0] != "/" and joined[-1] != "/"
            and "\n/" not in joined and "/\n" not in joined and not any(map(str.__eq__, keys, keys[1:])))


def _arrow_text(e):
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _converter(pa, typ, col, table):
    """A function from an Arrow array (one batch of a column) and the
    batch's first row number to a list of cell values (``bytes``-like or
    ``None``); raises :class:`BadInput` for a type that cannot be a field."""
    t = pa.types
    if t.is_dictionary(typ):
        inner = _converter(pa, typ.value_type, col, table)
        return lambda arr, row: inner(arr.dictionary_decode(), row)
    if col.field is None:  # the key: str
        if t.is_string(typ) or t.is_large_string(typ):
            return lambda arr, row: arr.to_pylist()
        if t.is_binary(typ) or t.is_large_binary(typ):
            return lambda arr, row: [None if v is None else bytes(v).decode("utf-8")
                                     for v in _utf8(_views(arr, row), col, table, row)]
        if t.is_integer(typ):
            return lambda arr, row: [None if v is None else str(v) for v in arr.to_pylist()]
        raise BadInput(f"{table}: column {quote(col.name)} is {typ}: the keys must be strings or integers")
    if col.fetch:  # paths or URLs: text
        if t.is_string(typ) or t.is_large_string(typ):
            return _views
        if t.is_binary(typ) or t.is_large_binary(typ):
            return lambda arr, row: _utf8(_views(arr, row), col, table, row)
        raise BadInput(f"{table}: column {quote(col.name)} is {typ}: paths or URLs must be strings")
    if t.is_string(typ) or t.is_large_string(typ) or t.is_binary(typ) or t.is_large_binary(typ):
        return _views
    if t.is_fixed_size_binary(typ):
        return _fixed_views
    if t.is_null(typ):
        return lambda arr, row: [None] * len(arr)
    if (t.is_struct(typ) and {typ.field(i).name for i in range(typ.num_fields)} == {"bytes", "path"}
            and typ.field("bytes").type in (pa.binary(), pa.large_binary())
            and typ.field("path").type in (pa.string(), pa.large_string())):
        return _media(pa, col, table)
    if t.is_integer(typ):
        return _int_text
    if t.is_boolean(typ) or t.is_decimal(typ) or t.is_temporal(typ) or typ == pa.float64():
        # Python's text (repr of a float is its shortest form, as Arrow writes it; dates in ISO 8601)
        def as_text(arr, row):
            try:
                values = arr.to_pylist()
            except (pa.ArrowException, ValueError):  # (nanoseconds Python cannot hold: Arrow's text)
                return _views(arr.cast(pa.string()), row)
            return [None if v is None else _text(v).encode("utf-8") for v in values]
        return as_text
    if t.is_floating(typ):  # float32, float16: Arrow's shortest text of the narrower number
        return lambda arr, row: _views(arr.cast(pa.string()), row)
    if t.is_nested(typ):
        from ..core.limits import json_dumps

        def as_json(arr, row):
            return [None if v is None else json_dumps(_jsonable(v), ensure_ascii=False,
                                                      separators=(",", ":")).encode("utf-8")
                    for v in arr.to_pylist()]
        return as_json
    if hasattr(t, "is_string_view") and (t.is_string_view(typ) or t.is_binary_view(typ)):
        def views(arr, row):
            return [None if v is None else (v.encode("utf-8") if isinstance(v, str) else v) for v in arr.to_pylist()]
        return views
    raise BadInput(f"{table}: column {quote(col.name)} is {typ}, which has no field form")


def _views(arr, row=0):
    """The cells of a binary or string array as memoryviews of its data
    buffer (``None`` for nulls), without copying."""
    n = len(arr)
    if n == 0:
        return []
    validity, offsets, data = arr.buffers()[:3]
    large = arr.type in _LARGE
    offs = memoryview(offsets).cast("q" if large else "i")[arr.offset:arr.offset + n + 1].tolist()
    mv = memoryview(data) if data is not None else memoryview(b"")
    if arr.null_count:
        nulls = arr.is_null().to_pylist()
        return [None if nulls[i] else mv[offs[i]:offs[i + 1]] for i in range(n)]
    return [mv[offs[i]:offs[i + 1]] for i in range(n)]


class _Large:
    """Arrow's types with 64-bit offsets (made when first asked: pyarrow is
    imported only where a table is read)."""

    types = None

    def __contains__(self, typ):
        if _Large.types is None:
            import pyarrow as pa

            _Large.types = (pa.large_binary(), pa.large_string())
        return typ in _Large.types


_LARGE = _Large()


def _int_text(arr, row=0):
    """The cells of an integer array as decimal text (numpy formats them)."""
    if arr.null_count:
        return [None if v is None else b"%d" % v for v in arr.to_pylist()]
    import numpy

    # (the values buffer read directly: pyarrow's to_numpy imports pandas, 0.3 s, when it is installed)
    values = numpy.frombuffer(arr.buffers()[1], dtype=str(arr.type))[arr.offset:arr.offset + len(arr)]
    return values.astype("S21").tolist()  # (21: a sign and the 20 digits of 2**64 - 1)


def _fixed_views(arr, row=0):
    n = len(arr)
    width = arr.type.byte_width
    data = arr.buffers()[1]
    mv = memoryview(data) if data is not None else memoryview(b"")
    start = arr.offset * width
    nulls = arr.is_null().to_pylist() if arr.null_count else None
    return [None if nulls and nulls[i] else mv[start + i * width:start + (i + 1) * width] for i in range(n)]


def _utf8(values, col, table, row):
    for i, v in enumerate(values):
        if v is not None:
            try:
                bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                raise BadInput(f"{table}: row {row + i}: column {quote(col.name)} is not UTF-8 text") from None
    return values


def _media(pa, col, table):
    """A Hugging Face ``Image``/``Audio`` column (struct of ``bytes`` and
    ``path``): its bytes; a path's file when the bytes are null."""

    def media(arr, row):
        children = dict(zip((arr.type.field(i).name for i in range(arr.type.num_fields)), arr.flatten()))
        data = _views(children["bytes"], row)  # (flatten: the struct's own nulls are nulls here too)
        paths = children["path"].to_pylist()
        return [v if v is not None else _PathCell(p) if p else None for v, p in zip(data, paths)]

    media.paths = True  # (its cells may be paths to fetch)
    return media


class _PathCell(str):
    """A media struct's path (its bytes were null): fetched as an ``@`` cell."""


def _text(value):
    """A cell's text: ``true``/``false``, a float's shortest form (``0.1``,
    ``1e+20``, ``nan``, ``inf``), ISO 8601 for dates and times."""
    import datetime

    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (datetime.date, datetime.time, datetime.datetime)):
        return value.isoformat()
    return str(value)


def _jsonable(value):
    """A Python value from Arrow as JSON can hold it: bytes as base64 text,
    dates and decimals as text, map entries (key/value pairs) as they come."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        import base64

        return base64.b64encode(value).decode("ascii")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return _text(value)
