"""tarproc --failed-keys FILE and --keys FILE: the rerun loop end to end
(process, collect the failed keys, rerun only those, merge), key lists
that keep any key (newlines, bytes that are not UTF-8), kujob's summary."""

import io
import os
import subprocess
import tarfile

from hypothesis import given, settings, strategies as st

from tarproc.stages.keys import escape_key, unescape_key

# fails the first time it sees a key ending in 1 or 3 (or holding bytes that are not UTF-8), then passes
FLAKY = r"""k=$(cat sample.__key__); m="$MARKS/$(printf %s "$k" | od -An -tx1 | tr -d ' \n')"
case "$k" in *1|*3|odd*) if [ ! -e "$m" ]; then touch "$m"; exit 3; fi;; esac
cp sample.txt sample.out.txt
"""

# (member names with control characters are refused by every reader: such keys come only from --map)
KEYS = ["a0", "a1", "a2", "a3", "back\\slash1", "odd\udcff\udc80x", "sp ace\\n4", "\u00e9t\u00e9"]


def _shard(path, keys):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT, encoding="utf-8", errors="surrogateescape") as t:
        for k in keys:
            data = f"text of {k!r}".encode("utf-8", "surrogateescape")
            info = tarfile.TarInfo(f"{k}.txt")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def run(cmd, cwd, marks="marks"):
    env = dict(os.environ, MARKS=str(cwd / marks))
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, capture_output=True, timeout=120,
                          env=env)


def names(path):
    with tarfile.open(path, encoding="utf-8", errors="surrogateescape") as t:
        return sorted(m.name for m in t.getmembers())


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_key_lines_round_trip(key):
    line = escape_key(key)
    assert "\n" not in line and "\r" not in line
    assert unescape_key(line) == key


def test_round_trip_of_odd_bytes():
    for key in KEYS + ["\\", "x\\n", "\r\n", "a\\xff", "\udcc3"]:
        assert unescape_key(escape_key(key)) == key
    assert unescape_key("plain\\path") == "plain\\path"  # a hand-made list reads as before


def test_rerun_loop(tmp_path):
    _shard(tmp_path / "in.tar", KEYS)
    (tmp_path / "flaky.sh").write_text(FLAKY)
    (tmp_path / "marks").mkdir()
    p = run("tarproc -s flaky.sh --max-failures 100% --failed-keys failed.txt in.tar -o pass1.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    failed = (tmp_path / "failed.txt").read_bytes().splitlines()
    want = [k for k in KEYS if k[-1] in "13" or k.startswith("odd")]
    assert sorted(unescape_key(x.decode("utf-8", "surrogateescape")) for x in failed) == sorted(want)
    assert len(names(tmp_path / "pass1.tar")) == 2 * (len(KEYS) - len(want))
    # the rerun: only the failed keys; this time they pass
    p = run("tarproc -s flaky.sh --keys failed.txt --failed-keys failed2.txt in.tar -o pass2.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "failed2.txt").read_bytes() == b""
    assert len(names(tmp_path / "pass2.tar")) == 2 * len(want)
    # tarcat --keys reads the same list
    p = run("tarcat --keys failed.txt in.tar -o subset.tar", tmp_path)
    assert p.returncode == 0 and len(names(tmp_path / "subset.tar")) == len(want)
    # merge: the same samples as one undisturbed run, in the same order
    p = run("tarcat pass1.tar pass2.tar | tarsort -o merged.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    p = run("tarproc -c 'cp sample.txt sample.out.txt' in.tar | tarsort -o direct.tar", tmp_path)
    assert p.returncode == 0
    assert (tmp_path / "merged.tar").read_bytes() == (tmp_path / "direct.tar").read_bytes()


def test_failed_keys_semantics(tmp_path):
    """Written when all the input was processed (exit 0 or 1), never when
    the run stopped early; no output file when failures pass the limit."""
    _shard(tmp_path / "in.tar", KEYS)
    (tmp_path / "flaky.sh").write_text(FLAKY)
    (tmp_path / "marks").mkdir()
    p = run("tarproc -s flaky.sh --max-failures 1% --failed-keys failed.txt in.tar -o out.tar", tmp_path)
    assert p.returncode == 1
    assert not (tmp_path / "out.tar").exists()
    assert len((tmp_path / "failed.txt").read_bytes().splitlines()) == 4
    # --max-failures 0 (the default): stopped at the first failure, the list would be incomplete
    p = run("tarproc -c 'exit 1' --failed-keys f1.txt in.tar -o out.tar", tmp_path)
    assert p.returncode == 1 and not (tmp_path / "f1.txt").exists()
    assert "stopped there (the samples after it not processed); --failed-keys not written" in p.stderr.decode()
    p = run("tarproc -e abort -c 'exit 1' --failed-keys f2.txt in.tar -o out.tar", tmp_path)
    assert p.returncode == 1 and not (tmp_path / "f2.txt").exists()
    p = run("tarproc -c true --failed-keys f3.txt missing.tar -o out.tar", tmp_path)
    assert p.returncode == 2 and not (tmp_path / "f3.txt").exists()
    assert not list(tmp_path.glob(".f*partial"))


def test_kujob_names_each_shards_list(tmp_path):
    for i in range(2):
        _shard(tmp_path / f"in-{i}.tar", [f"s{i}_{k}" for k in "0123"])
    (tmp_path / "flaky.sh").write_text(FLAKY)
    (tmp_path / "marks").mkdir()
    p = run("kujob -s '{0..1}' -j 2 -- tarproc -s flaky.sh --max-failures 2 --failed-keys failed-{}.txt "
            "in-{}.tar -o out-{}.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    err = p.stderr.decode()
    for i in range(2):
        assert f"kujob: [{i}] 2 failed keys in failed-{i}.txt (rerun them with tarproc --keys failed-{i}.txt)" in err


def test_key_lists_refuse_stdin_clashes(tmp_path):
    _shard(tmp_path / "in.tar", KEYS)
    p = run("tarproc -c true --failed-keys - in.tar > /dev/null", tmp_path)
    assert p.returncode == 2 and b"--failed-keys" in p.stderr
    p = run("tarproc -c true --failed-keys out.tar in.tar -o out.tar", tmp_path)
    assert p.returncode == 2 and not (tmp_path / "out.tar").exists()
    p = run("echo a1 | tarproc -c true --keys - < in.tar", tmp_path)
    assert p.returncode == 2 and b"stdin" in p.stderr
    p = run("echo a1 | tarproc -c true --keys - in.tar", tmp_path)
    assert p.returncode == 0 and names_of_bytes(p.stdout) == ["a1.txt"]


def names_of_bytes(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return [m.name for m in t.getmembers()]
