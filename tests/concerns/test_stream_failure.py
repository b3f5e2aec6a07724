"""A failed run writing a stream (stdout, a pipe, a FIFO) leaves the archive
without its end-of-archive marker, so that the next command notices (it
warns; with --strict it fails), as `-e abort` does; within --max-failures
the archive is whole.  A file output of a failed run is not written."""

import tarfile
import io

from helpers import tar_bytes

FAIL_3 = "case $(cat sample.__key__) in s0003) exit 3;; esac"


def _shard(tmp_path, n=8):
    members = []
    for i in range(n):
        members += [(f"s{i:04d}.txt", b"text %d" % i)]
    (tmp_path / "in.tar").write_bytes(tar_bytes(members))
    (tmp_path / "f.py").write_text(
        "def f(s):\n"
        "    if s['__key__'] == 's0003':\n"
        "        raise ValueError('no')\n"
        "    return s\n")


def _unterminated(data):
    """Members are whole (tarfile reads them), and the last 1024 bytes are
    not the end-of-archive marker."""
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    return len(data) % 512 == 0 and data[-1024:] != bytes(1024), names


RUNS = {
    "-c": f"tarproc -c '{FAIL_3}'",
    "--map": "tarproc -p 2 --map f.py:f",
    "-s": "tarproc -s fail.sh",
    "-e abort": f"tarproc -e abort -c '{FAIL_3}'",
    "--max-failures": f"tarproc --max-failures 0 -c '{FAIL_3}'",
    "--max-failures 1%": f"tarproc --max-failures 1% -c '{FAIL_3}'",  # checked at the end: every sample runs
}


def test_failed_samples_leave_stdout_unterminated(sh, tmp_path):
    _shard(tmp_path)
    (tmp_path / "fail.sh").write_text(FAIL_3 + "\n")
    for what, cmd in RUNS.items():
        p = sh(f"{cmd} in.tar > out.tar", ok=False)
        assert p.returncode == 1, (what, p.stderr)
        data = (tmp_path / "out.tar").read_bytes()
        cut, names = _unterminated(data)
        assert cut, (what, len(data))
        # stopped at the failure (the samples before it are out), or run to the end
        assert "s0003.txt" not in names and len(names) == (7 if what.endswith("%") else 3), (what, names)
        if what != "-e abort":
            assert b"without its end-of-archive marker" in p.stderr.splitlines()[-1], (what, p.stderr)


def test_pipeline_after_a_failed_run_notices(sh, tmp_path):
    _shard(tmp_path)
    # through a pipe: tarsplit warns, --strict stops it (exit 2) and commits no shard past the cut
    p = sh(f"tarproc -c '{FAIL_3}' in.tar | tarsplit -n 100 -o part", ok=False)
    assert p.returncode == 1  # pipefail: tarproc's status
    assert b"tarsplit: warning: stdin: offset" in p.stderr and b"end-of-archive marker" in p.stderr
    p = sh(f"tarproc -c '{FAIL_3}' in.tar | tarsplit --strict -n 100 -o strict; echo \"${{PIPESTATUS[@]}}\"",
           ok=False)
    assert p.stdout.split() == [b"1", b"2"] and b"tarsplit: stdin: offset" in p.stderr
    assert not list(tmp_path.glob("strict-*"))
    p = sh(f"tarproc -c '{FAIL_3}' in.tar | tarcat --strict > /dev/null; echo \"${{PIPESTATUS[@]}}\"", ok=False)
    assert p.stdout.split() == [b"1", b"2"]
    # a FIFO (a stream, like stdout, under -o)
    p = sh(f"mkfifo ff && (cat ff > got.tar &) && tarproc -c '{FAIL_3}' in.tar -o ff; s=$?; wait; sleep 0.2; "
           f"exit $s", ok=False)
    assert p.returncode == 1 and _unterminated((tmp_path / "got.tar").read_bytes())[0]


def test_within_max_failures_the_stream_is_whole_and_a_file_is_not_written(sh, tmp_path):
    _shard(tmp_path)
    p = sh(f"tarproc --max-failures 1 -c '{FAIL_3}' in.tar > ok.tar", stderr_ok=True)
    data = (tmp_path / "ok.tar").read_bytes()
    assert data[-1024:] == bytes(1024) and len(tarfile.open(fileobj=io.BytesIO(data)).getnames()) == 7
    sh("tarcat --strict ok.tar > /dev/null")
    p = sh(f"tarproc -c '{FAIL_3}' in.tar -o file.tar", ok=False)
    assert p.returncode == 1 and not (tmp_path / "file.tar").exists()
    assert p.stderr.splitlines()[-1].endswith(b"no output written")
