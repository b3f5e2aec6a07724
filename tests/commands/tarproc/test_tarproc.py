"""tarproc: the installed command in real pipes; outputs read with tarfile / GNU tar / Pillow."""

import io
import os
import re
import select
import signal
import stat
import subprocess
import sys
import tarfile
import time

import pytest

from conftest import require
from helpers import jpeg_bytes, png_bytes, read_tar, samples_of, tar_bytes
from helpers import text_shard as shard
import make_corpus


def text_shard(n, prefix=""):
    return tar_bytes([(f"{prefix}{i:04d}.txt", f"text {i}\n".encode()) for i in range(n)])


def write(tmp_path, name, data):
    (tmp_path / name).write_bytes(data)


def keys_of(data):
    return list(samples_of(data))


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------- the examples


def test_gm_mogrify_example(sh, tmp_path):
    require("gm")
    from PIL import Image

    members = []
    for i in range(6):
        members.append((f"img{i:03d}.jpg", jpeg_bytes(400, 300, seed=i)))
        members.append((f"img{i:03d}.cls", str(i).encode()))
    write(tmp_path, "small.tar", tar_bytes(members))
    # The command verbatim: GraphicsMagick applies options only to the
    # files after them, so it re-encodes the JPEGs but leaves their size.
    sh("tarproc -p 5 -c 'gm mogrify -size 256x256 *.jpg -resize 256x256' small.tar > same.tar")
    same = samples_of((tmp_path / "same.tar").read_bytes())
    assert [Image.open(io.BytesIO(s["jpg"])).size for s in same.values()] == [(400, 300)] * 6
    # With the options first, every image is resized to fit 256x256.
    sh("tarproc -p 5 -c 'gm mogrify -size 256x256 -resize 256x256 *.jpg' small.tar > out.tar")
    out = samples_of((tmp_path / "out.tar").read_bytes())
    assert list(out) == [f"img{i:03d}" for i in range(6)]
    for i, (key, sample) in enumerate(out.items()):
        img = Image.open(io.BytesIO(sample["jpg"]))
        assert img.format == "JPEG"
        assert max(img.size) == 256 and img.size == (256, 192)
        assert sample["cls"] == str(i).encode()
    assert "tar" in sh("tar tvf out.tar | head -1; echo tar").stdout.decode()


def test_gsutil_example_with_local_file(sh, tmp_path):
    require("gm")
    write(tmp_path, "scans-0042.tar", tar_bytes([(f"s{i}.png", png_bytes(20 + i, 10, seed=i)) for i in range(4)]))
    sh("cat scans-0042.tar | tarproc -p 2 -c 'for f in *.png; do gm identify -format \"%w %h\" \"$f\" > sample.txt; done' "
       "-o ocr-0042.tar")
    out = samples_of((tmp_path / "ocr-0042.tar").read_bytes())
    assert [s["txt"].split() for s in out.values()] == [[str(20 + i).encode(), b"10"] for i in range(4)]
    assert not [n for n in os.listdir(tmp_path) if "partial" in n]


def test_add_change_remove_fields(sh, tmp_path):
    write(tmp_path, "in.tar", tar_bytes([(f"{i:04d}.{ext}", data) for i in range(3)
                                         for ext, data in (("png", png_bytes(seed=i)), ("txt", b"t%d" % i))]))
    out = samples_of(sh("tarproc -c 'cp sample.txt sample.x.txt' in.tar").stdout)
    assert all(set(s) == {"png", "txt", "x.txt"} and s["x.txt"] == s["txt"] for s in out.values())
    out = samples_of(sh("tarproc -c 'touch sample.foo' in.tar").stdout)
    assert all(s["foo"] == b"" for s in out.values()) and len(out) == 3
    out = samples_of(sh("tarproc -c 'rm sample.png' in.tar").stdout)
    assert list(out) == ["0000", "0001", "0002"] and all(set(s) == {"txt"} for s in out.values())
    # -b: another base name; files not named base.* are not collected
    p = sh("tarproc -b item -c 'cat item.txt item.txt > item.two; echo x > other.txt' in.tar", stderr_ok=True)
    out = samples_of(p.stdout)
    assert out["0001"]["two"] == b"t1t1" and "txt" in out["0001"]
    assert "left 'other.txt', not collected: only files named item.* are outputs" in p.stderr.decode()


# ---------------------------------------------------------------- several outputs


