"""THE table of URL schemes: how each one is read, written, listed, moved,
removed and checked for existence, for inputs (:mod:`tarproc.sources.open`),
outputs (:mod:`tarproc.sinks.output`, :mod:`tarproc.sinks.remote`),
kujob's ``--done-if`` (:mod:`tarproc.jobs.local`), the reads that resume
(:mod:`tarproc.sources.resume`) and random access
(:mod:`tarproc.sources.indexed`, :mod:`tarproc.sources.ranges`).

=================  ==========================================================
``-``              stdin / stdout
``path``           a local file (scheme ``file``)
``pipe:CMD``       the stdout (input) or stdin (output) of a shell command
``http(s)://``     ``curl`` (output: HTTP PUT); byte ranges in process (``builtin``)
``gs://``          ``gsutil cat`` / ``gsutil cp - URL`` (and ``mv``, ``rm``, ``ls``, ``stat``,
                   ``cat -r``)
``s3://``          ``aws s3api get-object`` / ``aws s3 cp - URL`` (and ``mv``, ``rm``, ``ls``,
                   ``head-object``, ``get-object --range``; ``AWS_ENDPOINT_URL`` is passed on as
                   ``--endpoint-url``)
=================  ==========================================================

Each :class:`Scheme` says how its URLs are opened (``reader``: ``stdin``,
``file``, ``pipe`` or ``client``; ``writer``: ``stdout``, ``file``,
``pipe`` or ``remote``) and holds the client command templates of each
action (:data:`ACTIONS`).  The command of an action can be replaced with an
environment variable ``TARPROC_<ACTION>_<SCHEME>`` (``TARPROC_READ_S3``,
``TARPROC_WRITE_GS``, ...), a shell command in which ``{url}`` stands for
the quoted URL (``{bucket}``, ``{key}`` for its parts); a scheme that is not
in the table is read or written by such a command alone.  Templates are
filled by :func:`fill_command`, in one pass.
"""

import os

from ..errors import UsageError

#: The actions of client commands: the ``ACTION`` of ``TARPROC_<ACTION>_<SCHEME>``.
#: ``STAT`` and ``RESUME`` are the reads that resume where they broke
#: (:mod:`tarproc.sources.resume`): ``STAT`` asks for the object's size and
#: identity (ETag, generation), ``RESUME`` reads it from byte ``{offset}``
#: (the whole object when the option ``{from}`` is left out), pinned to that
#: identity (``{if_match}``, ``{if_unmodified}``; for gs, ``{url}`` is
#: ``URL#GENERATION``); http's ``{headers}`` is the descriptor its response
#: headers are written to.
#: ``RANGE`` reads bytes ``{start}`` to ``{end}`` (inclusive) of an object, for
#: random access (:mod:`tarproc.sources.indexed`); ``RANGES`` many ranges at
#: once.  http(s) has no command for them: :data:`BUILTIN`, the in-process
#: client of :mod:`tarproc.sources.keepalive` (kept-alive, pipelined
#: connections); ``TARPROC_RANGES_HTTP`` replaces it with a curl reading its
#: requests as a config file on stdin (:mod:`tarproc.sources.ranges`).  What
#: the table's own answers hold is the reader's to know (s3's RANGE: the JSON
#: answer, the bytes in ``{file}``); a command that replaces RANGE writes the
#: bytes alone to its stdout.
ACTIONS = ("READ", "WRITE", "MOVE", "REMOVE", "LIST", "EXISTS", "STAT", "RESUME", "RANGE", "RANGES")

#: The template of an action the library does in process (http(s) RANGE and
#: RANGES: :mod:`tarproc.sources.keepalive`), never run as a command.
BUILTIN = "builtin"


class Scheme:
    """One row of the table: how URLs of a scheme are opened (``reader``,
    ``writer``), whether reads resume where they broke (``resumable``), and
    the client command template of each action (``commands``, by
    :data:`ACTIONS` name; ``{src}`` of MOVE is the object moved), and the
    options those templates may hold (``options``: a placeholder such as
    ``{from}`` stands for the filled option and a space, or for nothing when
    a value it needs is ``None``)."""

    __slots__ = ("name", "reader", "writer", "resumable", "commands", "options")

    def __init__(self, name, reader, writer, resumable=False, options=None, **commands):
        self.name = name
        self.reader = reader
        self.writer = writer
        self.resumable = resumable
        self.options = dict(options or {})
        self.commands = {k.upper(): v for k, v in commands.items()}


