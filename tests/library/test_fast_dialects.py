"""The fast path on headers of other writers (core/dialects.py through
core/passthru.py) against the general parser: every file that
``../shared/foreign/make_foreign.py`` writes (GNU tar gnu/posix/ustar,
bsdtar, tarfile GNU/PAX/USTAR, webdataset) and the real-data shards give
the same samples, counts, errors and output bytes both ways, as do hostile
variants (bad checksums, malformed pax records, a pax path with a NUL,
overriding pax sizes, members across buffer boundaries)."""

import io
import os
import subprocess
import sys
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REALDATA, require
from test_passthru import canonical, run, same
from tarproc.core import passthru
from tarproc.core.dialects import member_reader, parse_pax_fast

MAKE_FOREIGN = os.path.join(os.path.dirname(REALDATA), "foreign", "make_foreign.py")
DIALECTS = ["gnutar-gnu", "gnutar-pax", "gnutar-ustar", "bsdtar", "tarfile-gnu", "tarfile-pax", "tarfile-ustar",
            "webdataset"]


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """The foreign set, 150 samples, jpg fields of 1 to 9 KB (members cross
    every buffer size used below)."""
    require("tar")
    require("bsdtar")
    out = tmp_path_factory.mktemp("foreign")
    assert os.path.exists(MAKE_FOREIGN), MAKE_FOREIGN
    p = subprocess.run([sys.executable, MAKE_FOREIGN, "-o", str(out), "-n", "150", "--sizes", "3,6000,120"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    files = {name: (out / f"{name}.tar").read_bytes() for name in DIALECTS}
    return files


@pytest.fixture(params=[passthru.CHUNK, 700, 1536])
def chunk(request, monkeypatch):
    monkeypatch.setattr(passthru, "CHUNK", request.param)
    return request.param


def general_calls(data, monkeypatch):
    """How many members the general parser read on the fast path."""
    from tarproc.core import tario

    calls = []
    orig = tario.TarReader.members

    def counting(self):
        for m in orig(self):
            calls.append(m.name)
            yield m

    monkeypatch.setattr(tario.TarReader, "members", counting)
    run(data, fast=True, raw=True)
    return calls


@pytest.mark.parametrize("name", DIALECTS)
def test_every_dialect_is_read_and_written_as_the_general_path_does(foreign, name, chunk):
    out, samples, err, stats, _ = same(foreign[name])
    assert err is None and len(samples) == 150
    assert [s["__key__"] for s in samples[:2]] == ["d0/0000000", "d1/0000001"]
    assert tarfile.open(fileobj=io.BytesIO(out)).getnames()[:3] == ["d0/0000000.cls", "d0/0000000.jpg",
                                                                     "d0/0000000.json"]


@pytest.mark.parametrize("name", DIALECTS)
def test_every_dialect_takes_the_fast_path(foreign, name, monkeypatch):
    """Only the end-of-archive marker reaches the general parser."""
    assert general_calls(foreign[name], monkeypatch) == []


def test_realdata_shards(chunk):
    names = sorted(f for f in os.listdir(REALDATA) if f.endswith(".tar"))
    assert names
    for name in names:
        with open(os.path.join(REALDATA, name), "rb") as f:
            same(f.read())


def test_commands_on_every_dialect(foreign, sh, tmp_path):
    """The installed tarcat (also from a gzipped pipe), tarsplit and tarpcat
    write what the general path writes."""
    for i, (name, data) in enumerate(foreign.items()):
        (tmp_path / f"{name}.tar").write_bytes(data)
        expected = run(data, fast=False)[0]
        assert sh(f"tarcat {name}.tar").stdout == expected, name
        if i % 3 == 0:
            assert sh(f"gzip -c {name}.tar | tarcat").stdout == expected, name
        elif i % 3 == 1:
            sh(f"tarsplit -q -n 1000 -o {name}-%06d.tar {name}.tar")
            assert (tmp_path / f"{name}-000000.tar").read_bytes() == expected, name
        else:
            assert sh(f"tarpcat -w 1 {name}.tar").stdout == expected, name


# ---------------------------------------------------------------- hostile variants, built by hand


def header(name, size, flag=b"0", mode=b"0000664\0", mtime=b"15301275571\0", magic=b"ustar  \0",
           uname=b"user", sizef=None, chk=None, prefix=b""):
    """A 512-byte header block as other writers make them (GNU magic by default)."""
    sizef = b"%011o\0" % size if sizef is None else sizef
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = mode
    block[108:124] = b"0001750\0" * 2
    block[124:136] = sizef
    block[136:148] = mtime
    block[148:156] = b" " * 8
    block[156:157] = flag
    block[257:265] = magic
    block[265:265 + len(uname)] = uname
    block[297:297 + len(uname)] = uname
    block[345:345 + len(prefix)] = prefix
    if chk is None:
        chk = b"%06o\0 " % sum(block)
    block[148:156] = chk
    return bytes(block)


def record(key, value):
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body


def member(name, data, records=None, pax_name=b"././@PaxHeader", **kw):
    """A member (and a pax header before it, from ``records``: a list of
    ``(key, value)`` or the raw pax data)."""
    out = []
    if records is not None:
        body = records if isinstance(records, bytes) else b"".join(record(k, v) for k, v in records)
        out += [header(pax_name, len(body), flag=b"x", mode=b"0000000\0", magic=b"ustar\x0000"), body,
                bytes(-len(body) % 512)]
    out += [header(name, len(data), **kw), data, bytes(-len(data) % 512)]
    return b"".join(out)


def shard(*members):
    return b"".join(members) + bytes(1024)


def good(i, n=700):
    return member(b"k%03d.txt" % i, bytes([i]) * (n + i), [(b"mtime", b"1795521706.75"), (b"atime", b"17.5")])


def off_by(n, **kw):
    """A header whose checksum is off by ``n`` (what a wrong cached sum would accept)."""
    right = int(header(b"a.txt", 1, **kw)[148:154], 8)
    return member(b"a.txt", b"x", chk=b"%06o\0 " % (right + n), **kw)


MTIME = (b"mtime", b"1795521706.756612")
HOSTILE = {
    "type 1 checksum off by one": [off_by(-1, flag=b"\x01", magic=bytes(8), uname=b"")],
    "type 1": [off_by(0, flag=b"\x01", magic=bytes(8), uname=b"")],
    "type x checksum off": [off_by(-0x78 + 1, flag=b"x", magic=bytes(8), uname=b"")],
    "mode starting with 1": [member(b"a.txt", b"x", mode=b"\x01000644\0")],
    "mtime starting with 1": [member(b"a.txt", b"x", mtime=b"\x010000000000\0")],
    "checksum off by one": [off_by(1), off_by(-1)],
    "plain": [member(b"a.txt", b"x" * 600)],
    "bad checksum": [member(b"a.txt", b"x", chk=b"000001\0 ")],
    "signed checksum": [member(b"a\xe9.txt", b"x", chk=b"%06o\0 " % (sum(header(b"a\xe9.txt", 1)[:148]) + 256
                                                                      + sum(header(b"a\xe9.txt", 1)[156:]) - 256))],
    "pax bogus length": [member(b"a.txt", b"x", b"99 mtime=1\n")],
    "pax length too short": [member(b"a.txt", b"x", b"3 mtime=1\n")],
    "pax length zero": [member(b"a.txt", b"x", b"0 mtime=1\n")],
    "pax no newline": [member(b"a.txt", b"x", b"10 mtime=12")],
    "pax no equals": [member(b"a.txt", b"x", b"10 mtime12\n")],
    "pax empty key": [member(b"a.txt", b"x", b"6 =123\n")],
    "pax empty value": [member(b"a.txt", b"x", [(b"path", b"")])],
    "pax empty mtime": [member(b"a.txt", b"x", [(b"mtime", b"")])],
    "pax nul padding": [member(b"a.txt", b"x", record(b"mtime", b"1") + b"\0" * 20)],
    "pax path with NUL": [member(b"a.txt", b"x", [(b"path", b"b\0.txt")])],
    "pax path overrides": [member(b"a.txt", b"x", [(b"path", b"dir/b.jpg"), MTIME])],
    "pax long path": [member(b"a.txt", b"x", [(b"path", b"d" * 150 + b"/b.jpg")])],
    "pax path unsafe": [member(b"a.txt", b"x", [(b"path", b"../b.jpg")])],
    "pax path absolute": [member(b"a.txt", b"x", [(b"path", b"/b.jpg")])],
    "pax path newline": [member(b"a.txt", b"x", [(b"path", b"b\n.jpg")])],
    "pax path no field": [member(b"a.txt", b"x", [(b"path", b"noext")])],
    "pax path upper": [member(b"a.txt", b"x", [(b"path", b"b.JPG")])],
    "pax path twice": [member(b"a.txt", b"x", [(b"path", b"b.jpg"), (b"path", b"c.jpg")])],
    "pax size larger": [member(b"a.txt", b"y" * 1500, [(b"size", b"1500")], sizef=b"%011o\0" % 3)],
    "pax size smaller": [member(b"a.txt", b"y" * 10, [(b"size", b"10")], sizef=b"%011o\0" % 600)],
    "pax size zero": [member(b"a.txt", b"", [(b"size", b"0")], sizef=b"%011o\0" % 0)],
    "pax size negative": [member(b"a.txt", b"x", [(b"size", b"-1")])],
    "pax size not a number": [member(b"a.txt", b"x", [(b"size", b"12a")])],
    "pax size huge": [member(b"a.txt", b"x", [(b"size", b"9" * 40)])],
    "pax mtime bad": [member(b"a.txt", b"x", [(b"mtime", b"12x.5")])],
    "pax mtime negative": [member(b"a.txt", b"x", [(b"mtime", b"-12.5")])],
    "pax mtime fraction junk": [member(b"a.txt", b"x", [(b"mtime", b"12.x")])],
    "pax other key": [member(b"a.txt", b"x", [(b"comment", b"hi")])],
    "pax linkpath": [member(b"a.txt", b"x", [(b"linkpath", b"z")])],
    "pax sparse": [member(b"a.txt", b"x", [(b"GNU.sparse.major", b"1")])],
    "pax hdrcharset": [member(b"a.txt", b"x", [(b"hdrcharset", b"BINARY")])],
    "pax then directory": [member(b"d/", b"", [MTIME], flag=b"5")],
    "pax then symlink": [member(b"l.txt", b"", [MTIME], flag=b"2")],
    "pax then pax": [member(b"a.txt", b"x", [MTIME])[:1024] + member(b"a.txt", b"x", [MTIME])],
    "pax at the end": [member(b"a.txt", b"x", [MTIME])[:1024]],
    "pax too large": [member(b"a.txt", b"x", [(b"atime", b"1" * 5000)])],
    "global pax": [member(b"a.txt", b"x", [(b"path", b"g.txt")])[:1024].replace(b"x\0", b"g\0", 1)],
    "bad mode": [member(b"a.txt", b"x", mode=b"0009644\0")],
    "bad mtime": [member(b"a.txt", b"x", mtime=b"1530127557x\0")],
    "bad mtime under pax mtime": [member(b"a.txt", b"x", [MTIME], mtime=b"1530127557x\0")],
    "bad size": [member(b"a.txt", b"x", sizef=b"00000000z01\0")],
    "base-256 size": [member(b"a.txt", b"x", sizef=b"\x80" + bytes(10) + b"\x01")],
    "base-256 mtime": [member(b"a.txt", b"x", mtime=b"\x80" + bytes(10) + b"\x01")],
    "spaces in fields": [member(b"a.txt", b"x", mode=b"000664 \0", sizef=b"  00000001 \0")],
    "posix prefix": [member(b"a.txt", b"x", magic=b"ustar\x0000", prefix=b"pre")],
    "gnu prefix area": [member(b"a.txt", b"x", prefix=b"ignored")],
    "v7 no magic": [member(b"a.txt", b"x", magic=bytes(8), uname=b"")],
    "contiguous file": [member(b"a.txt", b"x", flag=b"7")],
    "unknown type": [member(b"a.txt", b"xyz", flag=b"Q")],
    "longlink": [member(b"././@LongLink", b"l" * 120 + b".txt\0", flag=b"L") + member(b"l" * 100, b"q")],
    "metadata field": [member(b"a.__key__", b"x", [MTIME])],
    "repeated field": [member(b"a.txt", b"x"), member(b"a.txt", b"y", [MTIME])],
    "dotdot": [member(b"a..b.txt", b"x", [MTIME])],
    "name garbage after NUL": [member(b"a.txt\0zz", b"x")],
    "large member": [member(b"big.bin", bytes(200000), [MTIME])],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_variants(case, chunk):
    """Each case amid good members (before and after): the fast path gives
    what the general path gives, errors included."""
    body = HOSTILE[case]
    for data in (shard(*body), shard(good(1), *body, good(2)), shard(*[good(i) for i in range(5)], *body, good(9))):
        same(data)
        for cut in range(0, len(data), max(509, len(data) // 50)):  # and cut anywhere
            same(data[:cut])


def test_hostile_variants_show_their_errors():
    """A few of them are errors on both paths (so the comparison above is
    not of two successes)."""
    for case, words in [("bad checksum", "bad header checksum"), ("pax bogus length", "overruns"),
                        ("pax path with NUL", "NUL byte in pax path"), ("pax size negative", "negative"),
                        ("bad mode", "non-octal mode"),
                        ("pax path unsafe", ".."), ("repeated field", "appears twice")]:
        err = run(shard(good(1), *HOSTILE[case]), fast=True, raw=True)[2]
        assert err is not None and words in err, (case, err)
    # a pax mtime that is not a number: a warning, the header's time holds (GNU tar, bsdtar, tarfile read on)
    _, samples, err, _, (_, _, warnings) = run(shard(good(1), *HOSTILE["pax mtime bad"]), fast=True, raw=True)
    assert err is None and [s["__key__"] for s in samples][-1] == "a" and len(warnings) == 1 \
        and "bad pax mtime value b'12x.5' (the header's time is used)" in warnings[0], (err, warnings)
    _, samples, err, _, _ = run(shard(*HOSTILE["pax path overrides"]), fast=True, raw=True)
    assert err is None and samples[0]["__key__"] == "dir/b" and samples[0]["jpg"] == b"x"
    _, samples, err, _, _ = run(shard(*HOSTILE["pax size larger"]), fast=True, raw=True)
    assert err is None and samples[0]["txt"] == b"y" * 1500


def test_parse_pax_fast_takes_only_plain_records():
    assert parse_pax_fast(record(b"mtime", b"1.5") + record(b"path", b"a b=c.txt")) == {b"mtime": b"1.5",
                                                                                     b"path": b"a b=c.txt"}
    assert parse_pax_fast(b"") == {}
    for bad in [b"11 mtime=1.5", b"12 mtime=1.5\n", b"x mtime=1.5\n", record(b"mtime", b"1\n2"),
                record(b"foo", b"1"), record(b"mtime", b""), record(b"mtime", b"1") + b"\0"]:
        assert parse_pax_fast(bad) is None, bad


def test_a_member_reader_hands_unusual_headers_to_the_general_parser():
    read = member_reader()
    data = shard(good(1))
    q, name, size = read(data, 0, len(data))
    assert (q, name, size) == (1024, None, 701)
    assert read(data, 0, 1500) == 1536  # the pax header and its member's header do not fit: bytes needed
    assert read(bytes(1024), 0, 1024) is None
    damaged = bytearray(data)
    damaged[1030] ^= 1
    assert read(bytes(damaged), 0, len(data)) is None


RECORDS = st.lists(st.tuples(st.sampled_from([b"mtime", b"atime", b"ctime", b"path", b"size", b"uid", b"uname",
                                              b"comment"]),
                             st.binary(max_size=12) | st.sampled_from([b"1.5", b"12", b"a.txt", b"d/x.jpg"])),
                   max_size=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from([b"a.txt", b"a.jpg", b"b.txt", b"d/c.cls", b"A.TXT", b"x"]),
                          st.integers(0, 3000), st.none() | RECORDS, st.booleans()), max_size=8),
       st.integers(0, 1 << 16), st.sampled_from([512, 700, 1536, 4096]))
def test_any_pax_records_any_cut(items, cut, size):
    parts = []
    for name, n, records, damage in items:
        m = bytearray(member(name, bytes([n % 256]) * n, records))
        if damage:
            m[n % len(m)] ^= 0x20
        parts.append(bytes(m))
    data = shard(*parts)
    old = passthru.CHUNK
    passthru.CHUNK = size
    try:
        same(data)
        same(data[: cut % (len(data) + 1)])
    finally:
        passthru.CHUNK = old


def test_mixed_with_canonical_members(foreign, chunk):
    """Our own members, then another writer's, then ours again: raw copies
    and rebuilt headers side by side."""
    ours = canonical([(f"z{i:03d}.txt", b"q" * (i * 97)) for i in range(20)])
    data = ours[:-1024] + foreign["webdataset"] + foreign["gnutar-gnu"] + ours
    same(data)


# ---------------------------------------------------------------- members (tarcheck, tarindex)


def members_of(data, fast, chunk_size=None):
    """Every member's fields, the reader's state after each, and the error, read either way."""
    from tarproc.core.tario import TarReader

    reader = TarReader(io.BufferedReader(io.BytesIO(data), 4096), "in", warn=lambda m: None)
    out = []
    err = None
    try:
        for m in (passthru.fast_members(reader) if fast else reader.members()):
            out.append((m.name, m.data, m.type, m.mode, m.mtime, m.linkname, m.offset, m.start, reader.offset))
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    return out, err, reader.offset, reader.truncated, reader.trailing


def same_members(data):
    old = members_of(data, False)
    assert members_of(data, True) == old
    return old


def test_members_of_every_dialect(foreign, chunk):
    for name, data in foreign.items():
        members, err, *_ = same_members(data)
        assert err is None and len(members) == 450, name


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_members_of_hostile_variants(case, monkeypatch):
    data = shard(good(1), *HOSTILE[case], good(2))
    for size in (700, passthru.CHUNK):
        monkeypatch.setattr(passthru, "CHUNK", size)
        same_members(data)
        same_members(data + b"junk after the end" * 40)
        for cut in range(0, len(data), max(509, len(data) // 10)):
            same_members(data[:cut])


def test_tarindex_and_tarcheck_on_every_dialect(foreign, sh, tmp_path):
    """Sample offsets of tarindex are where each sample's first header
    (pax included) starts, as tarfile sees them; tarcheck finds nothing wrong."""
    import json

    for name in ("gnutar-pax", "webdataset", "bsdtar"):
        (tmp_path / f"{name}.tar").write_bytes(foreign[name])
        sh(f"tarindex -q {name}.tar -o {name}.json")
        index = json.loads((tmp_path / f"{name}.json").read_text())
        assert index["shardlist"][0]["nsamples"] == 150
        assert index["shardlist"][0]["filesize"] == len(foreign[name])
        from test_index import sidecar_starts

        with tarfile.open(fileobj=io.BytesIO(foreign[name])) as tf:
            firsts = [m.offset for m in tf.getmembers() if m.name.endswith(".cls")]
        starts = sidecar_starts(tmp_path / name)
        assert starts == firsts, name
        out = sh(f"tarcheck {name}.tar", ok=False)
        assert out.returncode == 0, out.stderr
        assert b"150" in out.stdout


# ---------------------------------------------------------------- the lane: headers like those taken before


STAMP = b"15301275571\0"
TIMES = [(b"mtime", b"1795521706.756612345"), (b"atime", b"1795521706.756612345"), (b"ctime", b"1795521706.756612345")]


def plain_like(i, **kw):
    """A plain member shaped as the run before it: size, mode, time, tail."""
    return member(b"k%03d.txt" % i, bytes([65 + i % 26]) * 100, **kw)  # (the time: STAMP)


def pax_like(i, records=TIMES, **kw):
    """A member after a pax header of three time records, shaped as the run before it."""
    return member(b"k%03d.txt" % i, bytes([65 + i % 26]) * 100, records, **kw)


def pax_data(records=TIMES):
    return b"".join(record(k, v) for k, v in records)


def _swap_lengths(data):
    """The first two records' length fields changed (by one each way), the data's size kept."""
    first = data.index(b"\n") + 1
    a, b = int(data[: data.index(b" ")]), int(data[first : data.index(b" ", first)])
    return b"%d" % (a - 1) + data[data.index(b" ") : first] + b"%d" % (b + 1) + data[data.index(b" ", first) :]


def _nth(data, old, new, n=0):
    at = -1
    for _ in range(n + 1):
        at = data.index(old, at + 1)
    return data[:at] + new + data[at + len(old) :]


LIKE = {
    # plain members after a run of plain members with the same size, mode, time and tail
    "checksum one more": [plain_like(7, chk=b"%06o\0 " % (int(plain_like(7)[148:154], 8) + 1))],
    "checksum one less": [plain_like(7, chk=b"%06o\0 " % (int(plain_like(7)[148:154], 8) - 1))],
    "checksum not octal": [plain_like(7, chk=b"0x1234\0 ")],
    "checksum base-256": [plain_like(7, chk=b"\x80\0\0\0\0\0\x12\x34")],
    "time not octal": [plain_like(7, mtime=b"1530127557x\0")],
    "mode not octal": [plain_like(7, mode=b"0000694\0")],
    "size base-256": [plain_like(7, sizef=b"\x80" + bytes(10) + b"\x64")],
    "size not octal": [plain_like(7, sizef=b"0000000014z\0")],
    "size as spaces": [plain_like(7, sizef=b" 0000000144 ")],
    "posix prefix": [plain_like(7, magic=b"ustar\x0000", prefix=b"pre")],
    "type 1": [plain_like(7, flag=b"1")],
    "directory": [member(b"k007.txt/", b"", mtime=STAMP, flag=b"5")],
    "same key, field twice": [plain_like(5), plain_like(5)],
    "same key, field after a dot": [member(b"k005..txt", b"x" * 100, mtime=STAMP)],
    "same key, upper-case field": [member(b"k005.TXT", b"x" * 100, mtime=STAMP)],
    "same key, metadata field": [member(b"k005.__key__", b"x" * 100, mtime=STAMP)],
    "same key, no field": [member(b"k005", b"x" * 100, mtime=STAMP)],
    "longer key, same start": [member(b"k0055.txt", b"x" * 100, mtime=STAMP)],
    "key of a directory": [member(b"k005/a.txt", b"x" * 100, mtime=STAMP)],
    "not ASCII": [member(b"k005.t\xe9t", b"x" * 100, mtime=STAMP)],
    "GNU long name": [member(b"././@LongLink", b"k" * 120 + b".txt\0", flag=b"L", mtime=STAMP)
                      + plain_like(7)],
    "cut after the header": [plain_like(7)[:512]],
    # pax members after a run of pax members with the same header block, record shape and member header
    "pax checksum one more": [pax_like(7)[:148] + b"%06o\0 " % (int(pax_like(7)[148:154], 8) + 1) + pax_like(7)[156:]],
    "pax record lengths swapped": [pax_like(7, _swap_lengths(pax_data()))],
    "pax record length wrong": [pax_like(7, _nth(pax_data(), b"30 atime", b"31 atime"))],
    "pax mtime not digits": [pax_like(7, _nth(pax_data(), b"1795521706.7", b"179552170x.7"))],
    "pax mtime fraction junk": [pax_like(7, _nth(pax_data(), b".756612345", b".75661234x"))],
    "pax atime with a newline": [pax_like(7, _nth(pax_data(), b"1795521706.7", b"179552\n706.7", 1))],
    "pax size record": [pax_like(7, _nth(pax_data(), b"30 ctime=1795521706.756612345", b"30 size=000000000000000000001"))],
    "pax path record": [pax_like(7, _nth(pax_data(), b"30 ctime=1795521706.756612345", b"30 path=k007.jpg/////////////"))],
    "pax key changed": [pax_like(7, _nth(pax_data(), b"atime", b"xtime"))],
    "pax global": [pax_like(7)[:156] + b"g" + pax_like(7)[157:]],
    "pax then base-256 size": [pax_like(7, sizef=b"\x80" + bytes(10) + b"\x64")],
    "pax then bad checksum": [pax_like(7, chk=b"000001\0 ")],
    "pax then directory": [member(b"k007.txt/", b"", TIMES, flag=b"5")],
    "pax cut in its data": [pax_like(7)[:700]],
    "pax cut after it": [pax_like(7)[:1024]],
}


@pytest.mark.parametrize("case", sorted(LIKE))
def test_lane_variants(case, chunk):
    """Each case after and before a run of members shaped as it is (the lane
    takes those without asking member_reader, from what it took before):
    the fast path gives what the general path gives, errors included, cut anywhere."""
    like = plain_like if not case.startswith("pax") else pax_like
    data = shard(*[like(i) for i in range(6)], *LIKE[case], *[like(i) for i in range(8, 11)])
    same(data)
    for cut in range(3 * 512, len(data), max(509, len(data) // 24)):
        same(data[:cut])


def test_lane_variants_are_what_they_say():
    """Some of them are errors or skips on both paths (so the comparison above is not of two successes)."""
    for case, words in [("checksum one more", "bad header checksum"), ("checksum one less", "bad header checksum"),
                        ("time not octal", "mtime"), ("same key, field twice", "appears twice"),
                        ("pax record lengths swapped", "pax"), ("pax record length wrong", "pax"),
                        ("pax checksum one more", "bad header checksum"), ("pax then bad checksum", "checksum")]:
        like = plain_like if not case.startswith("pax") else pax_like
        err = run(shard(*[like(i) for i in range(6)], *LIKE[case]), fast=True, raw=True)[2]
        assert err is not None and words in err, (case, err)
    _, samples, err, stats, _ = run(shard(*[plain_like(i) for i in range(6)], *LIKE["size base-256"]), True, True)
    assert err is None and samples[-1]["__key__"] == "k007" and len(samples[-1]["txt"]) == 100


def test_the_lane_takes_members_like_those_taken_before(monkeypatch):
    """After the first members, member_reader is not asked: plain members
    and members after a pax header of time records alike."""
    calls = []
    orig = passthru.member_reader

    def counted():
        member_at = orig()

        def at(*args):
            calls.append(args[1])
            return member_at(*args)

        return at

    monkeypatch.setattr(passthru, "member_reader", counted)
    monkeypatch.setattr(passthru, "CHUNK", 4096)  # (the first buffer is read by batch(): a few members)
    for like in (plain_like, pax_like):
        calls.clear()
        data = shard(*[like(i) for i in range(200)])
        same(data)
        assert 0 < len(calls) <= 2 * 8, (like, len(calls))  # (2 fast runs of 200: a few members each to learn from)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"mtime", b"atime", b"ctime"]),
                          st.text("0123456789.-x\n ", min_size=1, max_size=14).map(str.encode)), min_size=1, max_size=3),
       st.binary(max_size=6), st.integers(0, 200))
def test_a_shape_matches_only_time_records(records, noise, at):
    """Data that the shape of time records taken matches is time records
    as times_only() takes them (record lengths included)."""
    from tarproc.core.dialects import times_only

    base = b"".join(record(k, v) for k, v in TIMES)
    shape, start, end = passthru._shape(base)
    assert shape(base) is not None and base[start:end] == b"1795521706"
    other = b"".join(record(k, v) for k, v in records)
    for data in (other, base[: at % len(base)] + noise + base[at % len(base) + len(noise) :]):
        data = data[: len(base)]
        if shape(data) is not None:
            assert times_only(data), data
        s = passthru._shape(data) if times_only(data) else None
        if s is not None:
            assert s[0](data) is not None
            assert int(data[s[1] : s[2]]) == int(parse_pax_fast(data)[b"mtime"].split(b".")[0])


def test_members_with_their_names_split(foreign, monkeypatch):
    """fast_members(split_names=True): the same members, each with the
    (key, field) classify() gives, or None where it must be asked."""
    from tarproc.core.rules import classify
    from tarproc.core.tario import TarReader

    monkeypatch.setattr(passthru, "CHUNK", 1536)
    names = [b"k001.txt", b"k001.jpg", b"k002.txt", b"d/k002.txt", b"k0020.txt", b"k002.tar.gz", b"k002..txt",
             b"k002.TXT", b"k002", b"k002.__key__", b"k.002.txt", b"a b/c.d e"]
    built = shard(*[member(n, b"x" * 100) for n in names], *[pax_like(i) for i in range(4)],
                  member(b"k009.txt", b"y", [(b"path", b"dir/e.f.jpg"), MTIME]))
    for data in (*foreign.values(), built):
        def read(split):
            reader = TarReader(io.BufferedReader(io.BytesIO(data), 4096), "in", warn=lambda m: None)
            return list(passthru.fast_members(reader, split_names=split))

        plain, split = read(False), read(True)
        assert [m for m, _ in split] and len(split) == len(plain)
        for m, (m2, parts) in zip(plain, split):
            assert (m.name, m.data, m.offset) == (m2.name, m2.data, m2.offset)
            assert parts is None or parts == classify(m.name), (m.name, parts)
        assert sum(parts is not None for _, parts in split) >= len(split) - 8


@pytest.mark.parametrize("case", sorted(LIKE))
def test_members_of_lane_variants(case, monkeypatch):
    """fast_members() on the lane's cases: its shortcut (_taker) takes
    members like those it took, and nothing the general parser reads otherwise."""
    like = plain_like if not case.startswith("pax") else pax_like
    data = shard(*[like(i) for i in range(6)], *LIKE[case], *[like(i) for i in range(8, 11)])
    monkeypatch.setattr(passthru, "CHUNK", 1536)
    same_members(data)
    for cut in range(3 * 512, len(data), max(509, len(data) // 16)):
        same_members(data[:cut])


def test_written_size_of_raw_samples(foreign):
    """written_size() of a sample copied as read is the bytes SampleWriter writes for it (tarsplit -s counts so)."""
    from tarproc.core.grouping import SampleWriter, written_size
    from tarproc.core.tario import TarReader

    class Count:
        n = 0

        def write(self, b):
            self.n += len(b)

    data = foreign["webdataset"] + foreign["gnutar-gnu"][:20 * 1024] + bytes(1024)
    reader = TarReader(io.BufferedReader(io.BytesIO(data), 4096), "in", warn=lambda m: None)
    raws = 0
    for s in passthru.fast_group(reader, "in", None, raw=True):
        out = Count()
        SampleWriter(out).write(s)
        raws += s.raw is not None
        assert written_size(s) == out.n, s["__key__"]
        s.raw = None
        assert written_size(s) == out.n, s["__key__"]
    assert raws >= 150
