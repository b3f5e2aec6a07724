"""tarproc --per-command N: one command over several samples' files.  The
installed command in real pipes, on shards written by GNU tar, Python's
tarfile and tarproc; outputs read with tarfile (and Pillow)."""

import io
import os
import subprocess
import tarfile

from conftest import require
from helpers import jpeg_bytes, samples_of, tar_bytes


def write(tmp_path, name, data):
    (tmp_path / name).write_bytes(data)


def gnu_tar_shard(tmp_path, name, members):
    """A shard written by GNU tar from files (members in the given order)."""
    src = tmp_path / (name + ".d")
    src.mkdir()
    for member, data in members:
        (src / member).write_bytes(data)
    names = "\n".join(m for m, _ in members) + "\n"
    subprocess.run(["tar", "-cf", str(tmp_path / name), "-C", str(src), "--no-recursion", "-T", "-"],
                   input=names.encode(), check=True)


def images(n):
    members = []
    for i in range(n):
        members += [(f"img{i:03d}.jpg", jpeg_bytes(320, 240, seed=i)), (f"img{i:03d}.cls", str(i).encode())]
    return members


# ---------------------------------------------------------------- same outputs as one command a sample


def test_gm_mogrify_batches_give_the_per_sample_bytes(sh, tmp_path):
    require("gm")
    from PIL import Image

    gnu_tar_shard(tmp_path, "gnu.tar", images(7))
    sh("tarcat gnu.tar > own.tar")  # the same samples written by tarproc
    for shard in ("gnu.tar", "own.tar"):
        sh(f"tarproc -p 2 -c 'gm mogrify -resize 128x96 *.jpg' {shard} > one.tar")
        # 7 samples in batches of 3: the last one holds a single sample
        sh(f"tarproc -p 2 --per-command 3 -c 'gm mogrify -resize 128x96 *.jpg' {shard} > batch.tar")
        one, batch = (tmp_path / "one.tar").read_bytes(), (tmp_path / "batch.tar").read_bytes()
        assert batch == one
        out = samples_of(batch)
        assert list(out) == [f"img{i:03d}" for i in range(7)]
        for i, sample in enumerate(out.values()):
            assert sorted(sample) == ["cls", "jpg"] and sample["cls"] == str(i).encode()
            assert Image.open(io.BytesIO(sample["jpg"])).size == (128, 96)


# (member names with control characters, a newline, are refused by the reader, as in every command)
HOSTILE = ["a key with spaces", "-rf", "--help", "ünïcødé ☃", "*", "$(touch pwned)", "x" * 90, "dir/sub key"]


def test_shell_transform_hostile_keys_same_as_per_sample(sh, tmp_path):
    members = []
    for i, key in enumerate(HOSTILE):
        members += [(f"{key}.txt", f"text {i} of {key}\n".encode()), (f"{key}.cls", b"%d" % i)]
    write(tmp_path, "in.tar", tar_bytes(members, format=tarfile.PAX_FORMAT))
    sh("tarproc -p 2 -c 'tr a-z A-Z < sample.txt > sample.up.txt; cat sample.__key__ > sample.key' "
       "in.tar > one.tar")
    sh("tarproc -p 2 --per-command 4 -c 'for f in *.txt; do s=${f%.txt}; tr a-z A-Z < \"$f\" > \"$s.up.txt\"; "
       "cat \"$s.__key__\" > \"$s.key\"; done' in.tar > batch.tar")
    one, batch = (tmp_path / "one.tar").read_bytes(), (tmp_path / "batch.tar").read_bytes()
    assert batch == one
    out = samples_of(batch)
    assert list(out) == HOSTILE
    for i, (key, sample) in enumerate(out.items()):
        assert sample["up.txt"] == f"text {i} of {key}\n".encode().upper()
        assert sample["key"] == key.encode()  # each sample's own key file
    assert not (tmp_path / "pwned").exists()


def test_per_command_1_is_the_same_bytes_as_without(sh, tmp_path):
    write(tmp_path, "in.tar", tar_bytes([(f"k{i}.txt", b"%d" % i) for i in range(5)]))
    a = sh("tarproc -c 'cp sample.txt sample.x' in.tar").stdout
    b = sh("tarproc --per-command 1 -c 'cp sample.txt sample.x' in.tar").stdout
    assert a == b and len(samples_of(a)) == 5


