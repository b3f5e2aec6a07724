"""Which names tarserve serves: the SOURCE-PREFIX and the strict decoding of
a request target into a shard name under it."""

import os
import re

from ..errors import UsageError

MAX_NAME = 1024
MAX_SEGMENT = 255
MAX_DEPTH = 16

_SEGMENT_RE = re.compile(r"[A-Za-z0-9_~+=,@-][A-Za-z0-9._~+=,@-]*\Z")
_SCHEMES = ("file", "http", "https", "gs", "s3")
#: What a listing shows.
SHARD_SUFFIXES = (".tar", ".tgz", ".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst")


# ---------------------------------------------------------------- names


def check_prefix(prefix):
    """The kind of a SOURCE-PREFIX (``file``, ``http``, ``https``, ``gs``,
    ``s3``) and its normal form; a usage error for ``-``, ``pipe:`` and
    unknown schemes (a name must never reach a shell command line)."""
    from ..sources.open import scheme_of

    if not prefix:
        raise UsageError("empty SOURCE-PREFIX")
    scheme = scheme_of(prefix)
    if scheme not in _SCHEMES:
        raise UsageError(f"SOURCE-PREFIX {prefix!r}: cannot serve from {scheme!r} "
                         f"(a directory, http(s)://, gs:// or s3://)")
    if scheme == "file":
        if not os.path.isdir(prefix):
            raise UsageError(f"SOURCE-PREFIX {prefix!r}: not a directory")
        return scheme, os.path.realpath(prefix)
    if "?" in prefix or "#" in prefix:
        raise UsageError(f"SOURCE-PREFIX {prefix!r}: no query or fragment")
    return scheme, prefix.rstrip("/")


def decode_name(target):
    """The shard name of a request target (``/NAME``), or raise
    ``ValueError`` with the reason.  ``""`` is the listing."""
    if not target.startswith("/"):
        raise ValueError("target must start with /")
    if "?" in target or "#" in target:
        raise ValueError("no query or fragment")
    raw = target[1:]
    if len(raw) > 3 * MAX_NAME:
        raise ValueError("name too long")
    out = bytearray()
    i = 0
    data = raw.encode("ascii", "strict")
    while i < len(data):
        c = data[i]
        if c == 0x25:  # %XX, exactly two hex digits, decoded once
            hexpart = data[i + 1:i + 3]
            if len(hexpart) != 2 or not all(ch in b"0123456789abcdefABCDEF" for ch in hexpart):
                raise ValueError("bad percent-encoding")
            out.append(int(hexpart, 16))
            i += 3
        else:
            out.append(c)
            i += 1
    name = out.decode("ascii")  # the allowed names are ASCII
    if len(name) > MAX_NAME:
        raise ValueError("name too long")
    if name == "":
        return ""
    segments = name.split("/")
    if len(segments) > MAX_DEPTH:
        raise ValueError("name too deep")
    for seg in segments:
        if len(seg) > MAX_SEGMENT or not _SEGMENT_RE.match(seg):
            raise ValueError("name not allowed")
    return name
