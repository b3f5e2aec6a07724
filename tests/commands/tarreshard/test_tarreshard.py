"""tarreshard on the local pool: exact shuffles and sorts (byte-identical to
tarsort | tarsplit), full shards, splits, determinism, resuming, failures and
kills leaving nothing under final names.  Outputs are read back with tarfile."""

import collections
import glob
import io
import os
import random
import signal
import subprocess
import tarfile
import time

import pytest

from helpers import tar_bytes


def make_inputs(tmp, shards=4, per=120, seed=0, dup=False):
    """Input shards of samples with a random key, a .txt of random size and
    a .cls; returns their names."""
    r = random.Random(seed)
    names = []
    for s in range(shards):
        members = []
        for j in range(per):
            key = f"k{r.randrange(10**6):06d}_{s}_{j}"
            members.append((f"{key}.cls", str(r.randrange(50)).encode()))
            members.append((f"{key}.txt", r.randbytes(r.randrange(0, 1500))))
        (tmp / f"in-{s}.tar").write_bytes(tar_bytes(members))
        names.append(f"in-{s}.tar")
    return names


def samples_in(path):
    """The samples of a tar file: [(key, ((field, bytes), ...))] in order."""
    out = []
    with tarfile.open(path) as t:
        for m in t:
            key, _, field = m.name.partition(".")
            data = t.extractfile(m).read()
            if out and out[-1][0] == key:
                out[-1][1].append((field, data))
            else:
                out.append((key, [(field, data)]))
    return [(k, tuple(sorted(f))) for k, f in out]


def shards(tmp, pattern):
    return sorted(glob.glob(str(tmp / pattern)))


def check_full(paths, n):
    """Shards numbered contiguously from 000000, all of n samples but the last."""
    assert [os.path.basename(p) for p in paths] == [f"{i:06d}.tar" for i in range(len(paths))]
    counts = [len(samples_in(p)) for p in paths]
    assert all(c == n for c in counts[:-1]) and 0 < counts[-1] <= n, counts


def test_sort_is_byte_identical_to_tarsort_then_tarsplit(sh, tmp_path):
    make_inputs(tmp_path, shards=3)
    for opts in ["-n 7", "-s 20000 -n 40"]:
        sh("rm -rf out ref")
        p = sh(f"mkdir -p tmp out && TMPDIR=$PWD/tmp tarreshard -S text {opts} --buckets 2 -j 2 -o 'out/%06d.tar' "
               f"'in-{{0..2}}.tar'", stderr_ok=True)
        assert os.listdir(tmp_path / "tmp") == []  # the work directory it made is gone
        assert b"360 samples in" in p.stderr
        sh(f"mkdir -p ref && tarsort in-{{0..2}}.tar | tarsplit {opts} -o 'ref/%06d.tar'")
        out, ref = shards(tmp_path, "out/*"), shards(tmp_path, "ref/*")
        assert [os.path.basename(p) for p in out] == [os.path.basename(p) for p in ref] and len(ref) > 2
        for a, b in zip(out, ref):
            assert open(a, "rb").read() == open(b, "rb").read(), (opts, a)



def test_sort_by_field_reverse_matches_tarsort(sh, tmp_path):
    make_inputs(tmp_path, seed=3)
    sh("mkdir -p out && tarreshard --sortkey cls -S int -r -n 64 --buckets 5 -o 'out/%06d.tar' 'in-{0..3}.tar'", stderr_ok=True)
    sh("mkdir -p ref && tarsort -s cls -S int -r in-{0..3}.tar | tarsplit -n 64 -o 'ref/%06d.tar'")
    out, ref = shards(tmp_path, "out/*"), shards(tmp_path, "ref/*")
    assert len(out) == len(ref) == 8
    assert all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(out, ref))


