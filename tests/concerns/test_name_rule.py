"""The sample name rule (core/rules.classify) is one rule: grouping
(core/grouping.group), its fast twin (core/passthru.fast_group, with and
without raw bytes, at buffer sizes that cut headers) and tarcheck
(sinks/check.check_shard) give the same samples, skips and refusals for
hostile names, on shards written by GNU tar, bsdtar, tarfile and webdataset;
and fast_group gives what group gives on every file make_foreign.py writes."""

import io
import os
import subprocess
import sys
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REALDATA, require
from tarproc.core import passthru
from tarproc.core.blob import Blob
from tarproc.core.grouping import SampleWriter, group, sample_members
from tarproc.core.rules import METADATA, PLAIN_NAME, SKIPPED, UNSAFE, Refused, classify, unsafe_name
from tarproc.core.stats import Stats
from tarproc.core.tario import TarReader
from tarproc.errors import BadSample
from tarproc.sinks.check import check_shard

MAKE_FOREIGN = os.path.join(os.path.dirname(REALDATA), "foreign", "make_foreign.py")

LONG = "d/" + "L" * 180 + ".txt"  # past the 100-byte name field: GNU long name or pax path
VERY_LONG = "e/" + "/".join(["x" * 90] * 4) + ".s.bin"  # past ustar's 255, with directories
#: Names a reader takes without an error (as fields, or skipped and counted), in shard order.
GOOD = ["a/s1.jpg", "a/s1.txt", "nodot", ".hidden.jpg", "d.x/s2.seg.png", "s3.", "s3.JPG",
        "\u00fcn\u00ef/\u00e7\u00f6d\u00e9.jpg", LONG, VERY_LONG, "._s4.jpg", "dir/.x", "s5.a.b.c"]
#: Names every reader refuses (each in a shard of its own, after a good sample).
BAD = ["../evil.jpg", "/abs/x.jpg", "a/../b.jpg", "k.__key__", "tab\there.jpg", "s6.__x__"]


def expected(names):
    """The oracle: samples (key, sorted fields), skip reasons, the first refusal, by classify alone."""
    samples, reasons = [], {}
    for name in names:
        parts = classify(name)
        if type(parts) is not tuple:
            if parts.kind != SKIPPED:
                return samples, reasons, parts
            reasons[parts.why] = reasons.get(parts.why, 0) + 1
            continue
        key, field = parts
        if samples and samples[-1][0] == key:
            samples[-1][1].append(field)
        else:
            samples.append((key, [field]))
    return [(k, sorted(f)) for k, f in samples], reasons, None


# ------------------------------------------------------------------ writers


def by_tarfile(fmt):
    def write(names, tmp):
        f = io.BytesIO()
        with tarfile.open(fileobj=f, mode="w", format=fmt) as t:
            for name in names:
                data = name.encode("utf-8", "surrogateescape")
                ti = tarfile.TarInfo(name)
                ti.size, ti.mtime, ti.mode, ti.uname = len(data), 1700000000, 0o664, "someone"
                try:
                    t.addfile(ti, io.BytesIO(data))
                except ValueError:  # USTAR: a name that does not fit 100 + 155 bytes is not written
                    assert fmt == tarfile.USTAR_FORMAT and len(data) > 100
        return f.getvalue()
    return write


def _files(names, tmp):
    """Placeholder files f000.. holding each name's bytes (GNU tar and bsdtar rename them)."""
    src = tmp / "src"
    src.mkdir(exist_ok=True)
    plain = []
    for i, name in enumerate(names):
        p = src / f"f{i:03d}"
        p.write_bytes(name.encode("utf-8", "surrogateescape"))
        plain.append(p.name)
    return src, plain


def by_gnutar(fmt):
    def write(names, tmp):
        require("tar")
        src, plain = _files(names, tmp)
        renames = [f"--transform=s,^{p}$,{n}," for p, n in zip(plain, names)]
        return subprocess.run(["tar", "-cf", "-", "-P", f"--format={fmt}", *renames, "-C", str(src), *plain],
                              check=True, capture_output=True).stdout
    return write


def by_bsdtar(names, tmp):
    require("bsdtar")
    src, plain = _files(names, tmp)
    renames = [a for p, n in zip(plain, names) for a in ("-s", f",^{p}$,{n},")]
    return subprocess.run(["bsdtar", "-cf", "-", "-P", *renames, "-C", str(src), *plain],
                          check=True, capture_output=True).stdout


