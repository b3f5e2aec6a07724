"""Compressed shards followed by padding or junk, a second member or frame,
a truncated last frame, a name that lies about the codec: tarcat, tarcheck
and tarindex give the same verdict on each (all read the samples, or all
refuse with one line naming the shard), and a shard tarindex accepts is read
back right through its seek record."""

import gzip
import io
import json
import subprocess
import tarfile

import pytest

import tarproc


def _tar(n=3):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for j in range(n):
            for ext in ("cls", "txt"):
                d = f"sample {j} {ext} ".encode() * 50
                i = tarfile.TarInfo(f"{j:04d}.{ext}")
                i.size = len(d)
                t.addfile(i, io.BytesIO(d))
    return b.getvalue()


TAR = _tar()
GZ = gzip.compress(TAR, mtime=0)


def _zst(data):
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout


ZST = _zst(TAR)
SKIPPABLE = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"abcd"

# name: (bytes, verdict)
CASES = {
    "ok.tar.gz": (lambda: GZ, "accept"),
    "ok.tar.zst": (lambda: ZST, "accept"),
    "gz_zeros1024.tar.gz": (lambda: GZ + b"\0" * 1024, "accept"),
    "gz_zeros3.tar.gz": (lambda: GZ + b"\0" * 3, "accept"),
    "gz_zeros_300k.tar.gz": (lambda: GZ + b"\0" * 300_000, "accept"),
    "gz_two_members.tar.gz": (lambda: gzip.compress(TAR[:2048], mtime=0) + gzip.compress(TAR[2048:], mtime=0),
                              "accept"),
    "gz_two_members_zeros.tar.gz": (lambda: gzip.compress(TAR[:2048], mtime=0) + gzip.compress(TAR[2048:], mtime=0)
                                    + b"\0" * 1024, "accept"),
    "gz_member_of_zeros.tar.gz": (lambda: GZ + gzip.compress(b"\0" * 1024, mtime=0), "accept"),
    "gz_junk.tar.gz": (lambda: GZ + b"JUNKJUNK garbage", "refuse"),
    "gz_magic_junk.tar.gz": (lambda: GZ + b"\x1f\x8bgarbage", "refuse"),
    "gz_truncated_trailer.tar.gz": (lambda: GZ[:-3], "refuse"),
    "gz_truncated_half.tar.gz": (lambda: GZ[: len(GZ) // 2], "refuse"),
    "gz_truncated_second_member.tar.gz": (lambda: GZ + gzip.compress(b"xxxxx", mtime=0)[:12], "refuse"),
    "zst_junk.tar.zst": (lambda: ZST + b"JUNKJUNK garbage", "refuse"),
    "zst_zeros1024.tar.zst": (lambda: ZST + b"\0" * 1024, "refuse"),  # zstd -dc refuses it too
    "zst_zeros3.tar.zst": (lambda: ZST + b"\0" * 3, "refuse"),
    "zst_two_frames.tar.zst": (lambda: _zst(TAR[:2048]) + _zst(TAR[2048:]), "accept"),
    "zst_skippable_after.tar.zst": (lambda: ZST + SKIPPABLE, "accept"),
    "zst_truncated.tar.zst": (lambda: ZST[:-5], "refuse"),
    "plain_named.tar.gz": (lambda: TAR, "accept"),
    "plain_named.tar.zst": (lambda: TAR, "accept"),
}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("trailers")
    for name, (make, _) in CASES.items():
        (d / name).write_bytes(make())
    return d


def _run(argv, cwd):
    return subprocess.run(argv, cwd=cwd, capture_output=True, timeout=60)


def _members(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return [(m.name, t.extractfile(m).read()) for m in t.getmembers()]


def _verdict(cmd, name, d):
    if cmd == "tarcat":
        p = _run(["tarcat", name], d)
        ok = p.returncode == 0 and _members(p.stdout) == _members(TAR)
    elif cmd == "tarcheck":
        p = _run(["tarcheck", name], d)
        ok = p.returncode in (0, 1) and f"{name}: 3 samples" in p.stdout.decode()
    else:
        p = _run(["tarindex", name, "-o", f"{name}.json"], d)
        ok = p.returncode == 0 and json.loads((d / f"{name}.json").read_text())["shardlist"][0]["nsamples"] == 3
    if ok:
        return "accept"
    lines = p.stderr.decode().strip().splitlines()
    assert p.returncode == 2, (cmd, name, p.returncode, lines)
    assert len(lines) == 1 and name in lines[0] and "Traceback" not in lines[0], (cmd, name, lines)
    return "refuse"


@pytest.mark.parametrize("name", list(CASES))
def test_tarcat_tarcheck_and_tarindex_agree(shards, name):
    verdicts = {cmd: _verdict(cmd, name, shards) for cmd in ("tarcat", "tarcheck", "tarindex")}
    assert verdicts == dict.fromkeys(verdicts, CASES[name][1])


@pytest.mark.parametrize("name", [n for n, (_, v) in CASES.items() if v == "accept"])
def test_what_tarindex_accepts_is_read_back_right(shards, name, tmp_path):
    tarproc.index_shards([str(shards / name)], str(tmp_path / "i.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"))
    seq = list(tarproc.iter_samples(str(shards / name)))
    assert len(seq) == 3
    assert [ds[i] for i in range(len(ds))] == seq
