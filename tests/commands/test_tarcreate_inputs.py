"""tarcreate's inputs: large files and command outputs streamed, a file that
shrinks while copied, a pipe: command under a signal, a plan's size bounded.
The installed command; archives read back with Python's tarfile."""

import hashlib
import os
import signal
import subprocess
import tarfile

from helpers import kill_left, one_line, processes_with, unique_sleep, wait_for


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


def test_tarcreate_terminated_leaves_no_pipe_command_running(tmp_path):
    """SIGTERM while a `pipe:` command ran killed only its shell: the
    command's own children (here a sleep) went on running, orphaned."""
    marker = unique_sleep()
    (tmp_path / "plan.txt").write_text(f"0.txt text:a\n1.txt pipe:{marker}; echo late\n")
    proc = subprocess.Popen(["tarcreate", "plan.txt", "-o", "out.tar"], cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: processes_with(marker))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
        assert wait_for(lambda: not processes_with(marker), 10), "the pipe: command's children still run"
        assert sorted(os.listdir(tmp_path)) == ["plan.txt"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_left(marker)


def test_tarcreate_plan_size_is_bounded(tmp_path):
    """A plan is checked whole before writing, so its size is bounded:
    ``tarcreate /dev/zero`` read until memory ran out."""
    p = subprocess.run(["tarcreate", "/dev/zero"], cwd=tmp_path, capture_output=True, timeout=60,
                       env={**os.environ, "TARPROC_MAX_PLAN": "100000"})
    assert p.returncode == 2 and p.stdout == b""
    assert p.stderr.decode() == ("tarcreate: /dev/zero: the plan is larger than 100,000 bytes (TARPROC_MAX_PLAN): "
                                 "it is checked whole before anything is written, so split it and join the parts "
                                 "with tarcat\n")


def _sha_of_member(path, name):
    h = hashlib.sha256()
    with tarfile.open(path) as tf:
        f = tf.extractfile(tf.getmember(name))
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def test_tarcreate_streams_large_files_and_command_outputs(tmp_path):
    """A 64 MB file and a 64 MB command output go into the tar in chunks:
    the peak memory of tarcreate stays far below either."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        for i in range(64):
            f.write(hashlib.sha256(b"%d" % i).digest() * (1 << 15))
    (tmp_path / "plan.txt").write_text("0.bin big.bin\n0.zero pipe:head -c 64000000 /dev/zero\n0.txt text:hi\n")
    p = run("/usr/bin/time -f 'maxrss %M' tarcreate plan.txt -o out.tar", tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    rss_kb = int(p.stderr.decode().rsplit("maxrss", 1)[1])
    assert rss_kb < 48 * 1024, f"tarcreate peaked at {rss_kb} KB"
    assert _sha_of_member(tmp_path / "out.tar", "0.bin") == hashlib.sha256(big.read_bytes()).hexdigest()
    assert _sha_of_member(tmp_path / "out.tar", "0.zero") == hashlib.sha256(bytes(64000000)).hexdigest()
    assert sorted(os.listdir(tmp_path)) == ["big.bin", "out.tar", "plan.txt"]


def test_tarcreate_file_shrinking_while_copied_is_one_line(tmp_path):
    """The file is cut while its bytes are being copied into a pipe: never a
    member shorter than its header says, one line naming the file, exit 2."""
    (tmp_path / "shrink.bin").write_bytes(b"x" * (20 << 20))
    (tmp_path / "plan.txt").write_text("0.bin shrink.bin\n")
    p = run("tarcreate plan.txt | { head -c 1000 > /dev/null; truncate -s 10 shrink.bin; cat > /dev/null; }; "
            "exit ${PIPESTATUS[0]}", tmp_path)
    assert p.returncode == 2, p.stderr
    assert "shrink.bin" in one_line(p) and "shrank" in one_line(p)
