"""Every command that reads a file and writes stdout refuses to read the
file its stdout is (`cmd in.tar > in.tar`: the shell has emptied it;
`>> in.tar`: it would read its own output), as GNU cat does: exit 2, one
line saying "input file is output file", nothing written.  The guard is
applied where every command gets its inputs (tarproc.cli.base.open_inputs),
so a console script added later is covered; this test walks setup.cfg."""

import configparser
import os
import subprocess
import tarfile

import pytest

from conftest import ROOT
from helpers import one_line, tar_bytes
from helpers import text_shard as shard
import make_corpus as M

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
    "tarreshard": "writes shards to files named by -o, never to stdout (outputs named like inputs: test_tarreshard)",
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


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


@pytest.mark.parametrize("cmd, victim", [
    ("lines2tar l.txt -o l.txt", "l.txt"),
    ("lines2tar a.txt l.txt -o ./l.txt", "l.txt"),
    ("tarindex a.tar b.tar -o b.tar", "b.tar"),
    ("tarindex a.tar --offsets a.tar -o index.json", "a.tar"),
    ("tarmix mix.json -o mix.json", "mix.json"),
])
def test_output_naming_an_input_of_another_kind_is_refused(cmd, victim, tmp_path):
    """`-o` naming the input replaced a text file, a shard or the mix spec
    with the output, exit 0: the input was gone (and an index pointed into a
    file that no longer existed).  Now: exit 2, one line, nothing touched."""
    (tmp_path / "a.tar").write_bytes(shard(2, "a"))
    (tmp_path / "b.tar").write_bytes(shard(2, "b"))
    (tmp_path / "l.txt").write_text("x\ny\n")
    (tmp_path / "a.txt").write_text("z\n")
    (tmp_path / "mix.json").write_text('{"sources": [{"shards": "a.tar"}]}')
    before = {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)}
    p = run(cmd, tmp_path)
    assert p.returncode == 2, p.stderr
    assert f"{victim}: is also the output" in one_line(p)
    assert {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)} == before
    # an output that is a symbolic link to the input replaces the link, not the input: allowed
    (tmp_path / "link").symlink_to(victim)
    p = run(cmd.replace(f"-o {victim}", "-o link").replace(f"-o ./{victim}", "-o link")
            .replace(f"--offsets {victim}", "--offsets link"), tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / victim).read_bytes() == before[victim]


plain_shard = M.plain_shard


def members(path):
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf if m.isfile()]


def test_output_onto_its_own_input_keeps_every_sample(tmp_path):
    (tmp_path / "a.tar").write_bytes(plain_shard(300, size=3000))
    before = members(tmp_path / "a.tar")
    p = run("tarcat a.tar -o a.tar && tarsort --memory 100KB -r a.tar -o a.tar && tarsort --memory 100KB a.tar -o a.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(members(tmp_path / "a.tar")) == sorted(before)
    assert sorted(os.listdir(tmp_path)) == ["a.tar"]


@pytest.mark.parametrize("cmd", ["tarcat a.tar", "tarshow a.tar", "tar2tsv a.tar", "tarsort a.tar"])
def test_stdout_onto_its_own_input_is_refused(tmp_path, cmd):
    """`tarcat a.tar >> a.tar` would read its own output forever: refused
    with one line, as GNU cat does, and the input is left as it was."""
    (tmp_path / "a.tar").write_bytes(plain_shard(20))
    before = (tmp_path / "a.tar").read_bytes()
    p = run(f"{cmd} >> a.tar", tmp_path, timeout=30)
    err = p.stderr.decode() if isinstance(p.stderr, bytes) else p.stderr
    assert p.returncode == 2 and err.count("\n") == 1, err
    assert "a.tar: input file is output file" in err
    assert (tmp_path / "a.tar").read_bytes() == before
