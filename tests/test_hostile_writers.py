"""Adversarial review of the writing commands: where the output goes (a
directory, a symlink, the input itself), tarcreate's sources (large files,
large command outputs, files that shrink while copied), tarsplit's name
patterns, URL lists that would not fit in memory, and signals while a plan
or text is still arriving.  Every command runs installed, as a subprocess;
archives are read back with Python's tarfile."""

import hashlib
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "hostile"))
import make_corpus as M  # noqa: E402


shard = M.plain_shard


def members(path):
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf if m.isfile()]


run = M.bash
one_line = M.one_line


# ------------------------------------------------------------------ where the output goes

WRITERS = {
    "tarcat": "tarcat in.tar -o {out}",
    "tarsort": "tarsort in.tar -o {out}",
    "tarproc": "tarproc -c true in.tar -o {out}",
    "tarcreate": "printf '0.txt text:hi\\n' | tarcreate - -o {out}",
    "lines2tar": "seq 3 | lines2tar -o {out}",
}


@pytest.mark.parametrize("command", list(WRITERS))
def test_output_to_a_directory_is_refused_before_any_work(command, tmp_path):
    (tmp_path / "in.tar").write_bytes(shard(5))
    (tmp_path / "d").mkdir()
    for out in ("d", "d/", "missing/"):
        p = run(WRITERS[command].format(out=out), tmp_path)
        assert p.returncode == 1, p.stderr
        assert "names a directory" in one_line(p)
    assert os.listdir(tmp_path / "d") == [] and sorted(os.listdir(tmp_path)) == ["d", "in.tar"]
    if command == "tarcat":  # refused at once, not after reading an input that has not ended yet
        t = time.monotonic()
        p = run("exec tarcat -o d < <(exec 2>&-; sleep 20)", tmp_path, timeout=25)
        assert p.returncode == 1 and time.monotonic() - t < 15


@pytest.mark.parametrize("command", ["tarcat", "tarcreate"])
def test_output_on_a_symlink_replaces_the_link_never_its_target(command, tmp_path):
    """A symlinked dataset (git-annex, DVC): writing an output under a
    link's name commits a new file there; the shared target is untouched."""
    (tmp_path / "in.tar").write_bytes(shard(5))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "object").write_bytes(b"shared, read by others")
    os.symlink(tmp_path / "cache" / "object", tmp_path / "link.tar")
    p = run(WRITERS[command].format(out="link.tar"), tmp_path)
    assert p.returncode == 0, p.stderr
    assert not os.path.islink(tmp_path / "link.tar")
    assert len(members(tmp_path / "link.tar")) == (10 if command == "tarcat" else 1)
    assert (tmp_path / "cache" / "object").read_bytes() == b"shared, read by others"
    assert os.listdir(tmp_path / "cache") == ["object"]


def test_output_onto_its_own_input_keeps_every_sample(tmp_path):
    (tmp_path / "a.tar").write_bytes(shard(300, size=3000))
    before = members(tmp_path / "a.tar")
    p = run("tarcat a.tar -o a.tar && tarsort --memory 100KB -r a.tar -o a.tar && tarsort --memory 100KB a.tar -o a.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(members(tmp_path / "a.tar")) == sorted(before)
    assert sorted(os.listdir(tmp_path)) == ["a.tar"]


@pytest.mark.parametrize("cmd", ["tarcat a.tar", "tarshow a.tar", "tar2tsv a.tar", "tarsort a.tar"])
def test_stdout_onto_its_own_input_is_refused(tmp_path, cmd):
    """`tarcat a.tar >> a.tar` would read its own output forever: refused
    with one line, as GNU cat does, and the input is left as it was."""
    (tmp_path / "a.tar").write_bytes(shard(20))
    before = (tmp_path / "a.tar").read_bytes()
    p = run(f"{cmd} >> a.tar", tmp_path, timeout=30)
    err = p.stderr.decode() if isinstance(p.stderr, bytes) else p.stderr
    assert p.returncode == 2 and err.count("\n") == 1, err
    assert "a.tar: input file is output file" in err
    assert (tmp_path / "a.tar").read_bytes() == before


# ------------------------------------------------------------------ tarcreate's sources


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


# ------------------------------------------------------------------ tarsplit's name patterns


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


# ------------------------------------------------------------------ URL lists that do not fit


@pytest.mark.parametrize("command", [
    "tarpcat 'x-{0..99999999}.tar'",
    "tarpcat --shuffle 10 'x-{0..99999999}.tar'",
    "tarmix spec.json",
    "kujob -s '{0..99999999}' -- true",
])
def test_huge_url_lists_are_one_line_not_gigabytes(command, tmp_path):
    (tmp_path / "spec.json").write_text('{"sources": [{"shards": "x-{0..99999999}.tar"}]}')
    p = run(f"/usr/bin/time -f 'maxrss %M' {command}", tmp_path, env={"TARPROC_MAX_URLS": "1000"})
    err, _, rss = p.stderr.decode().rpartition("maxrss")
    assert p.returncode != 0 and int(rss) < 200 * 1024, (p.returncode, rss)
    lines = [line for line in err.splitlines() if line.strip() and "exited with" not in line]
    assert len(lines) == 1 and "more than 1000 entries" in lines[0] and "TARPROC_MAX_URLS" in lines[0], err


def test_tarcat_shuffles_a_long_list_through_a_bounded_buffer(tmp_path):
    for k in range(3):
        (tmp_path / f"in-{k}.tar").write_bytes(shard(2))
    # 3 real shards, then 10^8 names: with the bound at 50 the list is never
    # held; the missing shards make it fail, after it has started reading
    p = run("tarcat --shuffle 5 --seed 1 'in-{0..2}.tar' 'nope-{0..99999999}.tar' > out.tar", tmp_path,
            env={"TARPROC_MAX_URLS": "50"}, timeout=60)
    assert p.returncode == 2 and "nope-" in one_line(p) and "cannot open" in one_line(p)
    from tarproc.core import limits
    from tarproc.sources.shardlist import shuffle_urls

    old = limits.MAX_URLS
    limits.MAX_URLS = 100
    try:
        urls = [f"u{i}" for i in range(1000)]
        once = list(shuffle_urls(iter(urls), seed=3))
        assert sorted(once) == sorted(urls) and once != urls and once == list(shuffle_urls(iter(urls), seed=3))
        short = shuffle_urls(urls[:100], seed=3)
        assert isinstance(short, list) and sorted(short) == sorted(urls[:100])
    finally:
        limits.MAX_URLS = old
