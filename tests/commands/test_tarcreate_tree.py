"""tarcreate --tree: trees of files (and s3/gs listings) keyed into samples,
checked before writing, in key order, streamed."""

import io
import os
import random
import subprocess
import tarfile

from conftest import require
from helpers import kill_left, one_line, processes_with, read_tar, run_measured, samples_of, unique_sleep
from test_progress import on_pty, redraws
from test_urls import s3  # noqa: F401 (the moto server fixture)

NAMES = ["Abyssinian_1", "Abyssinian_10", "Bengal_3", "beagle_1", "yorkshire_terrier_7", "a b", "ab"]


def pets(root, names=NAMES, order=None, missing=()):
    """A pets-like tree under ``root``: images/NAME.jpg and
    annotations/trimaps/NAME.png (left out for ``missing``), made in
    ``order`` (a seed: the file system lists them differently)."""
    made = {}
    jobs = []
    for i, name in enumerate(names):
        jobs.append((f"images/{name}.jpg", f"jpeg {i} {name}".encode() * (i + 1)))
        if name not in missing:
            jobs.append((f"annotations/trimaps/{name}.png", f"png {i}".encode()))
    if order is not None:
        random.Random(order).shuffle(jobs)
    for rel, data in jobs:
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        made[rel] = data
    return made


PETS = "tarcreate --tree images/ --tree annotations/trimaps/:trimap --key base --require jpg,trimap.png"


def test_pets_base_key_prefix_and_key_order(sh, tmp_path):
    made = pets(tmp_path)
    data = sh(PETS).stdout
    samples = samples_of(data)
    keys = sorted(NAMES, key=lambda k: k.encode())
    assert list(samples) == keys  # bytewise key order: capitals first, "a b" before "ab"
    for name in NAMES:
        assert samples[name] == {"jpg": made[f"images/{name}.jpg"],
                                 "trimap.png": made[f"annotations/trimaps/{name}.png"]}
    # GNU tar reads it: ustar, fields of a sample in order
    assert sh(f"{PETS} | tar tf -").stdout.decode().splitlines()[:2] == ["Abyssinian_1.jpg",
                                                                           "Abyssinian_1.trimap.png"]
    # the order is tarsort's: sorting it again changes no byte
    assert sh(f"{PETS} | tarsort").stdout == data
    # webdataset groups it the same
    import webdataset as wds

    (tmp_path / "pets.tar").write_bytes(data)
    got = [(s["__key__"], s["jpg"], s["trimap.png"]) for s in wds.WebDataset(str(tmp_path / "pets.tar"),
                                                                           shardshuffle=False)]
    assert got == [(k, made[f"images/{k}.jpg"], made[f"annotations/trimaps/{k}.png"]) for k in keys]


def test_same_bytes_whatever_the_listing_order(sh, tmp_path):
    # on tmpfs a directory lists its entries newest first: files made in another order list in another order
    import shutil
    import tempfile

    base = tempfile.mkdtemp(dir="/dev/shm")
    try:
        outs, listed = [], []
        for seed in (1, 2, 3):
            d = os.path.join(base, f"t{seed}")
            pets(d, order=seed)
            listed.append(os.listdir(os.path.join(d, "images")))
            outs.append(sh(f"cd {d} && {PETS}").stdout)
        assert listed[0] != listed[1] != listed[2]  # the file system's order differs...
        assert outs[0] == outs[1] == outs[2]  # ...the bytes do not
    finally:
        shutil.rmtree(base)


def test_path_key_and_regex_key(sh, tmp_path):
    (tmp_path / "d" / "a" / "b").mkdir(parents=True)
    (tmp_path / "d" / "a" / "b" / "x.seg.png").write_bytes(b"seg")
    (tmp_path / "d" / "a" / "x.jpg").write_bytes(b"jpg")
    (tmp_path / "d" / "top.cls").write_bytes(b"7")
    # path (the default): below the root, up to the first dot of the file name
    assert read_tar(sh("tarcreate --tree d").stdout) == [
        ("a/b/x.seg.png", b"seg"), ("a/x.jpg", b"jpg"), ("top.cls", b"7")]
    assert read_tar(sh("tarcreate --tree d --key path").stdout) == read_tar(sh("tarcreate --tree d/").stdout)
    # base: directories dropped
    assert read_tar(sh("tarcreate --tree d --key base").stdout) == [
        ("top.cls", b"7"), ("x.jpg", b"jpg"), ("x.seg.png", b"seg")]
    # a regex with a group key; files it does not match are left out with a warning
    p = sh(r"tarcreate --tree d --key '^a/(?P<key>[a-z])'", stderr_ok=True)
    assert read_tar(p.stdout) == [("b.seg.png", b"seg"), ("x.jpg", b"jpg")]
    assert "1 files the key regex does not match left out, e.g. 'd/top.cls'" in p.stderr.decode()
    p = sh("tarcreate --tree d --key '(x'", ok=False)
    assert p.returncode == 2 and "--key" in one_line(p)
    p = sh("tarcreate --tree d --key 'x.*'", ok=False)
    assert p.returncode == 2 and "group named key" in one_line(p)


