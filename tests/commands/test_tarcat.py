"""tarcat through real pipes, checked with independent readers (GNU tar,
bsdtar, Python's tarfile, webdataset)."""

import io
import os
import random
import re
import select
import subprocess
import tarfile
import time
from importlib.metadata import version

import pytest

from conftest import require
from helpers import png_bytes, read_tar, samples_of, tar_bytes
import make_corpus

UTF8 = {"LC_ALL": "C.UTF-8"}
LONG_SPLIT = "d" * 100 + "/" + "n" * 95 + ".txt"  # 200 bytes, fits ustar's prefix/name split
LONG_FLAT = "x" * 196 + ".bin"  # 200 bytes, needs a GNU long name or pax
assert len(LONG_SPLIT.encode()) == len(LONG_FLAT.encode()) == 200


def body(i, n=700):
    return random.Random(i).randbytes(n)


def members_for(fmt):
    """Member list covering long, UTF-8 and empty names, in sample order."""
    if fmt == "v7":
        return [("e.cls", b""), ("k1.jpg", body(1)), ("k1.txt", b"one"), ("u\u00fc.txt", b"uml")]
    m = [(LONG_SPLIT, body(2, 1024)), ("e.cls", b""), ("k1.jpg", body(1)), ("k1.txt", b"one"),
         ("\u00fc/\u65e5\u672c.txt", "日本".encode()), ("z.bin", body(3, 512))]
    if fmt != "ustar":
        m.insert(1, (LONG_FLAT, body(4, 3)))
    return m


def put_files(root, members):
    for name, data in members:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def check_output(sh, tmp_path, out_name, expected):
    """What tarcat wrote: the same members per tarfile, GNU tar, bsdtar and
    the same samples per webdataset."""
    data = (tmp_path / out_name).read_bytes()
    assert read_tar(data) == expected
    listing = sh(f"tar tvf {out_name}", env=UTF8).stdout.decode().splitlines()
    assert [line.split(None, 5)[5] for line in listing] == [n for n, _ in expected]
    assert all(line.startswith("-rw-r--r-- 0/0") for line in listing)
    require("bsdtar")
    names = sh(f"bsdtar -tf {out_name}", env=UTF8).stdout.decode().splitlines()
    assert names == [n for n, _ in expected]
    assert len(sh(f"bsdtar -tvf {out_name}", env=UTF8).stdout.splitlines()) == len(expected)
    assert wds_samples(tmp_path / out_name) == samples_of(data)


def wds_samples(path):
    import webdataset as wds

    out = {}
    for s in wds.WebDataset(str(path), shardshuffle=False):
        out[s["__key__"]] = {k: v for k, v in s.items() if not k.startswith("__")}
    return out


@pytest.mark.parametrize("fmt", ["ustar", "gnu", "oldgnu", "pax", "v7"])
def test_gnu_tar_formats_pass_through_unchanged(sh, tmp_path, fmt):
    members = members_for(fmt)
    put_files(tmp_path, members)
    names = " ".join(f"'{n}'" for n, _ in members)
    sh(f"tar --format={fmt} -cf in.tar {names}", env=UTF8)
    assert read_tar((tmp_path / "in.tar").read_bytes()) == members
    sh("tarcat < in.tar > out.tar")
    check_output(sh, tmp_path, "out.tar", members)


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_python_tarfile_formats_pass_through(sh, tmp_path, fmt):
    members = members_for("ustar" if fmt == tarfile.USTAR_FORMAT else "gnu")
    (tmp_path / "in.tar").write_bytes(tar_bytes(members, format=fmt))
    sh("cat in.tar | tarcat | cat > out.tar")
    check_output(sh, tmp_path, "out.tar", members)


