"""Indexes at dataset scale, in small sizes (the scale itself is in
bench/bench_index_scale.py): per-shard sidecars and the key table
(``IndexedDataset.index_of``), the one-file sidecar of older indexes, damaged
sidecars (every byte flipped), bounded caches of sidecars, and the one rule
by which an index names its shards (on stdout, through symbolic links both
ways), read by IndexedDataset and by wids."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

import tarproc
from tarproc.sinks import keytable
from tarproc.sources import sidecars


def _shards(d, counts, prefix="k"):
    names = []
    for s, n in enumerate(counts):
        name = f"s{s}.tar"
        tarproc.write_samples(str(d / name), ({"__key__": f"{prefix}{s}-{i:03d}", "txt": b"%d.%d" % (s, i)}
                                              for i in range(n)))
        names.append(name)
    return names


def _keys(ds):
    return [ds.key(i) for i in range(len(ds))]


# ------------------------------------------------------------ the key table


def test_index_of_finds_every_key_spilled_or_not_and_positions_count_every_shard(tmp_path, monkeypatch):
    """index_of gives the dataset position of a key, counting the shards
    without offsets before it (an xz shard), from the key table; a table
    built through spill files (a buffer of 7 records, 3 shards read at once)
    is the same bytes as one built in memory, and its spill files are gone."""
    names = _shards(tmp_path, [30, 0, 45, 17])
    tarproc.write_samples(str(tmp_path / "x.tar"), ({"__key__": f"x{i}", "txt": b"x"} for i in range(5)))
    subprocess.run(f"xz -c {tmp_path / 'x.tar'} > {tmp_path / 'x.tar.xz'}", shell=True, check=True)
    urls = [str(tmp_path / n) for n in names[:2]] + [str(tmp_path / "x.tar.xz")] + [str(tmp_path / n)
                                                                                      for n in names[2:]]
    tarproc.index_shards(urls, str(tmp_path / "mem.json"))
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(keytable, "BUFFER", 7)
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    tarproc.index_shards(urls, str(tmp_path / "spilled.json"), parallel=3)
    assert os.listdir(spill) == []
    assert (tmp_path / "mem.keys").read_bytes() == (tmp_path / "spilled.keys").read_bytes()
    ds = tarproc.IndexedDataset(str(tmp_path / "spilled.json"))
    assert len(ds) == 30 + 0 + 5 + 45 + 17
    keys = {ds.key(i): i for i in range(len(ds)) if not 30 <= i < 35}
    assert [ds.index_of(k) for k in keys] == list(keys.values())
    assert ds.index_of("k2-000") == 35 and ds[ds.index_of("k3-016")]["txt"] == b"3.16"
    with pytest.raises(KeyError):
        ds.index_of("x0")  # the xz shard has counts only: no keys
    with pytest.raises(KeyError):
        ds.index_of("k2-045")
    part = ds[40:60]
    assert part.index_of("k2-010") == 5 and part[5]["__key__"] == "k2-010"
    with pytest.raises(KeyError):
        part.index_of("k0-000")


def test_a_key_twice_is_found_at_its_first_place(tmp_path):
    for name in ("a.tar", "b.tar"):
        tarproc.write_samples(str(tmp_path / name), ({"__key__": f"{i:02d}", "txt": name.encode()} for i in range(4)))
    tarproc.index_shards([str(tmp_path / "a.tar"), str(tmp_path / "b.tar")], str(tmp_path / "i.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"))
    assert [ds.index_of(f"{i:02d}") for i in range(4)] == [0, 1, 2, 3] and ds[4:].index_of("02") == 2


# ------------------------------------------------------------ the one-file sidecar of older indexes

# made by tarproc 5563425 (before per-shard sidecars): index_shards of a.tar (a000..a004) and b.tar (b000..b002)
OLD_SIDECAR = bytes.fromhex(
    "54415250524f432d4f4646534554533108000000000000002800000000000000000000000000000000040000000000000008"
    "000000000000000c0000000000000010000000000000000000000000000000040000000000000008000000000000613030300a"
    "613030310a613030320a613030330a613030340a623030300a623030310a623030320a")
OLD_INDEX = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": [
    {"url": "a.tar", "nsamples": 5, "filesize": 6144, "compression": None, "offsets": True, "first": 0, "end": 5120},
    {"url": "b.tar", "nsamples": 3, "filesize": 4096, "compression": None, "offsets": True, "first": 5, "end": 3072}],
    "tarproc_offsets": {"file": "index.offsets", "samples": 8, "bytes": 136}}


def test_an_index_with_the_older_one_file_sidecar_still_reads(tmp_path):
    import hashlib

    tarproc.write_samples(str(tmp_path / "a.tar"), ({"__key__": f"a{i:03d}", "txt": b"A%d" % i} for i in range(5)))
    tarproc.write_samples(str(tmp_path / "b.tar"), ({"__key__": f"b{i:03d}", "txt": b"B%d" % i} for i in range(3)))
    assert hashlib.sha256((tmp_path / "a.tar").read_bytes()).hexdigest().startswith("e71a5a0897a76637")
    (tmp_path / "index.offsets").write_bytes(OLD_SIDECAR)
    (tmp_path / "index.json").write_text(json.dumps(OLD_INDEX))
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    want = [f"a{i:03d}" for i in range(5)] + [f"b{i:03d}" for i in range(3)]
    assert len(ds) == 8 and _keys(ds) == want and [s["__key__"] for s in ds] == want
    assert ds[6]["txt"] == b"B1" and [s["txt"] for s in ds.get_many([7, 0])] == [b"B2", b"A0"]
    assert ds.index_of("b002") == 7 and ds.index_of("a000") == 0
    with pytest.raises(KeyError):
        ds.index_of("c000")


# ------------------------------------------------------------ damaged sidecars


def test_every_byte_of_a_sidecar_or_key_table_flipped_gives_an_error_or_the_right_answer(tmp_path):
    """Each byte of each shard's sidecar and of the key table, flipped in
    turn: every ds[i] is the right sample or one BadInput, every index_of
    the right position, a BadInput or a KeyError; never a wrong sample,
    another exception or a huge allocation."""
    _shards(tmp_path, [3, 4])
    tarproc.index_shards([str(tmp_path / "s0.tar"), str(tmp_path / "s1.tar")], str(tmp_path / "i.json"))
    good = list(tarproc.IndexedDataset(str(tmp_path / "i.json")))
    keys = [s["__key__"] for s in good]
    files = [tmp_path / "i.offsets.d" / "000000.offsets", tmp_path / "i.offsets.d" / "000001.offsets",
             tmp_path / "i.keys"]
    errors = right = 0
    for path in files:
        data = path.read_bytes()
        for at in range(len(data)):
            path.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:])
            ds = tarproc.IndexedDataset(str(tmp_path / "i.json"))
            for i, want in enumerate(good):
                try:
                    got = ds[i]
                except tarproc.BadInput as e:
                    assert "\n" not in str(e)
                    errors += 1
                    continue
                assert got == want, (path.name, at, i)
                right += 1
            for i, key in enumerate(keys):
                try:
                    assert ds.index_of(key) == i, (path.name, at, key)
                except (tarproc.BadInput, KeyError):
                    errors += 1
        path.write_bytes(data)
    assert errors and right


def test_a_sidecar_that_claims_huge_counts_or_offsets_is_one_error(tmp_path):
    import struct

    _shards(tmp_path, [3])
    tarproc.index_shards([str(tmp_path / "s0.tar")], str(tmp_path / "i.json"))
    side = tmp_path / "i.offsets.d" / "000000.offsets"
    data = side.read_bytes()
    huge = bytearray(data)
    struct.pack_into("<Q", huge, 16, 1 << 60)  # the count
    side.write_bytes(huge)
    with pytest.raises(tarproc.BadInput, match="000000.offsets: not this index's offsets file"):
        tarproc.IndexedDataset(str(tmp_path / "i.json"))[0]
    huge = bytearray(data)
    struct.pack_into("<Q", huge, 32 + 8, 1 << 50)  # sample 1 starts at 1 PiB
    side.write_bytes(huge)
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"))
    with pytest.raises(tarproc.BadInput, match=r"sample 0 .* the index gives bytes 0-1125899906842624: a damaged"):
        ds[0]
    huge = bytearray(data)
    struct.pack_into("<I", huge, 32 + 24, 1 << 31)  # key 0 ends 2 GiB into the keys
    side.write_bytes(huge)
    with pytest.raises(tarproc.BadInput, match="key 0 runs from byte 0 to 2147483648 of 18: a damaged index"):
        tarproc.IndexedDataset(str(tmp_path / "i.json"))[0]


# ------------------------------------------------------------ bounded caches


def test_mapped_sidecars_and_fetched_ones_stay_within_their_bounds(tmp_path, monkeypatch):
    """40 local shards read in turn: at most OPEN sidecars open (a
    descriptor each); the same index read as gs:// (a stand-in client
    serving the directory): at most CACHE_COUNT sidecars, CACHE_BYTES bytes."""
    names = _shards(tmp_path, [2] * 40)
    tarproc.index_shards([str(tmp_path / n) for n in names], str(tmp_path / "i.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"))
    fds = len(os.listdir("/proc/self/fd"))
    seen = []
    for i in range(len(ds)):
        seen.append(ds[i]["txt"])
        assert len(ds.index.sidecars.tables) <= sidecars.OPEN
    assert seen == [b"%d.%d" % (s, i) for s in range(40) for i in range(2)]
    ds.close()
    assert len(os.listdir("/proc/self/fd")) <= fds + sidecars.OPEN
    monkeypatch.setattr(sidecars, "CACHE_COUNT", 3)
    monkeypatch.setattr(sidecars, "CACHE_BYTES", 400)
    monkeypatch.setenv("TARPROC_READ_GS", f"u={{url}}; cat \"{tmp_path}/${{u#gs://b/}}\"")
    monkeypatch.setenv("TARPROC_RANGE_GS", f"u={{url}}; p=\"{tmp_path}/${{u#gs://b/}}\"; "
                                           "tail -c +$(({start} + 1)) \"$p\" | head -c $(({end} - {start} + 1))")
    ds = tarproc.IndexedDataset("gs://b/i.json")
    held = []
    for i in (0, 20, 41, 79, 3, 60):
        assert ds[i]["txt"] == b"%d.%d" % (i // 2, i % 2)
        held.append(len(ds.index.sidecars.tables))
        assert ds.index.sidecars.held <= 400 or len(ds.index.sidecars.tables) == 1
    assert max(held) <= 3 and ds.index_of("k33-001") == 67


# ------------------------------------------------------------ names: stdout, symbolic links, wids

WIDS_KEYS = r"""
import json, sys
import wids
out = {}
for path in sys.argv[1:]:
    ds = wids.ShardListDataset(path, cache_dir=path + ".cache", transformations=[])
    out[path] = [ds[i]["__key__"] for i in range(len(ds))]