_HTTP = dict(
    read="curl -gsSfL --retry 3 {url}",  # -g: brackets and braces in a URL are its own, not a glob
    write="curl -gsSf -T - {url}",
    exists="curl -gsfIL -o /dev/null {url}",
    # (no STAT: the first response's headers, written to {headers}, tell the identity)
    resume="curl -gsSfL -D /dev/fd/{headers} {from}{if_match}{if_unmodified}{url}",
    options={"from": "-r {offset}-", "if_match": "-H 'If-Match: '{etag}",
             "if_unmodified": "-H 'If-Unmodified-Since: '{modified}"},
    # in process: kept-alive, pipelined connections (a curl per read was 5x slower than a plain loop)
    range=BUILTIN,
    ranges=BUILTIN,
)

SCHEMES = {
    s.name: s for s in (
        Scheme("-", "stdin", "stdout"),
        Scheme("file", "file", "file"),
        Scheme("pipe", "pipe", "pipe"),
        Scheme("http", "client", "remote", resumable=True, **_HTTP),
        Scheme("https", "client", "remote", resumable=True, **_HTTP),
        Scheme("gs", "client", "remote", resumable=True,
               read="gsutil -q cat {url}",
               write="gsutil -q cp - {url}",
               move="gsutil -q mv {src} {url}",
               remove="gsutil -q rm {url}",
               list="gsutil ls {url}",
               exists="gsutil -q stat {url}",
               stat="gsutil stat {url}",
               resume="gsutil -q cat {from}{url}",  # {url}: URL#GENERATION
               range="gsutil -q cat -r {start}-{end} {url}",
               options={"from": "-r {offset}-"}),
        Scheme("s3", "client", "remote", resumable=True,
               # one GET: `aws s3 cp URL -` retries a broken part itself, and was seen to splice a
               # replaced object's bytes onto the old one's (aws-cli 1.46, moto)
               read="aws s3api get-object {endpoint}--bucket {bucket} --key {key} /dev/fd/3 3>&1 1>/dev/null",
               write="aws s3 cp {endpoint}- {url}",
               move="aws s3 mv {endpoint}{src} {url}",
               remove="aws s3 rm {endpoint}{url}",
               list="aws s3 ls {endpoint}{url}",
               exists="aws s3api head-object {endpoint}--bucket {bucket} --key {key}",
               stat="aws s3api head-object {endpoint}--bucket {bucket} --key {key}",
               resume="aws s3api get-object {endpoint}--bucket {bucket} --key {key} {from}{if_match}"
                      "/dev/fd/3 3>&1 1>/dev/null",
               # the bytes to {file}, the JSON answer (ContentRange, ETag) to stdout
               range="aws s3api get-object --bucket {bucket} --key {key} --range bytes={start}-{end} "
                     "{endpoint}{file}",
               options={"from": "--range bytes={offset}-", "if_match": "--if-match {etag}"}),
    )
}


def scheme_of(url):
    """The scheme of a URL: ``-``, ``pipe``, ``file`` (a path) or the part
    before ``://`` in lower case."""
    if url == "-":
        return "-"
    if url.startswith("pipe:"):
        return "pipe"
    head, sep, _ = url.partition("://")
    if sep and head.isalnum():
        return head.lower()
    return "file"


def scheme(url):
    """The :class:`Scheme` of ``url``; a scheme not in the table is read and
    written by its ``TARPROC_READ_``/``WRITE_`` commands alone."""
    name = scheme_of(url)
    row = SCHEMES.get(name)
    return row if row is not None else Scheme(name, "client", "remote")


def as_url(value, what="url"):
    """A URL argument as a ``str``: a ``str`` as it is, ``bytes`` decoded
    (UTF-8, undecodable bytes kept as surrogates), a path-like object
    (``pathlib.Path``) as its path; anything else is a :class:`UsageError`."""
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
        if isinstance(value, str):
            return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    raise UsageError(f"{what}: expected a URL or path (str or pathlib.Path), not {type(value).__name__}")


def override(action, name, settings=None):
    """The command ``settings`` (a :class:`~tarproc.settings.Settings`, from
    ``TARPROC_<ACTION>_<SCHEME>`` at the command line) put in place of the
    table's, or ``None``."""
    return settings.command(action, name) if settings is not None else None