def test_what_the_command_sees_and_a_last_partial_batch(sh, tmp_path):
    write(tmp_path, "in.tar", tar_bytes([(f"k{i}.{f}", b"%d" % i) for i in range(7) for f in ("txt", "x.y")]))
    # each sample records the names it shared its directory with
    out = samples_of(sh("tarproc -p 1 --per-command 3 -c 'l=$(ls); for f in *.txt; do echo \"$l\" > \"${f%.txt}.ls\"; done' "
                        "in.tar").stdout)
    assert list(out) == [f"k{i}" for i in range(7)]
    full = [f"sample-{i:06d}.{f}" for i in range(3) for f in ("__key__", "txt", "x.y")]
    assert out["k0"]["ls"].decode().split("\n")[:-1] == sorted(full)
    assert out["k4"]["ls"] == out["k0"]["ls"]
    assert out["k6"]["ls"] == b"sample-000000.__key__\nsample-000000.txt\nsample-000000.x.y\n"
    assert out["k5"]["txt"] == b"5" and out["k5"]["x.y"] == b"5"


def test_a_command_that_deletes_adds_and_rekeys(sh, tmp_path):
    write(tmp_path, "in.tar", tar_bytes([(f"k{i}.{f}", b"%d" % i) for i in range(3) for f in ("txt", "cls")]))
    p = sh("tarproc -v --per-command 3 -c 'rm sample-000000.*; rm sample-000001.cls; echo new > sample-000002.new; "
           "echo renamed > sample-000002.__key__; echo stray > other.txt; echo far > sample-000007.txt; "
           "echo short > sample-1.txt; mkdir sample-000001.dir' in.tar", stderr_ok=True)
    out = samples_of(p.stdout)
    assert list(out) == ["k1", "renamed"]
    assert out["k1"] == {"txt": b"1"}
    assert out["renamed"] == {"cls": b"2", "new": b"new\n", "txt": b"2"}
    assert b"read 3, written 2, skipped 1, failed 0" in p.stderr


# ---------------------------------------------------------------- failures


def failing(tmp_path, n=7):
    """k0..k6; the command of the batch holding k3 (k3, k4, k5 in batches of 3) fails."""
    write(tmp_path, "in.tar", tar_bytes([(f"k{i}.txt", b"%d" % i) for i in range(n)]))
    return ("--per-command 3 -c 'echo made > sample-000000.out; "
            "if grep -qx k3 sample-000000.__key__; then echo oops; exit 3; fi' in.tar")


def test_a_failed_command_fails_each_sample_of_its_batch(sh, tmp_path):
    cmd = failing(tmp_path)
    p = sh(f"tarproc --max-failures 1% --failed-keys failed.txt {cmd} -o out.tar", ok=False)  # checked at the end
    assert p.returncode == 1
    assert not (tmp_path / "out.tar").exists()  # more failures than --max-failures 1%
    assert (tmp_path / "failed.txt").read_bytes() == b"k3\nk4\nk5\n"
    lines = p.stderr.decode().splitlines()
    reports = [line for line in lines if line.startswith("tarproc: sample ")]
    assert reports == [f"tarproc: sample 'k{i}': command failed with exit status 3 (one command for 3 samples, "
                       f"'k3' to 'k5') (failed: not written)" for i in (3, 4, 5)]
    assert lines.count("  | oops") == 1  # its output, once, with the first
    assert "samples read 7, written 4, skipped 0, failed 3" in p.stderr.decode()
    # within --max-failures the others are written, in order
    p = sh(f"tarproc --max-failures 3 {cmd} -o out.tar", ok=False)
    assert p.returncode == 0
    assert list(samples_of((tmp_path / "out.tar").read_bytes())) == ["k0", "k1", "k2", "k6"]


def test_failed_batch_ignore_and_abort(sh, tmp_path):
    cmd = failing(tmp_path)
    p = sh(f"tarproc -e ignore {cmd}", ok=False)
    assert p.returncode == 0  # -e ignore: kept, no limit
    out = samples_of(p.stdout)
    assert list(out) == [f"k{i}" for i in range(7)]
    assert out["k3"]["out"] == b"made\n" and "out" not in out["k4"]  # what each produced
    assert p.stderr.decode().count("(failed: kept what it produced)") == 3
    (tmp_path / "w").mkdir()
    p = sh(f"tarproc -w w -e abort --failed-keys failed.txt {cmd}", ok=False)
    assert p.returncode == 1
    assert os.listdir(tmp_path / "w") == []  # every directory removed
    assert list(samples_of(p.stdout)) == ["k0", "k1", "k2"]
    assert "tarproc: sample 'k3': command failed with exit status 3" in p.stderr.decode()
    assert "'k4'" not in p.stderr.decode()
    assert not (tmp_path / "failed.txt").exists()  # a run stopped early leaves no list


def test_a_symlink_fails_only_its_sample(sh, tmp_path):
    write(tmp_path, "in.tar", tar_bytes([(f"k{i}.txt", b"%d" % i) for i in range(3)]))
    p = sh("tarproc --max-failures 1% --per-command 3 --failed-keys failed.txt "
           "-c 'ln -s /etc/passwd sample-000001.pw' in.tar",
           ok=False)
    assert p.returncode == 1
    assert list(samples_of(p.stdout)) == ["k0", "k2"]
    assert (tmp_path / "failed.txt").read_bytes() == b"k1\n"
    assert "sample 'k1': sample-000001.pw is a symbolic link: refused" in p.stderr.decode()


