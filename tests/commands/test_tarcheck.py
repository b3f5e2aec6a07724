"""tarcheck: shards made with each defect on purpose; clean shards pass."""

import gzip
import io
import json
import tarfile

import pytest

from helpers import image_shard, tar_bytes


def special_tar(entries, format=tarfile.GNU_FORMAT, encoding="utf-8"):
    """A tar made by tarfile from ``[(name, bytes or ("type", TarInfo type))]``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=format, encoding=encoding) as tf:
        for name, body in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1600000000
            if not isinstance(body, tuple):
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))
            else:
                info.type = body = body[1]
                if body in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                    info.linkname = "0000.png"
                tf.addfile(info)
    return buf.getvalue()


def clean_members(n=6):
    return image_shard(n)


def run_check(sh, tmp_path, data, *extra, name="x.tar"):
    (tmp_path / name).write_bytes(data)
    p = sh(" ".join(["tarcheck", *extra, name]), ok=False)
    assert p.stderr == b"", p.stderr
    return p


def test_clean_shard(sh, tmp_path):
    p = run_check(sh, tmp_path, tar_bytes(clean_members()))
    assert p.returncode == 0
    out = p.stdout.decode()
    assert "x.tar: 6 samples, 12 members" in out and "PROBLEM" not in out
    assert "cls 6 (6 B)" in out and out.strip().endswith("ok")
    rep = json.loads(run_check(sh, tmp_path, tar_bytes(clean_members()), "--json").stdout)
    assert rep["ok"] is True and rep["total"]["samples"] == 6
    assert rep["shards"][0]["fields"]["cls"] == {"count": 6, "bytes": 6}
    assert rep["shards"][0]["compression"] is None and rep["shards"][0]["size"] == len(tar_bytes(clean_members()))


M = clean_members()
DEFECTS = {
    # kind: (members, example expected in the report)
    "split_samples": (M[:4] + [("0000.txt", b"late")] + M[4:], "0000"),
    "duplicate_fields": (M[:2] + [("0000.png", M[0][1])] + M[2:], "0000.png"),
    "missing_fields": ([m for m in M if m[0] != "0002.cls"], "0002 (no cls)"),
    "empty_files": (M[:2] + [("0000.txt", b"")] + M[2:], "0000.txt"),
    "skipped_members": (M + [("README", b"no extension")], "README (names without an extension)"),
}


@pytest.mark.parametrize("kind", sorted(DEFECTS))
def test_each_defect(sh, tmp_path, kind):
    members, example = DEFECTS[kind]
    p = run_check(sh, tmp_path, tar_bytes(members))
    assert p.returncode == 1
    out = p.stdout.decode()
    line = next(line for line in out.splitlines() if f"PROBLEM {kind}:" in line)
    assert example in line
    rep = json.loads(run_check(sh, tmp_path, tar_bytes(members), "--json").stdout)
    assert rep["ok"] is False
    kinds = {p["kind"]: p for p in rep["shards"][0]["problems"]}
    # a split sample's second part also lacks the usual fields
    assert set(kinds) == ({kind, "missing_fields"} if kind == "split_samples" else {kind}), kinds
    assert example in kinds[kind]["examples"]


def test_links_and_special_files(sh, tmp_path):
    data = special_tar(M + [("0009.png", ("type", tarfile.SYMTYPE)), ("0010.png", ("type", tarfile.LNKTYPE)),
                            ("fifo.p", ("type", tarfile.FIFOTYPE)), ("dir", ("type", tarfile.DIRTYPE))])
    rep = json.loads(run_check(sh, tmp_path, data, "--json").stdout)
    shard = rep["shards"][0]
    assert shard["skipped"] == {"FIFOs": 1, "hard links": 1, "symlinks": 1}
    assert shard["directories"] == 1
    assert [p["kind"] for p in shard["problems"]] == ["skipped_members"]
    assert shard["problems"][0]["count"] == 3


def test_names_not_utf8_and_unsafe(sh, tmp_path):
    data = special_tar(M + [("caf\xe9.txt", b"x")], encoding="latin-1")
    p = run_check(sh, tmp_path, data)
    assert p.returncode == 1 and "PROBLEM non_utf8_names: 1" in p.stdout.decode()
    data = special_tar(M + [("../evil.txt", b"x")])
    p = run_check(sh, tmp_path, data)
    assert p.returncode == 1 and "PROBLEM unsafe_names: 1" in p.stdout.decode()
    assert "../evil.txt" in p.stdout.decode()


def test_duplicate_keys_across_shards_totals_and_compression(sh, tmp_path):
    (tmp_path / "s-0.tar").write_bytes(tar_bytes(image_shard(3)))
    (tmp_path / "s-1.tar.gz").write_bytes(gzip.compress(tar_bytes(image_shard(4, prefix="b"))))
    (tmp_path / "s-2.tar").write_bytes(tar_bytes(image_shard(2)))  # keys 0000 0001 again
    p = sh("tarcheck --json 's-{0..1}.tar' s-1.tar.gz s-2.tar", ok=False)
    # s-1.tar does not exist: a missing shard is exit 2, one line
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and b"s-1.tar" in p.stderr
    p = sh("tarcheck --json s-0.tar s-1.tar.gz s-2.tar", ok=False)
    assert p.returncode == 1
    rep = json.loads(p.stdout)
    assert [s["samples"] for s in rep["shards"]] == [3, 4, 2]
    assert rep["shards"][1]["compression"] == "gzip"
    assert rep["total"]["samples"] == 9 and rep["total"]["fields"]["png"]["count"] == 9
    dup = rep["total"]["problems"]
    assert dup[0]["kind"] == "duplicate_keys" and dup[0]["count"] == 2
    assert rep["shards"][0]["problems"] == [] and rep["shards"][1]["problems"] == []
    text = sh("tarcheck s-0.tar s-1.tar.gz", ok=True).stdout.decode()
    assert "total: 2 shards, 7 samples" in text and "(gzip," in text


def test_truncated_and_damaged(sh, tmp_path):
    data = tar_bytes(clean_members())
    cut = data.rstrip(b"\0")  # no end-of-archive blocks: a cut-off download
    cut += bytes(-len(cut) % 512)
    p = run_check(sh, tmp_path, cut)
    assert p.returncode == 1 and "PROBLEM truncated" in p.stdout.decode()
    p = sh("tarcheck", input=data[:1000], ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and b"offset" in p.stderr
    bad = bytearray(data)
    bad[data.index(b"0000.cls") + 2] ^= 0x01  # inside the second header: bad checksum
    p = sh("tarcheck", input=bytes(bad), ok=False)
    assert p.returncode == 2 and b"checksum" in p.stderr and len(p.stderr.splitlines()) == 1


def test_empty_shard_and_help(sh, tmp_path):
    p = sh("tarcheck", input=bytes(1024), ok=False)
    assert p.returncode == 1 and b"no_samples" in p.stdout
    assert b"examples:" in sh("tarcheck --help").stdout
