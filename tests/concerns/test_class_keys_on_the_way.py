"""Keys that change on their way through --failed-keys and --keys: bytes that
are not UTF-8, very long keys, a backslash that looks like an escape, keys
that a --map function renames (the list names the INPUT's keys, so that
--keys on the input reruns them), key lists with duplicates, blank lines,
CRLF ends and keys never found (said by tarcat and tarproc alike)."""

import io
import subprocess
import tarfile

import pytest

KEYS = ["a b", b"e\xff".decode("utf-8", "surrogateescape"), "x" * 3000, "plain", "back\\x41slash", "caf\u00e9",
        "tab\\tlike"]
FAILING = {k for i, k in enumerate(KEYS) if i % 2 == 0}


def _shard():
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as t:
        for k in KEYS:
            for ext, data in (("txt", b"no" if k in FAILING else b"ok"), ("cls", b"1")):
                info = tarfile.TarInfo(f"{k}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return b.getvalue()


def keys_of(data):
    with tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as t:
        return sorted({m.name.rsplit(".", 1)[0] for m in t.getmembers()})


MAP = '''
def f(s):
    s["__key__"] = "renamed-" + s["__key__"][:5]
    if s["txt"] != b"ok":
        raise ValueError("bad")
    return s
'''


@pytest.fixture
def work(tmp_path):
    (tmp_path / "in.tar").write_bytes(_shard())
    (tmp_path / "m.py").write_text(MAP)
    return tmp_path


def run(cmd, cwd):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=60)


@pytest.mark.parametrize("how", ["-c 'grep -q ok sample.txt'", "--map m.py:f"])
def test_failed_keys_rerun_exactly_the_failed_input_samples(work, how):
    p = run(f"tarproc {how} in.tar -o out.tar --max-failures 10 --failed-keys failed.txt", work)
    assert p.returncode == 0, p.stderr
    p = run("tarcat --keys failed.txt in.tar", work)
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    assert keys_of(p.stdout) == sorted(FAILING)
    p = run("tarproc -c true --keys failed.txt in.tar -o again.tar", work)
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    assert keys_of((work / "again.tar").read_bytes()) == sorted(FAILING)


LISTS = {
    "duplicates_and_blank_lines": (b"plain\n\nplain\n\n", ["plain"], None),
    "crlf_ends": (b"plain\r\na b\r\n", ["a b", "plain"], None),
    "no_final_newline": (b"plain", ["plain"], None),
    "never_found": (b"plain\nnothere\n", ["plain"], "1 of the 2 keys listed in k.txt were never found (e.g. "
                                                    "'nothere')"),
    "never_found_not_utf8": (b"\xff\xfenope\n", [], "'\\xff\\xfenope'"),
}


@pytest.mark.parametrize("cmd", ["tarcat --keys k.txt in.tar > out.tar",
                                 "tarproc -c true --keys k.txt in.tar -o out.tar"])
@pytest.mark.parametrize("name", list(LISTS))
def test_key_lists_read_alike(work, cmd, name):
    text, want, warning = LISTS[name]
    (work / "k.txt").write_bytes(text)
    p = run(cmd, work)
    assert p.returncode == 0, p.stderr
    assert keys_of((work / "out.tar").read_bytes()) == want
    err = p.stderr.decode()
    if warning is None:
        assert err == ""
    else:
        assert err.count("\n") == 1 and "warning" in err and warning in err, err
