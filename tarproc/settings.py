"""The settings of the toolkit, in one place: every bound and knob, its
default, the ``TARPROC_*`` variable that sets it for the commands, and what it
means.

The library never reads the environment for these.  A command reads it once,
at its edge (``tarproc.cli``: :class:`tarproc.cli.base.Args` builds
``args.settings`` with :meth:`Settings.from_environ`), and hands the library
what it needs as keyword arguments (``check_shards(..., check_keys=...)``) or
as this object (``open_source(url, settings=...)``,
``open_sink(url, settings=...)``), which the library carries on the objects it
builds (reader, writer, sink, runner) rather than in module globals.  A
library caller that passes nothing gets the defaults below, whatever the
environment holds.

One library entry point honours the environment on purpose:
:class:`tarproc.sources.indexed.IndexedDataset` (given no ``settings``) reads
it when it is made, because it is built inside DataLoader workers and other
programs that never see a command line; ``settings=Settings()`` makes it
ignore the environment too.

The variables, their defaults and meanings: :data:`FIELDS` (and
:func:`table`; docs/settings.md lists them).
"""

from .errors import UsageError

#: Kinds of client command a scheme's default can be replaced with:
#: ``TARPROC_<KIND>_<SCHEME>`` (``TARPROC_READ_GS``, ``TARPROC_WRITE_S3``,
#: ``TARPROC_RANGE_HTTPS``, ...), a shell command template.
COMMAND_KINDS = ("READ", "WRITE", "RANGE", "RANGES", "MOVE", "REMOVE", "LIST", "EXISTS", "STAT", "RESUME")


def _field(name, default, env, doc, kind="count"):
    return name, default, env, kind, doc


#: (name, default, variable, kind, meaning) of every setting.  (A plain
#: class below, not a dataclass: every command builds one at its start, and
#: ``dataclasses`` costs a few milliseconds of start-up.)
_SPEC = (
    # bounds on input-controlled sizes (see tarproc.core.limits)
    _field("preview_bytes", 64 << 10, "TARPROC_PREVIEW_BYTES",
           "bytes of a field that a preview or a text/binary decision looks at", "size"),
    _field("max_pixels", 32 << 20, "TARPROC_MAX_PIXELS", "most pixels of an image (or .npy array / 4) drawn"),
    _field("json_depth", 200, "TARPROC_JSON_DEPTH", "deepest nesting of JSON that is parsed"),
    _field("tail_bytes", 8 << 10, "TARPROC_TAIL_BYTES",
           "bytes of a failed command's output (or a child's stderr) kept for a message", "size"),
    _field("name_chars", 200, "TARPROC_NAME_CHARS",
           "characters of a name in a message; a message line is at most 4x this"),
    _field("check_keys", 200_000, "TARPROC_CHECK_KEYS", "keys tarcheck keeps in memory (then on disk)"),
    _field("check_fields", 10_000, "TARPROC_CHECK_FIELDS",
           "distinct field names one tarcheck report keeps (the rest are 'other')"),
    _field("scan_memory", 64 << 20, "TARPROC_SCAN_MEMORY",
           "bytes of rows tar2tsv holds while it finds its columns (without -f)", "size"),
    _field("sparse_holes", 1 << 30, "TARPROC_SPARSE_HOLES", "zero bytes a GNU sparse member may expand to",
           "size"),
    _field("max_ratio", 1000, "TARPROC_MAX_RATIO", "decoded : compressed bytes past ratio_floor"),
    _field("ratio_floor", 256 << 20, "TARPROC_RATIO_FLOOR", "decoded bytes before max_ratio applies", "size"),
    _field("max_urls", 1_000_000, "TARPROC_MAX_URLS", "URLs (or ids) a command holds as a list"),
    _field("max_plan", 256 << 20, "TARPROC_MAX_PLAN", "bytes of a tarcreate plan", "size"),
    _field("max_index", 1 << 28, "TARPROC_MAX_INDEX",
           "bytes of one read of an index: its JSON, a shard's sidecar or seek record", "size"),
    _field("max_sample", 1 << 34, "TARPROC_MAX_SAMPLE", "bytes of one sample read through an index", "size"),
    _field("group_cache", 32 << 20, "TARPROC_GROUP_CACHE",
           "bytes of decoded compressed groups an IndexedDataset keeps for the next reads (0: none)", "size0"),
    _field("open_files", 32, "TARPROC_OPEN_FILES",
           "shard files an IndexedDataset keeps open, and kept-alive connections a process keeps "
           "(the least recently used closed first)"),
    _field("sample_memory", 16 << 20, "TARPROC_SAMPLE_MEMORY",
           "bytes of one sample's small fields packed in memory", "size"),
    _field("capture_spill", 256 << 10, "TARPROC_CAPTURE_SPILL",
           "bytes of a per-sample command's output kept in memory (then a file)", "size"),
    # knobs
    _field("blob_threshold", 4 << 20, "TARPROC_BLOB_THRESHOLD",
           "members from this size on are spooled blobs (0: never); --blob-threshold",
           "size0"),
    _field("foreign_stale_seconds", 24 * 3600.0, "TARPROC_FOREIGN_STALE_SECONDS",
           "age after which another machine's temporary file is taken as dead",
           "seconds"),
    _field("spool_dir", None, "TARPROC_SPOOL_DIR",
           "directory of the spool of uploads (default: TMPDIR, /tmp)", "text"),
    _field("remote_commit", "spool", "TARPROC_REMOTE_COMMIT",
           "spool (upload on success) or move (temporary object, server-side move)",
           "text"),
    _field("allow_tty", False, "TARPROC_ALLOW_TTY",
           "read a tar archive from (write one to) a terminal", "flag"),
    _field("retries", 5, "TARPROC_RETRIES", "times a broken download is resumed in a row (0: never); --retries",
           "count0"),
    _field("stall_timeout", 60.0, "TARPROC_STALL_TIMEOUT",
           "seconds without a byte that count as a broken download (0: no limit)",
           "seconds"),
    _field("range_concurrency", 8, "TARPROC_RANGE_CONCURRENCY",
           "ranged reads an IndexedDataset has in flight at once (connections for http(s), client "
           "processes for s3 and gs)"),
    _field("debug", False, "TARPROC_DEBUG", "1: show the traceback of an error (--debug)", "flag"),
    _field("commands", (), "TARPROC_<KIND>_<SCHEME>",
           "client command replacing a scheme's default (" + ", ".join(COMMAND_KINDS) + ")", "commands"),
)
_NAMES = tuple(spec[0] for spec in _SPEC)


