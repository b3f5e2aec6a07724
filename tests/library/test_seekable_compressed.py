"""Compressed shards with random access (tarproc/sinks/grouped.py,
tarproc/sources/seekable.py): what tarproc writes as .tar.gz/.tar.zst is read
whole by gzip, zstd, GNU tar, bsdtar, tarfile and webdataset, and one sample
of it by IndexedDataset (locally and over HTTP, reading a bounded number of
bytes); one-stream gzip from gzip/GNU tar goes through checkpoints; a shard
changed after indexing is one clear error."""

import http.server
import json
import random
import subprocess
import tarfile
import threading

import pytest

import tarproc
from conftest import require

GROUP = 64 << 10  # small groups: many of them in a small shard


def _samples(n, seed=0):
    r = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon"]
    for i in range(n):
        yield {
            "__key__": f"s/{i:05d}",
            "jpg": r.randbytes(r.randrange(1000, 12000)),  # incompressible, like JPEG data
            "txt": b" ".join(r.choice(words) for _ in range(r.randrange(10, 800))),
            "cls": b"%d" % (i % 10),
        }


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("seekable")
    tarproc.write_samples(str(d / "p.tar"), _samples(400))
    for ext in ("tar.gz", "tar.zst"):
        subprocess.run(["tarcat", "--group-size", str(GROUP), "p.tar", "-o", f"g.{ext}"], cwd=d, check=True)
    require("gzip")
    subprocess.run("gzip -c p.tar > one.tar.gz", shell=True, cwd=d, check=True)  # one stream, by others
    return d


def _clean(sample):
    return {k: v for k, v in sample.items() if k != "__source__"}


def _same(ds, urls):
    seq = list(tarproc.iter_samples(urls))
    assert len(ds) == len(seq)
    return seq


# ------------------------------------------------------------ every reader reads them whole


def test_written_shards_read_whole_by_every_reader(data):
    plain = (data / "p.tar").read_bytes()
    require("zstd"), require("bsdtar"), require("tar")
    assert subprocess.run(["gzip", "-dc", "g.tar.gz"], cwd=data, capture_output=True, check=True).stdout == plain
    assert subprocess.run(["zstd", "-dcq", "g.tar.zst"], cwd=data, capture_output=True, check=True).stdout == plain
    names = tarfile.open(data / "p.tar").getnames()
    assert len(names) == 1200
    for cmd in (["tar", "-tzf", "g.tar.gz"], ["tar", "--zstd", "-tf", "g.tar.zst"], ["bsdtar", "-tf", "g.tar.gz"],
                ["bsdtar", "-tf", "g.tar.zst"]):
        out = subprocess.run(cmd, cwd=data, capture_output=True, check=True)
        assert out.stdout.decode().split("\n")[:-1] == names, cmd
        assert not out.stderr, (cmd, out.stderr)  # no "trailing garbage" or skipped-frame warnings
    # one gzip member: tarfile's stream mode (and so webdataset) reads past the first group
    for mode in ("r|gz", "r:gz"):
        with tarfile.open(data / "g.tar.gz", mode) as tf:
            assert [m.name for m in tf] == names, mode
    import webdataset as wds

    for url in (str(data / "g.tar.gz"), f"pipe:zstd -dcq {data / 'g.tar.zst'}"):
        got = [s["__key__"] for s in wds.WebDataset(url, shardshuffle=False, empty_check=False)]
        assert got == [f"s/{i:05d}" for i in range(400)], url
    for ext in ("tar.gz", "tar.zst"):
        assert [_clean(s) for s in tarproc.iter_samples(str(data / f"g.{ext}"))] == list(_samples(400))
    # and they are cut into groups: several zstd frames, and a seek table that zstd itself lists
    listing = subprocess.run(["zstd", "-lv", "g.tar.zst"], cwd=data, capture_output=True, text=True).stdout
    frames = int(next(line.split()[-1] for line in listing.splitlines() if "# Zstandard Frames" in line))
    assert frames > 10 and "# Skippable Frames: 1" in listing, listing


