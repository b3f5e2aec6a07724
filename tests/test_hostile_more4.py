"""Adversarial review, sixth pass: tarsplit under signals, determinism
across worker counts and runs, object-store outputs that must never clobber
an existing object, tarcheck keys that are not UTF-8.  Every command runs
installed, as a subprocess; outputs are read back with GNU tar, tarfile and
the real aws CLI against moto's S3 server (the ``s3`` fixture of
test_urls.py).  The SIGKILL test failed before its fix; the others are
guards of what this pass found holding."""

import json
import os
import signal
import subprocess
import tarfile
import time

import pytest

from conftest import require
from helpers import read_tar, samples_of, tar_bytes
from test_urls import s3  # noqa: F401  (the moto fixture)

MEMBERS = [(f"d{i % 3}/s{i:04d}.{f}", (f"{f} {i} " * (20 + i % 7)).encode())
           for i in range(240) for f in ("cls", "txt")]


def run(cmd, cwd, input=None, env=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60,
                          env={**os.environ, **(env or {})}, **kw)


def wait_until(pred, timeout=20):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def partials(d):
    return [n for n in os.listdir(d) if "partial" in n]


# ------------------------------------------------------------ 1. tarsplit and signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("extra", [[], ["-z", "--fractions", "a=0.5,b=0.5"]])
def test_tarsplit_signalled_mid_run_keeps_whole_shards_only(sig, extra, tmp_path):
    data = tar_bytes(MEMBERS)
    pattern = "out-{split}-%03d.tar" if extra else "out-%03d.tar"
    p = subprocess.Popen(["tarsplit", "-n", "20", "-o", pattern, *extra], cwd=tmp_path,
                         stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(data[: len(data) // 2])  # mid-member, the stream stays open
    p.stdin.flush()
    wait_until(lambda: len([n for n in os.listdir(tmp_path) if n.startswith("out-")]) >= 2 + bool(extra))
    time.sleep(0.3)
    p.send_signal(sig)
    code = p.wait(timeout=30)
    err = p.stderr.read().decode()
    p.stdin.close()
    assert code == 128 + sig and "Traceback" not in err and err.count("\n") <= 1, err
    names = sorted(os.listdir(tmp_path))
    assert names and not partials(tmp_path), names
    seen = []
    for name in names:  # every shard left is whole: GNU tar lists it, tarfile reads it to the end marker
        listed = run(["tar", "tf", name], tmp_path)
        assert listed.returncode == 0, (name, listed.stderr)
        got = read_tar((tmp_path / name).read_bytes())
        assert [n for n, _ in got] == listed.stdout.decode().split()
        assert len(got) == 40 or extra  # 20 samples of 2 members (a split's last shard may be short)
        seen += got
    want = dict(MEMBERS)
    assert all(want[n] == body for n, body in seen)


# ------------------------------------------------------------ 2. determinism


MAPFN = """
import random, time
def f(sample):
    time.sleep(random.random() * 0.01)          # finish out of order
    sample["len"] = str(len(sample["txt"])).encode()
    return [sample, dict(sample, __key__=sample["__key__"] + "-b")]
"""


def test_same_bytes_for_any_worker_count_and_any_run(tmp_path):
    data = tar_bytes(MEMBERS[:120])  # 60 samples
    (tmp_path / "in.tar").write_bytes(data)
    (tmp_path / "fn.py").write_text(MAPFN)
    outs = {}
    for p in ("1", "3"):
        for tag, argv in {"map": ["--map", "fn.py:f", "--batch", "4"],
                          "cmd": ["-c", "sleep 0.0$((RANDOM % 3)); wc -c < sample.txt > sample.len"]}.items():
            r = run(["tarproc", *argv, "-p", p, "in.tar"], tmp_path)
            assert r.returncode == 0 and r.stderr == b"", r.stderr
            got = samples_of(r.stdout)
            assert len(got) == (120 if tag == "map" else 60)  # the samples did succeed
            assert all(s["len"].strip() == str(len(s["txt"])).encode() for s in got.values())
            outs.setdefault(tag, []).append(r.stdout)
    assert outs["map"][0] == outs["map"][1] and outs["cmd"][0] == outs["cmd"][1]
    # tarsplit twice (compressed, with a manifest and an index): the same files, the same bytes
    trees = []
    for n in ("r1", "r2"):
        d = tmp_path / n
        d.mkdir()
        r = run(["tarsplit", "-n", "7", "-s", "6K", "-o", "x-%03d.tar.gz", "--manifest", "m.json",
                 "--index", "i.json", "-q", "../in.tar"], d)
        assert r.returncode == 0, r.stderr
        trees.append({f: (d / f).read_bytes() for f in sorted(os.listdir(d))})
    assert len(trees[0]) > 5 and trees[0] == trees[1]
    # tarcreate twice, the input files touched (and re-moded) between: the same bytes
    (tmp_path / "a.bin").write_bytes(os.urandom(3000))
    (tmp_path / "plan.tsv").write_text("__key__\t@bin\tcls\n000\ta.bin\t3\n001\tfn.py\t4\n")
    first = run(["tarcreate", "plan.tsv"], tmp_path)
    os.utime(tmp_path / "a.bin", (1, 1))
    os.chmod(tmp_path / "a.bin", 0o700)
    second = run(["tarcreate", "plan.tsv"], tmp_path)
    assert first.returncode == 0 and first.stdout == second.stdout
    assert [n for n, _ in read_tar(first.stdout)] == ["000.bin", "000.cls", "001.bin", "001.cls"]


# ------------------------------------------------------------ 3. object stores


def _aws(s3env, *args, input=None):
    return subprocess.run(["aws", *args], input=input, capture_output=True, timeout=120,
                          env={**os.environ, **s3env})


OLD = b"old object"


def _objects(s3env, prefix):
    """``{key: size}`` under a prefix (one aws call: the CLI starts slowly)."""
    out = _aws(s3env, "s3", "ls", "--recursive", f"s3://tarproc-test/{prefix}").stdout.decode()
    return {line.split()[-1]: int(line.split()[-2]) for line in out.splitlines() if line.strip()}


def _put_old(s3env, tmp_path, prefix, names):
    d = tmp_path / "old"
    d.mkdir()
    for n in names:
        (d / n).write_bytes(OLD)
    assert _aws(s3env, "s3", "cp", "--recursive", "--quiet", str(d), f"s3://tarproc-test/{prefix}").returncode == 0
    for n in names:
        (d / n).unlink()
    d.rmdir()
    assert _objects(s3env, prefix) == {prefix + n: len(OLD) for n in names}


def test_sigkill_never_lets_the_client_publish_partial_data(s3, tmp_path):
    """``sh -c 'aws s3 cp - URL'`` forked aws, and the parent-death signal
    reached only the shell: after a SIGKILL, aws read end-of-input and
    published the partial tar under the final key (``-o pipe:aws ...``) or
    as a temporary object (``TARPROC_REMOTE_COMMIT=move``)."""
    require("aws")
    data = tar_bytes(MEMBERS)
    runs = {"k/pipe.tar": (["-o", "pipe:aws s3 cp - s3://tarproc-test/k/pipe.tar"], {}),
            "k/move.tar": (["-o", "s3://tarproc-test/k/move.tar"], {"TARPROC_REMOTE_COMMIT": "move"})}
    procs = []
    _put_old(s3, tmp_path, "k/", ["pipe.tar", "move.tar"])
    for key, (argv, env) in runs.items():
        p = subprocess.Popen(["tarcat", *argv], cwd=tmp_path, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             env={**os.environ, **s3, **env})
        p.stdin.write(data[: len(data) // 2])
        p.stdin.flush()
        procs.append(p)
    time.sleep(1.2)  # the clients have read what there is
    for p in procs:
        p.kill()
        assert p.wait(timeout=30) == -signal.SIGKILL
        p.stdin.close()
    for _ in range(2):  # and no orphaned client publishes anything later
        assert _objects(s3, "k/") == {"k/move.tar": len(OLD), "k/pipe.tar": len(OLD)}
        time.sleep(1.5)


@pytest.mark.parametrize("mode", ["spool", "move"])
def test_failed_runs_leave_an_existing_object_as_it_was(mode, s3, tmp_path):
    require("aws")
    env = {**s3, "TARPROC_REMOTE_COMMIT": mode, "TARPROC_SPOOL_DIR": str(tmp_path)}
    data = tar_bytes(MEMBERS[:40])
    (tmp_path / "cut.tar").write_bytes(data[: len(data) // 2 + 100])
    (tmp_path / "in.tar").write_bytes(data)
    pre = f"f{mode}/"
    names = ["abort.tar", "client.tar", "cut.tar", "term.tar"]
    _put_old(s3, tmp_path, pre, names)
    # bad input midway
    r = run(["tarcat", "cut.tar", "-o", f"s3://tarproc-test/{pre}cut.tar"], tmp_path, env=env)
    assert r.returncode == 2 and r.stderr.decode().count("\n") == 1 and b"cut.tar" in r.stderr
    # a sample command that fails: no output written
    r = run(["tarproc", "-c", "exit 3", "in.tar", "-o", f"s3://tarproc-test/{pre}abort.tar"], tmp_path, env=env)
    assert r.returncode == 1 and b"no output written" in r.stderr
    # SIGTERM while the input still flows
    p = subprocess.Popen(["tarcat", "-o", f"s3://tarproc-test/{pre}term.tar"], cwd=tmp_path, stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={**os.environ, **env})
    p.stdin.write(data[:5000])
    p.stdin.flush()
    time.sleep(0.8)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 143 and b"Traceback" not in p.stderr.read()
    p.stdin.close()
    if mode == "move":  # the client killed while it streams: exit 1, one line naming the URL
        p = subprocess.Popen(["tarcat", "-o", f"s3://tarproc-test/{pre}client.tar"], cwd=tmp_path,
                             stdin=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env})
        p.stdin.write(data[:5000])
        p.stdin.flush()
        wait_until(lambda: run(["pgrep", "-P", str(p.pid)], tmp_path).stdout.strip())
        for child in run(["pgrep", "-P", str(p.pid)], tmp_path).stdout.split():
            os.kill(int(child), signal.SIGKILL)
        try:
            p.stdin.write(data[5000:])
            p.stdin.close()
        except BrokenPipeError:
            pass
        err = p.stderr.read().decode()
        assert p.wait(timeout=30) == 1 and err.count("\n") == 1 and f"{pre}client.tar" in err, err
        assert "Traceback" not in err
    time.sleep(0.5)
    assert _objects(s3, pre) == {pre + n: len(OLD) for n in names}  # no temporary object either
    assert not partials(tmp_path)


# ------------------------------------------------------------ 4. tarcheck keys


def test_tarcheck_keys_that_are_not_utf8_or_near_the_top_of_unicode(tmp_path):
    # duplicates and split samples are found by the raw name bytes, the same
    # whether the keys are held in memory or spilled to SQLite
    keys = ["\udcff", "\ue000", "\uffff", "\U00010000", "\udc80a", "a\udcfe"]
    (tmp_path / "a.tar").write_bytes(tar_bytes([(k + ".txt", b"x") for k in keys], format=tarfile.GNU_FORMAT))
    (tmp_path / "b.tar").write_bytes(tar_bytes([(k + ".txt", b"y") for k in ("\udcff", "\uffff", "z")]
                                             + [("\udcff.cls", b"1")], format=tarfile.GNU_FORMAT))
    reports = []
    for limit in ("100000", "1"):  # keys in memory, and in the SQLite spill
        r = run(["tarcheck", "--json", "a.tar", "b.tar"], tmp_path, env={"TARPROC_CHECK_KEYS": limit})
        assert r.returncode == 1, r.stderr
        reports.append(json.loads(r.stdout))
    assert reports[0] == reports[1]
    b = {p["kind"]: p for p in reports[0]["shards"][1]["problems"]}
    assert b["duplicate_keys"]["count"] == 2
    assert b["duplicate_keys"]["examples"] == ["\\xff (also in a.tar)", "\uffff (also in a.tar)"]
    assert b["split_samples"]["examples"] == ["\\xff"]
    assert {p["kind"] for p in reports[0]["shards"][0]["problems"]} == {"non_utf8_names"}


def test_tarsplit_compressed_index_warns_once(tmp_path):
    """tarsplit -z --group-size 0 --index: one warning line for all the
    compressed shards without restart points, not one per shard; the index
    still counts every shard's samples."""
    (tmp_path / "in.tar").write_bytes(tar_bytes([(f"{i:03d}.txt", b"x") for i in range(30)]))
    r = run(["tarsplit", "-z", "--group-size", "0", "-n", "5", "--index", "idx.json", "-o", "part", "in.tar"],
            tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and "6 shards are compressed" in lines[0] and "sample counts only" in lines[0], lines
    shards = json.loads((tmp_path / "idx.json").read_text())["shardlist"]
    assert [s["nsamples"] for s in shards] == [5] * 6


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
