"""kujob: one command per shard, locally and as a Kubernetes Indexed Job.

Local runs use the installed ``kujob`` and ``tarcat`` in real processes and
read the outputs with tarfile.  The Kubernetes manifest is checked against
the field names and types of the ``kubernetes`` client's models (generated
from the Kubernetes OpenAPI schema) and then executed the way Kubernetes
would: the container's command + args once per completion index, with
``JOB_COMPLETION_INDEX`` and the container's env set."""

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from helpers import kill_left, kubernetes_expand, one_line, processes_with, samples_of, tar_bytes, unique_sleep, wait_for
from helpers import text_shard as shard, signalled as _signalled

VENV_BIN = os.path.dirname(sys.executable)


def make_inputs(tmp_path, ids):
    """in-<id>.tar with three samples each, different per shard."""
    for i in ids:
        members = []
        for k in range(3):
            members += [(f"s{i}_{k}.txt", f"text {i} {k}\n".encode()), (f"s{i}_{k}.cls", str(k).encode())]
        (tmp_path / f"in-{i}.tar").write_bytes(tar_bytes(members))


def assert_copied(tmp_path, i, out="out-{}.tar"):
    src = samples_of((tmp_path / f"in-{i}.tar").read_bytes())
    got = samples_of((tmp_path / out.replace("{}", i)).read_bytes())
    assert got == src and len(got) == 3


def lines(p):
    return p.stderr.decode().splitlines()


# --------------------------------------------------------------------------- local runs

def test_local_run_j2_produces_every_shard(sh, tmp_path):
    ids = ["0000", "0001", "0002", "0003", "0004"]
    make_inputs(tmp_path, ids)
    p = sh("kujob -s '{0000..0004}' -j 2 -- tarcat in-{}.tar -o out-{}.tar")
    for i in ids:
        assert_copied(tmp_path, i)
    assert not list(tmp_path.glob("*.tmp*")) and not list(tmp_path.glob(".*"))
    assert p.stdout == b""


def test_every_placeholder_is_filled_and_id_in_env(sh, tmp_path):
    sh("""kujob -s '{a,b}-{1,2}' -j 2 -- sh -c 'printf "%s\\n" "$@" "$KUJOB_ID" "$KUJOB_INDEX" > "args-{}.txt"' """
       """sh {} {}{} x-{}-y-{} plain""")
    for n, i in enumerate(["a-1", "a-2", "b-1", "b-2"]):
        got = (tmp_path / f"args-{i}.txt").read_text().splitlines()
        assert got == [i, i + i, f"x-{i}-y-{i}", "plain", i, str(n)]


def test_output_lines_prefixed_whole_lines_never_mixed(sh, tmp_path):
    # two shards at once, each writing 300 lines to stdout and stderr
    # (the last one without a newline)
    p = sh("""kujob -s '{0..3}' -j 2 -- sh -c 'i=0; while [ $i -lt 300 ]; do echo "line {} $i stdout"; """
           """echo "line {} $i stderr" >&2; i=$((i+1)); done; printf "tail {}"' """, stderr_ok=True)
    seen = {}
    for line in lines(p):
        m = re.fullmatch(r"\[(\d)\] (?:line (\d) (\d+) std(?:out|err)|tail (\d))", line)
        assert m, f"mixed or unprefixed line: {line!r}"
        assert m.group(1) == (m.group(2) or m.group(4))
        seen[m.group(1)] = seen.get(m.group(1), 0) + 1
    assert seen == {str(i): 601 for i in range(4)}


def test_failing_shard_exit_1_lists_failed_ids(sh, tmp_path):
    ids = [str(i) for i in range(6)]
    make_inputs(tmp_path, ids)
    p = sh("kujob -s '{0..5}' -j 2 -- sh -c 'case {} in 2|4) echo broken {} >&2; exit 3;; esac; "
           "tarcat in-{}.tar -o out-{}.tar'", ok=False)
    assert p.returncode == 1
    err = lines(p)
    assert err[-1] == "kujob: 2 of 6 shards failed: 2 4"
    assert "[2] broken 2" in err and "kujob: [4] failed (exit status 3)" in err
    for i in ["0", "1", "3", "5"]:
        assert_copied(tmp_path, i)
    assert not (tmp_path / "out-2.tar").exists() and not (tmp_path / "out-4.tar").exists()


