"""Adversarial review, fourth pass: kujob (local runs, the Kubernetes
manifest), tarserve, and lines2tar, tarmix, tarindex, tar2json at their
edges (signals, an output that names an input, a closed stdout).  Every
command runs installed, as a subprocess (tarserve over real HTTP); outputs
are read back with Python's tarfile.  Each test failed before the fix it
comes with."""

import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request

import pytest

from helpers import kill_left, kubernetes_expand, one_line, processes_with, unique_sleep, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile"))
import make_corpus as M  # noqa: E402


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


def names(path):
    with tarfile.open(path) as tf:
        return [m.name for m in tf if m.isfile()]


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


def _default_signals():
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


# ------------------------------------------------------------------ signals


def _signalled(argv, cwd, marker, sig, started):
    """Start ``argv``, wait until ``started()`` (it is mid-run, its input
    command alive), send ``sig``; return the exit status."""
    # the default dispositions of a terminal's job: a test run under nohup (or in the background of a
    # script, which ignores SIGINT) must not hand its SIG_IGN on to the command
    proc = subprocess.Popen(argv, cwd=cwd, stderr=subprocess.PIPE, preexec_fn=_default_signals)
    try:
        assert wait_for(lambda: started() and processes_with(marker)), proc.stderr.read1() if proc.poll() else ""
        proc.send_signal(sig)
        return proc.wait(30), proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_left(marker)


