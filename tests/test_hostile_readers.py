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
    # a grandchild sleeps (the shell's child, not the shell), then the producer
    # sends two samples (the pid file is written before any data: no race)
    cmd = f"pipe:sleep 300 & echo $! > pid; cat a.tar; wait"
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


def test_download_dies_with_a_reader_killed_outright(tmp_path):
    """A reader SIGKILLed (a preempted pod, the OOM killer) runs no cleanup:
    the download program itself must carry the parent-death signal, not only
    the shell that started it."""
    import http.server
    import threading

    body = mc.member(b"a.txt", b"x")
    gate = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            gate.wait(60)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/slow-{os.getpid()}.tar"
    p = subprocess.Popen(["tarcat", url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        curl = []
        for _ in range(200):
            curl = [int(x) for x in subprocess.run(["pgrep", "-f", f"curl.*{url}"], capture_output=True,
                                                   text=True).stdout.split()]
            if curl:
                break
            time.sleep(0.05)
        assert curl, "the download never started"
        p.kill()
        p.wait()
        for _ in range(100):
            if not any(_alive(c) for c in curl):
                break
            time.sleep(0.05)
        left = [c for c in curl if _alive(c)]
        for c in left:
            os.kill(c, 9)
        assert not left, "curl outlived a reader killed with SIGKILL"
    finally:
        gate.set()
        httpd.shutdown()


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
        assert "50 MB  aaaa" in text and "7" in text and "next" not in text  # 48 MiB = 50.3 MB (decimal units)
    else:
        assert "txt                 \tb'aaaa" in text and "cls                 \tb'7'" in text
    assert sorted(os.listdir(tmp_path)) == ["bomb.tar.gz"]


# ---------------------------------------------------------------- tar dialects


def _tree_files(root):
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, root)] = fh.read()
    return out


@pytest.fixture(scope="module")
def dialect_dir(tmp_path_factory):
    """Files with a bit of everything a real directory has: dots in directory
    names, a 120-character directory, UTF-8, an empty file, a symlink, a hard
    link, a FIFO, and sparse files (one with more holes than the header map holds)."""
    d = tmp_path_factory.mktemp("dialects") / "src"
    (d / "a.b").mkdir(parents=True)
    (d / "a.b" / "c.d.jpg").write_bytes(b"jpeg")
    (d / "a.b" / "c.cls").write_bytes(b"3")
    (d / ("n" * 120)).mkdir()
    (d / ("n" * 120) / "0001.txt").write_bytes(b"long")
    (d / "caf\u00e9.txt").write_bytes("\u00e9".encode())
    (d / "empty.txt").write_bytes(b"")
    os.symlink("a.b/c.cls", d / "link.txt")
    os.link(d / "a.b" / "c.cls", d / "hard.cls")
    os.mkfifo(d / "fifo.p")
    with open(d / "many.bin", "wb") as f:  # 10 data regions: old GNU needs extension headers
        for i in range(10):
            f.seek(i * 50000)
            f.write(b"D%d" % i * 3000)
        f.truncate(600000)
    with open(d / "few.bin", "wb") as f:
        f.seek(70000)
        f.write(b"Y" * 1000)
        f.truncate(100000)
    return d


DIALECTS = [("tar", "gnu"), ("tar", "oldgnu"), ("tar", "posix"), ("tar", "ustar"), ("tar", "v7"),
            ("tar", "posix --sparse-version=0.1"), ("tar", "posix --sparse-version=1.0"),
            ("bsdtar", "pax"), ("bsdtar", "ustar"), ("bsdtar", "gnutar"), ("bsdtar", "v7")]


