"""Indexes and random access (tarindex, IndexedDataset), exact resharding and
splits (tarsplit --shards/--fractions/--index), subsets by key (tarcat --keys).

wids (with the real torch) reads our index in a subprocess, and a torch
DataLoader reads IndexedDataset; HTTP ranges come from a small
range-capable server started here (and one that ignores Range); S3 ranges go
through the real aws CLI against the moto server of test_urls."""

import copy
import http.server
import io
import json
import os
import pickle
import random
import subprocess
import sys
import tarfile
import threading

import pytest

import tarproc
from tarproc.core.tario import TarWriter
from conftest import ROOT, require
from helpers import read_tar, samples_of, tar_bytes
from helpers import run_pipefail, prefixed_shard
import make_corpus as mc
from test_urls import s3  # noqa: F401  (the moto S3 fixture)


def make_shard(path, n, seed=0, fmt=tarfile.USTAR_FORMAT, prefix=""):
    """A shard written by tarfile: n samples of a random-size .txt and a .cls."""
    r = random.Random(seed)
    members = []
    for i in range(n):
        members.append((f"{prefix}{i:05d}.txt", bytes(r.randrange(256) for _ in range(r.randrange(1500)))))
        members.append((f"{prefix}{i:05d}.cls", str(i % 7).encode()))
    path.write_bytes(tar_bytes(members, format=fmt))
    return members


def make_two_shards(d, na=40, nb=25):
    """``d/a.tar`` (``na`` samples) and ``d/b.tar`` (``nb`` samples with pax
    headers, long non-ASCII names, and a directory member between samples)."""
    make_shard(d / "a.tar", na, 1)
    members = make_shard(d / "b.tar", nb, 2, tarfile.PAX_FORMAT, prefix="dir/ü" + "x" * 120 + "/")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for k, (name, data) in enumerate(members):
            if k == 10:
                info = tarfile.TarInfo("somedir")
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    (d / "b.tar").write_bytes(buf.getvalue())


