"""kujob --slurm: job arrays submitted to a real single-node Slurm cluster.

The cluster (munged + slurmctld + slurmd from Debian's packages, installed by
``make sysdeps``) is started once per test session in a temporary directory
by ``slurm_cluster.Cluster`` and stopped afterwards.  Every test runs the
installed ``kujob`` as a subprocess; outputs are read back with tarfile."""

import os
import re
import signal
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import samples_of
from slurm_cluster import TOOLS, Cluster, which
from test_kujob import assert_copied, make_inputs
from test_urls import s3  # noqa: F401  (the moto fixture)

FAST = "--poll 0.2"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    missing = [tool for tool in TOOLS if not which(tool)]
    assert not missing, f"{missing} missing: `make test` installs them (make sysdeps)"
    c = Cluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield c
    finally:
        c.stop()
        assert c.leftovers() == []


@pytest.fixture
def slurm_sh(sh, cluster):
    def run(cmd, **kw):
        env = {name: cluster.env[name] for name in ("SLURM_CONF", "KUJOB_TEST_SLURM_CLUSTER", "PATH")}
        env.update(kw.pop("env", {}))
        return sh(cmd, env=env, **kw)

    return run


def squeue(cluster, *args):
    return subprocess.run(["squeue", "-h", *args], env=cluster.env, capture_output=True, text=True).stdout


def submitted_id(stderr):
    m = re.search(r"submitted job array (\d+)", stderr)
    assert m, stderr
    return m.group(1)


def test_array_all_succeed(slurm_sh, cluster, tmp_path):
    ids = ["0000", "0001", "0002", "0003"]
    make_inputs(tmp_path, ids)
    p = slurm_sh(f"kujob --slurm --wait {FAST} -j 2 -v -s '{{0000..0003}}' -- tarcat in-{{}}.tar -o out-{{}}.tar",
                 stderr_ok=True)
    err = p.stderr.decode()
    assert p.stdout == b""
    job = submitted_id(err)
    for i in ids:
        assert_copied(tmp_path, i)
        assert f"kujob: [{i}] ok" in err
    assert "4 shards: 4 ok, 0 failed, 0 skipped (done)" in err
    logs = sorted((tmp_path / "kujob-logs").glob(f"*-{job}_*.log"))
    assert len(logs) == 4
    assert "[0002] ok" in logs[2].read_text()  # each task ran kujob for its own id
    records = sorted(p.name for p in (tmp_path / "kujob-logs").glob(f"*-{job}.exit/*"))
    assert records == ["0", "1", "2", "3"]
    assert squeue(cluster, "-j", job) == ""


def test_missing_input_named_then_rerun_does_only_it(slurm_sh, tmp_path):
    make_inputs(tmp_path, ["0", "1", "3"])  # no in-2.tar
    cmd = f"kujob --slurm --wait {FAST} --done-if out-{{}}.tar -s '{{0..3}}' -- tarcat in-{{}}.tar -o out-{{}}.tar"
    p = slurm_sh(cmd, ok=False)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert err.splitlines()[-1] == "kujob: 1 of 4 shards failed: 2"
    assert re.search(r"kujob: \[2\] failed \(exit status \d\); log: .*_2\.log", err)
    assert "in-2.tar" in err  # the tail of the task's log says why
    assert not (tmp_path / "out-2.tar").exists()
    before = {i: (tmp_path / f"out-{i}.tar").stat().st_mtime_ns for i in "013"}

    make_inputs(tmp_path, ["2"])
    p = slurm_sh(cmd.replace("--wait", "--wait -v"), stderr_ok=True)
    err = p.stderr.decode()
    assert "3 of 4 shards are done" in err
    assert "4 shards: 1 ok, 0 failed, 3 skipped (done)" in err
    job = submitted_id(err)
    assert [x.name.rsplit("_", 1)[1] for x in (tmp_path / "kujob-logs").glob(f"*-{job}_*.log")] == ["2.log"]
    assert_copied(tmp_path, "2")
    assert before == {i: (tmp_path / f"out-{i}.tar").stat().st_mtime_ns for i in "013"}


