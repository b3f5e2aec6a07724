"""Building tar shards from plans.

Two plan formats:

- **Tables** (TSV or CSV, as the original ``tsv2tar``): a header row of field
  names; a column headed ``@name`` holds paths of files whose bytes become
  field ``name``; other columns hold the literal text of their field; an
  optional ``__key__`` column gives the keys, else they are numbered with a
  key format (``{index:06d}``, ``%06d``).  An empty cell means the sample has
  no such field.
- **Lines** ``TARPATH SOURCE`` (as the Go port's ``create``): SOURCE is
  ``text:…`` (the literal text), ``file:PATH``, ``pipe:CMD`` (the command's
  stdout) or a plain path.  Blank lines and lines starting with ``#`` are
  ignored.

:func:`read_plan` turns a plan into a list of :class:`PlanItem` (one per
member, in output order) and checks everything that can be checked before
writing: member names (no absolute paths, no ``..``), duplicates, and that
every referenced file exists and is readable.  A problem raises
:class:`~tarproc.errors.BadInput` naming ``plan:line``;
:func:`item_bytes` gives a member's bytes.  :func:`tarproc.sinks.plan.write_plan`
then writes the members through :func:`~tarproc.sinks.output.open_sink`, so a
failure (a ``pipe:`` command that fails) leaves no output behind.
"""

import os

from ..errors import BadInput, SampleFailed, UsageError
from ..core.limits import check_widths, quote
from ..core.rules import is_meta, split_name, unsafe_name


class PlanItem:
    """One member to write: ``name``, ``kind`` (``text``, ``file``, ``pipe``),
    ``value`` (the text, path or command) and where it comes from."""

    __slots__ = ("where", "name", "kind", "value")

    def __init__(self, where, name, kind, value):
        self.where = where
        self.name = name
        self.kind = kind
        self.value = value

    def __repr__(self):
        return f"PlanItem({self.where!r}, {self.name!r}, {self.kind!r}, {self.value!r})"


def format_key(fmt, index):
    """A key from a key format and a record number: ``%06d``,
    ``{index:06d}``, ``{record:09d}`` (the original's name) or ``{}``."""
    check_widths(fmt, "bad key format")
    try:
        if "%" in fmt and "{" not in fmt:
            return fmt % index
        return fmt.format(index, index=index, record=index, i=index)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise UsageError(f"bad key format {fmt!r}: {e}") from None


