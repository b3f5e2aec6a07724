"""Sizes as people write them: ``1e9``, ``100MB``, ``64MiB``."""

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
