"""A drop-in for the original tarproc utilities' users (issue 19).

- The original's own command tests (its test/test_commands.py) check that each
  command's --help has certain words, and that tarshow shows ``b'746'`` and
  ``n07734744`` for its ImageNet shard: the same checks, on our commands.
- The command lines of the original's docs/examples.md and docs/commands.md
  that need no network, run as written against an ImageNet-like shard made
  here (PNG images, cls, wnid, xml; keys 10, 12, 13, 15, ...), outputs read
  with tarfile, Pillow and PyYAML.
- lines2tar, tar2json, tarmix, URL#START,END ranges, tarsort --update.
"""

import io
import json
import os
import subprocess
import tarfile
import time

import pytest

# (command, words its --help must contain): the original's checks, plus the
# original descriptions of the commands it had that its tests did not check.
HELP_WORDS = [
    ("tar2tsv", "Extract textual"), ("tarcats", "Concatenate"), ("tarfirst", "Dump the"),
    ("tarmix", "specified by a YAML"), ("tarproc", "Each sample is extracted"), ("tarshow", "Show data inside"),
    ("tarsort", "Sort the samples inside"), ("tarsplit", "Split a tar"), ("tsv2tar", "Create a tar file"),
    ("tar2json", "Extract parts of a tar file"), ("lines2tar", "Create a tar file from the lines"),
    ("tarscat", "Concatenate"), ("tarpcat", "Read, shuffle and combine"),
]

# key, cls, wnid, (width, height), has an xml annotation
IMAGENET = [(10, 304, "n04380533", (60, 79), False), (12, 551, "n03485407", (20, 30), False),
            (13, 180, "n02088632", (40, 24), False), (15, 165, "n02410509", (50, 40), True),
            (18, 625, "n02169497", (30, 30), False), (20, 746, "n07734744", (32, 20), True),
            (22, 180, "n02088632", (24, 24), False), (25, 14, "n02077923", (16, 16), True),
            (27, 897, "n03220513", (20, 20), False), (29, 54, "n02488702", (28, 18), False)]


def sh(cmd, cwd, data=None, check=True, timeout=120):
    p = subprocess.run(["bash", "-c", cmd], input=data, cwd=cwd, capture_output=True, timeout=timeout)
    if check:
        assert p.returncode == 0, (cmd, p.stderr.decode(errors="replace"))
        assert b"Traceback" not in p.stderr
    return p


def members(path_or_bytes):
    f = tarfile.open(fileobj=io.BytesIO(path_or_bytes)) if isinstance(path_or_bytes, bytes) \
        else tarfile.open(path_or_bytes)
    with f:
        return [(m.name, f.extractfile(m).read()) for m in f if m.isfile()]


def samples_of(data):
    out = {}
    for name, value in members(data):
        key, _, field = name.partition(".")
        out.setdefault(key, {})[field] = value
    return out


