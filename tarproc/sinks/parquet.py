"""Parquet both ways at the sink end: a table's rows written as a tar of
samples (:func:`table_to_tar`, ``tarcreate TABLE.parquet``), and samples
written as a Parquet table (:class:`TableWriter`, ``tar2tsv --format
parquet``), one row per sample, in row groups.

The schema rule of :class:`TableWriter`: ``__key__`` is a string column;
every other column is ``binary`` unless every value it has in the first row
group is text by the rule of :mod:`tarproc.sinks.table` (not a binary
extension such as ``jpg``, no NUL, UTF-8 all through), then ``string``; a
value inside JSON (``-f label=json.label``) makes a string column of its
text; ``binary`` names columns that stay binary whatever they hold.  A later
value that is not UTF-8 in a string column stops the run (nothing is
written) with a line naming the sample and ``--binary``.  A sample without a
column's field has a null there.  Row groups end at ``group_rows`` rows or
``group_bytes`` bytes of cells, whichever comes first, so memory holds one
row group (a single cell larger than that is a row group of its own; an
Arrow ``binary`` cell holds less than 2 GiB).
"""

from ..core.blob import Blob
from ..core.limits import quote
from ..core.rules import is_meta
from ..errors import BadInput, BadSample, UsageError
from ..sources.parquet import need_pyarrow
from ..runtime.overlap import WriteBehind
from .output import ClosesOnSuccess

#: Rows and bytes of cells of one row group written.
GROUP_ROWS = 10_000
GROUP_BYTES = 32 << 20
#: Largest cell in an Arrow ``binary``/``string`` array (32-bit offsets).
MAX_CELL = (1 << 31) - 1


def table_to_tar(table, output="-", group_size=None, settings=None, stats=None):
    """Write the samples of a :class:`~tarproc.sources.parquet.ParquetTable`
    to ``output`` (a URL) as tar; the output exists only when every row was
    written.  Returns the number of samples."""
    from ..core.grouping import SampleWriter
    from .output import open_sink

    from ..core.tario import TarWriter

    n = 0
    empty = []  # (row, key) of the rows with no field: no sample
    with open_sink(output, group_size=group_size, settings=settings) as sink:
        if sink.grouped:  # groups cut where samples start: the general writer
            writer = SampleWriter(sink, stats)
            for row, sample in enumerate(table):
                if len(sample) == 1:
                    empty.append((row, sample["__key__"]))
                    continue
                writer.write(sample)
                n += 1
            writer.close()
            _said(table, empty)
            return n
        # the table checked keys (the sample rule, no key twice in a row) and column names as it read
        # them: members straight to the tar writer, fields in sorted order as SampleWriter writes them
        tar = TarWriter(sink)
        order = sorted(range(len(table.columns)), key=lambda i: table.columns[i].field)
        suffixes = ["." + table.columns[i].field for i in order]
        row = 0
        for keys, values in table.batches():  # a batch's members in one gathered write
            cols = [values[i] for i in order]
            tar.write_rows(keys, suffixes, cols)
            if not cols:  # (a table of keys alone)
                empty += [(row + r, key) for r, key in enumerate(keys)]
            elif all(None in col for col in cols):  # (else no row lacks every field)
                empty += [(row + r, key) for r, (key, cells) in enumerate(zip(keys, zip(*cols)))
                          if cells.count(None) == len(cells)]
            row += len(keys)
        n = row - len(empty)
        tar.close()
    _said(table, empty)
    if stats is not None:
        stats.written += n
    return n


def _said(table, empty):
    """Rows with no field make no sample: the table's ``warn`` hears it."""
    if empty and getattr(table, "warn", None) is not None:
        from ..sources.create import no_field_rows

        row, key = empty[0]
        table.warn(f"{table.name}: {no_field_rows(len(empty))}, no sample is written for "
                   f"{'it' if len(empty) == 1 else 'them'} (the first: row {row}, key {key!r})")


class _SinkFile:
    """The write end pyarrow is given: a :class:`~tarproc.sinks.output.Sink`."""

    closed = False

    def __init__(self, sink):
        self.sink = sink

    def write(self, data):
        if self.sink is not None:  # (None: discarded; pyarrow's writer may still flush when collected)
            self.sink.write(data)
        return len(data)

    def flush(self):
        pass