@pytest.mark.parametrize("tool,fmt", DIALECTS, ids=[f"{t}-{f.split()[-1]}" for t, f in DIALECTS])
def test_tar_dialects_read_like_gnu_tar_extracts(sh, tmp_path, dialect_dir, tool, fmt):
    """GNU tar and bsdtar archives of the same files, in every format they
    write (sparse files stored as sparse where the format can): tarcat gives
    exactly the regular files GNU tar extracts from the same archive, sparse
    files whole (holes as zeros), names and bytes equal; links, directories
    and FIFOs are skipped and counted."""
    require("bsdtar")
    sparse = "--sparse" if tool == "tar" and fmt != "v7" and fmt != "ustar" else ""
    sh(f"{tool} --format={fmt} {sparse} -cf in.tar -C {dialect_dir} . 2>/dev/null || test -s in.tar")
    p = sh("tarcat -v in.tar > out.tar", stderr_ok=True)
    assert b"samples read" in p.stderr
    (tmp_path / "ref").mkdir()
    (tmp_path / "got").mkdir()
    sh("tar -xf in.tar -C ref 2>/dev/null; tar -xf out.tar -C got")
    ref = {k: v for k, v in _tree_files(tmp_path / "ref").items() if "." in os.path.basename(k)}
    got = _tree_files(tmp_path / "got")
    # hard links: the first name holds the data, the second is a link member,
    # which readers skip (as webdataset): exactly one of the two names comes out
    linked = [n for n in ("hard.cls", os.path.join("a.b", "c.cls")) if n in got]
    assert len(linked) == 1 and got[linked[0]] == b"3"
    ref = {k: v for k, v in ref.items() if k not in ("hard.cls", os.path.join("a.b", "c.cls"))}
    got = {k: v for k, v in got.items() if k not in ("hard.cls", os.path.join("a.b", "c.cls"))}
    assert got.keys() == ref.keys()
    assert got == ref
    if fmt.startswith(("gnu", "oldgnu", "posix", "pax")):
        assert got["many.bin"][:6] == b"D0D0D0" and len(got["many.bin"]) == 600000
        assert got["few.bin"][70000:71000] == b"Y" * 1000


def _old_sparse(name, entries, realsize, data, extended=(), size=None):
    """An old GNU sparse member (type S): ``entries`` in the header,
    ``extended`` in one extension block after it."""
    h = bytearray(mc.header(name, len(data) if size is None else size, flag=b"S"))
    for i, (off, n) in enumerate(entries):
        h[386 + 24 * i: 398 + 24 * i] = b"%011o\0" % off
        h[398 + 24 * i: 410 + 24 * i] = b"%011o\0" % n
    h[482] = 1 if extended else 0
    h[483:495] = b"%011o\0" % realsize
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    ext = b""
    if extended:
        e = bytearray(512)
        for i, (off, n) in enumerate(extended):
            e[24 * i: 24 * i + 12] = b"%011o\0" % off
            e[24 * i + 12: 24 * i + 24] = b"%011o\0" % n
        ext = bytes(e)
    return bytes(h) + ext + mc.pad(data)


def _pax_sparse(records, data, name=b"GNUSparseFile.0/k.bin"):
    body = b"".join(mc.pax_record(k, v) for k, v in records)
    return mc.special(b"x", body, name=b"././@PaxHeader") + mc.member(name, data)


