"""Outputs exist only when their command succeeded (issue 11), and live
writers in other PID namespaces keep their temporary files (issue 13.7).

Real components: moto's S3 server with the real aws CLI (the ``s3`` fixture
of test_urls.py), a PUT-accepting HTTP server on 127.0.0.1 that can fail
mid-request, a recording stand-in ``gsutil`` on PATH, ``unshare --pid`` for
foreign PID namespaces.  Every output is read back with tarfile."""

import io
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from conftest import require
from helpers import read_tar, tar_bytes
import make_corpus as M
from test_urls import free_port, s3, wait_for  # noqa: F401  (s3: the moto fixture)

MEMBERS = [(f"s{i:03d}.{f}", (str(i) if f == "cls" else f"text {i} " * 40).encode())
           for i in range(12) for f in ("cls", "txt")]
FAIL8 = '[ "$(cat sample.cls)" != 8 ]'  # fails on the 9th sample


@pytest.fixture
def shard(tmp_path):
    (tmp_path / "in.tar").write_bytes(tar_bytes(MEMBERS))
    return tmp_path / "in.tar"


@pytest.fixture
def spool(tmp_path):
    d = tmp_path / "spool"
    d.mkdir()
    return d


def partials(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".tarproc-partial"))


def one_line(p):
    err = p.stderr.decode()
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def s3_keys(sh, s3env, prefix="s3://tarproc-test/"):
    p = sh(f"aws s3 ls --recursive {prefix}", env=s3env, ok=False)
    return sorted(line.split()[-1] for line in p.stdout.decode().splitlines() if line.strip())


def s3_get(sh, s3env, url):
    return sh(f"aws s3 cp {url} -", env=s3env).stdout


# ------------------------------------------------------------ local files


def test_abort_and_failures_commit_nothing(sh, shard, tmp_path):
    p = sh(f"tarproc -e abort -c '{FAIL8}' in.tar -o f.tar", ok=False)
    assert p.returncode == 1 and b"'s008'" in p.stderr
    p = sh(f"tarproc -p 3 -c '{FAIL8}' in.tar -o g.tar", ok=False)  # default: skip, --max-failures 0
    assert p.returncode == 1 and b"more than --max-failures 0" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.tar"]


def test_max_failures_count_and_percent(sh, shard, tmp_path):
    p = sh(f"tarproc -p 3 --max-failures 1 -c '{FAIL8}' in.tar -o h.tar", ok=False)
    assert p.returncode == 0 and b"'s008'" in p.stderr  # reported, skipped, committed
    assert [n for n, _ in read_tar((tmp_path / "h.tar").read_bytes())] == \
        [n for n, _ in MEMBERS if not n.startswith("s008.")]
    fail2 = '[ "$(cat sample.cls)" -lt 10 ]'  # 2 of 12 fail: 16.7 %
    assert sh(f"tarproc --max-failures 20% -c '{fail2}' in.tar -o i.tar", ok=False).returncode == 0
    p = sh(f"tarproc --max-failures 10% -c '{fail2}' in.tar -o j.tar", ok=False)
    assert p.returncode == 1 and b"2 of 12 samples failed" in p.stderr
    p = sh(f"tarproc --max-failures 1 -c '{fail2}' in.tar -o k.tar", ok=False)
    assert p.returncode == 1
    assert sorted(os.listdir(tmp_path)) == ["h.tar", "i.tar", "in.tar"]
    assert len(read_tar((tmp_path / "i.tar").read_bytes())) == 20
    for bad in ("-1", "x", "101%"):
        assert sh(f"tarproc --max-failures {bad} -c true in.tar -o z.tar", ok=False).returncode == 2


def test_command_not_found_stops_at_once_with_one_line(sh, shard, tmp_path):
    (tmp_path / "ran").mkdir()
    p = sh(f"tarproc -p 1 -c 'touch {tmp_path}/ran/$(cat sample.__key__); run-ocr-not-here *.png' "
           "in.tar -o out.tar", ok=False)
    err = one_line(p)
    assert p.returncode == 1 and "command not found" in err and "run-ocr-not-here" in err
    assert os.listdir(tmp_path / "ran") == ["s000"]  # stopped at once, not once per sample
    assert sorted(os.listdir(tmp_path)) == ["in.tar", "ran"]