def test_a_key_with_a_newline_fails_only_its_sample(sh, tmp_path):
    # keys from member names have no control characters (the reader refuses them); a command can try
    write(tmp_path, "in.tar", tar_bytes([(f"k{i}.txt", b"%d" % i) for i in range(3)]))
    p = sh("tarproc --max-failures 1% --per-command 3 -c \"printf 'a\\nb' > sample-000001.__key__\" in.tar", ok=False)
    assert p.returncode == 1
    assert list(samples_of(p.stdout)) == ["k0", "k2"]
    assert "sample 'k1': output unsafe key: 'a\\nb' has control characters (failed: not written)" \
        in p.stderr.decode()


def test_timeout_and_command_not_found(sh, tmp_path):
    write(tmp_path, "in.tar", tar_bytes([(f"k{i}.txt", b"%d" % i) for i in range(4)]))
    p = sh("tarproc -p 2 --max-failures 1% --timeout 1 --per-command 2 "
           "-c 'grep -qx k2 sample-000000.__key__ && sleep 30; true' "
           "--failed-keys failed.txt in.tar", ok=False, timeout=20)
    assert p.returncode == 1
    assert list(samples_of(p.stdout)) == ["k0", "k1"]
    assert (tmp_path / "failed.txt").read_bytes() == b"k2\nk3\n"
    assert "sample 'k3': timed out after 1 s" in p.stderr.decode()
    p = sh("tarproc --per-command 2 -c no-such-command-here in.tar", ok=False)
    assert p.returncode == 1
    assert p.stderr.decode().splitlines() == ["tarproc: sample 'k0': command not found (exit status 127): "
                                              "/usr/bin/bash: line 1: no-such-command-here: command not found: "
                                              "stopped"]


def test_combinations_refused_with_one_line(sh, tmp_path):
    write(tmp_path, "in.tar", tar_bytes([("k.txt", b"x")]))
    for opts in ("-S -c true", "-m -c true", "--add-log log -c true", "--map m.py:f", "--per-command 0 -c true",
                 "--per-command 100001 -c true", "--per-command x -c true"):
        p = sh(f"tarproc --per-command 2 {opts} in.tar" if "per-command" not in opts else f"tarproc {opts} in.tar",
               ok=False)
        assert p.returncode == 2, opts
        lines = [line for line in p.stderr.decode().splitlines() if not line.startswith(("Usage:", "Try "))]
        assert len(lines) == 1 and "--per-command" in lines[0], (opts, p.stderr)
        assert p.stdout == b""


# ---------------------------------------------------------------- bounds and streams


def test_batches_are_cut_by_memory_and_blobs(sh, tmp_path):
    # 1 KiB blob threshold: a sample holds 4 KiB in memory, so does a batch
    write(tmp_path, "in.tar", tar_bytes([(f"k{i}.txt", b"%04d" % i * 225) for i in range(9)]))
    out = samples_of(sh("tarproc -p 1 --blob-threshold 1KiB --per-command 10 "
                        "-c 'for f in *.txt; do ls *.txt | wc -l > \"${f%.txt}.n\"; done' in.tar").stdout)
    assert [s["n"].strip() for s in out.values()] == [b"4"] * 8 + [b"1"]  # 4 x 902 bytes <= 4 KiB < 5 x 902
    assert out["k3"]["txt"] == b"0003" * 225
    write(tmp_path, "big.tar", tar_bytes([(f"k{i}.bin", bytes([i]) * 2048) for i in range(10)]))
    out = samples_of(sh("tarproc -p 1 --blob-threshold 1KiB --per-command 10 "
                        "-c 'for f in *.bin; do ls *.bin | wc -l > \"${f%.bin}.n\"; done' big.tar").stdout)
    assert [s["n"].strip() for s in out.values()] == [b"8"] * 8 + [b"2"] * 2  # 8 large fields a batch
    assert out["k9"]["bin"] == b"\x09" * 2048


def test_head_ends_quietly_and_directories_are_removed(sh, tmp_path):
    write(tmp_path, "in.tar", tar_bytes([(f"k{i:05d}.txt", b"x" * 100) for i in range(3000)]))
    (tmp_path / "w").mkdir()
    p = sh("tarproc -w w -p 2 --per-command 50 -c true in.tar | head -c 1000 | wc -c", ok=False, timeout=30)
    assert p.returncode == 141 and p.stdout.strip() == b"1000" and p.stderr == b""  # as cat: SIGPIPE, quiet
    assert os.listdir(tmp_path / "w") == []
    p = sh("tarproc -w w -p 2 --per-command 50 -c 'echo $RANDOM > sample-000049.r' in.tar | tarcat --count 60",
           ok=False, timeout=30)
    assert p.returncode in (0, 141) and p.stderr == b""
    got = samples_of(p.stdout)
    assert len(got) == 60 and "r" in got["k00049"] and "r" not in got["k00048"]
    assert os.listdir(tmp_path / "w") == []


