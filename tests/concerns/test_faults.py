"""Fault drills: killed writers, full disks, closed pipes, dying producers,
misbehaving sample commands, Ctrl-C and SIGTERM.

Every drill runs the installed commands as real processes.  What must hold:
no file under a final name is ever incomplete (each reads fully with Python's
tarfile and holds every sample it should); the temporary files of a killed
writer are recognisable (``.NAME.HOST-RANDOM.PID.tarproc-partial``) and removed by the next
run writing the same output or by ``tarcat --cleanup DIR``; errors are one
line, never a traceback; temporary directories are gone after a command ends.
"""

import importlib.util
import json
import os
import random
import re
import shlex
import signal
import subprocess
import tarfile
import threading
import time

import pytest

from helpers import processes_with, unique_sleep, wait_for
from helpers import text_shard, signalled as _signalled
import make_corpus as M

PARTIAL = re.compile(r"^\.(.+)\.(\d+)\.tarproc-partial$")


def _exists(module):
    return importlib.util.find_spec(f"tarproc.cli.{module}") is not None


def shard(n, size=2000, start=0):
    """n samples (a .bin of ``size`` bytes and a .cls each), made with the
    corpus generator's header writer."""
    parts = []
    for i in range(start, start + n):
        key = f"s{i:06d}".encode()
        parts.append(M.member(key + b".bin", M.text(size, i)))
        parts.append(M.member(key + b".cls", str(i % 7).encode()))
    return b"".join(parts) + M.EOA


def read_samples(path):
    """Number of samples in a tar file, read fully by tarfile (raises on damage)."""
    keys = []
    with tarfile.open(path, "r:*") as tf:
        for info in tf:
            if info.isfile():
                data = tf.extractfile(info).read()
                assert len(data) == info.size
                key = info.name.split(".", 1)[0]
                if not keys or keys[-1] != key:
                    keys.append(key)
    return len(keys)


def _env(tmp):
    d = os.path.join(tmp, "tmpdir")
    os.makedirs(d, exist_ok=True)
    return dict(os.environ, TMPDIR=d), d


def _procs_in(root):
    """pids of processes whose working directory is under root (orphans)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if cwd.startswith(str(root)):
                out.append(int(pid))
    return out


def _procs_with(marker):
    """pids of processes whose command line contains marker."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(pid))
            except OSError:
                continue
    return out