def by_webdataset(names, tmp):
    """webdataset's TarWriter writes KEY.FIELD for a sample's fields (none
    empty, none starting with '_', sorted): the names that fit are written,
    in samples of consecutive keys."""
    import webdataset as wds

    f = io.BytesIO()
    w = wds.TarWriter(f, encoder=False)
    sample = None
    for name in names:
        slash = name.rfind("/")
        dot = name.find(".", slash + 1)
        if dot <= 0 or name[dot + 1 :][:1] in ("", "_"):
            continue
        key, field = name[:dot], name[dot + 1 :]
        if sample is not None and (sample["__key__"] != key or field in sample):
            w.write(sample)
            sample = None
        if sample is None:
            sample = {"__key__": key}
        sample[field] = name.encode()
    if sample is not None:
        w.write(sample)
    w.close()
    return f.getvalue()


def names_of(data):
    """The member names of a tar, as tarfile reads them (the oracle's input)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as t:
        return [m.name for m in t.getmembers() if m.isfile()]


WRITERS = {
    "gnutar-gnu": by_gnutar("gnu"), "gnutar-posix": by_gnutar("posix"), "bsdtar": by_bsdtar,
    "tarfile-gnu": by_tarfile(tarfile.GNU_FORMAT), "tarfile-pax": by_tarfile(tarfile.PAX_FORMAT),
    "tarfile-ustar": by_tarfile(tarfile.USTAR_FORMAT), "webdataset": by_webdataset,
}


# ------------------------------------------------------------------ the three readers


def read_group(data, fast, raw=False):
    """(samples as (key, sorted fields), the bytes written back, stats, error text)."""
    src = io.BufferedReader(io.BytesIO(data), 4096)
    reader = TarReader(src, "in")
    stats = Stats()
    out = io.BytesIO()
    writer = SampleWriter(out, Stats())
    samples, err = [], None
    try:
        it = passthru.fast_group(reader, "in", stats, raw) if fast else group(reader.members(), "in", stats)
        for s in it:
            samples.append((s["__key__"], sorted(k for k in s if not k.startswith("__"))))
            for k, v in s.items():
                assert isinstance(v, (bytes, Blob)) or k.startswith("__")
            writer.write(s)
        writer.close()
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    return samples, out.getvalue(), stats.reasons, err


def read_check(data, tmp):
    path = tmp / "shard.tar"
    path.write_bytes(data)
    return check_shard(str(path))


def three_ways(data, tmp):
    """group, fast_group (plain and raw, at buffer sizes that cut headers)
    and tarcheck on ``data``; asserts they agree with each other and with
    classify's oracle on the names tarfile reads; returns the oracle."""
    old = read_group(data, fast=False)
    for chunk in (passthru.CHUNK, 700, 1536):
        passthru.CHUNK, keep = chunk, passthru.CHUNK
        try:
            for raw in (False, True):
                assert read_group(data, fast=True, raw=raw) == old, (chunk, raw)
        finally:
            passthru.CHUNK = keep
    samples, _, reasons, err = old
    want_samples, want_reasons, refused = expected(names_of(data))
    rep = read_check(data, tmp)
    kinds = {p["kind"]: p for p in rep["problems"]}
    if refused is None:
        assert err is None
        assert samples == want_samples and reasons == want_reasons
        assert rep["samples"] == len(samples)
        assert rep["skipped"] == dict(sorted(reasons.items()))
        fields = {}
        for _, fs in samples:
            for f in fs:
                fields[f] = fields.get(f, 0) + 1
        assert {k: v["count"] for k, v in rep["fields"].items()} == fields
        assert "unsafe_names" not in kinds and "metadata_fields" not in kinds
    else:
        assert err is not None and refused.why in err, (err, refused)
        assert samples == want_samples[: len(samples)]
        kind = {UNSAFE: "unsafe_names", METADATA: "metadata_fields"}[refused.kind]
        assert kind in kinds, rep["problems"]
    return want_samples, want_reasons, refused


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_hostile_names_read_the_same_three_ways(writer, tmp_path):
    data = WRITERS[writer](GOOD, tmp_path)
    samples, reasons, refused = three_ways(data, tmp_path)
    assert refused is None
    keys = [k for k, _ in samples]
    assert "a/s1" in keys and "d.x/s2" in keys
    assert ("d.x/s2", ["seg.png"]) in samples and ("s5", ["a.b.c"]) in samples
    if writer != "webdataset":  # (it cannot write an empty field nor a name without a dot)
        assert ("s3", ["", "jpg"]) in samples
        assert reasons == {"names without an extension": 3, "macOS AppleDouble files (._*)": 1}
    if writer not in ("webdataset", "tarfile-ustar"):  # (USTAR cannot hold them)
        assert LONG[:-4] in keys and VERY_LONG[: VERY_LONG.index(".")] in keys
    assert "\u00fcn\u00ef/\u00e7\u00f6d\u00e9" in keys


@pytest.mark.parametrize("writer,bad", [(w, b) for w in ("gnutar-gnu", "gnutar-posix", "bsdtar", "tarfile-pax",
                                                            "webdataset") for b in BAD
                                         if w != "webdataset" or "__" not in b])  # (it never writes _ fields)
