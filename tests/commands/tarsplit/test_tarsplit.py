"""tarsplit: limits, names, post commands, atomic shards (through real pipes)."""

import glob
import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from conftest import require
from helpers import kill_left, one_line, processes_with, read_tar, samples_of, tar_bytes, unique_sleep, wait_for
import make_corpus


def make_input(n, seed=0, maxsize=3000):
    r = random.Random(seed)
    members = []
    for i in range(n):
        members.append((f"s{i:05d}.bin", r.randbytes(r.randrange(0, maxsize))))
        members.append((f"s{i:05d}.cls", str(i % 7).encode()))
    return members


def shard_files(tmp, pattern="*.tar"):
    return sorted(p for p in glob.glob(os.path.join(tmp, pattern)) if not os.path.basename(p).startswith("."))


def all_members(paths):
    out = []
    for p in paths:
        with open(p, "rb") as f:
            out += read_tar(f.read())
    return out


def test_gnu_tar_with_directories_into_count_shards(sh, tmp_path):
    require("tar")
    d = tmp_path / "raw" / "train"
    d.mkdir(parents=True)
    (tmp_path / "raw" / "train" / "sub").mkdir()
    for i in range(45):
        (d / f"n{i:03d}.txt").write_bytes(f"text {i}".encode() * (i + 1))
        (d / f"n{i:03d}.cls").write_bytes(str(i).encode())
    p = sh("tar -cf - --sort=name -C raw train | tarsplit -n 20 -o _test -v", stderr_ok=True)
    shards = shard_files(tmp_path, "_test-*.tar")
    assert [os.path.basename(s) for s in shards] == ["_test-000000.tar", "_test-000001.tar", "_test-000002.tar"]
    counts = [len(samples_of(open(s, "rb").read())) for s in shards]
    assert counts == [20, 20, 5]
    got = all_members(shards)
    assert [n for n, _ in got] == sorted(f"train/n{i:03d}.{e}" for i in range(45) for e in ("cls", "txt"))
    for name, body in got:
        assert body == (tmp_path / "raw" / name).read_bytes()
    err = p.stderr.decode()
    assert "_test-000000.tar: 20 samples" in err and "_test-000002.tar: 5 samples" in err
    assert "3 shards, 45 samples" in err
    assert "directories" in err  # skipped directory entries are counted in the summary


def test_size_limit_never_exceeded_and_manifest_matches(sh, tmp_path):
    members = make_input(300, seed=1, maxsize=6000)
    limit = 40000
    sh(f"tarsplit -s {limit} -n 1000 -o part --manifest m.json", input=tar_bytes(members))
    shards = shard_files(tmp_path, "part-*.tar")
    assert len(shards) > 5
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert [m["name"] for m in manifest] == [os.path.basename(s) for s in shards]
    total = 0
    for m, path in zip(manifest, shards):
        size = os.path.getsize(path)
        assert m["bytes"] == size  # counted exactly as written, end marker included
        assert size <= limit
        n = len(samples_of(open(path, "rb").read()))
        assert n == m["samples"]
        total += n
    assert total == 300
    # each shard was closed only because the next sample would not fit
    sizes = [os.path.getsize(s) for s in shards]
    assert all(s > limit - 2 * (6000 + 512 + 512 + 512) for s in sizes[:-1])
    assert all_members(shards) == members


def test_size_units_and_oversized_sample(sh, tmp_path):
    members = [("a.bin", b"x" * 100), ("b.bin", b"y" * 5000), ("c.bin", b"z" * 100), ("d.bin", b"w" * 100)]
    sh("tarsplit -s 3KiB -o p", input=tar_bytes(members))
    shards = shard_files(tmp_path, "p-*.tar")
    names = [[n for n, _ in read_tar(open(s, "rb").read())] for s in shards]
    assert names == [["a.bin"], ["b.bin"], ["c.bin", "d.bin"]]
    assert os.path.getsize(shards[1]) > 3 * 1024  # a sample alone may exceed the limit
    assert os.path.getsize(shards[2]) <= 3 * 1024
    p = sh("tarsplit -s 12parsecs -o q", input=tar_bytes(members), ok=False)
    assert p.returncode == 2 and len(p.stderr.decode().strip().splitlines()) == 1