def test_retries_rerun_a_failing_shard(sh, tmp_path):
    make_inputs(tmp_path, ["0", "1", "2"])
    # fails the first time (leaves a marker), works the second time
    cmd = "sh -c 'if [ -e marker-{} ]; then tarcat in-{}.tar -o out-{}.tar; else touch marker-{}; exit 5; fi'"
    p = sh(f"kujob -s '{{0..2}}' -j 2 --retries 1 -- {cmd}", stderr_ok=True)
    for i in "012":
        assert_copied(tmp_path, i)
    assert "kujob: [1] failed (exit status 5), retrying (1/1)" in lines(p)
    # without retries the same first attempt fails
    for i in "012":
        (tmp_path / f"marker-{i}").unlink()
        (tmp_path / f"out-{i}.tar").unlink()
    p = sh(f"kujob -s '{{0..2}}' -j 2 -- {cmd}", ok=False)
    assert p.returncode == 1 and lines(p)[-1] == "kujob: 3 of 3 shards failed: 0 1 2"


def test_done_if_rerun_skips_completed_shards(sh, tmp_path):
    ids = [f"{i:02d}" for i in range(5)]
    make_inputs(tmp_path, ids)
    cmd = ("sh -c 'echo run >> runs-{}.log; if [ {} = 03 ] && [ ! -e fixed ]; then exit 1; fi; "
           "tarcat in-{}.tar -o out-{}.tar'")
    p = sh(f"kujob -s '{{00..04}}' -j 2 --done-if out-{{}}.tar -- {cmd}", ok=False)
    assert p.returncode == 1 and lines(p)[-1] == "kujob: 1 of 5 shards failed: 03"
    (tmp_path / "fixed").write_text("")
    p = sh(f"kujob -v -s '{{00..04}}' -j 2 --done-if out-{{}}.tar -- {cmd}", stderr_ok=True)
    for i in ids:
        assert_copied(tmp_path, i)
        runs = (tmp_path / f"runs-{i}.log").read_text().count("run")
        assert runs == (2 if i == "03" else 1), (i, runs)
    err = lines(p)
    assert "kujob: [00] skipped, out-00.tar exists" in err
    assert err[-1] == "kujob: 5 shards: 1 ok, 0 failed, 4 skipped (done), 0 retried"
    # a third run has nothing to do
    sh(f"kujob -s '{{00..04}}' --done-if out-{{}}.tar -- {cmd}")
    assert (tmp_path / "runs-03.log").read_text().count("run") == 2


def test_done_if_missing_output_after_exit_0_is_a_failure(sh, tmp_path):
    p = sh("kujob -s '{1..2}' --done-if out-{}.tar -- touch other-{}", ok=False)
    assert p.returncode == 1
    assert "kujob: [1] failed (exited 0 but out-1.tar does not exist)" in lines(p)


def test_single_string_runs_with_sh_and_unsafe_ids_refused(sh, tmp_path):
    make_inputs(tmp_path, ["a", "b"])
    sh("kujob -s '{a,b}' -- 'tarcat in-{}.tar | gzip -n > out-{}.tar.gz && echo \"done {}\" > log-{}.txt'")
    for i in "ab":
        assert_copied(tmp_path, i, "out-{}.tar.gz")
        assert (tmp_path / f"log-{i}.txt").read_text() == f"done {i}\n"
    # an id with a quote and a space cannot be pasted into shell text: refused before anything runs
    p = sh("""kujob -s "{x,it's here}" -- 'touch "made-{}"'""", ok=False)
    assert p.returncode == 2 and len(lines(p)) == 1 and "not safe" in p.stderr.decode()
    assert not list(tmp_path.glob("made-*"))
    # without a shell the same id is passed verbatim
    sh("""kujob -s "{x,it's here}" -- touch "made-{}" """)
    assert sorted(f.name for f in tmp_path.glob("made-*")) == ["made-it's here", "made-x"]