@pytest.mark.parametrize("label,data,match", [
    ("map-past-size", _old_sparse(b"k.bin", [(100, 10)], 50, b"x" * 10), "runs past its size"),
    ("map-overlap", _old_sparse(b"k.bin", [(0, 10), (5, 5)], 50, b"x" * 15), "overlaps"),
    ("map-more-than-stored", _old_sparse(b"k.bin", [(0, 600)], 1000, b"x" * 10), "more than the 10 stored"),
    ("holes-over-limit", _old_sparse(b"k.bin", [(4 << 30, 1)], (4 << 30) + 1, b"x"), "holes, over the"),
    ("cut-in-extension", _old_sparse(b"k.bin", [(0, 1)], 10, b"xy", extended=[(5, 1)])[:512 + 100],
     "input ends inside its extension"),
    ("cut-in-data", _old_sparse(b"k.bin", [(0, 1)], 10, b"xy", extended=[(5, 1)])[:1024 + 1],
     "input ends inside its data"),
    ("pax-bad-map", _pax_sparse([("GNU.sparse.map", b"1,2,x"), ("GNU.sparse.size", b"9")], b"ab"),
     "bad GNU.sparse.map"),
    ("pax-no-size", _pax_sparse([("GNU.sparse.map", b"0,2")], b"ab"), "realsize"),
    ("pax-0.0-past-size", _pax_sparse([("GNU.sparse.size", b"9"), ("GNU.sparse.offset", b"8"),
                                       ("GNU.sparse.numbytes", b"2")], b"ab"), "runs past its size"),
    ("pax-1.0-bad-map", _pax_sparse([("GNU.sparse.major", b"1"), ("GNU.sparse.minor", b"0"),
                                     ("GNU.sparse.realsize", b"9")], mc.pad(b"1\nzz\n2\n") + b"ab"),
     "bad number in its map"),
    ("pax-1.0-endless-map", _pax_sparse([("GNU.sparse.major", b"1"), ("GNU.sparse.realsize", b"9")],
                                        mc.pad(b"3\n" + b"1\n" * 2)), "longer than its data"),
])
def test_hostile_sparse_members(sh, tmp_path, label, data, match):
    """Damaged or lying sparse maps: one line naming the member and the
    offset, exit 2, nothing written."""
    cut = label.startswith("cut-")
    (tmp_path / "in.tar").write_bytes(mc.member(b"a.txt", b"ok") + data + (b"" if cut else mc.EOA))
    p = sh("tarcat in.tar > out.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert len(err.splitlines()) == 1 and "sparse member" in err and match in err, err
    assert f"offset {1024 if label[:4] != 'pax-' else 2048}:" in err, err


def test_valid_sparse_members_from_generated_maps(sh, tmp_path):
    """Hand-built sparse members of each format read as the same file,
    and as tarfile reads them."""
    want = bytes(5) + b"ab" + bytes(3) + b"cd" + bytes(4)  # 16 bytes
    parts = [
        _old_sparse(b"o.bin", [(5, 2)], 16, b"abcd", extended=[(10, 2)]),
        _pax_sparse([("GNU.sparse.map", b"5,2,10,2"), ("GNU.sparse.size", b"16"),
                     ("GNU.sparse.name", b"p.bin")], b"abcd"),
        _pax_sparse([("GNU.sparse.major", b"1"), ("GNU.sparse.minor", b"0"), ("GNU.sparse.name", b"q.bin"),
                     ("GNU.sparse.realsize", b"16")], mc.pad(b"2\n5\n2\n10\n2\n") + b"abcd"),
        # pax 0.0 (GNU tar 1.14/1.15): offset/numbytes pairs repeated, the name in the header
        _pax_sparse([("GNU.sparse.size", b"16"), ("GNU.sparse.numblocks", b"2"), ("GNU.sparse.offset", b"5"),
                     ("GNU.sparse.numbytes", b"2"), ("GNU.sparse.offset", b"10"), ("GNU.sparse.numbytes", b"2")],
                    b"abcd", name=b"r.bin"),
    ]
    (tmp_path / "in.tar").write_bytes(b"".join(parts) + mc.member(b"z.txt", b"end") + mc.EOA)
    p = sh("tarcat in.tar")
    assert members_of(p.stdout) == [(b"o.bin", want), (b"p.bin", want), (b"q.bin", want), (b"r.bin", want),
                                    (b"z.txt", b"end")]
    # the big path: spooled to disk, same bytes
    p = sh("tarcat in.tar", env={"TARPROC_BLOB_THRESHOLD": "8"})
    assert members_of(p.stdout)[:4] == [(b"o.bin", want), (b"p.bin", want), (b"q.bin", want), (b"r.bin", want)]


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("field", [b"__key__", b"__source__", b"__index__", b"__KEY__", b"__"])
def test_metadata_like_fields_are_refused_clearly(sh, tmp_path, field):
    """`x.__key__` used to give a misleading 'appears twice' error, and
    `x.__index__` became metadata that no writer writes back (silently lost).
    A field named like metadata is one clear error naming the member; tarcheck
    reports it as a problem."""
    (tmp_path / "in.tar").write_bytes(mc.member(b"x.txt", b"1") + mc.member(b"x." + field, b"evil") + mc.EOA)
    for cmd in ("tarcat in.tar", "tarshow in.tar", "tar2tsv in.tar", "tar2json in.tar"):
        p = sh(cmd + " > /dev/null", ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2 and len(err.splitlines()) == 1, (cmd, err)
        assert "offset 1024" in err and "metadata name" in err, (cmd, err)
    p = sh("tarcheck --json in.tar", ok=False)
    assert p.returncode == 1
    probs = json.loads(p.stdout)["shards"][0]["problems"]
    assert [q["kind"] for q in probs] == ["metadata_fields"]


def test_names_kept_as_they_are(sh, tmp_path):
    """Names are never normalised: `./x` and `x` are different keys, NFC and
    NFD spellings of `café` are different keys (bytes kept), dots in
    directories stay in the key, an empty field (`x.`) and a field `.` (`x..`)
    read and write back; upper-case extensions become lower-case fields (as
    webdataset reads them)."""
    nfd, nfc = "cafe\u0301".encode(), "caf\u00e9".encode()
    names = [b"./x.jpg", b"x.JPG", nfd + b".txt", nfc + b".txt", b"a.b/c.d.jpg", b"e.", b"f.."]
    (tmp_path / "in.tar").write_bytes(b"".join(mc.member(n, n) for n in names) + mc.EOA)
    p = sh("tarcat in.tar")
    assert members_of(p.stdout) == [(n.replace(b"JPG", b"jpg"), n) for n in names]
    rows = sh("tar2tsv -f txt in.tar").stdout.decode().splitlines()
    assert [r.split("\t")[0] for r in rows[1:]] == ["./x", "x", "cafe\u0301", "caf\u00e9", "a.b/c", "e", "f"]
    # tarcheck counts 7 samples: none is merged with another
    rep = json.loads(sh("tarcheck --json in.tar", ok=False).stdout)
    assert rep["shards"][0]["samples"] == 7


# ---------------------------------------------------------------- tarshow vs the original


def test_tarshow_original_check_and_flags(sh, tmp_path):
    """The original's own test (`tarshow imagenet.tar` shows b'746') holds
    with --format original and piped (auto); --format blocks gives the block
    display (on a terminal, the default: docs/tarshow.md); the original's
    --use-keyboard is accepted."""
    data = mc.member(b"20.cls", b"746") + mc.member(b"20.wnid", b"n07734744") + mc.EOA
    (tmp_path / "in.tar").write_bytes(data)
    out = sh("tarshow --format original --use-keyboard in.tar").stdout.decode()
    assert "b'746'" in out and "n07734744" in out
    assert out.splitlines()[:4] == [f"{'__key__':20s}\t20", f"{'__source__':20s}\tin.tar",
                                    f"{'cls':20s}\tb'746'", f"{'wnid':20s}\tb'n07734744'"]
    assert sh("tarshow in.tar").stdout.decode() == out
    out = sh("tarshow --format blocks in.tar").stdout.decode()
    assert [line.split() for line in out.splitlines()] == [["20"], ["cls", "3", "B", "746"],
                                                            ["wnid", "9", "B", "n07734744"]]


# ---------------------------------------------------------------- the end of an archive


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


def test_tarcheck_reports_trailing_data(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(mc.member(b"a.txt", b"1") + mc.EOA + b"junk" * 300)
    p = sh("tarcheck --json in.tar", ok=False)
    assert p.returncode == 1
    probs = json.loads(p.stdout)["shards"][0]["problems"]
    assert [(q["kind"], q["examples"]) for q in probs] == [("trailing_data", ["offset 2048"])]


def test_index_of_a_shard_ending_in_a_sparse_member(tmp_path):
    """tarindex took a member's end as offset + its data length: a sparse
    member stores less than its length, so the last sample's byte range ran
    past the shard.  Random access gives the samples a full read gives."""
    import tarproc

    want = bytes(5) + b"ab" + bytes(3) + b"cd" + bytes(4)
    data = (mc.member(b"a.txt", b"1") + _old_sparse(b"a.bin", [(5, 2)], 16, b"abcd", extended=[(10, 2)])
            + mc.member(b"b.txt", b"2") + _old_sparse(b"b.bin", [(5, 2), (10, 2)], 2000, b"abcd") + mc.EOA)
    (tmp_path / "s.tar").write_bytes(data)
    tarproc.index_shards([str(tmp_path / "s.tar")], str(tmp_path / "index.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    ref = list(tarproc.iter_samples([str(tmp_path / "s.tar")]))
    assert [ds[i] for i in range(len(ds))] == ref
    assert [(s["__key__"], s["bin"]) for s in ref] == [("a", want), ("b", want + bytes(1984))]


# ---------------------------------------------------------------- compression


@pytest.mark.parametrize("codec", ["gzip", "bzip2", "xz", "zstd"])
def test_multi_stream_compressed_input(sh, tmp_path, codec):
    """`cat a.tar.gz b.tar.gz` (and pigz/pbzip2/zstd -T output, which are
    multi-stream too) reads as one stream, split anywhere, as gzip -dc does;
    gzip followed by zero padding (a tape or a preallocated file) too."""
    require("zstd")
    data = b"".join(mc.member(b"%04d.txt" % i, b"x" * i) for i in range(60)) + mc.EOA
    cut = 12345  # not on a block boundary
    z = mc._compress(codec, data[:cut]) + mc._compress(codec, data[cut:])
    if codec == "gzip":
        z += bytes(1000)
    (tmp_path / "in").write_bytes(z)
    p = sh("tarcat < in")
    assert members_of(p.stdout) == members_of(data)