def test_kujob_rerun_does_exactly_the_failed_shards(sh, tmp_path):
    """Issue 11 case 5: a missing command; then a rerun with --done-if."""
    for i in range(3):
        (tmp_path / f"in-{i:04d}.tar").write_bytes(tar_bytes(MEMBERS[:4]))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    job = ("kujob -j 3 -v -s '{0000..0002}' --done-if out-{}.tar -- "
           "tarproc -c 'run-ocr sample.txt' in-{}.tar -o out-{}.tar")
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    p = sh(job, ok=False, env=env)
    assert p.returncode == 1 and b"3 of 3 shards failed" in p.stderr
    assert not list(tmp_path.glob("out-*")) and not partials(tmp_path)
    (bindir / "run-ocr").write_text('#!/bin/sh\n[ "$(cat sample.cls)" != 1 ] || exit 1\ncp "$1" sample.ocr\n')
    (bindir / "run-ocr").chmod(0o755)
    # sample cls=1 fails: shard-level failure, again nothing committed
    p = sh(job, ok=False, env=env)
    assert p.returncode == 1 and not list(tmp_path.glob("out-*"))
    (tmp_path / "in-0001.tar").write_bytes(tar_bytes(MEMBERS[:2]))  # shard 1 no longer has the bad sample
    p = sh(job, ok=False, env=env)
    assert p.returncode == 1 and b"2 of 3 shards failed: 0000 0002" in p.stderr
    assert [f.name for f in tmp_path.glob("out-*")] == ["out-0001.tar"]
    for i in (0, 2):
        (tmp_path / f"in-{i:04d}.tar").write_bytes(tar_bytes(MEMBERS[:2]))
    p = sh(job, ok=False, env=env)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert "[0001] skipped" in err and "[0000] ok" in err and "[0002] ok" in err
    for i in range(3):
        got = read_tar((tmp_path / f"out-{i:04d}.tar").read_bytes())
        assert [n for n, _ in got] == ["s000.cls", "s000.ocr", "s000.txt"]