def test_missing_stop_skip_keep(sh, tmp_path):
    names = [f"n{i:02d}" for i in range(14)]
    pets(tmp_path, names, missing=names[:12])
    p = sh(f"{PETS} -o out.tar", ok=False)
    assert p.returncode == 2
    line = one_line(p)  # one line, nothing else (the left-out warnings come after the checks)
    assert "n00" in line and "missing trimap.png" in line
    assert not (tmp_path / "out.tar").exists()
    p = sh(f"{PETS} --missing skip -o out.tar", stderr_ok=True)
    err = p.stderr.decode().splitlines()
    assert [e for e in err if "warning: sample" in e] == [
        f"tarcreate: warning: sample {n}: missing trimap.png: left out" for n in names[:10]]
    assert err[-1] == "tarcreate: warning: 12 samples missing one of jpg, trimap.png left out"
    assert list(samples_of((tmp_path / "out.tar").read_bytes())) == names[12:]
    p = sh(f"{PETS} --missing keep", stderr_ok=True)
    samples = samples_of(p.stdout)
    assert list(samples) == names and samples["n00"].keys() == {"jpg"}
    assert "12 samples missing one of jpg, trimap.png written" in p.stderr.decode()
    p = sh("tarcreate --require jpg plan.tsv", ok=False)
    assert p.returncode == 2 and "--tree" in one_line(p)


