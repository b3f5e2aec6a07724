"""Class: option values.  Every value a user can give an option is checked
when the option is parsed (``cli/base``: ``nonneg``, ``positive``,
``seconds``; ``core/limits.check_widths``; the pixel budget): one line,
exit 2, never an internal error, a hang or gigabytes of memory.
Instances here: numbers past 2**63-1 (--slice, --shards, -c), ports past
65535, durations that are nan, inf or negative, tarserve's --rekey checked
only per response, and a contact sheet whose --thumb asked for 10
gigapixels."""

import pytest

from helpers import png_bytes, tar_bytes

HUGE = "99999999999999999999999"


@pytest.fixture
def shard(tmp_path):
    (tmp_path / "a.tar").write_bytes(tar_bytes([(f"s{i}.png", png_bytes(16, 12, seed=i)) for i in range(3)]))
    return "a.tar"


def _usage_line(p, *words):
    lines = p.stderr.decode().splitlines()
    assert p.returncode == 2, p.stderr
    assert 1 <= len(lines) <= 2, lines  # (the usage line, then the error)
    assert "internal error" not in p.stderr.decode() and "Traceback" not in p.stderr.decode(), lines
    for w in words:
        assert w in lines[-1], lines


@pytest.mark.parametrize("cmd, words", [
    (f"tarsplit --shards {HUGE} -o 'x-{{shard}}.tar' a.tar", ["too large"]),
    ("tarsplit --shards 9999999999 -o 'x-{shard}.tar' a.tar", ["TARPROC_MAX_URLS"]),
    (f"tarcat -c {HUGE} a.tar", ["too large"]),
    ("tarproc --timeout nan -c true a.tar", ["seconds"]),
    ("tarproc --timeout inf -c true a.tar", ["seconds"]),
    ("tarserve . --port 70000", ["0 to 65535"]),
    ("tarserve . --port 0 --client-timeout -1", ["seconds"]),
    ("tarserve . --port 0 --header-timeout inf", ["seconds"]),
    ("tarserve . --port 0 --rekey '{key.x}'", ["{key.x}"]),
    ("kujob --slurm --poll nan -s 1 -- true", ["seconds"]),
    ("tarshow --grid s.png --thumb 100000 a.tar", ["pixel budget", "--thumb"]),
    ("tarshow --grid s.png -c 1000000 a.tar", ["pixel budget"]),
])
def test_bad_values_are_one_line(sh, shard, cmd, words):
    _usage_line(sh(f"ulimit -v 2000000; timeout 20 {cmd}", ok=False), *words)


def test_huge_slice_bounds_read_as_no_bound(sh, shard):
    # past sys.maxsize no stream reaches: --slice START:HUGE is every sample from START
    assert sh(f"tarcat --slice 1:{HUGE} a.tar | tar tf -").stdout == b"s1.png\ns2.png\n"
    assert sh(f"tarcat --slice {HUGE}: a.tar | tar tf -", stderr_ok=True).stdout == b""  # (a warning says so)
    assert sh(f"tarcat --slice 0::{HUGE} a.tar | tar tf -").stdout == b"s0.png\n"


def test_a_sheet_within_the_budget_is_drawn(sh, shard, tmp_path):
    sh("tarshow --grid s.png --thumb 64 a.tar")
    from PIL import Image

    with Image.open(tmp_path / "s.png") as img:
        assert img.width < 300 and img.height < 300


@pytest.mark.parametrize("value", [2.5, "10", -1, True])
def test_tarpcats_api_checks_its_shuffle_buffer(value, tmp_path):
    """``parallel_samples``/``parallel_encoded`` took ``shuffle=2.5`` (a
    buffer of 2.5 samples) or ``"10"`` (an internal TypeError) since the
    buffer shuffle moved to core: one line naming the argument, as the
    ``shuffle`` stage says it."""
    import tarproc
    from tarproc.sources.pcat import parallel_encoded

    (tmp_path / "a.tar").write_bytes(b"\0" * 1024)
    for call in (tarproc.parallel_samples, parallel_encoded):
        with pytest.raises(tarproc.UsageError, match="shuffle must be a whole number >= 0"):
            list(call([str(tmp_path / "a.tar")], shuffle=value))
