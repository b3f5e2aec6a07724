"""Stalls: a source about to block on an empty pipe tells a :class:`Stall`,
whose hooks flush what buffers output (a sink's buffer, a partial batch of
``map_function``), so output keeps pace with slow input.

A pipeline makes one ``Stall`` and passes it to its source (``iter_samples``,
``open_source``), its stages (``map_function``, ``map_command``) and its sink
(``open_sink``); there is no module-level list of hooks."""


class Stall:
    """A list of flush hooks; calling the object runs them."""

    __slots__ = ("hooks",)

    def __init__(self):
        self.hooks = []

    def add(self, hook, first=False):
        if first:
            self.hooks.insert(0, hook)
        else:
            self.hooks.append(hook)

    def remove(self, hook):
        if hook in self.hooks:
            self.hooks.remove(hook)

    def __bool__(self):
        return bool(self.hooks)

    def __call__(self):
        for hook in list(self.hooks):
            try:
                hook()
            except (BrokenPipeError, ValueError):
                pass
