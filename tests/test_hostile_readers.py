"""Adversarial and real-world review of the reading commands (tarcat, tarshow,
tar2tsv, tar2json, tarcheck, tarindex, tarfirst) and the library readers.

Each test is one finding of the review: the input is generated here, run
through the installed commands in real pipes, and the output is read back
with an independent reader (GNU tar, bsdtar, tarfile)."""

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import time

import pytest

from conftest import require

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile"))
import make_corpus as mc  # noqa: E402


def names_of(data):
    """Member names (bytes) of the regular members, read by tarfile."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*", encoding="utf-8", errors="surrogateescape") as tf:
        return [m.name.encode("utf-8", "surrogateescape") for m in tf if m.isfile()]


def members_of(data):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*", encoding="utf-8", errors="surrogateescape") as tf:
        return [(m.name.encode("utf-8", "surrogateescape"), tf.extractfile(m).read()) for m in tf if m.isfile()]


# ---------------------------------------------------------------- pipes


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_pipe_source_is_killed_as_a_process_group(tmp_path):
    """`pipe:` runs `sh -c CMD`: a reader that stops early (-c 1) must stop the
    whole command, not only the shell (its children kept running before)."""
    data = mc.member(b"a.txt", b"x") + mc.member(b"b.txt", b"y")
    (tmp_path / "a.tar").write_bytes(data)
    pidfile = tmp_path / "pid"
    # the producer sends two samples, then a grandchild sleeps: the shell's child, not the shell
    cmd = f"pipe:cat a.tar; sleep 300 & echo $! > pid; wait"
    t0 = time.monotonic()
    p = subprocess.run(["tarcat", "-c", "1", cmd], cwd=tmp_path, capture_output=True, timeout=60)
    assert time.monotonic() - t0 < 30
    assert p.returncode == 0, p.stderr
    assert names_of(p.stdout) == [b"a.txt"]
    pid = int(pidfile.read_text())
    for _ in range(100):
        if not _alive(pid):
            break
        time.sleep(0.05)
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive, "the pipe: command's child outlived the reader"


# ---------------------------------------------------------------- tarcheck memory


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


# ---------------------------------------------------------------- compression bombs


def _gzip_bomb(size, tail=b""):
    """A .tar.gz (about size/1000 bytes) whose member bomb.txt inflates to ``size`` bytes."""
    import zlib

    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [comp.compress(mc.header(b"bomb.txt", size))]
    chunk = b"a" * (1 << 20)
    for _ in range(size >> 20):
        out.append(comp.compress(chunk))
    out.append(comp.compress(mc.member(b"bomb.cls", b"7") + tail + mc.EOA) + comp.flush())
    return b"".join(out)


@pytest.mark.parametrize("fmt", ["blocks", "original"])
def test_tarshow_bomb_writes_nothing_to_disk(sh, tmp_path, fmt):
    """tarshow only previews: a member that inflates far past the blob
    threshold is read through, keeping its head, and never spooled (before:
    the whole member went to a spool file).  `ulimit -f` makes any spool
    write of more than 1 MB kill the command."""
    (tmp_path / "bomb.tar.gz").write_bytes(_gzip_bomb(48 << 20, mc.member(b"next.txt", b"hi")))
    p = sh(f"ulimit -f 1024; tarshow -c 1 --format {fmt} < bomb.tar.gz",
           env={"TARPROC_BLOB_THRESHOLD": "64K", "TMPDIR": str(tmp_path)})
    text = p.stdout.decode()
    if fmt == "blocks":
        assert text.splitlines()[0] == "bomb"
        assert "48 MB  aaaa" in text and "7" in text and "next" not in text
    else:
        assert "txt                 \tb'aaaa" in text and "cls                 \tb'7'" in text
    assert sorted(os.listdir(tmp_path)) == ["bomb.tar.gz"]
