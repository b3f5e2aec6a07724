"""Every command that reads a file and writes stdout refuses to read the
file its stdout is (`cmd in.tar > in.tar`: the shell has emptied it;
`>> in.tar`: it would read its own output), as GNU cat does: exit 2, one
line saying "input file is output file", nothing written.  The guard is
applied where every command gets its inputs (tarproc.cli.base.open_inputs),
so a console script added later is covered; this test walks setup.cfg."""

import configparser
import os

import pytest

from conftest import ROOT
from helpers import tar_bytes

# command -> (the file read, a command line reading it and writing stdout)
READERS = {
    "tarcat": ("v.tar", "tarcat v.tar"),
    "tarcats": ("v.tar", "tarcats v.tar"),
    "tarscat": ("v.tar", "tarscat v.tar"),
    "tarpcat": ("v.tar", "tarpcat v.tar"),
    "tarsort": ("v.tar", "tarsort v.tar"),
    "tarshow": ("v.tar", "tarshow v.tar"),
    "tar2tsv": ("v.tar", "tar2tsv -f txt v.tar"),
    "tar2json": ("v.tar", "tar2json v.tar"),
    "tarfirst": ("v.tar", "tarfirst -f txt v.tar"),
    "tarjoin": ("v.tar", "tarjoin v.tar other.tar --how inner"),
    "tarcheck": ("v.tar", "tarcheck v.tar"),
    "tarindex": ("v.tar", "tarindex v.tar"),
    "tarproc": ("v.tar", "tarproc -c true v.tar"),
    "tarcreate": ("plan.txt", "tarcreate plan.txt"),
    "tsv2tar": ("plan.txt", "tsv2tar plan.txt"),
    "lines2tar": ("lines.txt", "lines2tar lines.txt"),
    "tarmix": ("mix.json", "tarmix mix.json"),
}
# more ways of reading a file, for commands with several
MORE = [
    ("v.tar", "tarproc -p 2 --map f.py:f v.tar"),
    ("v.tar", "tarproc -e abort -c true v.tar"),
    ("lines.txt", "tarproc --mode lines -c true lines.txt"),
    ("fail.sh", "tarproc -s fail.sh v.tar"),
    ("v.tar", "tarcat other.tar v.tar"),  # not the first input
    ("v.tar", "tarmix shards.json"),  # a shard named by the mix
    ("a.txt", "tarcreate plan.txt"),  # a file named by the plan
    ("v.tar", "tarcat < v.tar"),  # stdin is the file (`>>` would read its own output forever)
    ("v.tar", "tarproc -c true < v.tar"),
]
# commands that do not write what they read to stdout
NOT_READERS = {
    "tarsplit": "writes shards to files named by -o, never to stdout",
    "kujob": "runs jobs; reads no data file",
    "tarserve": "a server: writes to its clients",
}


def _console_scripts():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    return sorted(line.partition("=")[0].strip() for line in lines)


def test_every_command_is_listed():
    assert sorted(list(READERS) + list(NOT_READERS)) == _console_scripts()


def _files(tmp_path):
    (tmp_path / "v.tar").write_bytes(tar_bytes([(f"{i}.txt", b"text %d" % i) for i in range(3)]))
    (tmp_path / "other.tar").write_bytes(tar_bytes([("o.txt", b"other")]))
    (tmp_path / "a.txt").write_bytes(b"hello")
    (tmp_path / "plan.txt").write_text("0.txt file:a.txt\n")
    (tmp_path / "lines.txt").write_text("one\ntwo\n")
    (tmp_path / "mix.json").write_text('{"sources": [{"shards": "other.tar"}]}\n')
    (tmp_path / "shards.json").write_text('{"sources": [{"shards": "v.tar"}]}\n')
    (tmp_path / "f.py").write_text("def f(s):\n    return s\n")
    (tmp_path / "fail.sh").write_text("true\n")


@pytest.mark.parametrize("victim,cmd", list(READERS.values()) + MORE, ids=[c for _, c in READERS.values()] +
                         [c for _, c in MORE])
def test_reading_its_own_stdout_is_refused(sh, tmp_path, victim, cmd):
    _files(tmp_path)
    before = (tmp_path / victim).read_bytes()
    p = sh(f"{cmd} >> {victim}", ok=False)
    err = p.stderr.decode().splitlines()
    named = "stdin" if "<" in cmd else victim
    assert p.returncode == 2 and len(err) == 1 and "input file is output file" in err[0] and named in err[0], \
        (cmd, p.returncode, err)
    assert (tmp_path / victim).read_bytes() == before  # nothing was appended


@pytest.mark.parametrize("victim,cmd", [READERS["tarproc"], READERS["tar2tsv"], MORE[0], READERS["tarcreate"]],
                         ids=["tarproc", "tar2tsv", "tarproc --map", "tarcreate"])
def test_truncated_by_the_shell_is_refused(sh, tmp_path, victim, cmd):
    """`>` (the shell empties it first): refused, not read as an empty input
    (tarproc -c true v.tar > v.tar left a 1,024-byte archive), nothing written."""
    _files(tmp_path)
    p = sh(f"{cmd} > {victim}", ok=False)
    assert p.returncode == 2 and b"input file is output file" in p.stderr, (cmd, p.stderr)
    assert (tmp_path / victim).read_bytes() == b""


def test_other_outputs_still_work(sh, tmp_path):
    """The guard compares the file itself: a copy, a symlink's target
    written through -o, /dev/null, a pipe are fine."""
    _files(tmp_path)
    sh("cp v.tar copy.tar && tarproc -c true v.tar > copy.tar && tarcat v.tar > /dev/null && "
       "tarproc -c true v.tar | tarcat > out.tar && tarcat -o v2.tar v.tar && tarcat v2.tar >> copy2.tar")
    assert (tmp_path / "copy.tar").read_bytes()[:5] == b"0.txt"