def test_subdirs_and_multi(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(3))
    cmd = ('mkdir a b; cp sample.txt a/sample.txt; echo B > b/sample.txt; '
           'echo "$(cat sample.__key__)-bee" > b/sample.__key__; mkdir empty')
    out = samples_of(sh(f"tarproc -S -c '{cmd}' in.tar").stdout)
    assert list(out) == ["0000/a", "0000-bee", "0001/a", "0001-bee", "0002/a", "0002-bee"]
    assert out["0001/a"]["txt"] == b"text 1\n" and out["0002-bee"]["txt"] == b"B\n"
    out = samples_of(sh("tarproc -m -c 'for i in 0 1 2 10; do echo $i > sample-$i.txt; done' in.tar").stdout)
    assert list(out)[:5] == ["0000-0", "0000-1", "0000-2", "0000-10", "0001-0"]
    assert len(out) == 12 and out["0002-10"]["txt"] == b"10\n"


def test_duplicate_output_keys_fail_naming_the_key(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(2))
    p = sh("tarproc -S -c 'mkdir a b; echo x > a/sample.t; echo y > b/sample.t; echo same > a/sample.__key__; "
           "echo same > b/sample.__key__' in.tar > out.tar", ok=False)
    assert p.returncode == 1
    assert b"same key 'same'" in p.stderr and b"failed 1" in p.stderr
    assert (tmp_path / "out.tar").read_bytes() == b""  # a failed run on stdout: not even an end marker


# ---------------------------------------------------------------- errors


FAIL3 = "if [ $(cat sample.__key__) = 0003 ]; then echo oops; echo line2 >&2; exit 3; fi; echo ok > sample.out"


def test_error_skip(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(6))
    p = sh(f"tarproc -p 3 --max-failures 1% -c '{FAIL3}' in.tar > out.tar", ok=False)  # checked at the end
    assert p.returncode == 1
    err = p.stderr.decode()
    assert "'0003'" in err and "exit status 3" in err and "oops" in err and "line2" in err
    assert "samples read 6, written 5, skipped 0, failed 1" in err
    out = samples_of((tmp_path / "out.tar").read_bytes())
    assert list(out) == ["0000", "0001", "0002", "0004", "0005"] and out["0004"]["out"] == b"ok\n"


def test_error_ignore(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(6))
    p = sh(f"tarproc -e ignore -p 3 -c '{FAIL3}' in.tar > out.tar", ok=False)
    assert p.returncode == 0 and b"exit status 3" in p.stderr  # ignore: failures allowed, reported
    out = samples_of((tmp_path / "out.tar").read_bytes())
    assert list(out) == [f"{i:04d}" for i in range(6)]
    assert set(out["0003"]) == {"txt"} and out["0002"]["out"] == b"ok\n"


def test_error_abort_commits_nothing(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(40))
    p = sh(f"tarproc -e abort -p 4 -c '{FAIL3}' in.tar -o out.tar", ok=False)
    assert p.returncode == 1
    assert b"'0003'" in p.stderr and b"abort" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.tar"]  # no out.tar, no temporary file
    # on stdout (a stream, nothing to retract) the samples before it are written
    p = sh(f"tarproc -e abort -p 4 -c '{FAIL3}' in.tar > out.tar", ok=False)
    assert p.returncode == 1 and keys_of((tmp_path / "out.tar").read_bytes()) == ["0000", "0001", "0002"]


def test_timeout_kills_the_process_group(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(3))
    wd = tmp_path / "wd"
    wd.mkdir()
    cmd = (f"if [ $(cat sample.__key__) = 0001 ]; then sleep 300 & echo $! > {tmp_path}/bg.pid; "
           "echo started; sleep 300; fi; echo done > sample.out")
    t0 = time.monotonic()
    p = sh(f"tarproc -p 2 --max-failures 1% --timeout 1.5 -w wd -c '{cmd}' in.tar > out.tar", ok=False)
    assert time.monotonic() - t0 < 60
    assert p.returncode == 1
    assert b"'0001'" in p.stderr and b"timed out" in p.stderr and b"started" in p.stderr
    assert keys_of((tmp_path / "out.tar").read_bytes()) == ["0000", "0002"]
    bg = int((tmp_path / "bg.pid").read_text())
    for _ in range(50):
        if not pid_alive(bg):
            break
        time.sleep(0.1)
    assert not pid_alive(bg), "the background child of a timed-out command survived"
    assert os.listdir(wd) == []


# ---------------------------------------------------------------- order, streams


