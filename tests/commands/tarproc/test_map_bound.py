"""`tarproc --map -p N` is bounded: workers start as work waits for them
(never more than there are batches, so never more than samples), a -p
beyond what the machine holds gives one warning line and works, and every
worker is started by a thread that outlives it (its parent-death signal
follows that thread)."""

import os
import subprocess
import threading
import time

from helpers import read_tar, tar_bytes


def _shard(tmp_path, n):
    (tmp_path / "in.tar").write_bytes(tar_bytes([(f"s{i:04d}.txt", b"text %d" % i) for i in range(n)]))
    (tmp_path / "f.py").write_text("import os, time\n"
                                   "def f(s):\n"
                                   "    time.sleep(0.05)\n"
                                   "    s['pid'] = str(os.getpid())\n"
                                   "    return s\n")


def _children(pid):
    kids = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[1] == str(pid).encode():
                        kids.add(int(p))
            except (OSError, IndexError):
                pass
    return kids


def _run_counting(args, cwd):
    """Run tarproc; the most child processes it had at once, stdout, stderr, exit status."""
    env = dict(os.environ)
    p = subprocess.Popen(["tarproc"] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = []
    reader = threading.Thread(target=lambda: out.append(p.stdout.read()))
    reader.start()
    most = 0
    seen = set()
    while p.poll() is None:
        kids = _children(p.pid)
        seen |= kids
        most = max(most, len(kids))
        time.sleep(0.01)
    reader.join()
    return most, seen, out[0], p.stderr.read(), p.returncode


def test_p_200_on_20_samples_starts_at_most_20_workers(tmp_path):
    _shard(tmp_path, 20)
    most, seen, out, err, code = _run_counting(["-p", "200", "--map", "f.py:f", "in.tar"], tmp_path)
    assert code == 0, err
    assert [m for m, _ in read_tar(out)] == [f"s{i:04d}.{f}" for i in range(20) for f in ("pid", "txt")]
    assert 1 <= most <= 20 and len(seen) <= 20, (most, seen)
    assert err == b""


def test_a_huge_p_gives_one_warning_and_works(tmp_path):
    _shard(tmp_path, 20)
    most, seen, out, err, code = _run_counting(["-p", "100000", "--map", "f.py:f", "in.tar"], tmp_path)
    assert code == 0, err
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tarproc: warning: -p 100000 worker processes"), lines
    assert [m for m, _ in read_tar(out)] == [f"s{i:04d}.{f}" for i in range(20) for f in ("pid", "txt")]
    assert most <= 20, most


def test_workers_outlive_the_thread_that_asked_for_them(tmp_path):
    """map_function run from a thread that ends before its workers do (the
    reading thread asks for workers as batches wait; it ends when the input
    does): no worker dies of its parent-death signal, every sample comes back."""
    from tarproc.stages.function import map_function

    samples = [{"__key__": f"{i:04d}", "txt": b"x"} for i in range(40)]
    errors = []
    box = []

    def consume():
        gen = map_function(iter(samples), lambda s: (time.sleep(0.05), s)[1], 4, batch=2,
                           on_error=errors.append)
        box.append([s["__key__"] for s in gen])

    t = threading.Thread(target=consume)
    t.start()
    t.join(60)
    assert errors == []
    assert box == [[s["__key__"] for s in samples]]


def test_map_read_ahead_is_bounded_in_bytes_not_only_in_samples(tmp_path):
    """Large samples under the spooling threshold (2.5 MiB each) in a file
    (read without stalls, so batches grow to 32 samples): 2 x p + 2 batches
    in flight held over a gigabyte in the parent of `tarproc -p 2 --map`
    (1.1 GB peak on a 1.2 GB shard of 3 MiB members).  A batch now also ends
    at 2 MiB of field values: the peak stays near 80 MB, and every sample
    comes out, in order."""
    from helpers import run_measured

    (tmp_path / "gen.py").write_text(
        "import sys, tarfile, io\n"
        "out = tarfile.open('in.tar', mode='w', format=tarfile.USTAR_FORMAT)\n"
        "for i in range(100):\n"
        "    ti = tarfile.TarInfo(f'{i:05d}.bin'); ti.size = 5 << 19\n"
        "    out.addfile(ti, io.BytesIO(bytes([i % 251]) * ti.size))\n"
        "out.close()\n")
    (tmp_path / "slow.py").write_text("import time\n"
                                      "def f(s):\n"
                                      "    time.sleep(0.02)\n"
                                      "    return s\n")
    subprocess.run(["python3", "gen.py"], cwd=tmp_path, check=True)
    p, _, rss = run_measured("tarproc -p 2 --map slow.py:f in.tar | tar tv", tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().splitlines()
    assert [line.split()[-1] for line in lines] == [f"{i:05d}.bin" for i in range(100)], lines[:3]
    assert all(line.split()[2] == str(5 << 19) for line in lines), lines[:3]
    assert rss < 130, rss
