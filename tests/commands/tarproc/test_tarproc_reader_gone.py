"""tarproc stops within about a second once the reader of its output has
gone (`| tarcat -c 5`, `| head -c 1000`, a reader that exits), as `cat`
does, for commands (-c) and functions (--map): it neither runs the rest of
the samples for nobody nor waits for the commands still running.  The
bounds are generous (the machine is shared): before, these runs took 12 s
to minutes and ran every sample."""

import time

from helpers import tar_bytes

N = 200


def _shard(tmp_path):
    (tmp_path / "all.tar").write_bytes(tar_bytes([(f"s{i:04d}.txt", b"text %d" % i) for i in range(N)]))
    (tmp_path / "f.py").write_text(
        "import time\n"
        "def f(s):\n"
        "    time.sleep(0.1)\n"
        "    with open('count', 'a') as out:\n"
        "        out.write('x\\n')\n"
        "    return s\n")


def _timed(sh, tmp_path, cmd):
    (tmp_path / "count").write_text("")
    t0 = time.monotonic()
    p = sh(cmd + "; echo \"${PIPESTATUS[@]}\"", ok=False, timeout=90)
    elapsed = time.monotonic() - t0
    time.sleep(0.3)  # anything still running would go on counting
    runs = len((tmp_path / "count").read_text().split())
    return elapsed, runs, p


def test_commands_stop_when_the_reader_has_gone(sh, tmp_path):
    _shard(tmp_path)
    run = f"tarproc -p 2 -c 'sleep 0.1; echo x >> {tmp_path}/count' all.tar"  # (commands run in their own dirs)
    for reader in ("tarcat -c 5 > /dev/null", "head -c 1000 > /dev/null"):
        elapsed, runs, p = _timed(sh, tmp_path, f"{run} | {reader}")
        assert elapsed < 5 and 1 <= runs < 40, (reader, elapsed, runs, p.stderr)
        # ended quietly, by SIGPIPE (141), like cat
        assert p.stdout.split()[0] in (b"141", b"0") and b"Traceback" not in p.stderr, p.stderr


def test_long_commands_are_not_waited_for(sh, tmp_path):
    """The reader leaves while every running command still has seconds to
    go, before any output: tarproc notices with no write (the closed pipe
    shows on poll) and kills them."""
    _shard(tmp_path)
    elapsed, runs, p = _timed(sh, tmp_path, f"tarproc -p 2 -c 'echo x >> {tmp_path}/count; exec sleep 5.25' all.tar | "
                                            "(sleep 0.5)")
    assert elapsed < 4 and 1 <= runs <= 4, (elapsed, runs, p.stderr)
    p = sh("pgrep -f '^sleep 5.25$' || true")
    assert p.stdout == b""


def test_functions_stop_when_the_reader_has_gone(sh, tmp_path):
    _shard(tmp_path)
    for reader in ("tarcat -c 5 > /dev/null", "head -c 1000 > /dev/null", "(sleep 0.5)"):
        elapsed, runs, p = _timed(sh, tmp_path, f"tarproc -p 2 --batch 2 --map f.py:f all.tar | {reader}")
        assert elapsed < 5 and runs < 40, (reader, elapsed, runs, p.stderr)
        assert b"Traceback" not in p.stderr and b"Exception" not in p.stderr, p.stderr
    # the default batch (32): batches grow 1, 2, 4, ... so the first results come at once
    elapsed, runs, p = _timed(sh, tmp_path, "tarproc -p 2 --map f.py:f all.tar | tarcat -c 5 > /dev/null")
    assert elapsed < 3 and runs < 40, (elapsed, runs, p.stderr)