def test_a_cut_input_gives_the_samples_before_it_then_exit_2(sh, tmp_path):
    data = tar_bytes([(f"k{i:04d}.txt", b"x" * 100) for i in range(200)])
    write(tmp_path, "cut.tar", data[:150 * 1024 + 300])  # inside the 151st header
    one = sh("tarproc -c true cut.tar", ok=False)
    batch = sh("tarproc --per-command 40 -c true cut.tar", ok=False)
    assert one.returncode == batch.returncode == 2
    # (the sample before the cut may have more members: it is not complete)
    assert batch.stdout == one.stdout and len(samples_of(batch.stdout)) == 149  # the partial batch is run
    assert batch.stderr == one.stderr and len(batch.stderr.splitlines()) == 1


def test_base_name_and_a_pipe_from_gnu_tar(sh, tmp_path):
    gnu_tar_shard(tmp_path, "gnu.tar", [(f"k{i}.{f}", b"%d" % i) for i in range(4) for f in ("txt", "cls")])
    out = samples_of(sh("cat gnu.tar | tarproc -b img --per-command 3 -c 'mv img-000001.txt img-000001.t2 2>/dev/null; "
                        "cat img-000000.__key__ > img-000000.k' | tarcat").stdout)
    assert list(out) == ["k0", "k1", "k2", "k3"]
    assert out["k1"] == {"cls": b"1", "t2": b"1"} and out["k0"]["k"] == b"k0" and out["k3"]["k"] == b"k3"


def test_a_successful_command_output_goes_to_stderr_once(sh, tmp_path):
    write(tmp_path, "in.tar", tar_bytes([(f"k{i}.txt", b"%d" % i) for i in range(7)]))
    p = sh("tarproc -p 2 --per-command 3 -c 'echo $(cat *.__key__)' in.tar", stderr_ok=True)
    assert p.stderr == b"k0k1k2\nk3k4k5\nk6\n"  # once a command, in input order (keys without newlines)
    assert list(samples_of(p.stdout)) == [f"k{i}" for i in range(7)]
    assert sh("tarproc -q -p 2 --per-command 3 -c 'echo $(cat *.__key__)' in.tar").stderr == b""


def test_python_api_per_command(tmp_path):
    import threading

    import pytest

    from tarproc import map_command
    from tarproc.errors import UsageError

    samples = [{"__key__": f"k{i}", "txt": b"%d" % i} for i in range(5)]
    got = []

    def run():  # from a thread, as the API allows
        got.extend(map_command(iter(samples), "for f in *.txt; do cat \"$f\" \"$f\" > \"${f%.txt}.two\"; done",
                               parallel=2, per_command=2, workdir=str(tmp_path), quiet=True))

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    assert [s["__key__"] for s in got] == [f"k{i}" for i in range(5)]
    assert [s["two"] for s in got] == [b"%d%d" % (i, i) for i in range(5)]
    assert os.listdir(tmp_path) == []
    for kw in ({"multi": True}, {"subdirs": True}, {"add_log": "log"}, {"per_command": 0}):
        with pytest.raises(UsageError):
            list(map_command(iter(samples), "true", 1, **dict({"per_command": 2}, **kw)))


def test_a_batch_command_naming_sample_dot_gets_a_hint(sh, tmp_path):
    # the user's command, written for one sample, run with --per-command 10: gm cannot open sample.jpg
    (tmp_path / "in.tar").write_bytes(tar_bytes([(f"k{i}.jpg", jpeg_bytes(16, 12, seed=i)) for i in range(12)]))
    p = sh("tarproc --per-command 10 -c 'gm convert sample.jpg -resize 8x6 sample.jpg' in.tar -o out.tar", ok=False)
    first = p.stderr.decode().splitlines()[0]
    assert first == ("tarproc: sample 'k0': command failed with exit status 1 (one command for 10 samples, 'k0' to "
                     "'k9'; with --per-command the files are sample-NNNNNN.FIELD, not sample.FIELD) "
                     "(failed: not written)"), p.stderr
    (tmp_path / "one.sh").write_text("gm convert sample.jpg x.jpg\n")
    p = sh("tarproc --per-command 10 -s one.sh in.tar -o out.tar", ok=False)
    assert "not sample.FIELD" in p.stderr.decode()
    # a command that does not name sample.: no hint
    p = sh("tarproc --per-command 10 -c 'exit 1' in.tar -o out.tar", ok=False)
    assert "NNNNNN" not in p.stderr.decode()