def test_same_field_twice_names_both_paths(sh, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.jpg").write_bytes(b"1")
    (tmp_path / "b" / "x.JPG").write_bytes(b"2")
    p = sh("tarcreate --tree a --tree b -o out.tar", ok=False)
    line = one_line(p)
    assert p.returncode == 2 and "a/x.jpg" in line and "b/x.JPG" in line and "'jpg'" in line
    assert not (tmp_path / "out.tar").exists()
    # with a prefix they are two fields
    assert read_tar(sh("tarcreate --tree a --tree b:B").stdout) == [("x.b.jpg", b"2"), ("x.jpg", b"1")]


def test_dry_run_is_a_plan_and_reads_nothing(sh, tmp_path):
    made = pets(tmp_path, missing=["ab"])
    (tmp_path / "images" / "zz.jpg").symlink_to("/proc/self/mem")  # reading it fails: EIO
    p = sh(f"{PETS} --missing keep --dry-run", stderr_ok=True)
    lines = p.stdout.decode().splitlines()
    assert lines[0] == "__key__\t@jpg\t@trimap.png"
    assert "ab\timages/ab.jpg\t" in lines and "zz\timages/zz.jpg\t" in lines
    assert len(lines) == len(NAMES) + 2
    p = sh(f"{PETS} --missing keep -o out.tar", ok=False)
    err = p.stderr.decode().splitlines()
    assert p.returncode == 2 and err[-1].startswith("tarcreate: images/zz.jpg: cannot read")
    assert all("warning" in e for e in err[:-1]), err
    assert not (tmp_path / "out.tar").exists()
    os.unlink(tmp_path / "images" / "zz.jpg")
    # the plan gives the same bytes as the tree
    sh(f"{PETS} --missing keep --dry-run > plan.tsv", stderr_ok=True)
    direct = sh(f"{PETS} --missing keep", stderr_ok=True).stdout
    assert sh("tarcreate plan.tsv").stdout == direct
    assert samples_of(direct)["ab"] == {"jpg": made["images/ab.jpg"]}


def test_hostile_names_links_and_specials(sh, tmp_path):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "ok.txt").write_bytes(b"ok")
    (d / ".hidden.txt").write_bytes(b"h")
    (d / ".git").mkdir()
    (d / ".git" / "x.txt").write_bytes(b"g")
    (d / "README").write_bytes(b"r")
    (d / "a..b.txt").write_bytes(b"dots")  # a '..' inside a name is no '..' component
    (d / "sub" / "loop").symlink_to("..")  # a link loop: never followed
    (d / "link.txt").symlink_to(tmp_path / "outside.bin")  # a link to a file: followed
    (tmp_path / "outside.bin").write_bytes(b"outside")
    os.mkfifo(d / "fifo.txt")  # never opened: it would block
    p = sh("tarcreate --tree d", stderr_ok=True, timeout=30)
    assert read_tar(p.stdout) == [("a..b.txt", b"dots"), ("link.txt", b"outside"), ("ok.txt", b"ok")]
    err = p.stderr.decode()
    assert "2 hidden files and directories" in err and "1 files without an extension" in err
    assert "1 symbolic links to directories not followed" in err and "1 special files" in err
    assert len(err.splitlines()) == 4
    # a newline in a name: refused, one line, nothing written
    (d / "bad\nname.txt").write_bytes(b"x")
    p = sh("tarcreate --tree d -o out.tar", ok=False)
    line = one_line(p)
    assert p.returncode == 2 and "bad\\nname.txt" in line and "control characters" in line
    assert not (tmp_path / "out.tar").exists()
    os.unlink(d / "bad\nname.txt")
    # a broken link: one line
    (d / "gone.txt").symlink_to(tmp_path / "nothing")
    p = sh("tarcreate --tree d", ok=False)
    assert p.returncode == 2 and "gone.txt: symbolic link to nothing readable" in one_line(p)
    os.unlink(d / "gone.txt")
    # a regex key that would make a '..' component
    p = sh(r"tarcreate --tree d --key 'a(?P<key>\.\.)'", ok=False)
    assert p.returncode == 2 and "'..'" in one_line(p)
    # not KEY.FIELD-safe field prefix, missing tree, URL schemes that are not trees
    for bad in ("d:.x", "nosuch", "http://x/y/"):
        p = sh(f"tarcreate --tree {bad}", ok=False)
        assert p.returncode == 2 and one_line(p)


