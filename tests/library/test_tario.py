"""The tar codec (tarproc.core.tario): round trips, every header dialect, and
damage that must become BadArchive with an offset, never a crash or a hang."""

import io
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tarproc.core.tario import BLOCK, MAX_SPECIAL, TarReader, TarWriter, _pax_record, parse_pax, read_members
from tarproc.errors import BadArchive
from helpers import read_tar, tar_bytes
import make_corpus as mc

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def write(members, **kw):
    out = io.BytesIO()
    w = TarWriter(out, **kw)
    for name, data in members:
        w.write(name, data)
    w.close()
    return out.getvalue()


def read(data, **kw):
    return [(m.name, m.data) for m in read_members(io.BytesIO(data), "t.tar", **kw)]


def fix_checksum(block):
    block = bytearray(block)
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def header(name=b"a.txt", size=0, flag=b"0", **fields):
    """One ustar header with some raw fields (``size=b"..."``) replaced,
    checksum recomputed."""
    info = tarfile.TarInfo(name.decode())
    if isinstance(size, bytes):
        fields["size"] = size
        size = 0
    info.size = size
    info.type = flag
    block = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    offsets = {"size": (124, 136), "mode": (100, 108), "mtime": (136, 148), "name": (0, 100)}
    for key, value in fields.items():
        a, b = offsets[key]
        block[a:b] = value.ljust(b - a, b"\0")
    return fix_checksum(block[:BLOCK])


def pad(data):
    return data + bytes(-len(data) % BLOCK)


# ------------------------------------------------------------ names

name_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")
text_names = st.text(name_chars, min_size=1, max_size=300)
# bytes that are not UTF-8 come back through surrogateescape
byte_names = st.binary(min_size=1, max_size=250).filter(lambda b: b"\0" not in b).map(
    lambda b: b.decode("utf-8", "surrogateescape"))
sizes = st.sampled_from([0, 1, 511, 512, 513, 1024, 1536, 3000])
# a regular file whose name ends in '/' is a directory's name to tarfile (it strips the
# slash) and to GNU tar; the codec keeps it, the samples layer refuses it (rules.bad_key)
text_names = text_names.filter(lambda n: not n.endswith("/"))
byte_names = byte_names.filter(lambda n: not n.endswith("/"))


@SETTINGS
@given(st.lists(st.tuples(st.one_of(text_names, byte_names), sizes, st.integers(0, 255)), max_size=6))
def test_round_trip_arbitrary_names_and_sizes(items):
    members = [(name, bytes([fill]) * size) for name, size, fill in items]
    data = write(members)
    assert len(data) % BLOCK == 0
    assert read(data) == members
    # an independent reader agrees on names and bytes
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:", encoding="utf-8", errors="surrogateescape") as tf:
        got = [(i.name, tf.extractfile(i).read()) for i in tf]
    assert members == got


@pytest.mark.parametrize("name", [
    "a" * 100, "d" * 150 + "/" + "f" * 99, "x" * 200, "dir/" + "y" * 196, "ü/ñ.txt", "日本語/名前.jpg",
])
def test_long_and_non_ascii_names(name):
    data = write([(name, b"abc")])
    assert read(data) == [(name, b"abc")]
    assert read_tar(data) == [(name, b"abc")]


def test_pax_only_when_ustar_cannot_hold_the_name():
    plain = write([("k.jpg", b"x"), ("a" * 100, b""), ("p" * 150 + "/" + "n" * 100, b"")])
    assert b"PaxHeader" not in plain
    assert len(plain) == 512 * 2 + 512 + 512 + 1024  # 3 headers + 1 data block + end marker
    assert plain[257:263] == b"ustar\0"
    assert b"PaxHeader" in write([("x" * 200, b"")])  # no slash to split at
    assert b"PaxHeader" in write([("é.txt", b"")])  # not ASCII
    nonutf8 = "\udcff.bin"
    data = write([(nonutf8, b"q")])  # not UTF-8 but fits: raw in the ustar field
    assert b"PaxHeader" not in data and data[:5] == b"\xff.bin" and read(data) == [(nonutf8, b"q")]
    longer = "d" * 120 + "\udcff.bin"  # does not fit: pax, flagged as binary
    data = write([(longer, b"q")])
    assert b"hdrcharset=BINARY" in data and read(data) == [(longer, b"q")]


