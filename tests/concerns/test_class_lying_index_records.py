"""Damaged and lying index records for random access: every byte of a seek
record of groups (gzip, zstd), of a checkpoint record's table (one-stream
gzip: its table, its GZIDX point entries, its 32 KiB windows at a
stride), of a plain shard's
offsets sidecar, and the stamps of an entry, flipped in turn: ``ds[i]``
gives the right sample or raises a tarproc error, never other bytes."""

import json
import os
import random
import subprocess
import sys

import pytest

import tarproc
from conftest import ROOT


def _samples(n, seed=0):
    r = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon"]
    for i in range(n):
        yield {"__key__": f"s/{i:05d}", "bin": r.randbytes(r.randrange(500, 3000)),
               "txt": b" ".join(r.choice(words) for _ in range(r.randrange(10, 400))), "cls": b"%d" % (i % 10)}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    tarproc.write_samples(str(d / "p.tar"), _samples(120))
    for ext in ("tar.gz", "tar.zst"):
        subprocess.run(["tarcat", "--group-size", "32768", "p.tar", "-o", f"g.{ext}"], cwd=d, check=True)
    subprocess.run("gzip -c p.tar > one.tar.gz", shell=True, cwd=d, check=True)
    truth = [{k: v for k, v in s.items() if k != "__source__"} for s in tarproc.iter_samples(str(d / "p.tar"))]
    for name, spacing in (("g.tar.gz", None), ("g.tar.zst", None), ("one.tar.gz", "64KiB"), ("p.tar", None)):
        stem = name.replace(".", "_")
        extra = ["--checkpoint-spacing", spacing] if spacing else []
        subprocess.run(["tarindex", name, *extra, "-o", f"{stem}.json"], cwd=d, check=True, capture_output=True)
    return d, truth


PICKS = [0, 59, 119]


def _verdicts(d, truth, index):
    """``(wrong, other)``: picks read as other bytes, and errors that are not tarproc's."""
    wrong, other = [], []
    try:
        ds = tarproc.IndexedDataset(str(d / index), verify="stamp")
        n = len(ds)
    except tarproc.TarprocError:
        return wrong, other
    except Exception as e:  # noqa: BLE001 - what the test is looking for
        return wrong, [f"open: {type(e).__name__}: {e}"]
    for i in PICKS + [n - 1] * (n > len(truth)):
        try:
            got = ds[i]
        except (tarproc.TarprocError, IndexError):  # (an entry that claims fewer samples has fewer)
            continue
        except Exception as e:  # noqa: BLE001
            other.append(f"ds[{i}]: {type(e).__name__}: {e}")
            continue
        if i >= len(truth):
            wrong.append(f"ds[{i}] of an entry that claims {n} samples is {got.get('__key__')!r}")
            continue
        got = {k: v for k, v in got.items() if k != "__source__"}
        if got != truth[i]:
            same_key = got.get("__key__") == truth[i]["__key__"]
            wrong.append(f"ds[{i}] is {got.get('__key__')!r} with other bytes" if same_key
                         else f"ds[{i}] is sample {got.get('__key__')!r}")
    return wrong, other


def _sidecar(d, index, kind):
    return json.loads((d / index).read_text())[kind]["file"]


def _flip_each(d, truth, index, sidecar, positions):
    path = d / sidecar
    good = path.read_bytes()
    bad = {}
    try:
        for pos in positions:
            damaged = bytearray(good)
            damaged[pos] ^= 0xFF
            path.write_bytes(bytes(damaged))
            wrong, other = _verdicts(d, truth, index)
            if wrong or other:
                bad[pos] = (wrong + other)[:2]
    finally:
        path.write_bytes(good)
    return bad


def _record(d, index):
    entry = json.loads((d / index).read_text())["shardlist"][0]
    return entry["seek"]["at"], entry["seek"]["bytes"]


@pytest.mark.parametrize("name", ["g_tar_gz", "g_tar_zst"])
def test_every_byte_of_a_groups_record_flipped(shards, name):
    d, truth = shards
    assert _verdicts(d, truth, f"{name}.json") == ([], [])
    at, size = _record(d, f"{name}.json")
    assert _flip_each(d, truth, f"{name}.json", _sidecar(d, f"{name}.json", "tarproc_seek"), range(at, at + size)) == {}