def test_webdataset_writer_shards_pass_through(sh, tmp_path):
    import webdataset as wds

    samples = [
        {"__key__": "d" * 100 + "/" + "n" * 95, "txt": b"long key", "cls": b""},
        {"__key__": "\u00fc/\u65e5\u672c", "txt": "日本".encode()},
        {"__key__": "e", "cls": b"", "jpg": body(5, 1536)},
    ]
    with wds.TarWriter(str(tmp_path / "in.tar"), encoder=False) as w:
        for s in samples:
            w.write(s)
    before = read_tar((tmp_path / "in.tar").read_bytes())
    sh("tarcat in.tar -o out.tar")
    check_output(sh, tmp_path, "out.tar", before)
    got = wds_samples(tmp_path / "out.tar")
    assert got == {s["__key__"]: {k: v for k, v in s.items() if k != "__key__"} for s in samples}
    # our writer needs no pax header per member, unlike TarWriter
    assert (tmp_path / "out.tar").stat().st_size < (tmp_path / "in.tar").stat().st_size


def test_fields_are_written_in_sorted_order_and_output_is_deterministic(sh, tmp_path):
    members = [("a.txt", b"t"), ("a.cls", b"1"), ("b.json", b"{}"), ("b.cls", b"2")]
    (tmp_path / "in.tar").write_bytes(tar_bytes(members))
    (tmp_path / "in-pax.tar").write_bytes(tar_bytes(members, format=tarfile.PAX_FORMAT))
    one = sh("tarcat < in.tar").stdout
    assert one == sh("tarcat in.tar").stdout == sh("tarcat in-pax.tar").stdout
    assert [n for n, _ in read_tar(one)] == ["a.cls", "a.txt", "b.cls", "b.json"]


def test_concatenated_archives_are_read_on(sh, tmp_path):
    (tmp_path / "a.tar").write_bytes(tar_bytes([("a.txt", b"a")]))
    (tmp_path / "b.tar").write_bytes(tar_bytes([("b.txt", b"b")]))
    assert read_tar(sh("cat a.tar b.tar | tarcat").stdout) == [("a.txt", b"a"), ("b.txt", b"b")]