def test_shuffle_is_exact_full_and_deterministic(sh, tmp_path):
    names = make_inputs(tmp_path, shards=3, per=97)
    want = collections.Counter(s for n in names for s in samples_in(tmp_path / n))
    sh("mkdir -p a && tarreshard --seed 7 -n 40 -j 1 --buckets 3 -o 'a/%06d.tar' 'in-{0..2}.tar'", stderr_ok=True)
    sh("mkdir -p b && tarreshard --seed 7 -n 40 -j 3 --buckets 3 -o 'b/%06d.tar' 'in-{0..2}.tar'", stderr_ok=True)
    a, b = shards(tmp_path, "a/*"), shards(tmp_path, "b/*")
    check_full(a, 40)
    assert collections.Counter(s for p in a for s in samples_in(p)) == want
    assert [open(p, "rb").read() for p in a] == [open(p, "rb").read() for p in b]
    order = [s[0] for p in a for s in samples_in(p)]
    assert order != sorted(order) and order != [s[0] for n in names for s in samples_in(tmp_path / n)]
    # another seed, another order; the same multiset
    sh("mkdir -p c && tarreshard --seed 8 -n 40 -j 2 --buckets 3 -o 'c/%06d.tar' 'in-{0..2}.tar'", stderr_ok=True)
    c = shards(tmp_path, "c/*")
    assert [s for p in c for s in samples_in(p)] != [s for p in a for s in samples_in(p)]
    assert collections.Counter(s for p in c for s in samples_in(p)) == want