def template(action, name, settings=None):
    """The command template of ``action`` for the scheme ``name`` (its
    override in ``settings`` first), or ``None`` when it has none."""
    row = SCHEMES.get(name)
    return override(action, name, settings) or (row.commands.get(action) if row is not None else None)


def has_command(action, url, settings=None):
    """Whether ``url``'s scheme has a command for ``action``."""
    return template(action, scheme_of(url), settings) is not None


def command(action, url, settings=None, **more):
    """The shell command of ``action`` (one of :data:`ACTIONS`) for ``url``,
    filled (:func:`fill_command`; ``more``: further placeholders, such as
    ``src``); a :class:`UsageError` when the scheme has none.  ``settings``:
    the commands that replace the table's."""
    name = scheme_of(url)
    found = template(action, name, settings)
    if found == BUILTIN:
        raise UsageError(f"{action} of {name}:// is done in process, not by a command")
    if found is None:
        from ..core.limits import shown

        if action in ("READ", "WRITE"):
            raise UsageError(f"{shown(url)}: unknown URL scheme {name!r}")
        raise UsageError(f"{shown(url)}: cannot {action.lower()} {name}:// objects "
                         f"(set TARPROC_{action}_{name.upper()} to a command that can)")
    row = SCHEMES.get(name)
    return fill_command(found, url, name, options=row.options if row is not None else None, **more)


def _quote(s):
    import shlex

    return shlex.quote(s)


def fill_command(template, url, scheme=None, options=None, **more):
    """THE filling of a client command template (``TARPROC_READ_*``,
    ``WRITE``, ``MOVE``, ``REMOVE``, ``LIST``, ``EXISTS``, ``STAT``,
    ``RESUME``, ``RANGE``, ``RANGES``): ``{url}``, ``{bucket}``, ``{key}`` and every name of
    ``more`` replaced by its value quoted for the shell (a ``None`` value
    by ``''``), ``{endpoint}`` by ``--endpoint-url URL `` (s3 with
    ``AWS_ENDPOINT_URL``), all in ONE pass: a key or path that holds
    ``{url}`` must never have another value put inside its quotes (that
    would end them, and run what follows).  ``options`` (a row's
    :attr:`Scheme.options`): ``{NAME}`` of an option is its own template
    filled the same way and followed by a space, or nothing when a value
    it names is ``None``."""
    import re

    scheme = scheme or scheme_of(url)
    bucket, _, key = url.partition("://")[2].partition("/")
    values = {"endpoint": endpoint(scheme), "bucket": _quote(bucket), "key": _quote(key), "url": _quote(url)}
    values.update((k, _quote(v if v is not None else "")) for k, v in more.items())
    names = "|".join(re.escape(k) for k in values)
    placeholder = re.compile(r"\{(" + names + r")\}")
    for name, option in (options or {}).items():
        if name in values:
            continue
        _refuse_quoted_placeholders(option, names)
        given = all(more.get(m.group(1), "") is not None for m in placeholder.finditer(option))
        values[name] = placeholder.sub(lambda m: values[m.group(1)], option) + " " if given else ""
    names = "|".join(re.escape(k) for k in values)
    _refuse_quoted_placeholders(template, names)
    return re.sub(r"\{(" + names + r")\}", lambda m: values[m.group(1)], template)


def _refuse_quoted_placeholders(template, names):
    """A placeholder inside quotes in a template (``curl "{url}"``) is a
    usage error: the value is quoted for the shell already, and inside
    double quotes its own quotes are literal, so ``$(...)`` in a URL from a
    file list would run."""
    import re

    quote = None
    i = 0
    placeholder = re.compile(r"\{(" + names + r")\}")
    while i < len(template):
        c = template[i]
        if quote is None and c == "\\" or quote == '"' and c == "\\":
            i += 2
            continue
        if quote is None and c in "'\"" or c == quote:
            quote = None if c == quote else c
        elif quote is not None and c == "{":
            m = placeholder.match(template, i)
            if m:
                raise UsageError(f"command template {template!r}: {m.group()} is inside quotes; it is quoted "
                                 f"for the shell already: write it without quotes")
        i += 1


def endpoint(scheme):
    """``--endpoint-url URL `` for the aws CLI when ``AWS_ENDPOINT_URL`` is
    set (scheme ``s3``), else ``""``."""
    url = os.environ.get("AWS_ENDPOINT_URL", "")
    return f"--endpoint-url {_quote(url)} " if url and scheme == "s3" else ""
