"""A shard-name pattern's directories are created (tarsplit and
split_samples): below the directory the pattern names literally (which must
exist, as for every output: tests/concerns/test_output_directories.py), the
ones its placeholders make; never anything outside that tree."""

import os
import tarfile

import pytest


def names(path):
    with tarfile.open(path) as tf:
        return [m.name for m in tf]


def test_readme_fractions_example_in_a_fresh_directory(sh, tmp_path):
    sh("seq 1 50 | lines2tar > all.tar")
    assert sorted(os.listdir(tmp_path)) == ["all.tar"]
    p = sh("tarsplit --fractions 'train=0.8,val=0.1,test=0.1' --seed 1 -o 'out/{split}-%06d.tar' all.tar", ok=False)
    assert p.returncode == 2 and b"directory out does not exist" in p.stderr and not (tmp_path / "out").exists()
    sh("mkdir -p out && tarsplit --fractions 'train=0.8,val=0.1,test=0.1' --seed 1 -o 'out/{split}-%06d.tar' all.tar", stderr_ok=True)
    made = sorted(os.listdir(tmp_path / "out"))
    assert made == ["test-000000.tar", "train-000000.tar", "val-000000.tar"]
    assert sum(len(names(tmp_path / "out" / m)) for m in made) == 50


def test_placeholders_make_directories_below_the_named_root(sh, tmp_path):
    sh("seq 1 50 | lines2tar > all.tar")
    sh("mkdir -p a/b sp && tarsplit -n 20 -o 'a/b/{shard:02d}/part.tar' all.tar")
    assert [len(names(tmp_path / f"a/b/{i:02d}/part.tar")) for i in range(3)] == [20, 20, 10]
    sh("tarsplit --fractions 'train=0.5,val=0.5' -n 100 -o 'sp/{split}/%03d.tar' all.tar", stderr_ok=True)
    assert sorted(os.listdir(tmp_path / "sp")) == ["train", "val"]


def test_no_directory_outside_the_tree(sh, tmp_path):
    sh("seq 1 30 | lines2tar > all.tar")
    p = sh("mkdir o && tarsplit -n 10 -o 'o/{shard}/../../../esc{shard}.tar' all.tar", ok=False)
    assert p.returncode == 1 and b"outside o/" in p.stderr
    assert not os.path.exists(tmp_path.parent / "esc0.tar")
    (tmp_path / "outside").mkdir()
    (tmp_path / "t" / "sub").mkdir(parents=True)
    os.symlink(tmp_path / "outside", tmp_path / "t" / "sub" / "0")
    p = sh("tarsplit -n 10 -o 't/sub/%d/deeper/x.tar' all.tar", ok=False)
    assert p.returncode == 1 and b"symbolic link out of t/sub/" in p.stderr
    assert os.listdir(tmp_path / "outside") == []  # nothing made through the link


def test_a_plain_output_in_a_missing_directory_is_refused(sh, tmp_path):
    sh("seq 1 3 | lines2tar > all.tar")
    p = sh("tarcat all.tar -o nodir/x.tar", ok=False)
    assert p.returncode == 2 and b"directory nodir does not exist" in p.stderr
    assert not os.path.exists(tmp_path / "nodir")


def test_library_split_samples_makes_the_directories(tmp_path):
    import tarproc

    samples = ({"__key__": f"k{i}", "txt": b"x"} for i in range(5))
    with pytest.raises(tarproc.errors.OutputError, match="directory .*lib does not exist"):
        list(tarproc.split_samples(iter([{"__key__": "a", "txt": b"x"}]), str(tmp_path / "lib/%d/s.tar")))
    (tmp_path / "lib").mkdir()
    shards = list(tarproc.split_samples(samples, str(tmp_path / "lib/%d/s.tar"), max_count=2))
    assert [s.samples for s in shards] == [2, 2, 1]
    assert sorted(os.listdir(tmp_path / "lib")) == ["0", "1", "2"]
