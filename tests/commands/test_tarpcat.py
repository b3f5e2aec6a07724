"""tarpcat: many shards concurrently, every sample exactly once, damage."""

import collections
import gzip
import os
import signal
import subprocess
import tarfile
import time

import pytest

from helpers import read_tar, samples_of, tar_bytes
import make_corpus as M


def make_shards(tmp_path, n=24, per=30):
    """``n`` shards (every third gzip-compressed) of ``per`` samples each;
    returns the list of (name, bytes) members over all shards."""
    everything = []
    for s in range(n):
        members = []
        for i in range(per):
            key = f"s{s:03d}/{i:04d}"
            members.append((f"{key}.txt", f"shard {s} sample {i} ".encode() * (1 + (i * s) % 17)))
            members.append((f"{key}.cls", str(i % 5).encode()))
        data = tar_bytes(members)
        if s % 3 == 0:
            (tmp_path / f"shard-{s:03d}.tar.gz").write_bytes(gzip.compress(data, mtime=0))
        else:
            (tmp_path / f"shard-{s:03d}.tar").write_bytes(data)
        everything += members
    return everything


def shard_names(tmp_path):
    return sorted(p for p in os.listdir(tmp_path) if p.startswith("shard-"))


def samples_in_order(members):
    keys = []
    for name, _ in members:
        k = name.split(".")[0]
        if not keys or keys[-1] != k:
            keys.append(k)
    return keys


def test_many_shards_same_multiset(sh, tmp_path):
    everything = make_shards(tmp_path)
    names = " ".join(shard_names(tmp_path))
    out = sh(f"tarpcat -w 3 {names}").stdout
    got = read_tar(out)
    assert collections.Counter(got) == collections.Counter(everything)
    keys = samples_in_order(got)
    assert len(keys) == len(set(keys)) == 24 * 30  # exactly once, never split
    # deterministic: the same input and options give the same bytes
    assert sh(f"tarpcat -w 3 {names}").stdout == out
    # one worker is plain concatenation, like tarcat
    assert sh(f"tarpcat -w 1 {names}").stdout == sh(f"tarcat {names}").stdout


def test_shuffle_seed_count_filelist_and_braces(sh, tmp_path):
    everything = make_shards(tmp_path, n=12, per=40)
    (tmp_path / "list.txt").write_text("\n".join(shard_names(tmp_path)) + "\n")
    plain = sh("tarpcat -w 2 -T list.txt").stdout
    a = sh("tarpcat -w 2 -T list.txt --shuffle 100 --seed 5").stdout
    b = sh("tarpcat -w 2 -T list.txt --shuffle 100 --seed 5").stdout
    c = sh("tarpcat -w 2 -T list.txt -s 100 --seed 6").stdout
    assert a == b and a != c and a != plain
    for out in (plain, a, c):
        assert collections.Counter(read_tar(out)) == collections.Counter(everything)
    order = samples_in_order(read_tar(a))
    assert order != sorted(order)
    first = sh("tarpcat -w 2 -c 33 --shuffle 50 --seed 1 -T list.txt").stdout
    assert len(samples_in_order(read_tar(first))) == 33
    assert len(samples_in_order(read_tar(sh("tarpcat -c 7 -T list.txt").stdout))) == 7
    # brace expansion, gzip and plain shards mixed
    braces = sh("tarpcat -w 2 'shard-{001..002}.tar' 'shard-{000,003}.tar.gz'").stdout
    assert len(samples_in_order(read_tar(braces))) == 4 * 40
    sh("tarpcat -w 2 -T list.txt -o all.tar.gz")
    assert collections.Counter(read_tar(gzip.decompress((tmp_path / "all.tar.gz").read_bytes()))) == \
        collections.Counter(everything)


