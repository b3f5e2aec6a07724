"""One size convention everywhere: kB/MB/GB are powers of 1000, KiB/MiB/GiB
powers of 1024; both read, and every size printed (tarcheck, tarshow, the
progress line) is decimal and labelled so."""

import io
import re
import tarfile

import pytest

from tarproc.core.units import format_size, parse_size


@pytest.mark.parametrize("text,n", [("1MB", 10**6), ("1MiB", 1 << 20), ("1e9", 10**9), ("2kB", 2000),
                                    ("2KiB", 2048), ("1GiB", 1 << 30), ("1G", 10**9), ("512k", 512000)])
def test_both_units_read(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("n,text", [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (1234, "1.2 kB"),
                                    (99_999, "100 kB"), (999_499, "999 kB"), (999_500, "1.0 MB"),
                                    (1 << 20, "1.0 MB"), (3 * 10**9, "3.0 GB")])
def test_one_formatter(n, text):
    assert format_size(n) == text


def test_printed_sizes_read_back_as_the_same_number():
    for n in (1500, 10**6, 25 * 10**6, 7 * 10**9, 1 << 30):
        shown = format_size(n)
        assert abs(parse_size(shown.replace(" ", "")) - n) <= n * 0.05, (n, shown)


def test_tarshow_and_tarcheck_print_decimal_units(sh, tmp_path):
    with tarfile.open(tmp_path / "a.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        for key in ("a", "b"):
            info = tarfile.TarInfo(f"{key}.bin")
            info.size = 1_500_000  # 1.5 MB, 1.43 MiB
            tf.addfile(info, io.BytesIO(b"\0" * info.size))
    show = sh("tarshow --format blocks a.tar").stdout.decode()
    assert "1.5 MB" in show and "1.4 MB" not in show and "KB" not in show
    check = sh("tarcheck a.tar", ok=False).stdout.decode()
    assert "bin 2 (3.0 MB)" in check, check
    assert not re.search(r"\bKB\b|MiB", show + check)
