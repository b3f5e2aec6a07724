"""Every kind of child process the library starts (an input command, a
decoder program, an upload client, a tarsplit post command, a kujob shard)
gets the same rules from runtime/child: its own process group, death with
its parent (even by SIGKILL), a bounded stderr tail, an error line without
the URL's credentials, the right exit status with SIGCHLD ignored, and
valid standard streams with ours closed (``2>&-``).

The child is a probe (a small Python script standing in for the client,
the decoder or the command) that records its pid and process group, then
hangs, fails loudly or does its job.  The commands are the installed
ones, run in real pipes."""

import io
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from conftest import VENV_BIN
from helpers import tar_bytes

PY = sys.executable
SECRET = "S3CRETpw"
TAR = tar_bytes([("a.txt", b"one"), ("b.txt", b"two")])
TAR3 = tar_bytes([("a.txt", b"one"), ("b.txt", b"two"), ("c.txt", b"three")])  # b ends where c starts

PROBE = r'''
import os, shutil, sys, time
name = sys.argv[1]
with open(os.environ["PROBE_LOG"], "a") as f:
    f.write(f"{name} {os.getpid()} {os.getpgid(0)}\n")
mode = os.environ["PROBE_MODE"]
if mode == "hang":
    time.sleep(60)
elif mode == "fail":
    for _ in range(2000):  # 1 MB of chatter before the line that says what went wrong
        sys.stderr.write("x" * 499 + "\n")
    if os.environ.get("PROBE_SECRET"):
        sys.stderr.write("error: 403 Forbidden for https://user:%s@host/out.tar\n" % os.environ["PROBE_SECRET"])
    sys.exit(3)
elif mode == "long":  # one line of 20003 characters: what of it is kept depends on TARPROC_TAIL_BYTES
    sys.stderr.write("x" * 20000 + "END")
    sys.exit(3)
else:  # ok: some noise on stderr, then the job (copy PROBE_DATA or stdin to stdout or PROBE_OUT)
    sys.stderr.write("noise from the child\n")
    sys.stderr.flush()
    src = open(os.environ["PROBE_DATA"], "rb") if os.environ.get("PROBE_DATA") else sys.stdin.buffer
    dst = open(os.environ["PROBE_OUT"], "wb") if os.environ.get("PROBE_OUT") else sys.stdout.buffer
    shutil.copyfileobj(src, dst)
    dst.flush()
'''