def test_damaged_shard_exit_2_or_skipped_with_ignore_errors(sh, tmp_path):
    everything = make_shards(tmp_path, n=8, per=20)
    bad = tmp_path / "shard-004.tar"
    data = bytearray(bad.read_bytes())
    data[512 * 6 + 100] ^= 0xFF  # inside the 4th header: bad checksum
    bad.write_bytes(bytes(data))
    names = " ".join(shard_names(tmp_path))
    p = sh(f"tarpcat -w 2 {names} > out.tar", ok=False)
    assert p.returncode == 2
    err = p.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "shard-004.tar" in err[0] and "checksum" in err[0]
    p = sh(f"tarpcat -w 2 --ignore-errors -v {names}", stderr_ok=True)
    got = read_tar(p.stdout)
    others = [m for m in everything if not m[0].startswith("s004/")]
    kept = [m for m in got if m[0].startswith("s004/")]
    assert collections.Counter(m for m in got if not m[0].startswith("s004/")) == collections.Counter(others)
    assert len(kept) < 40 and all(m in everything for m in kept)  # only what came before the damage
    err = p.stderr.decode()
    assert "bad shard cut short: shard-004.tar" in err and f"1 of {len(shard_names(tmp_path))} shards bad and cut short" in err and "damage kept, the rest skipped)" in err
    # a missing shard
    p = sh("tarpcat -w 2 shard-000.tar.gz nosuch.tar > out.tar", ok=False)
    assert p.returncode == 2 and b"nosuch.tar" in p.stderr and len(p.stderr.splitlines()) == 1


def test_head_ends_quietly_and_help(sh, tmp_path):
    make_shards(tmp_path, n=6, per=200)
    names = " ".join(shard_names(tmp_path))
    p = sh(f"tarpcat -w 2 {names} | head -c 100 | wc -c; echo ${{PIPESTATUS[0]}}")
    assert p.stdout.split()[0] == b"100"
    assert p.stdout.split()[1] in (b"0", b"141")
    assert b"examples:" in sh("tarpcat --help").stdout