def test_fixed_defaults_make_bytes_deterministic():
    members = [("a.txt", b"1"), ("b/c.d.e", b"22" * 400)]
    assert write(members) == write(members)
    with tarfile.open(fileobj=io.BytesIO(write(members))) as tf:
        infos = tf.getmembers()
    assert {(i.mode, i.mtime, i.uid, i.gid, i.uname) for i in infos} == {(0o644, 0, 0, 0, "")}
    with tarfile.open(fileobj=io.BytesIO(write(members, mode=0o600, mtime=1234))) as tf:
        assert {(i.mode, i.mtime) for i in tf} == {(0o600, 1234)}


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_reads_tarfile_formats(fmt):
    members = [("x" * 120 + ".txt", b"long"), ("ü.txt", b"u"), ("e.cls", b""), ("b.bin", bytes(512))]
    if fmt == tarfile.USTAR_FORMAT:
        members = [("d" * 120 + "/x.txt", b"long"), ("e.cls", b""), ("b.bin", bytes(512))]
    assert read(tar_bytes(members, format=fmt)) == members


def test_gnu_base256_size_and_mtime():
    body = b"hello"
    field = b"\x80" + (5).to_bytes(11, "big")
    mtime = b"\xff" + (-1 & ((1 << 88) - 1)).to_bytes(11, "big")  # -1 in base-256
    block = bytearray(header(size=5))
    block[124:136] = field
    block[136:148] = mtime
    data = fix_checksum(block) + pad(body) + bytes(1024)
    (m,) = list(read_members(io.BytesIO(data)))
    assert (m.name, m.data, m.mtime) == ("a.txt", body, -1)


def test_pax_values_win_over_ustar_fields():
    records = _pax_record("path", b"pax.txt") + _pax_record("size", b"7") + _pax_record("mtime", b"123.456")
    x = header(b"././@PaxHeader", len(records), b"x")
    data = x + pad(records) + header(b"ustar-name.txt", 0) + pad(b"1234567") + bytes(1024)
    (m,) = list(read_members(io.BytesIO(data)))
    assert (m.name, m.data, m.mtime) == ("pax.txt", b"1234567", 123)


def test_global_pax_header_applies_to_following_members():
    rec = b"16 mtime=424242\n"
    data = header(b"g", len(rec), b"g") + pad(rec) + header(b"a.txt", 1) + pad(b"A") + \
        header(b"b.txt", 1) + pad(b"B") + bytes(1024)
    assert [(m.name, m.mtime) for m in read_members(io.BytesIO(data))] == [("a.txt", 424242), ("b.txt", 424242)]


