"""What a new user tripped over (issue 15): each case as the user met it,
through the installed commands."""

import io
import json
import tarfile

import pytest

from helpers import jpeg_bytes, png_bytes, read_tar, tar_bytes


def small_tar(n=4, ext="png"):
    return tar_bytes([m for i in range(n) for m in ((f"s{i}.{ext}", png_bytes(4, 4, seed=i)),
                                                    (f"s{i}.cls", str(i).encode()))])


# ---------------------------------------------------------------- -f that matches nothing


def test_tarcat_fields_matching_nothing_warns_once(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(small_tar())
    p = sh("tarcat -f nofield in.tar > out.tar", stderr_ok=True)
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and "'nofield'" in lines[0], lines
    assert "4 samples" in lines[0] and "cls, png" in lines[0]
    assert read_tar((tmp_path / "out.tar").read_bytes()) == []
    # a selection that keeps some samples says nothing; -q silences the warning
    sh("tarcat -f 'png cls' in.tar | tar tf - > /dev/null")
    assert sh("tarcat -q -f nofield in.tar > /dev/null").stderr == b""


def test_tables_and_previews_name_the_columns_no_sample_has(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(small_tar())
    p = sh("tar2tsv -f 'cls nofield' in.tar", stderr_ok=True)
    assert p.stdout.decode().splitlines()[1] == "s0\t0\t"
    assert p.stderr.decode().count("\n") == 1 and "no sample has 'nofield'" in p.stderr.decode()
    p = sh("tarshow -f 'jpg;gif cls' in.tar", stderr_ok=True)
    assert p.stderr.decode().count("\n") == 1 and "'jpg;gif'" in p.stderr.decode()
    p = sh("tarfirst -f nofield in.tar", ok=False)
    assert p.returncode == 1 and b"no sample matched" in p.stderr and b"cls, png" in p.stderr


# ---------------------------------------------------------------- output names


@pytest.mark.parametrize("name", ["out.tar.lz4", "out.tar.Z", "out.tar.lzma", "out.tar.lz", "out.tar.br",
                                  "out.zip"])
def test_unwritable_compression_suffix_is_refused(sh, tmp_path, name):
    (tmp_path / "in.tar").write_bytes(small_tar())
    p = sh(f"tarcat in.tar -o {name}", ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and b"cannot write" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.tar"]  # nothing written, no leftovers
    p = sh(f"tarsplit -n 2 -o 'part-%02d{name[3:]}' in.tar", ok=False)
    assert p.returncode == 2 and b"cannot write" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.tar"]


def test_tar_zstd_suffix_is_honoured_as_zstd(sh, tmp_path):
    from conftest import require

    require("zstd")
    (tmp_path / "in.tar").write_bytes(small_tar())
    sh("tarcat in.tar -o out.tar.zstd")
    assert (tmp_path / "out.tar.zstd").read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    plain = sh("zstd -dc out.tar.zstd").stdout
    assert sorted(read_tar(plain)) == sorted(read_tar(small_tar()))


# ---------------------------------------------------------------- inputs that are not tar


def _zip_bytes():
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.txt", "hello")
    return buf.getvalue()


NOT_TAR = {
    "PNG image data": lambda: png_bytes(64, 48),
    "JPEG image data": lambda: jpeg_bytes(64, 48),
    "GIF image data": lambda: b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
    "a PDF document": lambda: b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n" * 20,
    "a ZIP archive": _zip_bytes,
    "a 7-Zip archive": lambda: b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(600),
    "a RAR archive": lambda: b"Rar!\x1a\x07\x01\x00" + bytes(40),
    "an ELF executable": lambda: open("/bin/true", "rb").read(),
    "an HTML document": lambda: b"<!DOCTYPE html>\n<html><body>404 Not Found</body></html>\n",
    "an XML document": lambda: b'<?xml version="1.0"?><Error><Code>NoSuchKey</Code></Error>\n' * 10,
    "JSON text": lambda: json.dumps({"error": "not found", "pad": "x" * 600}).encode(),
    "lz4 compressed data": lambda: b"\x04\x22\x4d\x18\x64\x40\xa7" + bytes(700),
    "Unix compress (.Z) data": lambda: b"\x1f\x9d\x90" + bytes(30),
    "text": lambda: b"just some words\n",
}


def test_not_a_tar_archive_says_what_it_looks_like(sh, tmp_path):
    for n, what in enumerate(sorted(NOT_TAR)):
        (tmp_path / f"thing{n}").write_bytes(NOT_TAR[what]())
    p = sh(f"for n in $(seq 0 {len(NOT_TAR) - 1}); do tarcat < thing$n > /dev/null; echo $? >&2; done", stderr_ok=True)
    lines = p.stderr.decode().splitlines()
    for n, what in enumerate(sorted(NOT_TAR)):
        err, rc = lines[2 * n: 2 * n + 2]
        assert rc == "2" and err.startswith(f"tarcat: stdin: offset 0: not a tar archive (looks like {what}"), err
    p = sh("tarcat thing0 > /dev/null", ok=False)  # the source is named, as for any damage
    assert p.returncode == 2 and p.stderr.decode().startswith("tarcat: thing0: offset 0: not a tar archive")


def test_damaged_tar_header_is_still_reported_as_damage(sh, tmp_path):
    data = bytearray(small_tar())
    data[148:156] = b"zzzzzzz\0"  # checksum field of a real ustar header
    (tmp_path / "bad.tar").write_bytes(bytes(data))
    p = sh("tarcat bad.tar > /dev/null", ok=False)
    assert p.returncode == 2 and b"not a tar archive (looks like" not in p.stderr and b"offset 0" in p.stderr
    # a PNG that comes after a good archive is not sniffed: the offset says where
    (tmp_path / "img.png").write_bytes(png_bytes(64, 48))
    p = sh("cat bad.tar img.png | tarcat -c 1 > /dev/null", ok=False)
    assert p.returncode == 2


# ---------------------------------------------------------------- tarcheck goes on


def test_tarcheck_reports_an_unreadable_shard_and_checks_the_rest(sh, tmp_path):
    (tmp_path / "a.tar").write_bytes(small_tar())
    (tmp_path / "b.tar").write_bytes(tar_bytes([("t0.png", b"x"), ("t0.cls", b"1")]))
    (tmp_path / "bad.tar").write_bytes(tar_bytes([(f"z{i}.bin", bytes(1000)) for i in range(3)])[:2100])  # cut
    p = sh("tarcheck a.tar missing.tar bad.tar b.tar", ok=False)
    out, err = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 2
    assert len(err.splitlines()) == 2 and "missing.tar" in err and "bad.tar: offset" in err
    assert "b.tar: 1 samples" in out and "PROBLEM unreadable" in out and out.rstrip().endswith("4 shards")
    assert "total: 4 shards" in out
    p = sh("tarcheck --json a.tar missing.tar bad.tar b.tar", ok=False)
    report = json.loads(p.stdout)
    assert p.returncode == 2 and not report["ok"] and report["total"]["shards"] == 4
    kinds = {r["url"]: [q["kind"] for q in r["problems"]] for r in report["shards"]}
    assert kinds == {"a.tar": [], "missing.tar": ["unreadable"], "bad.tar": ["unreadable"], "b.tar": []}
    assert report["shards"][2]["members"] == 1  # counted up to the damage
    # the library call goes on too
    import tarproc

    rep = tarproc.check_shards([str(tmp_path / "missing.tar"), str(tmp_path / "a.tar")])
    assert [r["samples"] for r in rep["shards"]] == [0, 4] and not rep["ok"]


# ---------------------------------------------------------------- upper-case extensions


def test_upper_case_extensions_give_webdatasets_field_names(sh, tmp_path):
    import webdataset as wds

    import tarproc

    members = [("x1.JPEG", jpeg_bytes()), ("x1.Cls", b"3"), ("a.b/C2.Seg.PNG", b"p"), ("a.b/C2.cls", b"4")]
    (tmp_path / "in.tar").write_bytes(tar_bytes(members))
    ours = [{k: v for k, v in s.items() if k != "__source__"}
            for s in tarproc.iter_samples(str(tmp_path / "in.tar"))]
    theirs = [{k: v for k, v in s.items() if not k.startswith("__") or k == "__key__"}
              for s in wds.WebDataset(str(tmp_path / "in.tar"), shardshuffle=False)]
    assert ours == theirs and sorted(ours[0]) == ["__key__", "cls", "jpeg"] and ours[1]["__key__"] == "a.b/C2"
    # -f finds the lower-cased field; written back, the member is named by the field (keys keep their case)
    out = sh("tarcat -f 'jpeg cls' in.tar | tar tf -").stdout.decode().split()
    assert out == ["x1.cls", "x1.jpeg"]
    assert sh("tarfirst -f jpeg in.tar").stdout == members[0][1]
    # the same field twice once lower-cased is a duplicate, as for webdataset
    (tmp_path / "dup.tar").write_bytes(tar_bytes([("d.JPG", b"1"), ("d.jpg", b"2")]))
    p = sh("tarcat dup.tar > /dev/null", ok=False)
    assert p.returncode == 2 and b"'jpg' appears twice" in p.stderr
    with pytest.raises(ValueError):
        list(wds.WebDataset(str(tmp_path / "dup.tar"), shardshuffle=False))
    p = sh("tarcheck dup.tar", ok=False)
    assert p.returncode == 1 and b"duplicate_fields" in p.stdout
    # a sample made in Python is written with its fields as given
    tarproc.write_samples(str(tmp_path / "py.tar"), [{"__key__": "k", "TXT": b"a"}])
    assert [n for n, _ in read_tar((tmp_path / "py.tar").read_bytes())] == ["k.TXT"]


# ---------------------------------------------------------------- tar2tsv columns


def test_tar2tsv_columns_are_every_field_of_the_first_samples(sh, tmp_path):
    members = [("a.x", b"1"), ("b.y", b"2"), ("c.x", b"3"), ("c.z", b"9"), ("d.w", b"0")]
    (tmp_path / "m.tar").write_bytes(tar_bytes(members))
    assert sh("tar2tsv m.tar").stdout.decode() == "__key__\tw\tx\ty\tz\na\t\t1\t\t\nb\t\t\t2\t\nc\t\t3\t\t9\nd\t0\t\t\t\n"
    p = sh("tar2tsv --scan 2 --format csv m.tar", stderr_ok=True)
    assert p.stdout.decode() == "__key__,x,y\na,1,\nb,,2\nc,3,\nd,,\n"
    err = p.stderr.decode().splitlines()  # each new field named once
    assert len(err) == 2 and "'c': field z not in the columns" in err[0] and "'d': field w" in err[1]
    rows = [json.loads(x) for x in sh("tar2tsv --format jsonl m.tar").stdout.splitlines()]
    assert rows[2] == {"__key__": "c", "x": "3", "z": "9"} and rows[3] == {"__key__": "d", "w": "0"}
    # with -f the header comes at once (streaming) and has exactly those columns
    assert sh("tar2tsv -f 'y x' -c 2 m.tar").stdout.decode() == "__key__\ty\tx\na\t\t1\nb\t2\t\n"


# ---------------------------------------------------------------- the README's gm example


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


# ---------------------------------------------------------------- found by the docs harness


def test_map_function_chained_into_map_command(tmp_path):
    # the README's Python example: failed before the runtime rewrite (the pool was started from a thread)
    import tarproc

    (tmp_path / "in.tar").write_bytes(small_tar(2))

    def tag(sample):
        sample["tag"] = b"x"
        return sample

    mapped = tarproc.map_function(tarproc.iter_samples(str(tmp_path / "in.tar")), tag, parallel=2)
    out = list(tarproc.map_command(mapped, "cp sample.tag sample.tag2", parallel=2))
    assert [s["tag2"] for s in out] == [b"x", b"x"]


def test_a_tar_cut_inside_its_first_header_is_not_called_text(sh, tmp_path):
    (tmp_path / "cut.tar").write_bytes(small_tar()[:100])
    p = sh("tarcat < cut.tar > /dev/null", ok=False)
    assert p.returncode == 2 and b"input ends inside a header (100 of 512 bytes)" in p.stderr


# ---------------------------------------------------------------- tarpcat on a slow input


def _slow_parts(tmp_path, name, n=6, cut=3):
    data = tar_bytes([(f"{name}{i}.txt", b"x" * 10) for i in range(n)])
    (tmp_path / f"{name}1").write_bytes(data[: cut * 1024])  # one 1 KiB member per sample
    (tmp_path / f"{name}2").write_bytes(data[cut * 1024:])
    (tmp_path / f"{name}.tar").write_bytes(data)


def test_tarpcat_passes_samples_on_while_its_input_stalls(tmp_path):
    import os
    import signal
    import subprocess
    import time

    _slow_parts(tmp_path, "s")
    # 3 samples arrive, then the input is silent for 20 s: the first sample must come out at once
    cmd = """tarpcat -w 1 'pipe:sh -c "cat s1; sleep 20; cat s2"' | tarcat -c 1 -o out.tar"""
    start = time.monotonic()
    p = subprocess.Popen(["bash", "-c", cmd], cwd=tmp_path, start_new_session=True, stderr=subprocess.PIPE)
    try:
        while not (tmp_path / "out.tar").exists() and time.monotonic() - start < 15:
            time.sleep(0.05)
        took = time.monotonic() - start
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert took < 15, "no output while the input stalled"
    assert [n for n, _ in read_tar((tmp_path / "out.tar").read_bytes())] == ["s0.txt"]


def test_tarpcat_early_batches_keep_the_order_and_bytes(sh, tmp_path):
    _slow_parts(tmp_path, "a")
    _slow_parts(tmp_path, "b", n=5, cut=2)
    fast = sh("tarpcat -w 2 a.tar b.tar").stdout
    slow = sh("""tarpcat -w 2 'pipe:sh -c "cat a1; sleep 0.5; cat a2"' 'pipe:sh -c "cat b1; sleep 0.3; cat b2"'""").stdout
    assert slow == fast and len(read_tar(slow)) == 11