def test_order_with_random_sleeps(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(40))
    cmd = "sleep 0.0$((RANDOM % 9)); echo $RANDOM > sample.r"
    out = sh(f"tarproc -p 4 -c '{cmd}' in.tar").stdout
    assert keys_of(out) == [f"{i:04d}" for i in range(40)]
    unordered = sh(f"tarproc -p 4 --unordered -c '{cmd}' in.tar").stdout
    assert sorted(keys_of(unordered)) == [f"{i:04d}" for i in range(40)]


def test_stdin_not_consumed_and_output_not_in_tar(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(5))
    p = sh("tarproc -p 2 -c 'cat > sample.got; echo to-stdout; echo to-stderr >&2' < in.tar > out.tar",
           stderr_ok=True)
    out = samples_of((tmp_path / "out.tar").read_bytes())
    assert list(out) == [f"{i:04d}" for i in range(5)]
    assert all(s["got"] == b"" for s in out.values())
    assert p.stderr.count(b"to-stdout") == 5 and p.stderr.count(b"to-stderr") == 5
    # with output on stdout, `ls` in the command cannot break the tar
    names = [n for n, _ in read_tar(sh("tarproc -c 'ls; ls -l >&2' in.tar", stderr_ok=True).stdout)]
    assert names[:2] == ["0000.txt", "0001.txt"]
    # --add-log stores the output instead; -q drops it
    out = samples_of(sh("tarproc --add-log log -c 'echo hi; echo there >&2' in.tar").stdout)
    assert out["0003"]["log"] == b"hi\nthere\n"
    assert sh("tarproc -q -c 'echo hi' in.tar > /dev/null").stderr == b""


def test_symlink_refused_fifo_ignored(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(3))
    p = sh("tarproc -c 'ln -s /etc/passwd sample.x' in.tar > out.tar", ok=False)
    assert p.returncode == 1 and b"symbolic link" in p.stderr
    assert (tmp_path / "out.tar").read_bytes().count(b"root:") == 0
    p = sh("tarproc -e ignore -c 'ln -s /etc/passwd sample.x' in.tar > out.tar", ok=False)
    out = samples_of((tmp_path / "out.tar").read_bytes())
    assert list(out) == ["0000", "0001", "0002"] and all(set(s) == {"txt"} for s in out.values())
    out = samples_of(sh("tarproc -c 'mkfifo sample.pipe; mkdir sample.dir; echo y > sample.y' in.tar").stdout)
    assert all(set(s) == {"txt", "y"} for s in out.values())


def test_hostile_member_names_stay_inside(sh, tmp_path):
    # a key with directories: the files are still sample.* in the working directory
    write(tmp_path, "in.tar", tar_bytes([("a/b/../../../x.txt", b"1")]))
    p = sh("tarproc -c 'touch sample.y' in.tar > out.tar", ok=False)
    assert p.returncode == 2 and b".." in p.stderr
    write(tmp_path, "in2.tar", tar_bytes([("deep/dir/k.txt", b"1"), ("deep/dir/k.a.b", b"2")]))
    out = samples_of(sh("tarproc -c 'x=$(ls); echo $x > sample.ls' in2.tar").stdout)
    assert out["deep/dir/k"]["ls"].split() == [b"sample.__key__", b"sample.a.b", b"sample.txt"]
    assert not (tmp_path / "deep").exists()


def test_mode_lines_pages_keys(sh, tmp_path):
    out = samples_of(sh("printf 'alpha\\nbeta\\ngamma\\n' | tarproc --mode lines -c 'tr a-z A-Z < sample.txt > sample.up'").stdout)
    assert list(out) == ["000000000", "000000001", "000000002"]
    assert [s["up"] for s in out.values()] == [b"ALPHA", b"BETA", b"GAMMA"]
    out = samples_of(sh("printf 'p1 a\\np1 b\\fp2\\n' | tarproc --mode pages -c 'wc -l < sample.txt > sample.n'").stdout)
    assert [s["txt"] for s in out.values()] == [b"p1 a\np1 b", b"p2\n"]
    out = samples_of(sh("printf 'k1\\n\\nk2\\n' | tarproc --mode keys -c 'echo $(cat sample.__key__) > sample.k'").stdout)
    assert list(out) == ["k1", "k2"] and out["k2"]["k"] == b"k2\n"