def test_printed_script_accepted_by_sbatch_test_only(slurm_sh, tmp_path):
    p = slurm_sh("kujob --slurm -j 3 --partition debug --time 0:10:00 --mem 100M --cpus-per-task 1 "
                 "--log-dir logs --sbatch comment=kujob-test --name ocr -e GREETING='hello world' "
                 "-s '{0000..0009}' -- tarproc -c 'run-ocr *.png' scanned-{}.tar -o ocr-{}.tar")
    script = p.stdout.decode()
    head = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert head == ["#SBATCH --job-name=ocr", "#SBATCH --array=0-9%3",
                    f"#SBATCH --output={tmp_path}/logs/ocr-%A_%a.log", f"#SBATCH --chdir={tmp_path}",
                    "#SBATCH --cpus-per-task=1", "#SBATCH --mem=100M", "#SBATCH --time=0:10:00",
                    "#SBATCH --partition=debug", "#SBATCH --comment=kujob-test"]
    assert "export GREETING='hello world'" in script
    assert "kujob_task=$((SLURM_ARRAY_TASK_ID + 0))" in script  # (one array: position = array index)
    assert "--task-index \"$kujob_task\" -s '{0000..0009}' -v -- tarproc -c 'run-ocr *.png'" in script
    (tmp_path / "job.sh").write_text(script)
    t = slurm_sh("sbatch --test-only job.sh", stderr_ok=True)
    assert re.search(r"Job \d+ to start at", t.stderr.decode())
    bad = slurm_sh("kujob --slurm --partition nosuch -s '{0..1}' -- true > bad.sh && sbatch --test-only bad.sh",
                   ok=False)
    assert bad.returncode != 0  # the check is real: sbatch refuses an unknown partition


def test_unsafe_ids_refused_nothing_submitted(slurm_sh, cluster, tmp_path):
    before = squeue(cluster)
    p = slurm_sh("kujob --slurm --wait -s '{a,b;touch pwned,c}' -- 'tarcat in-{}.tar > out-{}.tar'", ok=False)
    assert p.returncode == 2 and p.stdout == b""
    assert "'b;touch pwned' is not safe to paste into a shell command" in p.stderr.decode()
    assert squeue(cluster) == before and not (tmp_path / "kujob-logs").exists()
    # as separate arguments (no shell), the same ids are fine: they travel quoted
    p = slurm_sh("kujob --slurm -s '{a,b;touch pwned,c}' -- tarcat in-{}.tar -o out-{}.tar")
    assert "-s '{a,b;touch pwned,c}'" in p.stdout.decode()


def test_empty_done_set_submits_nothing(slurm_sh, cluster, tmp_path):
    for i in "012":
        (tmp_path / f"out-{i}.tar").write_bytes(b"")
    before = squeue(cluster)
    p = slurm_sh("kujob --slurm --wait --done-if out-{}.tar -s '{0..2}' -- tarcat in-{}.tar -o out-{}.tar",
                 stderr_ok=True)
    assert p.stdout == b""
    assert "all 3 shards are done (--done-if out-{}.tar): nothing to submit" in p.stderr.decode()
    assert "submitted" not in p.stderr.decode()
    assert squeue(cluster) == before and not (tmp_path / "kujob-logs").exists()


def test_retries_inside_the_task(slurm_sh, tmp_path):
    # fails the first time (no marker yet), succeeds the second
    p = slurm_sh(f"kujob --slurm --wait {FAST} --retries 1 --log-dir 'task logs' -s 7 -- "
                 f"sh -c 'if [ -e tried-{{}} ]; then echo ok > done-{{}}; else touch tried-{{}}; exit 5; fi'",
                 stderr_ok=True)
    assert (tmp_path / "done-7").read_text() == "ok\n"
    log = next((tmp_path / "task logs").glob("*.log")).read_text()  # a space in a path: quoted
    assert "retrying (1/1)" in log
    assert p.returncode == 0


