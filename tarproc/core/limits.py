"""Bounds on every input-controlled size the toolkit reads into memory, in one place.

A shard is input an attacker (or an unlucky day) controls.  Whatever it holds, a
command reads only bounded amounts of it into memory for looking at it:

==========================  ==================  ===========================================
bound                       default             environment variable
==========================  ==================  ===========================================
preview prefix              64 KiB              ``TARPROC_PREVIEW_BYTES``
image pixels                32 Mpixels          ``TARPROC_MAX_PIXELS``
JSON nesting depth          200                 ``TARPROC_JSON_DEPTH``
captured output tail        8 KiB               ``TARPROC_TAIL_BYTES``
name length in messages     200 characters      ``TARPROC_NAME_CHARS``
keys tarcheck keeps in RAM  200,000 keys        ``TARPROC_CHECK_KEYS`` (then on disk)
holes of a sparse member    1 GiB               ``TARPROC_SPARSE_HOLES``
distinct fields tarcheck    10,000 names        ``TARPROC_CHECK_FIELDS`` (then "other")
decoded : compressed bytes  1000 : 1            ``TARPROC_MAX_RATIO`` (past ``TARPROC_RATIO_FLOOR``, 256 MiB)
URLs (or ids) held as list  1,000,000           ``TARPROC_MAX_URLS``
==========================  ==================  ===========================================

- :func:`head` is the bounded prefix of a field that previews, tables and
  sniffers look at (``tarshow``, ``tar2tsv``'s text/binary decision).
- :func:`check_pixels` refuses an image whose header claims more pixels than
  the budget, *before* any pixel is decoded (Pillow's own
  ``Image.MAX_IMAGE_PIXELS``, the process's, is left alone).
- :func:`json_loads` refuses JSON nested deeper than the depth bound with a
  ``ValueError`` (never a ``RecursionError``), in linear time.
- :class:`Tail` keeps the last bytes of a stream (a failed command's output,
  a download tool's stderr): messages quote at most that much.
- :func:`bounded_list` holds the URLs of brace patterns and file lists that
  a command must have all at once (tarpcat's per-worker lists, tarmix's
  sources together, kujob's shard ids): beyond the bound it is a one-line usage error,
  never gigabytes of strings.  ``tarcat --shuffle`` shuffles longer lists
  through a buffer of that many URLs instead.
- :func:`shorten` cuts a name (key, member name, URL) for a one-line message:
  the beginning and the end, with the number of characters left out.

The module holds the defaults (constants, never assigned); every function
takes its bound as a keyword argument.  The library never reads the
environment: a command reads ``TARPROC_*`` at its edge into a
:class:`tarproc.settings.Settings` and passes the values in.
"""

import os
import re

from ..errors import BadInput, UsageError
from .shorten import NAME_CHARS, quote, shorten  # noqa: F401  (the bounded names of messages, re-exported)

#: Bytes of a field that a preview or a text/binary decision looks at.
PREVIEW_BYTES = 64 << 10
#: Most pixels (width x height) of an image that is decoded.
MAX_PIXELS = 32 << 20
#: Deepest nesting of JSON arrays/objects that is parsed.
JSON_DEPTH = 200
#: Bytes of a child's captured output kept for an error message.
TAIL_BYTES = 8 << 10
#: Keys ``tarcheck`` remembers in memory; more go to a temporary database on disk.
CHECK_KEYS = 200_000
#: Zero bytes a GNU sparse member may expand to (core/sparse.py).
SPARSE_HOLES = 1 << 30
# distinct field names (and field combinations) one tarcheck report keeps
CHECK_FIELDS = 10_000
#: Bytes of rows a column scan holds before its header is written (tar2tsv without -f).
SCAN_MEMORY = 64 << 20
# compression bombs: once a stream has decoded RATIO_FLOOR bytes, it may not
# decode to more than MAX_RATIO times the compressed bytes read so far (gzip
# cannot pass about 1030:1 at all; real shards of media and text stay under 20:1)
MAX_RATIO = 1000
RATIO_FLOOR = 256 << 20


def is_decimal(text):
    """Whether ``text`` is a decimal number ``int()`` reads: ASCII digits
    (``str.isdigit`` also takes the superscripts of a latin-1 header, which
    ``int()`` refuses)."""
    return text.isascii() and text.isdigit()