print(json.dumps(out))
"""


def _wids_keys(cwd, paths):
    p = subprocess.run([sys.executable, "-c", WIDS_KEYS, *paths], capture_output=True, cwd=cwd, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def test_index_names_are_found_on_stdout_and_through_links_both_ways(sh, tmp_path):
    """An index on stdout names its shards by absolute paths (readers resolve
    a relative name against the index's directory, which stdout does not
    have); an index written through a symbolic link to its directory, and
    one of shards reached through a link, name them so that IndexedDataset
    and wids find them from the link and from the real directory."""
    (tmp_path / "shuf").mkdir()
    _shards(tmp_path / "shuf", [3, 2])
    want = ["k0-000", "k0-001", "k0-002", "k1-000", "k1-001"]
    # stdout (issue: shuf/counts.json named shuf/s0.tar, found as shuf/shuf/s0.tar)
    sh("tarindex -q shuf/s*.tar > shuf/counts.json")
    counts = json.loads((tmp_path / "shuf" / "counts.json").read_text())
    assert [e["url"] for e in counts["shardlist"]] == [str(tmp_path / "shuf" / f"s{i}.tar") for i in range(2)]
    ds = tarproc.IndexedDataset(str(tmp_path / "shuf" / "counts.json"))
    assert [s["__key__"] for s in tarproc.iter_samples(ds.urls)] == want
    # the index in a linked directory: link -> real/sub, the shards in shuf/ (beside link, not beside real/sub)
    sh("mkdir -p real/sub && ln -s real/sub link && tarindex -q shuf/s0.tar shuf/s1.tar -o link/index.json")
    linked = json.loads((tmp_path / "real" / "sub" / "index.json").read_text())
    assert [e["url"] for e in linked["shardlist"]] == [str(tmp_path / "shuf" / f"s{i}.tar") for i in range(2)]
    assert linked["tarproc_offsets"]["dir"] == "index.offsets.d"
    # the shards through a link: data -> shuf, the index beside it: a relative name that leads there both ways
    sh("ln -s shuf data && mkdir idx && tarindex -q data/s0.tar data/s1.tar -o idx/index.json")
    beside = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert [e["url"] for e in beside["shardlist"]] == ["../data/s0.tar", "../data/s1.tar"]
    # and the index behind a link with its shards in its real directory: relative to it
    sh("cp shuf/s0.tar shuf/s1.tar real/sub/ && tarindex -q link/s0.tar link/s1.tar -o link/here.json")
    here = json.loads((tmp_path / "real" / "sub" / "here.json").read_text())
    assert [e["url"] for e in here["shardlist"]] == ["s0.tar", "s1.tar"]
    paths = ["link/index.json", "real/sub/index.json", "idx/index.json", "link/here.json", "real/sub/here.json",
             "shuf/counts.json"]
    for cwd in (tmp_path, tmp_path / "real"):
        for path in paths:
            ds = tarproc.IndexedDataset(os.path.join(os.path.relpath(tmp_path, cwd), path) if cwd != tmp_path
                                        else path)
            old = os.getcwd()
            os.chdir(cwd)
            try:
                assert [s["__key__"] for s in tarproc.iter_samples(ds.urls)] == want, path
                if path != "shuf/counts.json":
                    assert [s["__key__"] for s in ds] == want and ds.index_of("k1-001") == 4, path
            finally:
                os.chdir(old)
    got = _wids_keys(tmp_path, paths)
    assert all(got[p] == want for p in paths), got


def test_a_failed_run_leaves_the_previous_index_whole(sh, tmp_path):
    """Each shard's sidecar is written as its shard is read, into a directory
    of this run's own that replaces the previous one only when every shard
    was read: a run that fails on its third shard leaves the previous index
    and its sidecars as they were, and nothing of its own."""
    _shards(tmp_path, [4, 5, 6])
    sh("tarindex -q s0.tar s1.tar s2.tar -o i.json")
    before = {f: (tmp_path / "i.offsets.d" / f).read_bytes() for f in os.listdir(tmp_path / "i.offsets.d")}
    good = list(tarproc.IndexedDataset(str(tmp_path / "i.json")))
    _shards(tmp_path, [7, 8], prefix="new")  # s0 and s1 change; s2 becomes damaged
    (tmp_path / "s2.tar").write_bytes(b"\xff" * 1024)
    p = sh("tarindex -q s0.tar s1.tar s2.tar -o i.json", ok=False)
    assert p.returncode == 2 and b"s2.tar" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["i.json", "i.keys", "i.offsets.d", "s0.tar", "s1.tar", "s2.tar"]
    assert {f: (tmp_path / "i.offsets.d" / f).read_bytes() for f in os.listdir(tmp_path / "i.offsets.d")} == before
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"), verify="none")
    assert [ds.key(i) for i in range(len(ds))] == [s["__key__"] for s in good] and ds.index_of("k2-005") == 14
    # and a run that succeeds replaces them
    _shards(tmp_path, [7, 8, 1], prefix="new")
    sh("tarindex -q s0.tar s1.tar s2.tar -o i.json")
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"))
    assert len(ds) == 16 and ds[15]["__key__"] == "new2-000" and ds.index_of("new1-007") == 14
    assert sorted(os.listdir(tmp_path / "i.offsets.d")) == ["000000.offsets", "000001.offsets", "000002.offsets"]


def test_many_shards_index_under_a_small_descriptor_limit(sh, tmp_path):
    """A sidecar per shard, 4 shards read at once: 120 shards index under
    ``ulimit -n 48`` (no descriptor is held per shard written)."""
    _shards(tmp_path, [2] * 120)
    sh("ulimit -n 48 && tarindex -q -p 4 s*.tar -o i.json")
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"))
    assert len(os.listdir(tmp_path / "i.offsets.d")) == 120 and len(ds) == 240
    assert ds[ds.index_of("k119-001")]["txt"] == b"119.1" and ds.locate(ds.index_of("k7-000"))[1] == 0
