"""The progress line fits the terminal: on a 50-column terminal (a real pty
whose window size says so, or $COLUMNS) every redraw is shorter than the
width, so it never wraps and scrolls; tarcat's and kujob's alike.  Sizes on
it are in the one convention (decimal kB/MB, README "Sizes")."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

import pytest


def on_pty(argv, cwd, columns=50, env=None):
    """Run argv with stderr on a pty of ``columns`` columns; its stderr bytes."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    full = dict(os.environ)
    full.pop("COLUMNS", None)
    full.update(env or {})
    p = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
                         env=full)
    os.close(slave)
    out = b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the pty
            break
        if not data:
            break
        out += data
    os.close(master)
    assert p.wait(timeout=60) == 0, out
    return out


def redraws(err):
    """The progress lines drawn (each starts with \\r and ends with erase-to-end)."""
    text = err.decode()
    return [seg.split("\x1b[K")[0] for seg in text.split("\r")[1:] if seg.split("\x1b[K")[0]]


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    d = tmp_path_factory.mktemp("progress")
    subprocess.run("seq 1 20000 | lines2tar > in.tar", shell=True, cwd=d, check=True)
    return d


@pytest.mark.parametrize("columns", [50, 30])
def test_tarcat_progress_fits_a_narrow_terminal(shard, columns):
    err = on_pty(["tarcat", "--progress", "in.tar", "-o", "/dev/null"], shard, columns)
    lines = redraws(err)
    assert lines and all(line.startswith("tarcat:") for line in lines), err
    assert all(len(line) < columns for line in lines), [len(x) for x in lines]
    assert "\n" not in err.decode().replace("\r\n", "")  # nothing scrolled


def test_columns_variable_wins_and_a_wide_terminal_gets_the_bar(shard):
    wide = redraws(on_pty(["tarcat", "--progress", "in.tar", "-o", "/dev/null"], shard, 200))
    assert any("[" in line and "#" in line or "-" * 5 in line for line in wide), wide  # the bar, when it fits
    narrow = redraws(on_pty(["tarcat", "--progress", "in.tar", "-o", "/dev/null"], shard, 200, {"COLUMNS": "40"}))
    assert narrow and all(len(line) < 40 for line in narrow)


def test_progress_sizes_are_decimal_units(shard):
    lines = redraws(on_pty(["tarcat", "--progress", "in.tar", "-o", "/dev/null"], shard, 200))
    total = os.path.getsize(shard / "in.tar")  # 20,480,000 + end blocks: "20 MB", never "19.5 MB" (MiB)
    assert total // 10**6 == 20
    assert all(re.search(r"/20 MB\b", line) for line in lines if "/" in line and "MB" in line), lines
    assert not any("MiB" in line or "KB" in line for line in lines)


def test_kujob_progress_fits_a_narrow_terminal(tmp_path):
    err = on_pty(["kujob", "-q", "-j", "2", "-s", "{1..6}", "--", "sh", "-c", "sleep 0.3; : {}"], tmp_path, 50)
    lines = redraws(err)
    assert lines and all(line.startswith("kujob:") for line in lines), err
    assert all(len(line) < 50 for line in lines), [len(x) for x in lines]


def test_a_terminal_of_0_columns_is_of_unknown_width_not_narrow(shard):
    # issue 40: `script` without a size (some CI consoles) reports 0 columns; the line was cut to 9 characters
    for env in ({}, {"COLUMNS": "0"}):
        lines = redraws(on_pty(["tarcat", "--progress", "in.tar", "-o", "/dev/null"], shard, 0, env))
        assert lines and all(len(line) < 80 for line in lines), lines
        assert any(len(line) > 40 and "MB" in line for line in lines), lines
    lines = redraws(on_pty(["tarcat", "--progress", "in.tar", "-o", "/dev/null"], shard, 0, {"COLUMNS": "45"}))
    assert lines and all(len(line) < 45 for line in lines), lines