def test_shuffle_by_size_and_stdin(sh, tmp_path):
    make_inputs(tmp_path, shards=1, per=200)
    p = sh("mkdir -p out && tarreshard -s 30000 -o 'out/%06d.tar' < in-0.tar", stderr_ok=True)
    assert b"200 samples in" in p.stderr
    out = shards(tmp_path, "out/*")
    sizes = [os.path.getsize(p) for p in out]
    assert all(s <= 30000 for s in sizes) and len(out) > 3
    # full: the first sample of each next shard would not have fitted
    for this, nxt in zip(out, out[1:]):
        with tarfile.open(nxt) as t:
            first = samples_in(nxt)[0]
            extra = sum(512 + -(-len(d) // 512) * 512 for _, d in first[1])
        assert os.path.getsize(this) + extra > 30000
    assert collections.Counter(s for p in out for s in samples_in(p)) == collections.Counter(samples_in(tmp_path / "in-0.tar"))


def test_fractions_each_split_a_full_shard_set(sh, tmp_path):
    names = make_inputs(tmp_path, shards=3, per=150)
    sh("mkdir -p out && tarreshard --fractions 'train=0.7,val=0.3' --seed 2 -n 30 -o 'out/{split}/%06d.tar' 'in-{0..2}.tar'",
       stderr_ok=True)
    sh("mkdir -p ref && tarcat in-{0..2}.tar | tarsplit --fractions 'train=0.7,val=0.3' --seed 2 -n 1000000 -o 'ref/{split}-%06d.tar'", stderr_ok=True)
    for split in ("train", "val"):
        out = shards(tmp_path, f"out/{split}/*")
        check_full(out, 30)
        got = collections.Counter(s for p in out for s in samples_in(p))
        assert got == collections.Counter(samples_in(tmp_path / f"ref/{split}-000000.tar"))


def test_work_kept_resume_and_failed_task_named(sh, tmp_path):
    make_inputs(tmp_path, shards=3, per=60)
    good = (tmp_path / "in-2.tar").read_bytes()
    (tmp_path / "in-2.tar").write_bytes(good[:5000])  # cut: its map task fails
    # a sort samples its keys first: the damage is one line, before any task
    p = sh("mkdir -p out && tarreshard -S text -n 25 --buckets 2 -j 2 --work w -o 'out/%06d.tar' 'in-{0..2}.tar'", ok=False)
    assert p.returncode == 2 and p.stderr.count(b"\n") == 1 and b"in-2.tar: offset 3584" in p.stderr
    sh("rm -rf w")
    cmd = "tarreshard --seed 5 -n 25 --buckets 2 -j 2 --work w -o 'out/%06d.tar' 'in-{0..2}.tar'"
    p = sh(cmd, ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and "map: 3 tasks: 2 ok, 0 done before, 1 failed (000002)" in err  # (an input it cannot read)
    assert "in-2.tar" in err and os.listdir(tmp_path / "out") == []
    assert sorted(os.listdir(tmp_path / "w/map")) == [f"00000{i}.{e}" for i in (0, 1) for e in ("json", "tar")]
    (tmp_path / "in-2.tar").write_bytes(good)
    p = sh(cmd + " --keep-work", stderr_ok=True)
    assert "map: 3 tasks: 1 ok, 2 done before, 0 failed" in p.stderr.decode()
    sh("mkdir -p ref && tarreshard --seed 5 -n 25 --buckets 2 -j 2 -o 'ref/%06d.tar' 'in-{0..2}.tar'", stderr_ok=True)
    out, ref = shards(tmp_path, "out/*"), shards(tmp_path, "ref/*")
    assert len(out) == len(ref) == 8 and all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(out, ref))
    # everything done: a rerun does nothing, then removes the work; other options on a work are refused
    p = sh(cmd, stderr_ok=True)
    assert "copy: 2 tasks: 0 ok," in p.stderr.decode() and "reduce: 2 tasks: 0 ok, 2 done before" in p.stderr.decode()
    assert not os.path.exists(tmp_path / "w")
    sh(cmd + " --keep-work", stderr_ok=True)
    p = sh(cmd.replace("-n 25", "-n 26"), ok=False)
    assert p.returncode == 2 and "holds the work of another run (max_count differ)" in p.stderr.decode()


def test_failing_reduce_publishes_none_of_its_shards(sh, tmp_path):
    # one key in two inputs with a field in common: sorted side by side, they cannot be written (as tarsort)
    (tmp_path / "a.tar").write_bytes(tar_bytes([(f"k{i:03d}.txt", b"a") for i in range(0, 100, 2)]))
    (tmp_path / "b.tar").write_bytes(tar_bytes([(f"k{i:03d}.txt", b"b") for i in range(1, 100, 2)]
                                               + [("k090.txt", b"again")]))
    p = sh("mkdir -p out && tarreshard -S text -n 10 --buckets 1 --work w -o 'out/%06d.tar' a.tar b.tar", ok=False)
    assert p.returncode == 1 and "reduce: 1 tasks: 0 ok, 0 done before, 1 failed (000000)" in p.stderr.decode()
    assert "'txt' written twice" in p.stderr.decode()
    assert os.listdir(tmp_path / "out") == []
    assert sh("tarsort a.tar b.tar > /dev/null", ok=False).returncode == 2


def test_killed_task_leaves_nothing_final_and_rerun_finishes(sh, tmp_path):
    make_inputs(tmp_path, shards=2, per=50)
    src = "'pipe:cat in-1.tar; test -e go || sleep 60'"  # a map task that hangs after its input, until go
    cmd = f"tarreshard --seed 4 -n 20 -j 2 --work w -o 'out/%06d.tar' in-0.tar {src}"
    (tmp_path / "out").mkdir()
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=tmp_path, start_new_session=True, stderr=subprocess.DEVNULL)

    def listing():
        return sorted(os.listdir(tmp_path / "w/map")) if os.path.isdir(tmp_path / "w/map") else []

    deadline = time.monotonic() + 30
    while not ("000000.json" in listing() and any("partial" in n for n in listing())):
        assert time.monotonic() < deadline, listing()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert [n for n in listing() if "partial" not in n] == ["000000.json", "000000.tar"]
    assert os.listdir(tmp_path / "out") == []
    (tmp_path / "go").write_bytes(b"")
    p = sh(cmd, stderr_ok=True)
    assert "map: 2 tasks: 1 ok, 1 done before" in p.stderr.decode()
    assert not os.path.exists(tmp_path / "w")  # the killed task's temporary file too
    sh("mkdir -p ref && tarreshard --seed 4 -n 20 -o 'ref/%06d.tar' in-0.tar in-1.tar", stderr_ok=True)
    out, ref = shards(tmp_path, "out/*"), shards(tmp_path, "ref/*")
    assert len(out) == 5 and all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(out, ref))


