"""Stall hooks: buffered outputs register a flush; a source about to block on
an empty pipe calls them first, so output keeps pace with slow input."""

# Sinks that buffer output register a flush here; a source about to block on
# an empty pipe calls them first, so output keeps pace with slow input.
_stall_hooks = []


def _on_stall():
    for hook in list(_stall_hooks):
        try:
            hook()
        except (BrokenPipeError, ValueError):
            pass
