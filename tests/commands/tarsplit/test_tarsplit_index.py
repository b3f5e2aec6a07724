"""tarsplit --fractions with --index: one index per split through {split},
never one index that mixes the splits; and -o naming a directory."""

import json
import os
import subprocess

import tarproc
from helpers import samples_of, tar_bytes


def _all(tmp_path, n=60):
    members = []
    for i in range(n):
        members += [(f"{i:04d}.txt", b"sample %d" % i), (f"{i:04d}.cls", b"%d" % (i % 3))]
    (tmp_path / "all.tar").write_bytes(tar_bytes(members))


def test_one_index_per_split(sh, tmp_path):
    _all(tmp_path)
    sh("mkdir fx && tarsplit -q --fractions 'train=0.7,val=0.2,test=0.1' --seed 2 -n 10 "
       "-o 'fx/{split}-%06d.tar' --index 'fx/{split}.json' all.tar")
    seen = {}
    for split in ("train", "val", "test"):
        files = sorted(f for f in os.listdir(tmp_path / "fx") if f.startswith(split + "-"))
        keys = [k for f in files for k in samples_of((tmp_path / "fx" / f).read_bytes())]
        index = json.loads((tmp_path / "fx" / f"{split}.json").read_text())
        # the index names exactly this split's shards, relative to itself
        assert [s["url"] for s in index["shardlist"]] == files
        ds = tarproc.IndexedDataset(str(tmp_path / "fx" / f"{split}.json"))
        assert [s["__key__"] for s in ds] == keys and len(ds) == len(keys)
        assert ds[len(ds) - 1]["txt"] == b"sample %d" % int(keys[-1])
        for k in keys:
            assert k not in seen
            seen[k] = split
    assert len(seen) == 60 and set(seen.values()) == {"train", "val", "test"}
    assert not (tmp_path / "fx" / "{split}.json").exists()


def test_one_index_for_several_splits_is_refused(sh, tmp_path):
    _all(tmp_path, 10)
    p = sh("mkdir fx && tarsplit --fractions 'train=0.9,val=0.1' -n 5 -o 'fx/{split}-%06d.tar' "
           "--index fx/index.json all.tar", ok=False)
    err = p.stderr.decode().splitlines()
    assert p.returncode == 2 and len(err) == 1 and "{split}" in err[0] and "mix" in err[0], err
    assert os.listdir(tmp_path / "fx") == []  # refused before anything was written
    # {split} without --fractions means nothing: refused too
    p = sh("tarsplit -n 5 -o 'fx/s-%06d.tar' --index 'fx/{split}.json' all.tar", ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and os.listdir(tmp_path / "fx") == []
    # one split: one index, no placeholder needed
    sh("tarsplit -q --fractions 'all=1' -n 5 -o 'fx/{split}-%06d.tar' --index fx/index.json all.tar")
    assert len(tarproc.IndexedDataset(str(tmp_path / "fx" / "index.json"))) == 10


def test_a_split_with_no_samples_gets_an_empty_index(sh, tmp_path):
    _all(tmp_path, 3)
    # with 3 samples, a split of 0.001 almost surely gets none (the hash is stable: checked below)
    sh("mkdir fx && tarsplit -q --fractions 'train=0.999,val=0.001' -o 'fx/{split}-%06d.tar' "
       "--index 'fx/{split}.json' all.tar")
    assert not any(f.startswith("val-") for f in os.listdir(tmp_path / "fx"))
    assert len(tarproc.IndexedDataset(str(tmp_path / "fx" / "val.json"))) == 0
    assert len(tarproc.IndexedDataset(str(tmp_path / "fx" / "train.json"))) == 3


def test_output_naming_a_directory_is_refused(sh, tmp_path):
    _all(tmp_path, 10)
    for out in ("outdir/", "outdir/.", "./", "'fx/{split}/'"):
        frac = "--fractions 'a=0.5,b=0.5' " if "{split}" in out else ""
        p = sh(f"mkdir -p outdir fx && tarsplit {frac}-n 3 -o {out} all.tar", ok=False)
        err = p.stderr.decode().splitlines()
        assert p.returncode == 2 and len(err) == 1 and "directory" in err[0], (out, err)
        assert os.listdir(tmp_path / "outdir") == [] and os.listdir(tmp_path / "fx") == []
        assert not any(f.startswith("-") for f in os.listdir(tmp_path))
    # the suggested form works
    sh("tarsplit -n 3 -o outdir/shard all.tar")
    assert sorted(os.listdir(tmp_path / "outdir")) == [f"shard-{i:06d}.tar" for i in range(4)]


def run(cmd, cwd, input=None, env=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60,
                          env={**os.environ, **(env or {})}, **kw)


def test_tarsplit_compressed_index_warns_once(tmp_path):
    """tarsplit -z --group-size 0 --index: one warning line for all the
    compressed shards without restart points, not one per shard; the index
    still counts every shard's samples."""
    (tmp_path / "in.tar").write_bytes(tar_bytes([(f"{i:03d}.txt", b"x") for i in range(30)]))
    r = run(["tarsplit", "-z", "--group-size", "0", "-n", "5", "--index", "idx.json", "-o", "part", "in.tar"],
            tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and "6 shards are compressed" in lines[0] and "sample counts only" in lines[0], lines
    shards = json.loads((tmp_path / "idx.json").read_text())["shardlist"]
    assert [s["nsamples"] for s in shards] == [5] * 6
