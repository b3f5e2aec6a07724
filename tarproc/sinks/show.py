"""Looking at samples: text previews of fields, images in a terminal, contact sheets.

Nothing here prints: functions return strings (lines of text, ANSI escape
sequences) or Pillow images, and the CLI decides where they go.  Pillow and
numpy are imported inside the functions that need them, so importing this
module is cheap.

- :func:`preview` gives a one-line preview of a field: text and JSON as text,
  numbers as numbers, images as ``<jpg 640x480 RGB, 52 KB>`` (only the image
  header is read), ``.npy`` arrays as ``<npy float32 64x64, 16 KB>``, other
  binary data as a short hex dump.
- :func:`to_image` decodes an image or array field to an RGB Pillow image,
  with optional normalisation and a colormap (implemented with numpy).
- :func:`ansi_image` renders an RGB image as lines of truecolor half-block
  characters (``▀``, foreground = upper pixel, background = lower pixel).
- :func:`contact_sheet` lays out thumbnails with their keys in a grid.
"""

import io
import json
import re
from ..core.blob import Blob, Spooler
from ..core.pack import read_past

#: How much of a spooled (large) field a preview reads.
PREFIX = 1 << 16
#: Larger spooled fields are not decoded as images.
MAX_IMAGE_BLOB = 64 << 20

from ..core import limits
from ..errors import UsageError

#: Field extensions that are images (the last part of the field name).
IMAGE_EXTS = ("jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "gif", "bmp", "tif", "tiff", "webp")
#: Magic numbers of image formats Pillow reads.
_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM", b"II*\0", b"MM\0*",
                b"P1", b"P2", b"P3", b"P4", b"P5", b"P6")
_FORMAT_NAMES = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "BMP": "bmp", "TIFF": "tiff", "WEBP": "webp",
                 "PPM": "ppm", "MPO": "jpg"}


def human_size(n):
    """``1234`` -> ``"1.2 kB"``: :func:`tarproc.core.units.format_size`, the
    one size formatter (decimal units)."""
    from ..core.units import format_size

    return format_size(n)


def ext_of(field):
    """The last part of a field name, lower case: ``seg.png`` -> ``png``."""
    return field.rsplit(".", 1)[-1].lower()


