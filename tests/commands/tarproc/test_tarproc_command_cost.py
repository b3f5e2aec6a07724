"""tarproc -c's per-sample savings (issue 18) must not change what comes out:
input files a command left alone are not read back (their bytes are reused),
so every way of changing one must still be seen; the sample directories are
removed by a thread, so none may be left behind, whatever ends the run."""

import os
import signal
import stat
import subprocess
import time

import pytest

from helpers import samples_of, tar_bytes
from tarproc.runtime.workdir import Remover
from tarproc.stages.collect import settled as _settled
from tarproc.stages.command import map_command


def shard(n, width=9):
    return tar_bytes([(f"{i:04d}.{f}", (f"{f}{i:0{width - len(f)}d}").encode()) for i in range(n)
                      for f in ("a", "b")])


def run(tmp_path, cmd, n=6, p=1, ok=True, opts=()):
    """tarproc on n samples (fields a and b, 9 bytes each); the samples read
    back with tarfile, and the process."""
    (tmp_path / "in.tar").write_bytes(shard(n))
    wd = tmp_path / "wd"
    wd.mkdir(exist_ok=True)
    proc = subprocess.run(["tarproc", *opts, "-p", str(p), "-w", str(wd), "-c", cmd, "in.tar"], cwd=tmp_path,
                          capture_output=True, timeout=120)
    if ok:
        assert proc.returncode == 0, proc.stderr
    assert os.listdir(wd) == []
    # (a failed run leaves stdout without its end-of-archive marker: empty when every sample failed)
    return (samples_of(proc.stdout) if proc.stdout else {}), proc


def test_settled_covers_the_stamp_step():
    assert _settled(1_700_000_000_123_456_789) == 1_700_000_000_123_456_791  # ns stamps: 2 ns
    assert _settled(1_700_000_001_000_000_000) == 1_700_000_003_000_000_000  # whole seconds (ext3): 2 s
    assert _settled(1_700_000_002_000_000_000) == 1_700_000_004_000_000_000  # FAT's 2 s steps
    assert _settled(1_700_000_000_120_000_000) == 1_700_000_000_140_000_000  # 10 ms steps


def test_unchanged_inputs_come_back_as_written(tmp_path):
    """A command that only reads: every field comes back byte-identical, and
    (the next sample being prepared while a command sleeps, so a clock tick
    passes) most are the very objects we wrote, not read again."""
    samples = [{"__key__": f"{i:04d}", "txt": b"text %d\n" % i, "cls": b"%d" % i, "empty": b""} for i in range(8)]
    out = list(map_command(iter(samples), "cat sample.txt > /dev/null; sleep 0.03", parallel=1,
                           workdir=str(tmp_path)))
    assert [o["__key__"] for o in out] == [s["__key__"] for s in samples]
    for s, o in zip(samples, out):
        assert (o["txt"], o["cls"], o["empty"]) == (s["txt"], s["cls"], s["empty"])
    reused = sum(o["txt"] is s["txt"] for s, o in zip(samples, out))
    assert reused >= 4, f"only {reused} of 8 unchanged inputs were reused"
    assert os.listdir(tmp_path) == []


