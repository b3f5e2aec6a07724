"""Old module paths (``tarproc.samples``, ``tarproc.urls``, ...) during the
move to the layout of DESIGN.md; each shim finds a name in its new home."""

import importlib


def shim(homes):
    def __getattr__(name):
        for home in homes:
            module = importlib.import_module(home)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(name)

    return __getattr__
