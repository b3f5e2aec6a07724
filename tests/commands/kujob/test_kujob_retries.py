"""kujob --retries: exit status 2 (usage or bad input) is the same on every
try, so it is not retried unless --retry-all; other failures are."""


def attempts(sh, tmp_path, code, opts):
    sh(f"kujob -s '{{a,b}}' -j 1 --retries 2 {opts} -- sh -c 'echo x >> tries-{{}}; exit {code}'", ok=False)
    return [len((tmp_path / f"tries-{i}").read_text().splitlines()) for i in "ab"]


def test_exit_2_is_not_retried(sh, tmp_path):
    p = sh("kujob -s '{a,b}' -j 1 --retries 2 -- sh -c 'echo x >> tries-{}; exit 2'", ok=False)
    assert p.returncode == 1
    assert [len((tmp_path / f"tries-{i}").read_text().splitlines()) for i in "ab"] == [1, 1]
    err = p.stderr.decode()
    assert "[a] exit status 2 (usage or bad input) is not retried (--retry-all retries it)" in err
    assert "2 of 2 shards failed: a b" in err


def test_retry_all_and_other_codes_are_retried(sh, tmp_path):
    assert attempts(sh, tmp_path, 2, "--retry-all") == [3, 3]
    for f in tmp_path.glob("tries-*"):
        f.unlink()
    assert attempts(sh, tmp_path, 3, "") == [3, 3]


def test_tarproc_usage_error_in_a_shard_runs_once(sh, tmp_path):
    p = sh("kujob -s 0 --retries 3 -- tarproc --no-such-option in-{}.tar", ok=False)
    assert p.returncode == 1 and p.stderr.decode().count("No such option") == 1


def test_slurm_task_carries_retry_all(sh):
    script = sh("kujob --slurm -s '{0..3}' --retries 2 --retry-all -- true").stdout.decode()
    assert "--retries 2 --retry-all -v -- true" in script
    script = sh("kujob --slurm -s '{0..3}' --retries 2 -- true").stdout.decode()
    assert "--retry-all" not in script


def test_kubernetes_job_fails_an_index_whose_pod_exits_2(sh):
    import json

    from test_kujob import validate_job

    job = json.loads(sh("kujob --k8s --image img:1 --retries 2 -s '{0..3}' -- tarcat in-{}.tar -o out-{}.tar").stdout)
    validate_job(job)  # every field is the API's
    assert job["spec"]["backoffLimitPerIndex"] == 2
    assert job["spec"]["podFailurePolicy"] == {"rules": [{"action": "FailIndex", "onExitCodes": {
        "containerName": "shard", "operator": "In", "values": [2]}}]}
    assert job["spec"]["template"]["spec"]["containers"][0]["name"] == "shard"
    job = json.loads(sh("kujob --k8s --image img:1 --retries 2 --retry-all -s '{0..3}' -- true {}").stdout)
    assert "podFailurePolicy" not in job["spec"]
    job = json.loads(sh("kujob --k8s --image img:1 -s '{0..3}' -- true {}").stdout)
    assert "podFailurePolicy" not in job["spec"]  # no retries: nothing to hold back


def test_a_pod_whose_command_exits_2_exits_2(sh):
    # what each pod runs: its exit status is what the podFailurePolicy sees
    p = sh("kujob --index-from-env -s '{0..3}' -- sh -c 'exit {}'", ok=False, env={"JOB_COMPLETION_INDEX": "2"})
    assert p.returncode == 2
    p = sh("kujob --index-from-env -s '{0..3}' -- sh -c 'exit {}'", ok=False, env={"JOB_COMPLETION_INDEX": "3"})
    assert p.returncode == 1
    p = sh("kujob -s '{0..3}' -- sh -c 'exit {}'", ok=False)  # many shards: 1, as before
    assert p.returncode == 1