def test_gnu_long_link_and_special_members():
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind in (("d", tarfile.DIRTYPE), ("l" * 150, tarfile.SYMTYPE), ("f.txt", tarfile.REGTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "t" * 130 if kind == tarfile.SYMTYPE else ""
            tf.addfile(info, io.BytesIO(b""))
    got = [(m.name, m.type, m.linkname, m.data) for m in read_members(io.BytesIO(raw.getvalue()))]
    assert got == [("d/", "5", "", None), ("l" * 150, "2", "t" * 130, None), ("f.txt", "0", "", b"")]


def test_v7_header_without_magic():
    block = bytearray(header(b"v.txt", 3))
    block[257:265] = bytes(8)
    data = fix_checksum(block) + pad(b"v7!") + bytes(1024)
    assert read(data) == [("v.txt", b"v7!")]


def test_data_after_end_marker_is_read_on():
    a = write([("a.txt", b"a")])
    b = write([("b.txt", b"b")])
    assert read(a + b) == [("a.txt", b"a"), ("b.txt", b"b")]


def test_empty_input_and_lone_end_marker():
    assert read(b"") == []
    assert read(bytes(1024)) == []


# ------------------------------------------------------------ damage


def expect_bad(data, fragment, offset=None):
    with pytest.raises(BadArchive) as e:
        read(data)
    assert fragment in str(e.value)
    assert str(e.value).startswith("t.tar: offset ")
    if offset is not None:
        assert e.value.offset == offset
    return e.value


def test_bad_checksum():
    good = write([("a.txt", b"a"), ("b.txt", b"b")])
    bad = bytearray(good)
    bad[1024 + 3] ^= 1  # name of the second header
    expect_bad(bytes(bad), "checksum", 1024)


def test_non_octal_and_negative_size():
    expect_bad(header(size=b"00000001x4\0") + bytes(1024), "non-octal size", 0)
    block = bytearray(header())
    block[124:136] = b"\xff" * 12  # base-256 -1
    expect_bad(fix_checksum(block) + bytes(1024), "negative size", 0)


@pytest.mark.parametrize("records, problem", [
    (b"abc path=x\n", "bad length"),
    (b"3 p\n", "too small"),
    (b"99 path=x\n", "overruns"),
    (b"10 path=xy ", "no newline"),
    (b"9 pathx\n\n", "keyword=value"),
    (b"x" * 30, "no length field"),
])
def test_malformed_pax_records(records, problem):
    data = header(b"pax", len(records), b"x") + pad(records) + header() + bytes(1024)
    expect_bad(data, problem, 0)
    with pytest.raises(BadArchive):
        parse_pax(records)


def test_bad_pax_size_value():
    rec = b"12 size=-3x\n"
    expect_bad(header(b"pax", len(rec), b"x") + pad(rec) + header() + bytes(1024), "bad pax size")


def test_oversized_special_header_refused_without_reading_it():
    data = header(b"././@LongLink", MAX_SPECIAL + 1, b"L")  # no data follows at all
    expect_bad(data, "limit", 0)


def test_huge_size_claim_does_not_allocate():
    # claims 64 GiB, holds 10 bytes: a clean error, not a MemoryError
    data = header(size=b"%011o\0" % (64 << 30)) + b"0123456789"
    expect_bad(data, "input ends inside member data", 0)


def test_special_header_then_end():
    rec = b"16 path=pax.txt\n"
    x = header(b"pax", len(rec), b"x") + pad(rec)
    expect_bad(x, "before its member", 0)
    expect_bad(x + bytes(1024), "end-of-archive block right after", 1024)


def test_cut_on_block_boundary_warns_or_fails_when_strict():
    data = write([("a.txt", b"a" * 600), ("b.txt", b"b")])[:-1024]
    warnings = []
    reader = TarReader(io.BytesIO(data), "t.tar", warn=warnings.append)
    assert [m.name for m in reader] == ["a.txt", "b.txt"]
    assert reader.truncated and len(warnings) == 1 and "end-of-archive" in warnings[0]
    with pytest.raises(BadArchive) as e:
        read(data, strict=True)
    assert e.value.offset == len(data)


def test_truncation_at_every_offset():
    out = io.BytesIO()
    w = TarWriter(out)
    ends = set()
    for name, body in [("a.txt", b"a" * 700), ("x" * 200, b""), ("c.cls", b"7")]:
        w.write(name, body)
        ends.add(w.bytes_written)
    w.close()
    data = out.getvalue()
    for cut in range(1, len(data) - 1024 + 1):
        part = data[:cut]
        if cut in ends:  # cut cleanly after a member
            names = [m.name for m in TarReader(io.BytesIO(part), "t.tar", warn=lambda m: None)]
            assert names  # the members before the cut are kept
            with pytest.raises(BadArchive):
                read(part, strict=True)
        else:
            with pytest.raises(BadArchive) as e:
                read(part)
            assert 0 <= e.value.offset <= cut


@SETTINGS
@given(st.data())
def test_arbitrary_byte_damage_is_clean(data):
    members = data.draw(st.lists(st.tuples(st.one_of(text_names, byte_names), sizes), min_size=1, max_size=4))
    good = write([(n, b"z" * s) for n, s in members])
    damaged = bytearray(good)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(good) - 1))
        damaged[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(good)))
    try:
        out = read(bytes(damaged[:cut]))
    except BadArchive as e:
        assert isinstance(e.offset, int) and 0 <= e.offset <= cut
    else:
        assert isinstance(out, list)


def test_large_members_round_trip_after_malloc_tuning():
    import random

    from tarproc.core import tario

    r = random.Random(3)
    members = [(f"{i}.bin", r.randbytes(n)) for i, n in enumerate([5, 200_000, 1 << 20, 3, (1 << 20) + 7, 0])]
    data = write(members)
    got = read(data)
    assert got == members and tario._malloc_tuned
    assert read_tar(data) == members


def test_sizes_of_8_gib_and_more_get_a_pax_size():
    size = 9 << 30  # more than ustar's 11 octal digits hold
    head = TarWriter(io.BytesIO())._slow_header(b"big.bin", size)
    assert b" size=%d\n" % size in head and len(head) == 3 * BLOCK
    assert head[-BLOCK:][124:136] == b"00000000000\0"
    # the reader takes the size from the pax record (and refuses to invent the data)
    with pytest.raises(BadArchive) as e:
        read(head + b"x" * 100)
    assert f"(100 of {size} bytes)" in str(e.value)
    with tarfile.open(fileobj=io.BytesIO(head + bytes(1024)), mode="r|") as tf:
        assert next(iter(tf)).size == size


def members_of(data):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*", encoding="utf-8", errors="surrogateescape") as tf:
        return [(m.name.encode("utf-8", "surrogateescape"), tf.extractfile(m).read()) for m in tf if m.isfile()]


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


def _pax_sparse(records, data, name=b"GNUSparseFile.0/k.bin"):
    body = b"".join(mc.pax_record(k, v) for k, v in records)
    return mc.special(b"x", body, name=b"././@PaxHeader") + mc.member(name, data)


