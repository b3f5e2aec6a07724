"""tarcreate / tsv2tar: table plans and line plans, checked before writing."""

import os
import re
import subprocess
import tarfile

import pytest

from helpers import jpeg_bytes, one_line, png_bytes, read_tar, samples_of


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


def test_rows_without_a_field_and_an_empty_plan_are_said(sh, tmp_path):
    """A row whose cells are all empty makes no sample: one warning with
    their count and the first; a plan of no members says the archive is
    empty."""
    (tmp_path / "plan.tsv").write_text("__key__\tcls\ttxt\na\t1\t\nb\t\t\nc\t\t\nd\t\tx\n")
    p = sh("tarcreate plan.tsv -o out.tar", stderr_ok=True)
    assert p.stderr.decode().splitlines() == [
        "tarcreate: warning: plan.tsv: 2 rows of the table have no field (every cell empty or null), nothing is "
        "written for them (the first: plan.tsv:3, key 'b')"]
    assert list(samples_of((tmp_path / "out.tar").read_bytes())) == ["a", "d"]
    (tmp_path / "head.tsv").write_text("__key__\tcls\n")
    p = sh("tarcreate head.tsv -o empty.tar", stderr_ok=True)
    assert one_line(p) == "tarcreate: warning: the plan makes no members: the archive is empty"
    assert (tmp_path / "empty.tar").read_bytes() == bytes(1024)
    assert sh("tarcreate -q head.tsv -o empty.tar").stderr == b""


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


@pytest.mark.parametrize("plan", [
    b"../../x.txt text:hi\n", b"/abs/x.txt text:hi\n", b"a/../../b.txt text:hi\n",
    b"ok.txt text:fine\n../x.txt text:late\n",
])
def test_tarcreate_refuses_unsafe_names(plan, sh, tmp_path):
    """tarcreate writes names from a plan: the same names are refused there,
    and nothing is written (not even the members before the bad line)."""
    (tmp_path / "plan.txt").write_bytes(plan)
    p = sh("tarcreate plan.txt -o out.tar", ok=False)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 2, err
    assert len(err.splitlines()) == 1 and re.search(r"absolute|'\.\.' component", err), err
    assert sorted(os.listdir(tmp_path)) == ["plan.txt"]


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


def members(path):
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf]


def test_tarcreate_plan_lines_end_only_at_newlines(tmp_path):
    """Plans were cut into lines by str.splitlines(), which also ends a line
    at U+2028, U+0085, form feed, vertical tab and \\x1c-\\x1e: a file whose
    name holds U+2028 was 'not found' (line plan) or 'N columns, the header
    has M' (table), and a `text:` value lost everything after a form feed."""
    weird = "photo\u2028one\u0085x.jpg"
    (tmp_path / weird).write_bytes(b"JPEG")
    (tmp_path / "plan.txt").write_text(f"0.jpg {weird}\n0.txt text:a\x0cb\x0bc\u2028d\n1.txt text:two\n")
    p = run("tarcreate plan.txt -o lines.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert members(tmp_path / "lines.tar") == [("0.jpg", b"JPEG"), ("0.txt", "a\x0cb\x0bc\u2028d".encode()),
                                               ("1.txt", b"two")]
    (tmp_path / "plan.tsv").write_text(f"__key__\t@jpg\tcls\nk0\t{weird}\t3\nk1\t{weird}\t4\u2028x\n")
    p = run("tarcreate plan.tsv -o table.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert members(tmp_path / "table.tar") == [("k0.cls", b"3"), ("k0.jpg", b"JPEG"),
                                               ("k1.cls", "4\u2028x".encode()), ("k1.jpg", b"JPEG")]


@pytest.mark.parametrize("name", ["dir/", "a.txt/", "x/.", "."])
def test_tarcreate_refuses_a_member_name_that_is_a_directory(name, tmp_path):
    """`dir/ text:hi` wrote a regular-file member named `dir/` with data:
    GNU tar lists it as a directory and fails extracting (`Skipping to next
    header`, exit 2), bsdtar calls the archive damaged.  A member name must
    end in a file name; such names are refused, naming the line."""
    (tmp_path / "plan.txt").write_text(f"0.txt text:ok\n{name} text:hello world\n")
    p = run("tarcreate plan.txt -o out.tar", tmp_path)
    assert p.returncode == 2, p.stderr
    assert "plan.txt:2" in one_line(p)
    assert sorted(os.listdir(tmp_path)) == ["plan.txt"]


def test_tarcreate_output_naming_the_plan_is_refused(tmp_path):
    """`tarcreate plan.txt -o plan.txt` replaced the plan with the tar, exit
    0 (as lines2tar and tarmix did before pass 4).  A file of the plan may
    still be the output: it is read before the new one replaces it."""
    (tmp_path / "plan.txt").write_text("0.txt text:hi\n")
    p = run("tarcreate plan.txt -o ./plan.txt", tmp_path)
    assert p.returncode == 2, p.stderr
    assert "plan.txt: is also the output" in one_line(p)
    assert (tmp_path / "plan.txt").read_text() == "0.txt text:hi\n"
    (tmp_path / "p2.txt").write_text("0.tar old.tar\n1.txt text:new\n")
    (tmp_path / "old.tar").write_bytes(b"old bytes")
    p = run("tarcreate p2.txt -o old.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert members(tmp_path / "old.tar") == [("0.tar", b"old bytes"), ("1.txt", b"new")]


@pytest.mark.parametrize("name, hint", [("README", " (e.g. 'README.txt')"), ("d/.hidden", "")])
def test_tarcreate_refuses_members_no_reader_keeps(tmp_path, name, hint):
    """A member whose file name is not KEY.FIELD was written, and every
    reader (tarcat, webdataset) then skipped it: what we write must read back."""
    (tmp_path / "a.txt").write_text("hi\n")
    p = run(f"printf 'x.txt a.txt\\n{name} a.txt\\n' | tarcreate -o out.tar", tmp_path)
    assert p.returncode == 2
    assert one_line(p) == (f"tarcreate: stdin:2: refusing member name '{name}': its file name is not KEY.FIELD, "
                           f"so readers skip it{hint}")
    assert not (tmp_path / "out.tar").exists()




def test_fields_named_like_metadata_are_refused(sh, tmp_path):
    """KEY.__x__ is read as metadata by every reader (ours refuses it): a plan
    that would write one is refused, naming the line, nothing written."""
    (tmp_path / "plan.tsv").write_text("__key__\t__source__\tcls\na\tx\t1\n")
    (tmp_path / "plan.txt").write_text("a.cls text:1\na.__x__ text:2\n")
    for plan, where in (("plan.tsv", "plan.tsv:2"), ("plan.txt", "plan.txt:2")):
        p = sh(f"tarcreate {plan} -o out.tar", ok=False)
        line = one_line(p)
        assert p.returncode == 2 and where in line and "metadata" in line, line
        assert not (tmp_path / "out.tar").exists()
