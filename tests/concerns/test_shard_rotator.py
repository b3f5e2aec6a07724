"""The one shard rotator (sinks/split.ShardRotator) behind every tarsplit mode:
the shards each mode cuts, read back by tarfile; the index tarsplit writes
of them is the index tarindex makes of the same shards and reads back
sample for sample through IndexedDataset (compressed shards too); a
failure in the middle leaves only whole shards under final names and no
index; and the seams (no import circle, no module state)."""

import ast
import glob
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time

import pytest

import tarproc
from conftest import ROOT, require
from helpers import tar_bytes

SINKS = os.path.join(str(ROOT), "tarproc", "sinks")


# ------------------------------------------------------------ inputs and independent readers


def _tree(root, n=40):
    """Files of n samples (some large, one with a name past 100 bytes, in
    directories) to be archived by GNU tar and by tarproc."""
    import random

    r = random.Random(5)
    for i in range(n):
        d = os.path.join(root, f"d{i % 3}")
        os.makedirs(d, exist_ok=True)
        key = os.path.join(d, f"s{i:04d}")
        with open(key + ".txt", "wb") as f:
            f.write(bytes(r.getrandbits(8) for _ in range(r.randint(0, 1500))) + b"t" * r.randint(0, 1500))
        with open(key + ".cls", "wb") as f:
            f.write(b"%d" % (i % 7))
        if i % 9 == 0:
            with open(key + ".bin", "wb") as f:
                f.write(bytes(r.getrandbits(8) for _ in range(9000)))
    long_dir = os.path.join(root, "d0", "L" * 110)
    os.makedirs(long_dir)
    with open(os.path.join(long_dir, "long.txt"), "wb") as f:
        f.write(b"a sample whose name is longer than 100 bytes")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """``{"gnu": path, "tarproc": path}``: the same samples written by GNU
    tar (directories, a GNU long name) and by tarproc."""
    require("tar")
    root = tmp_path_factory.mktemp("rotator-in")
    _tree(str(root / "src"))
    subprocess.run(["tar", "-cf", str(root / "gnu.tar"), "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
                    "--numeric-owner", "-C", str(root / "src"), "."], check=True)
    subprocess.run(["tarcat", "-q", str(root / "gnu.tar"), "-o", str(root / "tp.tar")], check=True)
    return {"gnu": str(root / "gnu.tar"), "tarproc": str(root / "tp.tar")}


def _decoded(path):
    """The tar bytes of a shard, decoded by gzip / the zstd program."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        return gzip.decompress(data)
    if path.endswith(".zst"):
        return subprocess.run([require("zstd"), "-dc"], input=data, capture_output=True, check=True).stdout
    return data


def _samples(data):
    """``[(key, {field: bytes})]`` of a tar read by tarfile (the WebDataset key rule)."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        for m in tf:
            if not m.isfile() or "." not in m.name.rsplit("/", 1)[-1]:
                continue
            name = m.name
            slash = name.rfind("/")
            dot = name.find(".", slash + 1)
            key, field = name[:dot], name[dot + 1:]
            if not out or out[-1][0] != key:
                out.append((key, {}))
            out[-1][1][field] = tf.extractfile(m).read()
    return out


def _sample_spans(data):
    """The byte size of every sample in a tar written by tarproc (from the
    header offsets tarfile reports)."""
    starts, keys = [], []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        for m in tf:
            key = m.name[: m.name.find(".", m.name.rfind("/") + 1)]
            if not keys or keys[-1] != key:
                keys.append(key)
                starts.append(m.offset)
    return [b - a for a, b in zip(starts, starts[1:] + [len(data) - 1024])]


def _shard_files(tmp_path, pattern):
    return sorted(glob.glob(str(tmp_path / pattern)))


# ------------------------------------------------------------ every mode: shards and index

