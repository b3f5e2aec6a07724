"""The sample rules, in one place: how a member name splits into key and field,
which entries are metadata, and which names, keys and fields may be read or
written (one rule, :func:`unsafe_name`, for readers and writers alike).

The key of a member is its directory plus the part of its file name before the
first dot; the field is the rest (``train/n0142.jpg`` -> ``train/n0142``,
``jpg``; ``a.b/c.seg.png`` -> ``a.b/c``, ``seg.png``).  Fields are lower-cased
as webdataset does (``x1.JPEG`` -> field ``jpeg``; keys keep their case), so
``-f jpeg`` finds it and a tar written back names the member ``x1.jpeg``; a
sample built in Python is written with its fields as given.  Entries whose names
start and end with ``__`` (``__source__``) are metadata: they travel with the
sample and are never written as members."""

import re

from .limits import quote

#: Longest member name (UTF-8 bytes) read or written: a longer one needs a pax
#: or GNU long-name header over the 1 MiB that the tar reader accepts
#: (:data:`tarproc.core.tario.MAX_SPECIAL`), so a writer refuses it rather
#: than write a tar nothing here could read back.
MAX_NAME_BYTES = (1 << 20) - 512


def is_meta(name):
    """Whether an entry of a sample is metadata (``__key__``, ``__source__``, ...)."""
    return name[:2] == "__" and name[-2:] == "__"


def is_extra_meta(name):
    """Metadata other than ``__key__`` (``__source__``, ``__index__``, ...)."""
    return name[:2] == "__" and name[-2:] == "__" and name != "__key__"