@pytest.mark.parametrize("damage, message", [
    ("rm in-1.tar", "in-1.tar: cannot open: No such file or directory"),
    ("echo not a tar at all > in-1.tar", "in-1.tar: offset 0: not a tar archive (looks like text)"),
    ("rm in-1.tar && mkdir in-1.tar", "in-1.tar: "),
])
def test_a_local_input_it_cannot_read_is_one_line_before_any_work(sh, tmp_path, damage, message):
    make_inputs(tmp_path, shards=2, per=5)
    sh(damage)
    p = sh("mkdir -p out && TMPDIR=$PWD tarreshard --seed 1 -n 4 -o 'out/%06d.tar' in-0.tar in-1.tar", ok=False)
    assert p.returncode == 2 and p.stderr.count(b"\n") == 1 and message in p.stderr.decode(), p.stderr
    assert os.listdir(tmp_path / "out") == [] and not list(tmp_path.glob("tarreshard-*"))  # no work folder


def test_a_compressed_input_is_left_to_its_map_task(sh, tmp_path):
    """The check before any work opens a compressed input without decoding
    it: a good one runs; a gzip of text fails in its map task, exit 2."""
    make_inputs(tmp_path, shards=2, per=5)
    sh("gzip in-1.tar && mkdir -p out && tarreshard --seed 1 -n 4 -o 'out/%06d.tar' in-0.tar in-1.tar.gz",
       stderr_ok=True)
    assert sum(1 for p in shards(tmp_path, "out/*") for _ in samples_in(p)) == 10
    sh("echo not a tar | gzip > bad.tar.gz && mkdir -p out2")
    p = sh("tarreshard --seed 1 -n 4 -o 'out2/%06d.tar' in-0.tar bad.tar.gz", ok=False)
    assert p.returncode == 2 and b"bad.tar.gz" in p.stderr and os.listdir(tmp_path / "out2") == []


@pytest.mark.parametrize("args, message", [
    ("-n 10 in-0.tar", "give -o PREFIX"),
    ("--slurm -o out in-0.tar", "need --work"),
    ("--k8s --work w -o out in-0.tar", "needs --image"),
    ("-S shuffle -r -o out in-0.tar", "-r goes with a sort"),
    ("--fractions 'a=0.5,b=0.5' -o 'out-%06d.tar' in-0.tar", "{split}"),
    ("-n 0 -o out in-0.tar", "needs -s"),
    ("--task map --work w --task-id x", "--task takes"),
])
def test_usage_errors(sh, tmp_path, args, message):
    make_inputs(tmp_path, shards=1, per=3)
    p = sh(f"tarreshard {args}", ok=False)
    assert p.returncode == 2 and message in p.stderr.decode() and p.stderr.count(b"\n") == 1, p.stderr


@pytest.mark.parametrize("mode", ["-S text", "--seed 3"])
def test_k8s_jobs_valid_and_executed_index_by_index(sh, tmp_path, mode):
    """--k8s prints one Indexed Job per step (checked against the Kubernetes
    models); each is run index by index as its pods would, in order: the
    output is the local pool's, byte for byte (a sort: tarsort | tarsplit's)."""
    import json

    from helpers import kubernetes_expand
    from test_kujob import validate_job

    make_inputs(tmp_path, shards=2, per=40)
    (tmp_path / "out").mkdir()
    p = sh(f"tarreshard --k8s --image img:1 -j 3 --memory 64MiB {mode} -n 15 --buckets 2 --work {tmp_path}/w "
           f"-o '{tmp_path}/out/%06d.tar' {tmp_path}/in-0.tar {tmp_path}/in-1.tar")
    jobs = json.loads(p.stdout)
    assert [j["metadata"]["name"] for j in jobs] == [f"tarreshard-{s}" for s in ("map", "plan", "reduce", "cut", "copy")]
    assert [j["spec"]["completions"] for j in jobs] == [2, 1, 2, 1, 2]
    for job in jobs:
        validate_job(job)
        c = job["spec"]["template"]["spec"]["containers"][0]
        assert c["resources"]["limits"]["memory"] == "576Mi" and job["spec"]["parallelism"] <= 3
        for index in range(job["spec"]["completions"]):
            env = {k: v for k, v in os.environ.items() if k != "JOB_COMPLETION_INDEX"}
            env["JOB_COMPLETION_INDEX"] = str(index)
            argv = [kubernetes_expand(a, env) for a in c["command"] + c["args"]]
            r = subprocess.run(argv, cwd="/", env=env, capture_output=True, timeout=120)
            assert r.returncode == 0, r.stderr
        assert os.listdir(tmp_path / "out") == [] or job is not jobs[0]
    sh(f"mkdir -p ref && tarreshard {mode} -n 15 --buckets 2 -j 2 -o 'ref/%06d.tar' in-0.tar in-1.tar", stderr_ok=True)
    out, ref = shards(tmp_path, "out/*"), shards(tmp_path, "ref/*")
    assert len(out) == len(ref) == 6 and all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(out, ref))
    if mode == "-S text":
        sh("rm -r ref && mkdir ref && tarsort in-0.tar in-1.tar | tarsplit -n 15 -o 'ref/%06d.tar'")
        ref = shards(tmp_path, "ref/*")
        assert all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(out, ref))


