"""Format corners other writers produce: zstd streams that start with a
skippable frame (pzstd), a global pax header dangling before an end marker
in concatenated archives, members after a zero block or an end-of-archive
marker (tarfile and webdataset never see them: tarcheck reports them), and
a compression bomb placed after the samples that were asked for."""

import gzip
import io
import json
import tarfile

import pytest

from conftest import require
from helpers import tar_bytes
import make_corpus as mc


def _header(name, size, typ=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = typ
    return info.tobuf(tarfile.USTAR_FORMAT)


def _member(name, data):
    return _header(name, len(data)) + data + bytes(-len(data) % 512)


def _pax_global(records):
    body = b""
    for key, value in records.items():
        rec = b" %s=%s\n" % (key, value)
        n = len(rec) + len(str(len(rec)))
        n = len(rec) + len(str(n))  # the length counts its own digits
        body += b"%d%s" % (n, rec)
    return _header("pax_global_header", len(body), tarfile.XGLTYPE) + body + bytes(-len(body) % 512)


def test_zstd_with_a_skippable_frame_first(sh, tmp_path):
    require("pzstd")
    data = tar_bytes([(f"s{i}.txt", b"x" * (i + 1)) for i in range(20)])
    (tmp_path / "a.tar").write_bytes(data)
    sh("pzstd -q -p 2 a.tar -o a.tar.zst")
    head = (tmp_path / "a.tar.zst").read_bytes()[:4]
    assert head[0] & 0xF0 == 0x50 and head[1:] == b"\x2a\x4d\x18"  # a skippable frame: what this is about
    want = sh("tarcat a.tar").stdout
    for cmd in ("tarcat a.tar.zst", "cat a.tar.zst | tarcat", "tarcat a.tar.zst -o out.tar && cat out.tar"):
        assert sh(cmd).stdout == want, cmd
    assert b"20 samples" in sh("tarcheck a.tar.zst").stdout


def test_global_pax_header_does_not_survive_an_end_marker(sh, tmp_path):
    first = _member("s0.txt", b"hi") + _pax_global({b"path": b"renamed.txt"}) + bytes(1024)
    second = tar_bytes([("b0.txt", b"b")])
    (tmp_path / "a.tar").write_bytes(first)
    (tmp_path / "b.tar").write_bytes(second)
    for cmd in ("cat a.tar b.tar | tarcat", "tarcat a.tar b.tar", "cat a.tar b.tar | tarcat -c 5"):
        out = sh(cmd).stdout
        assert tarfile.open(fileobj=io.BytesIO(out)).getnames() == ["s0.txt", "b0.txt"], cmd


def _check(sh, name):
    p = sh(f"tarcheck --json {name}", ok=False)
    return p.returncode, json.loads(p.stdout)


def test_members_after_a_lone_zero_block_are_reported(sh, tmp_path):
    data = _member("s0.txt", b"a") + bytes(512) + _member("s1.txt", b"b") + bytes(1024)
    (tmp_path / "lone.tar").write_bytes(data)
    assert tarfile.open(tmp_path / "lone.tar").getnames() == ["s0.txt"]  # what tarfile sees
    code, report = _check(sh, "lone.tar")
    assert code == 1
    kinds = {p["kind"]: p for p in report["shards"][0]["problems"]}
    assert "after_end_marker" in kinds and kinds["after_end_marker"]["examples"] == ["offset 1536"]
    assert report["total"]["samples"] == 2
    assert b"after_end_marker" in sh("tarcheck lone.tar", ok=False).stdout


def test_members_after_an_end_of_archive_marker_are_reported(sh, tmp_path):
    (tmp_path / "two.tar").write_bytes(tar_bytes([("s0.txt", b"a")]) + tar_bytes([("s1.txt", b"b")]))
    code, report = _check(sh, "two.tar")
    assert code == 1
    assert "after_end_marker" in {p["kind"] for p in report["shards"][0]["problems"]}
    # a clean shard, and trailing non-tar bytes (their own problem), are not reported as such
    (tmp_path / "one.tar").write_bytes(tar_bytes([("s0.txt", b"a")]))
    assert _check(sh, "one.tar")[0] == 0


def test_bomb_after_the_samples_asked_for(sh, tmp_path):
    data = tar_bytes([("a.txt", b"first"), ("a.cls", b"1"), ("b.bin", bytes(64 << 20))])
    (tmp_path / "bomb.tar.gz").write_bytes(gzip.compress(data, 9))
    env = {"TARPROC_RATIO_FLOOR": str(1 << 20)}
    p = sh("tarshow -c 1 bomb.tar.gz", env=env)
    assert b"first" in p.stdout
    out = sh("tarcat -c 1 bomb.tar.gz", env=env).stdout
    assert tarfile.open(fileobj=io.BytesIO(out)).getnames() == ["a.cls", "a.txt"]
    assert sh("tarfirst -f txt bomb.tar.gz", env=env).stdout == b"first"
    out = sh("tar2json -f jsonlines -c 1 bomb.tar.gz", env=env).stdout
    assert json.loads(out)["txt"] == "first"
    # asked for more: the bomb is still refused, after the sample before it
    p = sh("tarshow bomb.tar.gz", env=env, ok=False)
    assert p.returncode == 2 and b"first" in p.stdout and b"1000:1" in p.stderr


def names_of(data):
    """Member names (bytes) of the regular members, read by tarfile."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*", encoding="utf-8", errors="surrogateescape") as tf:
        return [m.name.encode("utf-8", "surrogateescape") for m in tf if m.isfile()]


@pytest.mark.parametrize("tail", [mc.text(3000, 5), b"<html>404</html>\n" * 40, b"\xff" * 512])
def test_data_after_the_end_of_archive_marker_is_ignored_with_a_warning(sh, tmp_path, tail):
    """A shard with junk after its end-of-archive marker (a preallocated
    file, a bad upload) reads as GNU tar and tarfile read it: every member,
    a one-line warning with the offset, exit 0; --strict makes it an error.
    Junk before the marker is still damage (exit 2)."""
    good = mc.member(b"a.txt", b"1") + mc.member(b"b.txt", b"2")
    (tmp_path / "in.tar").write_bytes(good + mc.EOA + tail)
    p = sh("tarcat in.tar", stderr_ok=True)
    assert names_of(p.stdout) == [b"a.txt", b"b.txt"]
    assert p.stderr.decode().splitlines() == [
        "tarcat: warning: in.tar: offset 3072: data after the end-of-archive marker ignored (not a tar header)"]
    assert sh("tar tf in.tar").stdout == b"a.txt\nb.txt\n"  # GNU tar agrees
    p = sh("tarcat --strict in.tar > /dev/null", ok=False)
    assert p.returncode == 2 and b"offset 3072" in p.stderr
    (tmp_path / "bad.tar").write_bytes(good + tail + mc.EOA)
    p = sh("tarcat bad.tar > /dev/null", ok=False)
    assert p.returncode == 2 and b"offset 2048" in p.stderr
    # a concatenation still reads on after the first marker (tar -i)
    (tmp_path / "two.tar").write_bytes(good + mc.EOA + mc.member(b"c.txt", b"3") + mc.EOA)
    assert names_of(sh("tarcat two.tar").stdout) == [b"a.txt", b"b.txt", b"c.txt"]
