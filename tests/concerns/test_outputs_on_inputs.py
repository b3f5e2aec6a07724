"""Outputs that land on an input.  `-o` naming an input shard is an edited
copy (tarcat, tarsort, tarproc write it aside and replace the input when
complete); every other output that names a file the command reads destroyed
it: a key list (`--keys`, `--exclude-keys`) or file list (`-T`) overwritten
by `-o` or `--failed-keys`, an input shard overwritten by `--failed-keys` or
tarshow's `--grid` image.  Now: exit 2, one line, nothing touched (the
guard: tarproc.cli.base.open_inputs, where every command's inputs pass)."""

import os

import pytest

from helpers import one_line, run_pipefail
from helpers import text_shard as shard


@pytest.mark.parametrize("cmd, victim", [
    ("tarcat --keys k.txt a.tar -o k.txt", "k.txt"),
    ("tarcat --exclude-keys k.txt a.tar -o ./k.txt", "k.txt"),
    ("tarcat -T list.txt -o list.txt", "list.txt"),
    ("tarproc -c true --keys k.txt a.tar -o k.txt", "k.txt"),
    ("tarproc -c 'exit 1' -e ignore --failed-keys a.tar a.tar -o out.tar", "a.tar"),
    ("tarshow --grid a.tar a.tar", "a.tar"),
])
def test_an_output_naming_a_file_read_is_refused(cmd, victim, tmp_path):
    (tmp_path / "a.tar").write_bytes(shard(2, "s"))
    (tmp_path / "k.txt").write_text("s000\n")
    (tmp_path / "list.txt").write_text("a.tar\n")
    before = {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)}
    p = run_pipefail(cmd, tmp_path)
    assert p.returncode == 2, p.stderr
    assert f"{victim}: is also the output; writing it would destroy the input" in one_line(p)
    assert {f: (tmp_path / f).read_bytes() for f in os.listdir(tmp_path)} == before


def test_an_edited_copy_onto_its_input_is_still_allowed(tmp_path):
    (tmp_path / "a.tar").write_bytes(shard(3, "s"))
    (tmp_path / "k.txt").write_text("s001\n")
    p = run_pipefail("tarproc -c true --keys k.txt a.tar -o a.tar && tar tf a.tar", tmp_path)
    assert p.returncode == 0 and p.stdout == b"s001.txt\n", p.stderr
