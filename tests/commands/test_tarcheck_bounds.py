"""tarcheck's memory and time on hostile shards: the keys it has seen spill to
disk and stay exact, field names are bounded, many distinct fields take
linear time."""

import json
import os

import make_corpus as mc


from helpers import run_measured as _run_measured  # noqa: E402


def test_tarcheck_many_distinct_fields_is_linear(tmp_path):
    from tarproc.core.tario import TarWriter

    with open(tmp_path / "in.tar", "wb") as f:
        w = TarWriter(f)
        for i in range(30000):
            w.write(f"s{i:06d}.f{i}", b"x")
            w.write(f"s{i:06d}.common", b"x")
        w.close()
    for extra in ("", "--majority 0"):
        p, cpu, _ = _run_measured(f"tarcheck {extra} in.tar > report.txt", tmp_path)
        assert p.returncode in (0, 1), p.stderr
        assert cpu < 10, f"tarcheck {extra}: {cpu:.1f} s CPU"
    assert b"30000 samples" in (tmp_path / "report.txt").read_bytes()


def test_tarcheck_keys_spill_to_disk_and_stay_exact(sh, tmp_path):
    """tarcheck remembers every key (split samples, keys across shards) in
    bounded memory: past TARPROC_CHECK_KEYS the keys go to a temporary
    database, and the findings are the same as in memory."""
    n = 3000
    a = b"".join(mc.member(b"k%05d.txt" % i, b"") for i in range(n))
    a += mc.member(b"k00007.cls", b"1")  # k00007 comes back: split sample
    b = mc.member(b"k02999.txt", b"x") + mc.member(b"z.txt", b"x")  # k02999 also in a.tar
    (tmp_path / "a.tar").write_bytes(a + mc.EOA)
    (tmp_path / "b.tar").write_bytes(b + mc.EOA)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    reports = []
    for limit in ("100", "1000000"):
        p = sh("tarcheck --json a.tar b.tar", ok=False, env={"TARPROC_CHECK_KEYS": limit, "TMPDIR": str(tmp)})
        assert p.returncode == 1, p.stderr
        assert p.stderr == b""
        reports.append(json.loads(p.stdout))
        assert os.listdir(tmp) == []  # the database is gone
    assert reports[0] == reports[1]
    a_rep, b_rep = reports[0]["shards"]
    assert [(q["kind"], q["count"], q["examples"]) for q in a_rep["problems"] if q["kind"] == "split_samples"] \
        == [("split_samples", 1, ["k00007"])]
    dup = reports[0]["total"]["problems"]
    assert [(q["kind"], q["count"], q["examples"]) for q in dup] == [("duplicate_keys", 1, ["k02999 (also in a.tar)"])]


def test_tarcheck_field_names_are_bounded(sh, tmp_path):
    """A shard whose every member has a new field name (hostile) keeps a
    bounded report: past TARPROC_CHECK_FIELDS the names share one bucket,
    counted exactly, and the problem says so."""
    n = 500
    one = b"".join(mc.member(b"k%04d.f%04d" % (i // 2, i), b"xy") for i in range(n))
    (tmp_path / "a.tar").write_bytes(one + mc.EOA)
    p = sh("tarcheck --json a.tar", ok=False, env={"TARPROC_CHECK_FIELDS": "20"})
    assert p.returncode == 1, p.stderr
    rep = json.loads(p.stdout)["shards"][0]
    assert len(rep["fields"]) == 21
    assert rep["fields"]["(other fields)"] == {"count": n - 20, "bytes": 2 * (n - 20)}
    assert sum(f["count"] for f in rep["fields"].values()) == n
    kinds = {q["kind"]: q for q in rep["problems"]}
    assert kinds["too_many_fields"]["count"] == n - 20
    assert "duplicate_fields" not in kinds  # the bucket is not a repeated field


def test_seen_keys_memory_is_bounded():
    """The library object: after the limit, no key is kept in Python memory."""
    from tarproc.sinks.check import SeenKeys

    keys = SeenKeys(limit=50)
    s0 = keys.new_shard("a")
    assert all(keys.visit(f"k{i}", s0) is None for i in range(500))
    assert keys._mem == {} and len(keys) == 500
    s1 = keys.new_shard("b")
    assert keys.visit("k3", s0) == s0
    assert keys.visit("k3", s1) == s0
    assert keys.visit("k3", s1) == s1
    assert keys.visit("caf\udce9", s1) is None  # a non-UTF-8 key
    assert keys.visit("caf\udce9", s1) == s1
    keys.close()