def test_tarsplit_commits_each_shard_and_posts_only_committed(sh, tmp_path):
    data = tar_bytes(MEMBERS)
    cut = data[: len(data) // 2 + 100]  # truncated mid-member
    (tmp_path / "cut.tar").write_bytes(cut)
    p = sh("tarsplit -n 2 -o 'part-%03d.tar' -p 'echo {basename} >> posted' cut.tar", ok=False)
    assert p.returncode == 2 and "cut.tar" in one_line(p)
    shards = sorted(f.name for f in tmp_path.glob("part-*"))
    assert shards and not partials(tmp_path)
    assert (tmp_path / "posted").read_text().split() == shards
    seen = []
    for name in shards:
        with tarfile.open(tmp_path / name) as tf:  # every committed shard is whole
            seen += [m.name for m in tf]
    assert seen == [n for n, _ in MEMBERS][: len(seen)] and len(seen) == 4 * len(shards)


def test_sigkill_leaves_only_a_locked_then_stale_partial(tmp_path):
    p = subprocess.Popen(["tarcat", "-o", "out.tar"], cwd=tmp_path, stdin=subprocess.PIPE)
    p.stdin.write(tar_bytes(MEMBERS)[:4096])
    p.stdin.flush()
    deadline = time.monotonic() + 30
    while not partials(tmp_path):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    q = subprocess.run(["tarcat", "-v", "--cleanup", "."], cwd=tmp_path, capture_output=True, timeout=60)
    assert q.returncode == 0 and b"kept" in q.stderr and partials(tmp_path)  # alive: locked
    p.kill()
    p.wait()
    p.stdin.close()
    assert not (tmp_path / "out.tar").exists()
    q = subprocess.run(["tarcat", "-v", "--cleanup", "."], cwd=tmp_path, capture_output=True, timeout=60)
    assert q.returncode == 0 and b"removed" in q.stderr and os.listdir(tmp_path) == []


# ------------------------------------------------------------ PID namespaces (issue 13.7)


def _unshare(argv, cwd, **kw):
    require("unshare")
    return subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", *argv], cwd=cwd, **kw)


def test_cleanup_keeps_a_live_writer_in_another_pid_namespace(tmp_path):
    w = _unshare(["tarcat", "-o", "out.tar"], tmp_path, stdin=subprocess.PIPE)
    try:
        data = tar_bytes(MEMBERS)
        w.stdin.write(data[:4096])
        w.stdin.flush()
        deadline = time.monotonic() + 30
        while not partials(tmp_path):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        name = partials(tmp_path)[0]
        assert name.endswith(".1.tarproc-partial")  # PID 1 in its namespace: alive here too, meaningless
        # a leftover named with a PID that is alive HERE, but unlocked: stale all the same
        fake = tmp_path / name.replace(".1.tarproc-partial", f".{os.getpid()}.tarproc-partial").replace(
            name.split(".")[-3], name.split(".")[-3][:9] + "ffffff")
        fake.write_bytes(b"junk")
        q = subprocess.run(["tarcat", "-v", "--cleanup", "."], cwd=tmp_path, capture_output=True, timeout=60)
        assert q.returncode == 0 and not fake.exists()
        assert partials(tmp_path) == [name]
        # another writer of the same output, here, leaves the live one alone
        subprocess.run(["tarcat", "-o", "out.tar"], cwd=tmp_path, input=tar_bytes(MEMBERS[:2]), check=True,
                       timeout=60)
        assert partials(tmp_path) == [name]
        w.stdin.write(data[4096:])
        w.stdin.close()
        assert w.wait(timeout=60) == 0
    finally:
        w.kill()
        w.wait()
    assert read_tar((tmp_path / "out.tar").read_bytes()) == MEMBERS and not partials(tmp_path)


def test_tarsort_keeps_a_live_spill_dir_of_another_pid_namespace(tmp_path):
    spills = tmp_path / "spills"
    spills.mkdir()
    many = [(f"k{i:04d}.txt", os.urandom(200)) for i in range(300)]
    data = tar_bytes(many[::-1])
    w = _unshare(["tarsort", "--memory", "20k", "--tmpdir", str(spills), "-o", "sorted.tar"], tmp_path,
                 stdin=subprocess.PIPE)
    try:
        w.stdin.write(data[: len(data) // 2])
        w.stdin.flush()
        deadline = time.monotonic() + 30
        while not any(spills.iterdir()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        live = sorted(spills.iterdir())
        # a dead sort's dir (lock file not held) and an unlocked one named with our own PID
        for pid in (os.getpid(), 999999):
            dead = spills / f"tarsort-{pid}-{live[0].name.split('-')[2]}-dead"
            dead.mkdir()
            (dead / ".lock").write_bytes(b"")
            (dead / "run-000001.pickle").write_bytes(b"x")
        subprocess.run(["tarsort", "--memory", "1k", "--tmpdir", str(spills), "-o", "other.tar"], cwd=tmp_path,
                       input=tar_bytes(many[:50][::-1]), check=True, timeout=60)
        assert sorted(spills.iterdir()) == live  # the dead ones removed, the live one kept
        w.stdin.write(data[len(data) // 2:])
        w.stdin.close()
        assert w.wait(timeout=60) == 0
    finally:
        w.kill()
        w.wait()
    assert read_tar((tmp_path / "sorted.tar").read_bytes()) == many
    assert list(spills.iterdir()) == []


# ------------------------------------------------------------ S3 (moto + aws)


def test_s3_truncated_input_uploads_nothing(sh, shard, spool, s3):
    env = {**s3, "TARPROC_SPOOL_DIR": str(spool)}
    data = tar_bytes(MEMBERS)
    (spool.parent / "cut.tar").write_bytes(data[:3000])
    p = sh("tarcat cut.tar -o s3://tarproc-test/out/x.tar", env=env, ok=False)
    assert p.returncode == 2 and "cut.tar" in one_line(p)
    assert s3_keys(sh, s3, "s3://tarproc-test/out/") == [] and os.listdir(spool) == []
    sh("tarcat in.tar -o s3://tarproc-test/out/x.tar", env=env)
    assert read_tar(s3_get(sh, s3, "s3://tarproc-test/out/x.tar")) == MEMBERS
    assert os.listdir(spool) == []


def test_s3_sigterm_while_writing_and_while_uploading(sh, shard, spool, s3, tmp_path):
    env = {**os.environ, **s3, "TARPROC_SPOOL_DIR": str(spool)}
    data = tar_bytes(MEMBERS)
    # 1. mid-stream
    p = subprocess.Popen(["tarcat", "-o", "s3://tarproc-test/term/a.tar"], cwd=tmp_path, env=env,
                         stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(data[:4096])
    p.stdin.flush()
    while not partials(spool):
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 143
    p.stdin.close()
    # 2. while the client uploads (a 24 MB object to moto takes seconds)
    big = tar_bytes([(f"b{i:03d}.bin", os.urandom(1 << 20)) for i in range(24)])
    (tmp_path / "big.tar").write_bytes(big)
    p = subprocess.Popen(["tarcat", "big.tar", "-o", "s3://tarproc-test/term/big.tar"], cwd=tmp_path, env=env,
                         stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True).stdout:
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 143
    for _ in range(2):  # and no orphaned client finishes the upload later
        assert s3_keys(sh, s3, "s3://tarproc-test/term/") == [] and os.listdir(spool) == []
        time.sleep(3)


def test_s3_failing_client_is_one_loud_line(sh, shard, spool, s3):
    env = {**s3, "TARPROC_SPOOL_DIR": str(spool)}
    p = sh("tarcat in.tar -o s3://tarproc-test/x.tar", env={**env, "TARPROC_WRITE_S3": "exit 3"}, ok=False)
    err = one_line(p)
    assert p.returncode == 1 and "s3://tarproc-test/x.tar" in err and "status 3" in err
    p = sh("tarcat in.tar -o s3://no-such-bucket-here/x.tar", env=env, ok=False)
    err = one_line(p)
    assert p.returncode == 1 and "s3://no-such-bucket-here/x.tar" in err and "NoSuchBucket" in err
    # the same for pipe: outputs, and a client that dies while the data still flows (no silent 141)
    p = sh("tarcat in.tar -o 'pipe:echo no room >&2; exit 4'", ok=False)
    assert p.returncode == 1 and "no room" in one_line(p)
    big = "big.tar"
    sh(f"tarcat in.tar in.tar in.tar in.tar in.tar in.tar in.tar in.tar > {big}")
    p = sh(f"TARPROC_REMOTE_COMMIT=move tarcat {big} {big} {big} {big} -o s3://tarproc-test/y.tar",
           env={**env, "TARPROC_WRITE_S3": "head -c 10 > /dev/null; echo gave up >&2; exit 5"}, ok=False)
    assert p.returncode == 1 and "gave up" in one_line(p)
    assert not {"x.tar", "y.tar"} & set(s3_keys(sh, s3))
    assert os.listdir(spool) == []


def test_s3_kujob_rerun_with_done_if(sh, spool, s3, tmp_path):
    env = {**s3, "TARPROC_SPOOL_DIR": str(spool)}
    for i in range(3):
        (tmp_path / f"in-{i}.tar").write_bytes(tar_bytes(MEMBERS[:4] if i != 1 else MEMBERS[:18]))
    job = ("kujob -j 2 -v -s '{0..2}' --done-if 's3://tarproc-test/kj/out-{}.tar' -- "
           f"tarproc -c '{FAIL8}' in-{{}}.tar -o 's3://tarproc-test/kj/out-{{}}.tar'")
    p = sh(job, env=env, ok=False)
    assert p.returncode == 1 and b"1 of 3 shards failed: 1" in p.stderr
    assert s3_keys(sh, s3, "s3://tarproc-test/kj/") == ["kj/out-0.tar", "kj/out-2.tar"]
    (tmp_path / "in-1.tar").write_bytes(tar_bytes(MEMBERS[:4]))
    p = sh(job, env=env, ok=False)
    err = p.stderr.decode()
    assert p.returncode == 0 and "[0] skipped" in err and "[2] skipped" in err and "[1] ok" in err, err
    for i in range(3):
        assert read_tar(s3_get(sh, s3, f"s3://tarproc-test/kj/out-{i}.tar")) == MEMBERS[:4]


def test_s3_move_mode_and_cleanup_of_a_prefix(sh, shard, s3):
    env = {**s3, "TARPROC_REMOTE_COMMIT": "move"}
    sh("tarcat in.tar -o s3://tarproc-test/mv/a.tar", env=env)
    assert s3_keys(sh, s3, "s3://tarproc-test/mv/") == ["mv/a.tar"]  # the temporary object was moved
    assert read_tar(s3_get(sh, s3, "s3://tarproc-test/mv/a.tar")) == MEMBERS
    left = "s3://tarproc-test/mv/.b.tar.0123abcd-00ff00.7.tarproc-partial"
    sh(f"aws s3 cp in.tar {left} --quiet", env=s3)
    p = sh("tarcat -v --cleanup s3://tarproc-test/mv/", env=s3, stderr_ok=True)
    assert left in p.stderr.decode()
    assert s3_keys(sh, s3, "s3://tarproc-test/mv/") == ["mv/a.tar"]


# ------------------------------------------------------------ HTTP PUT

PUT_SERVER = r'''
import http.server, os, sys
store, fail_after = sys.argv[1], int(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_PUT(self):
        body = bytearray()
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    self.rfile.readline(); break
                body += self.rfile.read(n); self.rfile.readline()
                if fail_after and len(body) > fail_after:
                    self.wfile.write(b"HTTP/1.1 507 Insufficient Storage\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                    self.close_connection = True; return
        else:
            body += self.rfile.read(int(self.headers["Content-Length"]))
        with open(os.path.join(store, os.path.basename(self.path)), "wb") as f:
            f.write(body)
        self.send_response(201); self.send_header("Content-Length", "0"); self.end_headers()
    def do_HEAD(self):
        there = os.path.isfile(os.path.join(store, os.path.basename(self.path)))
        self.send_response(200 if there else 404); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[3])), H).serve_forever()
'''


@pytest.fixture
def put_server(tmp_path):
    """Start with put_server(fail_after): returns (base URL, store dir)."""
    require("curl")
    procs = []

    def start(fail_after=0):
        store = tmp_path / f"store{len(procs)}"
        store.mkdir()
        port = free_port()
        procs.append(subprocess.Popen([sys.executable, "-c", PUT_SERVER, str(store), str(fail_after), str(port)]))
        wait_for(f"http://127.0.0.1:{port}/")
        return f"http://127.0.0.1:{port}", store

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_http_put_commits_whole_and_fails_loudly(sh, shard, spool, put_server):
    env = {"TARPROC_SPOOL_DIR": str(spool)}
    url, store = put_server()
    sh(f"tarcat in.tar -o {url}/a.tar", env=env)
    assert read_tar((store / "a.tar").read_bytes()) == MEMBERS
    url, store = put_server(fail_after=2000)
    p = sh(f"tarcat in.tar -o {url}/b.tar", env=env, ok=False)
    err = one_line(p)
    assert p.returncode == 1 and f"{url}/b.tar" in err and "curl" in err and "507" in err, err
    assert os.listdir(store) == [] and os.listdir(spool) == []
    (spool.parent / "cut.tar").write_bytes(tar_bytes(MEMBERS)[:3000])
    url, store = put_server()
    p = sh(f"tarcat cut.tar -o {url}/c.tar", env=env, ok=False)
    assert p.returncode == 2 and os.listdir(store) == []
    # kujob --done-if on http(s): HEAD decides
    (store / "a.tar").write_bytes(b"done")
    p = sh(f"kujob -v -s '{{a,b}}' --done-if '{url}/{{}}.tar' -- tarcat in.tar -o '{url}/{{}}.tar'", env=env,
           stderr_ok=True)
    assert "[a] skipped" in p.stderr.decode() and "[b] ok" in p.stderr.decode()
    assert (store / "a.tar").read_bytes() == b"done" and read_tar((store / "b.tar").read_bytes()) == MEMBERS


# ------------------------------------------------------------ gs (a recording stand-in gsutil)

GSUTIL = r'''#!/bin/sh
# records every call; keeps objects as files under $GS_STORE (gs://b/k -> $GS_STORE/b/k)
echo "$*" >> "$GS_LOG"
[ "$1" = -q ] && shift
path() { echo "$GS_STORE/${1#gs://}"; }
case "$1" in
  cp) [ "$2" = - ] || exit 9; mkdir -p "$(dirname "$(path "$3")")"; cat > "$(path "$3")" ;;
  mv) mv "$(path "$2")" "$(path "$3")" ;;
  rm) rm "$(path "$2")" ;;
  stat) [ -f "$(path "$2")" ] ;;
  cat) cat "$(path "$2")" ;;
  ls) d=$(path "$2"); for f in "$d"/* "$d"/.[!.]*; do [ -f "$f" ] && echo "$2${f##*/}"; done; true ;;
  *) echo "stand-in gsutil: $1 not supported" >&2; exit 9 ;;
esac
'''


@pytest.fixture
def gsutil(tmp_path):
    bindir = tmp_path / "gsbin"
    bindir.mkdir()
    (bindir / "gsutil").write_text(GSUTIL)
    (bindir / "gsutil").chmod(0o755)
    store = tmp_path / "gs"
    store.mkdir()
    log = tmp_path / "gs.log"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "GS_STORE": str(store), "GS_LOG": str(log),
           "TARPROC_SPOOL_DIR": str(tmp_path / "spool")}
    (tmp_path / "spool").mkdir()
    return env, store, log


def test_gs_spool_move_and_kujob_done_if(sh, shard, tmp_path, gsutil):
    env, store, log = gsutil
    # spooled (default): one upload, after the input is complete
    sh("tarcat in.tar -o gs://b/d/a.tar", env=env)
    assert log.read_text().splitlines() == ["-q cp - gs://b/d/a.tar"]
    assert read_tar((store / "b/d/a.tar").read_bytes()) == MEMBERS
    (tmp_path / "cut.tar").write_bytes(tar_bytes(MEMBERS)[:3000])
    log.write_text("")
    assert sh("tarcat cut.tar -o gs://b/d/c.tar", env=env, ok=False).returncode == 2
    assert log.read_text() == ""  # nothing uploaded at all
    # move mode: a temporary object beside it, then gsutil mv
    sh("tarcat in.tar -o gs://b/d/m.tar", env={**env, "TARPROC_REMOTE_COMMIT": "move"})
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and calls[0].startswith("-q cp - gs://b/d/.m.tar.") and calls[0].endswith(".tarproc-partial")
    assert calls[1] == f"-q mv {calls[0].split()[-1]} gs://b/d/m.tar"
    assert sorted(os.listdir(store / "b/d")) == ["a.tar", "m.tar"]
    # an interrupted move-mode run leaves a temporary object that --cleanup removes
    (store / "b/d/.x.tar.0123abcd-00ff00.7.tarproc-partial").write_bytes(b"junk")
    log.write_text("")
    sh("tarcat --cleanup gs://b/d/", env=env)
    assert log.read_text().splitlines() == ["ls gs://b/d/", "-q rm gs://b/d/.x.tar.0123abcd-00ff00.7.tarproc-partial"]
    # kujob --done-if gs://: stat decides
    log.write_text("")
    p = sh("kujob -v -s '{a,x}' --done-if 'gs://b/d/{}.tar' -- tarcat in.tar -o 'gs://b/d/{}.tar'", env=env,
           stderr_ok=True)
    assert "[a] skipped" in p.stderr.decode() and "[x] ok" in p.stderr.decode()
    assert sorted(log.read_text().splitlines()) == ["-q cp - gs://b/d/x.tar", "-q stat gs://b/d/a.tar",
                                                    "-q stat gs://b/d/x.tar", "-q stat gs://b/d/x.tar"]
    assert read_tar((store / "b/d/x.tar").read_bytes()) == MEMBERS


# ------------------------------------------------------------ the library's commit gate


def test_library_commits_on_close_and_the_gate_holds_commits(tmp_path):
    from tarproc.sinks.output import CommitGate, open_sink
    from tarproc.sinks.write import write_samples

    samples = [{"__key__": "a", "txt": b"x"}, {"__key__": "b", "txt": b"y"}]
    write_samples(str(tmp_path / "lib.tar"), iter(samples))  # no gate: committed at close
    assert [n for n, _ in read_tar((tmp_path / "lib.tar").read_bytes())] == ["a.txt", "b.txt"]
    with CommitGate() as gate:
        write_samples(str(tmp_path / "held.tar"), iter(samples))
        with open_sink(str(tmp_path / "now.tar"), defer=False) as sink:
            sink.write(tar_bytes([("c.txt", b"z")]))
        assert not (tmp_path / "held.tar").exists() and len(partials(tmp_path)) == 1
        assert (tmp_path / "now.tar").exists()
        gate.commit()
    assert (tmp_path / "held.tar").exists() and not partials(tmp_path)
    with CommitGate():
        write_samples(str(tmp_path / "dropped.tar"), iter(samples))
    assert not (tmp_path / "dropped.tar").exists() and not partials(tmp_path)


NESTED_MEMBERS = [(f"d{i % 3}/s{i:04d}.{f}", (f"{f} {i} " * (20 + i % 7)).encode())
           for i in range(240) for f in ("cls", "txt")]


def run_argv(cmd, cwd, input=None, env=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60,
                          env={**os.environ, **(env or {})}, **kw)


def wait_until(pred, timeout=20):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def partial_names(d):
    return [n for n in os.listdir(d) if "partial" in n]


def _aws(s3env, *args, input=None):
    return subprocess.run(["aws", *args], input=input, capture_output=True, timeout=120,
                          env={**os.environ, **s3env})


OLD = b"old object"


def _objects(s3env, prefix):
    """``{key: size}`` under a prefix (one aws call: the CLI starts slowly)."""
    out = _aws(s3env, "s3", "ls", "--recursive", f"s3://tarproc-test/{prefix}").stdout.decode()
    return {line.split()[-1]: int(line.split()[-2]) for line in out.splitlines() if line.strip()}


def _put_old(s3env, tmp_path, prefix, names):
    d = tmp_path / "old"
    d.mkdir()
    for n in names:
        (d / n).write_bytes(OLD)
    assert _aws(s3env, "s3", "cp", "--recursive", "--quiet", str(d), f"s3://tarproc-test/{prefix}").returncode == 0
    for n in names:
        (d / n).unlink()
    d.rmdir()
    assert _objects(s3env, prefix) == {prefix + n: len(OLD) for n in names}


def test_sigkill_never_lets_the_client_publish_partial_data(s3, tmp_path):
    """``sh -c 'aws s3 cp - URL'`` forked aws, and the parent-death signal
    reached only the shell: after a SIGKILL, aws read end-of-input and
    published the partial tar under the final key (``-o pipe:aws ...``) or
    as a temporary object (``TARPROC_REMOTE_COMMIT=move``)."""
    require("aws")
    data = tar_bytes(NESTED_MEMBERS)
    runs = {"k/pipe.tar": (["-o", "pipe:aws s3 cp - s3://tarproc-test/k/pipe.tar"], {}),
            "k/move.tar": (["-o", "s3://tarproc-test/k/move.tar"], {"TARPROC_REMOTE_COMMIT": "move"})}
    procs = []
    _put_old(s3, tmp_path, "k/", ["pipe.tar", "move.tar"])
    for key, (argv, env) in runs.items():
        p = subprocess.Popen(["tarcat", *argv], cwd=tmp_path, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             env={**os.environ, **s3, **env})
        p.stdin.write(data[: len(data) // 2])
        p.stdin.flush()
        procs.append(p)
    time.sleep(1.2)  # the clients have read what there is
    for p in procs:
        p.kill()
        assert p.wait(timeout=30) == -signal.SIGKILL
        p.stdin.close()
    for _ in range(2):  # and no orphaned client publishes anything later
        assert _objects(s3, "k/") == {"k/move.tar": len(OLD), "k/pipe.tar": len(OLD)}
        time.sleep(1.5)


@pytest.mark.parametrize("mode", ["spool", "move"])
def test_failed_runs_leave_an_existing_object_as_it_was(mode, s3, tmp_path):
    require("aws")
    env = {**s3, "TARPROC_REMOTE_COMMIT": mode, "TARPROC_SPOOL_DIR": str(tmp_path)}
    data = tar_bytes(NESTED_MEMBERS[:40])
    (tmp_path / "cut.tar").write_bytes(data[: len(data) // 2 + 100])
    (tmp_path / "in.tar").write_bytes(data)
    pre = f"f{mode}/"
    names = ["abort.tar", "client.tar", "cut.tar", "term.tar"]
    _put_old(s3, tmp_path, pre, names)
    # bad input midway
    r = run_argv(["tarcat", "cut.tar", "-o", f"s3://tarproc-test/{pre}cut.tar"], tmp_path, env=env)
    assert r.returncode == 2 and r.stderr.decode().count("\n") == 1 and b"cut.tar" in r.stderr
    # a sample command that fails: no output written
    r = run_argv(["tarproc", "-c", "exit 3", "in.tar", "-o", f"s3://tarproc-test/{pre}abort.tar"], tmp_path, env=env)
    assert r.returncode == 1 and b"no output written" in r.stderr
    # SIGTERM while the input still flows
    p = subprocess.Popen(["tarcat", "-o", f"s3://tarproc-test/{pre}term.tar"], cwd=tmp_path, stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={**os.environ, **env})
    p.stdin.write(data[:5000])
    p.stdin.flush()
    time.sleep(0.8)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 143 and b"Traceback" not in p.stderr.read()
    p.stdin.close()
    if mode == "move":  # the client killed while it streams: exit 1, one line naming the URL
        p = subprocess.Popen(["tarcat", "-o", f"s3://tarproc-test/{pre}client.tar"], cwd=tmp_path,
                             stdin=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env})
        p.stdin.write(data[:5000])
        p.stdin.flush()
        wait_until(lambda: run_argv(["pgrep", "-P", str(p.pid)], tmp_path).stdout.strip())
        for child in run_argv(["pgrep", "-P", str(p.pid)], tmp_path).stdout.split():
            os.kill(int(child), signal.SIGKILL)
        try:
            p.stdin.write(data[5000:])
            p.stdin.close()
        except BrokenPipeError:
            pass
        err = p.stderr.read().decode()
        assert p.wait(timeout=30) == 1 and err.count("\n") == 1 and f"{pre}client.tar" in err, err
        assert "Traceback" not in err
    time.sleep(0.5)
    assert _objects(s3, pre) == {pre + n: len(OLD) for n in names}  # no temporary object either
    assert not partial_names(tmp_path)


plain_shard = M.plain_shard


def members(path):
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf if m.isfile()]


run = M.bash


one_error_line = M.one_line


WRITERS = {
    "tarcat": "tarcat in.tar -o {out}",
    "tarsort": "tarsort in.tar -o {out}",
    "tarproc": "tarproc -c true in.tar -o {out}",
    "tarcreate": "printf '0.txt text:hi\\n' | tarcreate - -o {out}",
    "lines2tar": "seq 3 | lines2tar -o {out}",
}


@pytest.mark.parametrize("command", list(WRITERS))
def test_output_to_a_directory_is_refused_before_any_work(command, tmp_path):
    (tmp_path / "in.tar").write_bytes(plain_shard(5))
    (tmp_path / "d").mkdir()
    for out in ("d", "d/", "missing/"):
        p = run(WRITERS[command].format(out=out), tmp_path)
        assert p.returncode == 1, p.stderr
        assert "names a directory" in one_error_line(p)
    assert os.listdir(tmp_path / "d") == [] and sorted(os.listdir(tmp_path)) == ["d", "in.tar"]
    if command == "tarcat":  # refused at once, not after reading an input that has not ended yet
        t = time.monotonic()
        p = run("exec tarcat -o d < <(exec 2>&-; sleep 20)", tmp_path, timeout=25)
        assert p.returncode == 1 and time.monotonic() - t < 15


@pytest.mark.parametrize("command", ["tarcat", "tarcreate"])
def test_output_on_a_symlink_replaces_the_link_never_its_target(command, tmp_path):
    """A symlinked dataset (git-annex, DVC): writing an output under a
    link's name commits a new file there; the shared target is untouched."""
    (tmp_path / "in.tar").write_bytes(plain_shard(5))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "object").write_bytes(b"shared, read by others")
    os.symlink(tmp_path / "cache" / "object", tmp_path / "link.tar")
    p = run(WRITERS[command].format(out="link.tar"), tmp_path)
    assert p.returncode == 0, p.stderr
    assert not os.path.islink(tmp_path / "link.tar")
    assert len(members(tmp_path / "link.tar")) == (10 if command == "tarcat" else 1)
    assert (tmp_path / "cache" / "object").read_bytes() == b"shared, read by others"
    assert os.listdir(tmp_path / "cache") == ["object"]