def looks_like_image(field, data):
    if ext_of(field) in IMAGE_EXTS:
        return True
    head = limits.head(data, 12)
    return head.startswith(_IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def image_info(data):
    """``(format, width, height, mode)`` from an image's header, or ``None``.
    Pillow reads only the header here; pixels are not decoded."""
    try:
        from PIL import Image

        with Image.open(io.BytesIO(limits.head(data) if not isinstance(data, bytes) else data)) as img:
            fmt = _FORMAT_NAMES.get(img.format or "", (img.format or "image").lower())
            return fmt, img.width, img.height, img.mode
    except Exception:
        return None


def npy_info(data):
    """``(dtype, shape)`` from a ``.npy`` header, or ``None`` (header only)."""
    if not limits.head(data, 6) == b"\x93NUMPY":
        return None
    try:
        import numpy.lib.format as fmt

        f = io.BytesIO(limits.head(data, 1 << 16))
        major, minor = fmt.read_magic(f)
        if (major, minor) == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(f)
        else:
            shape, _, dtype = fmt.read_array_header_2_0(f)
        return str(dtype), tuple(shape)
    except Exception:
        return None


def as_text(data, limit=None):
    """The value as text if it is UTF-8 without NUL or other control
    characters (tab, newline and carriage return allowed), else ``None``.
    Only the first ``limit`` (:data:`~tarproc.core.limits.PREVIEW_BYTES`) bytes are looked at
    (a character cut at the end of that prefix is dropped)."""
    data = limits.head(data, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(data) - 3:
            return None
        text = data[: e.start].decode("utf-8")
    if any((ord(c) < 32 and c not in "\t\n\r") or ord(c) == 127 for c in text[:4096]):
        return None
    return text


_NUMBER = re.compile(r"^\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*$")


def _clip(text, width, escape=True):
    from .table import escape_controls

    if escape:
        text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    text = escape_controls(text)  # C1 controls, U+2028/9, bidi overrides (from JSON escapes too)
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def preview(field, data, width=64, settings=None):
    """A one-line, plain-text preview of a field's bytes (only a bounded
    prefix is read, :data:`~tarproc.core.limits.PREVIEW_BYTES`; JSON parsed
    to its depth bound; ``settings`` changes both)."""
    prefix = limits.PREVIEW_BYTES if settings is None else settings.preview_bytes
    n = limits.size_of(data)
    if looks_like_image(field, data):
        info = image_info(data)
        if info:
            fmt, w, h, mode = info
            return f"<{fmt} {w}x{h} {mode}, {human_size(n)}>"
    if ext_of(field) == "npy" or limits.head(data, 6) == b"\x93NUMPY":
        info = npy_info(data)
        if info:
            dtype, shape = info
            dims = "x".join(str(d) for d in shape) or "scalar"
            return f"<npy {dtype} {dims}, {human_size(n)}>"
    if n == 0:
        return "<empty>"
    text = as_text(data, prefix)
    if text is not None:
        if _NUMBER.match(text):
            return text.strip()
        stripped = text.strip()
        if (ext_of(field) == "json" or stripped[:1] in ("{", "[")) and n <= prefix:
            try:
                obj = limits.json_loads(text, None if settings is None else settings.json_depth)
                return _clip(limits.json_dumps(obj, ensure_ascii=False, separators=(", ", ": ")), width, False)
            except ValueError:
                pass
        return _clip(text, width)
    head = limits.head(data, 16).hex(" ")
    return f"<{human_size(n)} binary: {head}{' …' if n > 16 else ''}>"


def format_sample(sample, fields=None, width=64, settings=None):
    """The text block of one sample: the key, then one line per field with
    its size and preview.  ``fields`` (a list of field names) limits and
    orders the fields shown; missing ones are shown as ``<missing>``.
    ``settings``: the bounds of :func:`preview` and of names shown."""
    chars = None if settings is None else settings.name_chars
    from ..core.rules import is_meta

    from .table import escape_controls

    lines = [escape_controls(limits.shorten(f"{sample.get('__key__')}", chars))]  # a preview: long names are shortened
    names = fields if fields is not None else sorted(k for k in sample if not is_meta(k))
    if not names:
        lines.append("    (no fields)")
        return lines
    wide = min(max(len(k) for k in names), limits.NAME_CHARS if chars is None else chars)
    for k in names:
        shown = escape_controls(limits.shorten(k, chars))
        if k not in sample:
            lines.append(f"    {shown:<{wide}}  {'':>8}  <missing>")
            continue
        v = sample[k]
        lines.append(f"    {shown:<{wide}}  {human_size(limits.size_of(v)):>8}  {preview(k, v, width, settings)}")
    return lines


class Prefix:
    """A large field a preview read past (see :class:`PrefixOnly`): its
    length and its first :data:`~tarproc.core.limits.PREVIEW_BYTES`."""

    __slots__ = ("length", "prefix")

    def __init__(self, length, prefix):
        self.length = length
        self.prefix = prefix

    def __len__(self):
        return self.length

    def head(self, n):
        return self.prefix[:n]

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self.length)
            if stop <= len(self.prefix) or start >= stop:
                return self.prefix[start:stop:step]
        raise ValueError(f"only the first {len(self.prefix)} of {self.length} bytes of this field were kept")

    def __repr__(self):
        return f"Prefix({self.length} bytes)"


class PrefixOnly(Spooler):
    """A spooler for readers that only preview fields (``tarshow``): a
    member from the threshold on is read through a small buffer, keeping
    its first bytes (a :class:`Prefix`); nothing goes to disk.  A
    compressed shard whose member inflates to gigabytes (a bomb) costs
    decompression time only, never memory or disk."""

    keep = limits.PREVIEW_BYTES  # (prefix_only sets the preview bound)

    def spool(self, read_into, size, fail):
        return Prefix(size, read_past(read_into, size, fail, keep=self.keep))


def prefix_only(spooler, keep=None):
    """A :class:`PrefixOnly` with the thresholds of ``spooler``, keeping
    ``keep`` bytes of each large member (default: the preview bound)."""
    out = PrefixOnly.__new__(PrefixOnly)
    out.__dict__.update(spooler.__dict__)
    if keep is not None:
        out.keep = keep
    return out


# ---------------------------------------------------------------- colormaps

#: Colormaps as evenly spaced control points (RGB 0..255), linearly interpolated.
COLORMAPS = {
    "gray": [(0, 0, 0), (255, 255, 255)],
    "viridis": [(68, 1, 84), (72, 40, 120), (62, 74, 137), (49, 104, 142), (38, 130, 142), (31, 158, 137),
                (53, 183, 121), (109, 205, 89), (180, 222, 44), (253, 231, 37)],
    "magma": [(0, 0, 4), (28, 16, 68), (79, 18, 123), (129, 37, 129), (181, 54, 122), (229, 80, 100),
              (251, 135, 97), (254, 194, 135), (252, 253, 191)],
    "inferno": [(0, 0, 4), (31, 12, 72), (85, 15, 109), (136, 34, 106), (186, 54, 85), (227, 89, 51),
                (249, 140, 10), (249, 201, 50), (252, 255, 164)],
    "plasma": [(13, 8, 135), (84, 2, 163), (139, 10, 165), (185, 50, 137), (219, 92, 104), (244, 136, 73),
               (254, 188, 43), (240, 249, 33)],
    "hot": [(0, 0, 0), (128, 0, 0), (255, 0, 0), (255, 128, 0), (255, 255, 0), (255, 255, 128),
            (255, 255, 255)],
    "jet": [(0, 0, 128), (0, 0, 255), (0, 128, 255), (0, 255, 255), (128, 255, 128), (255, 255, 0),
            (255, 128, 0), (255, 0, 0), (128, 0, 0)],
    "coolwarm": [(59, 76, 192), (124, 159, 249), (192, 212, 245), (242, 203, 183), (238, 133, 105),
                 (180, 4, 38)],
}


def apply_cmap(values, name):
    """Map an array of values in [0, 1] through colormap ``name``; returns
    a ``uint8`` array with a trailing RGB axis."""
    import numpy as np

    if name not in COLORMAPS:
        raise UsageError(f"unknown colormap {name!r} (choose from {', '.join(sorted(COLORMAPS))})")
    points = np.asarray(COLORMAPS[name], dtype=np.float64)
    xs = np.linspace(0.0, 1.0, len(points))
    v = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64)), 0.0, 1.0)
    out = np.stack([np.interp(v, xs, points[:, c]) for c in range(3)], axis=-1)
    return np.round(out).astype(np.uint8)


