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
from helpers import text_shard as shard

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


def _kill_parent_and_check(argv, marker, tmp_path, want=2, settle=0.0):
    parent = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while len(_running(marker)) < want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_running(marker)) >= want, "the commands did not start"
        time.sleep(settle)
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
    # (posix_spawn has no hook that runs before the program: a per-sample command is
    # registered with the watchdog just after it starts, and a parent killed in that
    # gap, a few bytecodes, leaves it; settle: the gap is past, as it is but for an
    # OOM kill at that very moment; Child's children register before exec, no settle)
    _kill_parent_and_check(["tarproc", "-p", "2", "-c", f"sleep {marker}; true", "a.tar", "-o", "out.tar"],
                           marker, tmp_path, settle=0.3)
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