def test_same_key_side_by_side_as_every_writer(sh, tmp_path):
    """Samples of different shards (other workers, batches, a shuffle) that come out side by side with one
    key read back as one sample: as SampleWriter does for every writer (docs/reading.md), allowed when their
    fields differ, refused when a field would come twice (one line, exit 2, nothing under the final name)."""
    import webdataset as wds

    def shard(name, *members):
        (tmp_path / name).write_bytes(tar_bytes(list(members)))

    shard("a.tar", ("a0.txt", b"a0"), ("k.jpg", b"A"))
    shard("b.tar", ("k.jpg", b"B"), ("b1.txt", b"b1"))  # k.jpg again: refused after a.tar
    shard("c.tar", ("k.cls", b"C"), ("c1.txt", b"c1"))  # k.cls: fine after a.tar
    shard("d.tar", ("k.txt", b"D"))  # a shard (so a batch) of one sample: k's fields add up
    shard("big.tar", ("a0.txt", b"a0"), ("k.jpg", b"L" * 3000))  # a large member (--blob-threshold 1KiB)
    shard("big2.tar", ("k.jpg", b"L" * 3000), ("b1.txt", b"b1"))
    for i in range(4):
        shard(f"e{i}.tar", ("k.txt", b"e%d" % i))  # shuffled, two k.txt always meet
        shard(f"f{i}.tar", ("k.f%d" % i, b"f%d" % i))  # shuffled, any order is one sample k
    msg = "sample 'k': field 'jpg' written twice: a sample with the same key came just before"
    ref = sh("tarcat a.tar b.tar -o out.tar", ok=False)
    assert ref.returncode == 2 and msg in ref.stderr.decode()
    for opts in ("-w 1 a.tar d.tar b.tar", "-w 2 a.tar b.tar", "-w 3 -c 9 a.tar d.tar b.tar",
                 "-w 1 --blob-threshold 1KiB big.tar b.tar", "-w 2 --blob-threshold 1KiB a.tar big2.tar",
                 "-w 2 --shuffle 10 --seed 1 e?.tar"):
        p = sh(f"tarpcat {opts} -o out.tar", ok=False)
        lines = p.stderr.decode().splitlines()
        assert p.returncode == 2 and len(lines) == 1, (opts, p.stderr)
        assert "sample 'k': field " in lines[0] and "--rekey" in lines[0] and "--update" in lines[0], opts
        assert not (tmp_path / "out.tar").exists(), opts
        if "e?" not in opts:  # the same line as tarcat's
            assert lines[0] == "tarpcat" + ref.stderr.decode().strip()[len("tarcat"):], opts
    assert not [n for n in os.listdir(tmp_path) if not n.endswith(".tar") or n.startswith("out")]
    # on stdout, in a pipe: what came before, as tarcat writes it (readable, the first k kept)
    p = sh("tarpcat -w 2 a.tar b.tar | cat > piped.tar", ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    assert (tmp_path / "piped.tar").read_bytes() == sh("tarcat a.tar b.tar | cat", ok=False).stdout
    assert [(s["__key__"], s.get("jpg")) for s in wds.WebDataset(str(tmp_path / "piped.tar"),
                                                                  shardshuffle=False)] == [("a0", None), ("k", b"A")]
    # fields differ: written, and the bytes are tarcat's
    want = sh("tarcat a.tar d.tar c.tar").stdout
    for opts in ("-w 1", "-w 3", "-w 2 -c 9"):
        assert sh(f"tarpcat {opts} a.tar d.tar c.tar").stdout == want, opts
    (tmp_path / "adc.tar").write_bytes(want)
    got = {s["__key__"]: sorted(k for k in s if not k.startswith("__"))
           for s in wds.WebDataset(str(tmp_path / "adc.tar"), shardshuffle=False)}
    assert got == {"a0": ["txt"], "k": ["cls", "jpg", "txt"], "c1": ["txt"]}
    out = sh("tarpcat -w 2 --shuffle 10 --seed 1 f?.tar").stdout
    assert samples_of(out) == {"k": {f"f{i}": b"f%d" % i for i in range(4)}}


def test_side_by_side_rule_on_the_merged_order_matches_sample_writer(tmp_path):
    """Shards whose keys repeat across them, merged in order (1-3 workers) and shuffled: the library
    yields exactly the samples SampleWriter would write in that order, and stops where it would, with its
    message.  The order is learnt from the same shards with unique keys (same sizes, so the same batches,
    turns and shuffle)."""
    import io
    import random
    import tarfile

    from tarproc.core.grouping import SampleWriter
    from tarproc.errors import BadSample
    from tarproc.sources.pcat import parallel_encoded

    def names_of(blob):
        with tarfile.open(fileobj=io.BytesIO(bytes(blob) + bytes(1024))) as tf:
            return [m.name for m in tf]

    def run(urls, **kw):
        got = []
        try:
            for blob in parallel_encoded(urls, **kw):
                got.append(names_of(blob))
        except BadSample as e:
            return got, str(e)
        return got, None

    outcomes = set()
    for trial in range(6):
        r = random.Random(trial)
        plain, unique, samples = [], [], {}
        for s in range(5):
            members, umembers, last = [], [], None
            for i in range(r.randrange(1, 6)):
                key = r.choice([k for k in "pqr" if k != last])  # never twice in a row: one shard, one sample
                last = key
                for field in sorted(r.sample(["a", "b", "c"], r.randrange(1, 3))):
                    members.append((f"{key}.{field}", b"x" * r.randrange(1, 700)))
                    umembers.append((f"{key}{s}{i}.{field}", members[-1][1]))  # the same sizes
                samples[f"{key}{s}{i}"] = key
            for name, ms, out in ((f"p{s}.tar", members, plain), (f"u{s}.tar", umembers, unique)):
                (tmp_path / name).write_bytes(tar_bytes(ms))
                out.append(str(tmp_path / name))
        for kw in (dict(workers=1 + trial % 3), dict(workers=2, shuffle=4, seed=trial)):
            order, err = run(unique, **kw)
            assert err is None and len(order) == len(samples)
            writer, expected, want = SampleWriter(io.BytesIO()), [], None
            for names in order:  # what SampleWriter does with the samples in this order
                ukey = names[0].split(".")[0]
                try:
                    writer.write({"__key__": samples[ukey], **{n.split(".", 1)[1]: b"" for n in names}})
                except BadSample as e:
                    want = str(e)
                    break
                expected.append([samples[ukey] + n[len(ukey):] for n in names])
            assert run(plain, **kw) == (expected, want), kw
            outcomes.add(want is None)
    assert outcomes == {True, False}  # both allowed and refused orders were tried


def shard(n, prefix="s", size=20):
    return M.plain_shard(n, prefix, size)


def names(path):
    with tarfile.open(path) as tf:
        return [m.name for m in tf if m.isfile()]


run = M.bash


one_line = M.one_line


processes_with = M.processes_with


def test_tarpcat_with_stdin_closed_is_a_read_error_not_a_crash(tmp_path):
    p = run("tarpcat <&-", tmp_path)
    assert p.returncode == 2
    assert one_line(p) == "tarpcat: -: read error: Bad file descriptor"


@pytest.mark.parametrize("how", ["sigterm", "count"])
def test_tarpcat_stopped_leaves_no_input_command_running(tmp_path, how):
    """A worker reading a `pipe:` input is stopped (the parent got SIGTERM,
    or --count was reached): its input command's process group ends too, and
    an existing output is left as it was, with no temporary file beside it."""
    (tmp_path / "a.tar").write_bytes(shard(5, "a"))
    (tmp_path / "b.tar").write_bytes(shard(5, "b"))
    (tmp_path / "out.tar").write_bytes(b"old output")
    marker = f"{time.time() % 1000:.6f}"  # a unique `sleep` to look for
    slow = f"'pipe:cat b.tar; sleep 3{marker}'"
    if how == "count":
        p = run(f"tarpcat -w 2 -c 7 a.tar {slow} -o out.tar", tmp_path, timeout=30)
        assert p.returncode == 0, p.stderr
        assert len(names(tmp_path / "out.tar")) == 14
    else:
        proc = subprocess.Popen(["bash", "-c", f"exec tarpcat -w 2 a.tar {slow} -o out.tar"], cwd=tmp_path,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while not processes_with(f"sleep 3{marker}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(f"sleep 3{marker}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) in (143, -15)
        assert (tmp_path / "out.tar").read_bytes() == b"old output"
    deadline = time.monotonic() + 5
    while processes_with(f"sleep 3{marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(f"sleep 3{marker}") == []
    assert sorted(os.listdir(tmp_path)) == ["a.tar", "b.tar", "out.tar"]


def _slow_parts(tmp_path, name, n=6, cut=3):
    data = tar_bytes([(f"{name}{i}.txt", b"x" * 10) for i in range(n)])
    (tmp_path / f"{name}1").write_bytes(data[: cut * 1024])  # one 1 KiB member per sample
    (tmp_path / f"{name}2").write_bytes(data[cut * 1024:])
    (tmp_path / f"{name}.tar").write_bytes(data)


def test_tarpcat_passes_samples_on_while_its_input_stalls(tmp_path):
    import os
    import signal
    import subprocess
    import time

    _slow_parts(tmp_path, "s")
    # 3 samples arrive, then the input is silent for 20 s: the first sample must come out at once
    cmd = """tarpcat -w 1 'pipe:sh -c "cat s1; sleep 20; cat s2"' | tarcat -c 1 -o out.tar"""
    start = time.monotonic()
    p = subprocess.Popen(["bash", "-c", cmd], cwd=tmp_path, start_new_session=True, stderr=subprocess.PIPE)
    try:
        while not (tmp_path / "out.tar").exists() and time.monotonic() - start < 15:
            time.sleep(0.05)
        took = time.monotonic() - start
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert took < 15, "no output while the input stalled"
    assert [n for n, _ in read_tar((tmp_path / "out.tar").read_bytes())] == ["s0.txt"]


def test_tarpcat_early_batches_keep_the_order_and_bytes(sh, tmp_path):
    _slow_parts(tmp_path, "a")
    _slow_parts(tmp_path, "b", n=5, cut=2)
    fast = sh("tarpcat -w 2 a.tar b.tar").stdout
    slow = sh("""tarpcat -w 2 'pipe:sh -c "cat a1; sleep 0.5; cat a2"' 'pipe:sh -c "cat b1; sleep 0.3; cat b2"'""").stdout
    assert slow == fast and len(read_tar(slow)) == 11


def test_large_fields_of_stdin_and_of_a_symlinked_shard(sh, tmp_path):
    """A field past the blob threshold crosses from a worker as a reference
    to its file: a symlinked shard was refused ("Too many levels of symbolic
    links": the reference was opened with O_NOFOLLOW), and stdin's
    /proc/PID/fd name died with the worker's reader; now each is what
    tarcat gives."""
    (tmp_path / "s.tar").write_bytes(tar_bytes([(f"k{i}.bin", bytes([i]) * 5000) for i in range(20)]))
    (tmp_path / "link.tar").symlink_to("s.tar")
    want = sh("tarcat s.tar").stdout
    assert sh("tarpcat --blob-threshold 1000 link.tar").stdout == want
    assert sh("tarpcat -w 2 --blob-threshold 1000 - < s.tar").stdout == want
