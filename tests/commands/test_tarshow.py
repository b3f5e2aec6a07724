"""tarshow: text blocks, terminal images under a pseudo-terminal, contact sheets."""

import io
import json
import os
import re
import zlib

import pytest

from conftest import require
from helpers import image_shard, jpeg_bytes, png_bytes, tar_bytes
import make_corpus as mc

ESC = b"\x1b["


def make_small(tmp_path, n=4):
    members = []
    for i in range(n):
        key = f"{i:04d}"
        members.append((f"{key}.cls", str(i).encode()))
        members.append((f"{key}.jpg", jpeg_bytes(64, 48, seed=i)))
        members.append((f"{key}.json", json.dumps({"label": i, "text": "a b"}).encode()))
        members.append((f"{key}.bin", bytes(range(40))))
    (tmp_path / "small.tar").write_bytes(tar_bytes(members))


def test_blocks_per_sample(sh, tmp_path):
    make_small(tmp_path)
    out = sh("tarshow --format blocks -c 2 small.tar").stdout.decode()
    blocks = out.strip("\n").split("\n\n")
    assert len(blocks) == 2
    assert blocks[0].splitlines()[0] == "0000" and blocks[1].splitlines()[0] == "0001"
    first = blocks[0]
    assert re.search(r"jpg\s+\S+ \S+\s+<jpg 64x48 RGB, [\d.]+ (B|kB)>", first), first
    assert re.search(r"cls\s+1 B\s+0$", first, re.M), first
    assert '{"label": 0, "text": "a b"}' in first
    assert "<40 B binary: 00 01 02 03" in first
    assert ESC.decode() not in out


def test_skip_and_fields(sh, tmp_path):
    make_small(tmp_path)
    out = sh("tarshow --format blocks --skip 2 -f 'png;jpg cls' small.tar | cat").stdout.decode()
    blocks = out.strip("\n").split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["0002", "0003"]
    lines = blocks[0].splitlines()
    assert len(lines) == 3 and lines[1].split()[0] == "jpg" and lines[2].split()[0] == "cls"
    assert "json" not in out and "binary" not in out


def _tty_run(sh, cmd, cols=50):
    require("script")
    return sh(f"COLUMNS={cols} LINES=40 script -qec {cmd!r} /dev/null", stderr_ok=True).stdout


def test_terminal_images_under_pty(sh, tmp_path):
    members = [("a.png", png_bytes(200, 100, seed=1)), ("a.cls", b"1"), ("b.png", png_bytes(200, 100, seed=2))]
    (tmp_path / "x.tar").write_bytes(tar_bytes(members))
    out = _tty_run(sh, "tarshow -f png -c 1 x.tar", cols=50)
    assert re.search(rb"\x1b\[38;2;\d+;\d+;\d+;48;2;\d+;\d+;\d+m\xe2\x96\x80", out), out[:300]
    rows = [line for line in out.split(b"\n") if "▀".encode() in line]
    # 200x100 image in 50 columns: 25 pixel rows, padded to 26 -> 13 text rows of 50 cells
    assert len(rows) == 13
    assert all(r.count("▀".encode()) == 50 for r in rows)
    assert b"<png 200x100 RGB" in out


def test_plain_when_piped(sh, tmp_path):
    (tmp_path / "x.tar").write_bytes(tar_bytes(image_shard(2)))
    out = sh("tarshow --format blocks -f png x.tar | cat").stdout
    assert ESC not in out and "▀".encode() not in out
    assert out.count(b"<png 32x24 RGB") == 2
    # piped, the default (auto) is the original tarshow's lines, as its users' scripts grep them
    out = sh("tarshow -f png x.tar | cat").stdout
    assert ESC not in out and "▀".encode() not in out
    assert out.count(b"png                 \tb'\\x89PNG") == 2
    # -q (the original's --quick) never draws, even on a terminal
    out = _tty_run(sh, "tarshow -q -f png x.tar")
    assert "▀".encode() not in out and b"<png 32x24" in out


def test_grid_contact_sheet(sh, tmp_path):
    from PIL import Image

    members = []
    colors = []
    for i in range(7):
        data = jpeg_bytes(80, 60, seed=i)
        colors.append(Image.open(io.BytesIO(data)).convert("RGB").getpixel((40, 30)))
        members += [(f"k{i}.jpg", data), (f"k{i}.cls", b"1")]
    (tmp_path / "x.tar").write_bytes(tar_bytes(members))
    p = sh("tarshow --grid sheet.png -c 5 --thumb 64 -f jpg x.tar")
    assert p.stdout == b""
    sheet = Image.open(tmp_path / "sheet.png")
    # 5 images -> 3 columns, 2 rows; cell 64 + 4 padding, label 16
    assert sheet.size == (3 * 68 + 4, 2 * (64 + 16 + 4) + 4)
    # the first cell shows the first image (80x60 fits as 64x48, centred)
    got = sheet.convert("RGB").getpixel((4 + 32, 4 + 32))
    assert all(abs(a - b) <= 6 for a, b in zip(got, colors[0])), (got, colors[0])
    # the sixth cell is empty background
    assert sheet.convert("RGB").getpixel((4 + 2 * 68 + 32, 4 + 84 + 32)) == (32, 32, 32)
    # the key is written under the image: the label strip is not all background
    strip = sheet.convert("RGB").crop((4, 4 + 64, 4 + 64, 4 + 80))
    assert len(strip.getcolors(4096)) > 1


