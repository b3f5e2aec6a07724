"""Grouping, ungrouping and the stages (tarproc.core, tarproc.stages.basic), as DESIGN.md states them."""

import io
import json
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tarproc
from tarproc.core.grouping import SampleWriter, group
from tarproc.core.rules import split_name
from tarproc.core.stats import Stats
from tarproc.core.tario import Member, TarReader
from tarproc.errors import BadArchive, BadSample, UsageError
from tarproc.stages.basic import parse_fields, parse_slice, pipeline, rekey, rename_fields, select_fields, shuffle, skip, slice_samples, take
from helpers import jpeg_bytes, read_tar, samples_of, tar_bytes
import make_corpus as mc


def members(*names):
    return [Member(n, n.encode()) for n in names]


def keyed(samples):
    return [(s["__key__"], sorted(k for k in s if not k.startswith("__"))) for s in samples]


@pytest.mark.parametrize("name, expected", [
    ("train/n0142.jpg", ("train/n0142", "jpg")),
    ("a.b/c.seg.png", ("a.b/c", "seg.png")),
    ("k.tar.gz", ("k", "tar.gz")),
    ("dir/sub/x.y", ("dir/sub/x", "y")),
    ("README", None),
    ("dir/.hidden", None),
    ("dir.d/noext", None),
])
def test_split_name(name, expected):
    assert split_name(name) == expected


def test_consecutive_members_with_one_key_form_a_sample():
    stats = Stats()
    got = list(group(members("a.jpg", "a.cls", "a.seg.png", "b/a.jpg", "b/a.cls", "a.txt"), "src", stats))
    assert keyed(got) == [("a", ["cls", "jpg", "seg.png"]), ("b/a", ["cls", "jpg"]), ("a", ["txt"])]
    assert got[0]["a.cls".split(".", 1)[1]] == b"a.cls" and got[0]["__source__"] == "src"
    assert stats.read == 3  # a key that comes back is a different sample, not reordered


def test_skipped_members_are_counted_by_reason():
    stats = Stats()
    ms = members("a.jpg", "README", "d/.x", "b.jpg") + [
        Member("dir/", None, "5"), Member("l.jpg", None, "2", linkname="a.jpg"), Member("h.jpg", None, "1"),
        Member("f", None, "6"),
    ]
    assert keyed(group(ms, "s", stats)) == [("a", ["jpg"]), ("b", ["jpg"])]
    assert stats.members_skipped == 6
    assert stats.reasons == {"names without an extension": 2, "directories": 1, "symlinks": 1,
                             "hard links": 1, "FIFOs": 1}
    assert "members skipped 6" in stats.summary()


def test_duplicate_field_is_an_error_naming_the_key():
    with pytest.raises(BadSample) as e:
        list(group(members("k1.jpg", "k1.cls", "k1.jpg"), "shard.tar"))
    assert "'k1'" in str(e.value) and "'jpg'" in str(e.value) and "shard.tar" in str(e.value)
    assert e.value.key == "k1"


@pytest.mark.parametrize("name", ["/abs.jpg", "../x.jpg", "a/../../x.jpg", "a\nb.jpg", ""])
def test_unsafe_names_are_refused(name):
    with pytest.raises(BadArchive):
        list(group([Member(name, b"")]))


def write(samples, **kw):
    out = io.BytesIO()
    w = SampleWriter(out, **kw)
    for s in samples:
        w.write(s)
    w.close()
    return out.getvalue()


def test_writer_sorts_fields_skips_metadata_and_encodes_str():
    data = write([{"__key__": "k", "__source__": "x", "txt": "é", "cls": b"1", "jpg": bytearray(b"J")}])
    assert read_tar(data) == [("k.cls", b"1"), ("k.jpg", b"J"), ("k.txt", "é".encode())]


@pytest.mark.parametrize("sample, problem", [
    ({"txt": b""}, "no __key__"),
    ({"__key__": "a.b", "txt": b""}, "dot"),
    ({"__key__": "d/", "txt": b""}, "ends in '/'"),
    ({"__key__": "k", "txt": 3}, "int"),
    ({"__key__": "k", "a/b": b""}, "bad field name"),
])
def test_writer_refuses_samples_that_would_not_read_back(sample, problem):
    with pytest.raises(BadSample) as e:
        write([sample])
    assert problem in str(e.value)


keys_st = st.from_regex(r"[a-z0-9_]{1,8}(/[a-z0-9_\-]{1,8}){0,2}", fullmatch=True)
fields_st = st.dictionaries(st.from_regex(r"[a-z0-9]{1,5}(\.[a-z]{1,3})?", fullmatch=True),
                            st.binary(max_size=600), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(keys_st, fields_st), max_size=6, unique_by=lambda t: t[0]))
def test_write_then_group_round_trip(items):
    samples = [{"__key__": k, **f} for k, f in items]
    data = write(samples)
    got = list(group(TarReader(io.BytesIO(data)).members(), "t"))
    assert [{k: v for k, v in s.items() if k != "__source__"} for s in got] == samples
    assert samples_of(data) == {k: f for k, f in items}  # tarfile + the WebDataset rule agree


def numbered(n):
    return [{"__key__": f"s{i:02d}", "cls": b"%d" % i} for i in range(n)]


def test_take_stops_pulling_input():
    pulled = []

    def source():
        for s in numbered(100):
            pulled.append(s["__key__"])
            yield s

    assert [s["__key__"] for s in take(3)(source())] == ["s00", "s01", "s02"]
    assert pulled == ["s00", "s01", "s02"]
    assert list(take(0)(source())) == []


def test_skip_and_slice():
    assert [s["__key__"] for s in skip(8)(numbered(10))] == ["s08", "s09"]
    assert list(skip(20)(numbered(10))) == []
    assert [s["__key__"] for s in slice_samples(1, 9, 3)(numbered(10))] == ["s01", "s04", "s07"]
    assert parse_slice("2:8:3") == slice(2, 8, 3) and parse_slice("5:") == slice(5, None)
    assert parse_slice(":4") == slice(None, 4)
    for bad in ("a:b", "1:2:0", "-1:3", "1:2:3:4"):
        with pytest.raises(UsageError):
            parse_slice(bad)


def test_select_fields_alternatives_renames_and_skips():
    samples = [{"__key__": "a", "jpg": b"J", "cls": b"1"}, {"__key__": "b", "png": b"P", "cls": b"2"},
               {"__key__": "c", "cls": b"3"}]
    stats = Stats()
    got = list(select_fields("img=jpg;png cls", stats)(samples))
    assert got == [{"__key__": "a", "img": b"J", "cls": b"1"}, {"__key__": "b", "img": b"P", "cls": b"2"}]
    assert stats.skipped == 1
    got = list(select_fields("jpg;png")(samples))
    assert got == [{"__key__": "a", "jpg": b"J"}, {"__key__": "b", "png": b"P"}]
    assert parse_fields("a,b c=d;e") == [(None, ["a"]), (None, ["b"]), ("c", ["d", "e"])]
    for bad in ("", "=jpg", "x=;"):
        with pytest.raises(UsageError):
            parse_fields(bad)


def test_rename_and_rekey():
    samples = [{"__key__": "d/k1", "jpeg": b"J", "__source__": "u"}, {"__key__": "k2", "jpeg": b"K"}]
    assert [sorted(s) for s in rename_fields({"jpeg": "jpg"})(samples)] == [
        ["__key__", "__source__", "jpg"], ["__key__", "jpg"]]
    got = [s["__key__"] for s in rekey("{index:04d}-{basename}-{dirname}")(samples)]
    assert got == ["0000-k1-d", "0001-k2-"]
    assert samples[0]["__key__"] == "d/k1"  # the input samples are not changed
    assert [s["__key__"] for s in rekey("{source}/{key}")(samples[:1])] == ["u/d/k1"]
    with pytest.raises(UsageError):
        list(rekey("{nope}")(samples))


def test_shuffle_is_reproducible_and_keeps_every_sample():
    a = [s["__key__"] for s in shuffle(5, seed=1)(numbered(40))]
    assert a == [s["__key__"] for s in shuffle(5, seed=1)(numbered(40))]
    assert a != [s["__key__"] for s in shuffle(5, seed=2)(numbered(40))]
    assert sorted(a) == [f"s{i:02d}" for i in range(40)] and a != sorted(a)
    assert [s["__key__"] for s in shuffle(1, seed=0)(numbered(3))] == ["s00", "s01", "s02"]


def test_pipeline_chains_stages():
    got = pipeline(numbered(20), skip(2), slice_samples(None, None, 2), take(3), rekey("{index}"))
    assert [(s["__key__"], s["cls"]) for s in got] == [("0", b"2"), ("1", b"4"), ("2", b"6")]


@pytest.mark.parametrize("key", ["../x", "/abs", "a/../../b", "tab\there", "esc\x1b[31m", "new\nline",
                                 "csi\x9bx", "del\x7f"])
def test_writers_refuse_what_readers_refuse(key, tmp_path):
    from tarproc.core.grouping import SampleWriter, group
    from tarproc.core.tario import TarReader
    from tarproc.errors import BadArchive, BadSample

    with pytest.raises(BadSample):
        SampleWriter(io.BytesIO()).write({"__key__": key, "txt": b"x"})
    if not key.isprintable():  # the same characters in a field name
        with pytest.raises(BadSample):
            SampleWriter(io.BytesIO()).write({"__key__": "ok", "t" + key + "x": b"x"})
    # and a reader refuses the same name
    data = mc.member((key + ".txt").encode(), b"x") + mc.EOA
    with pytest.raises(BadArchive):
        list(group(TarReader(io.BytesIO(data), "t").members()))


@pytest.mark.parametrize("make, message", [
    (lambda: tarproc.take("3"), "take: n must be a whole number >= 0, not '3'"),
    (lambda: tarproc.skip(-1), "skip: n must be a whole number >= 0, not -1"),
    (lambda: tarproc.shuffle(0), "shuffle: bufsize must be a whole number >= 1, not 0"),
    (lambda: tarproc.slice_samples(1, "x"), "slice_samples: stop must be a whole number >= 0, not 'x'"),
    (lambda: tarproc.slice_samples(0, 5, 0), "slice_samples: step must be a whole number >= 1, not 0"),
])
def test_stage_arguments_are_checked_when_the_stage_is_made(make, message):
    """``take("3")`` raised a bare TypeError in the middle of the run, and
    ``shuffle(0)`` a ValueError from ``randrange``; now one UsageError when
    the stage is made."""
    with pytest.raises(tarproc.UsageError) as e:
        make()
    assert str(e.value) == message


def members_of(data):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*", encoding="utf-8", errors="surrogateescape") as tf:
        return [(m.name.encode("utf-8", "surrogateescape"), tf.extractfile(m).read()) for m in tf if m.isfile()]


@pytest.mark.parametrize("field", [b"__key__", b"__source__", b"__index__", b"__KEY__", b"__"])
def test_metadata_like_fields_are_refused_clearly(sh, tmp_path, field):
    """`x.__key__` used to give a misleading 'appears twice' error, and
    `x.__index__` became metadata that no writer writes back (silently lost).
    A field named like metadata is one clear error naming the member; tarcheck
    reports it as a problem."""
    (tmp_path / "in.tar").write_bytes(mc.member(b"x.txt", b"1") + mc.member(b"x." + field, b"evil") + mc.EOA)
    for cmd in ("tarcat in.tar", "tarshow in.tar", "tar2tsv in.tar", "tar2json in.tar"):
        p = sh(cmd + " > /dev/null", ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2 and len(err.splitlines()) == 1, (cmd, err)
        assert "offset 1024" in err and "metadata name" in err, (cmd, err)
    p = sh("tarcheck --json in.tar", ok=False)
    assert p.returncode == 1
    probs = json.loads(p.stdout)["shards"][0]["problems"]
    assert [q["kind"] for q in probs] == ["metadata_fields"]


def test_names_kept_as_they_are(sh, tmp_path):
    """Names are never normalised: `./x` and `x` are different keys, NFC and
    NFD spellings of `café` are different keys (bytes kept), dots in
    directories stay in the key, an empty field (`x.`) and a field `.` (`x..`)
    read and write back; upper-case extensions become lower-case fields (as
    webdataset reads them)."""
    nfd, nfc = "cafe\u0301".encode(), "caf\u00e9".encode()
    names = [b"./x.jpg", b"x.JPG", nfd + b".txt", nfc + b".txt", b"a.b/c.d.jpg", b"e.", b"f.."]
    (tmp_path / "in.tar").write_bytes(b"".join(mc.member(n, n) for n in names) + mc.EOA)
    p = sh("tarcat in.tar")
    assert members_of(p.stdout) == [(n.replace(b"JPG", b"jpg"), n) for n in names]
    rows = sh("tar2tsv -f txt in.tar").stdout.decode().splitlines()
    assert [r.split("\t")[0] for r in rows[1:]] == ["./x", "x", "cafe\u0301", "caf\u00e9", "a.b/c", "e", "f"]
    # tarcheck counts 7 samples: none is merged with another
    rep = json.loads(sh("tarcheck --json in.tar", ok=False).stdout)
    assert rep["shards"][0]["samples"] == 7


def test_upper_case_extensions_give_webdatasets_field_names(sh, tmp_path):
    import webdataset as wds

    import tarproc

    members = [("x1.JPEG", jpeg_bytes()), ("x1.Cls", b"3"), ("a.b/C2.Seg.PNG", b"p"), ("a.b/C2.cls", b"4")]
    (tmp_path / "in.tar").write_bytes(tar_bytes(members))
    ours = [{k: v for k, v in s.items() if k != "__source__"}
            for s in tarproc.iter_samples(str(tmp_path / "in.tar"))]
    theirs = [{k: v for k, v in s.items() if not k.startswith("__") or k == "__key__"}
              for s in wds.WebDataset(str(tmp_path / "in.tar"), shardshuffle=False)]
    assert ours == theirs and sorted(ours[0]) == ["__key__", "cls", "jpeg"] and ours[1]["__key__"] == "a.b/C2"
    # -f finds the lower-cased field; written back, the member is named by the field (keys keep their case)
    out = sh("tarcat -f 'jpeg cls' in.tar | tar tf -").stdout.decode().split()
    assert out == ["x1.cls", "x1.jpeg"]
    assert sh("tarfirst -f jpeg in.tar").stdout == members[0][1]
    # the same field twice once lower-cased is a duplicate, as for webdataset
    (tmp_path / "dup.tar").write_bytes(tar_bytes([("d.JPG", b"1"), ("d.jpg", b"2")]))
    p = sh("tarcat dup.tar > /dev/null", ok=False)
    assert p.returncode == 2 and b"'jpg' appears twice" in p.stderr
    with pytest.raises(ValueError):
        list(wds.WebDataset(str(tmp_path / "dup.tar"), shardshuffle=False))
    p = sh("tarcheck dup.tar", ok=False)
    assert p.returncode == 1 and b"duplicate_fields" in p.stdout
    # a sample made in Python is written with its fields as given
    tarproc.write_samples(str(tmp_path / "py.tar"), [{"__key__": "k", "TXT": b"a"}])
    assert [n for n, _ in read_tar((tmp_path / "py.tar").read_bytes())] == ["k.TXT"]