def test_outputs_inside_the_tree(sh, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_bytes(b"a" * 5000)
    p = sh("tarcreate --tree d -o d/out.tar", ok=False)
    assert p.returncode == 2 and "inside the tree" in one_line(p)
    assert os.listdir(d) == ["a.txt"]
    # stdout redirected into the tree: the shell made the file, the listing finds it
    p = sh("tarcreate --tree d > d/out.tar", ok=False)
    assert p.returncode == 2 and "d/out.tar: input file is output file" in one_line(p)
    # an -o that exists already, reached through another name
    (d / "out.tar").write_bytes(b"old")
    p = sh("tarcreate --tree d -o ./d/../d/out.tar", ok=False)
    assert p.returncode == 2 and "inside the tree" in one_line(p)


def test_changed_and_unreadable_files(sh, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_bytes(b"a")
    (d / "status.txt").symlink_to("/proc/self/status")  # size 0 when opened, bytes when read
    p = sh("tarcreate --tree d -o out.tar", ok=False)
    assert p.returncode == 2 and "status.txt: changed size while being read" in one_line(p)
    assert not (tmp_path / "out.tar").exists()


def test_big_member_is_streamed(sh, tmp_path):
    require("tar")
    d = tmp_path / "d"
    d.mkdir()
    size = 400 << 20
    with open(d / "big.bin", "wb") as f:  # sparse: made at once, read as zeros
        f.truncate(size)
        f.seek(size - 4)
        f.write(b"tail")
    (d / "a.txt").write_bytes(b"small")
    p, cpu, rss = run_measured("tarcreate --tree d | tar tvf -", tmp_path)
    assert p.returncode == 0, p.stderr
    assert [line.split()[2] for line in p.stdout.decode().splitlines()] == ["5", str(size)]
    assert rss < 120, rss  # the 400 MB member is copied in chunks, never held
    data = sh("tarcreate --tree d | tail -c 1028 | head -c 4").stdout  # the member's last bytes, then the end
    assert data == b"tail"


def test_progress_on_a_terminal(tmp_path):
    """On a terminal (a pty of 50 columns) a bar of bytes, each redraw
    shorter than the width; --no-progress, none."""
    pets(tmp_path)
    err = on_pty(["tarcreate", "--tree", "images", "-o", "out.tar"], tmp_path, 50)
    lines = redraws(err)
    assert lines and all(line.startswith("tarcreate:") and "%" in line and len(line) < 50 for line in lines), err
    assert len(samples_of((tmp_path / "out.tar").read_bytes())) == len(NAMES)
    assert on_pty(["tarcreate", "--tree", "images", "--no-progress", "-o", "out2.tar"], tmp_path, 50) == b""


def _upload(tmp_path, env, dest):
    subprocess.run(["aws", "s3", "cp", "--recursive", "--quiet", str(tmp_path), dest], env={**os.environ, **env},
                   check=True, capture_output=True, timeout=120)


def test_s3_tree_same_bytes_as_local(sh, tmp_path, s3):  # noqa: F811
    src = tmp_path / "src"
    made = pets(src, ["Bengal_3"])  # (few objects: each fetch starts an aws CLI, 1-2 s here)
    big = b"".join(bytes([i % 251]) * 1000 for i in range(1500))  # past the in-memory size: spooled
    (src / "images" / "Bengal_3.jpg").write_bytes(big)
    (src / "images" / "a dir").mkdir()
    (src / "images" / "a dir" / "x y.jpg").write_bytes(b"spaced")
    _upload(src, s3, "s3://tarproc-test/pets/")
    local = sh(f"cd src && {PETS} --missing keep", stderr_ok=True).stdout
    env = {**s3, "TARPROC_RETRIES": "0"}  # one GET per object (the resuming reads are tested in test_urls)
    remote = sh("tarcreate --tree s3://tarproc-test/pets/images/ --tree s3://tarproc-test/pets/annotations/trimaps:trimap"
                " --key base --require jpg,trimap.png --missing keep -p 4", env=env, stderr_ok=True).stdout
    assert remote == local
    samples = samples_of(remote)
    assert samples["Bengal_3"]["jpg"] == big and samples["x y"] == {"jpg": b"spaced"}
    assert samples["Bengal_3"]["trimap.png"] == made["annotations/trimaps/Bengal_3.png"]
    assert list(samples) == ["Bengal_3", "x y"]
    # a failed fetch: one line naming the object, nothing committed
    env = {**s3, "TARPROC_READ_S3": "echo denied >&2; exit 3"}
    p = sh("tarcreate --tree 's3://tarproc-test/pets/images/a dir/' -p 2 -o out.tar", env=env, ok=False)
    line = one_line(p)
    assert p.returncode == 2 and "s3://tarproc-test/pets/images/a dir/x y.jpg" in line and "denied" in line
    assert not (tmp_path / "out.tar").exists()


def test_gs_listing_through_the_scheme_table(sh, tmp_path):
    """gsutil's listing format (URLs, prefixes ending in /), by a LIST
    command set as the table allows; the objects read by a READ command."""
    pets(tmp_path / "bucket")
    env = {"TARPROC_LIST_GS": 'u={url}; d=bucket/${u#gs://b/}; for f in "$d"*; do '
                              'if [ -d "$f" ]; then echo "gs://b/${f#bucket/}/"; else echo "gs://b/${f#bucket/}"; fi; '
                              'done',
           "TARPROC_READ_GS": 'u={url}; cat "bucket/${u#gs://b/}"'}
    got = sh("tarcreate --tree gs://b/images --tree gs://b/annotations/:ann --key base", env=env).stdout
    samples = samples_of(got)
    assert samples["ab"] == {"jpg": (tmp_path / "bucket/images/ab.jpg").read_bytes(),
                             "ann.png": (tmp_path / "bucket/annotations/trimaps/ab.png").read_bytes()}
    assert list(samples) == sorted(NAMES, key=str.encode)


def test_failed_fetch_stops_the_fetches_under_way(sh, tmp_path):
    """A failed fetch ends the run at once: the fetches still running
    (their clients) are killed, not waited for."""
    (tmp_path / "bucket").mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / "bucket" / name).write_bytes(name.encode())
    sleep = unique_sleep()
    env = {"TARPROC_LIST_GS": 'for f in bucket/*; do echo "gs://b/${f#bucket/}"; done',
           "TARPROC_READ_GS": f'case {{url}} in *a.txt) echo no such object >&2; exit 3;; *) {sleep};; esac'}
    try:
        p = sh("tarcreate --tree gs://b/ -p 3 -o out.tar", env=env, ok=False, timeout=60)
        assert p.returncode == 2 and "gs://b/a.txt" in one_line(p) and "no such object" in one_line(p)
        assert not (tmp_path / "out.tar").exists()
        assert not processes_with(sleep)
    finally:
        kill_left(sleep)


def test_non_utf8_names_round_trip(sh, tmp_path):
    d = os.path.join(os.fsencode(tmp_path), b"d")
    os.mkdir(d)
    with open(os.path.join(d, b"caf\xe9.jpg"), "wb") as f:
        f.write(b"x")
    data = sh("tarcreate --tree d").stdout
    with tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as tf:
        assert [os.fsencode(m.name) for m in tf] == [b"caf\xe9.jpg"]


def test_usage(sh, tmp_path):
    (tmp_path / "d:x").mkdir()
    (tmp_path / "d:x" / "a.txt").write_bytes(b"a")
    # a directory whose name ends in ':x' is given with a trailing '/'; 'd:x' is d with prefix x
    assert read_tar(sh("tarcreate --tree d:x/").stdout) == [("a.txt", b"a")]
    p = sh("tarcreate --tree d:x", ok=False)
    assert p.returncode == 2 and one_line(p) == "tarcreate: --tree d: No such file or directory"
    for bad in ("--tree d:x/ plan.tsv", "--tree d:x/ -C d:x", "--tree d:x/ --plan-format table",
                "--tree d:x/ --missing sometimes", "--tree d:x/ -p 0", "--tree d:x/ -s 1MB",
                "-s 1MB -o 'x-%d.tar' plan.tsv"):
        p = sh(f"tarcreate {bad}", ok=False)
        assert p.returncode == 2 and p.stdout == b"", bad
        assert "Traceback" not in p.stderr.decode()


def test_listing_is_bounded(sh, tmp_path):
    pets(tmp_path)
    p = sh(f"{PETS} -o out.tar", env={"TARPROC_MAX_PLAN": "1000"}, ok=False)
    assert p.returncode == 2 and "TARPROC_MAX_PLAN" in one_line(p)
    assert not (tmp_path / "out.tar").exists()
    sh(f"{PETS} -o out.tar", env={"TARPROC_MAX_PLAN": "10000"})


def test_shards_cut_by_tarcreate_are_tarsplits(sh, tmp_path):
    pets(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    sh(f"{PETS} -s 300 -o 'a/pets-%06d.tar'")
    sh(f"{PETS} | tarsplit -s 300 -o 'b/pets-%06d.tar'")
    names = sorted(os.listdir(tmp_path / "a"))
    assert names == sorted(os.listdir(tmp_path / "b")) and len(names) > 2
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    sh(f"{PETS} -n 3 -o 'a/n-%03d.tar'")
    assert [len(samples_of((tmp_path / "a" / f"n-{i:03d}.tar").read_bytes())) for i in range(3)] == [3, 3, 1]
    # a failure while writing (a file unreadable): the shards closed before it are committed (as
    # tarsplit's), the one being written is not
    (tmp_path / "images" / "zz.jpg").symlink_to("/proc/self/mem")
    (tmp_path / "annotations" / "trimaps" / "zz.png").write_bytes(b"z")
    p = sh(f"{PETS} -n 1 -o 'a/f-%03d.tar'", ok=False)
    assert p.returncode == 2 and "zz.jpg: cannot read" in one_line(p)
    done = sorted(n for n in os.listdir(tmp_path / "a") if n.startswith("f-"))
    # zz, the last key, would be the eighth; the seventh is closed when the eighth sample comes
    assert done == [f"f-{i:03d}.tar" for i in range(len(NAMES) - 1)], done


def test_empty_tree_is_an_empty_archive_and_a_warning(sh, tmp_path):
    (tmp_path / "e").mkdir()
    p = sh("tarcreate --tree e", stderr_ok=True)
    assert p.stdout == bytes(1024) and read_tar(p.stdout) == []
    assert one_line(p) == "tarcreate: warning: the trees make no samples (writing an empty archive)"
