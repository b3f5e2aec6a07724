"""tarsort's spill files: within the open-file limit and near the memory budget
however many runs, a full spill directory is one line, and the spill directory
of a killed sort is removed by tarcat --cleanup (a user's directory named
like one is not).  The installed commands in real pipes; outputs read back
with Python's tarfile."""

import os
import random
import resource
import signal
import subprocess
import sys
import tarfile
import time

from helpers import read_tar, tar_bytes


def tar_of(members):
    return tar_bytes(members, format=tarfile.GNU_FORMAT)


def run(cmd, cwd, input=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60, **kw)


def test_tarsort_spill_directory_full_is_one_line_and_leaves_nothing(tmp_path):
    # a file-size limit hits a sort run (stdout is a pipe, not limited):
    # one line naming the run, exit 1, no spill directory left.
    data = tar_of([(f"{(i * 7919) % 3000:05d}.bin", bytes([i % 251]) * 300) for i in range(3000)])
    tdir = tmp_path / "t"
    tdir.mkdir()

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    p = run(["tarsort", "--memory", "1MB", "--tmpdir", str(tdir)], tmp_path, data, preexec_fn=limit)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert len(err.splitlines()) == 1 and "cannot write a sort run: File too large" in err, err
    assert os.listdir(tdir) == []


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


GEN = (
    "import sys, tarfile, io, time\n"
    "tf = tarfile.open(fileobj=sys.stdout.buffer, mode='w|')\n"
    "for i in range(3000):\n"
    "    info = tarfile.TarInfo(f'{(i * 7919) % 3000:06d}.bin'); data = b'x' * 2000; info.size = len(data)\n"
    "    tf.addfile(info, io.BytesIO(data))\n"
    "sys.stdout.flush(); time.sleep(60)\n"
)


def _start_spilling_sort(tmp_path, tdir):
    import sys

    producer = subprocess.Popen([sys.executable, "-c", GEN], stdout=subprocess.PIPE)
    sort = subprocess.Popen(["tarsort", "--memory", "100KB", "--tmpdir", str(tdir), "-o", "/dev/null"],
                            stdin=producer.stdout, stderr=subprocess.DEVNULL, cwd=tmp_path)
    producer.stdout.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        dirs = [d for d in os.listdir(tdir) if d.startswith(f"tarsort-{sort.pid}-")]
        if dirs and len(os.listdir(tdir / dirs[0])) >= 2:
            return producer, sort, dirs[0]
        time.sleep(0.05)
    producer.kill()
    sort.kill()
    raise AssertionError("no sort runs appeared")


def test_tarcat_cleanup_removes_the_spill_directory_of_a_killed_tarsort(tmp_path):
    # SIGKILL leaves a tarsort's runs behind; `tarcat --cleanup DIR` ("remove
    # the temporary files killed writers left in DIR") did not remove them,
    # only a later spilling tarsort did.  A live sort's directory is kept.
    tdir = tmp_path / "t"
    tdir.mkdir()
    procs = []
    try:
        live = _start_spilling_sort(tmp_path, tdir)  # first: a sort cleans up when it starts spilling
        procs += live[:2]
        dead = _start_spilling_sort(tmp_path, tdir)
        procs += dead[:2]
        dead[1].send_signal(signal.SIGKILL)
        dead[1].wait(timeout=30)
        assert sorted(os.listdir(tdir)) == sorted([live[2], dead[2]])
        p = run(["tarcat", "-v", "--cleanup", str(tdir)], tmp_path)
        assert p.returncode == 0, p.stderr
        assert sorted(os.listdir(tdir)) == [live[2]]
        assert f"removed {tdir / dead[2]}" in p.stderr.decode()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_tarcat_cleanup_leaves_a_users_directory_named_like_a_sort_run(tmp_path):
    # `tarcat --cleanup out/` runs on output directories: one named like a
    # spill directory but holding the user's files is not a sort's to remove.
    d = tmp_path / "tarsort-2024-results"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    os.utime(d, (1, 1))  # old: a spill directory without a lock is judged by age
    p = run(["tarcat", "--cleanup", str(tmp_path)], tmp_path)
    assert p.returncode == 0, p.stderr
    assert (d / "notes.txt").read_text() == "mine"


# Measured by a small parent: a child forked from the (big) test process
# inherits its peak RSS in ru_maxrss.
PEAK = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stderr=subprocess.DEVNULL); "
        "_, st, ru = os.wait4(p.pid, 0); sys.stderr.write(f'{os.waitstatus_to_exitcode(st)} {ru.ru_maxrss}')")


def peak(cmd, cwd, input=None):
    """``(peak RSS in bytes, stdout)`` of a command that must succeed."""
    p = run([sys.executable, "-c", PEAK] + cmd, cwd, input)
    code, kb = p.stderr.decode().split()
    assert code == "0", p.stderr
    return int(kb) * 1024, p.stdout


def test_tarsort_merge_of_large_samples_stays_near_the_memory_budget(tmp_path):
    # The merge held one chunk (at least one sample) and one heap record of
    # each of 64 runs at once whatever --memory: 800 KB samples (under the
    # blob threshold, so in memory) at --memory 1MB peaked ~100 MB over it.
    r = random.Random(8)
    members = [(f"{k:09d}.bin", r.randbytes(800_000)) for k in r.sample(range(10 ** 9), 160)]
    (tmp_path / "in.tar").write_bytes(tar_bytes(members))
    (tmp_path / "t").mkdir()

    base, _ = peak(["tarcat", "in.tar"], tmp_path)
    rss, out = peak(["tarsort", "--memory", "1MB", "--tmpdir", "t", "in.tar"], tmp_path)
    assert rss < base + (1 << 20) + (24 << 20), (rss >> 20, base >> 20)
    assert read_tar(out) == sorted(members)
    assert os.listdir(tmp_path / "t") == []


def test_tarsort_memory_does_not_grow_with_the_number_of_run_chunks(tmp_path):
    # A pickler/unpickler class was made per run chunk: cyclic garbage, never
    # freed with the collector off; 3000 one-sample runs (--memory 1) peaked
    # ~17 MB over 300, and a 100 GB sort grew by ~6 KB per chunk read.
    tdir = tmp_path / "t"
    tdir.mkdir()
    rss = []
    for n in (300, 3000):
        members = [(f"{k:08d}.txt", b"x") for k in random.Random(n).sample(range(10 ** 8), n)]
        got, out = peak(["tarsort", "--memory", "1", "--tmpdir", str(tdir)], tmp_path, tar_bytes(members))
        assert read_tar(out) == sorted(members)
        rss.append(got)
    assert rss[1] - rss[0] < 8 << 20, [r >> 20 for r in rss]
    assert os.listdir(tdir) == []
