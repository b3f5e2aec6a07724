"""The temporary names outputs are written under until committed
(``.NAME.HOST-RANDOM.PID.tarproc-partial``), beside a local output or an
object of ``TARPROC_REMOTE_COMMIT=move``: making and recognising them."""

import os

from ..runtime.lease import split_token, token

PARTIAL_SUFFIX = ".tarproc-partial"


def partial_name(path, pid=None, tok=None):
    """The temporary name an output is written under until committed:
    hidden, beside it, ``.NAME.HOST-RANDOM.PID.tarproc-partial``."""
    d, base = os.path.split(path)
    return os.path.join(d, f".{base}.{tok or token()}.{pid or os.getpid()}{PARTIAL_SUFFIX}")


def parse_partial(name):
    """``(target, host, pid)`` of a temporary name (``host`` is None for the
    old ``.NAME.PID.tarproc-partial`` form), or None if it is not one."""
    if not (name.startswith(".") and name.endswith(PARTIAL_SUFFIX)):
        return None
    rest, _, pid = name[1:-len(PARTIAL_SUFFIX)].rpartition(".")
    if not pid.isdigit() or not rest:
        return None
    target, _, tok = rest.rpartition(".")
    parts = split_token(tok)
    if parts and target:
        return target, parts[0], int(pid)
    return rest, None, int(pid)
