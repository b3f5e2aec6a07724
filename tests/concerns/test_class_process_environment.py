"""Class: the process environment a command is started in.  Standard
streams are set up once for every command (``cli/base.run``,
``cli/guards``), encodings in ``core/limits.escaping_stream``, the number of
children by the open-file limit in ``runtime/procs.fit_parallel``.
Instances here: stdout closed (``>&-``) for the commands that write text;
the C locale with Python's UTF-8 mode off and non-ASCII names; kujob -j
beyond a small ``ulimit -n``."""

import tarfile

import pytest

from helpers import tar_bytes

NAMES = [("caf\u00e9/\u65e5\u672c.txt", "v\u00e9".encode()), ("caf\u00e9/\u65e5\u672c.cls", b"1")]


@pytest.fixture
def uni(tmp_path):
    (tmp_path / "u.tar").write_bytes(tar_bytes(NAMES, format=tarfile.PAX_FORMAT))
    return "u.tar"


@pytest.mark.parametrize("cmd", ["tarshow u.tar", "tar2tsv u.tar", "tar2json u.tar", "tarcheck u.tar",
                                 "tarfirst -f txt u.tar", "tarcat u.tar", "tarproc -c true u.tar"])
def test_closed_stdout_is_one_line_and_exit_1(sh, uni, cmd):
    p = sh(f"{cmd} >&-", ok=False)
    lines = p.stderr.decode().splitlines()
    assert p.returncode == 1, (cmd, p.stderr)
    assert len(lines) == 1 and "write failed: Bad file descriptor" in lines[0], (cmd, lines)
    assert "internal error" not in lines[0] and "Traceback" not in lines[0]


def test_c_locale_without_utf8_mode_shows_non_ascii_names(sh, uni):
    env = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    for cmd, want in (("tarshow u.tar", "caf\u00e9/\u65e5\u672c\n"), ("tar2tsv u.tar", "caf\u00e9/\u65e5\u672c\t"),
                      ("tar2json u.tar", '"caf\u00e9/\u65e5\u672c"')):
        p = sh(cmd, env=env)
        assert want.encode("utf-8") in p.stdout, (cmd, p.stdout)
    # an explicit strict ASCII stdout gets escapes, never an error
    p = sh("tarshow u.tar", env={"PYTHONIOENCODING": "ascii"})
    assert b"caf\\xe9/\\u65e5\\u672c" in p.stdout


def test_kujob_jobs_fit_a_small_open_file_limit(sh, tmp_path):
    p = sh("ulimit -n 64; kujob -j 40 -s '{01..40}' -- sh -c 'sleep 0.1; touch done-$KUJOB_ID'", stderr_ok=True)
    assert sorted(f.name for f in tmp_path.glob("done-*")) == [f"done-{i:02d}" for i in range(1, 41)]
    assert b"Too many open files" not in p.stderr
    assert b"-j 40 needs more open files than the limit of 64" in p.stderr


def test_tarsplit_post_commands_die_with_a_killed_parent(tmp_path, uni):
    import os
    import signal
    import subprocess
    import time

    # the post command's shell starts a child of its own: both must go when tarsplit is SIGKILLed
    proc = subprocess.Popen(["tarsplit", "-n", "1", "-o", "s-%02d.tar", "-p", "sleep 60 & echo $! > child.pid; wait",
                             "u.tar"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pidfile = tmp_path / "child.pid"
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the post command's child outlived tarsplit")