def test_map_module_and_file(sh, tmp_path):
    (tmp_path / "mymod.py").write_text(
        "def upper(s):\n    s['txt'] = s['txt'].upper()\n    return s\n"
        "def split(s):\n    return [dict(s, __key__=s['__key__'] + '-a'), {'__key__': s['__key__'] + '-b', 'n': '1'}]\n"
        "def drop(s):\n    return None if s['__key__'].endswith('1') else s\n"
        "def boom(s):\n    if s['__key__'] == '0002':\n        raise ValueError('no good')\n    return s\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "fn.py").write_text("def shout(s):\n    return {'txt': s['txt'] + b'!'}\n")
    write(tmp_path, "in.tar", text_shard(4))
    out = samples_of(sh("tarproc -p 2 --map mymod:upper in.tar").stdout)
    assert out["0003"]["txt"] == b"TEXT 3\n" and list(out) == [f"{i:04d}" for i in range(4)]
    out = samples_of(sh("tarproc --map sub/fn.py:shout < in.tar").stdout)
    assert out["0001"] == {"txt": b"text 1\n!"}
    out = samples_of(sh("tarproc --map mymod:split in.tar").stdout)
    assert list(out)[:3] == ["0000-a", "0000-b", "0001-a"] and out["0000-b"] == {"n": b"1"}
    p = sh("tarproc -v --map mymod:drop in.tar", stderr_ok=True)
    assert keys_of(p.stdout) == ["0000", "0002", "0003"] and b"skipped 1" in p.stderr
    p = sh("tarproc --max-failures 1% --map mymod:boom in.tar > out.tar", ok=False)
    assert p.returncode == 1 and b"'0002'" in p.stderr and b"ValueError: no good" in p.stderr
    assert keys_of((tmp_path / "out.tar").read_bytes()) == ["0000", "0001", "0003"]
    p = sh("tarproc --map mymod:nosuch in.tar", ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and b"nosuch" in p.stderr


def test_count_and_usage_errors(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(10))
    assert keys_of(sh("tarproc --count 3 -c true in.tar").stdout) == ["0000", "0001", "0002"]
    for bad in ("", "-c true --map x:y", "-e nope -c true", "-c true --interpreter no-such-shell",
                "-s missing.sh", "--map mymod"):
        p = sh(f"tarproc {bad} in.tar > /dev/null", ok=False)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) >= 1, bad
        assert b"Traceback" not in p.stderr
    (tmp_path / "s.py").write_text("open('sample.py.txt', 'w').write('from python')\n")
    out = samples_of(sh("tarproc -s s.py --interpreter python3 in.tar").stdout)
    assert out["0009"]["py.txt"] == b"from python"


# ---------------------------------------------------------------- working directories


def test_working_dirs_private_and_removed(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(6))
    wd = tmp_path / "wd"
    wd.mkdir()
    cmd = "stat -c %a . > sample.mode; mkdir -p x/y; chmod 500 x; [ $(cat sample.__key__) != 0002 ]"
    p = sh(f"tarproc -p 2 --max-failures 1% -w wd -c '{cmd}' in.tar > out.tar", ok=False)
    assert p.returncode == 1
    out = samples_of((tmp_path / "out.tar").read_bytes())
    assert len(out) == 5 and all(s["mode"] == b"700\n" for s in out.values())
    assert os.listdir(wd) == []
    # --keepdir keeps them (and says where)
    p = sh("tarproc --keepdir -w wd -c true in.tar > /dev/null", stderr_ok=True)
    assert b"kept" in p.stderr and len(os.listdir(wd)) == 1


def test_sigterm_and_ctrl_c_clean_up(tmp_path):
    write(tmp_path, "in.tar", text_shard(6))
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        wd = tmp_path / f"wd{sig}"
        wd.mkdir()
        pids = tmp_path / f"pids{sig}"
        cmd = f"echo $$ >> {pids}; sleep 300"
        proc = subprocess.Popen(["tarproc", "-p", "2", "-w", str(wd), "-c", cmd, "in.tar", "-o", "out.tar"],
                                cwd=tmp_path, stderr=subprocess.PIPE)
        for _ in range(300):
            if pids.exists() and len(pids.read_text().split()) >= 2:
                break
            time.sleep(0.05)
        assert pids.exists(), "commands never started"
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == code
        proc.stderr.close()
        assert os.listdir(wd) == []
        assert not (tmp_path / "out.tar").exists()
        time.sleep(0.2)
        assert not any(pid_alive(int(p)) for p in pids.read_text().split())


def test_streams_output_before_input_ends(tmp_path):
    first = tar_bytes([("0000.txt", b"a"), ("0001.txt", b"b")])[:-1024]  # no end-of-archive yet
    proc = subprocess.Popen(["tarproc", "-p", "2", "-c", "echo done > sample.out"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp_path)
    proc.stdin.write(first)
    proc.stdin.flush()
    got = b""
    deadline = time.monotonic() + 30
    while len(got) < 3 * 512 and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            got += os.read(proc.stdout.fileno(), 65536)
    assert got[:12] == b"0000.out\0\0\0\0" or got.startswith(b"0000.out"), got[:100]
    assert proc.poll() is None, "tarproc ended before its input did"
    proc.stdin.close()
    rest = proc.stdout.read()
    assert proc.wait(timeout=30) == 0
    assert keys_of(got + rest) == ["0000", "0001"]


@pytest.mark.parametrize("args", ["-c true", "--map json:loads"])
def test_empty_input(sh, tmp_path, args):
    write(tmp_path, "empty.tar", bytes(1024))
    p = sh(f"tarproc {args} empty.tar | tar tf -")
    assert p.stdout == b""


def test_many_failures_stay_readable(sh, tmp_path):
    """The first 20 failures come with their output's last lines; the rest
    are one line each (key and reason), and every failed key is named."""
    write(tmp_path, "in.tar", text_shard(30))
    p = sh("tarproc -p 2 --max-failures 100% -c 'echo noise-$(cat sample.__key__); exit 3' in.tar > out.tar",
           ok=False)
    assert p.returncode == 0, p.stderr
    err = p.stderr.decode()
    assert len(read_tar((tmp_path / "out.tar").read_bytes())) == 0
    failed = [line for line in err.splitlines() if line.startswith("tarproc: sample ")]
    assert len(failed) == 30
    for i in range(30):
        assert f"sample '{i:04d}': command failed with exit status 3" in err
    echoed = [line for line in err.splitlines() if line.startswith("  | noise-")]
    assert echoed == [f"  | noise-{i:04d}" for i in range(20)]  # in input order
    assert err.count("more than 20 samples failed") == 1
    assert "samples read 30, written 0, skipped 0, failed 30" in err


def test_more_commands_than_open_files_allow(sh, tmp_path):
    """``-p 100`` under ``ulimit -n 128``: the soft limit is raised when the
    hard limit allows (no word), else fewer commands run at once, with one
    warning; no sample fails for lack of descriptors (all did past ~20)."""
    write(tmp_path, "in.tar", text_shard(150))
    want = sh("tarcat in.tar").stdout
    p = sh("ulimit -Sn 128; tarproc -p 100 -c 'sleep 0.05' in.tar")
    assert p.stdout == want
    p = sh("ulimit -n 128; tarproc -p 100 -c 'sleep 0.05' in.tar", stderr_ok=True)
    assert p.stdout == want
    assert p.stderr.decode().splitlines() == [
        "tarproc: warning: -p 100 needs more open files than the limit of 128 (ulimit -n) allows: "
        "running 16 commands at once"]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_map_timeout_fails_only_the_stuck_samples(sh, tmp_path, method):
    """``--map --timeout``: a function stuck on a sample (here a sleep; in
    life a C library or a network call) fails that sample alone, its
    worker is killed and replaced, and the run ends; without it the run
    never did."""
    write(tmp_path, "in.tar", text_shard(12))
    (tmp_path / f"hang_{method}.py").write_text("import time\n\ndef f(s):\n"
                                      "    if s['__key__'] in ('0003', '0007'):\n        time.sleep(1000)\n"
                                      "    return s\n")
    t0 = time.monotonic()
    p = sh(f"tarproc -p 2 --start-method {method} --map hang_{method}.py:f --timeout 1 --max-failures 2 in.tar "
           "> out.tar",
           stderr_ok=True, timeout=60)
    assert time.monotonic() - t0 < 30
    err = p.stderr.decode()
    assert "sample '0003': timed out after 1 s (worker process killed) (failed: not written)" in err
    assert "sample '0007': timed out after 1 s (worker process killed) (failed: not written)" in err
    assert "samples read 12, written 10, skipped 0, failed 2" in err
    assert keys_of((tmp_path / "out.tar").read_bytes()) == [f"{i:04d}" for i in range(12) if i not in (3, 7)]
    assert subprocess.run(["pgrep", "-f", f"hang_{method}.py:f"], capture_output=True).stdout == b""


def _tar(members):
    return b"".join(make_corpus.member(n, d) for n, d in members) + make_corpus.EOA


def test_rekey_map_text_and_command_outputs_are_checked(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x"), ("b.txt", b"y")]))
    # --rekey to an escaping name: exit 2, the sample named, no output file
    p = sh("tarcat --rekey '../{key}' in.tar -o out.tar", ok=False)
    assert p.returncode == 2 and b"'../a'" in p.stderr and b"'..'" in p.stderr, p.stderr
    assert not (tmp_path / "out.tar").exists()
    # text modes: a key line with an ESC sequence
    (tmp_path / "keys.txt").write_bytes(b"good\nbad\x1b[2J\n")
    p = sh("tarproc --mode keys -c true keys.txt -o out.tar", ok=False)
    assert p.returncode == 2 and b"control characters" in p.stderr, p.stderr
    # files made by tarproc -c with a tab or an ESC in their names: the sample fails
    p = sh("tarproc -c 'echo x > \"sample.a\tb\"; echo y > sample.ok' in.tar | tar t; exit ${PIPESTATUS[0]}",
           ok=False)
    assert p.returncode == 1 and b"control characters" in p.stderr, p.stderr
    assert p.stdout == b""
    # --map results
    (tmp_path / "mapfn.py").write_text("def f(s):\n    return {'__key__': s['__key__'], 'x\\ty': b'1'}\n")
    p = sh("PYTHONPATH=. tarproc --map mapfn:f in.tar -o out.tar", ok=False)
    assert p.returncode in (1, 2) and b"sample 'a'" in p.stderr and b"control characters" in p.stderr, p.stderr
    if (tmp_path / "out.tar").exists():  # exit 1 (failed samples): whether it is kept is the commit rule's
        with tarfile.open(tmp_path / "out.tar") as t:
            assert t.getnames() == []


def test_command_replacing_its_directory_with_a_symlink(sh, tmp_path):
    """Cleanup removes the link, never touches (chmods, deletes) its target."""
    target = tmp_path / "precious"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "file").write_text("keep")
    os.chmod(target / "sub", 0o500)
    (tmp_path / "wd").mkdir()
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x"), ("b.txt", b"y")]))
    try:
        sh(f"tarproc -p 1 -w wd -c 'here=$PWD; cd /; rm -rf \"$here\"; ln -s {target} \"$here\"' in.tar "
           f"-o out.tar", ok=False)
        assert (target / "sub" / "file").read_text() == "keep"
        assert stat.S_IMODE(os.stat(target / "sub").st_mode) == 0o500
        assert os.listdir(tmp_path / "wd") == []
    finally:
        os.chmod(target / "sub", 0o700)


def test_deep_and_locked_trees_are_removed(sh, tmp_path):
    """1,500 levels (deeper than Python's recursion limit) and a directory
    chmod 000: the run directory is gone afterwards, no RecursionError."""
    (tmp_path / "wd").mkdir()
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x")]))
    (tmp_path / "deep.py").write_text(
        "import os\n"
        "os.makedirs('locked/in'); os.chmod('locked', 0)\n"
        "for _ in range(1500):\n"
        "    os.mkdir('d'); os.chdir('d')\n"
        "open('f', 'w').write('x')\n")
    p = sh(f"tarproc -w wd -c '{sys.executable} {tmp_path}/deep.py' in.tar > out.tar", stderr_ok=True)
    assert b"Error" not in p.stderr, p.stderr
    assert os.listdir(tmp_path / "wd") == []


def test_detached_process_cannot_write_into_another_sample(sh, tmp_path):
    """A command of sample a leaves a setsid'ed writer behind: its file and
    its output must not appear in sample b (directories are never reused)."""
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x"), ("b.txt", b"y"), ("c.txt", b"z")]))
    (tmp_path / "cmd.sh").write_text(
        'if [ "$(cat sample.__key__)" = a ]; then\n'
        '  setsid sh -c \'touch "$1.started"; sleep 0.3; echo LEAK; echo leak > "$0/sample.leak"; touch "$1"\' '
        f'"$PWD" {tmp_path}/done &\n'
        f'  for i in $(seq 100); do [ -e {tmp_path}/done.started ] && break; sleep 0.1; done\n'
        'else  # wait until the escaped writer has written\n'
        f'  for i in $(seq 100); do [ -e {tmp_path}/done ] && break; sleep 0.1; done; sleep 0.1\n'
        'fi\n'
        'echo out\n')
    sh(f"tarproc -p 1 --add-log log -s {tmp_path}/cmd.sh in.tar -o out.tar", stderr_ok=True)
    with tarfile.open(tmp_path / "out.tar") as t:
        names = t.getnames()
        logs = [t.extractfile(n).read() for n in names if n.endswith(".log")]
    assert names == ["a.log", "a.txt", "b.log", "b.txt", "c.log", "c.txt"], names
    assert all(log == b"out\n" for log in logs), logs


def names(path):
    with tarfile.open(path) as tf:
        return [m.name for m in tf if m.isfile()]


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


PRINTING = '''
import os
import re
print("loaded")
def f(sample):
    print("debug", sample["__key__"])
    os.write(1, b"raw write\\n")
    sample["txt"] = sample["txt"].upper()
    return sample
'''


@pytest.mark.parametrize("parallel", ["1", "2"])
def test_map_function_that_prints_does_not_corrupt_the_tar_on_stdout(parallel, tmp_path):
    """A --map function with a debugging print wrote into the tar on stdout
    (exit 0, an archive no reader accepts).  Its prints now go to stderr."""
    (tmp_path / "f.py").write_text(PRINTING)
    (tmp_path / "a.tar").write_bytes(shard(5))
    p = run(f"tarproc -p {parallel} --map f.py:f a.tar > out.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert names(tmp_path / "out.tar") == [f"s{i:03d}.txt" for i in range(5)]
    with tarfile.open(tmp_path / "out.tar") as tf:
        assert tf.extractfile("s000.txt").read() == b"TEXT S 0\n"
    err = p.stderr.decode()
    assert err.count("raw write") == 5 and "debug s004" in err and "loaded" in err


def test_readme_gm_mogrify_form_resizes_and_the_note_is_true(sh, tmp_path):
    from conftest import ROOT, require
    from PIL import Image

    require("gm")
    readme = open(f"{ROOT}/README.md").read()
    assert "gm mogrify -resize 256x256 *.jpg" in readme and "-size 256x256 *.jpg -resize" not in readme.split(
        "issue-tracker form")[0]
    sizes = [(320, 240), (1024, 768)]
    (tmp_path / "small.tar").write_bytes(tar_bytes([(f"i{n}.jpg", jpeg_bytes(w, h)) for n, (w, h) in enumerate(sizes)]))

    def out_sizes(cmd):
        data = sh(f"tarproc -p 2 -c '{cmd}' small.tar").stdout
        return [Image.open(io.BytesIO(body)).size for _, body in read_tar(data)]

    assert out_sizes("gm mogrify -resize 256x256 *.jpg") == [(256, 192), (256, 192)]
    # the issue-tracker form, as the README's note says: nothing fits 256x256, sizes change oddly
    assert out_sizes("gm mogrify -size 256x256 *.jpg -resize 256x256") == [(640, 480), (384, 288)]
    assert "320x240 images came out 640x480, 1024x768 ones 384x288" in " ".join(readme.split())


def test_a_map_function_returning_a_bad_key_fails_that_sample_naming_it(sh, tmp_path):
    # issue 40: "sample: sample has no __key__" (exit 2) named no input sample
    (tmp_path / "in.tar").write_bytes(shard(3))
    (tmp_path / "m.py").write_text("def nokey(s):\n    return dict(s, __key__=None)\n"
                                   "def dotted(s):\n    return dict(s, __key__='a.b')\n"
                                   "def dropped(s):\n    return {'txt': s['txt']}\n")
    for fn, why in (("nokey", "__key__ None (not a str"), ("dotted", "__key__ 'a.b' (key 'a.b' has a dot")):
        p = sh(f"tarproc --map m.py:{fn} -p 1 in.tar -o out.tar", ok=False)
        err = p.stderr.decode()
        assert p.returncode == 1 and "sample 's000': function" in err and why in err, err
        assert "has no __key__" not in err and not (tmp_path / "out.tar").exists()
    # a sample without __key__ keeps the input's
    assert [n for n, _ in read_tar(sh("tarproc --map m.py:dropped -p 1 in.tar").stdout)] == [
        "s000.txt", "s001.txt", "s002.txt"]


def test_a_run_stops_once_its_failure_budget_is_spent(sh, tmp_path):
    # the user's run: a command that fails on every sample (no .png field); default --max-failures 0
    write(tmp_path, "in.tar", text_shard(2000))
    for opts in ("-p 4 -c 'gm mogrify -resize 128x96 *.png'", "-p 2 --per-command 10 -c 'exit 1'",
                 "-p 2 --map os:remove", "--max-failures 0% -p 4 -c 'exit 1'"):
        p = sh(f"tarproc {opts} in.tar -o out.tar", ok=False)
        err = p.stderr.decode()
        lines = err.splitlines()
        assert p.returncode == 1, err
        # the first failure, then the summary and the last line: not 2,000 failures
        assert sum("(failed: not written)" in line for line in lines) == 1, err
        assert lines[-1] == ("tarproc: 1 sample failed, more than --max-failures 0" + "%" * ("0%" in opts)
                             + ": stopped there (the samples after it not processed); no output written"), err
        read = int(re.search(r"samples read (\d+)", err).group(1))
        assert read < 200, err  # stopped: only what the window had read ahead
        assert not (tmp_path / "out.tar").exists() and not list(tmp_path.glob(".*"))
    # a count: stops at the failure past it; on stdout, no end-of-archive marker
    write(tmp_path, "in.tar", text_shard(300))
    cmd = "k=$(cat sample.__key__); [ $((10#$k % 50)) != 7 ]"  # 6 of the 300 fail
    p = sh(f"tarproc -p 2 --max-failures 1 -c '{cmd}' in.tar > out.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("(failed: not written)") == 2, err
    assert "2 samples failed, more than --max-failures 1: stopped there" in err and "end-of-archive marker" in err
    assert int(re.search(r"samples read (\d+)", err).group(1)) < 100, err
    # within the budget, every sample runs; a fraction above 0% is checked at the end (the total is not known)
    p = sh(f"tarproc -p 2 --max-failures 6 -c '{cmd}' in.tar -o out.tar", stderr_ok=True)
    assert len(keys_of((tmp_path / "out.tar").read_bytes())) == 294
    p = sh(f"tarproc -p 2 --max-failures 1% -c '{cmd}' in.tar -o out.tar", ok=False)
    assert p.returncode == 1 and p.stderr.decode().count("(failed: not written)") == 6
    assert "6 of 300 samples failed, more than --max-failures 1%" in p.stderr.decode()
    # -e ignore keeps running (no limit unless given)
    write(tmp_path, "in.tar", text_shard(50))
    p = sh("tarproc -e ignore -c 'exit 1' in.tar -o out.tar", stderr_ok=True)
    assert len(keys_of((tmp_path / "out.tar").read_bytes())) == 50


def test_results_that_vanish_are_named(sh, tmp_path):
    write(tmp_path, "in.tar", text_shard(5))
    # every sample left out: an empty archive is a result, and it says so
    p = sh("tarproc -c 'rm sample.*' in.tar -o out.tar", stderr_ok=True)
    assert keys_of((tmp_path / "out.tar").read_bytes()) == []
    assert p.stderr.decode() == ("tarproc: warning: no sample written: the command left no sample.* file for any "
                                 "of the 5 samples it ran on (each skipped)\n")
    (tmp_path / "none.py").write_text("def f(s):\n    return None\n")
    p = sh("tarproc --map none.py:f in.tar -o out.tar", stderr_ok=True)
    assert "no sample written: the function returned no sample for any of the 5 samples" in p.stderr.decode()
    # a file not named sample.*: said once, named, with the name that would be collected
    p = sh("tarproc -c 'tr a-z A-Z < sample.txt > upper.txt; touch zz' in.tar -o out.tar", stderr_ok=True)
    # (the first sample to finish says it: any of them, with -p 2)
    assert re.fullmatch(r"tarproc: warning: sample '000\d': the command left 'upper.txt', 'zz', not "
                        r"collected: only files named sample\.\* are outputs \(e\.g\. sample\.upper\.txt\); "
                        r"said once\n", p.stderr.decode()), p.stderr.decode()
    assert list(samples_of((tmp_path / "out.tar").read_bytes())["0003"]) == ["txt"]
    p = sh("tarproc --per-command 2 -c 'touch x' in.tar -o out.tar", stderr_ok=True)
    assert "left 'x', not collected: only files named sample-NNNNNN.* are outputs (e.g. sample-000000.x)" \
        in p.stderr.decode()
    # -q: no word; a command that leaves only outputs: no word
    assert sh("tarproc -q -c 'touch x' in.tar -o out.tar").stderr == b""
    assert sh("tarproc -c 'cp sample.txt sample.b' in.tar -o out.tar").stderr == b""