def test_npy_normalize_and_cmap(sh, tmp_path):
    import numpy as np
    from PIL import Image

    arr = np.tile(np.arange(64, dtype=np.float32) * 10.0, (64, 1))  # 0..630, left to right
    buf = io.BytesIO()
    np.save(buf, arr)
    (tmp_path / "a.tar").write_bytes(tar_bytes([("s.depth.npy", buf.getvalue()), ("s.cls", b"1")]))
    out = sh("tarshow --format blocks a.tar").stdout.decode()
    assert "<npy float32 64x64, 17 kB>" in out
    sh("tarshow --grid g.png -f depth.npy -N -C viridis --thumb 64 a.tar")
    g = Image.open(tmp_path / "g.png").convert("RGB")
    assert g.size == (72, 88)
    left, right = g.getpixel((4, 36)), g.getpixel((4 + 63, 36))
    assert all(abs(a - b) <= 2 for a, b in zip(left, (68, 1, 84))), left  # viridis low end
    assert all(abs(a - b) <= 2 for a, b in zip(right, (253, 231, 37))), right  # viridis high end
    # without -N the floats are clipped to [0, 1]: only the first column is not at the top colour
    sh("tarshow --grid h.png -f depth.npy -C gray --thumb 64 a.tar")
    h = Image.open(tmp_path / "h.png").convert("RGB")
    assert h.getpixel((4, 36)) == (0, 0, 0) and h.getpixel((4 + 10, 36)) == (255, 255, 255)
    # grayscale image through a colormap, drawn in a terminal
    gray = png_bytes(16, 8, seed=3, mode="L")
    (tmp_path / "b.tar").write_bytes(tar_bytes([("g.png", gray)]))
    out = _tty_run(sh, "tarshow -f png -C hot b.tar", cols=16)
    cells = re.findall(rb"\x1b\[38;2;(\d+);(\d+);(\d+);48", out)
    assert len(cells) == 16 * 4
    # hot: red >= green >= blue for every colour
    assert all(int(r) >= int(g) >= int(b) for r, g, b in cells)


def test_damaged_input(sh, tmp_path):
    data = tar_bytes(image_shard(3))
    p = sh("tarshow", input=data[:700], ok=False)
    assert p.returncode == 2
    assert len(p.stderr.decode().strip().splitlines()) == 1


def test_help_and_bad_cmap(sh):
    out = sh("tarshow --help").stdout.decode()
    assert "examples:" in out and "tarshow -c 2 small.tar" in out
    p = sh("tarshow -C nosuch < /dev/null", ok=False)
    assert p.returncode == 2 and b"unknown colormap" in p.stderr


from helpers import run_measured as _run_measured  # noqa: E402


def _tar(members):
    return b"".join(mc.member(n, d) for n, d in members) + mc.EOA


def _png(width, height):
    """A grey PNG of any size made with zlib (no pixels in memory)."""
    return mc.png_header_bomb(width, height)


def test_tarshow_gzip_bomb(tmp_path):
    """A 400 KB .tar.gz whose first member inflates to 96 MB: tarshow -c 1
    shows it (holding the member is the codec's part: issue 12 spools large
    members to disk; the preview's part is the next test)."""
    size = 96 << 20
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = comp.compress(mc.header(b"bomb.txt", size))
    zeros = b"a" * (1 << 20)
    for _ in range(size >> 20):
        body += comp.compress(zeros)
    body += comp.compress(mc.EOA) + comp.flush()
    assert len(body) < 1 << 20
    (tmp_path / "bomb.tar.gz").write_bytes(body)
    p, cpu, rss = _run_measured("tarshow --format blocks -c 1 bomb.tar.gz", tmp_path)
    assert p.returncode == 0, p.stderr
    assert b"bomb" in p.stdout and b"101 MB" in p.stdout and len(p.stdout) < 1000