def test_submit_prints_job_id_and_ctrl_c_while_waiting_cancels(slurm_sh, cluster, tmp_path):
    p = slurm_sh("kujob --slurm --submit -s '{0..1}' -- sleep 0.{}", stderr_ok=True)
    job = p.stdout.decode().strip()
    assert job.isdigit() and submitted_id(p.stderr.decode()) == job

    proc = subprocess.Popen(["kujob", "--slurm", "--wait", "--poll", "0.2", "-s", "{0..2}", "--", "sleep", "6{}"],
                            cwd=tmp_path, env=cluster.env, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    job = submitted_id(line)
    deadline = time.monotonic() + 30
    while "RUNNING" not in squeue(cluster, "-j", job, "-o", "%T") and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(30) == 130
    assert f"kujob: interrupted: cancelled job array {job} (scancel {job})" in err
    deadline = time.monotonic() + 30
    while squeue(cluster, "-j", job) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert squeue(cluster, "-j", job) == ""


# --------------------------------------------------------------------------- without a cluster

def test_array_spec_and_memory():
    from tarproc.jobs.slurm import array_spec, slurm_memory

    assert array_spec([0, 1, 2, 5, 7, 8], 4) == "0-2,5,7-8%4"
    assert array_spec([3]) == "3"
    assert [slurm_memory(m) for m in ("8G", "8Gi", "8GiB", "512", "500m")] == ["8G", "8G", "8G", "512", "500M"]


def _parse_spec(spec):
    spec, _, throttle = spec.partition("%")
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out, (int(throttle) if throttle else None)


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 3000), min_size=1, max_size=300), st.integers(1, 40), st.none() | st.integers(1, 40),
       st.none() | st.integers(1, 8))
def test_split_indexes_every_position_once_below_the_limit(positions, limit, max_tasks, throttle):
    """Each position in exactly one array, as offset + array index; every
    index below MaxArraySize, at most max_tasks per array; a set that fits
    is one array as it is; no array could have taken the next position;
    each array's script keeps the throttle and says its offset."""
    from tarproc.jobs.slurm import ArrayJob, split_indexes

    parts = split_indexes(positions, limit, max_tasks)
    per = limit if max_tasks is None else max_tasks
    assert [o + i for o, local in parts for i in local] == sorted(positions)
    assert all(0 <= i < limit for _, local in parts for i in local) and all(len(loc) <= per for _, loc in parts)
    if max(positions) < limit and len(positions) <= per:
        assert parts == [(0, sorted(positions))]
    for (o, local), (nxt, _) in zip(parts, parts[1:]):
        assert nxt - o >= limit or len(local) == per  # (the fewest arrays: each took all it could)
    job = ArrayJob(["true"], ["x"], [str(n) for n in range(3001)], sorted(positions), "t", "/l", "/", "kujob", None, 0,
                   throttle, [], [])
    for o, local in parts:
        script = job.script(o, [o + i for i in local])
        spec = next(x for x in script.splitlines() if x.startswith("#SBATCH --array="))[len("#SBATCH --array="):]
        assert _parse_spec(spec) == (local, throttle)
        assert f"kujob_task=$((SLURM_ARRAY_TASK_ID + {o}))" in script
        assert ("-%A_%a.log" in script) == (o == 0)  # (an array with an offset renames its logs)


def test_split_at_the_limit():
    from tarproc.jobs.slurm import split_indexes

    assert split_indexes(range(4), 5) == [(0, [0, 1, 2, 3])]
    assert split_indexes(range(5), 5) == [(0, [0, 1, 2, 3, 4])]
    assert split_indexes(range(6), 5) == [(0, [0, 1, 2, 3, 4]), (5, [0])]
    assert split_indexes([3, 9, 1500, 1501], 1001) == [(3, [0, 6]), (1500, [0, 1])]  # a rerun's sparse set
    assert split_indexes(range(7), 1001, max_tasks=3) == [(0, [0, 1, 2]), (3, [0, 1, 2]), (6, [0])]


@pytest.mark.parametrize("user, ours, want", [
    ([], None, None), ([], "afterok:1", "afterok:1"), (["--dependency=after:7"], None, "after:7"),
    (["--dependency=after:7"], "afterany:2", "after:7,afterany:2"),
    (["-d afterok:3"], "afterany:2", "afterok:3,afterany:2"),
    (["--depend=singleton", "--comment=x"], "afterany:2", "singleton,afterany:2"),
])
def test_dependency_merged_with_the_users(user, ours, want):
    from tarproc.jobs.slurm import merge_dependency

    assert merge_dependency(user, ours) == want


def test_dependency_any_of_not_merged():
    from tarproc.errors import UsageError
    from tarproc.jobs.slurm import merge_dependency

    with pytest.raises(UsageError, match="cannot be combined"):
        merge_dependency(["--dependency=afterok:1?afterok:2"], "afterany:3")


