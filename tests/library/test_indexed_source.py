"""IndexedDataset's __source__ is the URL it read the sample from (the
shard's URL resolved against the index's location, as opened), the same
string iter_samples gives for that URL, never the URL as stored in the
index (relative to the index: ../x/small.tar)."""

import json
import os
import pickle

import tarproc
from helpers import tar_bytes


def _layout(sh, tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "small.tar").write_bytes(tar_bytes([(f"{i}.txt", b"s%d" % i) for i in range(4)]))
    sh("mkdir idx && tarindex -q x/small.tar -o idx/i.json")
    assert json.loads((tmp_path / "idx" / "i.json").read_text())["shardlist"][0]["url"] == "../x/small.tar"


def _check(ds, cwd, want):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        got = [s["__source__"] for s in ds]
        assert got == [want] * 4 and ds.urls == [want] and ds.locate(2) == (want, 2)
        assert os.path.samefile(want, os.path.join(str(ds.urls[0])))  # the file that was read
        assert [s["__source__"] for s in tarproc.iter_samples(want)] == got
        assert list(ds) == list(tarproc.iter_samples(ds.urls))
        assert [s["__source__"] for s in pickle.loads(pickle.dumps(ds))] == got  # as a DataLoader worker gets it
    finally:
        os.chdir(old)


def test_source_is_the_url_read(sh, tmp_path):
    _layout(sh, tmp_path)
    _check(tarproc.IndexedDataset("idx/i.json"), tmp_path, "x/small.tar")
    # from the index's own directory: the stored URL is then the one read
    _check(tarproc.IndexedDataset("i.json"), tmp_path / "idx", "../x/small.tar")
    # an absolute index location gives absolute shard paths
    _check(tarproc.IndexedDataset(str(tmp_path / "idx" / "i.json")), tmp_path, str(tmp_path / "x" / "small.tar"))
    # the index as a dict, with the directory its URLs are relative to
    index = json.loads((tmp_path / "idx" / "i.json").read_text())
    index.pop("tarproc_offsets")
    for s in index["shardlist"]:
        s["offsets"] = False
    ds = tarproc.IndexedDataset(index, base=str(tmp_path / "idx"))
    assert ds.urls == [str(tmp_path / "x" / "small.tar")] and len(ds) == 4


def test_source_through_a_symlinked_index_directory(sh, tmp_path):
    """URLs are relative to the index's location as named (as tarindex wrote
    them, and as wids resolves them), not to where a symlink leads."""
    _layout(sh, tmp_path)
    sh("mkdir -p far/away && mv idx/i.json idx/i.offsets.d idx/i.keys far/away/ && rmdir idx && ln -s far/away idx")
    _check(tarproc.IndexedDataset("idx/i.json"), tmp_path, "x/small.tar")


def test_source_of_a_remote_index_has_its_dot_segments_resolved(sh, tmp_path, monkeypatch):
    """An index at gs://bucket/idx/i.json naming ../x/small.tar: the URL read
    (and __source__) is gs://bucket/x/small.tar; gs and s3 would otherwise
    take 'idx/../x/small.tar' as a key of its own.  The stand-ins for gsutil
    serve gs://bucket/PATH from the local directory and log what they were asked."""
    _layout(sh, tmp_path)
    log = tmp_path / "asked.log"
    serve = f"u={{url}}; echo \"$u\" >> {log}; p=\"{tmp_path}/${{u#gs://bucket/}}\""
    monkeypatch.setenv("TARPROC_READ_GS", serve + "; cat \"$p\"")
    monkeypatch.setenv("TARPROC_RANGE_GS", serve + "; tail -c +$(({start} + 1)) \"$p\" | head -c $(({end} - {start} + 1))")
    ds = tarproc.IndexedDataset("gs://bucket/idx/i.json")
    assert ds.urls == ["gs://bucket/x/small.tar"]
    assert [s["__source__"] for s in ds] == ["gs://bucket/x/small.tar"] * 4 and ds[3]["txt"] == b"s3"
    asked = set(log.read_text().split())
    assert asked == {"gs://bucket/idx/i.json", "gs://bucket/idx/i.offsets.d/000000.offsets", "gs://bucket/x/small.tar"}, asked
    # (the library reads no environment: the reference read is given the settings the dataset took from it)
    ref = [s for s in tarproc.iter_samples("gs://bucket/x/small.tar", settings=tarproc.Settings.from_environ())]
    assert [s["__source__"] for s in ref] == [s["__source__"] for s in ds] and ref == list(ds)
