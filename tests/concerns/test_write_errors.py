"""A write that fails (a full disk) is exit 1 and one line naming the file
and what was written there, on every write path: outputs, spool files, a
copy of stdin, sort runs, working directories, local copies of remote
outputs and of compressed shards, indexes, manifests, key lists, stdout.
Run on a real full file system (a 1 MiB tmpfs, mounted and unmounted here)
and on /dev/full.  (The one message: ``tarproc.errors.write_failed``.)"""

import os
import random
import re
import subprocess

import pytest

from helpers import one_line, run_pipefail, tar_bytes

SAMPLES = 30
FIELD = 40_000  # 30 samples of 40 KB: 1.2 MB, more than the file system holds


def shard():
    rng = random.Random(41)  # (incompressible: the gzip copy does not fit either)
    members = []
    for i in range(SAMPLES):
        members += [(f"s{i:03d}.bin", rng.randbytes(FIELD)), (f"s{i:03d}.cls", b"%d" % (i % 3))]
    return tar_bytes(members)


@pytest.fixture
def full(tmp_path):
    """``fill(room)``: a 1 MiB tmpfs at tmp_path/full holding a file that
    leaves ``room`` bytes free (enough for a small file, not for a shard)."""
    d = tmp_path / "full"
    d.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], capture_output=True)
    assert p.returncode == 0, p.stderr  # the tests run as root (mount is how a full disk is made)

    def fill(room):
        with open(d / "filler", "wb") as f:
            try:
                f.write(b"\0" * ((1 << 20) - room))
            except OSError:
                pass
        return d

    try:
        yield fill
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


# name: (command line in tmp_path, bytes left free, the one line's pattern)
CASES = {
    "tarsplit copy of stdin": ("cat in.tar | TMPDIR=full tarsplit --shards 2 -o out/p", 24 << 10,
                               r"^tarsplit: (\S*/)?full/tarsplit-stdin-\S+\.spool: cannot write a copy of stdin"),
    "spool file": ("cat in.tar | TMPDIR=full tar2tsv --blob-threshold 1000", 24 << 10,
                   r"^tar2tsv: (\S*/)?full/\.tarproc-spool\.\S+: cannot write a spool file"),
    "spool file in a tarpcat worker": ("cat in.tar | TMPDIR=full tarpcat --on-bad-shard skip --blob-threshold 1000",
                                       24 << 10, r"^tarpcat: (\S*/)?full/\.tarproc-spool\.\S+: cannot write a spool file"),
    "sort run": ("cat in.tar | TMPDIR=full tarsort --memory 100KB", 24 << 10,
                 r"^tarsort: (\S*/)?full/tarsort-\S+/run-\d+\.pickle: cannot write a sort run"),
    "working directory": ("TMPDIR=full tarproc -c true in.tar", 24 << 10,
                          r"^tarproc: (\S*/)?full/tarproc-\S+: cannot write a sample's files for its command"),
    "working directory, batches": ("TMPDIR=full tarproc --per-command 4 -c true in.tar", 24 << 10,
                                   r"^tarproc: (\S*/)?full/tarproc-\S+: cannot write a sample's files for its command"),
    "local copy of a compressed shard": ("TMPDIR=full tarindex -o x.idx 'pipe:cat in.tar.gz'", 24 << 10,
                                         r"^tarindex: (\S*/)?full/\.tarproc-seek-\S+: cannot write a local copy of a "
                                         r"compressed shard"),
    "local copy of a remote output": ("TARPROC_WRITE_FOO='cat > /dev/null' TARPROC_SPOOL_DIR=full tarcat in.tar "
                                      "-o foo://b/x.tar", 24 << 10,
                                      r"^tarcat: (\S*/)?full/\.x\.tar\.\S+\.tarproc-partial: cannot write the local copy "
                                      r"of foo://b/x\.tar"),
    "output": ("tarcat in.tar -o full/o.tar", 24 << 10, r"^tarcat: full/o\.tar: write failed"),
    "index": ("tarindex -o full/x.idx in.tar", 0, r"^tarindex: full/x\.idx\S*: write failed"),
    "tarsplit's index": ("tarsplit -n 10 --index full/i.idx -o out/q < in.tar", 0,
                         r"^tarsplit: full/i\.idx\S*: write failed"),
    "tarsplit's manifest": ("tarsplit -n 10 --manifest full/m.json -o out/r < in.tar", 0,
                            r"^tarsplit: full/m\.json: write failed"),
    "key list": ("tarproc -q -c 'exit 1' -e ignore --failed-keys full/keys in.tar", 0,
                 r"^tarproc: full/keys: write failed"),
}


@pytest.mark.parametrize("name", CASES)
def test_full_disk_names_the_file_exit_1(name, full, tmp_path):
    cmd, room, pattern = CASES[name]
    (tmp_path / "in.tar").write_bytes(shard())
    (tmp_path / "out").mkdir()  # (no command makes the directory of its output)
    if "in.tar.gz" in cmd:
        subprocess.run(["gzip", "-k", "in.tar"], cwd=tmp_path, check=True)
    d = full(room)
    p = run_pipefail(cmd + " > /dev/null", tmp_path, timeout=120)
    assert p.returncode == 1, (cmd, p.returncode, p.stderr)
    line = one_line(p) if name != "key list" else p.stderr.decode().splitlines()[-1]
    assert re.search(pattern, line), line
    assert "No space left on device" in line, line
    assert sorted(os.listdir(d)) == ["filler"], "a partial or temporary file was left"


TEXT = ["tar2tsv", "tar2json", "tarcheck --json", "tarshow", "tarfirst -f bin", "tarcat", "tarindex --no-offsets -o - in.tar"]


@pytest.mark.parametrize("command", TEXT)
def test_stdout_on_a_full_device(command, tmp_path):
    (tmp_path / "in.tar").write_bytes(shard())
    p = run_pipefail(f"{command} < in.tar > /dev/full", tmp_path)
    assert p.returncode == 1, (command, p.stderr)
    assert re.fullmatch(r"\S+: (stdout|-): write failed: No space left on device", one_line(p)), p.stderr