def test_index_runs_one_shard(sh, tmp_path):
    make_inputs(tmp_path, ["00", "01", "02"])
    sh("kujob --task-index 1 -s '{00..02}' -- tarcat in-{}.tar -o out-{}.tar")
    assert_copied(tmp_path, "01")
    assert not (tmp_path / "out-00.tar").exists() and not (tmp_path / "out-02.tar").exists()
    sh("kujob --index-from-env -s '{00..02}' -- tarcat in-{}.tar -o out-{}.tar", env={"JOB_COMPLETION_INDEX": "2"})
    assert_copied(tmp_path, "02")
    for cmd, env, msg in [("--task-index 3", None, "index 3 out of range"),
                          ("--index-from-env", None, "JOB_COMPLETION_INDEX is not set"),
                          ("--index-from-env", {"JOB_COMPLETION_INDEX": "x"}, "bad index 'x'")]:
        e = dict(os.environ)
        e.pop("JOB_COMPLETION_INDEX", None)
        e.update(env or {})
        p = subprocess.run(["kujob", *cmd.split(), "-s", "{00..02}", "--", "true", "{}"], cwd=tmp_path,
                           capture_output=True, env=e, timeout=60)
        assert p.returncode == 2 and msg in p.stderr.decode() and len(lines(p)) == 1, p.stderr


def test_dry_run_prints_commands_and_skips_done(sh, tmp_path):
    (tmp_path / "out-1.tar").write_bytes(b"")
    p = sh("kujob -n -s '{0..2}' --done-if out-{}.tar -- tarcat 'in {}.tar' -o out-{}.tar")
    assert p.stdout.decode().splitlines() == ["tarcat 'in 0.tar' -o out-0.tar", "tarcat 'in 2.tar' -o out-2.tar"]
    assert not (tmp_path / "out-0.tar").exists()