def test_pixel_budget(tmp_path):
    """A 9000x9000 PNG of 40 KB is not decoded by tarshow --grid or terminal
    images (a warning names it); TARPROC_MAX_PIXELS moves the budget."""
    (tmp_path / "in.tar").write_bytes(_tar([("big.png", _png(9000, 9000)), ("small.png", _png(64, 64))]))
    p, cpu, rss = _run_measured("tarshow --grid sheet.png in.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert re.search(rb"warning: sample 'big': png: not drawn: .*pixel budget", p.stderr), p.stderr
    assert rss < 250, f"{rss:.0f} MB"
    from PIL import Image

    with Image.open(tmp_path / "sheet.png") as sheet:  # the small one is on the sheet
        assert sheet.size[0] > 0
    p, _, _ = _run_measured("tarshow -f png --images always in.tar", tmp_path, env={"TARPROC_MAX_PIXELS": "1000"})
    assert p.returncode == 0
    assert p.stderr.count(b"not drawn") == 2, p.stderr
    assert b"\x1b[38;2" not in p.stdout
    p, _, _ = _run_measured("tarshow -f png --images always in.tar", tmp_path, env={"TARPROC_MAX_PIXELS": "5000"})
    assert p.stderr.count(b"not drawn") == 1 and b"\x1b[38;2" in p.stdout


def test_npy_over_the_pixel_budget_is_not_loaded(tmp_path):
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.zeros((300, 300), dtype=np.uint8))
    (tmp_path / "in.tar").write_bytes(_tar([("a.npy", buf.getvalue())]))
    p, _, _ = _run_measured("tarshow -f npy --images always in.tar", tmp_path, env={"TARPROC_MAX_PIXELS": "1000"})
    assert p.returncode == 0 and b"pixel budget" in p.stderr, p.stderr


def _gzip_bomb(size, tail=b""):
    """A .tar.gz (about size/1000 bytes) whose member bomb.txt inflates to ``size`` bytes."""
    import zlib

    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [comp.compress(mc.header(b"bomb.txt", size))]
    chunk = b"a" * (1 << 20)
    for _ in range(size >> 20):
        out.append(comp.compress(chunk))
    out.append(comp.compress(mc.member(b"bomb.cls", b"7") + tail + mc.EOA) + comp.flush())
    return b"".join(out)


@pytest.mark.parametrize("fmt", ["blocks", "original"])
def test_tarshow_bomb_writes_nothing_to_disk(sh, tmp_path, fmt):
    """tarshow only previews: a member that inflates far past the blob
    threshold is read through, keeping its head, and never spooled (before:
    the whole member went to a spool file).  `ulimit -f` makes any spool
    write of more than 1 MB kill the command."""
    (tmp_path / "bomb.tar.gz").write_bytes(_gzip_bomb(48 << 20, mc.member(b"next.txt", b"hi")))
    p = sh(f"ulimit -f 1024; tarshow -c 1 --format {fmt} < bomb.tar.gz",
           env={"TARPROC_BLOB_THRESHOLD": "64K", "TMPDIR": str(tmp_path)})
    text = p.stdout.decode()
    if fmt == "blocks":
        assert text.splitlines()[0] == "bomb"
        assert "50 MB  aaaa" in text and "7" in text and "next" not in text  # 48 MiB = 50.3 MB (decimal units)
    else:
        assert "txt                 \tb'aaaa" in text and "cls                 \tb'7'" in text
    assert sorted(os.listdir(tmp_path)) == ["bomb.tar.gz"]


def test_tarshow_original_check_and_flags(sh, tmp_path):
    """The original's own test (`tarshow imagenet.tar` shows b'746') holds
    with --format original and piped (auto); --format blocks gives the block
    display (on a terminal, the default: docs/tarshow.md); the original's
    --use-keyboard is accepted."""
    data = mc.member(b"20.cls", b"746") + mc.member(b"20.wnid", b"n07734744") + mc.EOA
    (tmp_path / "in.tar").write_bytes(data)
    out = sh("tarshow --format original --use-keyboard in.tar").stdout.decode()
    assert "b'746'" in out and "n07734744" in out
    assert out.splitlines()[:4] == [f"{'__key__':20s}\t20", f"{'__source__':20s}\tin.tar",
                                    f"{'cls':20s}\tb'746'", f"{'wnid':20s}\tb'n07734744'"]
    assert sh("tarshow in.tar").stdout.decode() == out
    out = sh("tarshow --format blocks in.tar").stdout.decode()
    assert [line.split() for line in out.splitlines()] == [["20"], ["cls", "3", "B", "746"],
                                                            ["wnid", "9", "B", "n07734744"]]


def test_a_contact_sheet_with_no_image_is_not_written(sh, tmp_path):
    # the user's run: -f cls names no image; before, a blank PNG and exit 0
    (tmp_path / "shard.tar").write_bytes(tar_bytes(image_shard(6)))
    p = sh("tarshow --grid s3.png -c 4 -f cls shard.tar", ok=False)
    assert p.returncode == 1 and not (tmp_path / "s3.png").exists()
    assert p.stderr.decode() == ("tarshow: no image to draw: -f 'cls' names no image or array in the 6 samples "
                                 "read (their fields: cls, png); s3.png not written\n")
    p = sh("tarcat -f cls shard.tar | tarshow --grid s4.png", ok=False)
    assert p.returncode == 1 and not (tmp_path / "s4.png").exists()
    assert "no field is an image or array in the 6 samples read (their fields: cls)" in p.stderr.decode()
    p = sh("tarshow --grid s5.png < /dev/null", ok=False)
    assert p.returncode == 1 and "no image to draw: no samples read; s5.png not written" in p.stderr.decode()
    # one image is a sheet
    sh("tarshow --grid s6.png -c 4 -f png shard.tar")
    assert (tmp_path / "s6.png").read_bytes()[:4] == b"\x89PNG"