KINDS = ["input", "input-pipeline", "decoder", "upload", "post", "kujob"]


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "x.tar").write_bytes(TAR)
    # a stand-in for the decoder program: the input only has to look like zstd
    (tmp_path / "x.tar.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 60)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "zstd"
    fake.write_text(f"#!/bin/sh\nexec {PY} {tmp_path / 'probe.py'} decoder\n")
    fake.chmod(0o755)
    return tmp_path


def setup(kind, tmp, mode):
    """``(argv, env, stdin bytes)`` of a command whose child of ``kind`` is the probe."""
    p = f"{PY} {tmp / 'probe.py'}"
    env = dict(os.environ, PROBE_LOG=str(tmp / "log"), PROBE_MODE=mode, PATH=f"{tmp / 'bin'}:{VENV_BIN}:"
               + os.environ["PATH"])
    if mode == "fail" and kind not in ("post", "kujob"):  # (those pass the child's stderr through)
        env["PROBE_SECRET"] = SECRET
    tarcat = f"{VENV_BIN}/tarcat"
    if kind == "input":
        env["PROBE_DATA"] = str(tmp / "x.tar")
        return [tarcat, f"pipe:{p} input"], env, None
    if kind == "input-pipeline":  # a shell pipeline: the parent-death signal reaches only the shell
        env["PROBE_DATA"] = str(tmp / "x.tar")
        return [tarcat, f"pipe:{p} input | cat"], env, None
    if kind == "decoder":
        env["PROBE_DATA"] = str(tmp / "x.tar")
        return [tarcat, str(tmp / "x.tar.zst")], env, None
    if kind == "upload":
        env.update(TARPROC_WRITE_HTTPS=f"{p} upload", PROBE_OUT=str(tmp / "uploaded.tar"))
        return [tarcat, str(tmp / "x.tar"), "-o", f"https://user:{SECRET}@host/out.tar"], env, None
    if kind == "post":
        return ([f"{VENV_BIN}/tarsplit", "-n", "1", "-o", str(tmp / "out-%06d.tar"),
                 "-p", f"{p} post https://user:{SECRET}@host/{{basename}}"], env, TAR3)
    if kind == "kujob":
        pipe = " | cat" if mode == "hang" else ""  # (a pipeline's status is its last command's)
        return [f"{VENV_BIN}/kujob", "-v", "-s", "0", "--", f"{p} kujob https://user:{SECRET}@host/x{pipe}"], env, None
    raise AssertionError(kind)


def logged(tmp, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            lines = (tmp / "log").read_text().splitlines()
        except FileNotFoundError:
            lines = []
        if lines:
            return [(name, int(pid), int(pgid)) for name, pid, pgid in (ln.split() for ln in lines)]
        time.sleep(0.05)
    raise AssertionError("the child never started")


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.parametrize("kind", KINDS)
def test_every_child_has_its_own_group_and_dies_with_its_parent(probe, kind):
    argv, env, data = setup(kind, probe, "hang")
    proc = subprocess.Popen(argv, env=env, cwd=probe, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    pid = None
    try:
        if data:
            proc.stdin.write(data)
            proc.stdin.flush()
        (name, pid, pgid), = logged(probe)
        assert pgid != os.getpgrp() and pgid != proc.pid  # its own group, not its parent's
        proc.send_signal(signal.SIGKILL)  # as the OOM killer does: no cleanup runs
        proc.wait()
        deadline = time.monotonic() + 10
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(pid), f"the {kind} child outlived its parent"
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        if pid is not None and not gone(pid):
            os.kill(pid, signal.SIGKILL)


IGNORE_SIGCHLD = ("import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
                  "os.execvp(sys.argv[1], sys.argv[1:])")
FAILURE_STATUS = {"input": 2, "input-pipeline": 2, "decoder": 2, "upload": 1, "post": 1, "kujob": 1}


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "input-pipeline"])  # (its status is cat's)
def test_a_failed_child_is_one_bounded_line_without_credentials_even_with_sigchld_ignored(probe, kind):
    """Started with SIGCHLD ignored (an inherited SIG_IGN): a child that
    exits 3 is still a failure; its 1 MB of stderr is not held (a bounded
    tail) and the error line has no password."""
    argv, env, data = setup(kind, probe, "fail")
    p = subprocess.run([PY, "-c", IGNORE_SIGCHLD] + argv, env=env, cwd=probe, input=data or b"",
                       capture_output=True, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == FAILURE_STATUS[kind], err[-2000:]
    assert SECRET not in err
    if kind in ("post", "kujob"):  # their children's stderr is passed through, line by line: nothing held
        assert "exit status 3" in err and "***@host" in err, err[-2000:]
        return
    assert err.count("\n") == 1 and len(err) < 1000, err[-2000:]  # one line: the tail, not the chatter
    failed = "zstd stream is damaged" if kind == "decoder" else "exit status 3"  # (a decoder says what it read)
    assert failed in err and "403 Forbidden for https://***@host/out.tar" in err, err
    if kind == "upload":
        assert "https://***@host/out.tar" in err.split(":", 1)[1]  # the URL named, without its password


@pytest.mark.parametrize("kind", ["input", "decoder", "upload"])
def test_the_stderr_tail_a_child_keeps_is_tarproc_tail_bytes(probe, kind):
    """The tail kept of a child's stderr is TARPROC_TAIL_BYTES long: the
    error line shows the kept line's middle left out, with its length."""
    argv, env, data = setup(kind, probe, "long")
    shown = {}
    for value in ("", "1KiB", "64KiB"):  # the default (8 KiB), less, more than the line
        p = subprocess.run(argv, env=dict(env, TARPROC_TAIL_BYTES=value), cwd=probe, input=data or b"",
                           capture_output=True, timeout=60)
        err = p.stderr.decode("utf-8", "replace")
        assert p.returncode in (1, 2) and err.count("\n") == 1 and "xxEND" in err, err[-2000:]
        shown[value] = err.split("…[")[1].split(" chars]")[0]
    # the line of 20003 characters cut to its last 8192, 1024, or whole; 280 of each shown
    assert shown == {"": "7912", "1KiB": "744", "64KiB": "19723"}, shown


@pytest.mark.parametrize("kind", KINDS)
def test_every_child_works_with_our_stderr_closed(probe, kind):
    """``2>&-`` (cron, some daemons): the child gets a valid stderr, the
    command succeeds, and nothing but data reaches stdout."""
    argv, env, data = setup(kind, probe, "ok")
    import shlex

    line = " ".join(shlex.quote(a) for a in argv) + " 2>&-"
    if data:
        (probe / "in.tar").write_bytes(data)
        line += " < in.tar"
    p = subprocess.run(["bash", "-c", line], env=env, cwd=probe, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=60)
    assert p.returncode == 0, p
    assert b"noise" not in p.stdout
    if kind in ("input", "input-pipeline", "decoder"):
        names = [m.name for m in tarfile.open(fileobj=io.BytesIO(p.stdout))]
        assert names == ["a.txt", "b.txt"]
    elif kind == "upload":
        assert p.stdout == b""
        assert [m.name for m in tarfile.open(probe / "uploaded.tar")] == ["a.txt", "b.txt"]
    elif kind == "post":
        assert p.stdout == b""
        assert sorted(f for f in os.listdir(probe) if f.startswith("out-")) == ["out-000000.tar", "out-000001.tar",
                                                                                 "out-000002.tar"]
        assert len(logged(probe)) == 3
    else:
        assert p.stdout == b"" and len(logged(probe)) == 1


def test_a_library_child_started_from_a_thread_keeps_its_exit_status(probe):
    """runtime/child from a thread that is not the main one, with SIGCHLD
    ignored: the disposition is put back (the C library's call), so a
    failure is not read as 0."""
    code = ("import signal, threading\n"
            "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
            "from tarproc.runtime.child import Child\n"
            "box = []\n"
            "def go():\n"
            "    c = Child('exit 5', 'x', stdout=None)\n"
            "    box.append(c.wait())\n"
            "t = threading.Thread(target=go); t.start(); t.join()\n"
            "print(box[0])\n")
    p = subprocess.run([PY, "-c", code], capture_output=True, timeout=30)
    assert p.stdout.strip() == b"5", p