@pytest.fixture
def shards(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    make_two_shards(d)
    subprocess.run(f"gzip -c {d / 'a.tar'} > {d / 'c.tar.gz'}", shell=True, check=True)
    subprocess.run(f"xz -c {d / 'a.tar'} > {d / 'c.tar.xz'}", shell=True, check=True)
    return d


# ------------------------------------------------------------ tarindex and wids


def test_tarindex_writes_a_wids_index_with_offsets(sh, shards, tmp_path):
    p = sh("tarindex 'data/{a,b}.tar' data/c.tar.xz -o data/index.json", stderr_ok=True)
    err = p.stderr.decode()
    assert "c.tar.xz: xz-compressed: counted only (40 samples)" in err and err.count("\n") == 1, err
    index = json.loads((shards / "index.json").read_text())
    assert index["__kind__"] == "wids-shard-index-v1" and index["wids_version"] == 1
    entries = {e["url"]: e for e in index["shardlist"]}
    assert [e["url"] for e in index["shardlist"]] == ["a.tar", "b.tar", "c.tar.xz"]  # relative to the index
    assert [e["nsamples"] for e in index["shardlist"]] == [40, 25, 40]
    assert entries["a.tar"]["offsets"] and entries["a.tar"]["filesize"] == (shards / "a.tar").stat().st_size
    assert entries["c.tar.xz"]["offsets"] is False and entries["c.tar.xz"]["compression"] == "xz"
    side = shards / "index.offsets"
    assert index["tarproc_offsets"] == {"file": "index.offsets", "samples": 65, "bytes": side.stat().st_size}
    # 32-byte head, 8 bytes per sample, then the keys one per line
    keys = side.read_bytes()[32 + 8 * 65:].decode().splitlines()
    assert keys[:2] == ["00000", "00001"] and keys[40].startswith("dir/ü") and len(keys) == 65


def test_tarindex_verbose_says_what_it_did(sh, shards):
    # issue 40: `tarindex -v` said "samples read 2000, written 0" (an index writes no samples)
    p = sh("tarindex -v 'data/{a,b}.tar' -o data/index.json", stderr_ok=True)
    err = p.stderr.decode().splitlines()
    assert err[-1].startswith("tarindex: indexed 2 shards, 65 samples into data/index.json; members skipped 1 ("), err
    assert not any("written" in line for line in err), err


WIDS_READ = r"""
import json, sys
import torch
import wids
result = {"torch": [torch.__version__, torch.__file__]}
for name in sys.argv[2:]:
    ds = wids.ShardListDataset(f"{name}/index.json", cache_dir=f"{sys.argv[1]}/{name}", transformations=[])
    out = []
    for i in range(len(ds)):
        s = ds[i]
        out.append([s["__key__"], s[".cls"].read().decode() if hasattr(s[".cls"], "read") else s[".cls"].decode()])
    result[name] = out
print(json.dumps(result))
"""


def _real_torch(info):
    """The torch that ran is the installed wheel (setup.cfg's test extra), not a stand-in."""
    version, path = info
    return version.split("+")[0] == "2.13.0" and os.sep + "site-packages" + os.sep in path


def test_wids_reads_our_indexes(sh, shards, tmp_path):
    # wids and the torch it imports (torch.distributed, torch.utils.data), both
    # the real packages, read an index of tarindex and one of tarsplit --index
    # (one process: importing torch is the slow part).  wids' own tar reader
    # takes the 100-byte ustar name field and ignores pax and GNU long-name
    # records, so b.tar's long names are not for it: see docs/tarindex.md.
    for d in ("by_tarindex", "by_tarsplit"):
        (tmp_path / d).mkdir()
    sh("tarsplit -n 15 -o 'by_tarindex/w-%d.tar' data/a.tar && cp data/a.tar by_tarindex/")
    sh("tarindex by_tarindex/a.tar 'by_tarindex/w-{0..2}.tar' -o by_tarindex/index.json --checksum -p 2")  # sha256, mtime_ns
    sh("tarsplit --shards 3 --index by_tarsplit/index.json -o 'by_tarsplit/w-%d.tar' data/a.tar")
    p = subprocess.run([sys.executable, "-c", WIDS_READ, str(tmp_path / "cache"), "by_tarindex", "by_tarsplit"],
                       capture_output=True, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    got = json.loads(p.stdout.decode().strip().splitlines()[-1])
    assert _real_torch(got["torch"]), got["torch"]
    for d, urls in (("by_tarindex", ["a.tar", "w-0.tar", "w-1.tar", "w-2.tar"]),
                    ("by_tarsplit", ["w-0.tar", "w-1.tar", "w-2.tar"])):
        expect = [[k, v["cls"].decode()] for url in urls
                  for k, v in samples_of((tmp_path / d / url).read_bytes()).items()]
        assert len(expect) == 40 * (len(urls) - 2) and got[d] == expect, d
    assert [len(samples_of((tmp_path / "by_tarsplit" / f"w-{i}.tar").read_bytes())) for i in range(3)] == [14, 13, 13]


TORCH_LOADER = r"""
import json, sys
import torch
from torch.utils.data import DataLoader

import tarproc


def as_list(batch):
    return batch


if __name__ == "__main__":
    ds = tarproc.IndexedDataset(sys.argv[1])
    out = {"torch": [torch.__version__, torch.__file__]}
    ds[0]  # files opened in the parent: the forked workers share them
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=as_list, multiprocessing_context="fork")
    out["fork"] = [[s["__key__"], s["cls"].decode(), s["txt"].hex(), s["__source__"]] for b in loader for s in b]
    print(json.dumps(out))
"""


def test_indexed_dataset_in_a_torch_dataloader(shards, tmp_path):
    # the real torch DataLoader with 2 (forked) workers; b.tar has pax long
    # non-ASCII names and a directory member between samples.  (spawned
    # workers get the dataset pickled: pickling is tested in
    # test_indexed_dataset_gives_the_samples_of_iter_samples; each spawned
    # worker would import torch again, too slow for the suite)
    tarproc.index_shards([str(shards / "a.tar"), str(shards / "b.tar")], str(shards / "index.json"))
    script = tmp_path / "loader.py"
    script.write_text(TORCH_LOADER)
    p = subprocess.run([sys.executable, str(script), str(shards / "index.json")], capture_output=True,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    got = json.loads(p.stdout.decode().strip().splitlines()[-1])
    assert _real_torch(got["torch"]), got["torch"]
    ref = [[s["__key__"], s["cls"].decode(), s["txt"].hex(), s["__source__"]]
           for s in tarproc.iter_samples([str(shards / "a.tar"), str(shards / "b.tar")])]
    assert len(ref) == 65 and got["fork"] == ref


# ------------------------------------------------------------ IndexedDataset


def test_indexed_dataset_gives_the_samples_of_iter_samples(shards):
    index = tarproc.index_shards([str(shards / "a.tar"), str(shards / "b.tar")], str(shards / "index.json"))
    assert [e["nsamples"] for e in index["shardlist"]] == [40, 25]
    ds = tarproc.IndexedDataset(str(shards / "index.json"))
    ref = list(tarproc.iter_samples(ds.urls))
    assert len(ds) == len(ref) == 65
    assert [ds[i] for i in range(65)] == ref
    assert ds[-1] == ref[-1] and ds[40]["__key__"].startswith("dir/ü")
    view = ds[10:50:3]
    assert len(view) == len(ref[10:50:3]) and list(view) == ref[10:50:3] and view[-1] == ref[49]
    assert ds.key(42) == ref[42]["__key__"] and ds.locate(41) == (ds.urls[1], 1)
    with pytest.raises(IndexError):
        ds[65]
    clone = pickle.loads(pickle.dumps(view))
    assert clone._index is None and clone[2] == ref[16]


def _worker_read(args):
    ds, i = args
    return ds[i]


def test_indexed_dataset_in_forked_workers(shards):
    import multiprocessing

    tarproc.index_shards([str(shards / "a.tar")], str(shards / "index.json"))
    ds = tarproc.IndexedDataset(str(shards / "index.json"))
    ds[0]  # files open in the parent: the forked workers share them (pread)
    ref = list(tarproc.iter_samples(ds.urls))
    with multiprocessing.get_context("fork").Pool(2) as pool:
        got = pool.map(_worker_read, [(ds, i) for i in range(0, 40, 3)])
    assert got == ref[0:40:3]
    # the index and its reader do not import torch (checked in a fresh interpreter: other tests of this
    # pytest process may have imported webdataset, which imports it)
    code = ("import sys, tarproc; ds = tarproc.IndexedDataset(sys.argv[1]); ds[0]; ds[len(ds) - 1]; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code, str(shards / "index.json")], check=True, timeout=60)


def _proc_rchar():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def test_random_access_reads_a_fraction_of_the_shard(tmp_path):
    n = 20000
    with open(tmp_path / "big.tar", "wb") as f:
        w = TarWriter(f)
        r = random.Random(5)
        for i in range(n):
            w.write(f"{i:06d}.bin", r.randbytes(512))
            w.write(f"{i:06d}.cls", b"%d" % (i % 10))
        w.close()
    tarproc.index_shards(str(tmp_path / "big.tar"), str(tmp_path / "big.json"))
    before = _proc_rchar()
    count = sum(1 for _ in tarproc.iter_samples(str(tmp_path / "big.tar")))
    full = _proc_rchar() - before
    assert count == n and full >= os.path.getsize(tmp_path / "big.tar")
    before = _proc_rchar()
    ds = tarproc.IndexedDataset(str(tmp_path / "big.json"))
    picks = random.Random(1).sample(range(n), 40)
    got = [ds[i] for i in picks]
    random_bytes = _proc_rchar() - before  # the index and sidecar included
    assert [s["__key__"] for s in got] == [f"{i:06d}" for i in picks]
    assert all(s["cls"] == b"%d" % (i % 10) for s, i in zip(got, picks))
    assert random_bytes < 0.2 * full, (random_bytes, full)


def test_changed_shard_or_wrong_index_is_one_clear_error(shards, tmp_path):
    tarproc.index_shards([str(shards / "a.tar")], str(shards / "index.json"))
    good = (shards / "a.tar").read_bytes()
    st = (shards / "a.tar").stat()
    # same size, other keys: a different shard under the same name (and its mtime put back, so that the
    # key check catches it: tests/library/test_index_access.py has the mtime check)
    make_shard(shards / "a.tar", 40, 1, prefix="z")
    (shards / "a.tar").write_bytes((shards / "a.tar").read_bytes()[:len(good)].ljust(len(good), b"\0"))
    os.utime(shards / "a.tar", ns=(st.st_atime_ns, st.st_mtime_ns))
    ds = tarproc.IndexedDataset(str(shards / "index.json"))
    with pytest.raises(tarproc.BadInput, match=r"a.tar: sample 5 \('00005'\) at bytes .*the shard changed"):
        ds[5]
    # shorter: caught by its size before any sample is parsed
    (shards / "a.tar").write_bytes(good[:-2048])
    ds = tarproc.IndexedDataset(str(shards / "index.json"))
    with pytest.raises(tarproc.BadInput, match="changed since"):
        ds[0]
    # a sidecar that belongs to another index
    (shards / "a.tar").write_bytes(good)
    tarproc.index_shards([str(shards / "b.tar")], str(tmp_path / "other.json"))
    os.replace(tmp_path / "other.offsets", shards / "index.offsets")
    with pytest.raises(tarproc.BadInput, match="index.offsets: offsets file has .* not this index"):
        len(tarproc.IndexedDataset(str(shards / "index.json")))
    # a compressed shard: counts only, and says so
    tarproc.index_shards([str(shards / "c.tar.xz")], str(shards / "xz.json"))
    ds = tarproc.IndexedDataset(str(shards / "xz.json"))
    assert len(ds) == 40
    with pytest.raises(tarproc.BadInput, match="xz-compressed: the index has only its sample count"):
        ds[3]


# ------------------------------------------------------------ HTTP ranges


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    honour_range = True
    wrong_range = False

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.translate_path(self.path)
        try:
            data = open(path, "rb").read()
        except OSError:
            self.send_error(404)
            return
        rng = self.headers.get("Range")
        if rng and self.honour_range:
            a, b = (int(x) for x in rng.split("=", 1)[1].split("-"))
            if self.wrong_range:
                a, b = a + 512, b + 512
            body = data[a:b + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{a + len(body) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def http_range(shards):
    require("curl")
    servers = []

    def start(honour=True, wrong=False, handler=RangeHandler):
        h = type("H", (handler,), {"honour_range": honour, "wrong_range": wrong})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: h(*a, directory=str(shards)))
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_http_range_reads_and_a_server_that_ignores_range(sh, shards, http_range):
    url = http_range()
    sh(f"tarindex '{url}/{{a,b}}.tar' -o index.json")
    ds = tarproc.IndexedDataset(str(shards.parent / "index.json"))
    assert ds.urls == [f"{url}/a.tar", f"{url}/b.tar"]
    ref = list(tarproc.iter_samples(ds.urls))
    for i in (0, 17, 39, 40, 64):
        assert ds[i] == ref[i]
    index = json.loads((shards.parent / "index.json").read_text())
    for bad, message in ((http_range(honour=False), "ignored the range request"),
                         (http_range(wrong=True), "refusing a range it did not honour")):
        for e in index["shardlist"]:
            e["url"] = e["url"].replace(url, bad)
        url = bad
        ds = tarproc.IndexedDataset(index, base=str(shards.parent))
        with pytest.raises(tarproc.BadInput, match=message):
            ds[17]


# ------------------------------------------------------------ S3 and gs


def test_s3_ranged_gets(sh, shards, s3):  # noqa: F811
    sh("aws s3 cp data/a.tar s3://tarproc-test/idx/a.tar", env=s3, stderr_ok=True)
    sh("tarindex s3://tarproc-test/idx/a.tar -o s3.json", env=s3)
    old = {k: os.environ.get(k) for k in s3}
    os.environ.update(s3)
    try:
        ds = tarproc.IndexedDataset(str(shards.parent / "s3.json"))
        ref = list(tarproc.iter_samples(str(shards / "a.tar")))
        for i in (39,):
            got = ds[i]
            assert got["__source__"] == "s3://tarproc-test/idx/a.tar"
            assert {k: v for k, v in got.items() if k != "__source__"} == \
                {k: v for k, v in ref[i].items() if k != "__source__"}
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_range_command_override_for_gs(shards, monkeypatch):
    tarproc.index_shards([str(shards / "a.tar")], str(shards / "index.json"))
    index = json.loads((shards / "index.json").read_text())
    index["shardlist"][0]["url"] = "gs://bucket/a.tar"
    (shards / "gs.json").write_text(json.dumps(index))
    # the stand-in for gsutil cat -r START-END: the same byte range of the local file
    monkeypatch.setenv("TARPROC_RANGE_GS",
                       f"f={{url}}; tail -c +$(({{start}} + 1)) {shards}/${{f##*/}} | head -c $(({{end}} - {{start}} + 1))")
    ds = tarproc.IndexedDataset(str(shards / "gs.json"))
    ref = list(tarproc.iter_samples(str(shards / "a.tar")))
    assert ds[7]["txt"] == ref[7]["txt"] and ds[7]["__source__"] == "gs://bucket/a.tar"


# ------------------------------------------------------------ tarsplit --shards / --fractions / --index


def test_tarsplit_exact_shards_from_files_stdin_total_and_index(sh, shards, tmp_path):
    (tmp_path / "tmp").mkdir()
    env = {"TMPDIR": str(tmp_path / "tmp")}
    sh("tarsplit --shards 6 -o 'f-%02d.tar' --index f.json data/a.tar data/b.tar")
    counts = [len(samples_of((tmp_path / f"f-{k:02d}.tar").read_bytes())) for k in range(6)]
    assert counts == [11, 11, 11, 11, 11, 10]
    index = json.loads((tmp_path / "f.json").read_text())
    assert [e["nsamples"] for e in index["shardlist"]] == counts
    ds = tarproc.IndexedDataset(str(tmp_path / "f.json"))
    assert list(ds) == list(tarproc.iter_samples(ds.urls))
    # stdin: spooled to a temporary file on disk, removed after
    sh("cat data/a.tar | tarsplit --shards 3 -o 's-%d.tar'", env=env)
    assert [len(samples_of((tmp_path / f"s-{k}.tar").read_bytes())) for k in range(3)] == [14, 13, 13]
    assert os.listdir(tmp_path / "tmp") == []
    # the total from a number and from an index: no counting pass, one read of stdin
    sh("tarindex data/a.tar -o a.json && cat data/a.tar | tarsplit --shards 4 --total a.json -o 't-%d.tar'")
    assert [len(samples_of((tmp_path / f"t-{k}.tar").read_bytes())) for k in range(4)] == [10] * 4
    sh("cat data/a.tar | tarsplit --shards 50 --total 40 -o 'u-%02d.tar'")  # more shards than samples
    assert sorted(len(samples_of((tmp_path / f"u-{k:02d}.tar").read_bytes())) for k in range(50)) == [0] * 10 + [1] * 40
    p = sh("cat data/a.tar | tarsplit --shards 4 --total 30 -o 'w-%d.tar'", ok=False)
    assert p.returncode == 2 and "more samples than the 30" in p.stderr.decode()
    p = sh("tarsplit --shards 4 -n 10 -o 'x-%d.tar' data/a.tar", ok=False)
    assert p.returncode == 2 and "cannot be combined" in p.stderr.decode()


def test_tarsplit_fractions_are_stable_per_key(sh, shards, tmp_path):
    sh("mkdir out sub && tarcat data/a.tar data/b.tar --rekey '{index:05d}' -o all.tar")
    p = sh("tarsplit --fractions 'train=0.6,val=0.2,test=0.2' --seed 3 -n 20 -o 'out/{split}-%03d.tar' "
           "--index 'out/{split}.json' all.tar", stderr_ok=True)
    lines = p.stderr.decode().splitlines()
    where = {}
    sizes = {}
    for name in ("train", "val", "test"):
        files = sorted(f for f in os.listdir(tmp_path / "out") if f.startswith(name + "-"))
        data = [(tmp_path / "out" / f).read_bytes() for f in files]
        keys = [k for d in data for k in samples_of(d)]
        for k in keys:
            where[k] = name
        sizes[name] = sum(len(d) for d in data)
        assert f"tarsplit: {name}: {len(keys)} samples, {sizes[name]} bytes, {len(files)} shards" in lines, lines
    assert len(where) == 65 and 25 <= list(where.values()).count("train") <= 53
    # the same key lands in the same split whatever else is in the stream
    sh("tarcat --slice 20:60 all.tar -o part.tar && "
       "tarsplit -q --fractions 'train=0.6,val=0.2,test=0.2' --seed 3 -o 'sub/{split}-%03d.tar' part.tar")
    for f in os.listdir(tmp_path / "sub"):
        for k in samples_of((tmp_path / "sub" / f).read_bytes()):
            assert where[k] == f.split("-")[0]
    for name in ("train", "val", "test"):  # one index per split, naming only that split's shards
        ds = tarproc.IndexedDataset(str(tmp_path / "out" / f"{name}.json"))
        assert len(ds) == list(where.values()).count(name) and list(ds) == list(tarproc.iter_samples(ds.urls))
        assert {where[s["__key__"]] for s in ds} == {name}
    p = sh("tarsplit --fractions 'train=0.6,val=0.3' -o 'o-%d.tar' all.tar", ok=False)
    assert p.returncode == 2 and "add up to 0.9" in p.stderr.decode()
    p = sh("tarsplit --fractions 'train=0.5,val=0.5' -o 'o-%d.tar' all.tar", ok=False)
    assert p.returncode == 2 and "no {split}" in p.stderr.decode()


def test_split_samples_api():
    samples = [{"__key__": f"{i:03d}", "txt": b"x" * i} for i in range(10)]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        got = list(tarproc.split_samples(samples, os.path.join(d, "s-%d.tar"), shards=3))
        assert [s.samples for s in got] == [4, 3, 3] and [s.info.nsamples for s in got] == [4, 3, 3]
        got = list(tarproc.split_samples(iter(samples), os.path.join(d, "{split}-%d.tar"),
                                         fractions={"a": 0.5, "b": 0.5}, seed=1))
        assert sum(s.samples for s in got) == 10 and {s.split for s in got} <= {"a", "b"}


# ------------------------------------------------------------ tarcat --keys


def test_tarcat_keys_and_exclude_keys(sh, shards, tmp_path):
    (tmp_path / "keys.txt").write_text("00031\n00002\n\nnot-there\n00017\r\n")
    p = sh("tarcat --keys keys.txt data/a.tar", stderr_ok=True)
    assert list(samples_of(p.stdout)) == ["00002", "00017", "00031"]  # stream order, not list order
    assert b"1 of the 4 keys listed in keys.txt were never found (e.g. 'not-there')" in p.stderr
    out = sh("printf '00002\\n00017\\n' | tarcat --exclude-keys - data/a.tar").stdout
    keys = list(samples_of(out))
    assert len(keys) == 38 and "00002" not in keys and "00017" not in keys
    p = sh("tarcat --keys - < data/a.tar", ok=False)
    assert p.returncode == 2 and "both come from stdin" in p.stderr.decode()
    stage = tarproc.select_keys({"b"})
    assert [s["__key__"] for s in stage([{"__key__": k} for k in "abcb"])] == ["b", "b"]


def test_the_python_example_of_docs_tarindex_runs(tmp_path):
    import re

    text = open(os.path.join(ROOT, "docs", "tarindex.md")).read()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[-1]
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.decode().splitlines()
    assert out[0] == "rank-00.tar 125" and out[-2] == "1000 00999" and out[-1] == "['00017', '00500']"


@pytest.mark.parametrize("fmt", ["gnu", "posix"])
def test_gnu_tar_long_names_are_read_by_range(sh, tmp_path, fmt):
    """GNU long-name ('L') and pax headers before a member belong to its range (Member.start)."""
    long = "d" * 120
    (tmp_path / "src" / long).mkdir(parents=True)
    for i in range(4):
        (tmp_path / "src" / long / f"s{i}.txt").write_text(f"text {i}\n" * i)
        (tmp_path / "src" / long / f"s{i}.cls").write_text(str(i))
    sh(f"cd src && tar --format={fmt} --sort=name -cf ../g.tar {long} && cd .. && tarindex g.tar -o g.json")
    ds = tarproc.IndexedDataset(str(tmp_path / "g.json"))
    ref = list(tarproc.iter_samples(ds.urls))
    assert len(ds) == 4 and ds[3]["txt"] == b"text 3\n" * 3 and [ds[i] for i in (3, 0, 2, 1)] == [ref[i] for i in (3, 0, 2, 1)]


def test_tarsplit_exact_shards_over_a_long_input_list(sh, tmp_path):
    """--shards without --total reads its inputs twice: a list longer than the
    ones expanded ahead (1000) is held, not consumed by the counting pass."""
    make_shard(tmp_path / "one.tar", 1, 1)
    make_shard(tmp_path / "two.tar", 1, 1, prefix="b")  # another key: two samples of one key side by side are refused
    (tmp_path / "list.txt").write_text("one.tar\ntwo.tar\n" * 503)
    sh("tarsplit --shards 3 -T list.txt -o 'l-%d.tar'")
    # the inputs hold two keys: count members (a .txt and a .cls per sample)
    counts = [len(tarfile.open(tmp_path / f"l-{k}.tar").getnames()) for k in range(3)]
    assert counts == [672, 670, 670]


def shard(n, prefix="s", size=20):
    return mc.plain_shard(n, prefix, size)


run = mc.bash


one_line = mc.one_line


def test_tarindex_over_more_urls_than_are_read_ahead(tmp_path):
    """Past 1000 URLs the input list comes lazily: tarindex took its len()."""
    (tmp_path / "a.tar").write_bytes(shard(2))
    (tmp_path / "list").write_text("a.tar\n" * 1001)
    p = run("tarindex -T list -o index.json", tmp_path)
    assert p.returncode == 0, p.stderr
    index = json.loads((tmp_path / "index.json").read_text())
    assert len(index["shardlist"]) == 1001 and {e["nsamples"] for e in index["shardlist"]} == {2}
    p = run("tarindex 'a{0..99}.tar' -o big.json", tmp_path, env={"TARPROC_MAX_URLS": "50"})
    assert p.returncode == 2 and "more than 50 entries" in one_line(p)
    assert not (tmp_path / "big.json").exists()


@pytest.mark.parametrize("offsets", ["x.json", "./x.json", "sub/../x.json"])
def test_tarindex_offsets_naming_the_index_itself_is_refused(offsets, tmp_path):
    """`tarindex a.tar -o x.json --offsets x.json` exited 0 with one file
    that was the JSON (the sidecar written first, then replaced): an index
    that IndexedDataset cannot read ("not this index's offsets")."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.tar").write_bytes(prefixed_shard(3))
    p = run_pipefail(f"tarindex a.tar -o x.json --offsets {offsets}", tmp_path)
    assert p.returncode == 2, p.stderr
    assert b"--offsets" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.fixture
def indexed(tmp_path):
    (tmp_path / "a.tar").write_bytes(tar_bytes([(f"{i:03d}.txt", b"x" * i) for i in range(20)]))
    tarproc.index_shards([str(tmp_path / "a.tar")], str(tmp_path / "index.json"))
    return tmp_path, json.loads((tmp_path / "index.json").read_text())


def _open(tmp_path, desc, i=3):
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(desc))
    ds = tarproc.IndexedDataset(str(path))
    len(ds)
    return ds[i]


def test_index_naming_a_pipe_sidecar_runs_nothing(indexed):
    """An index whose ``tarproc_offsets.file`` was ``pipe:CMD`` ran CMD in a
    shell as soon as the dataset was used: an index downloaded from anywhere
    could run any command.  The sidecar is a path or a remote URL, never a
    command."""
    tmp_path, good = indexed
    desc = copy.deepcopy(good)
    marker = tmp_path / "ran"
    desc["tarproc_offsets"]["file"] = f"pipe:touch {marker}; cat {tmp_path / 'index.offsets'}"
    with pytest.raises(tarproc.BadInput, match="hostile.json: the offsets file .*pipe:.* not a path or URL"):
        _open(tmp_path, desc)
    assert not marker.exists()


@pytest.mark.parametrize("change, message", [
    (lambda d: d.__setitem__("tarproc_offsets", "index.offsets"), "tarproc_offsets"),
    (lambda d: d.__setitem__("tarproc_offsets", [1]), "tarproc_offsets"),
    (lambda d: d["tarproc_offsets"].__setitem__("file", 3), "tarproc_offsets"),
    (lambda d: d.pop("tarproc_offsets"), "shard entry 0 has offsets but the index names no offsets file"),
    (lambda d: d["shardlist"][0].__setitem__("filesize", "x"), "shard entry 0 has a bad filesize"),
    (lambda d: d["shardlist"][0].__setitem__("nsamples", True), r"shard entry 0 is not"),
    (lambda d: (d["shardlist"][0].__setitem__("nsamples", 10 ** 30), d["shardlist"][0].__setitem__("offsets", False)),
     "more samples than"),
])
def test_malformed_index_fields_are_one_line(indexed, change, message):
    """A ``tarproc_offsets`` that is not an object, or whose ``file`` is not a
    string, was a TypeError/AttributeError; a shard with ``"offsets": true``
    in an index without a sidecar a TypeError on ``ds[i]``; a huge
    ``nsamples`` an OverflowError from ``len()``; a ``filesize`` that is not a
    number and a boolean ``nsamples`` were taken as they were."""
    tmp_path, good = indexed
    desc = copy.deepcopy(good)
    change(desc)
    with pytest.raises(tarproc.BadInput, match=message):
        _open(tmp_path, desc)


def test_deeply_nested_index_json_is_one_line(tmp_path):
    """JSON nested 100,000 deep was a RecursionError."""
    (tmp_path / "deep.json").write_bytes(b"[" * 100000 + b"]" * 100000)
    with pytest.raises(tarproc.BadInput, match="deep.json: not a JSON index: .*nested"):
        len(tarproc.IndexedDataset(str(tmp_path / "deep.json")))


def test_bad_max_sample_setting_is_a_usage_error(indexed, monkeypatch):
    """``TARPROC_MAX_SAMPLE=abc`` was a bare ValueError on every ``ds[i]``."""
    tmp_path, _ = indexed
    monkeypatch.setenv("TARPROC_MAX_SAMPLE", "abc")
    with pytest.raises(tarproc.UsageError, match="TARPROC_MAX_SAMPLE"):
        tarproc.IndexedDataset(str(tmp_path / "index.json"))[3]


def test_oversized_index_and_sidecar_are_refused_before_reading_them_whole(indexed, monkeypatch):
    """An index JSON (or a sidecar) of any size was read whole into memory
    before anything was checked: a 1 GB index took gigabytes.  The JSON is read
    up to ``TARPROC_MAX_INDEX`` bytes, the sidecar up to the size the index
    gives it."""
    tmp_path, good = indexed
    monkeypatch.setenv("TARPROC_MAX_INDEX", "4096")
    big = tmp_path / "big.json"
    big.write_text(json.dumps(good) + " " * 10000)
    with pytest.raises(tarproc.BadInput, match="big.json: the index is larger than 4096 bytes.*TARPROC_MAX_INDEX"):
        len(tarproc.IndexedDataset(str(big)))
    monkeypatch.delenv("TARPROC_MAX_INDEX")
    with open(tmp_path / "index.offsets", "ab") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB that takes no disk
    for _ in range(2):  # the first time may import modules (their reads count too)
        before = _rchar()
        with pytest.raises(tarproc.BadInput, match="index.offsets: offsets file has more than"):
            len(tarproc.IndexedDataset(str(tmp_path / "index.json")))
    assert _rchar() - before < 16 << 20  # not the 1 GiB


def _rchar():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def test_close_while_other_threads_read_gives_no_error_nor_another_file(tmp_path):
    """``ds.close()`` (documented: files are reopened on the next access) while
    other threads were inside ``ds[i]`` closed the descriptors under them:
    their reads failed with "Bad file descriptor", or read *another shard* that
    had been opened on the reused descriptor number ("bad header checksum").
    A descriptor is now closed only when no read is using it."""
    import random
    import threading

    for s in range(4):
        (tmp_path / f"s{s}.tar").write_bytes(tar_bytes([(f"{s}-{i:04d}.txt", b"%d" % i * (i % 300))
                                                        for i in range(200)]))
    tarproc.index_shards([str(tmp_path / f"s{s}.tar") for s in range(4)], str(tmp_path / "t.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "t.json"))
    ref = list(tarproc.iter_samples(ds.urls))
    errors = []

    def work(seed):
        r = random.Random(seed)
        for _ in range(250):
            i = r.randrange(len(ds))
            try:
                if ds[i] != ref[i]:
                    errors.append(f"sample {i} differs")
            except Exception as e:  # noqa: BLE001 (what the test looks for)
                errors.append(repr(e))
            if r.random() < 0.1:
                ds.close()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ds.close()
    assert ds._fds == {}


def test_fork_while_another_thread_opens_a_shard_does_not_hang_the_child(indexed):
    """A process forked (a DataLoader worker, a Pool) while another thread was
    inside ``ds[i]`` opening a shard inherited the dataset's lock held by a
    thread that does not exist in the child: the child's first ``ds[i]`` hung
    for ever.  The lock is made anew in a forked child."""
    import signal
    import threading
    import time

    tmp_path, _ = indexed
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    len(ds)
    held, release = threading.Event(), threading.Event()

    def opener():  # stands for a thread inside the lock (os.open of a slow file system)
        with ds._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=opener)
    t.start()
    held.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: 3 seconds to read one sample
        signal.alarm(3)
        try:
            os._exit(0 if ds[3]["__key__"] == "003" else 1)
        except BaseException:
            os._exit(1)
    try:
        deadline = time.monotonic() + 10
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        release.set()
        t.join()
    assert done and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_a_wids_index_of_plain_shards_says_how_to_get_offsets(indexed):
    """A ``widsindex`` index (counts only) of an uncompressed shard was
    refused with "random access needs uncompressed shards: tarcat it to a
    .tar": advice for a compressed shard, wrong for this one."""
    tmp_path, good = indexed
    desc = {"__kind__": "wids-shard-index-v1", "wids_version": 1,
            "shardlist": [{"url": "a.tar", "nsamples": 20, "filesize": good["shardlist"][0]["filesize"]}]}
    ds = tarproc.IndexedDataset(desc, base=str(tmp_path))
    assert len(ds) == 20
    with pytest.raises(tarproc.BadInput) as e:
        ds[3]
    assert "tarcat" not in str(e.value) and "tarindex" in str(e.value), str(e.value)


def test_a_member_moved_across_the_sample_boundary_is_caught(tmp_path):
    """A shard rewritten at the same size where a member moved from the next
    sample into this one: the indexed range still parsed as this sample,
    with a field missing, silently.  The header after the range is read too."""
    before = [("a.txt", b"1" * 10), ("b.cls", b"2" * 10), ("b.txt", b"3" * 10)]
    after = [("a.txt", b"1" * 10), ("a.cls", b"2" * 10), ("b.txt", b"3" * 10)]
    shard = tmp_path / "s.tar"
    shard.write_bytes(tar_bytes(before))
    tarproc.index_shards([str(shard)], str(tmp_path / "index.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"), verify="size")
    s0 = ds[0]
    assert s0["__key__"] == "a" and s0["txt"] == b"1" * 10 and "cls" not in s0
    assert ds[1]["cls"] == b"2" * 10 and ds[1]["txt"] == b"3" * 10  # the last sample: the end marker follows
    shard.write_bytes(tar_bytes(after))
    assert shard.stat().st_size == len(tar_bytes(before))
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"), verify="size")
    with pytest.raises(tarproc.BadInput, match=r"s.tar: sample 0 \('a'\).*the member after these bytes, 'a.cls', "
                                               r"belongs to this sample too: the shard changed"):
        ds[0]


def _old_sparse(name, entries, realsize, data, extended=(), size=None):
    """An old GNU sparse member (type S): ``entries`` in the header,
    ``extended`` in one extension block after it."""
    h = bytearray(mc.header(name, len(data) if size is None else size, flag=b"S"))
    for i, (off, n) in enumerate(entries):
        h[386 + 24 * i: 398 + 24 * i] = b"%011o\0" % off
        h[398 + 24 * i: 410 + 24 * i] = b"%011o\0" % n
    h[482] = 1 if extended else 0
    h[483:495] = b"%011o\0" % realsize
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    ext = b""
    if extended:
        e = bytearray(512)
        for i, (off, n) in enumerate(extended):
            e[24 * i: 24 * i + 12] = b"%011o\0" % off
            e[24 * i + 12: 24 * i + 24] = b"%011o\0" % n
        ext = bytes(e)
    return bytes(h) + ext + mc.pad(data)


def test_index_of_a_shard_ending_in_a_sparse_member(tmp_path):
    """tarindex took a member's end as offset + its data length: a sparse
    member stores less than its length, so the last sample's byte range ran
    past the shard.  Random access gives the samples a full read gives."""
    import tarproc

    want = bytes(5) + b"ab" + bytes(3) + b"cd" + bytes(4)
    data = (mc.member(b"a.txt", b"1") + _old_sparse(b"a.bin", [(5, 2)], 16, b"abcd", extended=[(10, 2)])
            + mc.member(b"b.txt", b"2") + _old_sparse(b"b.bin", [(5, 2), (10, 2)], 2000, b"abcd") + mc.EOA)
    (tmp_path / "s.tar").write_bytes(data)
    tarproc.index_shards([str(tmp_path / "s.tar")], str(tmp_path / "index.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    ref = list(tarproc.iter_samples([str(tmp_path / "s.tar")]))
    assert [ds[i] for i in range(len(ds))] == ref
    assert [(s["__key__"], s["bin"]) for s in ref] == [("a", want), ("b", want + bytes(1984))]