# Each command changes sample.b (or both) without changing its size, then
# sleeps so that the next sample is written well before its command starts
# (the case where inputs are not read back if they look unchanged).
CHANGES = {
    "rewritten in place": ("printf BBBBBBBBB 1<> sample.b", {"b": b"BBBBBBBBB"}),
    "rewritten at once, same size": ("printf CCCCCCCCC > sample.b", {"b": b"CCCCCCCCC"}),
    "replaced (rename over it)": ("printf DDDDDDDDD > x; mv x sample.b", {"b": b"DDDDDDDDD"}),
    "swapped with a same-size input": ("mv sample.a t; mv sample.b sample.a; mv t sample.b", "swap"),
    "one byte changed through dd": ("printf E | dd of=sample.b bs=1 seek=3 conv=notrunc status=none", "dd"),
    "truncated and rewritten": ("truncate -s 0 sample.b; printf FFFFFFFFF >> sample.b", {"b": b"FFFFFFFFF"}),
    "written through a hard link": ("ln sample.b l; printf GGGGGGGGG 1<> l; rm l", {"b": b"GGGGGGGGG"}),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_inputs_changed_without_changing_size_come_back_changed(tmp_path, change):
    cmd, want = CHANGES[change]
    out, _ = run(tmp_path, f"{cmd}; sleep 0.02")
    assert len(out) == 6
    for key, s in out.items():
        i = int(key)
        a, b = f"a{i:08d}".encode(), f"b{i:08d}".encode()
        if want == "swap":
            assert (s["a"], s["b"]) == (b, a), key
        elif want == "dd":
            assert (s["a"], s["b"]) == (a, b[:3] + b"E" + b[4:]), key
        else:
            assert (s["a"], s["b"]) == (a, want["b"]), key


def test_a_chmod_alone_keeps_the_bytes(tmp_path):
    out, _ = run(tmp_path, "chmod 600 sample.b; sleep 0.02")
    assert [s["b"] for s in out.values()] == [f"b{i:08d}".encode() for i in range(6)]


def test_an_input_replaced_by_a_symlink_is_refused(tmp_path):
    (tmp_path / "secret").write_bytes(b"SECRET!!!")  # 9 bytes, like the input
    out, proc = run(tmp_path, f"ln -sf {tmp_path}/secret sample.b; sleep 0.02", ok=False)
    assert proc.returncode == 1
    assert b"sample.b is a symbolic link: refused" in proc.stderr
    assert b"SECRET" not in proc.stdout and out == {}


def test_directories_gone_after_a_run_of_many_samples(tmp_path):
    """More samples than the removal thread takes in one batch, some failing."""
    out, proc = run(tmp_path, "[ $(cat sample.__key__) != 0007 ] || exit 3", n=60, p=2, ok=False,
                    opts=("--max-failures", "1%"))  # the run goes on to the end
    assert proc.returncode == 1 and b"0007" in proc.stderr
    assert len(out) == 59


def test_sigterm_with_directories_waiting_for_removal(tmp_path):
    """SIGTERM while quick commands run and finished directories wait for
    the removal thread: all gone when tarproc has exited (143)."""
    n = 3000
    (tmp_path / "in.tar").write_bytes(shard(n))
    wd = tmp_path / "wd"
    wd.mkdir()
    proc = subprocess.Popen(["tarproc", "-p", "2", "-w", str(wd), "-c", "true", "in.tar", "-o", "out.tar"],
                            cwd=tmp_path, stderr=subprocess.PIPE)
    run_dir = None
    for _ in range(600):
        names = os.listdir(wd)
        if names:
            run_dir = wd / names[0]
            try:
                if len(os.listdir(run_dir)) >= 2:
                    break
            except FileNotFoundError:
                pass
        time.sleep(0.01)
    assert run_dir is not None and proc.poll() is None, "tarproc finished before the signal"
    time.sleep(0.3)  # some samples done
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    proc.stderr.close()
    assert os.listdir(wd) == []
    assert not (tmp_path / "out.tar").exists()


def test_remover_clears_hostile_directories(tmp_path):
    """What a command may leave (a locked subdirectory, a symlink out, a
    deep tree) is removed by the thread; nothing outside is touched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"x")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    top = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    remover = Remover(top, batch=3, limit=1)
    for i in range(10):
        d = run_dir / f"d{i}"
        d.mkdir()
        (d / "sample.txt").write_bytes(b"t")
        os.symlink(outside, d / "link")
        deep = d
        for _ in range(40):
            deep = deep / "x"
        deep.mkdir(parents=True)
        (d / "locked").mkdir()
        (d / "locked" / "f").write_bytes(b"f")
        os.chmod(d / "locked", 0)
        remover.put(f"d{i}", os.open(d, os.O_RDONLY | os.O_DIRECTORY), ["sample.txt"])
    os.close(top)  # the thread keeps its own descriptor of the run directory
    remover.close()
    remover.close()  # a second close does nothing
    assert os.listdir(run_dir) == []
    assert (outside / "keep").read_bytes() == b"x" and stat.S_ISDIR(os.lstat(outside).st_mode)


def test_output_keeps_pace_with_slow_commands(tmp_path):
    """Flushes are spaced out, not dropped: each sample's output appears while
    the next command still runs."""
    (tmp_path / "in.tar").write_bytes(shard(3))
    proc = subprocess.Popen(["tarproc", "-p", "1", "-c", "sleep 1"], stdin=open(tmp_path / "in.tar", "rb"),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp_path)
    first = proc.stdout.read(512)
    assert first.startswith(b"0000."), first[:20]
    assert proc.poll() is None, "the first sample came out only at the end"
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 0
    assert list(samples_of(first + rest)) == ["0000", "0001", "0002"]