def _to_unit(a, normalize):
    """Scale an array to [0, 1]: by its min/max with ``normalize``; else by
    the dtype's natural range (floats are taken to be in [0, 1])."""
    import numpy as np

    a = np.asarray(a)
    if a.dtype == bool:
        return a.astype(np.float64)
    f = a.astype(np.float64)
    if normalize:
        finite = f[np.isfinite(f)]
        if finite.size == 0:
            return np.zeros_like(f)
        lo, hi = float(finite.min()), float(finite.max())
        return (f - lo) / (hi - lo) if hi > lo else np.zeros_like(f)
    if np.issubdtype(a.dtype, np.integer):
        if a.dtype == np.uint8 or (f.size and f.max() <= 255 and f.min() >= 0):
            return f / 255.0
        info = np.iinfo(a.dtype)
        return (f - info.min) / float(info.max - info.min)
    return f


def array_to_image(a, normalize=False, cmap=None):
    """An RGB Pillow image from a numpy array: 2-D (grayscale, through
    ``cmap`` if given), HxWx1/3/4 or 3xHxW / 1xHxW (channels first)."""
    import numpy as np
    from PIL import Image

    a = np.asarray(a)
    if a.ndim == 3 and a.shape[0] in (1, 3, 4) and a.shape[2] not in (1, 3, 4):
        a = np.transpose(a, (1, 2, 0))
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim == 2:
        unit = _to_unit(a, normalize)
        rgb = apply_cmap(unit, cmap or "gray")
    elif a.ndim == 3 and a.shape[2] in (3, 4):
        unit = _to_unit(a[:, :, :3], normalize)
        rgb = np.round(np.clip(np.nan_to_num(unit), 0, 1) * 255).astype(np.uint8)
    else:
        raise ValueError(f"array of shape {a.shape} is not an image")
    if rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ValueError("empty image")
    return Image.fromarray(np.ascontiguousarray(rgb), "RGB")