class Settings:
    """Every bound and knob of the toolkit, as attributes (``s.max_urls``;
    keyword arguments of the constructor, the rest the defaults).  Frozen
    (hashable, shared safely between threads): make a changed copy with
    :meth:`replace`.  ``commands`` holds ``("READ_GS", TEMPLATE)`` pairs (a
    dict is accepted): the client command templates that replace a
    scheme's default client (``TARPROC_READ_GS``...)."""

    __slots__ = _NAMES

    def __init__(self, **values):
        unknown = set(values) - set(_NAMES)
        if unknown:
            raise TypeError(f"Settings: unknown setting(s) {', '.join(sorted(unknown))}")
        for name, default, *_ in _SPEC:
            object.__setattr__(self, name, values.get(name, default))
        object.__setattr__(self, "commands", _pairs(self.commands))

    def __setattr__(self, name, value):
        raise AttributeError("Settings are frozen: use .replace(...)")

    __delattr__ = __setattr__

    def _values(self):
        return tuple(getattr(self, name) for name in _NAMES)

    def __eq__(self, other):
        return type(other) is Settings and self._values() == other._values()

    def __hash__(self):
        return hash(self._values())

    def __repr__(self):
        changed = ", ".join(f"{n}={getattr(self, n)!r}" for n, d, *_ in _SPEC if getattr(self, n) != d)
        return f"Settings({changed})"

    def __reduce__(self):  # pickled for worker processes
        return (_from_dict, (self.as_dict(),))

    def command(self, kind, scheme):
        """The template of ``TARPROC_<KIND>_<SCHEME>`` (``None``: the default)."""
        name = f"{kind}_{scheme.upper()}"
        for key, template in self.commands:
            if key == name:
                return template or None
        return None

    def replace(self, **changes):
        """A copy with some settings changed."""
        return Settings(**dict(self.as_dict(), **changes))

    def as_dict(self):
        """The settings as a JSON-ready ``dict`` (for a child process)."""
        return {name: getattr(self, name) for name in _NAMES}

    @classmethod
    def from_dict(cls, values):
        """The inverse of :meth:`as_dict`."""
        return cls(**values)

    @classmethod
    def from_environ(cls, environ=None):
        """The settings of a command: each from its ``TARPROC_*`` variable
        (unset or empty: the default).  A value that does not parse is a
        :class:`~tarproc.errors.UsageError` naming the variable (one line,
        exit 2 at the command line).  Only ``tarproc.cli`` and the
        entry points documented above call it."""
        import os

        environ = os.environ if environ is None else environ
        values = {}
        for name, _, env, kind, _ in _SPEC:
            if kind == "commands":
                values[name] = _commands(environ)
                continue
            text = environ.get(env)
            if text is None or not text.strip():
                continue
            values[name] = _parse(env, text.strip(), kind)
        return cls(**values)


def _from_dict(values):
    return Settings(**values)


def _commands(environ):
    out = {}
    for name, value in environ.items():
        if not name.startswith("TARPROC_") or not value:
            continue
        kind, _, scheme = name[len("TARPROC_"):].partition("_")
        if kind in COMMAND_KINDS and scheme:
            out[f"{kind}_{scheme.upper()}"] = value
    return out


def _pairs(commands):
    items = commands.items() if hasattr(commands, "items") else commands
    return tuple(sorted((str(k).upper(), str(v)) for k, v in items))


def _parse(name, text, kind):
    if kind == "text":
        return text
    if kind == "flag":
        return text not in ("0", "no", "false")
    if kind in ("seconds",):
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):
            raise UsageError(f"{name}={text!r}: expected a number of seconds")
        return value
    if kind in ("size", "size0"):
        from .core.units import parse_size

        try:
            value = parse_size(text)
        except UsageError:
            raise UsageError(f"{name}={text!r}: expected a size (such as 65536, 64KiB, 1MB)") from None
        if kind == "size" and value <= 0:
            raise UsageError(f"{name}={text!r}: expected a size above 0")
        return value
    try:
        value = int(float(text)) if text.replace(".", "", 1).replace("e", "", 1).isdigit() else int(text)
    except (ValueError, OverflowError):
        value = -1
    if value < 0 or (kind == "count" and value == 0):
        raise UsageError(f"{name}={text!r}: expected a whole number{' above 0' if kind == 'count' else ''}")
    return value


def table():
    """The settings as a text table (variable, default, meaning)."""
    rows = [(env, "" if default in (None, ()) else str(default), doc) for _, env, default, doc in FIELDS]
    width = max(len(r[0]) for r in rows)
    dwidth = max(len(r[1]) for r in rows)
    return "\n".join(f"{env:<{width}}  {d:<{dwidth}}  {doc}" for env, d, doc in rows)


#: Every setting: (field name, variable, default, meaning).
FIELDS = tuple((name, env, default, doc) for name, default, env, _, doc in _SPEC)

#: The defaults (an immutable value; the library's default everywhere).
DEFAULTS = Settings()
