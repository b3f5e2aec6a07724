"""Archives that established tar readers test themselves with: the corners
of the format where a reader can lose its place or misread a record.

Each archive is made here (bytes crafted in Python, or GNU tar), read by
the installed commands in real pipes, and what they read is checked
against GNU tar, bsdtar and Python's tarfile (where those agree with POSIX;
where one of them does not, the test says which and why)."""

import io
import json
import os
import subprocess
import tarfile

import tarproc
from conftest import require
from helpers import samples_of


def _hdr(name, size, type=b"0"):
    ti = tarfile.TarInfo(name)
    ti.size, ti.type, ti.mtime, ti.mode = size, type, 0, 0o644
    return ti.tobuf(format=tarfile.USTAR_FORMAT)


def _member(name, data, type=b"0"):
    return _hdr(name, len(data), type) + data + bytes(-len(data) % 512)


def _record(key, value):
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body


def _pax(records, type=b"x"):
    return _member("././@PaxHeader", b"".join(_record(k, v) for k, v in records), type)


END = bytes(1024)


def _gnu_names(path):
    p = subprocess.run([require("tar"), "-tf", str(path)], capture_output=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode().splitlines()


def _bsd_names(path):
    p = subprocess.run([require("bsdtar"), "-tf", str(path)], capture_output=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode().splitlines()


def _tarcat_names(sh, name, ok=True):
    p = sh(f"tarcat {name} | tar -tf -", ok=ok, stderr_ok=True)
    return p.stdout.decode().splitlines(), p


# ---------------------------------------------------------------- the end of an archive


def test_short_tail_after_the_end_marker_is_read_as_the_other_readers_do(sh, tmp_path):
    body = _member("a.txt", b"one") + _member("b.txt", b"two")
    for tail in (b"x", b"\n", b"junk" * 100):  # shorter than a block, after the marker
        (tmp_path / "t.tar").write_bytes(body + END + tail)
        names, p = _tarcat_names(sh, "t.tar")
        assert names == ["a.txt", "b.txt"] == _gnu_names(tmp_path / "t.tar") == _bsd_names(tmp_path / "t.tar")
        assert tarfile.open(tmp_path / "t.tar").getnames() == names
        err = p.stderr.decode().splitlines()
        assert len(err) == 1 and "after the end-of-archive marker ignored" in err[0], err
        # a whole-block check (--strict): data after the marker is an error, one line, exit 2
        p = sh("tarcat --strict t.tar > /dev/null", ok=False)
        assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    # without the marker, a cut header is still an error
    (tmp_path / "cut.tar").write_bytes(body + b"junk")
    p = sh("tarcat cut.tar > /dev/null", ok=False)
    assert p.returncode == 2 and b"inside a header" in p.stderr


def test_index_of_a_shard_with_bytes_after_its_end_marker(sh, tmp_path):
    """The index records the file's size, so trailing bytes (a whole block,
    a short tail, tarfile's record padding) are not "changed since indexed"."""
    with tarfile.open(tmp_path / "pad.tar", "w", format=tarfile.USTAR_FORMAT) as t:  # padded to 10240
        for i in range(5):
            ti = tarfile.TarInfo(f"s{i}.txt")
            ti.size = 3
            t.addfile(ti, io.BytesIO(b"abc"))
    clean = (tmp_path / "pad.tar").read_bytes()
    for tail in (b"", b"J" * 1536, b"trailing garbage"):  # none, whole blocks, a short tail
        (tmp_path / "pad.tar").write_bytes(clean + tail)
        sh("tarindex -q pad.tar -o pad.json")
        index = json.loads((tmp_path / "pad.json").read_text())
        assert index["shardlist"][0]["filesize"] == len(clean + tail)
        ds = tarproc.IndexedDataset(str(tmp_path / "pad.json"))
        assert [s["__key__"] for s in ds] == [f"s{i}" for i in range(5)] == [ds[i]["__key__"] for i in range(5)]
        assert ds[4]["txt"] == b"abc"


def test_index_of_a_shard_with_no_samples(sh, tmp_path):
    (tmp_path / "zero.tar").write_bytes(END)
    sh(f"{require('tar')} -cf gnu-empty.tar -T /dev/null")  # 10240 zero bytes
    (tmp_path / "dirs.tar").write_bytes(_member("d/", b"", b"5") + END)  # members, but no sample
    for name in ("zero", "gnu-empty", "dirs"):
        sh(f"tarindex -q {name}.tar -o {name}.json")
        ds = tarproc.IndexedDataset(str(tmp_path / f"{name}.json"))
        assert len(ds) == 0 and list(ds) == []
    # beside other shards: positions still line up
    sh("tarcat -q zero.tar > /dev/null && printf 'x' > one.txt && tar -cf one.tar one.txt && "
       "tarindex -q zero.tar one.tar dirs.tar -o mixed.json")
    ds = tarproc.IndexedDataset(str(tmp_path / "mixed.json"))
    assert len(ds) == 1 and ds[0]["txt"] == b"x" and ds[0]["__key__"] == "one"


# ---------------------------------------------------------------- headers


def test_unknown_type_named_like_a_directory_keeps_the_readers_place(sh, tmp_path):
    """Its data (a header of a member that does not exist, to trap a reader
    that takes it as one) is skipped by its size, as GNU tar and tarfile do."""
    trap = _member("trap.txt", b"T" * 100)
    data = _member("a.txt", b"A") + _member("d/", trap + bytes(88), b"Z") + _member("b.txt", b"B") + END
    (tmp_path / "u.tar").write_bytes(data)
    names, _ = _tarcat_names(sh, "u.tar")
    assert names == ["a.txt", "b.txt"]
    regular = [m.name for m in tarfile.open(tmp_path / "u.tar") if m.type == b"0"]
    assert regular == names and _gnu_names(tmp_path / "u.tar") == ["a.txt", "d/", "b.txt"]
    # (bsdtar 3.6 takes the entry as a directory without data and lists trap.txt: it loses its place)
    p = sh("tar2json -f jsonlines u.tar")
    assert [json.loads(line)["__key__"] for line in p.stdout.decode().splitlines()] == ["a", "b"]
    # a pre-POSIX directory (a regular entry ending in /) with data is skipped by its size too
    (tmp_path / "v7.tar").write_bytes(_member("a.txt", b"A") + _member("d/", trap) + _member("b.txt", b"B") + END)
    assert _tarcat_names(sh, "v7.tar")[0] == ["a.txt", "b.txt"]
    assert tarfile.open(tmp_path / "v7.tar").getnames() == ["a.txt", "d/", "b.txt"] == _gnu_names(tmp_path / "v7.tar")


def test_pax_record_with_an_empty_value_deletes_it(sh, tmp_path):
    """POSIX: an empty value deletes the keyword, so the ustar name holds.
    bsdtar reads it so; GNU tar 1.34 and Python 3.11's tarfile give an
    empty name (and GNU tar substitutes '.')."""
    (tmp_path / "x.tar").write_bytes(_pax([(b"path", b"")]) + _member("k1.txt", b"one") +
                                     _member("k2.txt", b"two") + END)
    # a global path, deleted for one member by its own empty record
    (tmp_path / "g.tar").write_bytes(_pax([(b"path", b"global.txt")], b"g") + _pax([(b"path", b"")]) +
                                     _member("k1.txt", b"one") + END)
    # an empty global record deletes the global one
    (tmp_path / "gg.tar").write_bytes(_pax([(b"path", b"global.txt")], b"g") + _member("k0.txt", b"zero") +
                                      _pax([(b"path", b"")], b"g") + _member("k1.txt", b"one") + END)
    for name, want in (("x", ["k1.txt", "k2.txt"]), ("g", ["k1.txt"])):
        names, p = _tarcat_names(sh, f"{name}.tar")
        assert names == want == _bsd_names(tmp_path / f"{name}.tar"), (name, p.stderr)
    # (bsdtar does not apply a global path at all: k0.txt, k1.txt)
    assert _tarcat_names(sh, "gg.tar")[0] == ["global.txt", "k1.txt"]
    got = samples_of(sh("tarcat x.tar").stdout)
    assert {k: v["txt"] for k, v in got.items()} == {"k1": b"one", "k2": b"two"}


def test_pax_sparse_formats_read_whole(sh, tmp_path):
    """GNU tar's pax sparse 0.0 (GNU.sparse.offset/numbytes pairs repeated in
    the pax header), 0.1 and 1.0: the file as it was, holes as zeros, as
    GNU tar and tarfile extract it."""
    content = bytearray(3 << 20)
    content[4096:4101] = b"hello"
    content[2 << 20:(2 << 20) + 5] = b"world"
    content[-3:] = b"end"
    with open(tmp_path / "a.sparse", "wb") as f:  # made with holes (seek past them)
        for at, piece in ((4096, b"hello"), (2 << 20, b"world"), (len(content) - 3, b"end")):
            f.seek(at)
            f.write(piece)
    assert (tmp_path / "a.sparse").read_bytes() == bytes(content)
    for version in ("0.0", "0.1", "1.0"):
        sh(f"{require('tar')} --sparse --sparse-version={version} --format=pax -cf s.tar a.sparse")
        raw = (tmp_path / "s.tar").read_bytes()
        if version == "0.0":
            assert raw.count(b"GNU.sparse.offset=") >= 2 and b"GNU.sparse.map" not in raw
        p = sh("tarcat s.tar | tar -xOf - a.sparse")
        assert p.stdout == bytes(content), version
        got = samples_of(sh("tarcat s.tar").stdout)
        assert list(got) == ["a"] and got["a"]["sparse"] == bytes(content)
        with tarfile.open(tmp_path / "s.tar") as t:
            assert t.extractfile("a.sparse").read() == bytes(content)
    # pairs out of turn are a damaged header: one line, exit 2
    (tmp_path / "bad.tar").write_bytes(
        _pax([(b"GNU.sparse.size", b"10"), (b"GNU.sparse.numbytes", b"1"), (b"GNU.sparse.offset", b"0")]) +
        _member("b.bin", b"x") + END)
    p = sh("tarcat bad.tar > /dev/null", ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and b"out of turn" in p.stderr
