"""--on-bad-shard skip|partial given the same shard list gives the same
verdict in every reading command: the same lines about the bad shards and
the same summary (counts of shards and samples), the bytes of a run over the
good shards only when the bad shard is the last one, and, when every shard
is bad and nothing was read, exit 1 with that said and no output written."""

import subprocess

import pytest

from helpers import tar_bytes

COMMANDS = {
    "tarcat": "tarcat {list} -o out",
    "tarpcat": "tarpcat -w 1 {list} -o out",
    "tarproc": "tarproc -c true {list} -o out",
    "tarsort": "tarsort {list} -o out",
    "tarsplit": "tarsplit --shards 1 {list} -o out-%d.tar",
    "tar2json": "tar2json {list} > out",
    "tar2tsv": "tar2tsv {list} > out",
    "tarshow": "tarshow {list} > out",
}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("verdicts")
    for i in range(2):
        (d / f"good{i}.tar").write_bytes(tar_bytes([(f"s{i}/{j:04d}.{e}", f"{i} {j} {e} ".encode() * 40)
                                                   for j in range(5) for e in ("cls", "txt")]))
    (d / "trunc.tar").write_bytes((d / "good1.tar").read_bytes()[:5000])  # two samples, then a cut header
    return d


def run(cmd, cwd):
    for f in cwd.glob("out*"):
        f.unlink()
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=60)
    outs = sorted(cwd.glob("out*"))
    return p.returncode, p.stderr.decode().splitlines(), b"".join(f.read_bytes() for f in outs), len(outs)


def _unprefixed(lines, name):
    assert all(line.startswith(f"{name}: ") for line in lines), lines
    return [line[len(name) + 2:] for line in lines]


@pytest.mark.parametrize("policy", ["skip", "partial"])
def test_the_same_list_gives_the_same_lines_in_every_command(shards, policy):
    lines = {}
    for name, cmd in COMMANDS.items():
        rc, err, _, _ = run(cmd.format(list=f"--on-bad-shard {policy} --max-bad-shards 2 "
                                             "good0.tar trunc.tar missing.tar"), shards)
        assert rc == 0, (name, err)
        lines[name] = _unprefixed(err, name)
    first = lines["tarcat"]
    assert len(first) == 3 and first[2].startswith("2 of 3 shards bad")
    kept, dropped = (2, 0) if policy == "partial" else (0, 2)  # the two whole samples before the cut
    assert f"{dropped} dropped, {kept} kept" in first[2]
    assert all(v == first for v in lines.values()), lines


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_bad_last_shard_skipped_gives_the_bytes_of_the_good_ones(shards, name):
    cmd = COMMANDS[name]
    rc, err, good, _ = run(cmd.format(list="good0.tar"), shards)
    assert rc == 0, err
    rc, err, got, _ = run(cmd.format(list="--on-bad-shard skip --max-bad-shards 1 good0.tar trunc.tar"), shards)
    assert rc == 0, err
    if name == "tarshow":  # (its header names the shards it read)
        assert got.count(b"s0/") == good.count(b"s0/") and b"s1/" not in got
    else:
        assert got == good
    assert "1 of 2 shards bad" in err[-1]


@pytest.mark.parametrize("name", list(COMMANDS))
@pytest.mark.parametrize("bad", ["trunc.tar missing.tar", "missing.tar"])
@pytest.mark.parametrize("policy", ["skip", "partial"])
def test_every_shard_bad_and_nothing_read_is_a_failure_said_once(shards, name, bad, policy):
    rc, err, out, n = run(COMMANDS[name].format(list=f"--on-bad-shard {policy} --max-bad-shards 5 {bad}"), shards)
    if policy == "partial" and "trunc" in bad:  # two samples of trunc.tar were kept: not nothing
        assert rc == 0 and n >= 1 and "2 kept" in err[-1], err
        return
    assert rc == 1, err
    assert err[-1].startswith(f"{name}: every shard was bad and no sample was read: ")
    assert sum("shards bad" in line or "shard bad" in line for line in err) == 1, err
    assert out == b"" and (n == 0 or name in ("tar2json", "tar2tsv", "tarshow"))  # (> out: made by the shell)
