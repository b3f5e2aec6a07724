"""Sizes, read and written, with one convention everywhere (README.md,
"Sizes"): kB, MB, GB, TB are powers of 1000 and KiB, MiB, GiB, TiB powers of
1024; both are read (``1e9``, ``100MB``, ``64MiB``), and every size a
command prints (tarcheck, tarshow, the progress line) is written by
:func:`format_size` in the decimal units, labelled as such."""

from ..errors import UsageError

_UNITS = {"": 1, "k": 1000, "m": 10**6, "g": 10**9, "t": 10**12,
          "kb": 1000, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "b": 1}


def parse_size(text):
    """``1e9``, ``100MB``, ``64MiB``, ``1GiB``, ``512k`` to a number of bytes."""
    t = str(text).strip()
    i = len(t)
    while i and t[i - 1].isalpha():
        i -= 1
    num, unit = t[:i].strip(), t[i:].lower()
    try:
        value = float(num) * _UNITS[unit]
    except (ValueError, KeyError):
        raise UsageError(f"bad size {text!r} (use e.g. 1e9, 100MB, 64MiB, 1GiB)") from None
    if value < 0:
        raise UsageError(f"bad size {text!r}: negative")
    if value != value or value == float("inf"):  # nan, or beyond a float (1e400)
        raise UsageError(f"bad size {text!r} (use e.g. 1e9, 100MB, 64MiB, 1GiB)")
    return int(value)


def format_size(n):
    """A byte count for people, in decimal units (as ``-s 1MB`` reads them):
    ``999 B``, ``1.2 kB``, ``35 MB``, ``1.5 GB``; three significant digits
    at most."""
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("kB", "MB", "GB", "TB", "PB"):
        n /= 1000.0
        if n < 999.5 or unit == "PB":
            return f"{n:.1f} {unit}" if n < 9.95 else f"{n:.0f} {unit}"
