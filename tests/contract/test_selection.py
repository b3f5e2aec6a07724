"""--skip, --slice and -c/--count select the same samples in tarproc as in
tarcat (one meaning in every command), in that order."""

import io
import tarfile

import pytest


def keys(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return [m.name for m in tf]


@pytest.mark.parametrize("opts", ["--skip 3", "--skip 2 --slice 1:9:2 --count 3", "--skip 20"])
def test_tarproc_selects_what_tarcat_selects(sh, opts):
    sh("seq 1 12 | lines2tar > in.tar")
    empty = opts == "--skip 20"  # a warning says that nothing is left
    want = sh(f"tarcat {opts.replace('--count', '-c')} in.tar", stderr_ok=empty).stdout
    got = sh(f"tarproc -c true {opts} in.tar", stderr_ok=empty).stdout
    assert keys(got) == keys(want)
    assert got == want  # the command changes nothing: the same bytes
    got = sh(f"printf 'def f(s):\\n    return s\\n' > f.py; tarproc --map f.py:f -p 1 {opts} in.tar",
             stderr_ok=empty).stdout
    assert got == want


def test_a_selection_that_leaves_nothing_says_so(sh):
    sh("seq 1 12 | lines2tar > in.tar")
    for cmd, said in (("tarcat --skip 20 in.tar", "tarcat: warning: --skip 20 left none of the 12 samples read\n"),
                      ("tarcat --slice 12: in.tar", "tarcat: warning: --slice 12: left none of the 12 samples "
                                                  "read\n"),
                      ("tarproc -c true --skip 12 in.tar", "tarproc: warning: --skip 12 left none of the 12 samples "
                                                           "read\n")):
        p = sh(cmd, stderr_ok=True)
        assert p.stderr.decode() == said, cmd
    assert sh("tarcat -q --skip 20 in.tar").stderr == b""
    assert sh("tarcat --skip 11 in.tar").stderr == b""  # one left
    assert sh("tarcat --skip 20 < /dev/null").stderr == b""  # nothing read: nothing to say


def test_tarproc_text_mode_and_bad_slice(sh):
    p = sh("printf 'a\\nb\\nc\\nd\\n' | tarproc --mode lines -c true --skip 1 --slice ::2 | tar xOf -")
    assert p.stdout == b"bd"  # lines 2 and 4, without their newlines
    p = sh("seq 1 3 | lines2tar | tarproc -c true --slice x", ok=False)
    assert p.returncode == 2 and b"slice" in p.stderr and p.stdout == b""
