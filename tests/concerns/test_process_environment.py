"""The process environment a command starts in: closed standard streams,
an inherited ``SIGCHLD`` ignored, a parent killed outright (the OOM killer),
and other processes (another PID namespace) sharing a temporary directory.
The CLI fixes its streams and signals at start (``cli/base.run``); the
library's children are tied to it by a watchdog (``runtime/procs.Watchdog``)."""

import io
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from helpers import one_line, tar_bytes
import make_corpus as mc

IGNORE_SIGCHLD = ("import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
                  "os.execvp(sys.argv[1], sys.argv[1:])")


def _shard(tmp_path, n=4):
    (tmp_path / "a.tar").write_bytes(tar_bytes([(f"s{i}.txt", b"%d" % i) for i in range(n)]))


def test_closed_stderr_valid_input_works_and_stdout_stays_data(sh, tmp_path):
    _shard(tmp_path)
    p = sh("tarcat a.tar 2>&-")
    assert tarfile.open(fileobj=io.BytesIO(p.stdout)).getnames() == [f"s{i}.txt" for i in range(4)]
    for cmd in ("tarshow a.tar 2>&-", "tar2tsv a.tar 2>&-", "tarcheck a.tar 2>&-"):
        assert b"s0" in sh(cmd).stdout or b"4 samples" in sh(cmd).stdout, cmd
    # a failure with stderr closed: its message goes nowhere, never into the data
    p = sh("tarcat missing.tar 2>&-", ok=False)
    assert p.returncode == 2 and p.stdout == b""
    p = sh("tarcat -v a.tar 2>&- | tar tf -")
    assert p.stdout.split() == [b"s0.txt", b"s1.txt", b"s2.txt", b"s3.txt"]


def test_closed_stdin_and_stdout(sh, tmp_path):
    _shard(tmp_path)
    p = sh("tarcat a.tar >&- <&-", ok=False)
    assert p.returncode != 0 and b"Traceback" not in p.stderr and len(p.stderr.splitlines()) <= 2
    sh("tarcat a.tar -o out.tar <&-")
    assert tarfile.open(tmp_path / "out.tar").getnames()[0] == "s0.txt"


def test_sigchld_ignored_failures_still_count(sh, tmp_path):
    _shard(tmp_path)
    wrap = f"{sys.executable} -c '{IGNORE_SIGCHLD}'"
    p = sh(f"{wrap} tarproc -c 'exit 3' a.tar > out.tar", ok=False)
    assert p.returncode == 1, p.stderr
    assert b"exit status 3" in p.stderr
    p = sh(f"{wrap} tarproc -c 'test $(cat sample.txt) != 2' a.tar > out.tar", ok=False)
    assert p.returncode == 1
    p = sh(f"{wrap} kujob -s '{{1..2}}' -- sh -c 'exit 4'", ok=False)
    assert p.returncode == 1, p.stderr


def _running(marker):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{pid}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmd and state != b"Z":
                found.append(int(pid))
    return found


def _kill_parent_and_check(argv, marker, tmp_path, want=2):
    parent = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while len(_running(marker)) < want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_running(marker)) >= want, "the commands did not start"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while _running(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = _running(marker)
        assert not left, f"orphans still running: {left}"
    finally:
        for pid in _running(marker):
            os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_per_sample_commands_die_with_a_killed_parent(tmp_path):
    _shard(tmp_path)
    marker = f"{os.getpid() % 1000 + 17}.4242"
    # a pipeline in the shell: the sleep is the shell's child, not ours
    _kill_parent_and_check(["tarproc", "-p", "2", "-c", f"sleep {marker}; true", "a.tar", "-o", "out.tar"],
                           marker, tmp_path)
    assert not (tmp_path / "out.tar").exists()


def test_per_shard_commands_die_with_a_killed_parent(tmp_path):
    marker = f"{os.getpid() % 1000 + 17}.4343"
    _kill_parent_and_check(["kujob", "-j", "2", "-s", "{1..2}", "--", f"sleep {marker}; true"], marker, tmp_path)


def test_sort_spill_held_by_a_live_sort_elsewhere_is_kept(sh, tmp_path):
    """A sort in another PID namespace: its PID means nothing here (99999999
    names no process), its lock on the spill directory's .lock says it lives."""
    from tarproc.runtime.lease import host_id

    _shard(tmp_path, 50)
    spill = tmp_path / "spill"
    spill.mkdir()
    other = spill / f"tarsort-99999999-{host_id()}-abc123"
    other.mkdir()
    (other / "run-000001.pickle").write_bytes(b"not yours")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; "
                               "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                               str(other / ".lock")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        sh("tarsort --memory 1 --tmpdir spill a.tar > sorted.tar")
        assert (other / "run-000001.pickle").read_bytes() == b"not yours"
        assert len(tarfile.open(tmp_path / "sorted.tar").getnames()) == 50
    finally:
        holder.kill()
        holder.wait()
    # the lock is free: a dead sort's leftovers (same kernel) are removed by the next sort
    sh("tarsort --memory 1 --tmpdir spill a.tar > sorted.tar")
    assert not other.exists()


def tar_of(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def shard(n, prefix="s"):
    return tar_of([(f"{prefix}{i:03d}.txt", f"text {prefix} {i}\n".encode()) for i in range(n)])


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


@pytest.mark.parametrize("cmd", ["lines2tar l.txt", "tarmix mix.json", "tarindex -q a.tar", "tar2json a.tar",
                                 "tarcat a.tar"])
def test_closed_stdout_is_a_write_error_never_another_file(cmd, tmp_path):
    """Started with stdout closed (`>&-`), the first file a command opened
    became fd 1: a misleading 'input file is output file', or a traceback
    (sys.stdout is None).  Now fd 1 is held closed-like: one line, exit 1,
    and no file receives the output."""
    (tmp_path / "a.tar").write_bytes(shard(2))
    (tmp_path / "l.txt").write_text("x\ny\n")
    (tmp_path / "mix.json").write_text('{"sources": [{"shards": "a.tar"}]}')
    before = {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)}
    p = run(f"{cmd} >&-", tmp_path)
    assert p.returncode == 1, p.stderr
    assert one_line(p).endswith("write failed: Bad file descriptor")
    assert {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)} == before


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