#: (name, options, shard glob, how the shards are cut)
MODES = [
    ("count prefix", "-n 7 -o out/s", "out/s-*.tar", ("count", 7)),
    ("size printf", "-s 20000 -o 'out/s-%03d.tar'", "out/s-*.tar", ("size", 20000)),
    ("count+size brace start", "-n 5 -s 12000 --start 3 -o 'out/s-{shard:04d}.tar'", "out/s-*.tar",
     ("size", 12000)),
    ("exact", "--shards 4 -o 'out/s-%d.tar'", "out/s-*.tar", ("exact", 4)),
    ("gzip, prefix in a subdirectory", "-z -n 9 -o out/sub/s", "out/sub/s-*.tar.gz", ("count", 9)),
    ("zstd frames", "-n 7 -o 'out/s-%02d.tar.zst' --group-size 8000", "out/s-*.tar.zst", ("count", 7)),
    ("gzip groups by size", "-s 30000 -o 'out/s-%02d.tar.gz' --group-size 5000", "out/s-*.tar.gz",
     ("size", 30000)),
    ("exact zstd", "--shards 3 -o 'out/s-%d.tar.zst' --group-size 4000", "out/s-*.tar.zst", ("exact", 3)),
]


def _index_like_tarindex(index_path, urls, single_group_gzip=False):
    """The index tarsplit wrote equals the one ``index_shards`` (tarindex)
    makes of the same shards, sidecars included (stamps aside: tarsplit
    records none).  A gzip shard of one group is one group in tarsplit's
    seek record, where tarindex, which cannot tell it from any one-stream
    gzip, keeps checkpoints: then the seek records are compared apart."""
    base = os.path.splitext(index_path)[0]
    mine = json.load(open(index_path))
    other = base + ".tarindex.json"
    theirs = tarproc.index_shards(urls, other)
    for e in theirs["shardlist"]:
        for stamp in ("mtime_ns", "etag", "last_modified"):
            e.pop(stamp, None)
    theirs["tarproc_offsets"]["file"] = os.path.basename(base) + ".offsets"
    assert open(base + ".offsets", "rb").read() == open(base + ".tarindex.offsets", "rb").read()
    if single_group_gzip:
        assert {e["seek"]["kind"] for e in theirs["shardlist"]} == {"checkpoints"}
        assert {e["seek"]["kind"] for e in mine["shardlist"]} == {"groups"}
        for index in (mine, theirs):
            index.pop("tarproc_seek")
            for e in index["shardlist"]:
                e.pop("seek")
    elif "tarproc_seek" in theirs:
        theirs["tarproc_seek"]["file"] = os.path.basename(base) + ".seek"
        assert open(base + ".seek", "rb").read() == open(base + ".tarindex.seek", "rb").read()
    assert mine == theirs