def to_image(field, data, normalize=False, cmap=None, max_size=None, max_pixels=None):
    """Decode an image or ``.npy`` field to an RGB Pillow image, or ``None``
    when the field is neither.  Single-channel images go through ``cmap``
    when one is given; ``normalize`` stretches values to their full range.
    ``max_size`` (w, h) lets JPEG decode at a reduced scale.  Images and
    arrays over the pixel budget (``max_pixels``, default
    :data:`~tarproc.core.limits.MAX_PIXELS`) are not decoded: :class:`~tarproc.core.limits.OverBudget` says so."""
    max_pixels = limits.MAX_PIXELS if max_pixels is None else max_pixels
    if type(data) is Blob:
        if len(data) > MAX_IMAGE_BLOB:
            return None
        data = data.read()
    if ext_of(field) == "npy" or limits.head(data, 6) == b"\x93NUMPY":
        info = npy_info(data)
        if info is not None:
            import math

            shape = info[1]
            if math.prod(shape) > 4 * max_pixels:
                raise limits.OverBudget(f"array of shape {shape} is over the pixel budget (TARPROC_MAX_PIXELS)")
        try:
            import numpy as np

            a = np.load(io.BytesIO(data), allow_pickle=False)
            return array_to_image(a, normalize, cmap)
        except Exception:
            return None
    if not looks_like_image(field, data):
        return None
    try:
        img = limits.open_image(data, max_pixels)
    except limits.OverBudget:
        raise
    except Exception:
        return None
    try:
        if max_size and img.format == "JPEG":
            img.draft("RGB", max_size)
        img.load()
    except Exception:
        return None
    gray = img.mode in ("L", "I", "I;16", "F", "1", "LA")
    if normalize or (cmap and gray):
        import numpy as np

        if img.mode == "P":
            img = img.convert("RGBA")
        elif img.mode == "1":
            img = img.convert("L")
        a = np.asarray(img)
        if img.mode == "LA":
            a = a[:, :, 0]
        return array_to_image(a, normalize, cmap)
    return img.convert("RGB")


# ---------------------------------------------------------------- terminal


def ansi_image(img, columns, max_rows=None):
    """Lines of 24-bit ANSI colour half-block characters showing ``img``
    (an RGB Pillow image) ``columns`` characters wide at most; each text row
    shows two pixel rows (``▀``: foreground = upper, background = lower)."""
    import numpy as np
    from PIL import Image

    w = max(1, min(columns, img.width))
    h = max(2, round(img.height * w / img.width))
    if max_rows and h > 2 * max_rows:
        h = 2 * max_rows
        w = max(1, min(w, round(img.width * h / img.height)))
    h += h % 2
    small = img.convert("RGB").resize((w, h), Image.BILINEAR)
    a = np.asarray(small)
    lines = []
    for y in range(0, h, 2):
        top, bottom = a[y], a[y + 1]
        parts = [f"\x1b[38;2;{t[0]};{t[1]};{t[2]};48;2;{b[0]};{b[1]};{b[2]}m▀"
                 for t, b in zip(top.tolist(), bottom.tolist())]
        lines.append("".join(parts) + "\x1b[0m")
    return lines


