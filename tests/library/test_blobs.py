"""Members of any size (issue 12): large members become blobs (spool files or
regions of the input file), every command copies them without loading them,
and the output bytes are the same as with everything in memory.

Most tests lower the threshold (TARPROC_BLOB_THRESHOLD=1MB) and use a few MB;
one test streams a 1 GiB member and measures peak RSS with GNU time."""

import hashlib
import os
import resource
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

GEN = f"{sys.executable} {ROOT}/testdata/bigmember.py"
SMALL = {"TARPROC_BLOB_THRESHOLD": "1MB"}
NEVER = {"TARPROC_BLOB_THRESHOLD": "0"}


def spools(d):
    return sorted(n for n in os.listdir(d) if n.startswith(".tarproc-spool."))


@pytest.fixture
def big(tmp_path, sh):
    sh(f"{GEN} 3000000 4 > big.tar")
    spool = tmp_path / "spool"
    spool.mkdir()
    return tmp_path / "big.tar", spool


def members_sha(sh, cmd):
    """sha256 of each member of the tar that ``cmd`` writes, by GNU tar."""
    out = sh(f"{cmd} > out.tar && tar tf out.tar").stdout.decode().split()
    return {n: hashlib.sha256(sh(f"tar xOf out.tar {n}").stdout).hexdigest() for n in out}


# The same bytes as with every member in memory, for every writing command,
# from a plain file (regions), from stdin as a file, and from a pipe (spool files).
@pytest.mark.parametrize("cmd", [
    "tarcat {i}", "tarcat < big.tar", "cat big.tar | tarcat", "tarcat -f 'bin txt' {i}", "tarcat -f bin {i}",
    "cat big.tar | tarsort -r --memory 2MB", "tarsort -r --memory 2MB {i}",
    "tarpcat -w 2 {i} {j}", "tarpcat -w 2 -c 5 {i} {j}", "tarpcat -w 2 -c 3 'pipe:cat {i}' 'pipe:cat {j}'",
    "tarproc -p 2 -c 'sha256sum sample.bin > sample.sha; cat sample.bin > sample.out' {i}",
    "cat big.tar | tarproc -p 1 -c 'sha256sum sample.bin > sample.sha'",
])
def test_same_bytes_as_in_memory(sh, big, cmd):
    path, spool = big
    if "{j}" in cmd:  # a second shard, other keys (big.tar twice would put one key twice side by side: refused)
        sh("tarcat --rekey 'again/{key}' big.tar > big2.tar")
    cmd = cmd.format(i="big.tar", j="big2.tar")
    env = dict(SMALL, TMPDIR=str(spool))
    blob = sh(f"{cmd}", env=env).stdout
    plain = sh(f"{cmd}", env=dict(NEVER, TMPDIR=str(spool))).stdout
    assert blob == plain
    assert len(blob) > 3_000_000
    assert spools(spool) == []
    # the data is intact, checked by GNU tar
    (path.parent / "out.tar").write_bytes(blob)
    names = sh("tar tf out.tar").stdout.decode().split()
    assert names
    for n in names:
        if n.endswith(".bin") or n.endswith(".out"):
            data = sh(f"tar xOf out.tar --occurrence=1 {n}").stdout
            i = int(os.path.basename(n)[1:5])
            assert len(data) == 3_000_000
            assert data[:1 << 20] == bytes((j * 7 + i) & 0xFF for j in range(256)) * 4096
        if n.endswith(".sha"):
            data = sh(f"tar xOf out.tar --occurrence=1 {n}").stdout.split()[0].decode()
            want = hashlib.sha256(sh(f"tar xOf big.tar {n[:-4]}.bin").stdout).hexdigest()
            assert data == want


def test_tarsplit_counts_blob_size(sh, big):
    path, spool = big
    env = dict(SMALL, TMPDIR=str(spool))
    sh("mkdir a b && tarsplit -s 7MB -o 'a/part-%02d.tar' big.tar", env=env)
    sh("tarsplit -s 7MB -o 'b/part-%02d.tar' big.tar", env=NEVER)
    a = sorted(os.listdir(path.parent / "a"))
    assert a == sorted(os.listdir(path.parent / "b")) and len(a) == 2  # 2 samples of 3 MB per 7 MB shard
    for n in a:
        assert (path.parent / "a" / n).read_bytes() == (path.parent / "b" / n).read_bytes()
    assert spools(spool) == []