def test_printed_script_past_the_default_max_array_size_warns(sh):
    # a printed script cannot know the cluster: it runs positions as indexes, and says where that stops
    p = sh("kujob --slurm -s '{0000..1001}' -- true", stderr_ok=True)
    assert "#SBATCH --array=0-1001\n" in p.stdout.decode()
    assert "array index 1001" in p.stderr.decode() and "--submit or --wait splits" in p.stderr.decode()
    assert sh("kujob --slurm -s '{0000..1000}' -- true", stderr_ok=True).stderr == b""


@pytest.mark.parametrize("opts, message", [
    ("--sbatch $'x\\necho pwned'", "bad --sbatch"),
    ("--partition 'a b'", "bad --partition"),
    ("--time soon", "bad --time"),
    ("--mem lots", "bad --mem"),
    ("--log-dir 'l%j'", "bad --log-dir"),
    ("--log-dir 'a\"b'", "bad --log-dir"),
    ("--name a/b", "bad --name"),
    ("--k8s", "do not go with --slurm"),
])
def test_bad_slurm_options_exit_2(sh, opts, message):
    p = sh(f"kujob --slurm {opts} -s '{{0..1}}' -- true", ok=False)
    assert p.returncode == 2 and p.stdout == b"" and message in p.stderr.decode()


def test_slurm_options_need_slurm(sh):
    p = sh("kujob --wait -s '{0..1}' -- true", ok=False)
    assert p.returncode == 2 and "go with --slurm" in p.stderr.decode()


def test_program_missing_here_is_a_warning_not_an_error(sh):
    # the nodes may have it (modules, containers): warn, print the script anyway
    p = sh("kujob --slurm -s '{0..1}' -- no-such-program-here in-{}.tar", stderr_ok=True)
    assert "no-such-program-here is not on PATH here" in p.stderr.decode()
    assert p.stdout.decode().startswith("#!/bin/bash\n#SBATCH --job-name=kujob-no-such-program-here-")


def test_failed_key_lists_named_in_the_summary(slurm_sh, tmp_path):
    """`tarproc --failed-keys failed-{}.txt` in the command: after the array,
    kujob names each shard's list of failed keys and how to rerun them."""
    make_inputs(tmp_path, ["0", "1"])
    p = slurm_sh(f"kujob --slurm --wait {FAST} -s '{{0..1}}' -- tarproc -c 'test $(cat sample.cls) != 1' "
                 f"--max-failures 100% --failed-keys failed-{{}}.txt in-{{}}.tar -o out-{{}}.tar", stderr_ok=True)
    err = p.stderr.decode()
    for i in ("0", "1"):
        assert (tmp_path / f"failed-{i}.txt").read_text().split() == [f"s{i}_1"]
        assert f"[{i}] 1 failed key in failed-{i}.txt (rerun them with tarproc --keys failed-{i}.txt)" in err, err


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


