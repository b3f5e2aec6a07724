"""tarcreate / tsv2tar: table plans and line plans, checked before writing."""

import os

from helpers import jpeg_bytes, png_bytes, read_tar, samples_of


def make_files(tmp_path, n=3):
    (tmp_path / "img").mkdir()
    images = {}
    for i in range(n):
        data = jpeg_bytes(seed=i)
        (tmp_path / "img" / f"{i}.jpg").write_bytes(data)
        images[i] = data
    return images


def listing(tmp_path):
    return sorted(os.listdir(tmp_path))


def test_example_table_plan(sh, tmp_path):
    images = make_files(tmp_path)
    plan = "__key__\t@jpg\tcls\ttxt\n" + "".join(f"k{i}\timg/{i}.jpg\t{i}\thello {i}\n" for i in range(3))
    (tmp_path / "plan.tsv").write_text(plan)
    sh("tarcreate plan.tsv -o dataset.tar")
    data = (tmp_path / "dataset.tar").read_bytes()
    samples = samples_of(data)
    assert list(samples) == ["k0", "k1", "k2"]
    for i in range(3):
        assert samples[f"k{i}"] == {"jpg": images[i], "cls": str(i).encode(), "txt": f"hello {i}".encode()}
    # fields in sorted order, deterministic bytes
    assert [n for n, _ in read_tar(data)][:3] == ["k0.cls", "k0.jpg", "k0.txt"]
    sh("tarcreate plan.tsv -o again.tar")
    assert (tmp_path / "again.tar").read_bytes() == data
    # GNU tar lists it
    assert sh("tar tf dataset.tar").stdout.decode().split() == [n for n, _ in read_tar(data)]


def test_csv_keys_dir_and_alias(sh, tmp_path):
    images = make_files(tmp_path)
    (tmp_path / "plan.csv").write_text("@jpg,label\n0.jpg,\"a, b\"\n1.jpg,c\n2.jpg,\n")
    data = sh("tsv2tar -C img -k '%06d' plan.csv").stdout
    samples = samples_of(data)
    assert list(samples) == ["000000", "000001", "000002"]
    assert samples["000000"] == {"jpg": images[0], "label": b"a, b"}
    assert samples["000002"] == {"jpg": images[2]}  # an empty cell is no field
    data = sh("tarcreate -C img -k 'x{index:03d}' plan.csv").stdout
    assert list(samples_of(data)) == ["x000", "x001", "x002"]
    # the original's default key format and an explicit delimiter on a .txt table
    (tmp_path / "plan.txt").write_text("@jpg;cls\nimg/1.jpg;7\n")
    data = sh("tarcreate -f ';' plan.txt -o out.tar.gz && gzip -dc out.tar.gz").stdout
    assert samples_of(data) == {"000000000": {"jpg": images[1], "cls": b"7"}}


def test_line_plan(sh, tmp_path):
    images = make_files(tmp_path)
    png = png_bytes(seed=5)
    (tmp_path / "a.png").write_bytes(png)
    plan = ("# a line plan\n"
            "s0/a.txt text:hello world\n"
            "s0/a.jpg file:img/0.jpg\n"
            "\n"
            "s1.png a.png\n"
            "s1.cls\tpipe:printf 42\n")
    (tmp_path / "files.txt").write_text(plan)
    data = sh("tarcreate files.txt").stdout
    assert read_tar(data) == [("s0/a.txt", b"hello world"), ("s0/a.jpg", images[0]),
                              ("s1.png", png), ("s1.cls", b"42")]
    # from stdin, relative to -C
    data = sh("printf 'x.jpg 1.jpg\\n' | tarcreate -C img -").stdout
    assert read_tar(data) == [("x.jpg", images[1])]


def test_missing_file_names_the_line_and_writes_nothing(sh, tmp_path):
    make_files(tmp_path)
    (tmp_path / "plan.tsv").write_text("__key__\t@jpg\nk0\timg/0.jpg\nk1\timg/nosuch.jpg\nk2\timg/2.jpg\n")
    before = listing(tmp_path)
    p = sh("tarcreate plan.tsv -o dataset.tar", ok=False)
    assert p.returncode == 2
    assert p.stderr.decode().strip() == "tarcreate: plan.tsv:3: file 'img/nosuch.jpg' not found"
    assert listing(tmp_path) == before  # no dataset.tar, no temporary file
    p = sh("tarcreate plan.tsv | wc -c", ok=False)
    assert p.stdout.strip() == b"0"
    (tmp_path / "files.txt").write_text("a.txt text:x\nb.jpg file:img/gone.jpg\n")
    p = sh("tarcreate files.txt -o out.tar", ok=False)
    assert p.returncode == 2 and b"files.txt:2:" in p.stderr and not (tmp_path / "out.tar").exists()


def test_refused_names_and_failed_commands(sh, tmp_path):
    for plan in ("../up.txt text:x\n", "/abs.txt text:x\n", "a/../../b.txt text:x\n"):
        (tmp_path / "p.txt").write_text("ok.txt text:fine\n" + plan)
        p = sh("tarcreate p.txt -o out.tar", ok=False)
        assert p.returncode == 2 and b"p.txt:2:" in p.stderr, p.stderr
        assert not (tmp_path / "out.tar").exists()
    (tmp_path / "k.tsv").write_text("__key__\tcls\n../x\t1\n")
    p = sh("tarcreate k.tsv -o out.tar", ok=False)
    assert p.returncode == 2 and b"k.tsv:2:" in p.stderr
    (tmp_path / "d.txt").write_text("a.txt text:1\na.txt text:2\n")
    p = sh("tarcreate d.txt", ok=False)
    assert p.returncode == 2 and b"d.txt:2: member 'a.txt' is already made by d.txt:1" in p.stderr
    (tmp_path / "f.txt").write_text("a.txt text:1\nb.txt pipe:echo oops >&2; exit 3\n")
    p = sh("tarcreate f.txt -o out.tar", ok=False)
    assert p.returncode == 1 and b"f.txt:2:" in p.stderr and b"oops" in p.stderr
    assert not [n for n in os.listdir(tmp_path) if n.startswith((".out.tar", "out.tar"))]
    (tmp_path / "w.tsv").write_text("a\tb\n1\t2\t3\n")
    p = sh("tarcreate w.tsv", ok=False)
    assert p.returncode == 2 and b"w.tsv:2: 3 columns, the header has 2" in p.stderr
    assert b"examples:" in sh("tarcreate --help").stdout