def check_ratio(url, codec, decoded, compressed, max_ratio=MAX_RATIO, ratio_floor=RATIO_FLOOR):
    """Raise :class:`BadInput` when ``decoded`` bytes out of ``compressed``
    bytes is a compression bomb: more than ``max_ratio`` times, once past
    ``ratio_floor`` decoded bytes."""
    if decoded > ratio_floor and decoded > max_ratio * max(compressed, 1):
        raise BadInput(f"{url}: {codec} stream decodes to more than {max_ratio}:1 ({decoded:,} bytes from "
                       f"{compressed:,}): a compression bomb? (TARPROC_MAX_RATIO raises the bound)")


#: Most URLs (shard ids) of patterns and file lists held in memory as a list.
MAX_URLS = 1_000_000


def bounded_list(items, what="the input list", limit=None, max_urls=MAX_URLS):
    """``list(items)``, refused with a :class:`~tarproc.errors.UsageError`
    (before reading further) when it has more than ``max_urls`` items
    (or ``limit``: what is left of that bound when one command holds several
    lists, as tarmix's sources)."""
    import itertools

    limit = max_urls if limit is None else max(0, limit)
    out = list(itertools.islice(items, limit + 1))
    if len(out) > limit:
        raise UsageError(f"{what}: more than {max_urls} entries, more than this command holds in memory "
                         f"(TARPROC_MAX_URLS; split the pattern)")
    return out


def head(value, n=None):
    """The first ``n`` bytes (default :data:`PREVIEW_BYTES`) of a field as
    ``bytes``, reading no more than that: works on ``bytes``-like values and
    on any object with ``read_head(n)`` or ``head(n)`` (spooled blobs)."""
    n = PREVIEW_BYTES if n is None else n
    if isinstance(value, (bytes, bytearray)):
        return bytes(value[:n])
    if isinstance(value, memoryview):
        return value[:n].tobytes()
    if isinstance(value, str):
        return value[:n].encode("utf-8", "surrogateescape")[:n]
    for attr in ("read_head", "head"):
        fn = getattr(value, attr, None)
        if callable(fn):
            return bytes(fn(n))
    try:
        return bytes(value[:n])  # a Blob (core/blob.py) reads a slice from its spool file
    except TypeError:
        return bytes(memoryview(value)[:n])


def size_of(value):
    """The length of a field's bytes without reading them."""
    try:
        return len(value)
    except TypeError:
        return getattr(value, "size", 0)


class OverBudget(ValueError):
    """An image or array is larger than the pixel budget."""


def check_pixels(width, height, limit=None):
    """Raise :class:`OverBudget` when ``width x height`` is over the pixel budget."""
    limit = MAX_PIXELS if limit is None else limit
    if width * height > limit:
        raise OverBudget(f"image of {width}x{height} pixels is over the {limit} pixel budget "
                         f"(TARPROC_MAX_PIXELS)")


def open_image(data, limit=None):
    """A Pillow image opened (header only, no pixels decoded) from ``data``
    (bytes), refused with :class:`OverBudget` when its size is over the pixel
    budget ``limit`` (default :data:`MAX_PIXELS`).  Only the first frame is
    ever decoded, and its size is what is checked.  Pillow's own fence
    (``Image.MAX_IMAGE_PIXELS``) is left as it is: it is the process's, and a
    per-call budget set there would leak into other calls, other threads and
    the caller's own use of Pillow."""
    import io
    import warnings

    from PIL import Image

    limit = MAX_PIXELS if limit is None else limit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            img = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError:
            raise OverBudget(f"image over the {limit} pixel budget (TARPROC_MAX_PIXELS)") from None
    try:
        check_pixels(img.width, img.height, limit)
    except OverBudget:
        img.close()
        raise
    return img


def json_depth(text, limit=None):
    """Whether ``text`` (str) nests arrays/objects deeper than ``limit``
    (default :data:`JSON_DEPTH`); linear in the length of ``text``."""
    limit = JSON_DEPTH if limit is None else limit
    if text.count("[") + text.count("{") <= limit:
        return False
    import re

    depth = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                return True
        elif c in "]}":
            depth -= 1
    return False


def json_loads(data, limit=None):
    """``json.loads`` of bytes or text that raises ``ValueError`` (never a
    ``RecursionError``) for JSON nested deeper than ``limit``."""
    import json

    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    limit = JSON_DEPTH if limit is None else limit
    if json_depth(text, limit):
        raise ValueError(f"JSON nested deeper than {limit} levels (TARPROC_JSON_DEPTH)")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def json_dumps(obj, finite=False, **kw):
    """``json.dumps`` that raises ``ValueError`` instead of ``RecursionError``.
    ``finite``: NaN and the infinities (a field's ``1e999`` overflows a
    float; Python's parser accepts ``NaN``) are written as ``null``, as
    JavaScript's ``JSON.stringify`` does: JSON has no word for them, and a
    bare ``Infinity`` makes strict readers refuse the whole text."""
    import json

    try:
        if not finite:
            return json.dumps(obj, **kw)
        try:
            return json.dumps(obj, allow_nan=False, **kw)
        except ValueError:
            return json.dumps(_finite(obj), allow_nan=False, **kw)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _finite(value):
    if isinstance(value, float):
        return value if value - value == 0.0 else None  # inf - inf and nan - nan are nan
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


