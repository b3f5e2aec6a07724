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
