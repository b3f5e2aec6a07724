"""--on-bad-shard fail|skip|partial and --max-bad-shards N: damaged, missing,
truncated and badly compressed shards in a shard list, through the installed
commands in real pipes; outputs read back with tarfile and compared with a
run over the good shards only."""

import gzip
import io
import os
import subprocess
import sys
import tarfile

import pytest

from conftest import REALDATA, ROOT

# beside ../shared/realdata, found as conftest finds it (a clone of a local checkout too)
FOREIGN = os.path.join(os.path.dirname(REALDATA), "foreign", "make_foreign.py")


def _shard(path, i, n=5):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for j in range(n):
            for ext in ("cls", "txt"):
                data = f"shard {i} sample {j} {ext} ".encode() * 40
                info = tarfile.TarInfo(f"s{i}/{j:04d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """good0..good3, and damaged copies: truncated, garbage at a header,
    a damaged gzip stream; 'missing.tar' does not exist."""
    d = tmp_path_factory.mktemp("bad")
    for i in range(4):
        _shard(d / f"good{i}.tar", i)
    data = (d / "good1.tar").read_bytes()
    (d / "trunc1.tar").write_bytes(data[:5000])  # cut in the third sample
    with tarfile.open(d / "good2.tar") as t:
        offset = t.getmembers()[6].offset  # the header of sample 3
    bad = bytearray((d / "good2.tar").read_bytes())
    bad[offset : offset + 64] = b"X" * 64
    (d / "garb2.tar").write_bytes(bytes(bad))
    z = bytearray(gzip.compress((d / "good3.tar").read_bytes(), mtime=0))
    z[len(z) // 2] ^= 0xFF
    (d / "badgz3.tar.gz").write_bytes(bytes(z))
    return d


ALL = "good0.tar trunc1.tar missing.tar garb2.tar badgz3.tar.gz good3.tar"


def run(cmd, cwd, input=None):
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, capture_output=True, input=input,
                          timeout=120)


def members(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return [(m.name, t.extractfile(m).read()) for m in t.getmembers()]


def test_default_is_strict(shards):
    p = run(f"tarcat {ALL}", shards)
    assert p.returncode == 2
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "trunc1.tar" in lines[0]


@pytest.mark.parametrize("cmd", ["tarcat", "tarpcat -w 1", "tarproc -c true", "tarsort"])
def test_skip_gives_the_bytes_of_the_good_shards(shards, cmd):
    good = run(f"{cmd} good0.tar good3.tar", shards)
    assert good.returncode == 0
    p = run(f"{cmd} --on-bad-shard skip --max-bad-shards 4 {ALL} | cat", shards)
    assert p.returncode == 0, p.stderr
    assert p.stdout == good.stdout
    err = p.stderr.decode().strip().splitlines()
    bad = [line for line in err if "bad shard skipped" in line]
    for name in ("trunc1.tar", "missing.tar", "garb2.tar", "badgz3.tar.gz"):
        assert sum(name in line for line in bad) == 1, err
    assert "offset" in next(line for line in bad if "garb2.tar" in line)
    assert "offset 4608" in next(line for line in bad if "trunc1.tar" in line)
    assert "(1 sample read from it dropped)" in next(line for line in bad if "trunc1.tar" in line)
    assert "4 of 6 shards bad and skipped" in err[-1]


def test_exit_1_without_max_bad_shards_and_no_file_output(shards, tmp_path):
    out = tmp_path / "out.tar"
    p = run(f"tarcat --on-bad-shard skip {ALL} -o {out}", shards)
    assert p.returncode == 1
    assert not out.exists()  # an output exists only when its command succeeded
    # the first bad shard spends the allowance (none): the run stops there, the rest unread
    last = p.stderr.splitlines()[-1]
    assert b"1 shard bad and skipped" in last and b"stopped there, the shards after it not read" in last, last
    assert len([line for line in p.stderr.splitlines() if b"bad shard skipped" in line]) == 1
    p = run(f"tarcat --on-bad-shard skip --max-bad-shards 3 {ALL} -o {out}", shards)
    assert p.returncode == 1 and not out.exists()
    assert b"4 shards bad and skipped" in p.stderr.splitlines()[-1]
    p = run(f"tarcat --on-bad-shard skip --max-bad-shards 4 {ALL} -o {out}", shards)
    assert p.returncode == 0 and out.exists()


def test_partial_keeps_what_was_read_before_the_damage(shards):
    p = run(f"tarcat --on-bad-shard partial --max-bad-shards 4 {ALL}", shards)
    assert p.returncode == 0, p.stderr
    names = [n for n, _ in members(p.stdout)]
    keys = sorted({n.split(".")[0] for n in names})
    assert "s1/0000" in keys and "s2/0000" in keys  # read before the damage: kept
    assert "s2/0004" not in keys and "s1/0004" not in keys
    assert [k for k in keys if k.startswith("s0/")] == [f"s0/{j:04d}" for j in range(5)]
    line = next(x for x in p.stderr.decode().splitlines() if "garb2.tar" in x)
    # issue 40: not "bad shard skipped ... (N samples read from it, kept)"
    assert line.startswith("tarcat: bad shard cut short: garb2.tar") and "read before the damage kept, the rest skipped" in line, line
    assert "4 of 6 shards bad and cut short" in p.stderr.decode().splitlines()[-1]
    # the same with the parallel reader (one worker: the same order)
    q = run(f"tarpcat -w 1 --on-bad-shard partial --max-bad-shards 4 {ALL}", shards)
    assert q.returncode == 0 and q.stdout == p.stdout


def test_every_reading_command_has_the_options(shards):
    for cmd in ("tarcat", "tarpcat", "tarproc", "tarsplit", "tarsort", "tarshow", "tar2tsv", "tar2json", "tarfirst",
                "tarmix"):
        p = run(f"{cmd} --help", shards)
        assert b"--on-bad-shard" in p.stdout and b"--max-bad-shards" in p.stdout, cmd
    assert b"--on-bad-shard" in run("tarserve --help", shards).stdout
    p = run("tarfirst -f txt missing.tar good0.tar", shards)
    assert p.returncode == 2 and p.stdout == b""
    p = run("tarfirst --on-bad-shard skip --max-bad-shards 1 -f txt missing.tar good0.tar", shards)
    assert p.returncode == 0 and p.stdout.startswith(b"shard 0 sample 0 txt")
    p = run("tarcat --max-bad-shards 2 good0.tar", shards)
    assert p.returncode == 2 and b"--on-bad-shard" in p.stderr
    p = run("tarcat --on-bad-shard maybe good0.tar", shards)
    assert p.returncode == 2


def test_text_commands_and_tarsplit(shards, tmp_path):
    p = run(f"tar2tsv --on-bad-shard skip --max-bad-shards 4 -f cls {ALL}", shards)
    q = run("tar2tsv -f cls good0.tar good3.tar", shards)
    assert p.returncode == 0 and p.stdout == q.stdout
    p = run(f"tarsplit --on-bad-shard skip -n 3 -o {tmp_path}/part {ALL}", shards)
    assert p.returncode == 1  # more bad shards than allowed (the shards it closed are complete)
    assert all(len(members(f.read_bytes())) % 2 == 0 for f in tmp_path.glob("part-*.tar"))
    p = run(f"tarsplit --on-bad-shard skip --max-bad-shards 4 --shards 2 -o {tmp_path}/part-%d.tar {ALL}",
            shards)
    assert p.returncode == 0, p.stderr
    got = b"".join((tmp_path / f"part-{i}.tar").read_bytes()[:-1024] for i in range(2))
    assert [n for n, _ in members(got + bytes(1024))] == [n for n, _ in members(run(
        "tarcat good0.tar good3.tar", shards).stdout)]


def test_a_long_shard_is_held_in_a_file_not_in_memory(tmp_path):
    """The hold of policy 'skip' past its memory budget: the same samples
    in the same order, large fields included; a broken shard's hold is
    dropped."""
    import tarproc
    from tarproc.core.blob import Spooler
    from tarproc.sources.badshards import BadShards, Hold

    big = os.urandom(300_000)
    with tarfile.open(tmp_path / "a.tar", "w", format=tarfile.USTAR_FORMAT) as t:
        for j in range(40):
            for ext, data in (("bin", big if j % 7 == 0 else b"x" * j), ("cls", str(j).encode())):
                info = tarfile.TarInfo(f"{j:03d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    spooler = Spooler(threshold=100_000, tmpdir=str(tmp_path))
    want = [dict(s) for s in tarproc.iter_samples(str(tmp_path / "a.tar"), spooler=spooler)]
    hold = Hold(spooler, memory=5000, blobs=2)
    piped = f"pipe:cat {tmp_path / 'a.tar'}"  # large fields in spool files (from a file: regions of it)
    for s in tarproc.iter_samples(piped, spooler=spooler):
        hold.add(s)
    assert hold.file is not None and 0 < len(hold.samples) < 40 and hold.size <= 5000
    assert hold.mem_blobs + hold.spooled == 2  # the rest were copied into the hold's file
    got = list(hold.drain())
    assert [s["__key__"] for s in got] == [s["__key__"] for s in want]
    assert all(bytes(g["bin"]) == bytes(w["bin"]) and g["cls"] == w["cls"] for g, w in zip(got, want))
    # the API: a damaged shard between good ones, skipped and recorded
    (tmp_path / "b.tar").write_bytes((tmp_path / "a.tar").read_bytes()[:200_000])
    bad = BadShards("skip", max_bad=1)
    keys = [s["__key__"] for s in tarproc.iter_samples([str(tmp_path / "b.tar"), str(tmp_path / "a.tar")],
                                                       on_bad_shard=bad)]
    assert keys == [s["__key__"] for s in want]
    assert bad.count == 1 and bad.shards[0].url.endswith("b.tar") and not bad.shards[0].kept
    from tarproc.errors import TooManyBadShards

    with pytest.raises(TooManyBadShards):
        list(tarproc.iter_samples([str(tmp_path / "b.tar"), "/nonexistent.tar"], on_bad_shard=BadShards("skip", 1)))


def test_foreign_shards(tmp_path):
    """Shards written by GNU tar, bsdtar, tarfile, webdataset: the good ones
    read whole, truncated copies skipped."""
    d = tmp_path / "f"
    subprocess.run([sys.executable, FOREIGN, "-o", str(d), "-n", "6"], check=True, capture_output=True,
                   timeout=120)
    names = sorted(p.name for p in d.glob("*.tar"))
    assert "gnutar-gnu.tar" in names and "tarfile-pax.tar" in names
    for name in names:
        data = (d / name).read_bytes()
        (d / f"cut-{name}").write_bytes(data[: len(data) // 2 + 100])
    listed = " ".join(f"f/{n} f/cut-{n}" for n in names)
    p = run(f"tarcat --on-bad-shard skip --max-bad-shards {len(names)} {listed}", tmp_path)
    assert p.returncode == 0, p.stderr
    good = run("tarcat " + " ".join(f"f/{n}" for n in names), tmp_path)
    assert p.stdout == good.stdout and len(members(p.stdout)) == 18 * len(names)
    assert p.stderr.decode().count("bad shard skipped") == len(names)


def test_tarserve_serves_a_bad_shard_as_asked(shards, tmp_path):
    """tarserve: a damaged shard fails its response by default; with
    'partial' the response is the samples before the damage, with 'skip'
    an empty tar, both complete archives."""
    import http.client
    import urllib.error
    import urllib.request

    import tarproc

    def get(url):
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, b""
        except (urllib.error.URLError, OSError, http.client.HTTPException):  # cut: the failed response
            return None, b""

    want = run("tarcat --on-bad-shard partial --max-bad-shards 1 garb2.tar", shards).stdout
    for policy, expect in (("partial", want), ("skip", bytes(1024))):
        with tarproc.serve(str(shards), port=0, background=True, quiet=True, on_bad_shard=policy) as server:
            status, body = get(server.url + "garb2.tar")
            assert status == 200 and body == expect, policy
            assert members(get(server.url + "good0.tar")[1]) == members((shards / "good0.tar").read_bytes())
    with tarproc.serve(str(shards), port=0, background=True, quiet=True) as server:
        status, body = get(server.url + "garb2.tar")
        assert status is None or status >= 500  # the default: a failed response


def test_tarmix_skips_bad_shards_of_a_source(shards):
    spec = ("sources:\n  - shards: 'good0.tar'\n    weight: 1\n    nrepeats: 10\n"
            "  - shards: '{garb2,trunc1,good3}.tar'\n    weight: 1\n")
    (shards / "mix.yaml").write_text(spec)
    p = run("tarmix --seed 1 --rekey '{index:04d}' mix.yaml > /dev/null", shards)
    assert p.returncode == 2 and p.stderr.count(b"\n") == 1 and b"garb2.tar: offset" in p.stderr
    p = run("tarmix --seed 1 --rekey '{index:04d}' --on-bad-shard skip --max-bad-shards 2 mix.yaml", shards)
    assert p.returncode == 0, p.stderr
    got = [d for n, d in members(p.stdout)]
    assert b"".join(got).count(b"shard 3 sample") and not b"".join(got).count(b"shard 2 sample")
    assert p.stderr.decode().count("bad shard skipped") == 2
    p = run("tarmix --seed 1 --rekey '{index:04d}' --on-bad-shard skip mix.yaml > /dev/null", shards)
    assert p.returncode == 1


def test_a_run_that_stops_early_counts_the_bad_shards_it_met(shards):
    for cmd in ("tarcat -c 3", "tarpcat -w 1 -c 3", "tarproc --count 3 -c true", "tar2tsv -c 3 -f txt"):
        p = run(f"{cmd} --on-bad-shard skip missing.tar good0.tar good1.tar > /dev/null", shards)
        assert p.returncode == 1, (cmd, p.stderr)
        p = run(f"{cmd} --on-bad-shard skip --max-bad-shards 1 missing.tar good0.tar good1.tar > /dev/null", shards)
        assert p.returncode == 0, (cmd, p.stderr)
        assert p.stderr.decode().splitlines()[-1].endswith("allowed by --max-bad-shards): missing.tar"), cmd


def test_partial_streams_and_skip_holds_until_the_shard_ends(shards):
    """With 'partial' a sample comes out while its shard is still arriving;
    with 'skip' only when the shard has ended (it could still break)."""
    import select

    data = (shards / "good0.tar").read_bytes()
    with tarfile.open(shards / "good0.tar") as t:
        upto = t.getmembers()[3].offset  # samples 0 and the first member of 1: sample 0 is complete
    for policy, comes_out in (("partial", True), ("skip", False)):
        p = subprocess.Popen(["tarcat", "--on-bad-shard", policy], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            p.stdin.write(data[: upto + 512])
            p.stdin.flush()
            ready = select.select([p.stdout], [], [], 5 if comes_out else 1.5)[0]
            if comes_out:
                assert ready and os.read(p.stdout.fileno(), 512)[:9] == b"s0/0000.c"
            else:
                assert not ready
            p.stdin.write(data[upto + 512 :])
            p.stdin.close()
            rest = p.stdout.read()
            assert p.wait(timeout=60) == 0
            if not comes_out:
                assert members(rest) == members(data)
        finally:
            p.kill()
            p.wait()
