"""Option values are checked when the option is parsed: a format-string
option (``--rekey``, ``--keyformat``, tarsplit ``-o``, tarcreate ``-k``) that
reaches into a value (``{key.x}``), has a bad spec or does not parse is one
line on stderr and exit 2, never an internal error, and nothing is written.
The one check is ``tarproc.core.limits.check_widths``."""

import os
import subprocess
import tarfile

import pytest

from helpers import one_line, tar_bytes
from helpers import tar_of

CASES = [
    ("tarcat --rekey '{key.x}' a.tar -o out.tar", "{key.x}"),
    ("tarcat --rekey '{key[0]}' a.tar -o out.tar", "{key[0]}"),
    ("tarcat --rekey '{key:d}' a.tar -o out.tar", "--rekey"),
    ("tarcat --rekey '{index:s}' a.tar -o out.tar", "--rekey"),
    ("tarcat --rekey '{' a.tar -o out.tar", "--rekey"),
    ("tarcat --rekey '{nosuch}' a.tar -o out.tar", "nosuch"),
    ("tarcat --rekey '{key.__class__}' a.tar -o out.tar", "{key.__class__}"),
    ("tarmix --rekey '{index.real}' mix.json -o out.tar", "{index.real}"),
    ("printf 'a\\n' | lines2tar --keyformat '{0.real}' -o out.tar", "{0.real}"),
    ("printf 'a\\n' | lines2tar --keyformat '{0[0]}' -o out.tar", "{0[0]}"),
    ("tarsplit -n 1 -o 'out-{shard.real}.tar' a.tar", "{shard.real}"),
    ("tarsplit -n 1 -o 'out-{shard[0]}.tar' a.tar", "{shard[0]}"),
    ("tarcreate -k '{index.real}' plan.tsv -o out.tar", "{index.real}"),
    ("tarcreate -k '{index:s}' plan.tsv -o out.tar", "{index:s}"),
]


@pytest.mark.parametrize("cmd, shown", CASES)
def test_format_options_are_checked_when_parsed(sh, tmp_path, cmd, shown):
    (tmp_path / "a.tar").write_bytes(tar_bytes([("s0.txt", b"a"), ("s1.txt", b"b")]))
    (tmp_path / "mix.json").write_text('{"sources": [{"shards": "a.tar"}]}')
    (tmp_path / "plan.tsv").write_text("txt\nhello\n")
    p = sh(cmd, ok=False)
    assert p.returncode == 2, (cmd, p.stderr)
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert shown in lines[0] and "internal error" not in lines[0], lines[0]
    assert not any(n.startswith("out") for n in (x.name for x in tmp_path.iterdir())), cmd


def test_good_format_options_still_work(sh, tmp_path):
    (tmp_path / "a.tar").write_bytes(tar_bytes([("s0.txt", b"a"), ("s1.txt", b"b")]))
    assert sh("tarcat --rekey 'x{index:03d}-{basename}' a.tar | tar tf -").stdout.split() == \
        [b"x000-s0.txt", b"x001-s1.txt"]
    sh("tarsplit -n 1 -o 'out-{shard:02d}.tar' a.tar")
    assert (tmp_path / "out-01.tar").exists()


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


def members(path):
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf]


@pytest.mark.parametrize("cmd, what", [
    ("tarsplit -n 2 -o 'x-{shard:0999999999}.tar' in.tar", "bad shard name pattern"),
    ("tarsplit -n 2 -o 'x-%0999999999d.tar' in.tar", "bad shard name pattern"),
    ("tarsplit -n 2 -o 'x-{shard:0{index}}.tar' in.tar", "bad shard name pattern"),
    ("tarcat --rekey '{key:>9999999999}' in.tar", "--rekey"),
    ("printf 'a\\n' | lines2tar --keyformat '{:.99999}'", "--keyformat"),
])
def test_huge_widths_in_name_patterns_are_refused(tmp_path, cmd, what):
    """A width in a name pattern was honoured: ``{shard:0999999999}`` built
    gigabyte names for every probe of the pattern (24 GB, then the OOM
    killer); now one line, exit 2, before any work."""
    (tmp_path / "in.tar").write_bytes(tar_of([(f"{i}.txt", b"x") for i in range(5)]))
    p = run(f"ulimit -v 2000000; {cmd}", tmp_path, timeout=30)
    assert p.returncode == 2, p.stderr
    line = one_line(p)
    assert what in line and ("is more than a name can hold (4096)" in line or "nested fields" in line), line
    assert not any(n.startswith("x-") for n in os.listdir(tmp_path))