def test_kujob_sighup_ends_the_running_shards_and_a_rerun_resumes(tmp_path):
    """The terminal (or the ssh session) goes away at 3 a.m.: kujob died of
    SIGHUP and left its shards running (they are in their own sessions, no
    hangup reaches them).  Now SIGHUP is handled like SIGTERM: the shards
    are terminated, nothing is left under a final or a temporary name, exit
    129; a rerun with --done-if does the rest."""
    for i in range(3):
        (tmp_path / f"in-{i}.tar").write_bytes(shard(3, f"k{i}"))
    marker = unique_sleep()
    argv = ["kujob", "-s", "{0..2}", "-j", "3", "--", "tarcat", f"pipe:cat in-{{}}.tar; {marker}", "-o",
            "out-{}.tar"]
    code, err = _signalled(argv, tmp_path, marker, signal.SIGHUP,
                           lambda: len(processes_with(marker)) >= 3)
    assert code == 129, err
    assert wait_for(lambda: not processes_with(marker), 10), "shard commands left running"
    assert sorted(os.listdir(tmp_path)) == ["in-0.tar", "in-1.tar", "in-2.tar"]
    (tmp_path / "out-1.tar").write_bytes(shard(1, "done"))  # one shard was done before
    p = run("kujob -v -s '{0..2}' --done-if out-{}.tar -- tarcat in-{}.tar -o out-{}.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert "[1] skipped" in p.stderr.decode()
    assert names(tmp_path / "out-0.tar") == ["k0000.txt", "k0001.txt", "k0002.txt"]
    assert names(tmp_path / "out-1.tar") == ["done000.txt"]


@pytest.mark.parametrize("command", ["lines2tar", "tarmix", "tarindex"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_mid_run_leaves_no_output_no_temp_no_child(command, sig, tmp_path):
    """SIGHUP killed these commands outright, leaving the temporary output
    (`.out.tar.*.tarproc-partial`) behind; SIGTERM was already clean."""
    (tmp_path / "a.tar").write_bytes(shard(3))
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


# ------------------------------------------------------------------ kujob --k8s


def test_k8s_manifest_passes_dollars_through_kubernetes_expansion(tmp_path):
    """Kubernetes expands `$(NAME)` and turns `$$` into `$` in command, args
    and env values: a shell command with `$(HOME)` or `$$`, or an env value
    with a `$`, reached the pod changed.  kujob now doubles every `$`."""
    command = ["sh", "-c", 'printf "%s|%s|%s\\n" "$0" "$GREETING" "$(echo x)" > out-{}.txt', "cost $(HOME) $$5"]
    p = subprocess.run(["kujob", "--k8s", "--image", "img", "-e", "GREETING=$(HOME)$$", "-s", "{a,b}", "--",
                        *command], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    container = json.loads(p.stdout)["spec"]["template"]["spec"]["containers"][0]
    env = {k: v for k, v in os.environ.items() if k != "JOB_COMPLETION_INDEX"}
    for e in container["env"]:
        env[e["name"]] = kubernetes_expand(e["value"], env)
    env["JOB_COMPLETION_INDEX"] = "1"
    argv = [kubernetes_expand(a, env) for a in container["command"] + container["args"]]
    assert argv[argv.index("--") + 1:] == command  # what the pod runs is what was typed
    p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out-b.txt").read_text() == "cost $(HOME) $$5|$(HOME)$$|x\n"


@pytest.mark.parametrize("args, message", [
    (["--k8s", "--image", "img", "-s", "\udcff{1,2}"], "is not UTF-8"),
    (["--k8s", "--image", "img", "-s", "x", "-e", "A=\udcff"], "is not UTF-8"),
    (["-n", "-s", "{a\nb,c}"], "has a control character"),
    (["--k8s", "--image", "img", "-s", "{a\tb,c}"], "has a control character"),
])
def test_kujob_ids_that_cannot_travel_are_refused(args, message, tmp_path):
    """A shard id that is not UTF-8 went into the JSON manifest as raw bytes
    (Kubernetes would read U+FFFD and run another file); an id with a
    newline broke the one-command-per-line --dry-run and the [id] log lines."""
    argv = [os.fsencode(a) for a in ["kujob", *args, "--", "true", "{}"]]
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, timeout=30)
    assert p.returncode == 2 and p.stdout == b""
    assert message in one_line(p)


# ------------------------------------------------------------------ outputs


@pytest.mark.parametrize("cmd, victim", [
    ("lines2tar l.txt -o l.txt", "l.txt"),
    ("lines2tar a.txt l.txt -o ./l.txt", "l.txt"),
    ("tarindex a.tar b.tar -o b.tar", "b.tar"),
    ("tarindex a.tar --offsets a.tar -o index.json", "a.tar"),
    ("tarmix mix.json -o mix.json", "mix.json"),
])
def test_output_naming_an_input_of_another_kind_is_refused(cmd, victim, tmp_path):
    """`-o` naming the input replaced a text file, a shard or the mix spec
    with the output, exit 0: the input was gone (and an index pointed into a
    file that no longer existed).  Now: exit 2, one line, nothing touched."""
    (tmp_path / "a.tar").write_bytes(shard(2, "a"))
    (tmp_path / "b.tar").write_bytes(shard(2, "b"))
    (tmp_path / "l.txt").write_text("x\ny\n")
    (tmp_path / "a.txt").write_text("z\n")
    (tmp_path / "mix.json").write_text('{"sources": [{"shards": "a.tar"}]}')
    before = {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)}
    p = run(cmd, tmp_path)
    assert p.returncode == 2, p.stderr
    assert f"{victim}: is also the output" in one_line(p)
    assert {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)} == before
    # an output that is a symbolic link to the input replaces the link, not the input: allowed
    (tmp_path / "link").symlink_to(victim)
    p = run(cmd.replace(f"-o {victim}", "-o link").replace(f"-o ./{victim}", "-o link")
            .replace(f"--offsets {victim}", "--offsets link"), tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / victim).read_bytes() == before[victim]


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


def test_tar2json_full_disk_is_output_not_written(tmp_path):
    """tar2json on a full disk said 'No space left on device' with exit 2
    (bad usage); every other writer says 'write failed', exit 1."""
    (tmp_path / "a.tar").write_bytes(shard(200))
    p = run("tar2json a.tar > /dev/full", tmp_path)
    assert p.returncode == 1 and one_line(p) == "tar2json: -: write failed: No space left on device"


# ------------------------------------------------------------------ prints of a --map function


PRINTING = '''
import os
print("loaded")
def f(sample):
    print("debug", sample["__key__"])
    os.write(1, b"raw write\\n")
    sample["txt"] = sample["txt"].upper()
    return sample
'''


@pytest.mark.parametrize("parallel", ["1", "2"])
def test_map_function_that_prints_does_not_corrupt_the_tar_on_stdout(parallel, tmp_path):
    """A --map function with a debugging print wrote into the tar on stdout
    (exit 0, an archive no reader accepts).  Its prints now go to stderr."""
    (tmp_path / "f.py").write_text(PRINTING)
    (tmp_path / "a.tar").write_bytes(shard(5))
    p = run(f"tarproc -p {parallel} --map f.py:f a.tar > out.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert names(tmp_path / "out.tar") == [f"s{i:03d}.txt" for i in range(5)]
    with tarfile.open(tmp_path / "out.tar") as tf:
        assert tf.extractfile("s000.txt").read() == b"TEXT S 0\n"
    err = p.stderr.decode()
    assert err.count("raw write") == 5 and "debug s004" in err and "loaded" in err


def test_tarserve_map_function_that_prints_does_not_corrupt_responses(tmp_path):
    """The same in tarserve: the job's stdout is the response, so a print
    became part of the shard a client downloaded.  It goes to the log now,
    and the server keeps serving."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "a.tar").write_bytes(shard(5))
    (tmp_path / "f.py").write_text(PRINTING)
    proc = subprocess.Popen(["tarserve", "root", "--port", "0", "--map", "f.py:f"], cwd=tmp_path,
                            stderr=subprocess.PIPE)
    try:
        line = b""
        deadline = time.monotonic() + 20
        while b"\n" not in line and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 1)[0]:
                line += os.read(proc.stderr.fileno(), 4096)
        url = re.search(rb"http://\S+/", line).group(0).decode()
        for _ in range(2):
            with urllib.request.urlopen(url + "a.tar", timeout=30) as r:
                body = r.read()
            with tarfile.open(fileobj=io.BytesIO(body)) as tf:
                assert [m.name for m in tf] == [f"s{i:03d}.txt" for i in range(5)]
                assert tf.extractfile("s004.txt").read() == b"TEXT S 4\n"
    finally:
        proc.terminate()
        proc.wait(30)
    assert b"raw write" in proc.stderr.read() + line
