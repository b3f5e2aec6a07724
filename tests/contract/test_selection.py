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
    want = sh(f"tarcat {opts.replace('--count', '-c')} in.tar").stdout
    got = sh(f"tarproc -c true {opts} in.tar").stdout
    assert keys(got) == keys(want)
    assert got == want  # the command changes nothing: the same bytes
    got = sh(f"printf 'def f(s):\\n    return s\\n' > f.py; tarproc --map f.py:f -p 1 {opts} in.tar").stdout
    assert got == want


def test_tarproc_text_mode_and_bad_slice(sh):
    p = sh("printf 'a\\nb\\nc\\nd\\n' | tarproc --mode lines -c true --skip 1 --slice ::2 | tar xOf -")
    assert p.stdout == b"bd"  # lines 2 and 4, without their newlines
    p = sh("seq 1 3 | lines2tar | tarproc -c true --slice x", ok=False)
    assert p.returncode == 2 and b"slice" in p.stderr and p.stdout == b""
