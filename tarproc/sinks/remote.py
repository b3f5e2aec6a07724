"""Remote outputs' client commands: running a client with its stderr kept
for the error message (:class:`_Client`, :func:`_run_client`), the
server-side move, remove and list commands of ``TARPROC_REMOTE_COMMIT=move``
and :func:`cleanup_remote` (``tarcat --cleanup s3://…``)."""

import os
import sys

from ..errors import OutputError, UsageError
from ..runtime.procs import pdeathsig, exec_simple, popen
from ..sources.open import fill_command, scheme_of


#: Server-side moves (``TARPROC_REMOTE_COMMIT=move``); ``{src}`` is the temporary object.
MOVE_COMMANDS = {
    "gs": "gsutil -q mv {src} {url}",
    "s3": "aws s3 mv {endpoint}{src} {url}",
}
#: Removing an object (temporary objects of ``move``; ``tarcat --cleanup URL``).
REMOVE_COMMANDS = {
    "gs": "gsutil -q rm {url}",
    "s3": "aws s3 rm {endpoint}{url}",
}
#: Listing the objects under a prefix (``tarcat --cleanup URL``), one per line.
LIST_COMMANDS = {
    "gs": "gsutil ls {url}",
    "s3": "aws s3 ls {endpoint}{url}",
}

def _remote_command(table, url, what, settings=None, **more):
    scheme = scheme_of(url)
    template = (settings.command(what, scheme) if settings is not None else None) or table.get(scheme)
    if template is None:
        raise UsageError(f"{url}: cannot {what.lower()} {scheme}:// objects "
                         f"(set TARPROC_{what}_{scheme.upper()} to a command that can)")
    return fill_command(template, url, scheme, **more)  # (one pass: no value lands inside another's quotes)


def cleanup_remote(prefix, settings=None):
    """Remove the temporary objects (``.NAME.HOST-RANDOM.PID.tarproc-partial``)
    directly under an ``s3://`` or ``gs://`` prefix, by listing it and
    removing with the client.  Object stores have no locks: run it when no
    writer uses ``TARPROC_REMOTE_COMMIT=move`` on that prefix (the default
    spooling never leaves temporary objects).  ``settings``: its
    ``LIST_<SCHEME>`` and ``REMOVE_<SCHEME>`` commands."""
    base = prefix if prefix.endswith("/") else prefix.rsplit("/", 1)[0] + "/"
    p = _run_client(_remote_command(LIST_COMMANDS, base, "LIST", settings), prefix, "list")
    removed = []
    for line in p.splitlines():
        name = line.split()[-1] if line.split() else ""
        name = name.rsplit("/", 1)[-1]
        from .output import parse_partial

        if parse_partial(name) is None:
            continue
        url = base + name
        _run_client(_remote_command(REMOVE_COMMANDS, url, "REMOVE", settings), url, "remove")
        removed.append(url)
    return removed


def _run_client(cmd, url, what):
    """Run a client command to its end; its stdout, or OutputError naming
    ``url`` with the client's last stderr line."""
    import subprocess

    try:
        p = subprocess.run(exec_simple(cmd), shell=True, stdin=subprocess.DEVNULL, capture_output=True,
                           preexec_fn=pdeathsig)
    except OSError as e:
        raise OutputError(f"{url}: cannot start {cmd!r}: {e.strerror}") from None
    if p.returncode != 0:
        raise OutputError(f"{url}: {what} failed: {_first_word(cmd)} exited with status {p.returncode}"
                          f"{_last_line(p.stderr)}")
    return p.stdout.decode("utf-8", "replace")


def _first_word(cmd):
    return cmd.split()[0] if cmd.split() else "command"


def _last_line(data, limit=300):
    lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[-1].strip()
    return ": " + (line if len(line) <= limit else line[: limit - 3] + "...")


class _Client:
    """A client command fed on stdin (a pipe or a file), its stderr kept in
    a temporary file for the error message."""

    def __init__(self, cmd, url, stdin, stdout=None, replay_stderr=False):
        import tempfile

        self.url = url
        self.what = _first_word(cmd) if not url.startswith("pipe:") else "command"
        self.replay = replay_stderr
        self.err = tempfile.TemporaryFile()
        try:
            out = sys.stderr.fileno() if stdout is None else (None if stdout == "inherit" else stdout)
            # its own process group, so that abort() kills the client even
            # when the shell forked it (sh -c 'aws ...') rather than exec'd
            self.proc = popen(exec_simple(cmd), shell=True, stdin=stdin, stderr=self.err, stdout=out, process_group=0)
        except OSError as e:
            self.err.close()
            raise OutputError(f"{url}: cannot start {cmd!r}: {e.strerror}") from None

    def _stderr(self):
        try:
            self.err.seek(0)
            return self.err.read()
        except (OSError, ValueError):
            return b""

    def wait(self, early=False):
        """Wait for the end; OutputError naming the URL if it failed (or,
        ``early``, if it quit before reading all the output)."""
        rc = self.proc.wait()
        data = self._stderr()
        self.err.close()
        if self.replay and data and rc == 0 and not early:
            try:
                sys.stderr.flush()
                sys.stderr.buffer.write(data)
                sys.stderr.flush()
            except (OSError, ValueError, AttributeError):
                pass
        if rc != 0:
            from ..errors import describe_exit

            raise OutputError(f"{self.url}: {self.what} failed with {describe_exit(rc)}{_last_line(data)}")
        if early:
            raise OutputError(f"{self.url}: {self.what} exited before reading all the output{_last_line(data)}")

    def kill(self):
        """Kill the client and everything it started (its process group)."""
        from ..runtime.procs import killpg

        killpg(self.proc.pid)  # the group outlives its leader: kill it even after the shell exited
        self.proc.wait()
        try:
            self.err.close()
        except OSError:
            pass