def test_outputs_on_inputs_refused_before_any_work(sh, tmp_path):
    make_inputs(tmp_path, shards=2, per=30)
    before = {n: (tmp_path / n).read_bytes() for n in ("in-0.tar", "in-1.tar")}
    p = sh("TMPDIR=$PWD tarreshard -n 10 -o 'in-%d.tar' in-0.tar in-1.tar", ok=False)
    assert p.returncode == 2 and "shard 0 would be in-0.tar, which is an input" in p.stderr.decode()
    assert sorted(os.listdir(tmp_path)) == ["in-0.tar", "in-1.tar"]  # no shard, no work directory
    assert {n: (tmp_path / n).read_bytes() for n in before} == before


#: An http server that takes PUT, answers HEAD and ranged GETs, by path (--work http://...).
PUT_RANGE_SERVER = r'''
import http.server, os, re, sys
store = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def _path(self):
        return os.path.join(store, self.path.lstrip("/").replace("..", "_"))
    def do_PUT(self):
        body = bytearray()
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    self.rfile.readline(); break
                body += self.rfile.read(n); self.rfile.readline()
        else:
            body += self.rfile.read(int(self.headers["Content-Length"]))
        os.makedirs(os.path.dirname(self._path()), exist_ok=True)
        with open(self._path(), "wb") as f:
            f.write(body)
        self.send_response(201); self.send_header("Content-Length", "0"); self.end_headers()
    def do_HEAD(self):
        self.send_response(200 if os.path.isfile(self._path()) else 404)
        self.send_header("Content-Length", "0"); self.end_headers()
    def do_GET(self):
        if not os.path.isfile(self._path()):
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        data = open(self._path(), "rb").read()
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if m:
            a, b = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
            self.send_response(206); self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
            data = data[a:b + 1]
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
'''


def test_work_on_an_http_server_that_takes_put(sh, tmp_path):
    import sys

    from test_urls import free_port, wait_for

    make_inputs(tmp_path, shards=2, per=60)
    (tmp_path / "store").mkdir()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", PUT_RANGE_SERVER, str(tmp_path / "store"), str(port)])
    try:
        wait_for(f"http://127.0.0.1:{port}/")
        (tmp_path / "out").mkdir()
        cmd = (f"tarreshard -S text -s 20000 -n 40 --buckets 2 -j 2 --work http://127.0.0.1:{port}/w "
               "-o 'out/%06d.tar' 'in-{0..1}.tar'")
        p = sh(cmd, stderr_ok=True)
        assert "no command removes a http:// object" in p.stderr.decode()
        assert (tmp_path / "store/w/map/000001.tar").exists()  # (it stays: http has no REMOVE)
        sh("mkdir -p ref && tarsort in-0.tar in-1.tar | tarsplit -s 20000 -n 40 -o 'ref/%06d.tar'")
        out, ref = shards(tmp_path, "out/*"), shards(tmp_path, "ref/*")
        assert len(out) == len(ref) > 3 and all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(out, ref))
        # a rerun finds every task done (an existence check each: http cannot list)
        p = sh(cmd, stderr_ok=True)
        assert "map: 2 tasks: 0 ok, 2 done before" in p.stderr.decode()
    finally:
        server.kill()
        server.wait()
