"""Remote outputs' client commands: a client fed on stdin with its stderr's
tail kept for the error message (:class:`Client`), a client command run to
its end (:func:`run_client`: the server-side move, remove and list of
``TARPROC_REMOTE_COMMIT=move``), and :func:`cleanup_remote` (``tarcat
--cleanup s3://…``).  The commands come from the scheme table
(:mod:`tarproc.runtime.schemes`); the processes are
:class:`~tarproc.runtime.child.Child` processes."""

from ..errors import OutputError, describe_exit
from ..runtime.child import Child
from ..runtime.schemes import command
from .partials import parse_partial


def run_client(action, url, what, settings=None, **more):
    """Run the client command of ``action`` (``MOVE``, ``REMOVE``, ``LIST``)
    for ``url`` to its end; its stdout (text), or :class:`OutputError`
    naming ``url`` with the client's last stderr line (from the last
    ``settings.tail_bytes`` of it)."""
    cmd = command(action, url, settings, **more)
    try:
        child = Child(cmd, url, tail_bytes=settings.tail_bytes if settings is not None else None)
    except OSError as e:
        raise OutputError(Child.start_error(url, cmd, e)) from None
    try:
        out = child.stdout.read()
    except BaseException:
        child.kill()
        raise
    finally:
        child.stdout.close()
    rc = child.wait()
    if rc != 0:
        raise OutputError(f"{child.name}: {what} failed: {child.what} exited with {describe_exit(rc)}"
                          f"{child.tail_line()}")
    return out.decode("utf-8", "replace")


def cleanup_remote(prefix, settings=None):
    """Remove the temporary objects (``.NAME.HOST-RANDOM.PID.tarproc-partial``)
    directly under an ``s3://`` or ``gs://`` prefix, by listing it and
    removing with the client.  Object stores have no locks: run it when no
    writer uses ``TARPROC_REMOTE_COMMIT=move`` on that prefix (the default
    spooling never leaves temporary objects).  ``settings``: its
    ``LIST_<SCHEME>`` and ``REMOVE_<SCHEME>`` commands."""
    base = prefix if prefix.endswith("/") else prefix.rsplit("/", 1)[0] + "/"
    listing = run_client("LIST", base, "list", settings)
    removed = []
    for line in listing.splitlines():
        name = line.split()[-1] if line.split() else ""
        name = name.rsplit("/", 1)[-1]
        if parse_partial(name) is None:
            continue
        url = base + name
        run_client("REMOVE", url, "remove", settings)
        removed.append(url)
    return removed


class Client:
    """A client command fed on stdin (a pipe or a file descriptor).  Its
    stdout goes to our stderr (``stdout="inherit"``: to our stdout, for a
    ``pipe:`` output); its stderr's tail (its last ``tail_bytes``,
    ``TARPROC_TAIL_BYTES``) is kept for the error message (``replay``: and
    written to our stderr when it succeeded, so that a failure is one line)."""

    def __init__(self, cmd, url, stdin, stdout=None, replay=False, tail_bytes=None):
        what = "command" if url.startswith("pipe:") else None
        self.replay = replay
        try:
            self.child = Child(cmd, url, what, stdin=stdin, stdout="stderr" if stdout is None else stdout,
                               tail_bytes=tail_bytes)
        except OSError as e:
            raise OutputError(Child.start_error(url, cmd, e)) from None

    @property
    def running(self):
        return self.child.returncode is None

    def wait(self, early=False):
        """Wait for the end; OutputError naming the URL if it failed (or,
        ``early``, if it quit before reading all the output)."""
        child = self.child
        if child.wait() != 0:
            raise OutputError(child.failure())
        if self.replay and not early:
            _replay(*child.kept_stderr())
        if early:
            raise OutputError(f"{child.name}: {child.what} exited before reading all the output{child.tail_line()}")

    def kill(self):
        """Kill the client and everything it started (its process group)."""
        self.child.kill()


def _replay(data, dropped):
    """Write a succeeded command's kept stderr to ours (the first
    ``dropped`` bytes are gone: a line says so)."""
    import sys

    if not data:
        return
    try:
        sys.stderr.flush()
        if dropped:
            sys.stderr.buffer.write(b"[%d bytes of the command's stderr left out]\n" % dropped)
        sys.stderr.buffer.write(data)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