def test_refused_names_are_refused_three_ways(writer, bad, tmp_path):
    data = WRITERS[writer](["ok/s0.jpg", bad, "ok/s9.jpg"], tmp_path)
    samples, _, refused = three_ways(data, tmp_path)
    assert isinstance(refused, Refused) and refused.kind in (UNSAFE, METADATA)
    assert samples[:1] == [("ok/s0", ["jpg"])]


def test_a_trailing_slash_is_a_directory_three_ways(tmp_path):
    f = io.BytesIO()
    with tarfile.open(fileobj=f, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name in ("k.jpg", "k.txt/", "k.png"):
            ti = tarfile.TarInfo(name)
            ti.size = 3
            t.addfile(ti, io.BytesIO(b"abc"))
    old = read_group(f.getvalue(), fast=False)
    assert old[0] == [("k", ["jpg", "png"])] and old[2] == {"directories": 1}
    assert read_group(f.getvalue(), fast=True, raw=True) == old
    rep = read_check(f.getvalue(), tmp_path)
    assert rep["samples"] == 1 and rep["directories"] == 1


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab./_Z-~ \u00e9\t", min_size=0, max_size=14))
def test_the_fast_regex_splits_as_classify(name):
    """A name field PLAIN_NAME matches (without '..') is one classify takes
    as the same key and field: the fast path may read it without asking."""
    raw = name.encode("utf-8")
    if len(raw) > 100:
        return
    m = PLAIN_NAME.fullmatch(raw + bytes(100 - len(raw)))
    if m is None or b".." in raw:
        return
    assert classify(name) == (m.group(1).decode(), m.group(2).decode())


def test_classify_refuses_what_unsafe_name_refuses():
    long_ok = "k/" + "x" * 1000 + ".jpg"
    assert classify(long_ok) == (long_ok[:-4], "jpg")
    huge = "k/" + "x" * (1 << 20) + ".jpg"  # past MAX_NAME_BYTES: refused by every reader
    assert unsafe_name(huge) and classify(huge).kind == UNSAFE
    for name in BAD:
        assert isinstance(classify(name), Refused)
    assert classify("k.JPEG") == ("k", "jpeg") and classify("k.") == ("k", "")
    assert classify("").kind == UNSAFE and classify("x\udcffy.jpg") == ("x\udcffy", "jpg")


def test_the_writer_rule_gives_the_same_names_on_both_of_its_paths():
    """sample_members is the one writer rule (SampleWriter and tarsplit's
    sizes use it): bytes values (its fast path) and other values (the
    checked path) give the same names; bad keys and fields are refused."""
    assert sample_members({"__key__": "a/k", "txt": b"1", "jpg": "2", "__source__": "s"}) == \
        [("a/k.jpg", b"2"), ("a/k.txt", b"1")]
    assert [n for n, _ in sample_members({"__key__": "a.b/k", "seg.png": b"1", "": b"2"})] == \
        ["a.b/k.", "a.b/k.seg.png"]
    # the fields "." and ".." (members k.. and k...) read back: written on both paths
    for value in (b"1", "1"):
        assert sample_members({"__key__": "k", ".": value, "..": value}) == [("k..", b"1"), ("k...", b"1")]
    for bad in ({"__key__": "k.x", "jpg": b"1"}, {"__key__": "../k", "jpg": b"1"}, {"__key__": "k", "a/b": b"1"},
                {"__key__": "k/", "jpg": b"1"}, {"__key__": "k", "a\tb": b"1"}, {"jpg": b"1"}):
        with pytest.raises(BadSample):
            sample_members(bad)


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    require("tar")
    require("bsdtar")
    out = tmp_path_factory.mktemp("foreign")
    assert os.path.exists(MAKE_FOREIGN), MAKE_FOREIGN
    p = subprocess.run([sys.executable, MAKE_FOREIGN, "-o", str(out), "-n", "40", "--sizes", "3,3000,120"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    files = sorted(f for f in os.listdir(out) if f.endswith(".tar"))
    assert len(files) == 8, files  # GNU tar x 3, bsdtar, tarfile x 3, webdataset
    return {f: (out / f).read_bytes() for f in files}


def test_every_make_foreign_file_both_paths(foreign, tmp_path):
    for name, data in foreign.items():
        samples, reasons, refused = three_ways(data, tmp_path)
        assert refused is None and reasons == {} and len(samples) == 40, name
        assert samples[0] == ("d0/0000000", ["cls", "jpg", "json"]), name
        # raw: the bytes written back are the canonical encoding of the same samples
        assert read_group(data, fast=True, raw=True)[1] == read_group(data, fast=False)[1], name