class TableWriter(ClosesOnSuccess):
    """Write samples as one Parquet table to ``output`` (a URL; committed on
    success like every output): ``columns`` (a list of
    :class:`~tarproc.sinks.table.Column`; ``None``: the fields of the first
    row group), ``key`` (a ``__key__`` column), ``binary`` (column names
    kept binary; ``"*"`` in it: all), ``scan`` (most samples held before
    the schema is fixed, when no columns are given), ``warn`` (a function
    taking a warning line), ``settings``.  :meth:`write` each sample, then
    :meth:`close`; as a context manager it closes on success and discards the
    output on an error."""

    def __init__(self, output="-", columns=None, key=True, binary=(), scan=1000, warn=None, settings=None,
                 group_rows=GROUP_ROWS, group_bytes=GROUP_BYTES):
        from .output import open_sink

        self.pa, self.pq = need_pyarrow()
        self.columns = columns
        self.scanned = columns is None  # columns from the first samples: a field first seen later is told
        self.key = key
        self.binary = frozenset(binary)
        self.scan = scan
        self.warn = warn
        self.settings = settings
        self.group_rows = group_rows
        self.group_bytes = group_bytes
        self.rows = []  # the row group held: a list of value lists per sample
        self.held = []  # samples held until the schema is fixed
        self.held_bytes = 0
        self.bytes = 0
        self.writer = None
        self.kinds = None  # per column: "binary", "string" or "text" (a value in JSON, as text)
        self.known = None
        self.told = 0
        self.written = 0
        self.found = set()  # columns with a value in some sample
        self.sink = open_sink(output, compression=None, settings=settings)
        self.behind = WriteBehind("tarproc-parquet-writer")

    # -- the schema, from the first samples

    def _fix_schema(self):
        from . import table as T

        held = self.held
        if self.columns is None:
            names = sorted({k for s in held for k in s if not is_meta(k)})
            self.columns = [T.Column(k, [k]) for k in names]
        if self.key and any(c.name == "__key__" for c in self.columns):
            self.key = False  # -f '__key__ cls': the key is a column of its own
        self.known = {p for c in self.columns for p in c.candidates}
        kinds = []
        for c in self.columns:
            if c.candidates == ["__key__"]:
                kinds.append("string")
                continue
            forced = c.name in self.binary or "*" in self.binary
            kind = None
            for s in held:
                found = _lookup(s, c, self.settings)
                if found is None:
                    continue
                field, value = found
                if not isinstance(value, (bytes, bytearray, memoryview, Blob)):
                    kind = "text"
                    break
                if forced or kind == "binary":
                    kind = "binary"
                    continue
                kind = "string" if _is_text(field, value, self.settings) else "binary"
            kinds.append(kind or "binary")
        if any(k == "text" and (c.name in self.binary or "*" in self.binary) for c, k in zip(self.columns, kinds)):
            bad = next(c.name for c, k in zip(self.columns, kinds) if k == "text")
            raise UsageError(f"--binary {bad}: the column holds values inside JSON, which are text")
        self.kinds = kinds
        pa = self.pa
        for c in self.columns:
            if not _utf8(c.name):
                raise BadInput(f"field {quote(c.name)}: its name is not UTF-8, which a Parquet column name must be "
                               f"(name the column: -f 'NAME=FIELD', or leave the field out with -f)")
        fields = ([pa.field("__key__", pa.string(), nullable=False)] if self.key else []) + [
            pa.field(c.name, pa.binary() if k == "binary" else pa.string()) for c, k in zip(self.columns, kinds)]
        self.schema = pa.schema(fields)
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise UsageError("two columns have the same name: name them apart (-f 'a=x b=y')")
        texts = [f.name for f in fields if f.type == pa.string()]
        self.file = _SinkFile(self.sink)
        self.writer = self.pq.ParquetWriter(self.file, self.schema, use_dictionary=texts,
                                            write_statistics=texts, compression="snappy")
        for s in held:
            self._add(s)
        held.clear()

    # -- rows

    def write(self, sample):
        if self.writer is None:
            self.held.append(sample)
            self.held_bytes += _size(sample)
            if len(self.held) >= min(self.scan, self.group_rows) or self.held_bytes >= self.group_bytes:
                self._fix_schema()
            return
        self._add(sample)

    def _add(self, sample):
        key = sample.get("__key__")
        if self.scanned and self.warn is not None and self.told <= 20:
            new = [k for k in sample if k not in self.known and not is_meta(k)]
            if new:
                self.known.update(new)
                if self.told == 20:
                    self.warn("more fields not in the columns: not reported")
                else:
                    self.warn(f"sample {key!r}: field{'s' * (len(new) > 1)} {', '.join(sorted(new))} not in the "
                              f"columns (taken from the first {self.scan} samples; use -f or --scan)")
                self.told += 1
        if self.key and not _utf8(key):
            raise BadSample(key, "the key is not UTF-8, which a Parquet string column must be (rename the samples, "
                                 "e.g. with tarcat --rekey)")
        row = [key] if self.key else []
        size = 0
        for c, kind in zip(self.columns, self.kinds):
            found = _lookup(sample, c, self.settings)
            if found is None:
                row.append(None)
                continue
            field, value = found
            if isinstance(value, str) and kind != "binary":  # the key as a column of its own
                row.append(value)
                size += len(value)
                self.found.add(c.name)
                continue
            if kind == "text" or not isinstance(value, (bytes, bytearray, memoryview, Blob)):
                if kind != "text":
                    raise BadSample(key, f"column {quote(c.name)}: a value inside JSON where the first samples "
                                         f"had a whole field")
                from . import table as T

                row.append(T.cell(sample, c, native=False, settings=self.settings))
                self.found.add(c.name)
                continue
            if len(value) > MAX_CELL:
                raise BadSample(key, f"field {quote(field)}: {len(value):,} bytes, more than a Parquet "
                                     f"cell here holds ({MAX_CELL:,})")
            data = bytes(value)  # (a spooled blob's bytes: one cell, within MAX_CELL)
            if kind == "string":
                try:
                    data.decode("utf-8")  # (checked; the bytes go to the column as they are)
                except UnicodeDecodeError:
                    raise BadSample(key, f"field {quote(field)} is not UTF-8 text, but its column is a string "
                                         f"column (fixed from the first samples): keep it binary with --binary "
                                         f"{c.name}") from None
            row.append(data)
            size += len(data)
            self.found.add(c.name)
        if self.rows and (len(self.rows) >= self.group_rows or self.bytes + size > self.group_bytes):
            self._flush()
        self.rows.append(row)
        self.bytes += size

    def _flush(self):
        if not self.rows:
            return
        pa = self.pa
        cols = list(zip(*self.rows))
        arrays = [_array(pa, col, f.type) for col, f in zip(cols, self.schema)]
        # (encoded and written in a thread while the next row group is gathered: pyarrow releases the GIL)
        self.behind.call(self.writer.write_table, pa.Table.from_arrays(arrays, schema=self.schema), len(self.rows))
        self.written += len(self.rows)
        self.rows = []
        self.bytes = 0

    def close(self):
        """Write what is held and the footer, and close the output (committed
        when the command succeeds)."""
        if self.writer is None:
            self._fix_schema()
        self._flush()
        self.behind.finish()
        self.behind.close()
        self.writer.close()
        self.sink.close()

    def abort(self):
        self.behind.close()  # (the row group being written is finished first: the sink has one writer at a time)
        if self.writer is not None:
            self.file.sink = None
        self.sink.abort()