@pytest.mark.parametrize("label,data,match", [
    ("map-past-size", _old_sparse(b"k.bin", [(100, 10)], 50, b"x" * 10), "runs past its size"),
    ("map-overlap", _old_sparse(b"k.bin", [(0, 10), (5, 5)], 50, b"x" * 15), "overlaps"),
    ("map-more-than-stored", _old_sparse(b"k.bin", [(0, 600)], 1000, b"x" * 10), "more than the 10 stored"),
    ("holes-over-limit", _old_sparse(b"k.bin", [(4 << 30, 1)], (4 << 30) + 1, b"x"), "holes, over the"),
    ("cut-in-extension", _old_sparse(b"k.bin", [(0, 1)], 10, b"xy", extended=[(5, 1)])[:512 + 100],
     "input ends inside its extension"),
    ("cut-in-data", _old_sparse(b"k.bin", [(0, 1)], 10, b"xy", extended=[(5, 1)])[:1024 + 1],
     "input ends inside its data"),
    ("pax-bad-map", _pax_sparse([("GNU.sparse.map", b"1,2,x"), ("GNU.sparse.size", b"9")], b"ab"),
     "bad GNU.sparse.map"),
    ("pax-no-size", _pax_sparse([("GNU.sparse.map", b"0,2")], b"ab"), "realsize"),
    ("pax-0.0-past-size", _pax_sparse([("GNU.sparse.size", b"9"), ("GNU.sparse.offset", b"8"),
                                       ("GNU.sparse.numbytes", b"2")], b"ab"), "runs past its size"),
    ("pax-1.0-bad-map", _pax_sparse([("GNU.sparse.major", b"1"), ("GNU.sparse.minor", b"0"),
                                     ("GNU.sparse.realsize", b"9")], mc.pad(b"1\nzz\n2\n") + b"ab"),
     "bad number in its map"),
    ("pax-1.0-endless-map", _pax_sparse([("GNU.sparse.major", b"1"), ("GNU.sparse.realsize", b"9")],
                                        mc.pad(b"3\n" + b"1\n" * 2)), "longer than its data"),
])
def test_hostile_sparse_members(sh, tmp_path, label, data, match):
    """Damaged or lying sparse maps: one line naming the member and the
    offset, exit 2, nothing written."""
    cut = label.startswith("cut-")
    (tmp_path / "in.tar").write_bytes(mc.member(b"a.txt", b"ok") + data + (b"" if cut else mc.EOA))
    p = sh("tarcat in.tar > out.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert len(err.splitlines()) == 1 and "sparse member" in err and match in err, err
    assert f"offset {1024 if label[:4] != 'pax-' else 2048}:" in err, err


def test_valid_sparse_members_from_generated_maps(sh, tmp_path):
    """Hand-built sparse members of each format read as the same file,
    and as tarfile reads them."""
    want = bytes(5) + b"ab" + bytes(3) + b"cd" + bytes(4)  # 16 bytes
    parts = [
        _old_sparse(b"o.bin", [(5, 2)], 16, b"abcd", extended=[(10, 2)]),
        _pax_sparse([("GNU.sparse.map", b"5,2,10,2"), ("GNU.sparse.size", b"16"),
                     ("GNU.sparse.name", b"p.bin")], b"abcd"),
        _pax_sparse([("GNU.sparse.major", b"1"), ("GNU.sparse.minor", b"0"), ("GNU.sparse.name", b"q.bin"),
                     ("GNU.sparse.realsize", b"16")], mc.pad(b"2\n5\n2\n10\n2\n") + b"abcd"),
        # pax 0.0 (GNU tar 1.14/1.15): offset/numbytes pairs repeated, the name in the header
        _pax_sparse([("GNU.sparse.size", b"16"), ("GNU.sparse.numblocks", b"2"), ("GNU.sparse.offset", b"5"),
                     ("GNU.sparse.numbytes", b"2"), ("GNU.sparse.offset", b"10"), ("GNU.sparse.numbytes", b"2")],
                    b"abcd", name=b"r.bin"),
    ]
    (tmp_path / "in.tar").write_bytes(b"".join(parts) + mc.member(b"z.txt", b"end") + mc.EOA)
    p = sh("tarcat in.tar")
    assert members_of(p.stdout) == [(b"o.bin", want), (b"p.bin", want), (b"q.bin", want), (b"r.bin", want),
                                    (b"z.txt", b"end")]
    # the big path: spooled to disk, same bytes
    p = sh("tarcat in.tar", env={"TARPROC_BLOB_THRESHOLD": "8"})
    assert members_of(p.stdout)[:4] == [(b"o.bin", want), (b"p.bin", want), (b"q.bin", want), (b"r.bin", want)]