def test_slurm_task_keeps_a_literal_dollar_argument(tmp_path):
    """The task line of the sbatch script expanded ANY argument that read
    `$SLURM_ARRAY_TASK_ID`, the command's own included: the same kujob
    command printed the literal text locally and a number on Slurm.  Only
    kujob's own --index is expanded now.  (The script runs under bash with
    the variables sbatch would set.)"""
    p = run("kujob --slurm --log-dir logs -s '{a,b}' -- echo '$SLURM_ARRAY_TASK_ID' {}", tmp_path)
    assert p.returncode == 0, p.stderr
    (tmp_path / "job.sh").write_bytes(p.stdout)
    local = run("kujob -s '{a,b}' -- echo '$SLURM_ARRAY_TASK_ID' {}", tmp_path)
    assert "[b] $SLURM_ARRAY_TASK_ID b" in local.stderr.decode()
    task = run("bash job.sh", tmp_path, env={**os.environ, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_JOB_ID": "9"})
    assert task.returncode == 0, task.stderr
    assert "[b] $SLURM_ARRAY_TASK_ID b" in task.stderr.decode(), task.stderr
    assert (tmp_path / "logs").is_dir()


# --------------------------------------------------------------------------- the Slurm clients as children

def _stand_in(tmp_path, name, body):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / name).write_text("#!/bin/bash\n" + body)
    (bindir / name).chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


def test_sbatch_refusal_is_one_safe_line(sh, tmp_path):
    # sbatch's own message, with a password in a URL and a terminal escape, on many lines
    env = _stand_in(tmp_path, "sbatch", "cat > script.got\n"
                    "for i in $(seq 300); do echo \"noise $i\" >&2; done\n"
                    "printf 'error: http://user:SECRET@host/x \\033]52;c;AAAA\\007 refused\\n' >&2\nexit 1\n")
    p = sh("kujob --slurm --submit -s '{0..1}' -- true", env=env, ok=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1 and "sbatch failed" in err and "refused" in err, err
    assert "SECRET" not in err and "\x1b" not in err and "\x07" not in err
    assert len(err) < 2000  # the tail of sbatch's stderr, bounded
    assert (tmp_path / "script.got").read_text().startswith("#!/bin/bash\n#SBATCH --job-name=")


def test_sbatch_dies_with_kujob(tmp_path):
    # a Slurm client is a Child: its own group and a parent-death signal (an sbatch that
    # hangs is not left running after kujob is SIGKILLed)
    env = dict(os.environ, **_stand_in(tmp_path, "sbatch", "cat > /dev/null\necho $$ > sbatch.pid\nexec sleep 300\n"))
    proc = subprocess.Popen(["kujob", "--slurm", "--submit", "-s", "{0..1}", "--", "true"], cwd=tmp_path, env=env,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (tmp_path / "sbatch.pid").exists() or not (tmp_path / "sbatch.pid").read_text().strip():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    pid = int((tmp_path / "sbatch.pid").read_text())
    assert os.getpgid(pid) == pid  # its own process group
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), "sbatch outlived kujob"


def test_sbatch_stderr_kept_is_tarproc_tail_bytes(tmp_path, monkeypatch):
    # one line of 20003 characters: SubmitError shows 1000 characters of the kept part, and its length
    # (the command line clips a message to 800 characters: the API's error is the one that shows it)
    from tarproc.jobs import slurm
    from tarproc.settings import Settings

    for name, value in _stand_in(tmp_path, "sbatch", "cat > /dev/null\nprintf '%020000dEND' 0 >&2\nexit 1\n").items():
        monkeypatch.setenv(name, value)
    shown = []
    for settings in (None, Settings(), Settings(tail_bytes=64 << 10)):  # the default (8 KiB), more than the line
        job = slurm.plan(["true"], ["{0..1}"], log_dir=str(tmp_path / "logs"), chdir=str(tmp_path), settings=settings)
        with pytest.raises(slurm.SubmitError) as e:
            slurm.submit(job)
        assert "sbatch failed" in str(e.value) and str(e.value).endswith("0END"), str(e.value)[-200:]
        shown.append(str(e.value).split("…[")[1].split(" chars]")[0])
    assert shown == [str(8192 - 980)] * 2 + [str(20003 - 980)]


def test_tarreshard_steps_as_dependent_arrays_with_work_on_s3(slurm_sh, cluster, tmp_path, s3):
    """tarreshard --slurm: each step an array held by afterok on the one
    before, the work data on S3 (moto, the real aws CLI), the output exactly
    tarsort | tarsplit's; the work objects removed after success."""
    import glob

    from test_tarreshard import make_inputs as reshard_inputs

    reshard_inputs(tmp_path, shards=2, per=40)
    (tmp_path / "out").mkdir()
    p = slurm_sh(f"tarreshard --slurm {FAST} -S text -n 15 --buckets 1 -v --work s3://tarproc-test/rw "
                 "-o 'out/%06d.tar' 'in-{0..1}.tar'", env=s3, stderr_ok=True, timeout=600)
    err = p.stderr.decode()
    ids = re.findall(r"(\w+): submitted job array (\d+)", err)
    assert [s for s, _ in ids] == ["map", "plan", "reduce", "cut", "copy"], err
    for (_, before), (step, job) in zip(ids, ids[1:]):  # each held until the one before succeeded
        assert f"{step}: submitted job array {job} (" in err and f"held by afterok:{before}" in err, err
        assert glob.glob(str(tmp_path / "kujob-logs" / f"tarreshard-{step}-{job}_*.log")), (step, job)
    assert "copy: 1 tasks: 1 ok" in err and "80 samples in 6 shards" in err
    slurm_sh("mkdir -p ref && tarsort in-0.tar in-1.tar | tarsplit -n 15 -o 'ref/%06d.tar'")
    out, ref = sorted(glob.glob(str(tmp_path / "out/*"))), sorted(glob.glob(str(tmp_path / "ref/*")))
    assert len(out) == len(ref) == 6 and all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(out, ref))
    listing = slurm_sh("aws s3 ls --recursive s3://tarproc-test/rw/", env=s3, ok=False).stdout
    assert listing == b""


# --------------------------------------------------------------------------- past MaxArraySize: several arrays

@pytest.fixture
def small_arrays(cluster):
    """The cluster with MaxArraySize=5 (array indexes 0..4) for one test,
    then as before (scontrol reconfigure: milliseconds)."""
    old = cluster.reconfigure("MaxArraySize", 5)
    try:
        yield cluster
    finally:
        cluster.reconfigure("MaxArraySize", old)


def submitted_ids(stderr):
    m = re.search(r"submitted job arrays ([\d ]+):", stderr)
    assert m, stderr
    return m.group(1).split()


def batch_script(cluster, job):
    return subprocess.run(["scontrol", "write", "batch_script", job, "-"], env=cluster.env, capture_output=True,
                          text=True).stdout


def test_twelve_shards_over_max_array_size_5(slurm_sh, small_arrays, tmp_path):
    """12 shards, MaxArraySize 5: three arrays (positions 0-4, 5-9, 10-11),
    one after another under -j 2; every output made (read back with
    tarfile), each log named by the shard's position with its array's job
    id; a failing shard reported by its own id; the rerun submits only it
    (one array from offset 7)."""
    ids = [f"{i:02d}" for i in range(12)]
    make_inputs(tmp_path, [i for i in ids if i != "07"])
    cmd = (f"kujob --slurm --wait {FAST} -j 2 -v --done-if out-{{}}.tar -s '{{00..11}}' -- "
           f"tarcat in-{{}}.tar -o out-{{}}.tar")
    p = slurm_sh(cmd, ok=False)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    jobs = submitted_ids(err)
    assert len(jobs) == 3 and "12 tasks in 3 arrays" in err and "one after another (-j 2 in all)" in err, err
    assert err.splitlines()[-1] == "kujob: 1 of 12 shards failed: 07"
    assert re.search(rf"kujob: \[07\] failed \(exit status \d\); log: .*-{jobs[1]}_7\.log", err), err
    for i in ids:
        if i != "07":
            assert_copied(tmp_path, i)
    logs = tmp_path / "kujob-logs"
    for n, i in enumerate(ids):
        job = jobs[n // 5]
        assert f"[{i}] " in (next(logs.glob(f"*-{job}_{n}.log"))).read_text()  # the task ran its own id
        assert (next(logs.glob(f"*-{job}.exit/{n}")).read_text() == "0\n") == (i != "07")
    assert sorted(x.name.rsplit("-", 1)[1] for x in logs.glob("*.log")) == sorted(
        f"{jobs[n // 5]}_{n}.log" for n in range(12))  # none left under its array index
    heads = [[x for x in batch_script(small_arrays, j).splitlines() if x.startswith("#SBATCH --")] for j in jobs]
    assert [[x for x in h if x.startswith(("#SBATCH --array", "#SBATCH --dep"))] for h in heads] == [
        ["#SBATCH --array=0-4%2"], ["#SBATCH --array=0-4%2", f"#SBATCH --dependency=afterany:{jobs[0]}"],
        ["#SBATCH --array=0-1%2", f"#SBATCH --dependency=afterany:{jobs[1]}"]]

    make_inputs(tmp_path, ["07"])
    p = slurm_sh(cmd, stderr_ok=True)
    err = p.stderr.decode()
    job = submitted_id(err)  # one array: position 7 as array index 0 of an array from offset 7
    assert "11 of 12 shards are done" in err and "12 shards: 1 ok, 0 failed, 11 skipped (done)" in err
    assert "#SBATCH --array=0%2" in batch_script(small_arrays, job)
    assert [x.name for x in logs.glob(f"*-{job}*")] and sorted(x.name.split("-")[-1] for x in logs.glob(
        f"*-{job}*")) == [f"{job}.exit", f"{job}_7.log"]
    assert_copied(tmp_path, "07")


def test_refused_second_array_cancels_the_first(slurm_sh, small_arrays, tmp_path):
    """sbatch refuses the second of two arrays: the first, already
    submitted (and running), is cancelled; one line says which array
    failed, why, and what was cancelled; exit 1."""
    real = which("sbatch")
    env = _stand_in(tmp_path, "sbatch", f"n=$(cat calls 2>/dev/null || echo 0); echo $((n + 1)) > calls\n"
                    f"if [ \"$n\" = 1 ]; then cat > /dev/null; echo 'sbatch: error: Batch job submission failed: "
                    f"Job violates accounting/QOS policy' >&2; exit 1; fi\nexec {real} \"$@\"\n")
    env["PATH"] += ":" + small_arrays.env["PATH"]
    p = slurm_sh("kujob --slurm --wait --poll 0.2 -s '{0..6}' -- sleep 60", env=env, ok=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1, err
    m = re.fullmatch(r"kujob: sbatch failed on array 2 of 2 \(positions 5-6, MaxArraySize 5\): sbatch: error: Batch "
                     r"job submission failed: Job violates accounting/QOS policy; cancelled the arrays already "
                     r"submitted \(scancel (\d+)\)\n", err)
    assert m, err
    deadline = time.monotonic() + 30
    while squeue(small_arrays, "-j", m.group(1)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert squeue(small_arrays, "-j", m.group(1)) == ""


def test_tarreshard_refused_step_cancels_the_steps_before(slurm_sh, small_arrays, tmp_path):
    """sbatch refuses plan (its third call: map is two arrays): both map
    arrays are cancelled, one line says so, exit 1."""
    from test_tarreshard import make_inputs as reshard_inputs

    reshard_inputs(tmp_path, shards=6, per=2)
    real = which("sbatch")
    env = _stand_in(tmp_path, "sbatch", f"n=$(cat calls 2>/dev/null || echo 0); echo $((n + 1)) > calls\n"
                    f"if [ \"$n\" = 2 ]; then cat > /dev/null; echo 'sbatch: error: refused' >&2; exit 1; fi\n"
                    f"exec {real} --hold \"$@\"\n")  # (held: the map tasks wait to be cancelled)
    env["PATH"] += ":" + small_arrays.env["PATH"]
    p = slurm_sh("tarreshard --slurm --work work -o 'out-%06d.tar' 'in-{0..5}.tar'", env=env, ok=False)
    err = p.stderr.decode()
    m = re.search(r"tarreshard: plan: sbatch failed: sbatch: error: refused; cancelled the steps before \(scancel "
                  r"(\d+) (\d+)\)\n", err)
    assert p.returncode == 1 and m, err
    deadline = time.monotonic() + 30
    while squeue(small_arrays, f"--jobs={m.group(1)},{m.group(2)}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert squeue(small_arrays, f"--jobs={m.group(1)},{m.group(2)}") == ""


def test_tarreshard_ctrl_c_cancels_every_step(small_arrays, tmp_path):
    """Ctrl-C while tarreshard waits for map cancels map's arrays and the
    steps held behind them (which would otherwise stay pending forever:
    their afterok can no longer be met).  Every array is held (sbatch
    --hold), so nothing runs."""
    from test_tarreshard import make_inputs as reshard_inputs

    reshard_inputs(tmp_path, shards=6, per=2)
    env = dict(small_arrays.env, **_stand_in(tmp_path, "sbatch", f"exec {which('sbatch')} --hold \"$@\"\n"))
    env["PATH"] += ":" + small_arrays.env["PATH"]
    proc = subprocess.Popen(["tarreshard", "--slurm", "--poll", "1", "-v", "--work", "work", "-o", "out-%06d.tar",
                             "in-0.tar", "in-1.tar", "in-2.tar", "in-3.tar", "in-4.tar", "in-5.tar"],
                            cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    jobs = []
    while not any(line.startswith("copy:") for line in jobs):
        line = proc.stderr.readline()
        assert line, jobs
        if "submitted job array" in line:
            jobs.append(line.split(": ", 1)[1])
    every = [j for line in jobs for j in re.search(r"arrays? ([\d ]+) \(", line).group(1).split()]
    assert len(every) == 8  # map, reduce and copy: two arrays each; plan and cut: one
    time.sleep(0.3)
    interrupted_and_cancelled(proc, small_arrays, every)


def test_ctrl_c_cancels_every_array(small_arrays, tmp_path):
    proc = subprocess.Popen(["kujob", "--slurm", "--wait", "--poll", "1", "-s", "{0..6}", "--", "sleep", "6{}"],
                            cwd=tmp_path, env=small_arrays.env, stderr=subprocess.PIPE, text=True)
    jobs = submitted_ids(proc.stderr.readline())
    assert len(jobs) == 2
    deadline = time.monotonic() + 30
    while "RUNNING" not in squeue(small_arrays, "-j", jobs[0], "-o", "%T") and time.monotonic() < deadline:
        time.sleep(0.1)
    interrupted_and_cancelled(proc, small_arrays, jobs)


def interrupted_and_cancelled(proc, cluster, jobs):
    """Ctrl-C to ``proc``: exit 130, one line naming the arrays cancelled,
    and none of them left in the queue."""
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(30) == 130
    assert f"interrupted: cancelled job arrays {' '.join(jobs)} (scancel {' '.join(jobs)})" in err, err
    deadline = time.monotonic() + 30
    while squeue(cluster, f"--jobs={','.join(jobs)}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert squeue(cluster, f"--jobs={','.join(jobs)}") == ""


def test_tarreshard_steps_past_max_array_size(slurm_sh, small_arrays, tmp_path):
    """tarreshard --slurm, 6 inputs, MaxArraySize 5: map, reduce and copy
    run as two arrays each (6 tasks: limit + 1), plan and cut as one; each
    step held by afterok on every array of the one before, and with -j its
    second array by afterany on its first; the output is exactly tarsort |
    tarsplit's."""
    import glob

    from test_tarreshard import make_inputs as reshard_inputs

    reshard_inputs(tmp_path, shards=6, per=10)
    (tmp_path / "out").mkdir()
    p = slurm_sh(f"tarreshard --slurm {FAST} -j 2 -S text -n 7 --buckets 6 -v --work work "
                 "-o 'out/%06d.tar' 'in-{0..5}.tar'", stderr_ok=True, timeout=600)
    err = p.stderr.decode()
    steps = re.findall(r"(\w+): submitted job arrays? ([\d ]+) \(", err)
    assert [(s, len(j.split())) for s, j in steps] == [("map", 2), ("plan", 1), ("reduce", 2), ("cut", 1),
                                                      ("copy", 2)], err
    for (_, before), (step, job) in zip(steps, steps[1:]):
        assert f"{step}: submitted job array{'s' if ' ' in job else ''} {job} (" in err, err
        assert f"held by afterok:{before.replace(' ', ':')}" in err
    plan, (r1, r2) = steps[1][1], steps[2][1].split()
    assert f"#SBATCH --dependency=afterok:{plan},afterany:{r1}" in batch_script(small_arrays, r2)
    assert "60 samples in 9 shards" in err, err
    map_logs = sorted(os.path.basename(x) for x in glob.glob(str(tmp_path / "kujob-logs" / "tarreshard-map-*.log")))
    first, second = steps[0][1].split()
    assert map_logs == sorted([f"tarreshard-map-{first}_{n}.log" for n in range(5)]
                              + [f"tarreshard-map-{second}_5.log"])
    slurm_sh("mkdir -p ref && tarsort in-{0..5}.tar | tarsplit -n 7 -o 'ref/%06d.tar'")
    out, ref = sorted(glob.glob(str(tmp_path / "out/*"))), sorted(glob.glob(str(tmp_path / "ref/*")))
    assert len(out) == len(ref) == 9 and all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(out, ref))
    assert [len(samples_of(open(a, "rb").read())) for a in out] == [7] * 8 + [4]  # (tarfile reads them)


def test_max_array_size_from_scontrol(small_arrays, monkeypatch, tmp_path):
    """The real cluster's MaxArraySize; Slurm's default when scontrol fails;
    SchedulerParameters' max_array_tasks; at most CONFIG_BYTES read (a line
    past them is not seen)."""
    from tarproc.jobs import slurm

    monkeypatch.setenv("SLURM_CONF", small_arrays.conf)
    monkeypatch.setenv("PATH", small_arrays.env["PATH"])
    assert slurm.max_array_size() == (5, 5)
    for body, want in [("exit 1\n", (1001, 1001)),
                       ("echo 'MaxArraySize = 7'; echo 'SchedulerParameters = sched_interval=1,max_array_tasks=3'\n",
                        (7, 3)),
                       ("head -c 3000000 /dev/zero | tr '\\0' x; echo; echo 'MaxArraySize = 7'\n", (1001, 1001))]:
        for name, value in _stand_in(tmp_path, "scontrol", body).items():
            monkeypatch.setenv(name, value)
        assert slurm.max_array_size() == want, body