def test_usage_errors_exit_2_one_line(sh):
    for cmd, msg in [("kujob -s '{0..2}'", "no command"),
                     ("kujob -s '{0..2}' -- no-such-program-xyz {}", "command not found: no-such-program-xyz"),
                     ("kujob -s '{0..2' -- true {}", "bad shard pattern '{0..2'"),
                     ("kujob -s '{a,a}' -- true {}", "appears twice"),
                     ("kujob -s 1 --apply -- true {}", "--apply goes with --k8s"),
                     ("kujob -s 1 --k8s -- true {}", "needs --image"),
                     ("kujob -s 1 --k8s --image i --memory lots -- true {}", "bad --memory"),
                     ("kujob -s '{a,b c}' --k8s --image i -- 'echo {} > x'", "not safe"),
                     ("kujob -s 1 --k8s --image i --name=Bad_Name -- true {}", "DNS-1123")]:
        p = sh(cmd, ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2, (cmd, err)
        assert msg in err and len(err.splitlines()) == 1 and "Traceback" not in err, (cmd, err)


def test_help_shows_examples(sh):
    out = sh("kujob --help").stdout.decode()
    assert "examples:" in out and "--k8s" in out and "--done-if" in out


# --------------------------------------------------------------------------- Kubernetes

def check_against_model(value, type_name, path="Job"):
    """Every field of ``value`` must exist in the kubernetes client's model
    ``type_name`` (the OpenAPI schema of the API) with the right type."""
    import kubernetes.client as K

    if type_name == "str":
        assert isinstance(value, str), f"{path}: want a string, got {value!r}"
    elif type_name == "int":
        assert isinstance(value, int) and not isinstance(value, bool), f"{path}: want an int, got {value!r}"
    elif type_name == "bool":
        assert isinstance(value, bool), f"{path}: want a bool, got {value!r}"
    elif type_name == "object":
        pass
    elif type_name.lower().startswith("list["):
        assert isinstance(value, list), f"{path}: want a list"
        for n, item in enumerate(value):
            check_against_model(item, type_name[5:-1], f"{path}[{n}]")
    elif type_name.lower().startswith(("dict(", "dict[")):  # dict(str, X) or Dict[str, X]
        assert isinstance(value, dict), f"{path}: want a map"
        inner = type_name[5:-1].split(",", 1)[1].strip()
        for k, v in value.items():
            assert isinstance(k, str)
            check_against_model(v, inner, f"{path}.{k}")
    else:
        cls = getattr(K, type_name)
        assert isinstance(value, dict), f"{path}: want an object ({type_name})"
        by_json = {j: attr for attr, j in cls.attribute_map.items()}
        for key, v in value.items():
            assert key in by_json, f"{path}: {type_name} has no field {key!r}"
            check_against_model(v, cls.openapi_types[by_json[key]], f"{path}.{key}")


def validate_job(manifest):
    import kubernetes.client as K

    check_against_model(manifest, "V1Job")
    # and the client's own deserialization (required fields, enum-free types)
    job = K.ApiClient()._ApiClient__deserialize(manifest, "V1Job")
    assert isinstance(job, K.V1Job)
    return job


def manifest(sh, args):
    p = sh(f"kujob --k8s {args}")
    assert p.stdout.endswith(b"\n")
    return json.loads(p.stdout)


def test_manifest_is_a_valid_indexed_job(sh):
    m = manifest(sh, "--image ghcr.io/me/ocr:1 --cpu 16 --memory 8Gi --parallelism 50 --retries 3 "
                     "--name ocr-g1000 --namespace batch -e GOOGLE_CLOUD_PROJECT=g1000 --ttl 3600 "
                     "-s '{0000..0999}' -- tarproc -p 16 -c 'run-ocr *.png' "
                     "gs://g1000/scanned-{}.tar -o gs://g1000/ocr-{}.tar")
    job = validate_job(m)
    assert m["apiVersion"] == "batch/v1" and m["kind"] == "Job"
    assert m["metadata"]["name"] == "ocr-g1000" and m["metadata"]["namespace"] == "batch"
    s = job.spec
    assert (s.completions, s.parallelism, s.completion_mode, s.backoff_limit_per_index) == (1000, 50, "Indexed", 3)
    assert s.max_failed_indexes is None and s.ttl_seconds_after_finished == 3600
    pod = s.template.spec
    assert pod.restart_policy == "Never" and len(pod.containers) == 1
    c = pod.containers[0]
    assert c.image == "ghcr.io/me/ocr:1"
    assert c.resources.requests == {"cpu": "16", "memory": "8Gi"} == c.resources.limits
    assert [(e.name, e.value) for e in c.env] == [("GOOGLE_CLOUD_PROJECT", "g1000")]
    # the pattern and the command travel inside the Job, to kujob in the pod
    assert c.command == ["kujob"]
    assert c.args[:3] == ["--index-from-env", "-s", "{0000..0999}"]
    assert c.args[c.args.index("--") + 1:] == ["tarproc", "-p", "16", "-c", "run-ocr *.png",
                                               "gs://g1000/scanned-{}.tar", "-o", "gs://g1000/ocr-{}.tar"]


def test_manifest_defaults_name_and_max_failed(sh):
    args = "--image img -s '{0..9}' --max-failed 2 -- tarcat in-{}.tar -o out-{}.tar"
    m = manifest(sh, args)
    validate_job(m)
    name = m["metadata"]["name"]
    assert re.fullmatch(r"kujob-tarcat-[0-9a-f]{8}", name) and len(name) <= 63
    assert manifest(sh, args)["metadata"]["name"] == name  # deterministic
    assert manifest(sh, args.replace("{0..9}", "{0..8}"))["metadata"]["name"] != name
    s = m["spec"]
    assert (s["completions"], s["parallelism"], s["maxFailedIndexes"], s["backoffLimitPerIndex"]) == (10, 10, 2, 0)
    c = s["template"]["spec"]["containers"][0]
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
    # the checker itself catches a misspelt field and a wrong type
    import copy

    for path, key, value in [(("spec",), "completionsMode", "Indexed"), (("spec",), "completions", "10"),
                             (("spec", "template", "spec"), "restartPolicy", ["Never"])]:
        bad = copy.deepcopy(m)
        node = bad
        for part in path:
            node = node[part]
        node[key] = value
        with pytest.raises(AssertionError):
            check_against_model(bad, "V1Job")
    # a long program name still gives a DNS-1123 label
    m = manifest(sh, "--image img -s 1 -- ./My_Very_Long_Program_Name_That_Goes_On_And_On.py {}")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", m["metadata"]["name"]) and len(m["metadata"]["name"]) <= 63


def test_manifest_executed_like_kubernetes(sh, tmp_path):
    """Each index runs the container's command + args with JOB_COMPLETION_INDEX
    and the container env set, as a pod would: every shard's output appears."""
    ids = ["0000", "0001", "0002", "0003"]
    make_inputs(tmp_path, ids)
    m = manifest(sh, "--image img --done-if out-{}.tar -e GREETING=hello -s '{0000..0003}' -- "
                     "sh -c 'tarcat in-{}.tar -o out-{}.tar && echo \"$GREETING {}\" > hello-{}.txt'")
    validate_job(m)
    spec = m["spec"]
    c = spec["template"]["spec"]["containers"][0]
    assert spec["completions"] == len(ids)
    for index in range(spec["completions"]):
        env = {k: v for k, v in os.environ.items() if k != "JOB_COMPLETION_INDEX"}
        env.update({e["name"]: kubernetes_expand(e["value"], env) for e in c.get("env", [])})
        env["JOB_COMPLETION_INDEX"] = str(index)
        argv = [kubernetes_expand(a, env) for a in c["command"] + c["args"]]  # as the kubelet does
        p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert f"kujob: [{ids[index]}] ok" in p.stderr.decode()
        # only this pod's shard is done so far
        done = sorted(f.name for f in tmp_path.glob("out-*.tar"))
        assert done == [f"out-{i}.tar" for i in ids[:index + 1]]
    for i in ids:
        assert_copied(tmp_path, i)
        assert (tmp_path / f"hello-{i}.txt").read_text() == f"hello {i}\n"
    # a pod that is restarted after its shard was done skips it (--done-if travels too)
    env = dict(os.environ, JOB_COMPLETION_INDEX="1", GREETING="again")
    p = subprocess.run([kubernetes_expand(a, env) for a in c["command"] + c["args"]], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120)
    assert p.returncode == 0 and "skipped" in p.stderr.decode()
    assert (tmp_path / "hello-0001.txt").read_text() == "hello 0001\n"
    # a failing shard makes its pod fail; bad input (tarcat's exit 2) makes it exit 2, which the
    # Job's podFailurePolicy does not retry (a retry cannot change it)
    (tmp_path / "in-0002.tar").write_bytes(b"not a tar archive" * 40)
    (tmp_path / "out-0002.tar").unlink()
    env["JOB_COMPLETION_INDEX"] = "2"
    p = subprocess.run([kubernetes_expand(a, env) for a in c["command"] + c["args"]], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120)
    assert p.returncode == 2 and "1 of 1 shards failed: 0002" in p.stderr.decode()


def test_apply_without_kubectl_exit_2(tmp_path):
    # PATH with the venv (kujob and its python) and nothing else: no kubectl
    env = dict(os.environ, PATH=VENV_BIN)
    env.pop("KUJOB_KUBECTL", None)
    args = ["--k8s", "--image", "img", "-s", "{0..2}", "--", "tarcat", "in-{}.tar", "-o", "out-{}.tar"]
    p = subprocess.run([os.path.join(VENV_BIN, "kujob"), "--apply", *args], cwd=tmp_path, env=env,
                       capture_output=True, timeout=60)
    assert p.returncode == 2 and p.stdout == b""
    err = p.stderr.decode()
    assert len(err.splitlines()) == 1 and "kubectl" in err and "not on PATH" in err
    # what --apply would pipe to kubectl is exactly the manifest --k8s prints
    from tarproc import jobs

    printed = subprocess.run([os.path.join(VENV_BIN, "kujob"), *args], env=env, capture_output=True,
                             timeout=60).stdout.decode()
    built = jobs.manifest_json(jobs.job_manifest(["tarcat", "in-{}.tar", "-o", "out-{}.tar"], ["{0..2}"], "img"))
    assert printed == built
    validate_job(json.loads(printed))


# --------------------------------------------------------------------------- library

def test_library_fill_and_expand():
    from tarproc import jobs
    from tarproc.errors import UsageError

    assert jobs.expand_ids(["{08..11}", "x{a,b}"]) == ["08", "09", "10", "11", "xa", "xb"]
    assert jobs.fill(["a{}", "{}-{}", "-x"], "07") == ["a07", "07-07", "-x"]
    assert not jobs.uses_shell(["tarcat"]) and not jobs.uses_shell(["run-{}.sh"])
    assert jobs.uses_shell(["tarcat in-{}.tar > out-{}.tar"])
    assert jobs.fill(["cat 'in-{}.tar' \"x{}\""], "3") == ["/bin/sh", "-c", "cat 'in-3.tar' \"x3\""]
    for bad in ["a'b", "a b", "$(reboot)", "a\"b", "`x`", "a\\b"]:
        with pytest.raises(UsageError):
            jobs.fill(["echo {}"], bad)
        assert jobs.fill(["echo", "{}"], bad) == ["echo", bad]
    assert jobs.quantity("4GiB", "memory") == str(4 << 30) and jobs.quantity("500m", "cpu") == "500m"
    with pytest.raises(UsageError):
        jobs.check_name("x" * 64)


def test_done_if_url_checked_over_http(sh, tmp_path):
    """--done-if with an http:// URL asks the server (curl -I) whether the
    output exists."""
    import functools
    import http.server
    import threading

    from conftest import require

    require("curl")
    served = tmp_path / "served"
    served.mkdir()
    (served / "out-1.tar").write_bytes(b"x")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/out-{{}}.tar"
        sh(f"kujob -s '{{0..2}}' -j 2 --done-if {url} -- sh -c 'touch served/out-{{}}.tar; echo ran > ran-{{}}'")
    finally:
        server.shutdown()
    assert sorted(f.name for f in tmp_path.glob("ran-*")) == ["ran-0", "ran-2"]
    p = sh("kujob -s 1 --done-if 'pipe:cat' -- true {}", ok=False)
    assert p.returncode == 2 and "--done-if" in p.stderr.decode()


def test_progress_line_when_asked(sh, tmp_path):
    p = sh("kujob --progress -s '{0..3}' -j 2 -- sh -c 'echo hi {}; sleep 0.4'", stderr_ok=True)
    err = p.stderr.decode()
    assert re.search(r"\rkujob: \d/4 done, \d running", err)
    # output lines are still whole and prefixed once the progress line is cleared
    out = [line.split("\r\x1b[K")[-1] for line in err.split("\n") if "hi" in line]
    assert sorted(out) == [f"[{i}] hi {i}" for i in range(4)]
    assert "\r" not in sh("kujob -s '{0..1}' -- true {}").stderr.decode()  # not a terminal: no progress


def test_sigterm_stops_the_running_shards(tmp_path):
    import signal
    import time

    p = subprocess.Popen(["kujob", "-s", "{0..3}", "-j", "2", "--", "sh", "-c", "echo $$ > pid-{}; exec sleep 60"],
                         cwd=tmp_path, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("pid-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 143
    pids = [int(f.read_text()) for f in tmp_path.glob("pid-*")]
    assert len(pids) == 2  # no new shard started after SIGTERM
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive = open(f"/proc/{pid}/stat").read().split()[2] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        assert not alive, f"shard process {pid} still running"


def names(path):
    with tarfile.open(path) as tf:
        return [m.name for m in tf if m.isfile()]


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


def test_kujob_sighup_ends_the_running_shards_and_a_rerun_resumes(tmp_path):
    """The terminal (or the ssh session) goes away at 3 a.m.: kujob died of
    SIGHUP and left its shards running (they are in their own sessions, no
    hangup reaches them).  Now SIGHUP is handled like SIGTERM: the shards
    are terminated, nothing is left under a final or a temporary name, exit
    129; a rerun with --done-if does the rest."""
    for i in range(3):
        (tmp_path / f"in-{i}.tar").write_bytes(shard(3, f"k{i}"))
    marker = unique_sleep()
    argv = ["kujob", "-s", "{0..2}", "-j", "3", "--", "tarcat", f"pipe:cat in-{{}}.tar; {marker}", "-o",
            "out-{}.tar"]
    code, err = _signalled(argv, tmp_path, marker, signal.SIGHUP,
                           lambda: len(processes_with(marker)) >= 3)
    assert code == 129, err
    assert wait_for(lambda: not processes_with(marker), 10), "shard commands left running"
    assert sorted(os.listdir(tmp_path)) == ["in-0.tar", "in-1.tar", "in-2.tar"]
    (tmp_path / "out-1.tar").write_bytes(shard(1, "done"))  # one shard was done before
    p = run("kujob -v -s '{0..2}' --done-if out-{}.tar -- tarcat in-{}.tar -o out-{}.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert "[1] skipped" in p.stderr.decode()
    assert names(tmp_path / "out-0.tar") == ["k0000.txt", "k0001.txt", "k0002.txt"]
    assert names(tmp_path / "out-1.tar") == ["done000.txt"]


def test_k8s_manifest_passes_dollars_through_kubernetes_expansion(tmp_path):
    """Kubernetes expands `$(NAME)` and turns `$$` into `$` in command, args
    and env values: a shell command with `$(HOME)` or `$$`, or an env value
    with a `$`, reached the pod changed.  kujob now doubles every `$`."""
    command = ["sh", "-c", 'printf "%s|%s|%s\\n" "$0" "$GREETING" "$(echo x)" > out-{}.txt', "cost $(HOME) $$5"]
    p = subprocess.run(["kujob", "--k8s", "--image", "img", "-e", "GREETING=$(HOME)$$", "-s", "{a,b}", "--",
                        *command], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    container = json.loads(p.stdout)["spec"]["template"]["spec"]["containers"][0]
    env = {k: v for k, v in os.environ.items() if k != "JOB_COMPLETION_INDEX"}
    for e in container["env"]:
        env[e["name"]] = kubernetes_expand(e["value"], env)
    env["JOB_COMPLETION_INDEX"] = "1"
    argv = [kubernetes_expand(a, env) for a in container["command"] + container["args"]]
    assert argv[argv.index("--") + 1:] == command  # what the pod runs is what was typed
    p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out-b.txt").read_text() == "cost $(HOME) $$5|$(HOME)$$|x\n"


@pytest.mark.parametrize("args, message", [
    (["--k8s", "--image", "img", "-s", "\udcff{1,2}"], "is not UTF-8"),
    (["--k8s", "--image", "img", "-s", "x", "-e", "A=\udcff"], "is not UTF-8"),
    (["-n", "-s", "{a\nb,c}"], "has a control character"),
    (["--k8s", "--image", "img", "-s", "{a\tb,c}"], "has a control character"),
])
def test_kujob_ids_that_cannot_travel_are_refused(args, message, tmp_path):
    """A shard id that is not UTF-8 went into the JSON manifest as raw bytes
    (Kubernetes would read U+FFFD and run another file); an id with a
    newline broke the one-command-per-line --dry-run and the [id] log lines."""
    argv = [os.fsencode(a) for a in ["kujob", *args, "--", "true", "{}"]]
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, timeout=30)
    assert p.returncode == 2 and p.stdout == b""
    assert message in one_line(p)


def test_kujob_shard_leaving_a_process_behind_does_not_hold_the_run(tmp_path):
    """A shard whose command starts a background process and exits (`cmd &`,
    a helper daemon that keeps stdout) held kujob until that process ended:
    kujob read the shard's output to its end, which never came.  As in a pod
    or a Slurm task, the shard now ends when its command exits; what it left
    in its process group is terminated and kujob goes on."""
    marker = unique_sleep()
    t0 = time.monotonic()
    try:
        p = run(f"kujob -s '{{0..1}}' -j 2 -- sh -c '{marker} & echo started {{}}'", tmp_path, timeout=60)
        took = time.monotonic() - t0
        assert p.returncode == 0, p.stderr
        err = p.stderr.decode()
        assert "[0] started 0" in err and "[1] started 1" in err, err
        assert took < 15, f"kujob waited {took:.0f} s for the shards' background processes"
        assert wait_for(lambda: not processes_with(marker), 10), "left-behind processes still running"
    finally:
        kill_left(marker)


def test_kujob_output_after_the_command_exits_is_kept_whole(tmp_path):
    """The shard's last output is not lost when its command ends: a line
    written without a newline just before exit, and a long last line."""
    p = run("kujob -s '{a,b}' -- sh -c 'head -c 70000 /dev/zero | tr \"\\0\" x; printf \"\\ntail {}\"'", tmp_path)
    assert p.returncode == 0, p.stderr
    err = p.stderr.decode().splitlines()
    for i in "ab":
        mine = [line for line in err if line.startswith(f"[{i}] ")]
        assert mine[-1] == f"[{i}] tail {i}", err
        assert [len(line) - 4 for line in mine] == [65536, 70000 - 65536, 6], err


@pytest.mark.parametrize("mode", [[], ["-n"], ["--k8s", "--image", "img:1"], ["--slurm"]])
def test_kujob_done_if_without_the_id_is_refused(mode, tmp_path):
    """`--done-if out.tar` (the {} forgotten) made every shard check the same
    file: the first shard to finish marked all the others done, and kujob
    exited 0 with most shards never run.  Now refused before anything runs."""
    p = run(f"kujob {' '.join(mode)} -s '{{0..3}}' --done-if out.tar -- sh -c 'echo {{}} >> out.tar'", tmp_path)
    assert p.returncode == 2, p.stderr
    assert "{}" in one_line(p) and "--done-if" in one_line(p)
    assert p.stdout == b"" and not (tmp_path / "out.tar").exists()
    # one shard id: one file, nothing ambiguous
    p = run("kujob -s 7 --done-if out.tar -- sh -c 'echo {} >> out.tar'", tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out.tar").read_text() == "7\n"


def test_kujob_program_named_by_the_id(tmp_path):
    """`-- ./step-{}.sh` was refused before anything ran ("command not
    found: ./step-{}.sh": the check looked for ./step-x.sh).  Now a
    program per id runs; a missing one fails its shard only, naming it."""
    for i in "ab":
        (tmp_path / f"step-{i}.sh").write_text(f"#!/bin/sh\necho step {i}\n")
        (tmp_path / f"step-{i}.sh").chmod(0o755)
    p = run("kujob -s '{a,b}' -- ./step-{}.sh", tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stderr.decode().splitlines()) == ["[a] step a", "[b] step b"]
    p = run("kujob -s '{a,c}' -- ./step-{}.sh", tmp_path)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert "[a] step a" in err and "cannot run ./step-c.sh" in err and err.endswith("shards failed: c\n"), err


def test_kujob_failed_shard_that_left_its_done_file_is_named(tmp_path):
    """A shell command that writes with a redirect (`> out-{}.txt`) creates
    its output at once: a shard that failed (or was terminated) left it, and
    a rerun with --done-if skipped that shard as done, silently.  The
    failure now says so (kujob never deletes it: it is the command's)."""
    p = run("kujob -s '{0..1}' --done-if out-{}.txt -- sh -c 'echo partial > out-{}.txt; exit {}'", tmp_path)
    assert p.returncode == 1
    err = p.stderr.decode().splitlines()
    assert err[-3:] == ["kujob: [1] failed (exit status 1)",
                        "kujob: [1] warning: out-1.txt exists although the shard failed: a rerun with --done-if "
                        "would skip it; remove it",
                        "kujob: 1 of 2 shards failed: 1"], err
    assert (tmp_path / "out-1.txt").exists()


def test_apply_pipes_the_manifest_to_kubectl_as_a_child(tmp_path):
    # KUJOB_KUBECTL names the kubectl; it gets the manifest on stdin, its own process group,
    # and its "created" line and messages reach our stdout and stderr as they are
    kubectl = tmp_path / "kubectl"
    kubectl.write_text("#!/bin/bash\n[ \"$1 $2 $3 $4\" = \"--context t apply -f\" ] || exit 9\n"
                       "cat > manifest.got\nread -r _ _ _ _ pgid _ < /proc/$$/stat\necho \"$$ $pgid\" > group.got\n"
                       "echo job.batch/x created\necho kubectl-note >&2\nexit ${KUBECTL_EXIT:-0}\n")
    kubectl.chmod(0o755)
    env = dict(os.environ, KUJOB_KUBECTL=f"{kubectl} --context t")
    args = ["--k8s", "--image", "img", "-s", "{0..2}", "--", "tarcat", "in-{}.tar", "-o", "out-{}.tar"]
    p = subprocess.run(["kujob", "--apply", *args], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b"job.batch/x created\n" and p.stderr == b"kubectl-note\n", p
    printed = subprocess.run(["kujob", *args], env=env, capture_output=True, timeout=60).stdout
    assert (tmp_path / "manifest.got").read_bytes() == printed
    pid, pgid = (tmp_path / "group.got").read_text().split()
    assert pid == pgid
    p = subprocess.run(["kujob", "--apply", *args], cwd=tmp_path, env=dict(env, KUBECTL_EXIT="3"),
                       capture_output=True, timeout=60)
    assert p.returncode == 1 and p.stderr.decode().splitlines()[-1] == "kujob: kubectl apply failed (exit 3)"


def test_max_failed_stops_starting_shards_once_spent(sh):
    # -j 1: shard 1 fails, nothing else starts
    p = sh("kujob --max-failed 0 -j 1 -s '{1..4}' -- sh -c 'exit {}'", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and "[2]" not in err, err
    assert err.endswith("kujob: 1 of 4 shards failed: 1\nkujob: more than --max-failed 0 shards failed: 3 not "
                        "started (2 3 4)\n"), err
    # within the allowance every shard runs; by default too
    for opts in ("--max-failed 2", ""):
        p = sh(f"kujob {opts} -j 1 -s '{{1..4}}' -- sh -c 'test {{}} -gt 2'", ok=False)
        assert p.returncode == 1 and p.stderr.decode().endswith("kujob: 2 of 4 shards failed: 1 2\n"), p.stderr
    p = sh("kujob --slurm --max-failed 1 -s '{1..2}' -- true", ok=False)
    assert p.returncode == 2 and b"--max-failed does not go with --slurm" in p.stderr
