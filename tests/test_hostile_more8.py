"""Adversarial review, pass 11: tarsort's spill budget (open files, leftovers
of a killed sort).  Every command runs installed, as a subprocess, in real
pipes; outputs are read back with Python's tarfile.  Each test failed before
the fix it comes with."""

import os
import random
import resource
import signal
import subprocess
import time

from helpers import read_tar, tar_bytes


def run(cmd, cwd, input=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60, **kw)


def nofile(n):
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return limit


def shuffled_members(n, body, seed=11):
    r = random.Random(seed)
    keys = r.sample(range(10 ** 8), n)
    members = []
    for i, k in enumerate(keys):
        members.append((f"{k:08d}.bin", body(i)))
        members.append((f"{k:08d}.cls", str(i).encode()))
    return members


def test_tarsort_large_members_from_a_pipe_stay_within_the_open_file_limit(tmp_path):
    # Each large member read from a pipe is a spool file held open; they were
    # only bounded by --memory (1 MiB each): 600 of them under `ulimit -n 256`
    # failed with "Too many open files" (exit 2) at the default --memory, and
    # at --memory 100GB also while merging (a run chunk held all the blobs of its run).
    members = shuffled_members(600, lambda i: bytes([i % 251]) * 2000)
    data = tar_bytes(members)
    want = sorted(members, key=lambda m: m[0])
    tdir = tmp_path / "t"
    tdir.mkdir()
    outs = []
    for memory in ("512MB", "100GB"):
        p = run(["tarsort", "-v", "--blob-threshold", "1KB", "--memory", memory, "--tmpdir", str(tdir)],
                tmp_path, data, preexec_fn=nofile(256), env=dict(os.environ, TMPDIR=str(tdir)))
        assert p.returncode == 0, p.stderr.decode()
        assert read_tar(p.stdout) == want
        outs.append(p.stdout)
        assert os.listdir(tdir) == []
    assert outs[0] == outs[1]


def test_tarsort_many_runs_merge_within_a_low_open_file_limit(tmp_path):
    # 400 runs (--memory 1) were merged 64 at a time whatever the limit:
    # under `ulimit -n 64` the merge failed with "Too many open files".
    members = [(f"{k:08d}.txt", str(i).encode()) for i, k in enumerate(random.Random(3).sample(range(10 ** 8), 400))]
    tdir = tmp_path / "t"
    tdir.mkdir()
    p = run(["tarsort", "--memory", "1", "--tmpdir", str(tdir)], tmp_path, tar_bytes(members), preexec_fn=nofile(48))
    assert p.returncode == 0, p.stderr.decode()
    assert read_tar(p.stdout) == sorted(members)
    assert os.listdir(tdir) == []