#: ``scheme://user:password@`` in a URL (the password part optional; up to
#: the last ``@`` before the path, so a password holding an unencoded ``@``
#: is hidden whole).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s?#]+@")
#: Query parameters that are secrets: the signatures, credentials and tokens
#: of signed URLs (S3 ``X-Amz-Signature``, ``X-Amz-Credential``,
#: ``X-Amz-Security-Token``; GCS ``X-Goog-Signature``; Azure SAS ``sig``;
#: CloudFront ``Signature``, ``Key-Pair-Id`` is not a secret), and any
#: parameter whose name is or ends in ``token``, ``secret``, ``signature``,
#: ``sig``, ``password``, ``passwd``, ``pwd``, ``key``, ``credential(s)``,
#: ``auth`` or ``session`` (``access_token``, ``client_secret``, ``apikey``,
#: ``api_key``, ``X-Api-Key``).
_SECRET_PARAMS = re.compile(r"(?i)([?&;][a-z0-9_.-]*?(?:token|secret|signature|sig|password|passwd|pwd|key|"
                            r"credentials?|auth|session)=)(?:[^&;\s#:]|:(?!\s|$))*")  # (a ': ' after it ends the message's URL)


def hide_credentials(text):
    """``text`` (a URL, a command, a message) with the credentials of the
    URLs in it replaced by ``***``: the user and password
    (``https://user:pw@host/`` -> ``https://***@host/``) and the secret
    query parameters of signed URLs (``X-Amz-Signature=***``)."""
    if "@" not in text and "=" not in text:
        return text
    return _SECRET_PARAMS.sub(r"\1***", _USERINFO.sub(r"\1***@", text))


def shown(name, limit=None):
    """A name (path, URL, key) as a message shows it on one line:
    :func:`safe_text`."""
    return safe_text(name, limit)


#: A newline a message keeps: where a quoted block of a child's output
#: starts a line (``"\n  | "``, runtime/engine); any other is escaped.
_NOT_A_BLOCK = re.compile(r"\n(?!  \| )")


def message_text(message, limit=None):
    """A message for stderr as :func:`safe_text` with ``lines=True`` makes
    it, and one line but for the quoted lines of a child's output that
    follow it: a newline anywhere else (a name, a URL, a key that reached
    the message raw) is escaped as ``\\n``, so nothing forges a line."""
    if isinstance(message, (bytes, bytearray, memoryview)):
        message = bytes(message).decode("utf-8", "surrogateescape")
    elif not isinstance(message, str):
        message = str(message)
    message = message.rstrip("\n")
    if "\n" in message:
        message = _NOT_A_BLOCK.sub(r"\\n", message)
    return safe_text(message, limit, lines=True)


def clip_lines(text, limit=None):
    """Every line of a message cut to at most about ``limit`` characters
    (default four times :data:`NAME_CHARS`), credentials in URLs hidden
    (:func:`hide_credentials`), control characters escaped (tab and
    newline kept): the last fence, used where the CLI prints a message, for
    names that reached it unshortened or unescaped."""
    text = hide_credentials(text)
    limit = 4 * NAME_CHARS if limit is None else limit
    if _UNSAFE_LINES.search(text):
        text = _UNSAFE_LINES.sub(_escape_match, text)
    if len(text) <= limit:
        return text
    return "\n".join(shorten(line, limit) for line in text.split("\n"))


class Tail:
    """The last ``limit`` bytes (default :data:`TAIL_BYTES`) of what is
    written to it; ``dropped`` counts the bytes before them."""

    def __init__(self, limit=None):
        self.limit = TAIL_BYTES if limit is None else limit
        self.buf = bytearray()
        self.dropped = 0

    def write(self, data):
        self.buf += data
        over = len(self.buf) - self.limit
        if over > 0:
            del self.buf[:over]
            self.dropped += over
        return len(data)

    def getvalue(self):
        return bytes(self.buf)


def tail_of_fd(fd, limit=None):
    """The last ``limit`` bytes of a regular file given by descriptor (read
    from its end), and how many bytes came before them."""
    limit = TAIL_BYTES if limit is None else limit
    size = os.fstat(fd).st_size
    start = max(0, size - limit)
    chunks = []
    pos = start
    while True:
        b = os.pread(fd, 1 << 16, pos)
        if not b:
            break
        chunks.append(b)
        pos += len(b)
        if pos - start >= limit:
            break
    data = b"".join(chunks)[:limit]
    return data, start