# ---------------------------------------------------------------- contact sheets

SHEET_PAD = 4
SHEET_LABEL = 16


def sheet_size(n, columns=None, thumb=128):
    """``(width, height)`` of a contact sheet of ``n`` thumbnails."""
    import math

    cols = columns or max(1, math.ceil(math.sqrt(n)))
    cols = max(1, min(cols, n)) if n else 1
    rows = max(1, math.ceil(n / cols))
    return (cols * (thumb + SHEET_PAD) + SHEET_PAD, rows * (thumb + SHEET_LABEL + SHEET_PAD) + SHEET_PAD), cols


def check_sheet(n, columns=None, thumb=128):
    """Refuse (:class:`~tarproc.errors.UsageError`) a contact sheet of ``n``
    thumbnails larger than the pixel budget (``TARPROC_MAX_PIXELS``):
    ``--thumb 100000`` asked for a 10-gigapixel image and the machine's
    memory.  Checked before any sample is read."""
    from ..core import limits
    from ..errors import UsageError

    (width, height), _ = sheet_size(max(1, n), columns, thumb)
    try:
        limits.check_pixels(width, height)
    except limits.OverBudget as e:
        raise UsageError(f"a contact sheet of {n} thumbnails of {thumb} px: {e}; use a smaller --thumb or -c") \
            from None


