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

import dataclasses

from .errors import UsageError

#: Kinds of client command a scheme's default can be replaced with:
#: ``TARPROC_<KIND>_<SCHEME>`` (``TARPROC_READ_GS``, ``TARPROC_WRITE_S3``,
#: ``TARPROC_RANGE_HTTPS``, ...), a shell command template.
COMMAND_KINDS = ("READ", "WRITE", "RANGE", "MOVE", "REMOVE", "LIST", "EXISTS")


def _field(default, env, doc, kind="count"):
    return dataclasses.field(default=default, metadata={"env": env, "doc": doc, "kind": kind})


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every bound and knob of the toolkit (frozen: make a changed copy with
    :meth:`replace`).  ``commands`` holds ``("READ_GS", TEMPLATE)`` pairs:
    the client command templates that replace a scheme's default client
    (``TARPROC_READ_GS``...)."""

    # bounds on input-controlled sizes (see tarproc.core.limits)
    preview_bytes: int = _field(64 << 10, "TARPROC_PREVIEW_BYTES",
                                "bytes of a field that a preview or a text/binary decision looks at", "size")
    max_pixels: int = _field(32 << 20, "TARPROC_MAX_PIXELS", "most pixels of an image (or .npy array / 4) drawn")
    json_depth: int = _field(200, "TARPROC_JSON_DEPTH", "deepest nesting of JSON that is parsed")
    tail_bytes: int = _field(8 << 10, "TARPROC_TAIL_BYTES",
                             "bytes of a failed command's output (or a reader's stderr) kept for a message", "size")
    name_chars: int = _field(200, "TARPROC_NAME_CHARS",
                             "characters of a name in a message; a message line is at most 4x this")
    check_keys: int = _field(200_000, "TARPROC_CHECK_KEYS", "keys tarcheck keeps in memory (then on disk)")
    check_fields: int = _field(10_000, "TARPROC_CHECK_FIELDS",
                               "distinct field names one tarcheck report keeps (the rest are 'other')")
    sparse_holes: int = _field(1 << 30, "TARPROC_SPARSE_HOLES", "zero bytes a GNU sparse member may expand to",
                               "size")
    max_ratio: int = _field(1000, "TARPROC_MAX_RATIO", "decoded : compressed bytes past ratio_floor")
    ratio_floor: int = _field(256 << 20, "TARPROC_RATIO_FLOOR", "decoded bytes before max_ratio applies", "size")
    max_urls: int = _field(1_000_000, "TARPROC_MAX_URLS", "URLs (or ids) a command holds as a list")
    max_plan: int = _field(256 << 20, "TARPROC_MAX_PLAN", "bytes of a tarcreate plan", "size")
    max_index: int = _field(1 << 28, "TARPROC_MAX_INDEX", "bytes of an index JSON read", "size")
    max_sample: int = _field(1 << 34, "TARPROC_MAX_SAMPLE", "bytes of one sample read through an index", "size")
    sample_memory: int = _field(16 << 20, "TARPROC_SAMPLE_MEMORY",
                                "bytes of one sample's small fields packed in memory", "size")
    capture_spill: int = _field(256 << 10, "TARPROC_CAPTURE_SPILL",
                                "bytes of a per-sample command's output kept in memory (then a file)", "size")
    # knobs
    blob_threshold: int = _field(4 << 20, "TARPROC_BLOB_THRESHOLD",
                                 "members from this size on are spooled blobs (0: never); --blob-threshold",
                                 "size0")
    foreign_stale_seconds: float = _field(24 * 3600.0, "TARPROC_FOREIGN_STALE_SECONDS",
                                          "age after which another machine's temporary file is taken as dead",
                                          "seconds")
    spool_dir: str = _field(None, "TARPROC_SPOOL_DIR",
                            "directory of the spool of uploads (default: TMPDIR, /tmp)", "text")
    remote_commit: str = _field("spool", "TARPROC_REMOTE_COMMIT",
                                "spool (upload on success) or move (temporary object, server-side move)",
                                "text")
    allow_tty: bool = _field(False, "TARPROC_ALLOW_TTY",
                             "read a tar archive from (write one to) a terminal", "flag")
    retries: int = _field(5, "TARPROC_RETRIES", "times a broken download is resumed in a row (0: never); --retries",
                          "count0")
    stall_timeout: float = _field(60.0, "TARPROC_STALL_TIMEOUT",
                                  "seconds without a byte that count as a broken download (0: no limit)",
                                  "seconds")
    debug: bool = _field(False, "TARPROC_DEBUG", "1: show the traceback of an error (--debug)", "flag")
    commands: tuple = dataclasses.field(
        default=(),
        metadata={"env": "TARPROC_<KIND>_<SCHEME>", "kind": "commands",
                  "doc": "client command replacing a scheme's default (" + ", ".join(COMMAND_KINDS) + ")"})

    def __post_init__(self):
        if not isinstance(self.commands, tuple) or any(not isinstance(p, tuple) for p in self.commands):
            object.__setattr__(self, "commands", _pairs(self.commands))  # a dict given: pairs (hashable)

    def command(self, kind, scheme):
        """The template of ``TARPROC_<KIND>_<SCHEME>`` (``None``: the default)."""
        name = f"{kind}_{scheme.upper()}"
        for key, template in self.commands:
            if key == name:
                return template or None
        return None

    def replace(self, **changes):
        """A copy with some settings changed."""
        return dataclasses.replace(self, **changes)

    def as_dict(self):
        """The settings as a JSON-ready ``dict`` (for a child process)."""
        return dataclasses.asdict(self)

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
        for f in dataclasses.fields(cls):
            kind = f.metadata["kind"]
            if kind == "commands":
                values[f.name] = _pairs(_commands(environ))
                continue
            text = environ.get(f.metadata["env"])
            if text is None or not text.strip():
                continue
            values[f.name] = _parse(f.metadata["env"], text.strip(), kind)
        return cls(**values)


#: Every setting: (field name, variable, default, meaning).
FIELDS = tuple((f.name, f.metadata["env"], f.default, f.metadata["doc"]) for f in dataclasses.fields(Settings))

#: The defaults (an immutable value; the library's default everywhere).
DEFAULTS = Settings()


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