def drain_tail(stream, limit=None):
    """Read a binary stream to its end in a daemon thread, keeping only its
    last bytes (a child's stderr pipe: it never fills up and blocks the
    child).  Returns the thread; ``thread.tail`` is the :class:`Tail`."""
    import threading

    tail = Tail(limit)

    def drain():
        try:
            while True:
                b = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
                if not b:
                    break
                tail.write(b)
        except (OSError, ValueError):
            pass

    t = threading.Thread(target=drain, name="tarproc-stderr", daemon=True)
    t.tail = tail
    t.start()
    return t


#: Widest field a name pattern may ask for (a path is at most 4096 bytes).
MAX_WIDTH = 4096


def check_widths(pattern, what):
    """THE check of every format-string option (``--rekey``, ``--keyformat``,
    tarsplit ``-o``, tarcreate ``-k``), run when the option is parsed: refuse
    a ``str.format`` pattern that does not parse, or whose field reaches into
    a value (``{key.x}``, ``{key[0]}``: an internal error when filled), and a
    name pattern (``str.format`` or ``%`` style) whose placeholder
    asks for a huge width or precision, or nests fields in its spec:
    ``{shard:0999999999}`` made gigabyte names until memory ran out.  The
    message starts with ``what`` (e.g. ``--rekey '{key:>9999999}'``)."""
    if "{" in pattern:
        import string

        try:
            parsed = [(field, spec) for _, field, spec, _ in string.Formatter().parse(pattern) if field is not None]
        except ValueError as e:
            raise UsageError(f"{what} {pattern!r}: {e}") from None
        for field, _ in parsed:
            # {key.x} or {key[0]} reaches into the value (an attribute, an item): names only
            if "." in field or "[" in field:
                raise UsageError(f"{what} {pattern!r}: {{{field}}} refers to a part of a value; only plain names "
                                 f"(such as {{{field.split('.')[0].split('[')[0]}}}) are allowed")
        specs = [spec for _, spec in parsed if spec]
        if any("{" in spec for spec in specs):
            raise UsageError(f"{what} {pattern!r}: nested fields in a format spec")
    else:
        specs = [" ".join(m) for m in re.findall(r"%[-#0 +]*(\d*)(?:\.(\d*))?", pattern)]
    for spec in specs:
        for number in re.findall(r"\d+", spec):
            if len(number) > 4 or int(number) > MAX_WIDTH:
                raise UsageError(f"{what} {pattern!r}: a width of {number[:12]} is more than a name can hold "
                                 f"({MAX_WIDTH})")


# ---------------------------------------------------------------- text shown to people

#: Characters a terminal acts on or a Unicode-aware reader takes as a line
#: end, besides tab, newline and CR: the other C0 controls (ESC starts the
#: escape sequences, OSC 52 among them writes the clipboard), DEL, the C1
#: controls (U+009B is an 8-bit CSI, U+0085 a line end), U+2028/U+2029, the
#: bidirectional overrides and isolates that reorder what is shown, and lone
#: surrogates other than ``\udc80``-``\udcff`` (a JSON ``"\ud800"``: no
#: encoder writes them).
UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                    "\ud800-\udc7f\udd00-\udfff]")
_UNSAFE_ALL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


_READABLE = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def escape_char(c):
    """One unsafe character as an escape: ``\\n``, ``\\t``, ``\\r`` as such,
    else ``\\xHH`` (a byte of a name that is not UTF-8, ``\\udcHH``, as the
    byte ``\\xHH``) or ``\\uHHHH``."""
    o = ord(c)
    if c in _READABLE:
        return _READABLE[c]
    if 0xDC80 <= o <= 0xDCFF:
        return f"\\x{o - 0xDC00:02x}"
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def _escape_match(m):
    return escape_char(m.group())


#: What a JSON or YAML writer escapes as ``\\uHHHH`` beyond what
#: ``json.dumps(ensure_ascii=False)`` escapes: DEL and the C1 controls (NEL
#: is a line break in YAML), U+2028/U+2029, the bidirectional overrides and
#: isolates, the BOM and non-characters, and surrogates.  The escapes read
#: back as the same characters, so data written this way is unchanged.
JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff\ufffe\uffff\ud800-\udfff]")


def escape_json(json_text):
    """JSON text (or a double-quoted YAML scalar) with the characters of
    :data:`JSON_UNSAFE` written as ``\\uHHHH`` escapes: reversible, so
    for data (tar2json, tar2tsv's JSON lines) as well as reports."""
    return JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text) if JSON_UNSAFE.search(json_text) \
        else json_text