def split_name(name):
    """``(key, field)`` of a member name, or ``None`` when the file name has
    no dot or starts with one (such members are skipped).  The field is
    lower-cased (webdataset's ``group_by_keys(lcase=True)``)."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot <= slash + 1:
        return None
    return name[:dot], name[dot + 1 :].lower()


#: What :func:`classify` says of a member name that is not a field of a sample.
SKIPPED = "skipped"  # no extension (README, .hidden, ._x AppleDouble files): skipped and counted
UNSAFE = "unsafe"  # absolute, a '..' component, control characters, ...: refused (unsafe_name)
METADATA = "metadata"  # a field named like metadata (KEY.__x__): refused


class Refused:
    """Why a member name is not a field of a sample: ``kind`` is
    :data:`SKIPPED`, :data:`UNSAFE` or :data:`METADATA`; ``why`` the
    reason as counted (skipped) or the error message (refused)."""

    __slots__ = ("kind", "why")

    def __init__(self, kind, why):
        self.kind = kind
        self.why = why

    def __repr__(self):
        return f"Refused({self.kind!r}, {self.why!r})"


def classify(name):
    """THE sample name rule of every reader: ``(key, field)`` of a member
    name that is a field of a sample, else a :class:`Refused`.

    Grouping (:func:`~tarproc.core.grouping.group`), its fast twin
    (:func:`~tarproc.core.passthru.fast_group`) and ``tarcheck``
    (:mod:`tarproc.sinks.check`) all ask this: an unsafe name
    (:func:`unsafe_name`) is refused, a name without an extension is
    skipped (:func:`unnamed` says why), a field named like metadata is
    refused, the rest split as :func:`split_name` splits them.  A member
    whose key differs from the key of the member before it starts a new
    sample (consecutive members with one key are one sample).  Names that
    :data:`PLAIN_NAME` matches are read by the fast path without asking:
    for them this gives the key and field that regex splits."""
    if not (name and name[0] != "/" and ".." not in name and name.isprintable()
            and len(name) <= MAX_NAME_BYTES // 4):
        why = unsafe_name(name)  # (the common name above passes it: no need to ask)
        if why:
            return Refused(UNSAFE, why)
    parts = split_name(name)
    if parts is None:
        return Refused(SKIPPED, unnamed(name))
    field = parts[1]
    if field[:2] == "__" and field[-2:] == "__":  # is_meta: it would replace __key__ or vanish on writing
        return Refused(METADATA, f"member name {quote(name)}: field {quote(field)} is a metadata name (__...__), "
                                 f"never a field")
    return parts


#: The name field of a plain header (bytes 0..100) whose name :func:`classify`
#: takes as it is, in one match: the key (groups(1): directories, then a base
#: name up to its first dot) and the field (group 2: printable ASCII, no
#: ``/``, lower case, not starting with ``_``), then NUL padding.  A match
#: without ``..`` in it is a name :func:`classify` splits the same way (the
#: fast path in :mod:`tarproc.core.passthru` reads such names without asking
#: it); every other name (upper-case fields, ``..``, ``__x__``, no extension,
#: not ASCII) is left to :func:`classify`.
PLAIN_NAME = re.compile(
    rb"((?:[ -.0-~]++/)*+[ -\-0-~]++)"  # the key
    rb"\.([ -.0-@\[-^`-~][ -.0-@\[-~]*+)\x00*+",  # the field, the padding
    re.S,
)


def unnamed(name):
    """Why a member name that :func:`split_name` rejects is skipped, as
    counted in reports: macOS AppleDouble files (``._photo.jpg``, the resource
    fork bsdtar and Finder archive beside ``photo.jpg``) are named as such;
    the rest (``README``, ``.hidden``) have no extension."""
    if name[name.rfind("/") + 1 :][:2] == "._":
        return "macOS AppleDouble files (._*)"
    return "names without an extension"


def _controls(text):
    """Whether ``text`` has control characters (C0, DEL or C1: tab, newline,
    ESC, CSI, ...).  Names are checked with this, on reading and on writing."""
    if text.isprintable():
        return False
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def _encodable(text):
    """Whether ``text`` encodes as a member name (UTF-8; the surrogates
    ``\\udc80``-``\\udcff`` stand for the bytes of a name that is not UTF-8)."""
    try:
        text.encode("utf-8", "surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


def unsafe_name(name):
    """Why a member name is refused, or ``None`` when it is acceptable.

    THE name rule, used by readers (grouping, ``tarcheck``) and by every
    writer (:class:`~tarproc.core.grouping.SampleWriter`, ``tarcreate``), so
    that what the toolkit writes it can read back.  Absolute names, ``..``
    components, empty names and control characters (tab, newline, ESC, C1)
    are refused: they are the ways a name can escape a directory or break a
    line-oriented tool or a terminal downstream."""
    if not name:
        return "empty member name"
    if name.startswith("/"):
        return f"absolute member name {quote(name)}"
    if ".." in name and ".." in name.split("/"):
        return f"member name {quote(name)} has a '..' component"
    if _controls(name):
        return f"member name {quote(name)} has control characters"
    if not name.isprintable() and not _encodable(name):
        return f"member name {quote(name)} cannot be encoded in UTF-8 (a lone surrogate)"
    if len(name) > MAX_NAME_BYTES // 4:
        size = len(name.encode("utf-8", "surrogatepass"))
        if size > MAX_NAME_BYTES:
            return f"member name {quote(name)} is longer than {MAX_NAME_BYTES:,} bytes ({size:,} in UTF-8)"
    return None


def bad_field_name(field):
    """Why ``field`` cannot be a field (a member name suffix), ``None`` if it can.

    The empty field is a field: the member ``KEY.`` (a name ending in a dot)
    groups as field ``""`` of sample ``KEY``, as webdataset reads it, and is
    written back as ``KEY.``: it round-trips, so every writer accepts it.
    So do ``.`` and ``..`` (the members ``KEY..`` and ``KEY...``): a field
    is never a path component of its own."""
    if not isinstance(field, str):
        return "field name is not a string"
    if "/" in field or "\0" in field:
        return f"field name {quote(field)} contains '/' or NUL"
    if _controls(field):
        return f"field name {quote(field)} has control characters"
    if not field.isprintable() and not _encodable(field):
        return f"field name {quote(field)} cannot be encoded in UTF-8 (a lone surrogate)"
    if len(field) > MAX_NAME_BYTES // 4 and len(field.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"field name {quote(field)} is longer than {MAX_NAME_BYTES:,} bytes"
    return None


def bad_key(key):
    """Why ``key`` cannot be written as a sample key (``None`` if it can):
    it would not read back as this key (:func:`unsafe_name`, a dot in its
    file name, a trailing ``/``)."""
    if not isinstance(key, str) or not key:
        return "empty key"
    if "\0" in key:
        return f"unsafe key {quote(key)}"
    why = unsafe_name(key)
    if why:
        return "unsafe key: " + why.replace("member name ", "")
    if key.endswith("/") or "." in key[key.rfind("/") + 1 :]:
        return f"key {quote(key)} has a dot in its file name or ends in '/'"
    return None


def bad_member(key, field):
    """Why the member ``KEY.FIELD`` cannot be written (``None`` if it can):
    the check of every writer."""
    return bad_key(key) or bad_field_name(field)


def starts_another(error, key):
    """Whether ``error`` (raised by the tar reader) came while reading the
    data of a member (its name in ``error.member``) that starts a sample
    other than ``key``: the sample ``key`` is then whole, and grouping gives
    it before the error."""
    name = getattr(error, "member", None)
    parts = split_name(name) if isinstance(name, str) else None
    return parts is not None and parts[0] != key
