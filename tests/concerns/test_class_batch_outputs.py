"""--per-command N: a command over a batch that writes files not named
sample-NNNNNN.*, removes, renames or moves files across samples, gives one
sample another's key, or cannot have one sample's files written: each
sample's output is made of its own position's files and key, a sample that
has a problem fails alone, and no field lands on another key unasked."""

import io
import subprocess
import tarfile

import pytest

KEYS = ["k0", "k1", "k2", "k3"]


def _shard(long_field_for=None):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT) as t:
        for k in KEYS:
            exts = ["cls", "txt"] + (["x" * 248] if k == long_field_for else [])
            for e in exts:
                data = f"{k} {e[:5]}".encode()
                info = tarfile.TarInfo(f"{k}.{e}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return b.getvalue()


def members(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers()}


BASE = {f"{k}.{e}": f"{k} {e}".encode() for k in KEYS for e in ("cls", "txt")}

# command: (exit status, the output's members as a change of BASE, words of the error lines)
CASES = {
    "other_names_ignored": ("echo a > sample.x; echo b > out.txt; echo c > sample-7.txt; echo d > sample-000009.txt",
                            0, {}, None),
    "a_new_field_by_position": ("echo new > sample-000002.extra", 0, {"k2.extra": b"new\n"}, None),
    "removed_sample_dropped": ("rm sample-000001.*", 0, {"k1.cls": None, "k1.txt": None}, None),
    "moved_across_samples": ("mv sample-000000.txt sample-000003.txt0", 0,
                             {"k0.txt": None, "k3.txt0": b"k0 txt"}, None),
    "keys_swapped_by_key_files": ("echo k2 > sample-000000.__key__; echo k0 > sample-000002.__key__", 0,
                                  {"k0.cls": b"k2 cls", "k0.txt": b"k2 txt", "k2.cls": b"k0 cls",
                                   "k2.txt": b"k0 txt"}, None),
    "an_unsafe_key_fails_its_sample_only": ("printf '../x' > sample-000001.__key__", 1, None, "'k1'"),
    "the_command_fails_all_fail": ("exit 3", 1, None, "one command for 4 samples"),
}


@pytest.fixture
def work(tmp_path):
    (tmp_path / "in.tar").write_bytes(_shard())
    (tmp_path / "long.tar").write_bytes(_shard(long_field_for="k1"))
    return tmp_path


@pytest.mark.parametrize("name", list(CASES))
def test_each_sample_gets_its_own_files(work, name):
    cmd, status, change, words = CASES[name]
    p = subprocess.run(["tarproc", "--per-command", "4", "-c", cmd, "in.tar", "-o", "out.tar", "--max-failures", "4"],
                       cwd=work, capture_output=True, timeout=60)
    err = p.stderr.decode()
    got = members((work / "out.tar").read_bytes())
    if change is not None:
        # (files not named sample-NNNNNN.* are said once, not collected)
        noted = [line for line in err.splitlines() if "not collected: only files named sample-NNNNNN.*" not in line]
        assert p.returncode == status and noted == [], err
        want = dict(BASE)
        for k, v in change.items():
            if v is None:
                del want[k]
            else:
                want[k] = v
        assert got == want
        return
    assert words in err and "failed" in err, err
    failed = {line.split("'")[1] for line in err.splitlines() if line.startswith("tarproc: sample '")}
    assert got == {k: v for k, v in BASE.items() if k.split(".")[0] not in failed}


def test_a_sample_whose_files_cannot_be_written_fails_alone(work):
    up = "for f in *.txt; do tr a-z A-Z < $f > ${f%.txt}.up; done"
    p = subprocess.run(["tarproc", "--per-command", "4", "-c", up, "long.tar", "-o", "out.tar", "--max-failures", "1"],
                       cwd=work, capture_output=True, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 0 and "sample 'k1'" in err, err
    got = members((work / "out.tar").read_bytes())
    assert {n: v for n, v in got.items() if n.endswith(".up")} == {"k0.up": b"K0 TXT", "k2.up": b"K2 TXT",
                                                                   "k3.up": b"K3 TXT"}
    assert not any(n.startswith("k1.") for n in got)