def escape_unsafe(text):
    """``text`` with the characters of :data:`UNSAFE` escaped (tab, newline,
    CR and the ``\\udcHH`` of non-UTF-8 bytes kept: for tables and previews,
    which escape those their own way or write the bytes as they are)."""
    return UNSAFE.sub(_escape_match, text) if UNSAFE.search(text) else text


def safe_text(value, limit=None, lines=False):
    """THE function that makes text safe to show to a person (a message on
    stderr, a ``-v`` line, a report, a preview): any value (``str``;
    ``bytes`` as UTF-8; others by ``str``) with

    - credentials of URLs removed (:func:`hide_credentials`),
    - control characters (escape sequences, clipboard writes), lone
      surrogates and non-UTF-8 bytes escaped (``\\x1b``, ``\\xe9``,
      ``\\ud800``), so the result prints on any terminal and encodes as
      strict UTF-8,
    - its length bounded: at most about ``limit`` characters (default
      :data:`NAME_CHARS`) per line, the middle left out (:func:`shorten`).

    ``lines=True`` (whole messages) keeps newlines and tabs and bounds each
    line to ``limit`` (default four times :data:`NAME_CHARS`); otherwise
    (a name, a key, a value) they are escaped too and the text is one line."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("utf-8", "surrogateescape")
    elif not isinstance(value, str):
        value = str(value)
    text = hide_credentials(value)
    pattern = _UNSAFE_LINES if lines else _UNSAFE_ALL
    if pattern.search(text):
        text = pattern.sub(_escape_match, text)
    if lines:
        return clip_lines(text, limit)
    return shorten(text, limit)


def _encode_escaping(e):
    """Codec error handler ``tarproc.escape``: what the output encoding
    cannot hold, escaped as :func:`escape_char` does (a non-UTF-8 name on a
    strict UTF-8 stdout, ``PYTHONIOENCODING=utf-8``)."""
    if not isinstance(e, UnicodeEncodeError):
        raise e
    return "".join(escape_char(c) for c in e.object[e.start:e.end]), e.end


def _encode_escaping_raw(e):
    """Codec error handler ``tarproc.escape_raw`` for a stream whose errors
    were ``surrogateescape``: the bytes of a non-UTF-8 name (``\\udcHH``)
    written as they are, as before, and any other character the encoding
    cannot hold escaped (``\\u65e5``) instead of failing."""
    if not isinstance(e, UnicodeEncodeError):
        raise e
    out = bytearray()
    for c in e.object[e.start:e.end]:
        o = ord(c)
        out += bytes([o - 0xDC00]) if 0xDC80 <= o <= 0xDCFF else escape_char(c).encode("ascii")
    return bytes(out), e.end


def escaping_stream(stream):
    """Make a text stream (``sys.stdout``) escape what its encoding cannot
    hold instead of failing: when its error handler is ``strict``, or
    ``surrogateescape`` (then non-UTF-8 names keep their bytes).  The
    C or POSIX locale with Python's UTF-8 mode off (ASCII with
    ``surrogateescape``) writes UTF-8, as that mode would: names and values
    are UTF-8 already."""
    import codecs

    try:
        codecs.lookup_error("tarproc.escape")
    except LookupError:
        codecs.register_error("tarproc.escape", _encode_escaping)
        codecs.register_error("tarproc.escape_raw", _encode_escaping_raw)
    errors = getattr(stream, "errors", None)
    if stream is None or errors not in ("strict", "surrogateescape") or not hasattr(stream, "reconfigure"):
        return
    try:
        encoding = codecs.lookup(stream.encoding).name
    except (LookupError, TypeError, AttributeError):
        encoding = None
    options = {"errors": "tarproc.escape" if errors == "strict" else "tarproc.escape_raw"}
    if encoding == "ascii" and errors == "surrogateescape":  # (an explicit PYTHONIOENCODING=ascii is strict)
        options["encoding"] = "utf-8"
    elif encoding == "utf-8" and errors == "surrogateescape":
        return  # (everything encodes: surrogates as their bytes)
    try:
        stream.reconfigure(**options)
    except (ValueError, OSError):
        pass


def whole_number(value, what, least=0, none_ok=False):
    """``value`` checked to be a whole number >= ``least`` (or None when
    allowed), as an ``int``: the API's stages and sources fail at once with
    one line, not with a TypeError in the middle of a run."""
    import numbers

    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise UsageError(f"{what} must be a whole number >= {least}, not {value!r}")
    return int(value)
