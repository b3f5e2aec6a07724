"""Many samples at once (IndexedDataset.get_many / __getitems__), indexing at
disk speed (tarindex reads headers and seeks over member data; -p N), and
shard checksums and stamps (tarindex --checksum, tarcheck --index, a changed
shard named by IndexedDataset).

HTTP ranges come from small range-capable servers started here (the one of
test_index, and one that gives an ETag); bytes read by tarindex are counted
by the kernel (/proc/PID/io rchar of a shell, which adds its children's)."""

import functools
import io
import hashlib
import json
import os
import random
import shutil
import subprocess
import tarfile

import pytest

import tarproc
from conftest import require
from test_index import RangeHandler, http_range, make_shard, make_two_shards  # noqa: F401 (a fixture)
from test_urls import s3  # noqa: F401  (the moto S3 fixture)


@pytest.fixture
def shards(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    make_two_shards(d, 60, 30)
    tarproc.index_shards([str(d / "a.tar"), str(d / "b.tar")], str(d / "index.json"))
    return d


PICKS = [5, 5, 89, 0, 61, 60, 17, 5, -1, 42, 43, 44, 88, 3, 70, 70]


# ------------------------------------------------------------ get_many


def test_get_many_is_the_samples_of_getitem_in_order_with_repeats(shards):
    ds = tarproc.IndexedDataset(str(shards / "index.json"))
    ref = [ds[i] for i in PICKS]
    assert [s["__key__"] for s in ref[:4]] == ["00005", "00005", ref[2]["__key__"], "00000"]
    for kwargs in ({}, {"gap": 0}, {"gap": 1 << 30}, {"workers": 1}):
        got = ds.get_many(PICKS, **kwargs)
        assert got == ref, kwargs
    assert got[0] is not got[1]  # a repeated index is a sample of its own
    # PyTorch's batched fetch: a list of indices in, a list of samples out, in order
    batch = ds.__getitems__(list(reversed(PICKS)))
    assert type(batch) is list and batch == list(reversed(ref))
    # a slice of the dataset maps its own positions
    part = ds[50:80]
    assert part.get_many([0, 29, 10, 10]) == [ds[50], ds[79], ds[60], ds[60]]
    assert ds.get_many([]) == []
    with pytest.raises(IndexError, match="sample 90 is out of range"):
        ds.get_many([1, 90])


def test_get_many_errors_name_the_index_and_the_shard(shards):
    ds = tarproc.IndexedDataset(str(shards / "index.json"))
    good = (shards / "a.tar").read_bytes()
    st = (shards / "a.tar").stat()
    # other keys, same size and mtime: only the key check can tell
    make_shard(shards / "a.tar", 60, 1, prefix="z")
    (shards / "a.tar").write_bytes((shards / "a.tar").read_bytes()[:len(good)].ljust(len(good), b"\0"))
    os.utime(shards / "a.tar", ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(tarproc.BadInput, match=r"^index 7: .*a\.tar: sample 7 \('00007'\) .*the shard changed"):
        ds.get_many([70, 7, 8])
    # a compressed shard counted only: the same error as ds[i], naming the index
    subprocess.run(f"xz -c {shards / 'b.tar'} > {shards / 'c.tar.xz'}", shell=True, check=True)
    tarproc.index_shards([str(shards / "c.tar.xz")], str(shards / "gz.json"))
    with pytest.raises(tarproc.BadInput, match=r"^index 3: .*c\.tar\.xz: shard is xz-compressed"):
        tarproc.IndexedDataset(str(shards / "gz.json")).get_many([3])
    with pytest.raises(tarproc.UsageError):
        ds.get_many([1], workers=0)


class ETagHandler(RangeHandler):
    """Range answers with an ETag made of the file's size and mtime (and HEAD
    answers with it too), over kept-alive HTTP/1.1 connections."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as real servers do: a kept-alive answer does not wait for a delayed ACK

    def etag(self):
        st = os.stat(self.translate_path(self.path))
        return f'"{st.st_size:x}-{st.st_mtime_ns:x}"'

    def send_header(self, name, value):
        super().send_header(name, value)
        if name == "Content-Length":
            try:
                super().send_header("ETag", self.etag())
            except OSError:
                pass

    def do_HEAD(self):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(os.path.getsize(path)))
        self.end_headers()


@pytest.fixture
def http_server(http_range):
    """Local range servers (test_index's) whose answers carry an ETag."""
    return functools.partial(http_range, handler=ETagHandler)


def test_get_many_over_http_and_a_changed_shard(sh, shards, http_server):
    url = http_server()
    sh(f"tarindex '{url}/{{a,b}}.tar' -o index.json -p 2")
    index = json.loads((shards.parent / "index.json").read_text())
    assert [e["etag"].startswith('"') for e in index["shardlist"]] == [True, True]
    ds = tarproc.IndexedDataset(str(shards.parent / "index.json"))
    assert ds.urls == [f"{url}/a.tar", f"{url}/b.tar"]
    local = tarproc.IndexedDataset(str(shards / "index.json"))
    r = random.Random(3)
    picks = PICKS + [r.randrange(90) for _ in range(40)]
    ref = [ds[i] for i in picks[:6]]
    got = ds.get_many(picks)
    assert got[:6] == ref
    drop = lambda s: {k: v for k, v in s.items() if k != "__source__"}  # noqa: E731
    assert [drop(s) for s in got] == [drop(s) for s in local.get_many(picks)]
    assert got[0]["__source__"] == f"{url}/a.tar"
    # the shard rewritten with the same bytes: a new ETag, named on the next read, whichever way
    data = (shards / "b.tar").read_bytes()
    os.unlink(shards / "b.tar")
    (shards / "b.tar").write_bytes(data)
    os.utime(shards / "b.tar", ns=(1, 1))
    for read in (lambda: ds[70], lambda: ds.get_many([1, 70])):
        with pytest.raises(tarproc.BadInput, match=r"b\.tar: its etag is .*when it was indexed.*changed since"):
            read()
    assert ds.get_many([1, 2]) == [ds[1], ds[2]]  # a.tar did not change
    # brackets in a URL are the URL's, not a curl glob (a[1-2].tar would be two downloads)
    shutil.copy(shards / "a.tar", shards / "x[1-2].tar")
    sh(f"tarindex '{url}/x[1-2].tar' -o brackets.json")
    br = tarproc.IndexedDataset(str(shards.parent / "brackets.json"))
    assert len(br) == 60 and br.get_many([3, 59]) == [br[3], br[59]] and br[3]["__key__"] == "00003"
    # servers that ignore the range, or answer another one
    for bad, message in ((http_server(handler=RangeHandler, honour=False), "ignored the range request"),
                         (http_server(handler=RangeHandler, wrong=True), "refusing a range it did not honour")):
        for e in index["shardlist"]:
            e["url"] = e["url"].replace(url, bad)
        url = bad
        with pytest.raises(tarproc.BadInput, match=rf"^index 17: {bad}/a\.tar: .*{message}"):
            tarproc.IndexedDataset(index, base=str(shards.parent)).get_many([17, 18, 40])


def test_the_ranged_reads_are_the_scheme_tables_and_an_override_replaces_them(sh, shards, http_server):
    """ds[i] and get_many read through the scheme table's RANGE (and, for
    get_many over HTTP, RANGES: the kept-alive curl); TARPROC_RANGE_<SCHEME>
    and TARPROC_RANGES_<SCHEME> replace them."""
    url = http_server()
    sh(f"tarindex '{url}/{{a,b}}.tar' -o index.json")
    local = tarproc.IndexedDataset(str(shards / "index.json"))
    drop = lambda s: {k: v for k, v in s.items() if k != "__source__"}  # noqa: E731
    picks = [70, 3, 4, 61]
    want = [drop(local[i]) for i in picks]
    # RANGE: served from the local copy by the replacing command, which logs what it was asked
    log = shards.parent / "range.log"
    serve = (f"u={{url}}; echo \"$u\" {{start}} {{end}} >> {log}; p=\"{shards}/${{u##*/}}\"; "
             f"tail -c +$(({{start}} + 1)) \"$p\" | head -c $(({{end}} - {{start}} + 1))")
    ds = tarproc.IndexedDataset(str(shards.parent / "index.json"), settings=tarproc.Settings(
        commands={"RANGE_" + url.partition(":")[0].upper(): serve}))
    assert [drop(s) for s in ds.get_many(picks, gap=0)] == want and drop(ds[3]) == want[1]
    asked = [line.split()[0] for line in log.read_text().splitlines()]
    # get_many: a.tar's 3 and 4 in one read, b.tar's 61 and 70 in two; then ds[3]
    assert sorted(asked[:3]) == [f"{url}/a.tar", f"{url}/b.tar", f"{url}/b.tar"] and asked[3:] == [f"{url}/a.tar"]
    # RANGES: get_many's curl replaced by one that keeps a copy of the requests it was given; ds[i] keeps RANGE's
    cfg = shards.parent / "ranges.cfg"
    ds = tarproc.IndexedDataset(str(shards.parent / "index.json"), settings=tarproc.Settings(
        commands={"RANGES_" + url.partition(":")[0].upper(): f"tee -a {cfg} | curl -K -"}))
    assert [drop(s) for s in ds.get_many(picks, gap=0, workers=1)] == want
    text = cfg.read_text()
    assert text.count("range = ") == 3 and f'url = "{url}/b.tar"' in text, text
    assert drop(ds[4]) == drop(local[4]) and cfg.read_text() == text


def test_s3_get_many_and_a_replaced_object(sh, shards, s3, monkeypatch):  # noqa: F811
    sh("aws s3 cp data/a.tar s3://tarproc-test/many/a.tar", env=s3, stderr_ok=True)
    sh("tarindex s3://tarproc-test/many/a.tar -o s3.json", env=s3)
    entry = json.loads((shards.parent / "s3.json").read_text())["shardlist"][0]
    assert entry["etag"] and entry["filesize"] == (shards / "a.tar").stat().st_size
    for k, v in s3.items():
        monkeypatch.setenv(k, v)
    ds = tarproc.IndexedDataset(str(shards.parent / "s3.json"))
    local = tarproc.IndexedDataset(str(shards / "index.json"))
    got = ds.get_many([40, 2])
    assert [s["txt"] for s in got] == [local[40]["txt"], local[2]["txt"]]
    # the object replaced by other bytes of the same size: its ETag names it
    data = bytearray((shards / "a.tar").read_bytes())
    data[600] ^= 1
    (shards / "z.tar").write_bytes(data)
    sh("aws s3 cp data/z.tar s3://tarproc-test/many/a.tar", env=s3, stderr_ok=True)
    with pytest.raises(tarproc.BadInput, match=r"^index 2: s3://tarproc-test/many/a\.tar: its etag is .*changed since"):
        ds.get_many([2])


# ------------------------------------------------------------ changed shards


def test_a_changed_shard_is_named_by_indexed_dataset(shards):
    ds = tarproc.IndexedDataset(str(shards / "index.json"))
    assert ds[3]["__key__"] == "00003"
    # the same bytes written again: its mtime says it changed (the shard is held open: checked on each read)
    data = (shards / "a.tar").read_bytes()
    (shards / "a.tar").write_bytes(data)
    os.utime(shards / "a.tar", ns=(10**18, 10**18))
    for read in (lambda: ds[4], lambda: ds.get_many([4, 70])):
        with pytest.raises(tarproc.BadInput, match=r"a\.tar: the shard was modified since it was indexed "
                                                   r"\(mtime 2001-09-09 .*verify=\"size\"\)"):
            read()
    # a copy that did not keep times reads with verify="size"
    copy = tarproc.IndexedDataset(str(shards / "index.json"), verify="size")
    assert copy[4]["__key__"] == "00004" and copy.get_many([5])[0]["__key__"] == "00005"
    assert pickle_roundtrip(copy)[4]["__key__"] == "00004" and copy[2:6][2]["__key__"] == "00004"
    # a size change
    (shards / "a.tar").write_bytes(data + bytes(512))
    with pytest.raises(tarproc.BadInput, match=rf"a\.tar: the shard has {len(data) + 512} bytes, {len(data)} "
                                               r"when it was indexed: the shard changed since"):
        copy[4]
    with pytest.raises(tarproc.UsageError):
        tarproc.IndexedDataset(str(shards / "index.json"), verify="mtime")


def pickle_roundtrip(obj):
    import pickle

    return pickle.loads(pickle.dumps(obj))


# ------------------------------------------------------------ checksums


def test_checksum_kept_and_verified_by_tarcheck_index(sh, shards):
    subprocess.run(f"gzip -c {shards / 'a.tar'} > {shards / 'c.tar.gz'}", shell=True, check=True)
    sh("tarindex --checksum 'data/{a,b}.tar' data/c.tar.gz -o data/sum.json -p 2", stderr_ok=True)
    index = json.loads((shards / "sum.json").read_text())
    for e in index["shardlist"]:
        raw = (shards / e["url"]).read_bytes()
        assert e["sha256"] == hashlib.sha256(raw).hexdigest() and e["filesize"] == len(raw)
    p = sh("tarcheck --index data/sum.json")
    assert p.stdout.decode() == "data/sum.json: 3 shards ok (3 by sha256)\n"
    # one byte changed (same size): its line, exit 1
    data = bytearray((shards / "b.tar").read_bytes())
    data[700] ^= 1
    (shards / "b.tar").write_bytes(data)
    p = sh("tarcheck --index data/sum.json", ok=False)
    lines = p.stdout.decode().splitlines()
    assert p.returncode == 1 and p.stderr == b"", p
    assert len(lines) == 2 and lines[0].startswith("data/b.tar: sha256 ") and "the index says" in lines[0]
    # a shorter shard: named by its size; a missing one: unreadable, exit 2
    (shards / "a.tar").write_bytes((shards / "a.tar").read_bytes()[:-512])
    os.unlink(shards / "c.tar.gz")
    p = sh("tarcheck -q --index data/sum.json", ok=False)
    assert p.returncode == 2, p
    out = p.stdout.decode().splitlines()
    assert len(out) == 3 and "a.tar: " in out[0] and "bytes, the index says" in out[0], out
    assert out[2].endswith("c.tar.gz: unreadable")
    assert p.stderr.decode().count("\n") == 1 and "c.tar.gz: cannot open" in p.stderr.decode()
    # an index without checksums: sizes only, and says so
    p = sh("tarcheck --index data/index.json", ok=False)
    assert p.returncode == 1 and p.stdout.decode().splitlines()[1:] == ["data/index.json: 2 shards, 1 bad (1 by size)"]
    p = sh("tarcheck --index data/index.json data/a.tar", ok=False)
    assert p.returncode == 2 and b"give no shards" in p.stderr
    # what can be read only once (a pipe, stdin) is indexed, not checksummed
    p = sh("tarindex --no-offsets <(cat data/b.tar)")
    assert json.loads(p.stdout)["shardlist"][0]["nsamples"] == 30
    for cmd in ("tarindex --checksum <(cat data/b.tar)", "tarindex --checksum 'pipe:cat data/b.tar'",
                "cat data/b.tar | tarindex --checksum"):
        p = sh(cmd, ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2 and p.stdout == b"" and "cannot be" in err.splitlines()[-1], (cmd, err)


# ------------------------------------------------------------ indexing at disk speed


def dialects(d):
    """The same samples written by GNU tar (gnu, posix, ustar), bsdtar,
    tarfile (gnu, pax, ustar) and webdataset, members of 3 bytes to 100 KB
    (past the size tarindex seeks over), keys with a directory; and
    GNU tar's sparse files, long names, directories and links."""
    require("bsdtar")
    src = d / "src"
    r = random.Random(5)
    names = []
    for i in range(12):
        for field, size in (("cls", 3), ("jpg", r.choice([5000, 70000, 100000])), ("json", 120)):
            name = f"d{i % 2}/{i:07d}.{field}"
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes(r.randbytes(size))
            names.append(name)
    (src / "list").write_text("\n".join(names) + "\n")
    out = {}
    for fmt in ("gnu", "posix", "ustar"):
        out[f"gnutar-{fmt}"] = d / f"gnutar-{fmt}.tar"
        subprocess.run(["tar", "-cf", out[f"gnutar-{fmt}"], f"--format={fmt}", "-C", src, "-T", src / "list"],
                       check=True)
    out["bsdtar"] = d / "bsdtar.tar"
    subprocess.run(["bsdtar", "-cf", out["bsdtar"], "-C", src, "-T", src / "list"], check=True)
    for fmt, code in (("gnu", tarfile.GNU_FORMAT), ("pax", tarfile.PAX_FORMAT), ("ustar", tarfile.USTAR_FORMAT)):
        out[f"tarfile-{fmt}"] = d / f"tarfile-{fmt}.tar"
        with tarfile.open(out[f"tarfile-{fmt}"], "w", format=code) as tf:
            for name in names:
                tf.add(src / name, name)
    import webdataset

    out["webdataset"] = d / "webdataset.tar"
    with webdataset.TarWriter(str(out["webdataset"])) as w:
        for i in range(12):
            w.write({"__key__": f"d{i % 2}/{i:07d}", **{f: (src / f"d{i % 2}/{i:07d}.{f}").read_bytes()
                                                        for f in ("cls", "jpg", "json")}})
    # GNU tar: a sparse member, a long name, a directory, a hard link and a name without a dot
    odd = d / "odd"
    odd.mkdir()
    with open(odd / "s00.img", "wb") as f:
        f.seek(3 << 20)
        f.write(b"end")
    (odd / "s00.txt").write_bytes(b"x" * 200000)
    long = "l" * 150
    (odd / f"{long}.txt").write_bytes(b"long")
    (odd / "sub").mkdir()
    (odd / "sub" / "s01.bin").write_bytes(b"y" * 80000)
    os.link(odd / "sub" / "s01.bin", odd / "s02.bin")
    (odd / "README").write_text("no dot")
    out["gnutar-odd"] = d / "gnutar-odd.tar"
    subprocess.run(["tar", "-cSf", out["gnutar-odd"], "--format=gnu", "-C", odd, "s00.img", "s00.txt",
                    f"{long}.txt", "sub", "s02.bin", "README"], check=True)
    out["gnutar-odd-pax"] = d / "gnutar-odd-pax.tar"
    subprocess.run(["tar", "-cSf", out["gnutar-odd-pax"], "--format=posix", "-C", odd, "s00.img", "s00.txt",
                    f"{long}.txt", "sub", "s02.bin", "README"], check=True)
    # tarfile with a global pax header
    out["tarfile-global"] = d / "tarfile-global.tar"
    with tarfile.open(out["tarfile-global"], "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "g"}) as tf:
        for name in names[:9]:
            tf.add(src / name, name)
    return out


def test_seeking_index_equals_the_reading_index_for_every_dialect(tmp_path):
    from tarproc.sinks.index import build_index
    from tarproc.sinks.scan import scan_one

    d = tmp_path / "d"
    (d / "src").mkdir(parents=True)
    shards = dialects(d)
    counts = {}
    for name, path in shards.items():
        got = {}
        for seek in (True, False):
            stats, warned = tarproc.Stats(), []
            info = scan_one(str(path), stats, warn=warned.append, seek=seek)
            got[seek] = (build_index([info], None, "x"), stats.as_dict(), warned)
        assert got[True] == got[False], name
        counts[name] = (got[True][0][0]["shardlist"][0]["nsamples"], got[True][1]["reasons"])
    assert {counts[n][0] for n in counts if "odd" not in n and "global" not in n} == {12}
    assert counts["tarfile-global"][0] == 3
    # s00 (its sparse img and its txt), the long name, sub/s01; the link, the directory and README skipped
    for name in ("gnutar-odd", "gnutar-odd-pax"):
        assert counts[name] == (3, {"directories": 1, "hard links": 1, "names without an extension": 1}), name
    # truncated and damaged shards: the same warning or error either way
    data = shards["gnutar-gnu"].read_bytes()
    cut = tmp_path / "cut.tar"
    for keep in (len(data) - 10240, 200000, 150001):
        cut.write_bytes(data[:keep])
        outcome = {}
        for seek in (True, False):
            warned = []
            try:
                info = scan_one(str(cut), warn=warned.append, seek=seek)
                outcome[seek] = (build_index([info], None, "x"), warned)
            except tarproc.BadInput as e:
                outcome[seek] = str(e)
        assert outcome[True] == outcome[False], keep


def sparse_shard(path, members, size=1 << 20):
    """A shard of ``members`` members of ``size`` bytes whose data are holes
    (a sparse file: a large shard that costs no disk), headers by tarfile."""
    with open(path, "wb") as f:
        for i in range(members):
            info = tarfile.TarInfo(f"{i:06d}.bin")
            info.size = size
            f.write(info.tobuf(tarfile.USTAR_FORMAT))
            f.seek(size + (-size % 512), 1)
        f.write(bytes(1024))


def rchar(sh, cmd):
    """Bytes read (the kernel's rchar) by ``cmd`` and its children."""
    p = sh(f"{cmd} && grep '^rchar' /proc/$$/io")
    return int(p.stdout.decode().split()[-1])


def test_tarindex_reads_under_one_percent_of_a_shard_of_large_members(sh, tmp_path):
    sparse_shard(tmp_path / "big.tar", 256)
    sparse_shard(tmp_path / "one.tar", 1, 512)
    size = (tmp_path / "big.tar").stat().st_size
    start = rchar(sh, "tarindex one.tar -o one.json")  # start-up: Python, its modules, the index written
    read = rchar(sh, "tarindex big.tar -o big.json") - start
    assert 0 < read < size / 100, (read, size)
    index = json.loads((tmp_path / "big.json").read_text())["shardlist"][0]
    assert index["nsamples"] == 256 and index["filesize"] == size
    ds = tarproc.IndexedDataset(str(tmp_path / "big.json"))
    assert ds.get_many([255, 3]) == [ds[255], ds[3]] and ds[3]["bin"] == bytes(1 << 20)
    # the same bytes read by the general path: all of them
    assert rchar(sh, "tarindex --checksum big.tar -o sum.json") - start > size


def test_parallel_index_is_the_index_of_one_at_a_time(sh, tmp_path):
    d = tmp_path / "d"
    (d / "src").mkdir(parents=True)
    shards = dialects(d)
    names = " ".join(str(p.relative_to(tmp_path)) for p in shards.values())
    sh(f"tarindex {names} -o one.json --checksum")
    sh(f"tarindex {names} -o par.json -p 4 --checksum")
    one = json.loads((tmp_path / "one.json").read_text())
    par = json.loads((tmp_path / "par.json").read_text())
    from test_index import sidecars

    for index, name in ((one, "one"), (par, "par")):
        assert (index["tarproc_offsets"].pop("dir"), index["tarproc_offsets"].pop("keys")) == (f"{name}.offsets.d",
                                                                                                f"{name}.keys")
    assert one == par and len(one["shardlist"]) == len(shards)
    assert sidecars(tmp_path / "one") == sidecars(tmp_path / "par") != {}
    # and a shard that cannot be read is the one error, whatever runs at once
    shutil.copy(tmp_path / names.split()[0], tmp_path / "bad.tar")
    with open(tmp_path / "bad.tar", "r+b") as f:
        f.write(b"\xff" * 512)
    p = sh(f"tarindex {names} bad.tar -o bad.json -p 4", ok=False)
    assert p.returncode == 2 and p.stderr.decode().count("\n") == 1 and "bad.tar" in p.stderr.decode()
    assert not (tmp_path / "bad.json").exists()


# ------------------------------------------------------------ a lying end of the data

@pytest.mark.parametrize("name", ["s.tar", "s.tar.gz", "s.tar.zst"])
def test_an_index_whose_end_lies_gives_an_error_or_the_sample(tmp_path, sh, name):
    """The index's ``end`` of a shard lowered by a few bytes, a block or two:
    the last sample's range is cut short. Read as members padded with zeros
    it gave truncated or zero-filled fields; now an error or the right sample."""
    from tarproc.errors import BadInput

    members = make_shard(tmp_path / "plain.tar", 12, 5)
    truth = {}
    for n, data in members:
        truth.setdefault(n.split(".")[0], {})[n.split(".", 1)[1]] = data
    sh(f"tarcat plain.tar -o {name}")
    tarproc.index_shards([str(tmp_path / name)], str(tmp_path / "i.json"))
    good = json.loads((tmp_path / "i.json").read_text())
    for cut in (1, 100, 511, 512, 513, 1024, 1536):
        index = json.loads(json.dumps(good))
        index["shardlist"][0]["end"] -= cut
        (tmp_path / "lie.json").write_text(json.dumps(index))
        try:
            ds = tarproc.IndexedDataset(str(tmp_path / "lie.json"))
            sample = ds[len(ds) - 1]
        except BadInput:
            continue
        fields = {k: v for k, v in sample.items() if not k.startswith("__")}
        assert fields == truth[sample["__key__"]], (cut, sample["__key__"])


def test_a_pax_mtime_that_is_no_number_reads_as_it_indexes(tmp_path):
    """A shard whose pax mtime is not a number indexes (a warning) and its samples read."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(3):
            info = tarfile.TarInfo(f"k{i}.txt")
            info.size = 2
            info.pax_headers = {"mtime": "soon"}
            tf.addfile(info, io.BytesIO(b"%02d" % i))
    (tmp_path / "s.tar").write_bytes(buf.getvalue())
    tarproc.index_shards([str(tmp_path / "s.tar")], str(tmp_path / "i.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"))
    assert [ds[i]["txt"] for i in range(3)] == [b"00", b"01", b"02"]