def png(size, seed):
    from PIL import Image

    img = Image.new("RGB", size, (seed * 37 % 256, seed * 91 % 256, seed * 53 % 256))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """testdata/imagenet-000000.tar (ImageNet-like) and testdata/sample.tar
    (90 small samples), as the original's docs use them."""
    d = tmp_path_factory.mktemp("original")
    (d / "testdata").mkdir()
    with tarfile.open(d / "testdata" / "imagenet-000000.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        for key, cls, wnid, size, has_xml in IMAGENET:
            xml = (f"<annotation>\n\t<folder>{wnid}</folder>\n\t<filename>{wnid}_{key}</filename>\n"
                   f"</annotation>\n").encode() if has_xml else b"None"
            for field, value in (("cls", str(cls).encode()), ("png", png(size, key)), ("wnid", wnid.encode()),
                                 ("xml", xml)):
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(value)
                tf.addfile(info, io.BytesIO(value))
    with tarfile.open(d / "testdata" / "sample.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(90):
            for field, value in (("txt", b"sample %d\n" % i), ("cls", str(i % 7).encode())):
                info = tarfile.TarInfo(f"s{i:04d}.{field}")
                info.size = len(value)
                tf.addfile(info, io.BytesIO(value))
    (d / "testdata" / "hello").write_text("world\n")
    (d / "testdata" / "plan.tsv").write_text("__key__\t@file\ta\tb\tc\na\thello\t1\t1\t1\nb\thello\t1\t1\t1\n"
                                             "c\thello\t1\t1\tf\n")
    return d


# ---------------------------------------------------------------- the original's own test checks


@pytest.mark.parametrize("name,words", HELP_WORDS)
def test_help_says_what_the_original_said(name, words, tmp_path):
    p = sh(f"{name} --help", tmp_path)
    text = p.stdout.decode()
    assert words in " ".join(text.split()), text  # words may be wrapped across lines
    # the first line after the usage says what the command does
    summary = text.split("\n\n")[1].strip()
    assert summary and not summary.startswith("-")


def test_tarshow_shows_python_bytes_in_original_format(work):
    out = sh("tarshow --format original testdata/imagenet-000000.tar", work).stdout.decode()
    assert "b'746'" in out and "n07734744" in out
    first = out.split("\n\n")[0].splitlines()
    assert first[0] == f"{'__key__':20s}\t10"
    assert first[2] == f"{'cls':20s}\tb'304'"
    assert first[3].startswith(f"{'png':20s}\tb'\\x89PNG\\r\\n\\x1a\\n")
    assert len(first[3].split("\t")[1]) == 60


# The original's command tests run a bash script and search its output
# (stdout and stderr) for regular expressions.  These are its scripts with
# its patterns, unchanged: piped, tarshow prints the original's lines.
ORIGINAL_RUNS = [
    ("(echo a; echo b; echo c) > lines.txt; lines2tar < lines.txt | tar tf -", ["000000.txt"]),
    ("(echo a; echo b; echo c) > lines.txt; lines2tar < lines.txt | tar2json -k txt", ["txt: a"]),
    ("(echo a; echo b; echo c) | lines2tar > tar1.tar; (echo d; echo e; echo f) | lines2tar > tar2.tar; "
     "tarcats tar1.tar tar2.tar > tar12.tar; tar2json -k txt < tar12.tar", ["txt: a", "txt: e"]),
    ("(echo a; echo b; echo c) | lines2tar > tar1.tar; tarproc -c 'cp sample.txt sample.x.txt' tar1.tar -o tar2.tar; "
     "tar2json -k x.txt < tar2.tar", ["x.txt: a"]),
    ("tarshow testdata/imagenet-000000.tar", ["b'746'", "n07734744"]),
    ("(echo a; echo b; echo c) | lines2tar > tar1.tar; tarshow tar1.tar", ["txt.*b'b'"]),
    ("(echo c; echo b; echo a) | lines2tar > tar1.tar; tarsort tar1.tar -o tar2.tar -s txt; "
     "tar2json -k txt < tar2.tar", ["txt: a"]),
]


@pytest.mark.parametrize("script,patterns", ORIGINAL_RUNS)
def test_original_command_runs_match_its_patterns(script, patterns, work, tmp_path):
    import re

    os.symlink(work / "testdata", tmp_path / "testdata")
    p = subprocess.run(["bash", "-c", "set -e; " + script], cwd=tmp_path, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    result = (p.stdout + p.stderr).decode()
    for pattern in patterns:
        assert re.search(pattern, result), (pattern, result)


def test_tarsort_by_field_really_sorts_and_yaml_is_plain(tmp_path):
    # the original's test left "check for actually sorted" to do: done here
    sh("(echo c; echo b; echo a) | lines2tar > t1.tar && tarsort t1.tar -o t2.tar -s txt", tmp_path)
    out = sh("tar2json -k txt < t2.tar", tmp_path).stdout.decode()
    assert out == "---\ntxt: a\n---\ntxt: b\n---\ntxt: c\n"


# ---------------------------------------------------------------- docs/examples.md, as written


def test_examples_tarshow_delay_and_range(work):
    out = sh("tarshow --format blocks -d 0 'testdata/imagenet-000000.tar#0,3'", work).stdout.decode()
    keys = [block.splitlines()[0] for block in out.strip().split("\n\n")]
    assert keys == ["10", "12", "13", "15"]  # #0,3 is samples 0 to 3, as the original
    start = time.monotonic()
    sh("tarshow -d 0.3 -c 3 testdata/imagenet-000000.tar > /dev/null", work)
    assert time.monotonic() - start >= 0.6  # two waits between three samples


def test_examples_tarfirst(work):
    p = sh("tarfirst -f wnid testdata/imagenet-000000.tar", work)
    assert p.stdout == b"n04380533"
    sh("tarfirst testdata/imagenet-000000.tar > _test.image", work)
    from PIL import Image

    with Image.open(work / "_test.image") as img:
        assert img.format == "PNG" and img.size == (60, 79)
    p = sh("tarfirst -S 'int(_[\"cls\"]) == 180' -f cls testdata/imagenet-000000.tar ", work)
    assert p.stdout == b"180"


def test_examples_tarsplit_and_tarscat(work, tmp_path):
    sh(f"cd {tmp_path} && tarsplit -n 20 -o _test {work}/testdata/sample.tar", work)
    parts = sorted(f for f in os.listdir(tmp_path) if f.startswith("_test"))
    assert parts == [f"_test-{i:06d}.tar" for i in range(5)]
    assert [len(samples_of(str(tmp_path / p))) for p in parts] == [20, 20, 20, 20, 10]
    sh(f"cd {tmp_path} && tarscat {work}/testdata/sample.tar {work}/testdata/sample.tar | tarsplit -n 60", work)
    temps = sorted(f for f in os.listdir(tmp_path) if f.startswith("temp"))
    assert temps == ["temp-000000.tar", "temp-000001.tar", "temp-000002.tar"]
    got = [name for t in temps for name, _ in members(str(tmp_path / t))]
    assert len(got) == 2 * 90 * 2


def test_examples_old_downloader_and_brace_flags(work):
    # 'tarscat --shuffle 100 -c 3 -b PATTERN' (the pattern is local here)
    p = sh("tarscat --shuffle 100 -c 3 -b 'testdata/imagenet-{000000..000000}.tar' > _temp.tar", work)
    assert len(samples_of(str(work / "_temp.tar"))) == 3
    out = sh("tarshow --format blocks -d 0 _temp.tar", work).stdout.decode()
    assert out.count("\n\n") == 2
    # the original tarcat's '-c CMD' downloader: an error naming what replaced it
    p = sh("tarcat -c 'cat {}' -b testdata/imagenet-000000.tar", work, check=False)
    assert p.returncode == 2
    assert b"TARPROC_READ_" in p.stderr and b"Traceback" not in p.stderr
    p = sh("tarcat --maxout 2 testdata/imagenet-000000.tar", work)
    assert list(samples_of(p.stdout)) == ["10", "12"]


def test_examples_tarcreate_plan(work):
    out = sh("tarcreate -C testdata testdata/plan.tsv | tarshow -c 3 --format original", work).stdout.decode()
    blocks = out.strip().split("\n\n")
    assert [b.splitlines()[0].split("\t")[1] for b in blocks] == ["a", "b", "c"]
    assert f"{'file':20s}\tb'world\\n'" in blocks[0]
    assert f"{'c':20s}\tb'f'" in blocks[2]


def test_examples_tarsort_update_and_shuffle(work):
    sh("tarsort --sortkey cls --sorttype int --update testdata/imagenet-000000.tar > _sorted.tar", work)
    rows = sh('tar2tsv -c 5 -f "cls wnid" _sorted.tar', work).stdout.decode().splitlines()
    assert rows[0] == "__key__\tcls\twnid"
    assert rows[1:] == ["25\t14\tn02077923", "29\t54\tn02488702", "15\t165\tn02410509",
                        "22\t180\tn02088632",  # 13 and 22 share cls 180: --update keeps the last one read
                        "10\t304\tn04380533"]
    got = samples_of(str(work / "_sorted.tar"))
    assert len(got) == len(IMAGENET) - 1
    sh("tarsort --sorttype shuffle < testdata/imagenet-000000.tar > _shuffled.tar", work)
    assert sorted(samples_of(str(work / "_shuffled.tar"))) == sorted(str(k) for k, *_ in IMAGENET)


def test_examples_tarproc_gm_mogrify(work):
    for cmd in ('tarproc -c "gm mogrify -size 256x256 *.png" < testdata/imagenet-000000.tar -o - > _out.tar',
                'tarproc -p 8 -c "gm mogrify -size 256x256 *.png" < testdata/imagenet-000000.tar -o - > _out.tar'):
        sh(cmd, work)
        got = samples_of(str(work / "_out.tar"))
        assert list(got) == [str(k) for k, *_ in IMAGENET]
        from PIL import Image

        for key, cls, wnid, size, _ in IMAGENET:
            assert got[str(key)]["cls"] == str(cls).encode()
            with Image.open(io.BytesIO(got[str(key)]["png"])) as img:
                assert img.format == "PNG" and img.size == size


def test_commands_lines2tar_curl_example(work, tmp_path):
    """docs/commands.md: cat url-list | lines2tar -k url | tarproc -c 'curl $(cat sample.url) > html'
    (file:// URLs: no network); a sample.html written by the command comes back."""
    pages = []
    for i in range(3):
        page = tmp_path / f"page{i}.html"
        page.write_text(f"<p>page {i}</p>\n")
        pages.append(page)
    (tmp_path / "url-list").write_text("".join(f"file://{p}\n" for p in pages))
    p = sh("cat url-list | lines2tar -k url | tarproc -c 'curl -s $(cat sample.url) > sample.html'", tmp_path)
    got = samples_of(p.stdout)
    assert list(got) == ["000000000", "000000001", "000000002"]
    for i, key in enumerate(got):
        assert got[key]["url"] == f"file://{pages[i]}".encode()
        assert got[key]["html"] == f"<p>page {i}</p>\n".encode()


# ---------------------------------------------------------------- lines2tar


def test_lines2tar_fields_keys_and_separator(tmp_path):
    p = sh("printf 'a.jpg\\t3\\nb.jpg\\t7\\r\\n' | lines2tar -k 'path cls'", tmp_path)
    assert members(p.stdout) == [("000000000.cls", b"3"), ("000000000.path", b"a.jpg"),
                                 ("000000001.cls", b"7\r"), ("000000001.path", b"b.jpg")]
    p = sh("printf 'x,1\\ny,2' | lines2tar -s , -k '__key__ cls' --keyformat 'l{:03d}'", tmp_path)
    assert members(p.stdout) == [("x.cls", b"1"), ("y.cls", b"2")]
    p = sh("printf 'one\\ntwo\\n' | lines2tar --keyformat 'line-{:04d}'", tmp_path)
    assert members(p.stdout) == [("line-0000.txt", b"one"), ("line-0001.txt", b"two")]


@pytest.mark.parametrize("cmd,data,words", [
    ("lines2tar -k 'url cls'", b"a\t1\nb\t2\nc\n", b"line 3: 1 field"),
    ("lines2tar -k '__key__ txt'", b"../x\thello\n", b"unsafe key"),
    ("lines2tar -k '__key__ txt'", b"a.b\thello\n", b"has a dot"),
    ("lines2tar -k 'a/b'", b"x\n", b"'/'"),
    ("lines2tar -k 'a a'", b"x\tx\n", b"twice"),
    ("lines2tar -k '__source__ txt'", b"x\tx\n", b"metadata"),
    ("lines2tar --keyformat '{:s}'", b"x\n", b"--keyformat"),
    ("lines2tar --keyformat 'a/../{:03d}'", b"x\n", b"--keyformat"),
])
def test_lines2tar_refuses_bad_lines_and_names(cmd, data, words, tmp_path):
    p = sh(cmd + " -o out.tar", tmp_path, data, check=False)
    assert p.returncode == 2
    err = p.stderr.decode()
    assert words.decode() in err and len(err.strip().splitlines()) <= 2, err
    assert "Traceback" not in err
    assert not (tmp_path / "out.tar").exists()


def test_lines2tar_streams(tmp_path):
    """The sample of a line comes out while the input is still open."""
    proc = subprocess.Popen(["lines2tar", "-k", "url"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        proc.stdin.write(b"first\n")
        proc.stdin.flush()
        head = proc.stdout.read(1024)  # one header and one data block
        assert head[:13] == b"000000000.url"
        assert head[512:517] == b"first"
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert proc.returncode == 0


# ---------------------------------------------------------------- tar2json


HOSTILE_TEXT = ["plain", "a: b", "- x", "#no comment", "'q'", '"dq"', "yes", "null", "1e3", "0x10", "~",
                "tab\there", "line\nbreak", "nel\x85x", "ls\u2028ps\u2029", "del\x7f", "bom\ufeff",
                "astral \U0001F600", "", " lead", "trail ", "back\\slash", "%tag", "@at", "{flow}", "[x]"]


def _hostile_shard(tmp_path):
    with tarfile.open(tmp_path / "h.tar", "w", format=tarfile.PAX_FORMAT) as tf:
        for i, text in enumerate(HOSTILE_TEXT):
            for field, value in (("txt", text.encode()), ("json", json.dumps({"v": text, "n": [1, 2.5e-7, None,
                                                                                       True]}).encode()),
                                 ("png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)))):
                info = tarfile.TarInfo(f"k{i:03d}.{field}")
                info.size = len(value)
                tf.addfile(info, io.BytesIO(value))
    return tmp_path / "h.tar"


def test_tar2json_yaml_reads_back_with_pyyaml(tmp_path):
    import yaml

    path = _hostile_shard(tmp_path)
    yaml_out = sh(f"tar2json -k '__key__ txt json.n v=json.v png' {path}", tmp_path).stdout.decode()
    json_out = sh(f"tar2json -f jsonlines -k '__key__ txt json.n v=json.v png' {path}", tmp_path).stdout.decode()
    docs = list(yaml.safe_load_all(yaml_out))
    records = [json.loads(line) for line in json_out.splitlines()]  # str.splitlines splits at NEL, U+2028 too
    assert len(docs) == len(HOSTILE_TEXT) == len(records)
    assert docs == records
    for i, text in enumerate(HOSTILE_TEXT):
        assert records[i]["txt"] == text and records[i]["v"] == text
        assert records[i]["json.n"] == [1, 2.5e-7, None, True]
        assert records[i]["png"] == 264  # binary fields as their size


def test_tar2json_formats_available_and_defaults(tmp_path):
    data = b"".join(f"k{i}\t{i}\ttext {i}\n".encode() for i in range(3))
    (tmp_path / "in.tar").write_bytes(sh("lines2tar -k '__key__ cls txt'", tmp_path, data).stdout)
    assert sh("tar2json -a in.tar", tmp_path).stdout == b"__key__\ncls\ntxt\n"
    out = sh("tar2json -f json -k cls in.tar", tmp_path).stdout.decode()
    dec = json.JSONDecoder()
    objs, pos = [], 0
    while out[pos:].strip():
        obj, end = dec.raw_decode(out, pos + len(out[pos:]) - len(out[pos:].lstrip()))
        objs.append(obj)
        pos = end
    assert objs == [{"cls": "0"}, {"cls": "1"}, {"cls": "2"}]  # -k gives exactly what is asked
    import yaml

    docs = list(yaml.safe_load_all(sh("tar2json -c 2 in.tar", tmp_path).stdout))
    assert docs == [{"__key__": "k0", "cls": "0", "txt": "text 0"}, {"__key__": "k1", "cls": "1", "txt": "text 1"}]
    p = sh("tar2json -f xml in.tar", tmp_path, check=False)
    assert p.returncode == 2 and b"Traceback" not in p.stderr


# ---------------------------------------------------------------- URL#START,END


def test_ranges_count_over_a_pattern_and_real_names_win(tmp_path):
    for s in range(3):
        data = b"".join(f"{s}-{i}\n".encode() for i in range(4))
        (tmp_path / f"s{s}.tar").write_bytes(sh("lines2tar --keyformat 'k{:02d}'", tmp_path, data).stdout)
    p = sh("tarcat 's{0..2}.tar#3,5' | tar2tsv -f txt --noheader --nokey", tmp_path)
    assert p.stdout == b"0-3\n1-0\n1-1\n"  # samples 3..5 of the pattern, END included
    p = sh("tar2tsv -f txt --noheader --nokey 's1.tar#2'", tmp_path)
    assert p.stdout == b"1-2\n"
    p = sh("tarpcat 's2.tar#1,2' s0.tar#0 | tar2tsv -f txt --noheader --nokey | sort", tmp_path)
    assert p.stdout == b"0-0\n2-1\n2-2\n"
    os.link(tmp_path / "s1.tar", tmp_path / "real#0,1")  # a file really named so is read whole
    p = sh("tar2tsv -f txt --noheader --nokey 'real#0,1'", tmp_path)
    assert p.stdout == b"1-0\n1-1\n1-2\n1-3\n"
    for bad, words in (("'missing.tar#0,1'", b"missing.tar"), ("'s0.tar#3,1'", b"END >= START")):
        p = sh(f"tarcat {bad} > /dev/null", tmp_path, check=False)
        assert p.returncode == 2 and words in p.stderr and b"Traceback" not in p.stderr, p.stderr


# ---------------------------------------------------------------- tarmix


def _two_sources(tmp_path):
    for name, n in (("a", 400), ("b", 50)):
        data = b"".join(f"{name}{i}\n".encode() for i in range(n))
        (tmp_path / f"{name}.tar").write_bytes(sh(f"lines2tar --keyformat '{name}{{:04d}}'", tmp_path, data).stdout)


def test_tarmix_weights_seed_and_yaml(tmp_path):
    _two_sources(tmp_path)
    (tmp_path / "mix.json").write_text(json.dumps({"sources": [
        {"shards": "a.tar", "weight": 3}, {"shards": "b.tar", "weight": 1, "nrepeats": 100}]}))
    (tmp_path / "mix.yaml").write_text("# the same mix\nsources:\n  - shards: 'a.tar'\n    weight: 3\n"
                                       "  - shards: \"b.tar\"   # repeated\n    weight: 1\n    nrepeats: 100\n")
    one = sh("tarmix --seed 7 --rekey '{index:06d}' mix.json", tmp_path).stdout
    assert one == sh("tarmix --seed 7 --rekey '{index:06d}' mix.yaml", tmp_path).stdout
    assert one != sh("tarmix --seed 8 --rekey '{index:06d}' mix.json", tmp_path).stdout
    texts = [v for k, v in members(one)]
    a = sum(t.startswith(b"a") for t in texts)
    b = sum(t.startswith(b"b") for t in texts)
    assert a == 400  # the mix ends when a picked source (a) has no samples left
    assert 0.2 < b / (a + b) < 0.3  # weight 1 of 4
    assert [t for t in texts if t.startswith(b"a")] == [f"a{i}".encode() for i in range(400)]
    p = sh("tarmix --seed 1 -c 10 mix.json", tmp_path, check=False)  # both sources number from 0000
    assert p.returncode in (0, 2)
    if p.returncode == 2:
        assert b"--rekey" in p.stderr


@pytest.mark.parametrize("spec,words", [
    ('{"sources": [{"shards": "a.tar", "wieght": 2}]}', b"unknown key 'wieght'"),
    ('{"sources": [{"shards": "a.tar", "convert": [{"from": "jpg", "to": "png"}]}]}', b"not supported"),
    ('{"sources": [{"shards": "a.tar", "probability": 2}]}', b"probability"),
    ('{"sources": []}', b"no sources"),
    ("sources:\n  - shards: a.tar\n    weight: &w 2\n", b"write the spec as JSON"),
    ('{"sources": [{"shards": "missing-{0..2}.tar"}]}', b"missing-0.tar"),
])
def test_tarmix_refuses_bad_specs(spec, words, tmp_path):
    _two_sources(tmp_path)
    p = sh("tarmix - > out.tar", tmp_path, spec.encode(), check=False)
    assert p.returncode == 2, p.stderr
    assert words in p.stderr and b"Traceback" not in p.stderr, p.stderr


def test_tarmix_allow_missing_and_probability(tmp_path):
    _two_sources(tmp_path)
    spec = {"sources": [{"shards": "{missing,a}.tar", "allow_missing": True, "probability": 0.5}]}
    p = sh("tarmix --seed 3 -", tmp_path, json.dumps(spec).encode())
    got = [v for k, v in members(p.stdout)]
    assert 150 < len(got) < 250  # about half of a's 400
    assert got == sorted(got, key=lambda t: int(t[1:]))  # one stream: input order
    assert b"missing.tar" in p.stderr
