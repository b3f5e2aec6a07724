"""tarfirst: raw bytes of the first matching field; stops reading at the match."""

import io
import os
import subprocess

from helpers import jpeg_bytes, png_bytes, tar_bytes
from helpers import run_pipefail as run, prefixed_shard as shard


def make_shard(tmp_path, n=8):
    members = []
    images = {}
    for i in range(n):
        key = f"{i:04d}"
        if i == 0:
            members.append((f"{key}.txt", b"no image here"))
        else:
            ext = "jpg" if i % 2 else "png"
            images[key] = png_bytes(seed=i) if ext == "png" else jpeg_bytes(seed=i)
            members.append((f"{key}.{ext}", images[key]))
        members.append((f"{key}.cls", str(i).encode()))
    data = tar_bytes(members)
    (tmp_path / "small.tar").write_bytes(data)
    return data, images


def test_example_select(sh, tmp_path):
    from PIL import Image

    _, images = make_shard(tmp_path)
    sh("tarfirst -f 'jpg;png' -S 'int(_.cls) == 3' small.tar > three.png")
    got = (tmp_path / "three.png").read_bytes()
    assert got == images["0003"]
    assert Image.open(io.BytesIO(got)).size == (32, 24)


def test_default_fields_item_access_nth(sh, tmp_path):
    _, images = make_shard(tmp_path)
    assert sh("tarfirst small.tar").stdout == images["0001"]  # sample 0 has no image
    assert sh("tarfirst -n 3 small.tar").stdout == images["0003"]
    assert sh("""tarfirst -S '_["cls"] == "4"' small.tar""").stdout == images["0004"]
    assert sh("tarfirst -f cls -S 'int(_.cls) > 5' -n 2 small.tar").stdout == b"7"
    assert sh("tarfirst -f txt < small.tar").stdout == b"no image here"
    assert sh("tarfirst -s 4 -f cls small.tar").stdout == b"4"  # -s is --skip, as in the original
    # a field the expression names but the sample lacks: no match for that sample
    assert sh("tarfirst -f cls -S '_.txt == \"no image here\"' small.tar").stdout == b"0"


def test_output_file_and_no_match(sh, tmp_path):
    _, images = make_shard(tmp_path)
    p = sh("tarfirst -v -f png -o out.png small.tar", stderr_ok=True)
    assert (tmp_path / "out.png").read_bytes() == images["0002"] and p.stdout == b""
    assert b"0002.png" in p.stderr
    p = sh("tarfirst -S 'int(_.cls) == 99' -o none.png small.tar", ok=False)
    assert p.returncode == 1 and b"no sample matched" in p.stderr
    assert not [n for n in os.listdir(tmp_path) if "none" in n]
    p = sh("tarfirst -S '_.cls ==' small.tar", ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    p = sh("tarfirst -f cls -S 'int(_.cls) / 0' small.tar", ok=False)
    assert p.returncode == 2 and b"ZeroDivisionError" in p.stderr and len(p.stderr.splitlines()) == 1


def test_stops_reading_at_the_match(tmp_path):
    data, images = make_shard(tmp_path)
    # stdin stays open (an endless input): tarfirst must return once it has the match
    p = subprocess.Popen(["tarfirst", "-S", "int(_.cls) == 2"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(data)
    p.stdin.flush()
    try:
        rc = p.wait(timeout=60)  # the output (one small image) fits in the pipe buffer
        out, err = p.stdout.read(), p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdin.close()
        p.stdout.close()
        p.stderr.close()
    assert rc == 0, err
    assert out == images["0002"]


def test_tarfirst_output_naming_its_input_is_refused(tmp_path):
    """`tarfirst -f jpg -o shard.tar shard.tar` (first.jpg meant) replaced the
    shard by one field's bytes; lines2tar, tarindex and tarmix refuse it."""
    (tmp_path / "a.tar").write_bytes(shard(3))
    before = (tmp_path / "a.tar").read_bytes()
    p = run("tarfirst -f txt -o a.tar a.tar", tmp_path)
    assert p.returncode == 2, p.stderr
    assert b"a.tar: is also the output" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr
    assert (tmp_path / "a.tar").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["a.tar"]
    assert run("tarfirst -f txt -o first.txt a.tar", tmp_path).returncode == 0
    assert (tmp_path / "first.txt").read_bytes() == b"s 0 "


def test_a_select_that_finds_nothing_says_what_it_could_not_find(sh, tmp_path):
    # the user's expressions: a misspelt JSON key, a JSON field read as an attribute
    import json as json_module

    (tmp_path / "in.tar").write_bytes(tar_bytes([m for i in range(4) for m in (
        (f"k{i}.json", json_module.dumps({"name": "cat", "label": i}).encode()), (f"k{i}.jpg", b"x"))]))
    cases = {
        """_.json.json["nmae"] == "boat\"""": "no key 'nmae' in 4 of the 4 samples",
        '_.json.name == "boat"': "a field's value (bytes) has no attribute 'name' (for a JSON field: "
                                 "_.FIELD.json['name']) in 4 of the 4 samples",
        '_.lable == "boat"': "no field 'lable' in 4 of the 4 samples",
        '_["lable"] == "boat"': "no field 'lable' in 4 of the 4 samples",
    }
    for expr, said in cases.items():
        p = sh(f"tarfirst -f json -S '{expr}' in.tar", ok=False)
        assert p.returncode == 1 and p.stderr.decode() == \
            f"tarfirst: no sample matched (-S: {said}; their fields: jpg, json)\n", (expr, p.stderr)
    # found but false: nothing was missing, nothing more to say
    p = sh("""tarfirst -f json -S '_.json.json["name"] == "boat"' in.tar""", ok=False)
    assert p.returncode == 1 and p.stderr == b"tarfirst: no sample matched\n"
    assert b'"label": 2' in sh("""tarfirst -f json -S '_.json.json["label"] == 2' in.tar""").stdout
