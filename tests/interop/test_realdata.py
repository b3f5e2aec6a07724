"""tarcat over every shard in ../shared/realdata (shards other tools made),
read in place and never copied into the project."""

import os

import pytest

from conftest import REALDATA
from helpers import read_tar, samples_of


def shards():
    assert os.path.isdir(REALDATA), f"{REALDATA} is missing"
    return sorted(f for f in os.listdir(REALDATA) if f.endswith((".tar", ".tgz")))


def test_realdata_directory_exists():
    assert os.path.isdir(REALDATA)
    assert len(shards()) >= 5


@pytest.mark.parametrize("name", ["sample.tar", "sample.tgz", "tendata.tar", "compressed.tar", "testgz.tar"])
def test_tarcat_reads_real_shards(sh, name):
    path = os.path.join(REALDATA, name)
    assert os.path.exists(path)
    p = sh(f"tarcat -v '{path}'", stderr_ok=True)
    ours = read_tar(p.stdout)
    with open(path, "rb") as f:
        original = f.read()
    theirs = [(n, d) for n, d in read_tar(original) if "." in n.rsplit("/", 1)[-1]]
    # the same members, bytes and samples; fields in sorted order within each sample
    assert sorted(ours) == sorted(theirs)
    assert samples_of(p.stdout) == samples_of(original)
    assert list(samples_of(p.stdout)) == list(samples_of(original))
    n = len(samples_of(p.stdout))
    assert f"samples read {n}, written {n}, skipped 0" in p.stderr.decode()
    expected = {"sample.tar": 90, "sample.tgz": 90, "tendata.tar": 100, "compressed.tar": 3, "testgz.tar": 1000}
    assert n == expected[name]
    assert sh(f"tarcat < '{path}'").stdout == p.stdout  # stdin (compression detected) gives the same bytes


def test_every_realdata_shard(sh):
    for name in shards():
        p = sh(f"tarcat '{os.path.join(REALDATA, name)}' | tar tf - | wc -l")
        assert int(p.stdout) > 0