def _wait_gone(find, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = find()
        if not left:
            return []
        time.sleep(0.1)
    return find()


def _wait_partial(d, timeout=60.0):
    """Wait until a writer in d has its temporary file (start-up under load
    can take longer than any fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(PARTIAL.match(n) for n in os.listdir(d)):
            return True
        time.sleep(0.01)
    return False


def feed(proc, data, chunk=32 << 10, delay=0.004, close=True):
    """Write data into proc's stdin slowly, in a thread (ignoring a dead reader)."""

    def run():
        try:
            for i in range(0, len(data), chunk):
                proc.stdin.write(data[i : i + chunk])
                proc.stdin.flush()
                time.sleep(delay)
            if close:
                proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


# ------------------------------------------------------------------ SIGKILL

N = 400  # samples in the drill input (~1.7 MB)
PER_PART = 50

WRITERS = {
    "tarcat": "tarcat -o out.tar",
    "tarsort": "tarsort --memory 300KB -o out.tar",
    "tarsplit": f"tarsplit -n {PER_PART} -o part",
    "tarproc": "tarproc -p 2 -c true -o out.tar",
    "tarpcat": "tarpcat -w 2 - -o out.tar",
    "tarjoin": "tarjoin - -o out.tar",
}
WRITER_MODULES = {"tarcat": "tarcat", "tarsort": "tarsort", "tarsplit": "tarsplit", "tarproc": "tarproc",
                  "tarpcat": "tarpcat", "tarjoin": "tarjoin"}
PRESENT_WRITERS = [w for w in WRITERS if _exists(WRITER_MODULES[w])]


def check_final_files(d, command, complete_run=False):
    """Every final-named file is complete; everything else is a recognisable
    partial.  Returns the partials' names."""
    partials = []
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if not os.path.isfile(path) or name in ("input.tar",):
            continue
        m = PARTIAL.match(name)
        if m:
            partials.append(name)
            continue
        n = read_samples(path)
        if command == "tarsplit":
            assert n == PER_PART, f"{name}: {n} samples under a final name, expected {PER_PART}"
        else:
            assert n == N, f"{name}: {n} samples under a final name, expected {N}"
    return partials


@pytest.mark.parametrize("command", PRESENT_WRITERS)
def test_sigkill_leaves_no_incomplete_final_file(command, tmp_path):
    data = shard(N)
    rng = random.Random(f"sigkill-{command}")
    argv = shlex.split(WRITERS[command])
    saw_partial = False
    for attempt in range(3):
        d = tmp_path / f"run{attempt}"
        d.mkdir()
        env, tmpdir = _env(str(d))
        p = subprocess.Popen(argv, cwd=d, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env)
        feed(p, data, delay=0.02)  # about a second of input: the kill lands mid-write
        _wait_partial(d)
        time.sleep(rng.uniform(0.0, 0.3))
        p.kill()
        p.wait(timeout=30)
        p.stderr.close()
        assert not _wait_gone(lambda: _procs_in(d)), "children of a killed writer live on"
        partials = check_final_files(d, command)
        for name in partials:
            assert int(PARTIAL.match(name).group(2)) == p.pid or command == "tarproc", name
        saw_partial = saw_partial or bool(partials)
        # The next run writing the same output cleans the leftovers up.
        with open(d / "input.tar", "wb") as f:
            f.write(data)
        with open(d / "input.tar", "rb") as f:
            q = subprocess.run(argv, cwd=d, stdin=f, capture_output=True, env=env, timeout=120)
        assert q.returncode == 0, q.stderr
        assert check_final_files(d, command) == [], "leftovers not removed by the next run"
    assert saw_partial or command == "tarsplit", "the kills never landed mid-write (drill too slow?)"


def test_cleanup_removes_leftovers_of_dead_writers_only(tmp_path):
    data = shard(N)
    p = subprocess.Popen(["tarcat", "-o", "out.tar"], cwd=tmp_path, stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL)
    feed(p, data, close=False)
    assert _wait_partial(tmp_path)
    p.kill()
    p.wait()
    left = [n for n in os.listdir(tmp_path) if PARTIAL.match(n)]
    assert len(left) == 1 and left[0].startswith(".out.tar.") and left[0].endswith(f".{p.pid}.tarproc-partial")
    # a live writer's temporary file must survive a cleanup
    live = subprocess.Popen(["tarcat", "-o", "other.tar"], cwd=tmp_path, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL)
    try:
        live.stdin.write(shard(5))
        live.stdin.flush()
        deadline = time.monotonic() + 60
        while len([n for n in os.listdir(tmp_path) if PARTIAL.match(n)]) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        q = subprocess.run(["tarcat", "-v", "--cleanup", "."], cwd=tmp_path, capture_output=True, timeout=60)
        assert q.returncode == 0
        assert f"removed ./{left[0]}".encode() in q.stderr
        names = sorted(os.listdir(tmp_path))
        assert len(names) == 1 and names[0].startswith(".other.tar.") and \
            names[0].endswith(f".{live.pid}.tarproc-partial"), names
    finally:
        live.stdin.close()
        live.wait(timeout=60)
    assert read_samples(tmp_path / "other.tar") == 5
    assert sorted(os.listdir(tmp_path)) == ["other.tar"]


# ------------------------------------------------------------------ disk full


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MB file system (tmpfs).  If mounting is not allowed, ``None``:
    the tests then limit file size with ``ulimit -f`` instead."""
    d = tmp_path / "full"
    d.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], capture_output=True)
    mounted = p.returncode == 0
    yield d, mounted
    if mounted:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


@pytest.mark.parametrize("command", PRESENT_WRITERS)
def test_disk_full(command, small_fs, tmp_path):
    d, mounted = small_fs
    (tmp_path / "input.tar").write_bytes(shard(N, size=8000))  # ~3.5 MB: does not fit
    cmd = WRITERS[command].replace("out.tar", "full/out.tar").replace("-o part", "-o full/part")
    limit = "" if mounted else "ulimit -f 1024; "  # 1 MiB per file
    env, tmpdir = _env(str(tmp_path))
    p = subprocess.run(["bash", "-c", f"{limit}{cmd} < input.tar"], cwd=tmp_path, capture_output=True,
                       env=env, timeout=120)
    err = p.stderr.decode(errors="replace")
    assert p.returncode != 0
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert re.search(r"No space left|File too large|disk full|write failed", lines[0]), lines[0]
    for name in os.listdir(d):
        path = os.path.join(d, name)
        assert not PARTIAL.match(name), f"partial file {name} left behind"
        if command == "tarsplit":
            assert read_samples(path) == PER_PART
        else:
            raise AssertionError(f"{name} appeared under a final name")
    assert os.listdir(tmpdir) == []


# ------------------------------------------------------------------ pipes

READERS = {  # command reading stdin -> (module, writes tar on stdout)
    "tarcat": ("tarcat", True),
    "tarsort": ("tarsort", True),
    "tarproc -c true": ("tarproc", True),
    "tarpcat -": ("tarpcat", True),
    "tarshow": ("tarshow", False),
    "tar2tsv": ("tar2tsv", False),
    "tarcheck": ("tarcheck", False),
    "tarsplit -n 10 -o part": ("tarsplit", False),
}
PRESENT_READERS = [c for c, (m, _) in READERS.items() if _exists(m)]


@pytest.mark.parametrize("command", [c for c in PRESENT_READERS if READERS[c][1] or c.startswith("tar2tsv")
                                     or c.startswith("tarshow")])
def test_downstream_closes_pipe(command, tmp_path):
    (tmp_path / "input.tar").write_bytes(shard(2000))
    env, tmpdir = _env(str(tmp_path))
    p = subprocess.run(["bash", "-c", f"{command} < input.tar | head -c 1 > one; echo ${{PIPESTATUS[0]}} > rc"],
                       cwd=tmp_path, capture_output=True, env=env, timeout=120)
    assert p.stderr == b"", p.stderr.decode(errors="replace")
    assert int((tmp_path / "rc").read_text()) in (0, 141)
    assert (tmp_path / "one").stat().st_size == 1
    assert _wait_gone(lambda: os.listdir(tmpdir)) == []


@pytest.mark.parametrize("command", PRESENT_READERS)
def test_upstream_dies_mid_stream(command, tmp_path):
    (tmp_path / "x.tar").write_bytes(shard(20))
    env, tmpdir = _env(str(tmp_path))
    p = subprocess.run(["bash", "-c", f"(head -c 5000 x.tar; exit 1) | {command} > out; echo ${{PIPESTATUS[1]}} > rc"],
                       cwd=tmp_path, capture_output=True, env=env, timeout=120)
    err = p.stderr.decode(errors="replace")
    assert int((tmp_path / "rc").read_text()) == 2, err
    assert len(err.splitlines()) == 1 and re.search(r"offset \d+: input ends", err), err
    assert not any(PARTIAL.match(n) for n in os.listdir(tmp_path))
    assert _wait_gone(lambda: os.listdir(tmpdir)) == []


# ------------------------------------------------------------------ tarproc's sample commands

def test_tarproc_timeout_kills_the_whole_process_group(tmp_path):
    marker = f"{300 + random.Random(str(tmp_path)).random():.6f}"
    (tmp_path / "in.tar").write_bytes(shard(2, size=10))
    env, tmpdir = _env(str(tmp_path))
    t0 = time.monotonic()
    p = subprocess.run(["bash", "-c", f"tarproc --timeout 1 -c 'sleep {marker} & sleep {marker}; true' in.tar > out.tar"],
                       cwd=tmp_path, capture_output=True, env=env, timeout=120)
    took = time.monotonic() - t0
    assert p.returncode == 1, p.stderr
    assert b"Traceback" not in p.stderr
    assert took < 60
    left = _wait_gone(lambda: _procs_with(f"sleep {marker}"))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "background children of a timed-out command live on"
    assert _wait_gone(lambda: os.listdir(tmpdir)) == []


def test_tarproc_command_stdout_goes_to_stderr_not_into_the_tar(tmp_path):
    """A command writing 100 MB to stdout: the bytes go to our stderr (counted
    by wc), the tar holds the sample unchanged."""
    (tmp_path / "in.tar").write_bytes(shard(1, size=100))
    p = subprocess.run(["bash", "-o", "pipefail", "-c",
                        "{ tarproc -c 'head -c 100000000 /dev/zero' in.tar > out.tar; } 2>&1 >/dev/null | wc -c > n"],
                       cwd=tmp_path, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert int((tmp_path / "n").read_text()) >= 100_000_000
    assert (tmp_path / "out.tar").stat().st_size < 10_000
    with tarfile.open(tmp_path / "out.tar") as tf:
        got = {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}
    assert got == {"s000000.bin": M.text(100, 0), "s000000.cls": b"0"}


def test_tarproc_command_cannot_smuggle_links_fifos_or_escape(tmp_path):
    (tmp_path / "in.tar").write_bytes(shard(2, size=10))
    work = tmp_path / "work"
    work.mkdir()
    env, tmpdir = _env(str(tmp_path))
    cmd = ("ln -s /etc/passwd sample.passwd; ln -s sample.cls sample.alias; ln sample.cls sample.hard; "
           "mkfifo sample.fifo; mkdir sample.dir; echo new > sample.new; "
           "echo out > ../outside.txt; ln -s / ../root-link")
    p = subprocess.run(["tarproc", "-w", str(work), "--max-failures", "100%", "-c", cmd, "in.tar", "-o", "out.tar"],
                       cwd=tmp_path,
                       capture_output=True, env=env, timeout=120)
    assert b"Traceback" not in p.stderr
    assert p.returncode in (0, 1), p.stderr
    with tarfile.open(tmp_path / "out.tar") as tf:
        members = list(tf)
    assert all(m.isfile() for m in members), [(m.name, m.type) for m in members]
    names = {m.name for m in members}
    assert not any(n.endswith((".passwd", ".alias", ".fifo", ".dir")) for n in names), names
    assert os.listdir(work) == [], f"working directories left: {os.listdir(work)}"
    assert sorted(os.listdir(tmp_path)) == ["in.tar", "out.tar", "tmpdir", "work"]


# ------------------------------------------------------------------ Ctrl-C and SIGTERM

SIGNALLED = {
    "tarcat -o out.tar": "tarcat",
    "tarsort --memory 200KB -o out.tar": "tarsort",
    "tarsplit -n 1000000 -o part": "tarsplit",
    "tarproc -p 2 -c 'sleep 0.05' -o out.tar": "tarproc",
    "tarpcat - -o out.tar": "tarpcat",
    "tarjoin --order key --memory 200KB -o out.tar": "tarjoin",
    "tarcheck": "tarcheck",
    "tar2tsv": "tar2tsv",
    "tarshow": "tarshow",
}


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", [c for c, m in SIGNALLED.items() if _exists(m)])
def test_interrupt(command, sig, tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) and
    SIGTERM (to the process) while input still arrives: the command ends
    promptly, removes its temporary files and directories, and leaves no
    output under a final name."""
    env, tmpdir = _env(str(tmp_path))
    p = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=tmp_path, stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    data = shard(300)
    feed(p, data[: len(data) // 2], close=False)  # half the input, then the pipe stays open
    time.sleep(1.0)
    assert p.poll() is None, "exited before the signal"
    if sig == "SIGINT":
        os.killpg(p.pid, signal.SIGINT)
    else:
        os.kill(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        raise AssertionError(f"{command} did not exit within 15 s of {sig}")
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    try:
        p.stdin.close()
    except OSError:
        pass
    assert p.returncode in (130, 143, -2, -15), (p.returncode, err)
    assert "Traceback" not in err, err
    assert _wait_gone(lambda: os.listdir(tmpdir)) == [], f"temporary files left: {os.listdir(tmpdir)}"
    assert _wait_gone(lambda: _procs_in(tmp_path)) == [], "child processes live on"
    left = sorted(n for n in os.listdir(tmp_path) if n not in ("tmpdir",))
    assert left == [], f"left behind: {left}"


SIGNAL_COMMANDS = ["tarcat", "tarshow", "tar2tsv", "tarsort -s txt", "tarproc -c true", "tarpcat"]


@pytest.fixture(scope="module")
def many_samples(tmp_path_factory):
    from tarproc.core.tario import TarWriter

    path = tmp_path_factory.mktemp("sig") / "many.tar"
    with open(path, "wb") as f:
        w = TarWriter(f)
        for i in range(20000):
            w.write(f"s{i:06d}.txt", b"hello %d" % i)
        w.close()
    return path


def _blocked_then_signalled(argv, stdin, signum):
    r, w = os.pipe()  # nobody reads r
    try:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=w, stderr=subprocess.PIPE)
    finally:
        os.close(w)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until it blocks writing (or reading)
            try:
                with open(f"/proc/{proc.pid}/wchan") as f:
                    if f.read() in ("pipe_write", "anon_pipe_write", "pipe_read", "anon_pipe_read"):
                        break
            except OSError:
                pass
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signum)
        t = time.monotonic()
        rc = proc.wait(10)
        return rc, time.monotonic() - t, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(r)


@pytest.mark.parametrize("command", SIGNAL_COMMANDS)
def test_sigterm_while_blocked_writing(command, many_samples):
    with open(many_samples, "rb") as stdin:
        rc, seconds, err = _blocked_then_signalled(command.split(), stdin, signal.SIGTERM)
    assert rc == 143, (command, rc, err)
    assert seconds < 5


def test_sigint_while_blocked_writing_and_reading(many_samples, tmp_path):
    with open(many_samples, "rb") as stdin:
        rc, seconds, err = _blocked_then_signalled(["tarcat"], stdin, signal.SIGINT)
    assert rc == 130 and b"interrupted" in err
    r, w = os.pipe()  # stdin: a pipe nobody writes
    try:
        rc, seconds, err = _blocked_then_signalled(["tarcat", "-o", str(tmp_path / "out.tar")], r,
                                                   signal.SIGTERM)
    finally:
        os.close(r)
        os.close(w)
    assert rc == 143 and seconds < 5
    assert not (tmp_path / "out.tar").exists()


@pytest.mark.parametrize("command", ["lines2tar", "tarmix", "tarindex"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_mid_run_leaves_no_output_no_temp_no_child(command, sig, tmp_path):
    """SIGHUP killed these commands outright, leaving the temporary output
    (`.out.tar.*.tarproc-partial`) behind; SIGTERM was already clean."""
    (tmp_path / "a.tar").write_bytes(text_shard(3))
    (tmp_path / "out.tar").write_bytes(b"old output")  # an existing output stays as it was
    marker = unique_sleep()
    argv = {"lines2tar": ["lines2tar", f"pipe:printf 'a\\nb\\n'; {marker}", "-o", "out.tar"],
            "tarmix": ["tarmix", "mix.json", "-o", "out.tar"],
            "tarindex": ["tarindex", "a.tar", f"pipe:cat a.tar; {marker}", "-o", "out.tar"]}[command]
    (tmp_path / "mix.json").write_text(json.dumps({"sources": [{"shards": f"pipe:cat a.tar; {marker}"}]}))
    before = sorted(os.listdir(tmp_path))
    if command == "tarindex":  # reading the second shard (its command runs): past the first
        started = lambda: True  # noqa: E731
    else:
        started = lambda: any("partial" in n for n in os.listdir(tmp_path))  # noqa: E731
    code, err = _signalled(argv, tmp_path, marker, sig, started)
    assert code == 128 + sig, err
    assert "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == before
    assert (tmp_path / "out.tar").read_bytes() == b"old output"
    assert wait_for(lambda: not processes_with(marker), 10)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("command", ["tarcreate - -o out.tar", "lines2tar -o out.tar"])
def test_signal_while_the_input_still_arrives(command, sig, tmp_path):
    p = subprocess.Popen(command.split(), cwd=tmp_path, stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL)
    p.stdin.write(b"0.txt text:hello\n" if command.startswith("tarcreate") else b"a\nb\n")
    p.stdin.flush()
    time.sleep(1.5)
    p.send_signal(sig)
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError(f"{command} ignored {sig!r}")
    p.stdin.close()
    err = p.stderr.read().decode(errors="replace")
    assert p.returncode in (130, 143, -2, -15), (p.returncode, err)
    assert "Traceback" not in err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def _group_has(pgid, word):
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != pgid:
            try:
                if os.getpgid(int(pid)) == pgid and word in open(f"/proc/{pid}/cmdline", "rb").read():
                    return True
            except OSError:
                continue
    return False


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_ctrl_c_while_map_workers_start(method, tmp_path):
    """Ctrl-C (SIGINT to the whole group) while ``tarproc --map`` starts its
    workers under spawn or forkserver: exit 130 and the one line, no
    KeyboardInterrupt or EOFError traceback from a worker's interpreter
    still starting (multiprocess's resource tracker unblocked SIGINT in the
    starting thread, so the workers and the fork server started with it
    deliverable).  The signal lands at several moments after the first
    worker-side process appears."""
    (tmp_path / "in.tar").write_bytes(shard(200, size=100))
    (tmp_path / "fn.py").write_text("def f(s):\n    return s\n")
    for delay in (0.0, 0.08, 0.25):
        p = subprocess.Popen(["tarproc", "--map", "fn.py:f", "-p", "3", "--start-method", method, "in.tar",
                              "-o", "/dev/null"], cwd=tmp_path, stderr=subprocess.PIPE, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            assert wait_for(lambda: _group_has(p.pid, b"multiprocess") or p.poll() is not None, 60)
            time.sleep(delay)
            os.killpg(p.pid, signal.SIGINT)
            rc = p.wait(60)
            err = p.stderr.read().decode(errors="replace")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if rc == 0 or (rc, err) == (-signal.SIGINT, ""):  # (done before the signal, or ended by it while exiting)
            continue
        assert (rc, err) == (130, "tarproc: interrupted\n"), (delay, rc, err)
        assert not _wait_gone(lambda: [q for q in _procs_with("multiprocess") if _pgid(q) == p.pid])


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None
