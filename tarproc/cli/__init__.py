"""The command-line layer: one small module per command (options -> stages -> run).

The library (``tarproc.*``) never imports this package.
"""

import os as _os
import signal as _signal
import sys as _sys


def interrupted_early(signum, frame):
    """Ctrl-C while a command is still being imported (before
    :func:`~tarproc.cli.base.run` takes over): the one line every command
    says, exit 130, instead of a KeyboardInterrupt traceback from an import."""
    prog = _os.path.basename(_sys.argv[0])
    try:
        _os.write(2, f"{prog}: interrupted\n".encode("utf-8", "replace"))
    finally:
        _os._exit(130)


# only in a command's own process (its console script or bin/ script is the
# main program), never in a program that imports a command module
_ALIASES = ("tarcats", "tarscat", "tsv2tar")  # (console scripts named unlike their module)
_MAIN = _os.path.basename(_sys.argv[0]) if _sys.argv else ""
if (_MAIN in _ALIASES or _os.path.isfile(_os.path.join(_os.path.dirname(__file__), _MAIN + ".py"))) \
        and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, interrupted_early)
