"""Stalls: a source about to block on an empty pipe tells a :class:`Stall`,
whose hooks flush what buffers output (a sink's buffer, a partial batch of
``map_function``), so output keeps pace with slow input.

A pipeline makes one ``Stall`` and passes it to its source (``iter_samples``,
``open_source``), its stages (``map_function``, ``map_command``) and its sink
(``open_sink``); there is no module-level list of hooks."""


class Stall:
    """A list of flush hooks; calling the object runs them."""

    __slots__ = ("hooks", "broken")

    def __init__(self):
        self.hooks = []
        self.broken = False  # a hook met a closed pipe: the output's reader has gone

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
        """Run the hooks.  A hook that meets a closed pipe (the reader of
        the output has gone) raises :class:`BrokenPipeError` to the caller,
        now and at every later call: the source, the engine or the batcher
        that stalled stops there, as ``cat`` stops at its next write, rather
        than work on for nobody.  A hook on an already closed file is
        skipped."""
        if self.broken:
            raise BrokenPipeError("the output's reader has gone")
        for hook in list(self.hooks):
            try:
                hook()
            except BrokenPipeError:
                self.broken = True
                raise
            except ValueError:
                pass
