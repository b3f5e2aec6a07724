"""The sample rules, in one place: how a member name splits into key and field,
which entries are metadata, and which names, keys and fields may be read or
written.

The key of a member is its directory plus the part of its file name before the
first dot; the field is the rest (``train/n0142.jpg`` -> ``train/n0142``,
``jpg``; ``a.b/c.seg.png`` -> ``a.b/c``, ``seg.png``).  Fields are lower-cased
as webdataset does (``x1.JPEG`` -> field ``jpeg``; keys keep their case), so
``-f jpeg`` finds it and a tar written back names the member ``x1.jpeg``; a
sample built in Python is written with its fields as given.  Entries whose names
start and end with ``__`` (``__source__``) are metadata: they travel with the
sample and are never written as members."""

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


def unsafe_name(name):
    """Why a member name is refused, or ``None`` when it is acceptable.

    Absolute names, ``..`` components, empty names and control characters
    are refused: they are the ways a name can escape a directory or break a
    line-oriented tool downstream."""
    if not name:
        return "empty member name"
    if name.startswith("/"):
        return f"absolute member name {name!r}"
    if ".." in name and ".." in name.split("/"):
        return f"member name {name!r} has a '..' component"
    if not name.isprintable() and any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"member name {name!r} has control characters"
    return None


def bad_field_name(field):
    """Why ``field`` cannot be a file name suffix (``None`` if it can)."""
    if not isinstance(field, str) or not field:
        return "empty field name"
    if "/" in field or "\0" in field:
        return f"field name {field!r} contains '/' or NUL"
    if field in (".", ".."):
        return f"field name {field!r}"
    return None


def bad_key(key):
    """Why ``key`` cannot be written as a sample key (``None`` if it can)."""
    if not isinstance(key, str) or not key:
        return "empty key"
    if "\0" in key or key.startswith("/") or ".." in key.split("/"):
        return f"unsafe key {key!r}"
    if key.endswith("/") or "." in key[key.rfind("/") + 1 :]:
        return f"key {key!r} has a dot in its file name or ends in '/'"
    return None