def test_tables_checks_previews(sh, big):
    path, spool = big
    env = dict(SMALL, TMPDIR=str(spool))
    rows = sh("cat big.tar | tar2tsv -f 'bin txt'", env=env).stdout.decode().splitlines()
    assert rows[1].split("\t")[:2] == ["s0000", "3000000"]
    h = sh("tar2tsv --hash -f bin big.tar", env=env, stderr_ok=True).stdout.decode().splitlines()
    assert h[1].split("\t")[1] == hashlib.sha256(sh("tar xOf big.tar s0000.bin").stdout).hexdigest()
    check = sh("cat big.tar | tarcheck", env=env, stderr_ok=True).stdout.decode()
    assert "4 samples" in check or "samples: 4" in check or " 4 " in check
    show = sh("tarshow --format blocks -c 1 < big.tar", env=env).stdout.decode()
    assert "3.0 MB" in show or "2.9 MiB" in show or "3000000" in show or "MB" in show
    first = sh("tarfirst -f bin < big.tar", env=env).stdout
    assert first == sh("tar xOf big.tar s0000.bin").stdout
    assert spools(spool) == []


def test_map_gets_bytes_or_blobs(sh, big, tmp_path):
    path, spool = big
    (tmp_path / "fns.py").write_text(
        "def kind(s):\n"
        "    return {'__key__': s['__key__'], 'kind': type(s['bin']).__name__, 'n': str(len(s['bin'])),\n"
        "            'bin': s['bin']}\n")
    env = dict(SMALL, TMPDIR=str(spool))
    for mode, want in (("bytes", b"bytes"), ("blob", b"Blob")):
        sh(f"cat big.tar | tarproc -p 2 --map fns.py:kind --map-blobs {mode} > m.tar", env=env)
        assert sh("tar xOf m.tar s0001.kind").stdout == want
        assert sh("tar xOf m.tar s0001.bin").stdout == sh("tar xOf big.tar s0001.bin").stdout
    assert spools(spool) == []


