"""A file one run writes that is also one it reads, or another it writes,
however the path is spelled (``./x``, ``../dir/x``): refused with one line,
exit 2, before anything is written, the file untouched.  Side outputs too:
tarproc's --failed-keys (against the output, the inputs, -T's list, the
script), tarsplit's --manifest and --index."""

import hashlib
import subprocess

import pytest

from helpers import tar_bytes

SHARD = tar_bytes([(f"{k}.{e}", (b"ok" if k % 2 else b"no") if e == "txt" else b"1")
                   for k in range(4) for e in ("cls", "txt")])
FAIL = "-c 'grep -q ok sample.txt' --max-failures 10"

CASES = {
    "failed_keys_is_an_input": (f"tarproc {FAIL} in.tar -o out.tar --failed-keys in.tar", "in.tar"),
    "failed_keys_is_an_input_spelled_otherwise": (f"tarproc {FAIL} in.tar -o out.tar --failed-keys ../w/in.tar",
                                                  "in.tar"),
    "failed_keys_is_the_output_spelled_otherwise": (f"tarproc {FAIL} in.tar -o out.tar --failed-keys ./out.tar",
                                                    "same file"),
    "failed_keys_is_the_file_list": (f"tarproc {FAIL} -T list.txt -o out.tar --failed-keys list.txt", "list.txt"),
    "failed_keys_is_the_script": ("tarproc -s run.sh in.tar -o out.tar --failed-keys run.sh", "run.sh"),
    "failed_keys_is_stdout": (f"tarproc {FAIL} in.tar -o out.tar --failed-keys -", "file of its own"),
    "manifest_is_the_index": ("tarsplit --shards 1 in.tar -o 's-%d.tar' --manifest m.txt --index ./m.txt",
                              "same file"),
    "manifest_is_a_shard": ("tarsplit -n 2 in.tar -o 's-%d.tar' --manifest s-1.tar", "name of shard 1"),
    "manifest_is_a_shard_of_a_prefix": ("tarsplit -n 2 in.tar -o s --manifest ./s-000000.tar", "name of shard 0"),
    "index_is_a_split_shard": ("tarsplit --fractions 'a=0.5,b=0.5' in.tar -o '{split}-%d.tar' --index '{split}-0.tar'",
                               "name of shard 0"),
}


@pytest.fixture
def work(tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    (d / "in.tar").write_bytes(SHARD)
    (d / "list.txt").write_text("in.tar\n")
    (d / "run.sh").write_text("grep -q ok sample.txt\n")
    return d


def _digests(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir()}


@pytest.mark.parametrize("name", list(CASES))
def test_a_file_written_that_is_one_read_or_written_is_refused(work, name):
    cmd, word = CASES[name]
    before = _digests(work)
    p = subprocess.run(["bash", "-c", cmd], cwd=work, capture_output=True, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and word in err, err
    assert _digests(work) == before  # nothing written, nothing replaced


def test_the_key_list_read_is_also_the_failed_keys_written(work):
    # rerun the failures, keep the ones that still fail: one file for both is the usual use (read first)
    (work / "k.txt").write_text("0\n1\n2\n")
    p = subprocess.run(["bash", "-c", f"tarproc {FAIL} --keys k.txt in.tar -o out.tar --failed-keys k.txt"],
                       cwd=work, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (work / "k.txt").read_text() == "0\n2\n"