def test_same_input_same_bytes_and_group_size_zero_is_one_stream(data, tmp_path):
    for ext in ("tar.gz", "tar.zst"):
        subprocess.run(["tarcat", "--group-size", str(GROUP), str(data / "p.tar"), "-o", f"again.{ext}"],
                       cwd=tmp_path, check=True)
        assert (tmp_path / f"again.{ext}").read_bytes() == (data / f"g.{ext}").read_bytes(), ext
    subprocess.run(["tarcat", "--group-size", "0", str(data / "p.tar"), "-o", "one.tar.gz"], cwd=tmp_path, check=True)
    subprocess.run(["tarcat", "--group-size", "0", str(data / "p.tar"), "-o", "one.tar.zst"], cwd=tmp_path,
                   check=True)
    index = tarproc.index_shards([str(tmp_path / "one.tar.gz"), str(tmp_path / "one.tar.zst"),
                                  str(data / "g.tar.gz"), str(data / "g.tar.zst")], str(tmp_path / "i.json"))
    kinds = [e.get("seek", {}).get("kind") for e in index["shardlist"]]
    assert kinds == ["checkpoints", "groups", "groups", "groups"]  # a small one-frame zstd: one group
    # the default groups: 1 MiB of tar
    subprocess.run(["tarcat", str(data / "p.tar"), "-o", "d.tar.gz"], cwd=tmp_path, check=True)
    rec = tarproc.index_shards([str(tmp_path / "d.tar.gz")], str(tmp_path / "d.json"))["shardlist"][0]["seek"]
    ngroups = (rec["bytes"] - 17) // 28
    mib = (data / "p.tar").stat().st_size / (1 << 20)
    assert mib <= ngroups <= mib + 2, (ngroups, mib)


def test_group_size_is_a_knob_of_every_writing_command(sh):
    for cmd in ("tarcat", "tarproc", "tarsort", "tarmix", "lines2tar", "tarpcat", "tarsplit", "tarcreate"):
        assert "--group-size" in sh(f"{cmd} --help").stdout.decode(), cmd
    p = sh("tarcat --group-size lots - -o x.tar.gz < /dev/null", ok=False)
    assert p.returncode == 2 and p.stderr.decode().count("\n") == 1 and "--group-size lots" in p.stderr.decode()


# ------------------------------------------------------------ random access


def test_indexed_dataset_reads_one_group_of_our_shards_and_checkpoints_of_others(data, tmp_path):
    require("tar")
    subprocess.run(["tar", "-czf", str(tmp_path / "gnu.tar.gz"), "-C", str(data), "p.tar"], check=True)
    subprocess.run(["tar", "-cf", str(tmp_path / "members.tar"), "-C", str(data), "p.tar"], check=True)
    urls = [str(data / "g.tar.gz"), str(data / "g.tar.zst"), str(data / "one.tar.gz")]
    index = tarproc.index_shards(urls, str(tmp_path / "index.json"))
    assert [e["seek"]["kind"] for e in index["shardlist"]] == ["groups", "groups", "checkpoints"]
    assert all(e["offsets"] and e["filesize"] == (data / e["url"].rsplit("/", 1)[-1]).stat().st_size
               for e in index["shardlist"])
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    seq = _same(ds, urls)
    for i in list(range(0, len(ds), 13)) + [0, 399, 400, 799, 800, len(ds) - 1]:
        assert ds[i] == seq[i], i
    # threads at once, and a forked child (a DataLoader worker) after the parent read: same samples
    from concurrent.futures import ThreadPoolExecutor

    picks = [5, 405, 805, 399, 799, 1199] * 4
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(ds.__getitem__, picks)) == [seq[i] for i in picks]
    import os
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, send, leave at once
        try:
            os.write(w, pickle.dumps([ds[i] for i in (7, 407, 807)]))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        child = pickle.loads(f.read())
    os.waitpid(pid, 0)
    assert child == [seq[i] for i in (7, 407, 807)]
    # a one-stream gzip of GNU tar (a tar of a tar: its one sample is the inner tar, 2 MB)
    tarproc.index_shards([str(tmp_path / "gnu.tar.gz")], str(tmp_path / "gnu.json"))
    gnu = tarproc.IndexedDataset(str(tmp_path / "gnu.json"))
    assert gnu[0]["tar"] == (data / "p.tar").read_bytes()