def plan_lines(text):
    """The lines of a plan: ended by ``\\n`` (or ``\\r\\n``) only, never by
    the other characters ``str.splitlines`` ends lines at (U+2028, U+0085,
    form feed, vertical tab, ``\\x1c``-``\\x1e``), which file names and texts
    may hold."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def detect_format(lines, path="", delim=None):
    """``"table"`` or ``"lines"`` for a plan, from its name, the delimiter
    option, and its first meaningful line."""
    if delim is not None or path.lower().endswith((".tsv", ".csv")):
        return "table"
    for line in lines:
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        cells = s.split("\t") if "\t" in s else s.split(",") if "," in s and " " not in s else s.split()
        if any(c.strip() == "__key__" or c.strip().startswith("@") for c in cells):
            return "table"
        first, _, rest = s.partition(" ") if "\t" not in s else s.partition("\t")
        rest = rest.strip()
        if rest.startswith(("text:", "file:", "pipe:")):
            return "lines"
        if split_name(first) is not None and rest:
            return "lines"
        return "table"
    return "lines"


def _delimiter(path, first_line, delim):
    if delim is not None:
        if delim in ("\\t", "tab", "TAB"):
            return "\t"
        if len(delim) != 1:
            raise UsageError(f"the delimiter must be one character, not {delim!r}")
        return delim
    if path.lower().endswith(".csv"):
        return ","
    if path.lower().endswith(".tsv") or "\t" in first_line:
        return "\t"
    return "," if "," in first_line else "\t"


def _resolve(path, basedir):
    if basedir and not os.path.isabs(path):
        return os.path.join(basedir, path)
    return path


def _check_file(where, path):
    if not os.path.exists(path):
        raise BadInput(f"{where}: file {path!r} not found")
    if not os.path.isfile(path):
        raise BadInput(f"{where}: {path!r} is not a regular file")
    if not os.access(path, os.R_OK):
        raise BadInput(f"{where}: file {path!r} is not readable")


def _check_name(where, name):
    why = unsafe_name(name)
    if not why and name.rsplit("/", 1)[-1] in ("", "."):
        # a file member named 'dir/' reads as a directory holding data: GNU
        # tar fails extracting it, bsdtar calls the archive damaged
        why = f"member name {quote(name)}: it names a directory, not a file"
    if not why and split_name(name) is None:
        # not KEY.FIELD (README, .hidden): every reader (ours, webdataset) skips or refuses it
        base = name.rsplit("/", 1)[-1]
        why = (f"member name {quote(name)}: its file name is not KEY.FIELD, so readers skip it"
               + (f" (e.g. {quote(name + '.txt')})" if "." not in base else ""))
    if not why and is_meta(split_name(name)[1]):
        # KEY.__x__: every reader (ours, webdataset) takes it for metadata, never a field
        why = f"member name {quote(name)}: its field is a metadata name (__...__), which readers refuse"
    if why:
        raise BadInput(f"{where}: refusing {why}")


def parse_table(text, name, delim=None, key_format="{index:09d}", basedir=None, warn=None):
    """The :class:`PlanItem` list of a TSV/CSV plan (see the module doc);
    rows whose every cell is empty make no member, which ``warn`` hears
    of (one line: their count, the first)."""
    import csv

    import io

    first = plan_lines(text[:1 << 16])[:1] or [""]
    d = _delimiter(name, first[0], delim)
    # newline="": rows end at \n, \r\n or \r (csv's own rule), never at U+2028 and the like
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=d)
    try:
        header = next(reader)
    except StopIteration:
        raise BadInput(f"{name}: the plan is empty (a header row is needed)") from None
    header = [h.strip() for h in header]
    fields = []
    for h in header:
        field = h[1:] if h.startswith("@") else h
        if not field:
            raise BadInput(f"{name}:1: empty column name in the header")
        if field != "__key__" and ("/" in field or field.startswith(".")):
            raise BadInput(f"{name}:1: bad field name {field!r}")
        if field in fields:
            raise BadInput(f"{name}:1: column {field!r} appears twice")
        fields.append(field)
    if header.count("@__key__"):
        raise BadInput(f"{name}:1: the __key__ column holds keys, not file names")
    order = sorted(range(len(header)), key=lambda i: fields[i])
    items = []
    index = 0
    empty = []  # (line, key) of rows with no field
    for row in reader:
        where = f"{name}:{reader.line_num}"
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != len(header):
            raise BadInput(f"{where}: {len(row)} columns, the header has {len(header)}")
        values = dict(zip(fields, row))
        key = values.get("__key__")
        if key is None:
            key = format_key(key_format, index)
        key = key.strip()
        if not key:
            raise BadInput(f"{where}: empty key")
        base = key[key.rfind("/") + 1 :]
        if "." in base or key.endswith("/"):
            raise BadInput(f"{where}: key {key!r} has a dot in its file name or ends in '/'")
        index += 1
        if warn is not None and all(v == "" for f, v in zip(fields, row) if f != "__key__"):
            empty.append((where, key))
        for i in order:
            h, field, value = header[i], fields[i], row[i]
            if field == "__key__" or value == "":
                continue
            member = f"{key}.{field}"
            _check_name(where, member)
            if h.startswith("@"):
                path = _resolve(value, basedir)
                _check_file(where, path)
                items.append(PlanItem(where, member, "file", path))
            else:
                items.append(PlanItem(where, member, "text", value))
    if empty:
        where, key = empty[0]
        warn(f"{name}: {no_field_rows(len(empty))}, nothing is written for "
             f"{'it' if len(empty) == 1 else 'them'} (the first: {where}, key {key!r})")
    return items


def no_field_rows(n):
    """The words for ``n`` rows of a table that make no member."""
    return f"{n} row{'s' * (n != 1)} of the table {'have' if n != 1 else 'has'} no field (every cell empty or null)"


def parse_lines(text, name, basedir=None):
    """The :class:`PlanItem` list of a ``TARPATH SOURCE`` plan."""
    items = []
    import re

    for lineno, line in enumerate(plan_lines(text), 1):
        where = f"{name}:{lineno}"
        s = line.strip(" \t")
        if not s or s.startswith("#"):
            continue
        parts = re.split(r"[ \t]+", s, 1)  # spaces or tabs, not the other characters Python calls space
        if len(parts) != 2:
            raise BadInput(f"{where}: expected 'TARPATH SOURCE'")
        tarpath, source = parts
        _check_name(where, tarpath)
        if source.startswith("text:"):
            # the text is everything after "text:" up to the end of the line
            rest = line.lstrip(" \t")[len(tarpath):].lstrip(" \t")
            items.append(PlanItem(where, tarpath, "text", rest[len("text:"):]))
        elif source.startswith("pipe:"):
            if not source[5:].strip():
                raise BadInput(f"{where}: empty pipe: command")
            items.append(PlanItem(where, tarpath, "pipe", source[5:]))
        else:
            path = source[5:] if source.startswith("file:") else source
            path = _resolve(path, basedir)
            _check_file(where, path)
            items.append(PlanItem(where, tarpath, "file", path))
    return items


#: Largest plan (bytes) read: a plan is held and checked whole.
MAX_PLAN = 256 << 20


def read_plan(path, fmt="auto", delim=None, key_format="{index:09d}", basedir=None, max_plan=MAX_PLAN,
              warn=None):
    """Read and check a plan file (``-`` for stdin); returns the list of
    :class:`PlanItem`.  Every problem is a :class:`BadInput` naming the
    plan line; nothing is written here.  A plan of more than ``max_plan``
    bytes is refused; ``warn`` hears of table rows that make no member."""
    import sys

    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(max_plan + 1)
        else:
            with open(path, "rb") as f:
                raw = f.read(max_plan + 1)
    except OSError as e:
        raise BadInput(f"{name}: cannot read the plan: {e.strerror}") from None
    if len(raw) > max_plan:
        raise BadInput(f"{name}: the plan is larger than {max_plan:,} bytes (TARPROC_MAX_PLAN): it is checked "
                       f"whole before anything is written, so split it and join the parts with tarcat")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise BadInput(f"{name}:{line}: the plan is not UTF-8") from None
    if basedir is not None and not os.path.isdir(basedir):
        raise UsageError(f"-C {basedir}: not a directory")
    if fmt == "auto":
        fmt = detect_format(plan_lines(text[:1 << 20])[:50], path if path != "-" else "", delim)
    if fmt == "table":
        items = parse_table(text, name, delim, key_format, basedir, warn)
    elif fmt == "lines":
        items = parse_lines(text, name, basedir)
    else:
        raise UsageError(f"unknown plan format {fmt!r} (auto, table or lines)")
    seen = {}
    for item in items:
        if item.name in seen:
            raise BadInput(f"{item.where}: member {item.name!r} is already made by {seen[item.name]}")
        seen[item.name] = item.where
    return items


#: Files (and command outputs) up to this size are read into memory; larger
#: ones are copied to the output in chunks (memory stays flat).
SMALL_FILE = 1 << 20


def _file_blob(where, path):
    """The bytes of a plan file: ``bytes`` when small, else a
    :class:`~tarproc.core.blob.Blob` over the open file, copied in chunks.
    Its size is taken once, when opened: a file that grows meanwhile gives
    that many bytes, one that shrinks is an error naming it."""
    import stat

    from ..core.blob import Blob, SharedFile

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO swapped in since the check never blocks
    except OSError as e:
        raise BadInput(f"{where}: cannot read {path!r}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{where}: {path!r} is not a regular file")
        from .open import is_stdout

        if is_stdout(st):  # `tarcreate plan > a.jpg`: the shell has emptied it, or it grows as it is read
            raise BadInput(f"{where}: {path!r}: input file is output file (standard output)")
        os.set_blocking(fd, True)
        if st.st_size <= SMALL_FILE:
            parts = []
            left = st.st_size
            while left > 0:
                piece = os.read(fd, left)
                if not piece:
                    raise BadInput(f"{where}: {path!r} shrank while being read")
                parts.append(piece)
                left -= len(piece)
            return b"".join(parts)
        blob = Blob(SharedFile(fd, path, False), 0, st.st_size)
        fd = -1  # the blob owns it now
        return blob
    except OSError as e:
        raise BadInput(f"{where}: cannot read {path!r}: {e.strerror}") from None
    finally:
        if fd >= 0:
            os.close(fd)


def item_bytes(item, basedir=None, tail_bytes=None):
    """The bytes of one plan item (reads the file or runs the command): ``bytes``,
    or for a large file or command output a :class:`~tarproc.core.blob.Blob`
    that the tar writer copies in chunks (a command's output is spooled to an
    unnamed temporary file, never held in memory).  ``tail_bytes``: the
    stderr of a failed command its message is taken from
    (``TARPROC_TAIL_BYTES``; ``None``: the default)."""
    if item.kind == "text":
        return item.value.encode("utf-8")
    if item.kind == "file":
        return _file_blob(item.where, item.value)
    import tempfile

    from ..core.blob import Blob, SharedFile
    from ..runtime.child import Child
    from ..runtime.procs import wait_nowait

    with tempfile.TemporaryFile() as outf:
        # its own session: a signal to tarcreate ends the command's children
        # too, not only its shell; so does the command's end; its stderr's tail
        # is kept for the message
        try:
            p = Child(item.value, item.where, stdout=outf.fileno(), cwd=basedir or None, session=True,
                      tail_bytes=tail_bytes)
        except OSError as e:
            raise SampleFailed(Child.start_error(item.where, item.value, e)) from None
        try:
            wait_nowait(p.pid)  # exited, not reaped: the group id stays its own
        finally:
            p.kill()  # what it left running in its group
        if p.returncode != 0:
            raise SampleFailed(f"{item.where}: command {quote(item.value)} failed with exit status "
                               f"{p.returncode}{p.tail_line()}")
        size = os.fstat(outf.fileno()).st_size
        if size <= SMALL_FILE:
            return os.pread(outf.fileno(), size, 0)
        return Blob(SharedFile(os.dup(outf.fileno()), None, False), 0, size)