def test_claimed_size_then_end_is_clean_and_leaves_nothing(sh, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    env = dict(SMALL, TMPDIR=str(spool))
    for cmd in ("tarcat", "tarsort", "tar2tsv", "tarproc -c true", "tarcheck"):
        p = sh(f"{GEN} 1000000000 1 --cut 5000000 | {cmd} > /dev/null", env=env, ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2, (cmd, err)
        assert "input ends inside member data" in err and "Traceback" not in err, (cmd, err)
        assert spools(spool) == []


def _slow_feed(proc_stdin, n):
    from importlib import util

    spec = util.spec_from_file_location("bigmember", f"{ROOT}/testdata/bigmember.py")
    mod = util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    proc_stdin.write(mod.header("s0000.bin", 100_000_000) + mod.pattern(0, n))
    proc_stdin.flush()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_spool_removed_on_signals_and_found_after_kill(tmp_path, sh, sig):
    spool = tmp_path / "spool"
    spool.mkdir()
    env = dict(os.environ, **SMALL, TMPDIR=str(spool))
    p = subprocess.Popen(["tarcat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=env)
    _slow_feed(p.stdin, 3_000_000)
    deadline = time.time() + 20
    while not spools(spool) and time.time() < deadline:
        time.sleep(0.05)
    assert spools(spool)
    p.send_signal(sig)
    p.wait(timeout=20)
    p.stdin.close()
    if sig == signal.SIGKILL:
        left = spools(spool)
        assert len(left) == 1
        sh(f"tarcat --cleanup {spool} -v", stderr_ok=True)
        assert spools(spool) == []
    else:
        assert p.returncode in (130, 143)
        assert spools(spool) == []


def test_cleanup_leaves_a_live_spool(tmp_path, sh):
    spool = tmp_path / "spool"
    spool.mkdir()
    env = dict(os.environ, **SMALL, TMPDIR=str(spool))
    p = subprocess.Popen(["tarcat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    try:
        _slow_feed(p.stdin, 2_000_000)
        deadline = time.time() + 20
        while not spools(spool) and time.time() < deadline:
            time.sleep(0.05)
        sh(f"tarcat --cleanup {spool}")
        assert len(spools(spool)) == 1  # alive (flock held): kept
    finally:
        p.kill()
        p.wait()


def test_blob_api(tmp_path):
    from tarproc.core.blob import Blob, Spooler
    from tarproc.core.grouping import SampleWriter
    import io
    import tarfile

    sp = Spooler(threshold=10, tmpdir=str(tmp_path))
    b = sp.blob_from_bytes(b"0123456789" * 100)
    assert len(b) == 1000 and b[:3] == b"012" and b[-1] == ord("9") and bytes(b) == b"0123456789" * 100
    assert b.read(5) == b"01234" and b.open().read() == bytes(b)
    b.link_or_copy_to(str(tmp_path / "x"))
    assert (tmp_path / "x").read_bytes() == bytes(b)
    out = io.BytesIO()
    w = SampleWriter(out)
    w.write({"__key__": "k", "big": b, "small": b"s"})
    w.close()
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as t:
        assert t.extractfile("k.big").read() == bytes(b)
    path = b.path
    b.close()
    assert not os.path.exists(path)




@pytest.mark.skipif(os.environ.get("TARPROC_SKIP_BIG") == "1", reason="TARPROC_SKIP_BIG=1")
def test_one_gib_member_in_flat_memory(tmp_path):
    """A 1 GiB member through a pipe: tarcat and tarproc -c stay
    under 200 MB peak RSS (GNU time) and the bytes are intact (sha256)."""
    size = 1 << 30
    spool = tmp_path / "spool"
    spool.mkdir()
    env = dict(os.environ, TMPDIR=str(spool))
    want = hashlib.sha256()
    chunk = bytes((j * 7) & 0xFF for j in range(256)) * 4096
    for _ in range(size // len(chunk)):
        want.update(chunk)
    want = want.hexdigest()
    for cmd, member in (("tarcat", "s0000.bin"),
                        ("tarproc -c 'sha256sum sample.bin > sample.sha; mv sample.bin sample.out'", "s0000.out")):
        script = (f"{GEN} {size} 1 | /usr/bin/time -f %M -o {tmp_path}/rss {cmd} "
                  f"| tar xOf - {member} | sha256sum")
        p = subprocess.run(["bash", "-o", "pipefail", "-c", script], capture_output=True, env=env, timeout=600,
                           cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split()[0].decode() == want, cmd
        rss = int((tmp_path / "rss").read_text().split()[-1])
        assert rss < 200_000, (cmd, rss)
        assert spools(spool) == []


def test_add_log_of_any_length_in_flat_memory(tmp_path, sh):
    """``--add-log`` stores a command's output in a field: 200 MB of it go
    from the unnamed file it spilled to straight into the output (peak RSS
    stays low; it used to be loaded, twice over), and the bytes are intact."""
    sh(f"{GEN} 1000 2 > two.tar")
    script = ("/usr/bin/time -f %M -o rss tarproc -p 2 --add-log log "
              "-c 'yes xxxxxxxxx | head -c 200000000; echo end-$(cat sample.__key__)' two.tar > out.tar")
    sh(script)
    rss = int((tmp_path / "rss").read_text().split()[-1])
    assert rss < 120_000, rss
    import tarfile

    with tarfile.open(tmp_path / "out.tar") as t:
        logs = {m.name: m.size for m in t if m.name.endswith(".log")}
        assert logs == {"s0000.log": 200_000_010, "s0001.log": 200_000_010}
        f = t.extractfile("s0001.log")
        assert f.read(5) == b"xxxxx"
        f.seek(200_000_000 - 2)
        assert f.read() == b"x\nend-s0001\n"
    small = sh("tarproc --add-log log -c 'echo hi' two.tar | tar xOf - s0000.log").stdout
    assert small == b"hi\n"


def _yes(i, size):
    line = f"{i}\n".encode()
    return (line * (size // len(line) + 1))[:size]


@pytest.mark.parametrize("flag, script, n, size, name", [
    # -m (a video's frames, a PDF's pages): 300 outputs of 1 MB, in order
    ("-m", "yes $i | head -c 1000000 > sample-$i.bin", 300, 1_000_000, "s0000-{}.bin"),
    # -S: the budget is for all the subdirectories together, not one each
    ("-S", "mkdir d$i; yes $i | head -c 2000000 > d$i/sample.bin", 150, 2_000_000, "s0000/d{}.bin"),
])
def test_many_outputs_of_one_sample_in_flat_memory(tmp_path, sh, flag, script, n, size, name):
    """One sample's outputs are not all held in memory (past 16 MB they are
    packed into one spool file), and every byte comes out in order."""
    sh(f"{GEN} 1000 1 > one.tar")
    sh(f"/usr/bin/time -f %M -o rss tarproc {flag} -c 'for i in $(seq {n}); do {script}; done' one.tar > out.tar")
    rss = int((tmp_path / "rss").read_text().split()[-1])
    assert rss < 120_000, rss
    import tarfile

    with tarfile.open(tmp_path / "out.tar") as t:
        got = [(m.name, t.extractfile(m).read()) for m in t]
    want = [(name.format(i), _yes(i, size)) for i in range(1, n + 1)]
    assert got == (want if flag == "-m" else sorted(want))  # -m: by number; -S: by directory name
    assert spools(tmp_path) == []


def test_many_large_outputs_need_few_descriptors(tmp_path, sh):
    """Large output files are blobs; past 32 of them in one sample they
    share one spool file, so 200 of them work with 64 descriptors."""
    sh(f"{GEN} 1000 1 > one.tar")
    sh("ulimit -n 64; TARPROC_BLOB_THRESHOLD=100KB TMPDIR=. tarproc -m "
       "-c 'for i in $(seq 200); do yes $i | head -c 150000 > sample-$i.bin; done' one.tar > out.tar")
    import tarfile

    with tarfile.open(tmp_path / "out.tar") as t:
        got = {m.name: t.extractfile(m).read() for m in t}
    assert got == {f"s0000-{i}.bin": _yes(i, 150_000) for i in range(1, 201)}
    assert spools(tmp_path) == []


WIDE_CMDS = ["tarcat", "tarcat -f '00001.bin 00399.bin'", "tarsort -r --memory 8MB", "tarproc -p 2 -c true",
             "tar2tsv", "tarpcat -w 2", "tarsplit -n 1 -o part-%d.tar"]


@pytest.mark.parametrize("cmd", WIDE_CMDS)
def test_a_sample_of_many_members_in_flat_memory(tmp_path, sh, cmd):
    """Samples of 400 members of 100 kB (a clip's frames) through a pipe:
    past the sample budget (16 MiB, at most 4x the blob threshold: 1 MiB here)
    the fields go to one spool file, so memory does not grow with the
    sample (every command held all 40 MB before), and the output is what it
    is from a file."""
    env = "TMPDIR=. TARPROC_BLOB_THRESHOLD=256KB "

    def peak(n):
        sh(f"{GEN} 100000 2 --fields {n} > in{n}.tar")
        sh(f"cat in{n}.tar | {env}/usr/bin/time -f %M -o rss {cmd} > out{n}.tsv", stderr_ok=True)
        return int((tmp_path / "rss").read_text().split()[-1])

    small, wide = peak(4), peak(400)
    assert wide - small < 24_000, (small, wide)
    if cmd.startswith("tarsplit"):
        got = (tmp_path / "part-1.tar").read_bytes()
        want = sh(f"{GEN} 100000 2 --fields 400 | tarcat | tarcat -s 1").stdout
    else:
        got = (tmp_path / "out400.tsv").read_bytes()
        want = sh(f"{env.replace('256KB', '0')}{cmd} in400.tar", stderr_ok=True).stdout  # all in memory
    assert got == want
    assert spools(tmp_path) == []


def test_docs_examples_run(tmp_path, monkeypatch):
    """The Python examples about blobs in README.md and docs/blobs.md run as written."""
    import re

    import tarproc

    monkeypatch.chdir(tmp_path)
    sp = tarproc.Spooler(threshold=1, tmpdir=str(tmp_path))
    tarproc.write_samples("videos.tar", [{"__key__": f"clip{i}", "mp4": sp.blob_from_bytes(bytes(3 << 20)),
                                          "json": b"{}"} for i in range(2)])
    ran = 0
    for doc in ("README.md", "docs/blobs.md"):
        for block in re.findall(r"```python\n(.*?)```", open(os.path.join(ROOT, doc)).read(), re.S):
            if "videos.tar" in block:
                exec(compile(block, doc, "exec"), {})
                ran += 1
    assert ran == 2


def run(cmd, cwd, input=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60, **kw)


@pytest.mark.parametrize("cmd, gen", [
    (["tarcat"], "--fields 600"),   # a sample of many members, packed past the sample budget
    (["tarcat"], ""),               # one large member, spooled
    (["tarproc", "-c", "true"], "--fields 600"),
])
def test_full_spool_directory_is_one_line_naming_it(tmp_path, cmd, gen):
    """A spool file that cannot be written (a full disk; here a file-size
    limit) is one line naming it and where spool files go, exit 1, and no
    spool file is left."""
    import sys

    from conftest import ROOT

    args = "10000 3 " + gen if gen else "30000000 1"
    data = subprocess.run([sys.executable, f"{ROOT}/testdata/bigmember.py", *args.split()], capture_output=True,
                          check=True).stdout

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000))

    p = run(cmd + ["--tmpdir", str(tmp_path)], tmp_path, data, preexec_fn=limit,
            env={**os.environ, "TARPROC_BLOB_THRESHOLD": "256KB"})  # a sample budget of 1 MiB
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert len(err.splitlines()) == 1 and "cannot write a spool file: File too large" in err, err
    assert "--tmpdir" in err and str(tmp_path) in err
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tarproc-spool")] == []
