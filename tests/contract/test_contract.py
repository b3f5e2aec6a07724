"""One contract for every console script in setup.cfg.

For each entry point: ``--help`` exits 0 and shows examples that use the
command; ``--version`` names it and the package version; as a filter it reads
stdin and writes stdout; empty input is fine; a truncated input is exit 2 with
one line on stderr; ``| head -c 100`` ends quietly.  How each command is
invoked as a filter is in CONTRACT below; a console script missing from it
fails ``test_every_console_script_has_a_contract``.
"""

import configparser
import importlib.util
import os
import re
import subprocess
import sys
import tarfile

import pytest

from conftest import ROOT
import make_corpus as M  # noqa: E402


def entry_points():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    out = {}
    for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines():
        name, _, target = (part.strip() for part in line.partition("="))
        out[name] = target.split(":")[0]
        FUNCTIONS[name] = target.split(":")[1]
    return out


FUNCTIONS = {}


ENTRY_POINTS = entry_points()

# name -> how it runs as a filter.
#   cmd:    the command line reading stdin
#   input:  "tar" (a shard on stdin), "plan" (tarcreate's text plan), "lines" (lines2tar's
#           KEY<TAB>CLS<TAB>TEXT lines) or None (not a filter)
#   output: "tar" (a shard on stdout), "text", or "files" (writes into the directory)
#   empty:  exit statuses accepted for empty input
#   bulky:  produces enough output for `| head -c 100` to close the pipe on it
TAR_FILTER = {"input": "tar", "output": "tar", "empty": {0}, "bulky": True}
CONTRACT = {
    "tarcat": dict(TAR_FILTER, cmd="tarcat"),
    "tarcats": dict(TAR_FILTER, cmd="tarcats"),
    "tarscat": dict(TAR_FILTER, cmd="tarscat"),
    "tarpcat": dict(TAR_FILTER, cmd="tarpcat -"),
    "tarsort": dict(TAR_FILTER, cmd="tarsort"),
    "tarproc": dict(TAR_FILTER, cmd="tarproc -c true"),
    "tarsplit": dict(input="tar", output="files", empty={0}, bulky=False, cmd="tarsplit -n 10 -o part"),
    "tarshow": dict(input="tar", output="text", empty={0}, bulky=True, cmd="tarshow"),
    "tar2tsv": dict(input="tar", output="text", empty={0}, bulky=True, cmd="tar2tsv -f cls"),
    "tarfirst": dict(input="tar", output="text", empty={1}, bulky=False, cmd="tarfirst -f cls"),
    "tarcheck": dict(input="tar", output="text", empty={0, 1}, bulky=False, cmd="tarcheck"),
    "tarcreate": dict(input="plan", output="tar", empty={0}, bulky=True, cmd="tarcreate -"),
    "tsv2tar": dict(input="plan", output="tar", empty={0}, bulky=True, cmd="tsv2tar -"),
    "kujob": dict(input=None, output=None, cmd="kujob"),
    "tarserve": dict(input=None, output=None, cmd="tarserve"),
    "tarreshard": dict(input=None, output=None, cmd="tarreshard"),  # a job driver: its tasks read files or URLs
    "lines2tar": dict(input="lines", output="tar", empty={0}, bulky=True, cmd="lines2tar -k '__key__ cls txt'"),
    "tar2json": dict(input="tar", output="text", empty={0}, bulky=True, cmd="tar2json -k cls"),
    "tarmix": dict(input=None, output=None, cmd="tarmix"),
    "tarindex": dict(input="tar", output="text", empty={0}, bulky=False, cmd="tarindex -q"),
    "tarjoin": dict(TAR_FILTER, cmd="tarjoin"),
}


def _built(name):
    return importlib.util.find_spec(ENTRY_POINTS[name]) is not None


BUILT = [name for name in ENTRY_POINTS if _built(name)]
NOT_BUILT = [name for name in ENTRY_POINTS if not _built(name)]
FILTERS = [n for n in BUILT if CONTRACT.get(n, {}).get("input")]


def shard(n):
    parts = []
    for i in range(n):
        parts.append(M.member(b"%06d.cls" % i, str(i % 10).encode()))
        parts.append(M.member(b"%06d.txt" % i, b"sample %d\n" % i))
    return b"".join(parts) + M.EOA


def plan(n):
    return "".join(f"{i:06d}.cls text:{i % 10}\n{i:06d}.txt text:sample-{i}\n" for i in range(n)).encode()


def lines(n):
    return "".join(f"{i:06d}\t{i % 10}\tsample {i}\n" for i in range(n)).encode()