def test_patterns_start_compression_and_maxshards(sh, tmp_path):
    require("zstd")
    data = tar_bytes(make_input(50, seed=2, maxsize=100))
    (tmp_path / "in.tar").write_bytes(data)
    sh("tarsplit -n 10 -o 'pct-%04d.tar' --start 7 in.tar")
    assert [os.path.basename(s) for s in shard_files(tmp_path, "pct-*")] == [f"pct-{i:04d}.tar" for i in range(7, 12)]
    sh("tarsplit -n 10 -o 'br-{shard:03d}.tar.zst' in.tar")
    zs = shard_files(tmp_path, "br-*")
    assert [os.path.basename(s) for s in zs] == [f"br-{i:03d}.tar.zst" for i in range(5)]
    assert open(zs[0], "rb").read(4) == b"\x28\xb5\x2f\xfd"
    out = sh(f"zstd -dc {zs[0]}").stdout
    assert len(samples_of(out)) == 10
    sh("tarsplit -n 10 -z -o gz in.tar")
    gz = shard_files(tmp_path, "gz-*")
    assert [os.path.basename(s) for s in gz] == [f"gz-{i:06d}.tar.gz" for i in range(5)]
    assert all_members(gz) == read_tar(data)
    sh("tarsplit -n 10 -z -o 'zp-%02d.tar' in.tar")
    assert open(tmp_path / "zp-00.tar", "rb").read(2) == b"\x1f\x8b"
    # pipe: outputs, one command per shard
    sh("tarsplit -n 20 -o 'pipe:cat > piped-%d.tar' in.tar")
    assert [len(samples_of((tmp_path / f"piped-{i}.tar").read_bytes())) for i in range(3)] == [20, 20, 10]


def test_maxshards_stops_reading_an_endless_input(sh, tmp_path):
    gen = tmp_path / "gen.py"
    gen.write_text(
        "import sys, tarfile, io, itertools\n"
        "tf = tarfile.open(fileobj=sys.stdout.buffer, mode='w|')\n"
        "for i in itertools.count():\n"
        "    info = tarfile.TarInfo(f'{i:09d}.txt'); data = b'x' * 100; info.size = len(data)\n"
        "    tf.addfile(info, io.BytesIO(data))\n"
    )
    p = sh(f"{sys.executable} gen.py 2>/dev/null | tarsplit -n 100 --maxshards 3 -o m; echo ${{PIPESTATUS[1]}}",
           timeout=60)
    assert p.stdout.decode().split() == ["0"]
    shards = shard_files(tmp_path, "m-*.tar")
    assert len(shards) == 3
    assert [len(samples_of(open(s, "rb").read())) for s in shards] == [100, 100, 100]


def test_post_command_every_placeholder_and_command_deletes(sh, tmp_path):
    data = tar_bytes(make_input(25, seed=3, maxsize=50))
    (tmp_path / "in.tar").write_bytes(data)
    (tmp_path / "up").mkdir()
    sh("tarsplit -n 10 -o 'x-%03d.tar' -p 'echo %s %s {shard} {abspath} {basename} {base} {ext} {index} >> log' in.tar")
    lines = (tmp_path / "log").read_text().splitlines()
    assert len(lines) == 3
    for i, line in enumerate(lines):
        name = f"x-{i:03d}.tar"
        assert line.split() == [name, name, name, str(tmp_path / name), name, f"x-{i:03d}", ".tar", str(i)]
    # -C runs the command then deletes the shard; --nodelete keeps it
    sh("tarsplit -n 10 -o y -C 'cp {shard} up/' in.tar")
    assert shard_files(tmp_path, "y-*") == []
    assert sorted(os.listdir(tmp_path / "up")) == ["y-000000.tar", "y-000001.tar", "y-000002.tar"]
    assert all_members(sorted(str(p) for p in (tmp_path / "up").iterdir())) == read_tar(data)
    sh("tarsplit -n 10 -o z -C 'true' --nodelete in.tar")
    assert len(shard_files(tmp_path, "z-*")) == 3
    # a compressed shard's {ext} is its whole extension
    sh("tarsplit -n 30 -o 'c-%d.tar.gz' -p 'echo {base} {ext} >> clog' in.tar")
    assert (tmp_path / "clog").read_text().split() == ["c-0", ".tar.gz"]