def test_skipped_members_are_counted(sh, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_bytes(b"a")
    (tmp_path / "README").write_bytes(b"no extension")
    os.symlink("a.txt", tmp_path / "d" / "l.txt")
    sh("tar cf in.tar d README")
    p = sh("tarcat -v in.tar > out.tar", stderr_ok=True)
    assert read_tar((tmp_path / "out.tar").read_bytes()) == [("d/a.txt", b"a")]
    assert "members skipped 3" in p.stderr.decode()
    assert "1 directories" in p.stderr.decode() and "1 symlinks" in p.stderr.decode()


def test_duplicate_field_is_an_error_naming_the_key(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(tar_bytes([("k7.txt", b"a"), ("k7.txt", b"b")]))
    p = sh("tarcat in.tar > out.tar", ok=False)
    assert p.returncode == 2
    err = p.stderr.decode()
    assert err.count("\n") == 1 and "'k7'" in err and "txt" in err


# ------------------------------------------------------------ damage


def shard(n=6, size=512):
    """n samples of 2048 bytes each in the archive: s{i}.cls (1 byte), s{i}.dat"""
    return tar_bytes([m for i in range(n) for m in ((f"s{i}.cls", str(i).encode()), (f"s{i}.dat", body(i, size)))])


def test_truncation_and_damage_give_exit_2_and_one_line(sh, tmp_path):
    data = shard()
    full = read_tar(data)
    end = len(data.rstrip(b"\0"))  # well inside the last member
    rng = random.Random(0)
    cuts = sorted({1, 100, 511, 513, 700, 1500, end - 1} | {rng.randrange(1, end) for _ in range(8)})
    cuts = [c for c in cuts if c % 512]
    for cut in cuts:
        p = sh("tarcat > out.tar", input=data[:cut], ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2, (cut, len(data), err)
        assert err.count("\n") == 1 and err.startswith("tarcat: stdin: offset ") and "Traceback" not in err, err
        got = read_tar((tmp_path / "out.tar").read_bytes() + bytes(1024))
        assert got == full[: len(got)]  # what came out before the damage is intact
    # damage inside headers: bad checksums, bad numbers
    for header_at, field_at in [(0, 3), (1024, 150), (2048, 124), (3072, 0), (6144, 140), (7168, 124)]:
        bad = bytearray(data)
        bad[header_at + field_at] = ord("9")  # not octal / breaks the checksum
        p = sh("tarcat > out.tar", input=bytes(bad), ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2 and err.count("\n") == 1, err
        assert f"offset {header_at}:" in err
        got = read_tar((tmp_path / "out.tar").read_bytes() + bytes(1024))
        # the samples before it, except the one still being grouped when the
        # damage was found (it may be incomplete: its next member is unreadable)
        assert len(got) == 2 * max(0, (header_at - 1024) // 2048)
    # garbage input
    p = sh("tarcat", input=b"this is not a tar archive\n" * 40, ok=False)
    assert p.returncode == 2 and p.stderr.decode().count("\n") == 1


def test_cut_on_block_boundary_warns_and_fails_under_strict(sh, tmp_path):
    data = shard()[: 4 * 2048]  # the end-of-archive marker and two samples are gone
    p = sh("tarcat > out.tar", input=data, ok=True, stderr_ok=True)
    err = p.stderr.decode()
    assert err.count("\n") == 1 and "warning" in err and "end-of-archive" in err
    assert len(read_tar((tmp_path / "out.tar").read_bytes())) == 8
    assert sh("tarcat -q > out.tar", input=data).stderr == b""
    p = sh("tarcat --strict > out.tar", input=data, ok=False)
    assert p.returncode == 2 and p.stderr.decode().count("\n") == 1


def test_missing_input_and_bad_usage(sh):
    p = sh("tarcat nothere.tar", ok=False)
    assert p.returncode == 2 and p.stderr.decode() == "tarcat: nothere.tar: cannot open: No such file or directory\n"
    p = sh("tarcat --slice 1:x < /dev/null", ok=False)
    assert p.returncode == 2 and "bad slice" in p.stderr.decode()
    p = sh("tarcat --rekey '{nope}' < /dev/null", ok=False)  # checked when parsed, samples or not
    assert p.returncode == 2 and "unknown name {nope}" in p.stderr.decode()
    p = sh("tarcat --no-such-flag", ok=False)
    assert p.returncode == 2


def test_head_ends_quietly(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(shard(200, 5000))
    p = sh("tarcat in.tar | head -c 100 > /dev/null", ok=False)
    assert p.stderr == b""
    p = sh("tarcat < in.tar | head -c 100 | wc -c", ok=False)
    assert p.stdout.strip() == b"100" and p.stderr == b""
    assert p.returncode in (0, 141)  # like cat: ended by SIGPIPE, silently


def test_empty_input(sh):
    out = sh("tarcat < /dev/null").stdout
    assert out == bytes(1024)


# ------------------------------------------------------------ streaming


def read_exactly(stream, n, timeout=60):
    fd = stream.fileno()
    got = b""
    deadline = time.monotonic() + timeout
    while len(got) < n:
        ready, _, _ = select.select([fd], [], [], max(0, deadline - time.monotonic()))
        assert ready, f"no output after {timeout} s (got {len(got)} of {n} bytes)"
        piece = os.read(fd, n - len(got))
        assert piece, f"output ended early ({len(got)} of {n} bytes)"
        got += piece
    return got


def test_live_process_outputs_a_sample_before_input_ends():
    first = [("a.cls", b"1"), ("a.txt", b"hello" * 300)]
    data = tar_bytes(first + [("b.cls", b"2"), ("b.txt", b"x")])
    # sample a is complete once the header of b's first member has arrived
    upto = 512 + 512 + 512 + 1536 + 512 + 512
    expected_len = 512 + 512 + 512 + 1536
    p = subprocess.Popen(["tarcat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(data[:upto])
        p.stdin.flush()
        got = read_exactly(p.stdout, expected_len)
        assert read_tar(got + bytes(1024)) == first
        assert p.poll() is None  # still waiting for input
        p.stdin.write(data[upto:])
        p.stdin.close()
        rest = p.stdout.read()
        assert p.wait(timeout=60) == 0
        assert read_tar(got + rest) == read_tar(data)
    finally:
        p.kill()
        p.wait()


def test_count_stops_reading_without_waiting_for_input_end(tmp_path):
    data = shard(10)
    p = subprocess.Popen(["tarcat", "-c", "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        p.stdin.write(data[:-1024])  # the writer keeps its end of the pipe open
        p.stdin.flush()
        assert p.wait(timeout=30) == 0
        out = p.stdout.read()
        assert [n for n, _ in read_tar(out)] == ["s0.cls", "s0.dat", "s1.cls", "s1.dat"]
    finally:
        p.kill()
        p.wait()
        p.stdin.close()


def test_count_stops_a_pipe_producer(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(shard(10))
    t0 = time.monotonic()
    out = sh("tarcat -c 3 'pipe:cat in.tar; exec sleep 30'").stdout
    assert time.monotonic() - t0 < 25  # not a performance assertion: 30 s means it waited
    assert len(samples_of(out)) == 3


# ------------------------------------------------------------ selection options


def numbered(tmp_path, n=10, name="in.tar"):
    members = []
    for i in range(n):
        members.append((f"s{i:02d}.cls", str(i).encode()))
        if i % 3 == 0:
            members.append((f"s{i:02d}.jpg", b"J%d" % i))
        elif i % 3 == 1:
            members.append((f"s{i:02d}.png", b"P%d" % i))
    (tmp_path / name).write_bytes(tar_bytes(members))
    return members


def keys(data):
    return list(samples_of(data))


def test_count_skip_slice(sh, tmp_path):
    numbered(tmp_path)
    assert keys(sh("tarcat -c 3 in.tar").stdout) == ["s00", "s01", "s02"]
    assert keys(sh("tarcat --count 0 in.tar").stdout) == []
    assert keys(sh("tarcat -s 8 in.tar").stdout) == ["s08", "s09"]
    assert keys(sh("tarcat -s 3 -c 2 in.tar").stdout) == ["s03", "s04"]
    assert keys(sh("tarcat --slice 2:8:3 in.tar").stdout) == ["s02", "s05"]
    assert keys(sh("tarcat --slice 7: in.tar").stdout) == ["s07", "s08", "s09"]
    assert keys(sh("tarcat --slice :2 < in.tar").stdout) == ["s00", "s01"]


def test_fields_alternatives_renames_and_skips(sh, tmp_path):
    numbered(tmp_path, 6)
    p = sh("tarcat -v -f 'img=jpg;png cls' in.tar", stderr_ok=True)
    got = samples_of(p.stdout)
    assert list(got) == ["s00", "s01", "s03", "s04"]
    assert got["s00"] == {"cls": b"0", "img": b"J0"} and got["s01"] == {"cls": b"1", "img": b"P1"}
    assert "samples read 6, written 4, skipped 2" in p.stderr.decode()
    got = samples_of(sh("tarcat --fields 'jpg;png' in.tar").stdout)
    assert got["s00"] == {"jpg": b"J0"} and got["s01"] == {"png": b"P1"} and "s02" not in got
    got = samples_of(sh("tarcat -f cls in.tar").stdout)
    assert list(got) == [f"s{i:02d}" for i in range(6)] and got["s05"] == {"cls": b"5"}


def test_rekey(sh, tmp_path):
    numbered(tmp_path, 4)
    got = samples_of(sh("tarcat --rekey '{index:09d}' in.tar").stdout)
    assert list(got) == ["000000000", "000000001", "000000002", "000000003"]
    assert got["000000001"] == {"cls": b"1", "png": b"P1"}
    got = keys(sh("tarcat --rekey 'new/{key}-{index}' -c 2 in.tar").stdout)
    assert got == ["new/s00-0", "new/s01-1"]
    p = sh("tarcat --rekey '{bogus}' in.tar", ok=False)
    assert p.returncode == 2 and "bogus" in p.stderr.decode() and p.stderr.decode().count("\n") == 1


def test_shuffle_with_seed_is_reproducible(sh, tmp_path):
    numbered(tmp_path, 30)
    a = sh("tarcat --shuffle 10 --seed 7 in.tar").stdout
    b = sh("tarcat --shuffle 10 --seed 7 in.tar").stdout
    c = sh("tarcat --shuffle 10 --seed 8 in.tar").stdout
    assert a == b and a != c
    assert keys(a) != keys(sh("tarcat in.tar").stdout)
    assert sorted(keys(a)) == sorted(keys(c)) == [f"s{i:02d}" for i in range(30)]
    assert samples_of(a) == samples_of(sh("tarcat in.tar").stdout)


# ------------------------------------------------------------ inputs


def test_brace_expansion_file_lists_and_verbose(sh, tmp_path):
    for i in range(3):
        (tmp_path / f"part-{i}.tar").write_bytes(tar_bytes([(f"p{i}.txt", b"%d" % i)]))
    expected = ["p0", "p1", "p2"]
    assert keys(sh("tarcat 'part-{0..2}.tar'").stdout) == expected
    assert keys(sh("tarcat -b 'part-{0..2}.tar'").stdout) == expected
    assert keys(sh("tarcat part-2.tar 'part-{0..1}.tar'").stdout) == ["p2", "p0", "p1"]
    (tmp_path / "list.txt").write_text("part-1.tar\n\n# a comment\npart-{0,2}.tar\n")
    assert keys(sh("tarcat -T list.txt").stdout) == ["p1", "p0", "p2"]
    assert keys(sh("printf 'part-2.tar\\npart-0.tar\\n' | tarcat -T -").stdout) == ["p2", "p0"]
    p = sh("tarcat -v 'part-{0..2}.tar' > out.tar", stderr_ok=True)
    lines = p.stderr.decode().splitlines()
    assert lines == ["tarcat: reading part-0.tar", "tarcat: reading part-1.tar", "tarcat: reading part-2.tar",
                     "tarcat: samples read 3, written 3, skipped 0, failed 0"]
    p = sh("tarcat 'part-{0..3}.tar' > out.tar", ok=False)
    assert p.returncode == 2 and "part-3.tar" in p.stderr.decode()


def test_output_file_is_atomic_on_error(sh, tmp_path):
    (tmp_path / "good.tar").write_bytes(shard(3))
    (tmp_path / "bad.tar").write_bytes(shard(3)[:1000])
    p = sh("tarcat good.tar bad.tar -o out.tar", ok=False)
    assert p.returncode == 2
    assert sorted(os.listdir(tmp_path)) == ["bad.tar", "good.tar"]  # no out.tar, no temp file
    sh("tarcat good.tar -o out.tar")
    assert len(read_tar((tmp_path / "out.tar").read_bytes())) == 6


def test_version_help_and_aliases(sh):
    v = version("tarproc")
    for prog in ("tarcat", "tarcats", "tarscat"):
        assert sh(f"{prog} --version").stdout.decode() == f"{prog} (tarproc) {v}\n"
    text = sh("tarcat --help").stdout.decode()
    assert "examples:" in text and "tarcat -c 10" in text and "--rekey" in text
    assert keys(sh("tarcats -c 1 < /dev/null").stdout) == []


@pytest.mark.parametrize("prog", ["gzip", "bzip2", "xz", "zstd"])
def test_count_stops_reading_compressed_input(prog):
    """As above, through a decompressor: ``gsutil cat big.tgz | tarcat -c 2``."""
    import threading

    require(prog)
    # incompressible members: zstd's CLI decodes in 128 KB input blocks
    data = tar_bytes([(f"s{i}.bin", random.Random(i).randbytes(60_000)) for i in range(8)])
    packed = subprocess.run([prog, "-c"], input=data, capture_output=True, check=True).stdout
    p = subprocess.Popen(["tarcat", "-c", "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)

    def feed():
        try:
            p.stdin.write(packed)  # and keep the pipe open, like a slow download
            p.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    threading.Thread(target=feed, daemon=True).start()
    got = []
    reader = threading.Thread(target=lambda: got.append(p.stdout.read()), daemon=True)
    reader.start()
    try:
        assert p.wait(timeout=30) == 0
        reader.join(30)
        out = got[0]
        assert [n for n, _ in read_tar(out)] == ["s0.bin", "s1.bin"]
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("fmt", ["gnu", "pax"])
def test_non_utf8_names_pass_through_byte_for_byte(sh, tmp_path, fmt):
    raw = [b"caf\xe9.txt", b"d\xff/x.bin"]
    for i, name in enumerate(raw):
        path = tmp_path / os.fsdecode(name)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"%d" % i)
    sh(f"tar --format={fmt} -cf in.tar " + " ".join(f"$'{n.decode('latin-1')}'".replace("\xe9", "\\xe9")
                                                    .replace("\xff", "\\xff") for n in raw))
    sh("tarcat < in.tar > out.tar")
    names = [n for n, _ in read_tar((tmp_path / "out.tar").read_bytes())]
    assert [os.fsencode(n) for n in names] == raw
    assert read_tar((tmp_path / "out.tar").read_bytes()) == read_tar((tmp_path / "in.tar").read_bytes())
    require("bsdtar")
    assert len(sh("bsdtar -tf out.tar", stderr_ok=True).stdout.splitlines()) == 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    items = [(n, p, e) for n, p, e in make_corpus.write_corpus(str(d))]
    return items


def _members(data):
    """(name bytes, data) of the regular members, read by tarfile."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*", encoding="utf-8", errors="surrogateescape") as tf:
        for info in tf:
            if info.isfile():
                out.append((info.name.encode("utf-8", "surrogateescape"), tf.extractfile(info).read()))
    return out


def _sample_count(members):
    n, last = 0, None
    for name, _ in members:
        slash = name.rfind(b"/")
        dot = name.find(b".", slash + 1)
        key = name[:dot]
        if key != last:
            n += 1
            last = key
    return n


def test_strict_fails_a_cut_off_shard(sh, tmp_path):
    data = make_corpus.small_shard()
    ends, eoa = make_corpus.small_layout()
    (tmp_path / "cut.tar").write_bytes(data[:eoa])
    p = sh("tarcat --strict cut.tar > out.tar", ok=False)
    assert p.returncode == 2
    assert re.search(rb"offset \d+: input ends without the end-of-archive", p.stderr)
    assert len(p.stderr.splitlines()) == 1
    p = sh("tarcat cut.tar > out.tar", stderr_ok=True)
    assert b"warning" in p.stderr
    assert _sample_count(_members((tmp_path / "out.tar").read_bytes())) == make_corpus.SMALL_SAMPLES


def test_samples_before_damage_are_written(sh, tmp_path):
    """Damage is an error, but everything before it has already gone out."""
    data = make_corpus.small_shard()
    good = data[: data.index(b"cafe/0002.txt") - 1024]  # up to the pax header of the third sample
    (tmp_path / "bad.tar").write_bytes(good + make_corpus.header(b"z.txt", 5, chksum_delta=1) + bytes(1024))
    p = sh("tarcat bad.tar > out.tar", ok=False)
    assert p.returncode == 2 and b"checksum" in p.stderr
    names = [n for n, _ in _members((tmp_path / "out.tar").read_bytes() + bytes(1024))]
    assert names[:2] == [b"0000.cls", b"0000.txt"]


def test_specials_are_never_created(sh, tmp_path):
    corpus = {n: (d, e) for n, d, e in make_corpus.cases(big=False)}
    (tmp_path / "in.tar").write_bytes(corpus["specials"][0])
    p = sh("tarcat -v in.tar > out.tar", stderr_ok=True)
    assert re.search(rb"members skipped 8 \(", p.stderr), p.stderr
    assert [n for n, _ in _members((tmp_path / "out.tar").read_bytes())] == [b"k.txt"]
    assert sorted(os.listdir(tmp_path)) == ["in.tar", "out.tar"]


plain_shard = make_corpus.plain_shard


run = make_corpus.bash


one_line = make_corpus.one_line


def test_tarcat_shuffles_a_long_list_through_a_bounded_buffer(tmp_path):
    for k in range(3):
        (tmp_path / f"in-{k}.tar").write_bytes(plain_shard(2))
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


def small_tar(n=4, ext="png"):
    return tar_bytes([m for i in range(n) for m in ((f"s{i}.{ext}", png_bytes(4, 4, seed=i)),
                                                    (f"s{i}.cls", str(i).encode()))])


def test_tarcat_fields_matching_nothing_warns_once(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(small_tar())
    p = sh("tarcat -f nofield in.tar > out.tar", stderr_ok=True)
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and "'nofield'" in lines[0], lines
    assert "4 samples" in lines[0] and "cls, png" in lines[0]
    assert read_tar((tmp_path / "out.tar").read_bytes()) == []
    # a selection that keeps some samples says nothing; -q silences the warning
    sh("tarcat -f 'png cls' in.tar | tar tf - > /dev/null")
    assert sh("tarcat -q -f nofield in.tar > /dev/null").stderr == b""
