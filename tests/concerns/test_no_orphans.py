"""The commands a reader starts for its inputs (pipe:, downloads) end with it:
killed as a process group, and with the reader when it is killed outright
(SIGKILL, as the OOM killer does), never left running as orphans."""

import io
import os
import signal
import subprocess
import tarfile
import time

import pytest

import make_corpus as mc


def test_sigkill_of_a_reader_takes_its_pipe_command_along(tmp_path):
    """A ``pipe:`` input that is one simple command is exec'ed by the shell,
    so the parent-death signal reaches the command itself: a reader killed
    outright leaves no input command behind (``sh -c`` forked it before)."""
    tag = f"{os.getpid()}{time.monotonic_ns() % 100000}"
    p = subprocess.Popen(["tarcat", f"pipe:sleep 3{tag}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)

    def sleepers():
        out = subprocess.run(["pgrep", "-f", f"^sleep 3{tag}$"], capture_output=True).stdout.split()
        return [int(pid) for pid in out]

    deadline = time.monotonic() + 20
    while not sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleepers(), "the pipe command did not start"  # the command itself, not its shell
    p.kill()
    assert p.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = sleepers()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []


def names_of(data):
    """Member names (bytes) of the regular members, read by tarfile."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*", encoding="utf-8", errors="surrogateescape") as tf:
        return [m.name.encode("utf-8", "surrogateescape") for m in tf if m.isfile()]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_pipe_source_is_killed_as_a_process_group(tmp_path):
    """`pipe:` runs `sh -c CMD`: a reader that stops early (-c 1) must stop the
    whole command, not only the shell (its children kept running before)."""
    data = mc.member(b"a.txt", b"x") + mc.member(b"b.txt", b"y")
    (tmp_path / "a.tar").write_bytes(data)
    pidfile = tmp_path / "pid"
    # a grandchild sleeps (the shell's child, not the shell), then the producer
    # sends two samples (the pid file is written before any data: no race)
    cmd = f"pipe:sleep 300 & echo $! > pid; cat a.tar; wait"
    t0 = time.monotonic()
    p = subprocess.run(["tarcat", "-c", "1", cmd], cwd=tmp_path, capture_output=True, timeout=60)
    assert time.monotonic() - t0 < 30
    assert p.returncode == 0, p.stderr
    assert names_of(p.stdout) == [b"a.txt"]
    pid = int(pidfile.read_text())
    for _ in range(100):
        if not _alive(pid):
            break
        time.sleep(0.05)
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive, "the pipe: command's child outlived the reader"


def test_download_dies_with_a_reader_killed_outright(tmp_path):
    """A reader SIGKILLed (a preempted pod, the OOM killer) runs no cleanup:
    the download program itself must carry the parent-death signal, not only
    the shell that started it."""
    import http.server
    import threading

    body = mc.member(b"a.txt", b"x")
    gate = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            gate.wait(60)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/slow-{os.getpid()}.tar"
    p = subprocess.Popen(["tarcat", url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        curl = []
        for _ in range(200):
            curl = [int(x) for x in subprocess.run(["pgrep", "-f", f"curl.*{url}"], capture_output=True,
                                                   text=True).stdout.split()]
            if curl:
                break
            time.sleep(0.05)
        assert curl, "the download never started"
        p.kill()
        p.wait()
        for _ in range(100):
            if not any(_alive(c) for c in curl):
                break
            time.sleep(0.05)
        left = [c for c in curl if _alive(c)]
        for c in left:
            os.kill(c, 9)
        assert not left, "curl outlived a reader killed with SIGKILL"
    finally:
        gate.set()
        httpd.shutdown()


_STOP_DURING_START = """
import os, signal, sys, time
from tarproc.runtime import child as C
from tarproc.sources.open import stop_sources

def unwind():
    raise SystemExit(143)

def on_term(signum, frame):
    if sys.argv[1] == "exit":  # as a tarpcat worker does: end the inputs, exit at once
        C.when_started(lambda: (stop_sources(), os._exit(143)))
    else:  # as the commands' guard does: raise, unwind (stop_tracked at exit)
        C.when_started(unwind, this_thread=True)

signal.signal(signal.SIGTERM, on_term)
real = C.popen

def popen(*args, **kwargs):  # the stop arrives just after the fork, before the child is registered
    proc = real(*args, **kwargs)
    print(proc.pid, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    return proc

C.popen = popen
C.Child("sleep 0; sleep 300", "test", stdout=None, track=True)
print("not stopped", flush=True)
"""


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.parametrize("how", ["exit", "raise"])
def test_a_stop_while_a_child_starts_ends_that_child_too(tmp_path, how):
    """A SIGTERM whose handler ends the process's children arrived between
    the fork of an input command and its registration (seen under load: a
    tarpcat worker told to stop left `sleep` of a `pipe:cat x; sleep N`
    input running).  The handler's stop now waits for the start to complete
    (``when_started``), and a handler that raises there kills the child it
    interrupted: the command's whole group is gone."""
    import sys

    p = subprocess.run([sys.executable, "-c", _STOP_DURING_START, how], cwd=tmp_path, capture_output=True,
                       timeout=60)
    lines = p.stdout.split()
    assert p.returncode == 143 and len(lines) == 1, (p.returncode, p.stdout, p.stderr)
    pgid = int(lines[0])
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _group_alive(pgid)
    if alive:
        os.killpg(pgid, signal.SIGKILL)
    assert not alive