class CountingRanges(http.server.SimpleHTTPRequestHandler):
    served = None  # a list per server: bytes of every answer

    def log_message(self, *args):
        pass

    def do_GET(self):
        try:
            whole = open(self.translate_path(self.path), "rb").read()
        except OSError:
            self.send_error(404)
            return
        rng = self.headers.get("Range")
        if rng:
            a, b = (int(x) for x in rng.split("=", 1)[1].split("-"))
            body = whole[a:b + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{a + len(body) - 1}/{len(whole)}")
        else:
            body = whole
            self.send_response(200)
        self.served.append(len(body))  # before the answer: the test looks as soon as it has it
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server(data):
    require("curl")
    handler = type("H", (CountingRanges,), {"served": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(data)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", handler.served
    srv.shutdown()
    srv.server_close()


def test_over_http_one_access_reads_one_group(data, server, tmp_path):
    url, served = server
    urls = [f"{url}/g.tar.gz", f"{url}/g.tar.zst", f"{url}/one.tar.gz"]
    subprocess.run(["tarindex", "--checkpoint-spacing", "256k", *urls, "-o", str(tmp_path / "index.json")],
                   check=True)
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    seq = _same(ds, urls)
    sizes = [(data / n).stat().st_size for n in ("g.tar.gz", "g.tar.zst", "one.tar.gz")]
    for i, limit in ((123, 2 * GROUP), (523, 2 * GROUP), (923, 3 * (256 << 10))):
        served.clear()
        assert ds[i] == seq[i]
        assert len(served) == 1 and served[0] <= limit, (i, served)  # one range request, of one group
        assert served[0] < sizes[i // 400] / 3, (i, served)


# ------------------------------------------------------------ hostile


def _one_line_error(ds, i, match):
    with pytest.raises(tarproc.BadInput, match=match) as e:
        ds[i]
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["g.tar.gz", "g.tar.zst", "one.tar.gz"])
def test_a_changed_shard_is_one_clear_error_never_wrong_data(data, tmp_path, name):
    shard = tmp_path / name
    good = (data / name).read_bytes()
    shard.write_bytes(good)
    tarproc.index_shards([str(shard)], str(tmp_path / "index.json"), checkpoint_spacing=256 << 10)
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    right = ds[200]
    # one byte changed inside the compressed bytes of sample 200's group: same size
    table = json.loads((tmp_path / "index.json").read_text())["shardlist"][0]
    assert table["seek"]
    for pos in (len(good) // 2, len(good) // 2 + 1000):
        bad = bytearray(good)
        bad[pos] ^= 0x55
        shard.write_bytes(bytes(bad))
        # verify="size": past the stamp check (the mtime names any rewrite), to the CRC-32 of the groups
        ds = tarproc.IndexedDataset(str(tmp_path / "index.json"), verify="size")
        got = []
        for i in range(190, 215):
            try:
                got.append((i, ds[i]))
            except tarproc.BadInput as e:
                assert "\n" not in str(e) and name in str(e) and ("changed" in str(e) or "damaged" in str(e)), e
        assert len(got) < 25  # some sample reads the changed group
        ref = list(tarproc.iter_samples(str(data / name)))
        assert all(s == {**ref[i], "__source__": s["__source__"]} for i, s in got)  # the others are right
    # shorter: one error naming the size
    shard.write_bytes(good[:-100])
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    _one_line_error(ds, 399, "changed since")
    shard.write_bytes(good)
    assert tarproc.IndexedDataset(str(tmp_path / "index.json"), verify="size")[200] == right


def test_one_frame_zstd_and_xz_get_counts_and_a_one_line_refusal(tmp_path):
    require("zstd"), require("xz")
    big = tmp_path / "big.tar"
    tarproc.write_samples(str(big), ({"__key__": f"{i:04d}", "bin": bytes(100_000)} for i in range(100)))
    subprocess.run(["zstd", "-q", "big.tar", "-o", "big.tar.zst"], cwd=tmp_path, check=True)  # one frame, 10 MB
    subprocess.run("xz -c big.tar > big.tar.xz", shell=True, cwd=tmp_path, check=True)
    p = subprocess.run(["tarindex", "big.tar.zst", "big.tar.xz", "-o", "index.json"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "big.tar.zst: zstd-compressed in one frame: counted only (100 samples)" in p.stderr, p.stderr
    assert "big.tar.xz: xz-compressed: counted only (100 samples)" in p.stderr, p.stderr
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    assert len(ds) == 200
    for i, codec in ((5, "zstd"), (105, "xz")):
        _one_line_error(ds, i, f"{codec}-compressed: the index has only its sample count .*tarcat IN -o OUT.tar.zst")
    # rewritten by tarcat: frames, and random access
    subprocess.run(["tarcat", "big.tar.zst", "-o", "framed.tar.zst"], cwd=tmp_path, check=True)
    tarproc.index_shards([str(tmp_path / "framed.tar.zst")], str(tmp_path / "f.json"))
    assert tarproc.IndexedDataset(str(tmp_path / "f.json"))[57]["__key__"] == "0057"


def test_a_zstd_shard_that_starts_with_a_skippable_frame(data, tmp_path):
    """Some writers put metadata in a skippable frame first: tarproc reads
    past it (as zstd does), whole and at random."""
    import struct

    meta = b'{"written by": "another tool"}'
    shard = tmp_path / "skip.tar.zst"
    shard.write_bytes(struct.pack("<II", 0x184D2A53, len(meta)) + meta + (data / "g.tar.zst").read_bytes())
    assert [_clean(s) for s in tarproc.iter_samples(str(shard))] == list(_samples(400))
    tarproc.index_shards([str(shard)], str(tmp_path / "i.json"))
    assert _clean(tarproc.IndexedDataset(str(tmp_path / "i.json"))[250]) == list(_samples(400))[250]


def test_pigz_independent_style_flushes_of_others_are_found(tmp_path):
    """A gzip member with full flushes every 128 KiB of input, whatever the
    member boundaries (as pigz --independent writes): groups, and samples
    that span two of them read right."""
    import zlib

    tarproc.write_samples(str(tmp_path / "p.tar"), _samples(120, seed=3))
    raw = (tmp_path / "p.tar").read_bytes()
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    out = [c.compress(raw[i:i + (128 << 10)]) + c.flush(zlib.Z_FULL_FLUSH) for i in range(0, len(raw), 128 << 10)]
    (tmp_path / "f.tar.gz").write_bytes(b"".join(out) + c.flush())
    index = tarproc.index_shards([str(tmp_path / "f.tar.gz")], str(tmp_path / "i.json"))
    assert index["shardlist"][0]["seek"]["kind"] == "groups"
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"))
    seq = list(tarproc.iter_samples(str(tmp_path / "f.tar.gz")))
    assert [ds[i] for i in range(len(ds))] == seq


def test_a_hostile_or_damaged_seek_record_is_one_clear_error(data, tmp_path):
    shard = tmp_path / "g.tar.gz"
    shard.write_bytes((data / "g.tar.gz").read_bytes())
    tarproc.index_shards([str(shard), str(data / "one.tar.gz")], str(tmp_path / "index.json"))
    good = json.loads((tmp_path / "index.json").read_text())
    seek = (tmp_path / "index.seek").read_bytes()

    def check(index, match):
        with pytest.raises(tarproc.BadInput, match=match) as e:
            tarproc.IndexedDataset(index, base=str(tmp_path))[7]
        assert "\n" not in str(e.value)

    bad = json.loads(json.dumps(good))
    bad["tarproc_seek"]["file"] = "pipe:touch hacked"
    check(bad, "not a path or URL")
    assert not (tmp_path / "hacked").exists()
    bad = json.loads(json.dumps(good))
    bad["shardlist"][0]["seek"]["at"] = 10 ** 12
    check(bad, "bad \"seek\" entry")
    # the record's group table damaged: the sizes do not add up, or the CRC-32s differ
    import struct

    rec_at = good["shardlist"][0]["seek"]["at"]
    (n,) = struct.unpack_from("<Q", seek, rec_at + 1)
    ustart_at = rec_at + 9 + 16 * n
    crc_at = ustart_at + 8 * (n + 1)
    for where in ([rec_at + 4], range(crc_at, crc_at + 4 * n, 4)):  # n; the CRC-32 of every group
        damaged = bytearray(seek)
        for pos in where:
            damaged[pos] ^= 0x41
        (tmp_path / "index.seek").write_bytes(bytes(damaged))
        check(good, "damaged|changed since")
    # a group table that claims a group of 1 TB decoded: refused before anything is decoded
    (tmp_path / "index.seek").write_bytes(seek)
    huge = bytearray(seek)
    for k in range(1, n + 1):
        struct.pack_into("<Q", huge, ustart_at + 8 * k, struct.unpack_from("<Q", seek, ustart_at + 8 * k)[0] + (1 << 40))
    (tmp_path / "index.seek").write_bytes(bytes(huge))
    check(good, "damaged|MAX_SAMPLE|changed since")