def _checkpoint_layout(d):
    at, size = _record(d, "one_tar_gz.json")
    raw = (d / _sidecar(d, "one_tar_gz.json", "tarproc_seek")).read_bytes()
    import struct

    _, npoints = struct.unpack_from("<QQ", raw, at + 1)
    table_end = at + 1 + 16 + 4 * npoints + 8  # kind, size and count, CRC-32s, GZIDX length
    return at, size, table_end, npoints


def test_every_byte_of_a_checkpoint_table_flipped(shards):
    d, truth = shards
    assert _verdicts(d, truth, "one_tar_gz.json") == ([], [])
    at, size, table_end, npoints = _checkpoint_layout(d)
    assert npoints >= 3
    # the record's own table (sizes, count, CRC-32s) and the GZIDX header
    side = _sidecar(d, "one_tar_gz.json", "tarproc_seek")
    assert _flip_each(d, truth, "one_tar_gz.json", side, range(at, table_end + 31)) == {}




def test_every_byte_of_the_checkpoint_points_flipped(shards):
    d, truth = shards
    at, size, table_end, npoints = _checkpoint_layout(d)
    tests = os.path.join(ROOT, "tests")
    script = (f"import sys; sys.path[:0] = {[tests, os.path.join(tests, 'concerns')]!r}\n"
              "import pathlib, test_class_lying_index_records as t, tarproc\n"
              f"d = pathlib.Path({str(d)!r})\n"
              "truth = [{k: v for k, v in s.items() if k != '__source__'}\n"
              "         for s in tarproc.iter_samples(str(d / 'p.tar'))]\n"
              f"bad = t._flip_each(d, truth, 'one_tar_gz.json', t._sidecar(d, 'one_tar_gz.json', 'tarproc_seek'), "
              f"range({table_end + 31}, {table_end + 31 + 18 * npoints}))\n"
              "print(bad); sys.exit(1 if bad else 0)\n")
    seek = d / _sidecar(d, "one_tar_gz.json", "tarproc_seek")
    good = seek.read_bytes()
    try:
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("no answer in 15 s")
    finally:
        seek.write_bytes(good)
    assert p.returncode == 0, p.stdout.decode()[-2000:] + p.stderr.decode()[-2000:]


def test_bytes_of_a_checkpoint_window_flipped(shards):
    d, truth = shards
    at, size, table_end, npoints = _checkpoint_layout(d)
    windows = range(table_end + 31 + 18 * npoints, at + size)
    positions = list(windows)[::1021] + list(windows)[-16:]
    assert _flip_each(d, truth, "one_tar_gz.json", _sidecar(d, "one_tar_gz.json", "tarproc_seek"), positions) == {}


def test_every_byte_of_an_offsets_sidecar_flipped(shards):
    d, truth = shards
    assert _verdicts(d, truth, "p_tar.json") == ([], [])
    offsets = json.loads((d / "p_tar.json").read_text())["tarproc_offsets"]
    for part in (f"{offsets['dir']}/000000.offsets", offsets["keys"]):  # the shard's sidecar, the key table
        size = (d / part).stat().st_size
        assert _flip_each(d, truth, "p_tar.json", part, range(size)) == {}


@pytest.mark.parametrize("name", ["g_tar_gz", "one_tar_gz", "p_tar"])
@pytest.mark.parametrize("field,change", [("filesize", 1), ("filesize", -1), ("mtime_ns", 1), ("nsamples", 1),
                                          ("nsamples", -1)])
def test_lying_stamps_of_an_entry(shards, tmp_path, name, field, change):
    d, truth = shards
    index = json.loads((d / f"{name}.json").read_text())
    entry = index["shardlist"][0]
    entry[field] += change
    for key in ("tarproc_offsets", "tarproc_seek"):  # the sidecars of the original, by path
        for part in ("file", "dir", "keys"):
            if part in index.get(key, {}):
                index[key][part] = str(d / index[key][part])
    entry["url"] = str(d / entry["url"].rsplit("/", 1)[-1])
    (tmp_path / "i.json").write_text(json.dumps(index))
    assert _verdicts(tmp_path, truth, "i.json") == ([], [])
