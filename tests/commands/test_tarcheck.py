"""tarcheck: shards made with each defect on purpose; clean shards pass."""

import gzip
import io
import json
import os
import select
import subprocess
import tarfile
import time

import pytest

from helpers import image_shard, png_bytes, tar_bytes
import make_corpus as mc


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


def shard(n, prefix="s", size=20):
    return mc.plain_shard(n, prefix, size)


def test_tarcheck_json_streams_shard_reports_and_keeps_none(tmp_path):
    """tarcheck kept every shard's report until the end (memory grew with
    the number of shards; --json printed nothing before the last one): the
    reports now stream out, --json too, and only the total is kept."""
    (tmp_path / "a.tar").write_bytes(shard(2))
    proc = subprocess.Popen(["tarcheck", "--json", "-T", "-"], cwd=tmp_path, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(b"a.tar\n" * 1002)  # past the URLs read ahead
        proc.stdin.flush()
        head = b""
        deadline = time.monotonic() + 20
        while b'"url": "a.tar"' not in head and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                head += os.read(proc.stdout.fileno(), 65536)
        assert b'"url": "a.tar"' in head  # a shard's report while the list is still open
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(30) == 1, proc.stderr.read()  # the same keys in every shard
    finally:
        proc.kill()
        proc.wait()
    report = json.loads(head + rest)
    assert len(report["shards"]) == 1002 and report["ok"] is False
    total = report["total"]
    assert (total["shards"], total["samples"], total["bad_shards"]) == (1002, 2004, 1001)
    assert total["problems"][0]["kind"] == "duplicate_keys" and total["problems"][0]["count"] == 2002


def run(cmd, cwd, input=None, env=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60,
                          env={**os.environ, **(env or {})}, **kw)


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


def test_tarcheck_reports_trailing_data(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(mc.member(b"a.txt", b"1") + mc.EOA + b"junk" * 300)
    p = sh("tarcheck --json in.tar", ok=False)
    assert p.returncode == 1
    probs = json.loads(p.stdout)["shards"][0]["problems"]
    assert [(q["kind"], q["examples"]) for q in probs] == [("trailing_data", ["offset 2048"])]


def small_tar(n=4, ext="png"):
    return tar_bytes([m for i in range(n) for m in ((f"s{i}.{ext}", png_bytes(4, 4, seed=i)),
                                                    (f"s{i}.cls", str(i).encode()))])


def test_tarcheck_reports_an_unreadable_shard_and_checks_the_rest(sh, tmp_path):
    (tmp_path / "a.tar").write_bytes(small_tar())
    (tmp_path / "b.tar").write_bytes(tar_bytes([("t0.png", b"x"), ("t0.cls", b"1")]))
    (tmp_path / "bad.tar").write_bytes(tar_bytes([(f"z{i}.bin", bytes(1000)) for i in range(3)])[:2100])  # cut
    p = sh("tarcheck a.tar missing.tar bad.tar b.tar", ok=False)
    out, err = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 2
    assert len(err.splitlines()) == 2 and "missing.tar" in err and "bad.tar: offset" in err
    assert "b.tar: 1 samples" in out and "PROBLEM unreadable" in out and out.rstrip().endswith("4 shards")
    assert "total: 4 shards" in out
    p = sh("tarcheck --json a.tar missing.tar bad.tar b.tar", ok=False)
    report = json.loads(p.stdout)
    assert p.returncode == 2 and not report["ok"] and report["total"]["shards"] == 4
    kinds = {r["url"]: [q["kind"] for q in r["problems"]] for r in report["shards"]}
    assert kinds == {"a.tar": [], "missing.tar": ["unreadable"], "bad.tar": ["unreadable"], "b.tar": []}
    assert report["shards"][2]["members"] == 1  # counted up to the damage
    # the library call goes on too
    import tarproc

    rep = tarproc.check_shards([str(tmp_path / "missing.tar"), str(tmp_path / "a.tar")])
    assert [r["samples"] for r in rep["shards"]] == [0, 4] and not rep["ok"]


def test_a_repeated_sample_is_a_duplicate_not_a_split_one(sh, tmp_path):
    # the user's case: b.tar repeats 10 complete samples of a.tar, joined by tarcat
    (tmp_path / "a.tar").write_bytes(tar_bytes(image_shard(30)))
    (tmp_path / "b.tar").write_bytes(tar_bytes(image_shard(30)[10:30]))  # samples 0005..0014: png and cls each
    sh("tarcat a.tar b.tar -o dups.tar")
    p = sh("tarcheck dups.tar", ok=False)
    out = p.stdout.decode()
    assert p.returncode == 1 and "PROBLEM duplicate_keys: 10" in out and "split_samples" not in out, out
    assert "0005 (again in this shard)" in out
    rep = json.loads(sh("tarcheck --json dups.tar", ok=False).stdout)
    assert [q["kind"] for q in rep["shards"][0]["problems"]] == ["duplicate_keys"]
    assert rep["total"]["problems"][0]["count"] == 10
    # across shards, the same thing has the same name
    rep = json.loads(sh("tarcheck --json a.tar b.tar", ok=False).stdout)
    assert rep["shards"][1]["problems"][0]["kind"] == "duplicate_keys"
    assert "0005 (also in a.tar)" in rep["shards"][1]["problems"][0]["examples"]
    # a key back with fields it had not: one sample in two parts; with one it had (and a new one): repeated
    split = [("k0.png", b"p"), ("k1.png", b"p"), ("k1.cls", b"1"), ("k0.cls", b"0")]
    again = [("k0.png", b"p"), ("k1.png", b"p"), ("k0.png", b"p"), ("k0.txt", b"t")]
    for members, kind in ((split, "split_samples"), (again, "duplicate_keys")):
        rep = json.loads(run_check(sh, tmp_path, tar_bytes(members), "--json").stdout)
        kinds = [q["kind"] for q in rep["shards"][0]["problems"]]
        assert kind in kinds and ({"split_samples", "duplicate_keys"} - {kind}).isdisjoint(kinds), (kind, kinds)