def test_failing_post_command_stops_with_exit_1(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(tar_bytes(make_input(40, seed=4, maxsize=50)))
    p = sh("tarsplit -n 10 -o f -p 'test {index} != 1' in.tar", ok=False)
    assert p.returncode == 1
    err = p.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "f-000001.tar" in err[0] and "post command" in err[0]
    assert [os.path.basename(s) for s in shard_files(tmp_path, "f-*")] == ["f-000000.tar", "f-000001.tar"]


def test_sigkill_leaves_only_whole_shards(tmp_path):
    gen = tmp_path / "slow.py"
    gen.write_text(
        "import sys, tarfile, io, time\n"
        "tf = tarfile.open(fileobj=sys.stdout.buffer, mode='w|')\n"
        "for i in range(100000):\n"
        "    info = tarfile.TarInfo(f'{i:09d}.bin'); data = bytes([i % 251]) * (i % 3000); info.size = len(data)\n"
        "    tf.addfile(info, io.BytesIO(data))\n"
        "    if i % 50 == 0: sys.stdout.flush(); time.sleep(0.01)\n"
    )
    producer = subprocess.Popen([sys.executable, str(gen)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    split = subprocess.Popen(["tarsplit", "-n", "37", "-o", "k"], stdin=producer.stdout, cwd=tmp_path,
                             stderr=subprocess.PIPE)
    producer.stdout.close()
    try:
        deadline = time.time() + 60
        while len(shard_files(tmp_path, "k-*.tar")) < 4 and time.time() < deadline:
            time.sleep(0.05)
        split.send_signal(signal.SIGKILL)
        split.wait(timeout=30)
    finally:
        producer.kill()
        producer.wait()
        split.stderr.close()
    shards = shard_files(tmp_path, "k-*.tar")
    assert len(shards) >= 4
    expected = 0
    for i, path in enumerate(shards):
        assert os.path.basename(path) == f"k-{i:06d}.tar"
        with tarfile.open(path) as tf:  # reads the whole archive: fails on a cut-off shard
            names = [m.name for m in tf.getmembers()]
            for m in tf.getmembers():
                body = tf.extractfile(m).read()
                n = int(m.name.split(".")[0])
                assert body == bytes([n % 251]) * (n % 3000)
        assert names == [f"{n:09d}.bin" for n in range(expected, expected + 37)]
        expected += 37
    # a later run cleans the partial files of killed writers
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith(".tarproc-partial")]
    assert all(n.startswith(".") for n in leftovers)


def test_url_output_via_env_command(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(tar_bytes(make_input(20, seed=5, maxsize=50)))
    (tmp_path / "bucket").mkdir()
    env = {"TARPROC_WRITE_GS": f"cat > {tmp_path}/bucket/$(basename {{url}})"}
    sh("tarsplit -n 10 -o 'gs://b/train-%06d.tar' -p 'echo %s >> uploaded' in.tar", env=env)
    assert sorted(os.listdir(tmp_path / "bucket")) == ["train-000000.tar", "train-000001.tar"]
    assert (tmp_path / "uploaded").read_text().split() == ["gs://b/train-000000.tar", "gs://b/train-000001.tar"]
    assert len(samples_of((tmp_path / "bucket" / "train-000001.tar").read_bytes())) == 10


def test_help_and_bad_usage(sh):
    p = sh("tarsplit --help")
    assert b"examples:" in p.stdout and b"{basename}" in p.stdout
    p = sh("tarsplit -n 10 -o 'bad-{nope}.tar'", input=tar_bytes([("a.txt", b"1")]), ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1


def test_counted_size_equals_written_bytes_for_long_and_unicode_names(tmp_path):
    from tarproc.core.grouping import SampleWriter
    from tarproc.sinks.split import sample_size, split_samples

    class Count:
        n = 0

        def write(self, b):
            self.n += len(b)

    samples = [
        {"__key__": "short", "txt": b"x" * 10, "__source__": "-"},
        {"__key__": "d/" * 60 + "long", "jpg": b"y" * 513, "cls": "3"},
        {"__key__": "é" * 70, "txt": b"z"},
        {"__key__": "k" * 99, "a": b""},
        {"__key__": "p" * 120 + "/" + "q" * 90, "seg.png": b"w" * 1024},
    ]
    for s in samples:
        out = Count()
        SampleWriter(out).write(s)
        assert sample_size(s) == out.n, s["__key__"]
    limit = 3000
    shards = list(split_samples(iter(samples * 3), str(tmp_path / "u-%02d.tar"), max_size=limit))
    for shard in shards:
        size = os.path.getsize(shard.name)
        assert size == shard.bytes
        assert size <= limit or shard.samples == 1
    assert len(shards) > 2 and sum(s.samples for s in shards) == 15


def test_index_of_shards_that_dash_c_deletes_warns(sh, tmp_path):
    """``--index`` with ``-C`` (which deletes each shard after its command)
    names shards that no longer exist: one warning says so."""
    (tmp_path / "in.tar").write_bytes(tar_bytes([(f"{i:03d}.txt", b"x") for i in range(6)]))
    p = sh("tarsplit -n 3 -o part-%d.tar -C 'cp {shard} kept-{index}.tar' --index idx.json in.tar", stderr_ok=True)
    assert p.stderr.decode().splitlines() == [
        "tarsplit: warning: --index idx.json names the local shards, which -C deletes once its command has run: "
        "index the shards where they went (tarindex URL ... -o INDEX), or add --nodelete"]
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".tar")) == ["in.tar", "kept-0.tar", "kept-1.tar"]
    assert sh("tarsplit -n 3 -o q-%d.tar -C 'true %s' --nodelete --index q.json in.tar").stderr == b""


def _tar(members):
    return b"".join(make_corpus.member(n, d) for n, d in members) + make_corpus.EOA


def test_post_command_does_not_eat_the_input(sh, tmp_path):
    data = _tar([(f"s{i:04d}.txt", b"x" * 600) for i in range(400)])
    p = sh("tarsplit -n 50 -o 'part-%02d.tar' -p 'cat > /dev/null' -", input=data)
    total = 0
    for name in sorted(os.listdir(tmp_path)):
        if name.startswith("part-"):
            with tarfile.open(tmp_path / name) as t:
                total += len(t.getnames())
    assert total == 400, p.stderr


MEMBERS = [(f"d{i % 3}/s{i:04d}.{f}", (f"{f} {i} " * (20 + i % 7)).encode())
           for i in range(240) for f in ("cls", "txt")]


def run_argv(cmd, cwd, input=None, env=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60,
                          env={**os.environ, **(env or {})}, **kw)


def wait_until(pred, timeout=20):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def partials(d):
    return [n for n in os.listdir(d) if "partial" in n]


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
        listed = run_argv(["tar", "tf", name], tmp_path)
        assert listed.returncode == 0, (name, listed.stderr)
        got = read_tar((tmp_path / name).read_bytes())
        assert [n for n, _ in got] == listed.stdout.decode().split()
        assert len(got) == 40 or extra  # 20 samples of 2 members (a split's last shard may be short)
        seen += got
    want = dict(MEMBERS)
    assert all(want[n] == body for n, body in seen)


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


def test_tarsplit_terminated_in_a_post_command_leaves_none_of_it_running(tmp_path):
    """SIGTERM while a -p command ran killed only its shell: the command's
    children (an upload, here a sleep) went on, orphaned."""
    marker = unique_sleep()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(30):
            info = tarfile.TarInfo(f"s{i:03d}.txt")
            info.size = 3
            tf.addfile(info, io.BytesIO(b"abc"))
    (tmp_path / "in.tar").write_bytes(buf.getvalue())
    proc = subprocess.Popen(["tarsplit", "-n", "10", "-o", "out-%03d.tar", "-p", f"{marker}; true", "in.tar"],
                            cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: processes_with(marker))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
        assert wait_for(lambda: not processes_with(marker), 10), "the post command's children still run"
        assert sorted(os.listdir(tmp_path)) == ["in.tar", "out-000.tar"]  # committed before its post command
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_left(marker)


def small_tar(n, prefix="s"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(n):
            data = f"{prefix} {i}".encode()
            info = tarfile.TarInfo(f"{prefix}{i:03d}.txt")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("args, victim", [
    ("-n 10 --start 1 -o data-%d.tar data-0.tar data-1.tar", "data-1.tar"),  # input 1 would be replaced unread
    ("-n 10 -o data-%d.tar data-0.tar", "data-0.tar"),
    ("--shards 2 --total 40 --start 1 -o data-{shard}.tar data-0.tar data-1.tar", "data-1.tar"),
    ("--fractions a=0.5,b=0.5 -o data-{split}-%d.tar data-0.tar data-1.tar data-a-0.tar", "data-a-0.tar"),
    ("-n 10 -o out --manifest data-0.tar data-0.tar", "data-0.tar"),
    ("-n 10 -o out --index data-1.tar data-0.tar data-1.tar", "data-1.tar"),
])
def test_tarsplit_never_replaces_an_input(args, victim, tmp_path):
    """`tarsplit -n 10 --start 1 -o 'data-%d.tar' data-0.tar data-1.tar`
    (resplitting in place) committed shard data-1.tar over the input
    data-1.tar before it was read: the run then read its own shard back,
    duplicated 10 samples, lost 20, exit 0.  `--manifest` or `--index` naming an input replaced it
    with JSON, exit 0.  Now refused (exit 2) before that input is touched."""
    for name, prefix in (("data-0.tar", "a"), ("data-1.tar", "b"), ("data-a-0.tar", "c")):
        (tmp_path / name).write_bytes(small_tar(20, prefix))
    before = (tmp_path / victim).read_bytes()
    p = run(f"tarsplit {args}", tmp_path)
    assert p.returncode == 2, p.stderr
    assert f"{victim}: is also" in one_line(p)
    assert (tmp_path / victim).read_bytes() == before


@pytest.mark.parametrize("size", ["1e400", "inf", "-inf", "infGiB"])
def test_tarsplit_size_beyond_a_float_is_a_usage_error(size, tmp_path):
    """`-s 1e400` (or `inf`) was an internal error (OverflowError)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo("a.txt")
        tf.addfile(info, io.BytesIO(b""))
    (tmp_path / "in.tar").write_bytes(buf.getvalue())
    p = run(f"tarsplit -s {size} -o out in.tar", tmp_path)
    assert p.returncode == 2
    assert "bad size" in one_line(p)
    assert sorted(os.listdir(tmp_path)) == ["in.tar"]


shard = make_corpus.plain_shard


def members(path):
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf if m.isfile()]


@pytest.mark.parametrize("pattern, shards", [("p-%.0s.tar", "0 and 1"), ("p-%.1s.tar", "1 and 10"),
                                             ("p-{shard!s:.1}.tar", "1 and 10")])
def test_tarsplit_pattern_giving_two_shards_one_name_is_refused(pattern, shards, tmp_path):
    (tmp_path / "in.tar").write_bytes(shard(30))
    p = run(f"tarsplit -n 1 -o '{pattern}' in.tar", tmp_path)
    assert p.returncode == 2
    assert f"gives shards {shards} the same name" in one_line(p)
    assert os.listdir(tmp_path) == ["in.tar"]


def test_tarsplit_prefix_keeps_its_ending_and_compression(tmp_path):
    (tmp_path / "in.tar").write_bytes(shard(5))
    for out, z in (("gz/part.tar.gz", ""), ("tar/part.tar", ""), ("z/part.tar", "-z"), ("plain/part", "")):
        os.makedirs(tmp_path / os.path.dirname(out))
        p = run(f"tarsplit {z} -n 2 -o {out} in.tar", tmp_path)
        assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path / "gz")) == [f"part-00000{i}.tar.gz" for i in range(3)]
    assert sorted(os.listdir(tmp_path / "tar")) == [f"part-00000{i}.tar" for i in range(3)]
    assert sorted(os.listdir(tmp_path / "z")) == [f"part-00000{i}.tar.gz" for i in range(3)]
    assert sorted(os.listdir(tmp_path / "plain")) == [f"part-00000{i}.tar" for i in range(3)]
    for d in ("gz", "z"):
        assert (tmp_path / d / "part-000000.tar.gz").read_bytes()[:2] == b"\x1f\x8b"
        assert [n for n, _ in members(tmp_path / d / "part-000002.tar.gz")] == ["s0004.cls", "s0004.txt"]


def test_a_failed_upstream_leaves_its_last_shard_uncommitted(sh, tmp_path):
    # issue 40: `tarproc ... | tarsplit -n 50 -o p` committed every shard and exited 0 when tarproc failed
    sh("seq 1 120 | lines2tar > in.tar")
    fail = "tarproc -c 'test $(cat sample.__key__) != 000000119' in.tar"  # the last sample fails
    p = sh(f"{fail} | tarsplit -n 50 -o p; echo ${{PIPESTATUS[1]}} > rc", ok=False)
    err = p.stderr.decode().splitlines()
    mine = [line for line in err if line.startswith("tarsplit: ")]  # (tarproc's lines interleave)
    assert (tmp_path / "rc").read_text() == "1\n", err  # tarsplit's own status
    assert "not committed (2 shards before it are); --allow-truncated" in mine[-1], err
    assert any("--strict makes this an error; in a pipeline, set -o pipefail" in line for line in err), err
    assert sorted(f.name for f in tmp_path.iterdir() if f.name.startswith("p-")) == ["p-000000.tar", "p-000001.tar"]
    assert [len(read_tar((tmp_path / f"p-00000{i}.tar").read_bytes())) for i in (0, 1)] == [50, 50]
    sh("rm p-*")
    p = sh(f"{fail} | tarsplit -n 50 -o p --allow-truncated", ok=False)
    assert p.returncode == 1  # (tarproc's status: pipefail)
    assert len(read_tar((tmp_path / "p-000002.tar").read_bytes())) == 19
    # an input that ends with its marker commits every shard, the one holding its end too
    p = sh("tarsplit -n 50 -o q in.tar")
    assert sorted(f.name for f in tmp_path.iterdir() if f.name.startswith("q-")) == [
        "q-000000.tar", "q-000001.tar", "q-000002.tar"]


def test_without_o_it_says_where_the_shards_go(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(tar_bytes([(f"k{i}.txt", b"x") for i in range(25)]))
    p = sh("tarsplit -n 10 in.tar", stderr_ok=True)
    assert p.stderr.decode() == f"tarsplit: no -o given: writing the shards as temp-%06d.tar in {tmp_path} " \
                                "(-o PREFIX names them)\n"
    assert sorted(glob.glob(str(tmp_path / "temp-*"))) == [str(tmp_path / f"temp-{i:06d}.tar") for i in range(3)]
    p = sh("tarsplit -q -z -n 10 in.tar", stderr_ok=True)  # said whatever -q
    assert "writing the shards as temp-%06d.tar.gz in" in p.stderr.decode()
    assert sh("tarsplit -n 10 -o temp in.tar").stderr == b""  # named: no word


def test_a_split_that_gets_no_sample_is_named(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(tar_bytes([(f"k{i}.txt", b"x") for i in range(20)]))
    p = sh("mkdir -p fr fs && tarsplit --fractions 'train=0.99,val=0.01' --seed 1 -o 'fr/{split}-%06d.tar' in.tar", stderr_ok=True)
    assert "tarsplit: warning: val: no sample fell in this split: no shard written for it\n" in p.stderr.decode()
    assert sorted(os.listdir(tmp_path / "fr")) == ["train-000000.tar"]
    p = sh("tarsplit --fractions 'a=0.5,b=0.5' --seed 1 -o 'fs/{split}-%06d.tar' in.tar", stderr_ok=True)
    assert "no sample fell" not in p.stderr.decode()