def _input(spec, n):
    return {"tar": shard, "plan": plan, "lines": lines}[spec["input"]](n)


def run(cmd, tmp_path, data=b"", timeout=120):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    return subprocess.run(["bash", "-c", cmd], input=data, cwd=tmp_path, capture_output=True,
                          timeout=timeout, env=env)


def test_every_console_script_has_a_contract():
    assert set(ENTRY_POINTS) <= set(CONTRACT), set(ENTRY_POINTS) - set(CONTRACT)
    assert "tarcat" in BUILT


@pytest.mark.parametrize("name", BUILT)
def test_help_shows_examples(name, tmp_path):
    p = run(f"{name} --help", tmp_path)
    assert p.returncode == 0, p.stderr
    text = p.stdout.decode()
    assert p.stderr == b""
    assert text.startswith(f"Usage: {name} ")  # typer (click) help
    assert "examples:" in text, f"{name} --help has no examples"
    examples = text.split("examples:", 1)[1]
    assert re.search(r"\b(tar\w+|tsv2tar|kujob)\b", examples)
    # the help of one command is not an error, and does not import the heavy modules
    code = (f"import io, sys; sys.argv = [{name!r}, '--help']; sys.stdout = io.StringIO()\n"
            f"import {ENTRY_POINTS[name]} as m\n"
            f"try:\n    m.{FUNCTIONS[name]}()\nexcept SystemExit:\n    pass\n"
            "heavy = [x for x in ('numpy', 'PIL', 'multiprocess', 'multiprocessing', 'rich', 'pydantic') if x in sys.modules]\n"
            "print(heavy, file=sys.stderr)")
    q = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert q.stderr.decode().strip().splitlines()[-1] == "[]", q.stderr.decode()


@pytest.mark.parametrize("name", BUILT)
def test_version(name, tmp_path):
    p = run(f"{name} --version", tmp_path)
    assert p.returncode == 0, p.stderr
    assert re.match(rf"{re.escape(name)} \(tarproc\) \d+\.\d+", p.stdout.decode()), p.stdout


@pytest.mark.parametrize("name", FILTERS)
def test_stdin_to_stdout(name, tmp_path):
    spec = CONTRACT[name]
    p = run(spec["cmd"] + " > out", tmp_path, _input(spec, 5))
    assert p.returncode == 0, p.stderr
    assert b"Traceback" not in p.stderr
    if spec["output"] == "tar":
        with tarfile.open(tmp_path / "out") as tf:
            got = {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}
        assert got["000003.cls"] == b"3"
        assert len({k.split(".")[0] for k in got}) == 5
    elif spec["output"] == "text":
        assert (tmp_path / "out").stat().st_size > 0
    else:
        parts = sorted(f for f in os.listdir(tmp_path) if f.startswith("part"))
        assert parts
        with tarfile.open(tmp_path / parts[0]) as tf:
            assert len([m for m in tf if m.isfile()]) == 10


@pytest.mark.parametrize("name", FILTERS)
def test_empty_input(name, tmp_path):
    spec = CONTRACT[name]
    p = run(spec["cmd"] + " > out", tmp_path, b"")
    assert p.returncode in spec["empty"], p.stderr
    assert b"Traceback" not in p.stderr
    if spec["output"] == "tar" and p.returncode == 0:
        with tarfile.open(tmp_path / "out") as tf:
            assert [m for m in tf] == []


@pytest.mark.parametrize("name", FILTERS)
def test_truncated_input(name, tmp_path):
    spec = CONTRACT[name]
    if spec["input"] == "tar":
        data = shard(5)[:2348]  # inside a header (a cut in member data after a whole sample gives that sample first)
    elif spec["input"] == "lines":
        data = lines(5)[:40]  # the second line cut off inside its fields
    else:
        data = b"000000.cls text:1\n000000.txt\n"  # a plan line cut off before its source
    p = run(spec["cmd"] + " > out", tmp_path, data)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(name + ":"), err
    assert not any(f.startswith("part") for f in os.listdir(tmp_path))


@pytest.mark.parametrize("name", [n for n in FILTERS if CONTRACT[n]["bulky"]])
def test_head_ends_quietly(name, tmp_path):
    spec = CONTRACT[name]
    p = run(spec["cmd"] + " | head -c 100 > out; echo ${PIPESTATUS[0]} > rc", tmp_path, _input(spec, 3000))
    assert p.stderr == b"", p.stderr.decode(errors="replace")
    assert int((tmp_path / "rc").read_text()) in (0, 141)
    assert (tmp_path / "out").stat().st_size == 100
