"""Samples as records in YAML, JSON or JSON lines (``tar2json``).

A record maps names to values: text fields as strings, binary fields as their
size (or sha256), values inside JSON fields as themselves, a missing field
as ``null`` -- the cells of :mod:`tarproc.sinks.table`, one record per
sample.

YAML is written without a YAML library: each record is one ``---`` document
of ``name: value`` lines whose keys and strings are plain scalars where
PyYAML's ``safe_dump`` writes them plain (``txt: a``) and JSON strings
(double-quoted YAML scalars) where they need quotes, and whose nested values
are flow collections, escaped so that any YAML 1.1 or 1.2 reader gives back
the same values.
"""

import json
import re

from ..core import limits
from ..errors import UsageError
from .table import Column, cell, default_columns, parse_columns

FORMATS = ("yaml", "json", "jsonlines")


def record_columns(spec):
    """Columns for ``-k`` (``"cls json.label img=jpg;png"``), or ``None``
    for every field of each sample."""
    return parse_columns(spec) if spec else None


def record(sample, columns=None, hash=False, settings=None):
    """One record (a ``dict``) for a sample: the given columns in order, or
    ``__key__`` and every field of the sample (``settings``: see
    :func:`~tarproc.sinks.table.cell`)."""
    if columns is None:
        columns = [Column("__key__", ["__key__"])] + default_columns(sample)
    return {c.name: cell(sample, c, hash=hash, native=True, settings=settings) for c in columns}


def _escape(json_text):
    # beyond what json.dumps(ensure_ascii=False) escapes: C1 controls (NEL is a
    # line break in YAML), line separators, bidi overrides, BOM, surrogates
    return limits.escape_json(json_text)


# A string written plain (unquoted), as PyYAML's safe_dump writes it: ASCII
# letters, digits and ``_ . / -`` (single inner spaces too), starting with a
# letter, ``_`` or ``/``; anything else is double-quoted.  Words a YAML 1.1
# or 1.2 reader takes for another type (booleans, null) are quoted.
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*(?: [A-Za-z0-9_./-]+)*\Z")
_NOT_STRINGS = frozenset("y n yes no on off true false null".split())


def _ystr(text):
    if _PLAIN.match(text) and text.lower() not in _NOT_STRINGS:
        return text
    return _escape(json.dumps(text, ensure_ascii=False))


def yaml_value(value):
    """``value`` (a JSON value) as a YAML flow value that reads back equal."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return ".nan"
        if value in (float("inf"), float("-inf")):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:  # YAML 1.1 floats need a dot
            mant, exp = text.split("e")
            text = f"{mant}.0e{exp}"
        if "e" in text and text.split("e")[1][0] not in "+-":
            mant, exp = text.split("e")
            text = f"{mant}e+{exp}"
        return text
    if isinstance(value, str):
        return _ystr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_ystr(str(k))}: {yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    return _ystr(str(value))


def format_record(rec, fmt="yaml"):
    """The text of one record (ending in a newline) in ``fmt``: ``yaml`` (a
    ``---`` document), ``json`` (an indented object and a blank line, a
    stream that ``jq`` reads) or ``jsonlines`` (one object per line)."""
    if fmt == "yaml":
        if not rec:
            return "--- {}\n"
        return "---\n" + "".join(f"{_ystr(str(k))}: {yaml_value(v)}\n" for k, v in rec.items())
    if fmt == "json":
        return _escape(limits.json_dumps(rec, finite=True, indent=4, ensure_ascii=False)) + "\n\n"
    if fmt == "jsonlines":  # NEL and U+2028/9 escaped too: one line for any line splitter
        return _escape(limits.json_dumps(rec, finite=True, ensure_ascii=False)) + "\n"
    raise UsageError(f"unknown output format {fmt!r} (use {', '.join(FORMATS)})")


def available_fields(samples, limit=100):
    """The sorted names (``__key__`` and fields) seen in the first ``limit`` samples."""
    from ..core.rules import is_meta

    names = set()
    for i, sample in enumerate(samples):
        if i >= limit:
            break
        names.update(k for k in sample if k == "__key__" or not is_meta(k))
    return sorted(names)
