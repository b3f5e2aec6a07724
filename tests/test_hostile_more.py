"""Adversarial review, third pass: the commands that got least attention
(tarpcat, tarindex, tarcheck over many shards, lines2tar, tar2json, tarmix,
kujob, tarserve) and the empty field (a member ``KEY.``).  Every command runs
installed, as a subprocess; archives are read back with Python's tarfile or
webdataset.  Each test failed before the fix it comes with."""

import json
import os
import select
import signal
import subprocess
import sys
import tarfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "hostile"))
import make_corpus as M  # noqa: E402


def shard(n, prefix="s", size=20):
    return M.plain_shard(n, prefix, size)


def names(path):
    with tarfile.open(path) as tf:
        return [m.name for m in tf if m.isfile()]


run = M.bash
one_line = M.one_line


processes_with = M.processes_with


# ------------------------------------------------------------------ tarpcat


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


# ------------------------------------------------------------------ tarindex


def test_tarindex_over_more_urls_than_are_read_ahead(tmp_path):
    """Past 1000 URLs the input list comes lazily: tarindex took its len()."""
    (tmp_path / "a.tar").write_bytes(shard(2))
    (tmp_path / "list").write_text("a.tar\n" * 1001)
    p = run("tarindex -T list -o index.json", tmp_path)
    assert p.returncode == 0, p.stderr
    index = json.loads((tmp_path / "index.json").read_text())
    assert len(index["shardlist"]) == 1001 and {e["nsamples"] for e in index["shardlist"]} == {2}
    p = run("tarindex 'a{0..99}.tar' -o big.json", tmp_path, env={"TARPROC_MAX_URLS": "50"})
    assert p.returncode == 2 and "more than 50 entries" in one_line(p)
    assert not (tmp_path / "big.json").exists()


# ------------------------------------------------------------------ the empty field


def test_the_empty_field_round_trips_through_every_writer(tmp_path):
    """A member `KEY.` is field "" of sample KEY (webdataset reads it so);
    every command writes it back as `KEY.`, including a sample whose only
    field it is.  tarproc -c used to drop it (and the whole sample), and the
    library's general writer refused it as 'it would not read back'."""
    import webdataset as wds

    members = [(b"k.", b"A"), (b"k.txt", b"B"), (b"d/j.", b"C")]
    (tmp_path / "in.tar").write_bytes(b"".join(M.member(n, d) for n, d in members) + M.EOA)
    want = ["k.", "k.txt", "d/j."]
    for cmd in ["tarcat in.tar", "tarpcat -w 1 in.tar", "tarproc -c true in.tar", "tarsort -r in.tar",
                "tarproc -c 'cp sample. sample.copy' in.tar"]:
        p = run(f"{cmd} > out.tar", tmp_path)
        assert p.returncode == 0, (cmd, p.stderr)
        got = names(tmp_path / "out.tar")
        if "sort" in cmd:
            assert sorted(got) == sorted(want), cmd
        elif "copy" in cmd:
            assert got == ["k.", "k.copy", "k.txt", "d/j.", "d/j.copy"], got
        else:
            assert got == want, (cmd, got)
    samples = list(wds.WebDataset(str(tmp_path / "out.tar"), shardshuffle=False))
    assert [(s["__key__"], s[""], s["copy"]) for s in samples] == [("k", b"A", b"A"), ("d/j", b"C", b"C")]
    # the library's general writer (a sample that is not raw bytes read from a tar)
    code = ("import sys, tarproc as S\n"
            "w = S.SampleWriter(sys.stdout.buffer)\n"
            "w.write({'__key__': 'k.x'[:1], '': 'A', 'txt': bytearray(b'B')})\n"
            "w.close()\n")
    with open(tmp_path / "lib.tar", "wb") as f:
        p = subprocess.run([sys.executable, "-c", code], stdout=f, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr
    assert names(tmp_path / "lib.tar") == ["k.", "k.txt"]


# ------------------------------------------------------------------ tarcheck over many shards


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
