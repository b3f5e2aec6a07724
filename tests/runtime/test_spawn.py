"""tarproc -c's start-up path (issue 18): commands started with posix_spawn
from one loop, output read through a pipe.  What a command sees (descriptors,
signals, session, directory, environment), output that outgrows memory, a
process that escapes its group, and the Popen fallback giving the same."""

import os
import time

from helpers import samples_of, tar_bytes


def shard(n):
    return tar_bytes([(f"{i:04d}.txt", f"text {i}\n".encode()) for i in range(n)])


# What the command sees: only stdin/stdout/stderr open (ls shows its own
# directory descriptor too), SIGPIPE at its default (`yes | head` ends quietly),
# its own session, the sample's directory, our environment, stdin at EOF.
PROBE = ("ls /proc/self/fd > sample.fds; "
         "yes | head -1 > sample.yes; "
         "read -r _ _ _ _ _ sid _ < /proc/$$/stat; [ \"$sid\" = $$ ] && echo leader > sample.sid; "
         "pwd -P > sample.pwd; "
         "echo \"$SPAWN_PROBE\" > sample.env; cat > sample.stdin")


def check_probe(samples):
    for key, s in samples.items():
        assert s["fds"].split() == [b"0", b"1", b"2", b"3"], (key, s["fds"])
        assert s["yes"] == b"y\n"
        assert s["sid"] == b"leader\n"
        assert s["env"] == b"from-parent\n"
        assert s["stdin"] == b""
        assert s["txt"] == f"text {int(key)}\n".encode()


def test_what_the_command_sees(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(shard(6))
    (tmp_path / "wd").mkdir()
    p = sh(f"tarproc -p 3 -w wd -c '{PROBE}' in.tar", env={"SPAWN_PROBE": "from-parent"})
    out = samples_of(p.stdout)
    assert list(out) == [f"{i:04d}" for i in range(6)]
    check_probe(out)
    dirs = {s["pwd"].strip() for s in out.values()}
    assert len(dirs) == 6 and all(d.startswith(os.path.realpath(tmp_path / "wd").encode() + b"/") for d in dirs)
    assert os.listdir(tmp_path / "wd") == []


def test_popen_fallback_does_the_same(tmp_path, monkeypatch):
    """Without the C library's posix_spawn calls, subprocess.Popen starts the
    commands: the same outputs."""
    import tarproc.runtime.spawn as S
    from tarproc.stages.command import map_command

    def no_libc(self):
        raise AttributeError("posix_spawn_file_actions_addfchdir_np")

    monkeypatch.setattr(S.Spawner, "_setup_libc", no_libc)
    monkeypatch.setenv("SPAWN_PROBE", "from-parent")
    samples = [{"__key__": f"{i:04d}", "txt": f"text {i}\n".encode()} for i in range(5)]
    errors = []
    out = list(map_command(iter(samples), PROBE, parallel=2, workdir=str(tmp_path), quiet=True,
                           on_error=errors.append))
    assert errors == []
    check_probe({s["__key__"]: s for s in out})
    assert os.listdir(tmp_path) == []


def test_long_output_spills_to_a_file_and_comes_back_whole(sh, tmp_path):
    """Output past the in-memory bound (lowered here) goes to a file: every
    line is echoed, in sample order; --add-log stores all of it; a failure
    shows the last lines."""
    (tmp_path / "in.tar").write_bytes(shard(4))
    env = {"TARPROC_CAPTURE_SPILL": "1000"}
    p = sh("tarproc -p 2 -c 'seq -f \"$(cat sample.__key__)-%g\" 20000' in.tar > out.tar", env=env, stderr_ok=True)
    lines = p.stderr.decode().splitlines()
    assert lines == [f"{i:04d}-{j}" for i in range(4) for j in range(1, 20001)]
    out = samples_of(sh("tarproc -p 2 --add-log log -c 'seq 30000; echo end >&2' in.tar", env=env).stdout)
    assert all(s["log"] == b"".join(b"%d\n" % j for j in range(1, 30001)) + b"end\n" for s in out.values())
    p = sh("tarproc -p 2 --max-failures 99% -c 'seq 30000; exit 3' in.tar > /dev/null", env=env, ok=False)
    assert p.returncode == 1 and p.stderr.count(b"exit status 3") == 4 and b"| 30000" in p.stderr
    assert len(p.stderr) < 20000  # the tails, not the whole output


def test_escaped_process_writes_into_nothing(sh, tmp_path):
    """A process that leaves the command's process group (setsid) and writes
    later: its output reaches no other sample's output, its files no other
    sample's directory."""
    (tmp_path / "in.tar").write_bytes(shard(4))
    cmd = ('if [ $(cat sample.__key__) = 0000 ]; then '
           f'setsid bash -c "sleep 0.6; echo \\$\\$ > {tmp_path}/esc.pid; echo LEAK > sample.leak; echo LEAK; '
           'echo LEAK >&2" & sleep 0.2; exit 0; fi; sleep 0.3; echo own-$(cat sample.__key__); sleep 0.5')
    t0 = time.monotonic()
    p = sh(f"tarproc -p 1 -c '{cmd}' in.tar", stderr_ok=True)
    assert time.monotonic() - t0 < 30
    out = samples_of(p.stdout)
    assert list(out) == ["0000", "0001", "0002", "0003"]
    assert not any("leak" in s for s in out.values())
    assert b"LEAK" not in p.stderr
    assert p.stderr.decode().split() == ["own-0001", "own-0002", "own-0003"]
    assert (tmp_path / "esc.pid").exists()  # it did run, during the next samples


def test_many_quick_commands_in_order_with_failures(sh, tmp_path):
    """The loop under churn: 300 quick commands, every 7th failing, -p 3;
    order kept, failures named, nothing left in the working directory."""
    (tmp_path / "in.tar").write_bytes(shard(300))
    (tmp_path / "wd").mkdir()
    p = sh("tarproc -p 3 -w wd --max-failures 100% -c '[ $((10#$(cat sample.__key__) % 7)) != 3 ] && "
           "cp sample.txt sample.cp' in.tar", ok=False)
    assert p.returncode == 0, p.stderr
    out = samples_of(p.stdout)
    want = [f"{i:04d}" for i in range(300) if i % 7 != 3]
    assert list(out) == want and all(s["cp"] == s["txt"] for s in out.values())
    assert p.stderr.count(b"failed with exit status 1") == 300 - len(want)
    assert os.listdir(tmp_path / "wd") == []


def test_fd_hygiene_in_the_parent(tmp_path):
    """The library leaves no descriptor open after a run (pipes, pidfds,
    directories), also when closed early."""
    from tarproc.stages.command import map_command

    import gc

    def fds():
        gc.collect()  # (descriptors of earlier tests' objects close when they are collected)
        return set(os.listdir("/proc/self/fd"))

    before = fds()
    samples = [{"__key__": f"{i:04d}", "txt": b"x"} for i in range(40)]
    assert len(list(map_command(iter(samples), "echo hi; cp sample.txt sample.y", parallel=3,
                                workdir=str(tmp_path), quiet=True))) == 40
    t0 = time.monotonic()
    gen = map_command(iter(samples), "[ $(cat sample.__key__) = 0000 ] || sleep 5; echo x > sample.z", parallel=3,
                      workdir=str(tmp_path), quiet=True)
    assert next(gen)["z"] == b"x\n"
    gen.close()
    assert time.monotonic() - t0 < 20
    assert fds() - before == set()  # none left open by the run
    assert os.listdir(tmp_path) == []