@pytest.mark.parametrize("name,options,shard_glob,cut", MODES, ids=[m[0] for m in MODES])
def test_every_mode_cuts_its_shards_and_indexes_them_as_tarindex_does(sh, tmp_path, inputs, name, options,
                                                                     shard_glob, cut):
    # the input written by GNU tar in one mode, by tarproc in the next (the first: both, same shards)
    writers = ["gnu", "tarproc"] if name == MODES[0][0] else [["gnu", "tarproc"][MODES.index(
        next(m for m in MODES if m[0] == name)) % 2]]
    expected = _samples(open(inputs["tarproc"], "rb").read())
    first = None
    for writer in writers:
        path = inputs[writer]
        shutil.rmtree(tmp_path / "out", ignore_errors=True)
        sh(f"mkdir -p {os.path.dirname(shard_glob)} && tarsplit -q {options} --index out/i.json {path}")
        files = _shard_files(tmp_path, shard_glob)
        decoded = [_decoded(f) for f in files]
        shards = [_samples(d) for d in decoded]
        got = [s for shard in shards for s in shard]
        assert got == expected, writer  # the same samples in the same order, whoever wrote the input
        if first is None:
            first = [open(f, "rb").read() for f in files]
        else:  # and the same shards, byte for byte
            assert [open(f, "rb").read() for f in files] == first
        kind, n = cut
        counts = [len(s) for s in shards]
        if kind == "count":
            assert counts == [n] * (len(expected) // n) + ([len(expected) % n] if len(expected) % n else [])
        elif kind == "exact":
            assert len(counts) == n and max(counts) - min(counts) <= 1 and counts == sorted(counts, reverse=True)
        else:  # closed before the sample that would take the shard past n bytes
            for i, d in enumerate(decoded):
                assert len(d) <= n or counts[i] == 1
                if i + 1 < len(decoded):
                    assert len(d) + _sample_spans(decoded[i + 1])[0] > n or counts[i] == 5
        if "--start 3" in options:
            assert os.path.basename(files[0]) == "s-0003.tar"
        # the index reads back sample for sample
        ds = tarproc.IndexedDataset(str(tmp_path / "out" / "i.json"))
        assert len(ds) == len(expected)
        for i in (0, len(ds) // 2, len(ds) - 1):
            s = ds[i]
            assert (s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")}) == expected[i]
        back = ds.get_many(range(len(ds)))
        assert [(s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")}) for s in back] == expected
        single_gzip = name.startswith("gzip, prefix")  # 1 MiB groups: one per shard here
        _index_like_tarindex(str(tmp_path / "out" / "i.json"), files, single_group_gzip=single_gzip)
        if files[0].endswith((".gz", ".zst")):
            index = json.load(open(tmp_path / "out" / "i.json"))
            assert all(e["offsets"] and e["seek"]["kind"] == "groups" and e["filesize"] == os.path.getsize(f)
                       for e, f in zip(index["shardlist"], files))


def _split_of(key, fractions, seed):
    """The split of a key, computed here as docs/tarsplit.md says (BLAKE2b of seed and key)."""
    h = hashlib.blake2b(f"{seed}\0{key}".encode("utf-8", "surrogateescape"), digest_size=8).digest()
    u, acc = int.from_bytes(h, "big") / 2.0 ** 64, 0.0
    for name, frac in fractions:
        acc += frac
        if u < acc:
            return name
    return fractions[-1][0]


def test_fractions_write_one_index_per_split_with_compressed_shards(sh, tmp_path, inputs):
    sh(f"mkdir out && tarsplit -q --fractions 'train=0.6,val=0.3,test=0.1' --seed 4 -n 6 "
       f"-o 'out/{{split}}/p-%02d.tar.zst' "
       f"--group-size 6000 --index 'out/{{split}}.json' --manifest out/m.json {inputs['gnu']}")
    expected = _samples(open(inputs["tarproc"], "rb").read())
    fractions = [("train", 0.6), ("val", 0.3), ("test", 0.1)]
    manifest = json.load(open(tmp_path / "out" / "m.json"))
    seen = 0
    for split, _ in fractions:
        want = [s for s in expected if _split_of(s[0], fractions, 4) == split]
        files = _shard_files(tmp_path, f"out/{split}/p-*.tar.zst")
        assert [s for f in files for s in _samples(_decoded(f))] == want
        assert [m["name"] for m in manifest if m["split"] == split] == [os.path.relpath(f, tmp_path) for f in files]
        ds = tarproc.IndexedDataset(str(tmp_path / "out" / f"{split}.json"))
        assert [(s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")}) for s in ds] == want
        assert [os.path.basename(u) for u in ds.urls] == [os.path.basename(f) for f in files]  # only its split
        _index_like_tarindex(str(tmp_path / "out" / f"{split}.json"), files)
        seen += len(want)
    assert seen == len(expected)


def test_remote_output_index_names_the_urls_and_reads_back_from_the_uploaded_copies(sh, tmp_path, inputs):
    (tmp_path / "bucket").mkdir()
    env = {"TARPROC_WRITE_GS": f"cat > {tmp_path}/bucket/$(basename {{url}})"}
    sh(f"tarsplit -q -n 8 -o 'gs://b/r-%02d.tar.zst' --group-size 9000 --index i.json {inputs['tarproc']}", env=env)
    index = json.load(open(tmp_path / "i.json"))
    files = sorted(os.listdir(tmp_path / "bucket"))
    assert [e["url"] for e in index["shardlist"]] == [f"gs://b/{f}" for f in files]
    for e in index["shardlist"]:  # read where the uploads went
        e["url"] = "bucket/" + e["url"].rsplit("/", 1)[-1]
    with open(tmp_path / "local.json", "w") as f:
        json.dump(index, f)
    shutil.copy(tmp_path / "i.offsets", tmp_path / "local.offsets")
    ds = tarproc.IndexedDataset(str(tmp_path / "local.json"))
    expected = _samples(open(inputs["tarproc"], "rb").read())
    assert [(s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")}) for s in ds] == expected
    assert all(e["seek"]["kind"] == "groups" for e in index["shardlist"])


def test_counts_only_where_the_writer_has_no_groups(sh, tmp_path, inputs):
    """One-stream gzip (--group-size 0) and xz shards: their index has the
    counts (as tarindex has for xz), and a one-line warning says so."""
    p = sh(f"mkdir out && tarsplit -n 20 -o 'out/x-%d.tar.xz' --index out/x.json {inputs['tarproc']}",
           stderr_ok=True)
    err = p.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "sample counts only" in err[0], err
    index = json.load(open(tmp_path / "out" / "x.json"))
    assert [e["offsets"] for e in index["shardlist"]] == [False, False, False]
    assert sum(e["nsamples"] for e in index["shardlist"]) == 41 and "tarproc_offsets" not in index
    p = sh(f"tarsplit -n 20 -z --group-size 0 -o out/z --index out/z.json {inputs['tarproc']}", stderr_ok=True)
    assert b"sample counts only" in p.stderr
    assert not (tmp_path / "out" / "z.seek").exists()


# ------------------------------------------------------------ failure in the middle


def _whole(path):
    """A shard is whole: its archive (decoded) reads to its end marker."""
    data = _decoded(path)
    assert data.endswith(b"\0" * 1024) and len(data) % 512 == 0, path
    _samples(data)  # tarfile reads every member
    return data


def _no_index(tmp_path, base):
    return not any(os.path.exists(tmp_path / f"{base}{ext}") for ext in (".json", ".offsets", ".seek"))


def test_a_post_command_failing_midway_leaves_whole_shards_and_no_index(sh, tmp_path, inputs):
    p = sh(f"tarsplit -n 6 -o 'k-%02d.tar.zst' -p 'test {{index}} -lt 2' --index k.json --manifest m.json "
           f"{inputs['tarproc']}", ok=False)
    assert p.returncode == 1 and b"k-02.tar.zst" in p.stderr and len(p.stderr.splitlines()) == 1
    files = _shard_files(tmp_path, "k-*.tar.zst")
    assert [os.path.basename(f) for f in files] == ["k-00.tar.zst", "k-01.tar.zst", "k-02.tar.zst"]
    for f in files:
        _whole(f)
    assert _no_index(tmp_path, "k")
    assert [m["name"] for m in json.load(open(tmp_path / "m.json"))] == ["k-00.tar.zst", "k-01.tar.zst"]
    assert not [f for f in os.listdir(tmp_path) if "partial" in f]


def test_a_full_disk_midway_leaves_whole_shards_and_no_index(sh, tmp_path):
    # a file may not grow past 48 KiB (ulimit -f; the write fails with EFBIG as a full disk fails
    # with ENOSPC): the third shard holds a 100 KiB sample
    import random

    members = []
    for i in range(15):
        body = random.Random(i).randbytes(100_000) if i == 11 else (b"%d" % i) * 100  # (incompressible)
        members += [(f"{i:03d}.txt", body), (f"{i:03d}.cls", b"1")]
    (tmp_path / "in.tar").write_bytes(tar_bytes(members))
    for out in ("'f-%02d.tar'", "'g-%02d.tar.gz'"):
        p = sh(f"ulimit -f 48 && tarsplit -n 4 -o {out} --index {out[1]}.json in.tar", ok=False)
        assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, p.stderr
        assert p.stderr.startswith(f"tarsplit: {out[1]}-02.tar".encode()) and b"write failed" in p.stderr, p.stderr
        files = _shard_files(tmp_path, out[1] + "-*")
        assert [os.path.basename(f)[:4] for f in files] == [f"{out[1]}-00", f"{out[1]}-01"]
        for k, f in enumerate(files):
            assert [key for key, _ in _samples(_whole(f))] == [f"{i:03d}" for i in range(4 * k, 4 * k + 4)]
        assert _no_index(tmp_path, out[1])
        assert not [f for f in os.listdir(tmp_path) if "partial" in f]


def test_sigterm_midway_leaves_whole_shards_and_no_index(tmp_path):
    split = subprocess.Popen(["tarsplit", "-q", "-n", "5", "-o", "t-%03d.tar.zst", "--group-size", "2000",
                              "--index", "t.json"], cwd=tmp_path, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        i = 0
        deadline = time.time() + 60
        while len(_shard_files(tmp_path, "t-*.tar.zst")) < 3 and time.time() < deadline:
            split.stdin.write(tar_bytes([(f"{i:06d}.txt", b"x" * 700)])[:-1024])  # no end marker: one stream
            split.stdin.flush()
            i += 1
            time.sleep(0.002)
        split.send_signal(signal.SIGTERM)
        split.wait(timeout=30)
    finally:
        split.kill()
        split.stdin.close()
        err = split.stderr.read()
        split.stderr.close()
    assert split.returncode != 0, err
    files = _shard_files(tmp_path, "t-*.tar.zst")
    assert len(files) >= 3
    for k, f in enumerate(files):
        assert [key for key, _ in _samples(_whole(f))] == [f"{j:06d}" for j in range(5 * k, 5 * k + 5)]
    assert _no_index(tmp_path, "t")
    assert not [f for f in os.listdir(tmp_path) if "partial" in f]


# ------------------------------------------------------------ the library: one rotator, its seams


def test_split_samples_index_in_the_library(tmp_path):
    samples = [{"__key__": f"{i:04d}", "txt": b"%d" % i * (i * 37 % 700)} for i in range(60)]
    shards = list(tarproc.split_samples(samples, str(tmp_path / "l-%d.tar.zst"), max_count=25, index=True,
                                        group_size=3000))
    assert [s.samples for s in shards] == [25, 25, 10] and all(s.info.seek is not None for s in shards)
    from tarproc.sinks.index import write_shard_index

    write_shard_index([s.info for s in shards], str(tmp_path / "l.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "l.json"))
    assert [ds[i]["txt"] for i in range(60)] == [s["txt"] for s in samples]
    # without index: counts only, no per-sample lists kept in memory
    plain = list(tarproc.split_samples(samples, str(tmp_path / "m-%d.tar"), max_count=25))
    assert [s.info.nsamples for s in plain] == [25, 25, 10] and not any(s.info.has_offsets for s in plain)


def _imports(path):
    """The tarproc modules a module imports (at its top or inside functions), and the names it takes."""
    tree = ast.parse(open(path).read())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            out.append((node.module or "", [a.name for a in node.names]))
    return tree, out


def test_no_import_circle_between_split_index_and_scan():
    deps = {}
    for name in ("split", "index", "scan", "grouped"):
        _, imports = _imports(os.path.join(SINKS, name + ".py"))
        deps[name] = {m for m, _ in imports if m in ("split", "index", "scan", "grouped")}
    assert "split" not in deps["index"] and "split" not in deps["scan"] and "index" not in deps["scan"], deps


def test_no_private_names_imported_and_no_module_state_in_the_rotator_modules():
    for path in [os.path.join(SINKS, n + ".py") for n in ("split", "index", "scan", "grouped")] + \
            [os.path.join(os.path.dirname(SINKS), "cli", n + ".py") for n in ("tarsplit", "tarindex")]:
        tree, imports = _imports(path)
        assert not [(m, n) for m, names in imports for n in names if n.startswith("_")], path
    tree, _ = _imports(os.path.join(SINKS, "split.py"))
    for node in tree.body:  # module level: no set/dict/list to fill at run time (a pattern cache was one)
        if isinstance(node, ast.Assign):
            assert not isinstance(node.value, (ast.Set, ast.Dict, ast.List, ast.ListComp, ast.SetComp, ast.DictComp)), \
                ast.unparse(node)
            if isinstance(node.value, ast.Call):
                assert ast.unparse(node.value.func) not in ("set", "dict", "list"), ast.unparse(node)


def test_a_bad_pattern_is_refused_before_any_input_is_read(sh, tmp_path):
    for pattern in ("x-%.1s.tar", "x-{nope}.tar", "x.tar%%"):
        p = sh(f"tarsplit -n 2 -o '{pattern}' < /dev/null", ok=False)
        assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, (pattern, p.stderr)
    assert os.listdir(tmp_path) == []


def test_an_index_sidecar_that_would_replace_an_input_is_refused(sh, tmp_path):
    """The offsets and seek sidecars are outputs too: refused (exit 2) before
    anything is written when one of them is an input, by tarsplit and tarindex."""
    data = tar_bytes([("000.txt", b"a"), ("001.txt", b"b")])
    for name in ("i.offsets", "i.seek"):
        (tmp_path / name).write_bytes(data)
        for cmd in (f"tarsplit -n 1 -o s --index i.json {name}", f"tarindex {name} -o i.json"):
            p = sh(cmd, ok=False)
            assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and name.encode() in p.stderr, cmd
            assert (tmp_path / name).read_bytes() == data and not (tmp_path / "i.json").exists()
            assert not list(tmp_path.glob("s-*"))