def contact_sheet(items, columns=None, thumb=128):
    """A contact sheet (RGB Pillow image) of ``[(key, image), ...]``: each
    image fitted into a ``thumb`` x ``thumb`` cell, its key written below.
    The size is :func:`sheet_size` of the number of items."""
    from PIL import Image, ImageDraw, ImageFont

    check_sheet(len(items), columns, thumb)
    (width, height), cols = sheet_size(len(items), columns, thumb)
    sheet = Image.new("RGB", (width, height), (32, 32, 32))
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    for i, (key, img) in enumerate(items):
        r, c = divmod(i, cols)
        x0 = SHEET_PAD + c * (thumb + SHEET_PAD)
        y0 = SHEET_PAD + r * (thumb + SHEET_LABEL + SHEET_PAD)
        t = img.convert("RGB")
        t.thumbnail((thumb, thumb))
        sheet.paste(t, (x0 + (thumb - t.width) // 2, y0 + (thumb - t.height) // 2))
        label = str(key)
        while label and draw.textlength(label, font=font) > thumb:
            label = label[1:]
        draw.text((x0, y0 + thumb + 2), label, fill=(230, 230, 230), font=font)
    return sheet


# ---------------------------------------------------------------- selecting samples by expression


class Value(bytes):
    """A field's bytes in a select expression: ``int(_.cls) == 3`` works
    (``int`` of bytes), and so do ``_.cls == "3"`` (compared as UTF-8 text)
    and ``str(_.cls)`` / f-strings (the decoded text)."""

    def __eq__(self, other):
        if isinstance(other, str):
            return bytes(self).decode("utf-8", "replace") == other
        return bytes.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = bytes.__hash__

    def __str__(self):
        return bytes(self).decode("utf-8", "replace")

    @property
    def text(self):
        return str(self)

    json_depth = None  # the depth bound (None: limits.JSON_DEPTH); SampleView sets it

    @property
    def json(self):
        return limits.json_loads(bytes(self), self.json_depth)


class MissingField(KeyError):
    """A field a select expression uses that the sample does not have (``_["x"]``)."""


class MissingAttribute(AttributeError):
    """A field a select expression uses that the sample does not have (``_.x``)."""


class SampleView:
    """The ``_`` of a select expression: ``_.cls``, ``_["seg.png"]``,
    ``"cls" in _``, ``_.get("cls")``, ``_.__key__``."""

    __slots__ = ("_sample", "_json_depth")

    def __init__(self, sample, json_depth=None):
        object.__setattr__(self, "_sample", sample)
        object.__setattr__(self, "_json_depth", json_depth)

    def _value(self, name):
        try:
            v = self._sample[name]
        except KeyError:
            raise MissingField(name) from None
        if not isinstance(v, (bytes, bytearray, memoryview)):
            return v
        v = Value(v)
        if self._json_depth is not None:
            v.json_depth = self._json_depth
        return v

    def __getattr__(self, name):
        try:
            return self._value(name)
        except KeyError:
            raise MissingAttribute(name) from None

    def __getitem__(self, name):
        return self._value(name)

    def __contains__(self, name):
        return name in self._sample

    def get(self, name, default=None):
        return self._value(name) if name in self._sample else default

    def keys(self):
        return self._sample.keys()


def compile_select(expr, json_depth=None, misses=None):
    """A predicate ``f(sample) -> bool`` from a Python expression over
    ``_`` (a :class:`SampleView`; ``_.x.json`` parses at most
    ``json_depth`` deep).  A sample that lacks a field the
    expression uses does not match; other errors raise :class:`UsageError`
    naming the sample.  ``misses`` (a dict): what the expression could not
    find, counted (:func:`describe_miss`: a few kinds, bounded)."""
    import math

    try:
        code = compile(expr, "<select>", "eval")
    except SyntaxError as e:
        raise UsageError(f"bad select expression {expr!r}: {e.msg}") from None
    env = {"__builtins__": __builtins__, "json": json, "re": re, "math": math}

    def predicate(sample):
        try:
            return bool(eval(code, env, {"_": SampleView(sample, json_depth)}))
        except (KeyError, AttributeError) as e:
            if misses is not None:
                what = describe_miss(e)
                if what in misses or len(misses) < 5:
                    misses[what] = misses.get(what, 0) + 1
            return False
        except Exception as e:
            raise UsageError(f"select expression {expr!r} failed on sample {sample.get('__key__')!r}: "
                             f"{type(e).__name__}: {e}") from None

    return predicate


def describe_miss(e):
    """What a select expression could not find, from the ``KeyError`` or
    ``AttributeError`` it raised: a field, a key (of parsed JSON, a dict),
    an attribute (a field's value is bytes: ``_.json.name`` meant
    ``_.json.json["name"]``)."""
    from ..core.limits import quote

    if isinstance(e, (MissingField, MissingAttribute)):
        return f"no field {quote(str(e.args[0]))}"
    if isinstance(e, KeyError):
        key = e.args[0] if e.args else "?"
        return f"no key {quote(key) if isinstance(key, str) else repr(key)}"
    name = getattr(e, "name", None) or "?"
    if isinstance(getattr(e, "obj", None), Value):
        return (f"a field's value (bytes) has no attribute {quote(name)} (for a JSON field: "
                f"_.FIELD.json[{name!r}])")
    return f"no attribute {quote(name)}"


DEFAULT_FIRST_FIELDS = "jpg;jpeg;png;ppm;pgm;gif;bmp;tif;tiff;webp"


def find_match(samples, fields=DEFAULT_FIRST_FIELDS, select=None, nth=1, json_depth=None, misses=None):
    """``(key, field, bytes)`` of the ``nth`` sample (1-based) that passes
    ``select`` and has one of ``fields`` (``"jpg;png"``: the first present),
    or ``None``.  Stops pulling samples at the match.  ``misses``: as for
    :func:`compile_select`."""
    candidates = [f for f in re.split(r"[;,\s]+", fields) if f]
    if not candidates:
        raise UsageError("empty field list")
    pred = compile_select(select, json_depth, misses) if select and select.strip() not in ("", "True") else None
    seen = 0
    for sample in samples:
        field = next((f for f in candidates if f in sample), None)
        if field is None:
            continue
        if pred is not None and not pred(sample):
            continue
        seen += 1
        if seen >= nth:
            return sample["__key__"], field, sample[field]
    return None