def _utf8(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # (a name or key kept byte for byte: surrogate escapes)
        return False
    return True


def _array(pa, values, typ):
    """An Arrow ``binary``/``string`` array of ``values`` (``bytes``,
    ``str`` or ``None``) made from its buffers: the cells joined once, no
    builder growing and copying."""
    from array import array

    parts = []
    offsets = array("i", [0])
    pos = nulls = 0
    for v in values:
        if v is None:
            nulls += 1
        else:
            if type(v) is str:
                v = v.encode("utf-8")
            parts.append(v)
            pos += len(v)
            if pos > MAX_CELL:  # (past 32-bit offsets: Arrow's builder makes chunks)
                return pa.array([v.decode("utf-8") if type(v) is bytes and typ == pa.string() else v
                                 for v in values], type=typ)
        offsets.append(pos)
    validity = pa.array([v is not None for v in values], pa.bool_()).buffers()[1] if nulls else None
    return pa.Array.from_buffers(typ, len(values), [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(parts))],
                                 null_count=nulls)


def _lookup(sample, column, settings):
    """``(field, value)`` of the first candidate of ``column`` found in
    ``sample`` (a whole field's bytes, or a value inside JSON), or ``None``."""
    from . import table as T

    for path in column.candidates:
        if path == "__key__":
            key = sample.get("__key__")
            return None if key is None else ("__key__", key)
        found = T.lookup(sample, path, settings)
        if found is not None:
            return found
    return None


def _is_text(field, value, settings):
    """Whether a field's bytes go to a string column: text by tar2tsv's rule
    and UTF-8 all through (a spooled blob stays binary)."""
    from . import table as T

    if type(value) is Blob or T.is_binary(field, value, settings):
        return False
    try:
        bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _size(sample):
    return sum(len(v) for k, v in sample.items() if not is_meta(k) and hasattr(v, "__len__"))

