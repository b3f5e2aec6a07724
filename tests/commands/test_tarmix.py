"""tarmix: shards of several sources mixed by weight, through the installed
command; outputs read back with Python's tarfile."""

import json

from helpers import prefixed_shard as shard, read_tar, run_pipefail as run


def test_tarmix_output_naming_one_of_its_shards_is_refused(tmp_path):
    """`tarmix mix.json -o a-1.tar` where a-1.tar is a shard of a source:
    the mix (which ends when a source runs out) replaced the shard."""
    for i in range(3):
        (tmp_path / f"a-{i}.tar").write_bytes(shard(4, prefix=f"a{i}-"))
    before = (tmp_path / "a-1.tar").read_bytes()
    spec = {"sources": [{"shards": "a-{0..2}.tar"}]}
    p = run("tarmix --seed 1 - -o a-1.tar", tmp_path, json.dumps(spec).encode())
    assert p.returncode == 2, p.stderr
    assert b"a-1.tar: is also the output" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr
    assert (tmp_path / "a-1.tar").read_bytes() == before
    p = run("tarmix --seed 1 - -o mixed.tar", tmp_path, json.dumps(spec).encode())
    assert p.returncode == 0, p.stderr
    assert len(read_tar((tmp_path / "mixed.tar").read_bytes())) == 24


def test_tarmix_huge_equal_weights_still_mix(tmp_path):
    """Weights near the float maximum summed to inf: every pick fell on the
    last source and the first was never drawn, whatever the seed."""
    (tmp_path / "a.tar").write_bytes(shard(200, prefix="a"))
    (tmp_path / "b.tar").write_bytes(shard(200, prefix="b"))
    spec = {"sources": [{"shards": "a.tar", "weight": 1e308}, {"shards": "b.tar", "weight": 1e308}]}
    p = run("tarmix --seed 1 -", tmp_path, json.dumps(spec).encode())
    assert p.returncode == 0, p.stderr
    names = [n for n, _ in read_tar(p.stdout) if n.endswith(".txt")]
    a = sum(n.startswith("a") for n in names)
    b = sum(n.startswith("b") for n in names)
    assert a > 20 and b > 20, (a, b)


def test_tarmix_url_bound_is_for_all_sources_together(tmp_path):
    """Each source's shard list was bounded on its own (TARPROC_MAX_URLS),
    so a 1 MiB spec of thousands of '{000000..999999}' sources held billions
    of names: 4 such sources took 300 MB and 9 s before the first sample."""
    spec = {"sources": [{"shards": f"x{i}-{{000..599}}.tar"} for i in range(3)]}
    p = run("tarmix --seed 1 - > out.tar", tmp_path, json.dumps(spec).encode(),
            env={"TARPROC_MAX_URLS": "1000"})
    assert p.returncode == 2, p.stderr
    assert b"more than 1000" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr
