"""Grouping, ungrouping and the stages (tarproc.core, tarproc.stages.basic), as DESIGN.md states them."""

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tarproc.errors import BadArchive, BadSample, UsageError
from tarproc.core.grouping import SampleWriter, group
from tarproc.core.stats import Stats
from tarproc.stages.basic import parse_fields, parse_slice, pipeline, rekey, rename_fields, select_fields, shuffle, skip, slice_samples, take
from tarproc.core.rules import split_name
from tarproc.core.tario import Member, TarReader

from helpers import read_tar, samples_of


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
