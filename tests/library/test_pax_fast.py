"""core/dialects' shortcuts for pax headers (the one-mtime-record regex, the
cache of pax header blocks already checked) accept exactly what the slow
checks accept: agreement on arbitrary records, and damage after a cached
block is still found where the general parser finds it."""

import io
import tarfile

from hypothesis import given, settings
from hypothesis import strategies as st

from tarproc.core import passthru
from tarproc.core.dialects import _pax_number, parse_pax_fast, times_only
from tarproc.core.grouping import group
from tarproc.core.stats import Stats
from tarproc.core.tario import TarReader


def slow(data):
    """What parse_pax_fast and the mtime check say of pax data: True when it
    takes it as time records only, a valid mtime among them."""
    records = parse_pax_fast(data)
    if records is None or b"mtime" not in records or set(records) - {b"mtime", b"atime", b"ctime"}:
        return None
    return bool(_pax_number(records[b"mtime"], True))


VALUE = st.one_of(st.binary(max_size=12),
                  st.from_regex(rb"\A-?[0-9]{0,32}(\.[0-9a.]{0,5})?\Z"))
KEY = st.sampled_from([b"mtime", b"atime", b"ctime", b"path", b"mtim"])


def record(key, value, off, zero):
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1 + len(str(len(body) + 2)) + off
    return (b"0" if zero else b"") + str(n).encode() + body


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(KEY, VALUE, st.sampled_from([0, 0, 0, 1, -1]), st.booleans()), min_size=1, max_size=4),
       st.booleans())
def test_the_time_records_regex_takes_only_what_the_checks_take(records, nul):
    data = b"".join(record(*r) for r in records) + (b"\0" if nul else b"")
    if times_only(data):
        assert slow(data) is True, data  # the regex may leave valid records to the slow path, never take bad ones
    if len(records) == 1 and records[0][0] == b"mtime" and slow(data) and not records[0][3]:
        assert times_only(data) or len(records[0][1]) > 30 or b"\n" in records[0][1]


def pax_shard(n=6):
    f = io.BytesIO()
    with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as t:
        for i in range(n):
            for ext in ("a", "b"):
                ti = tarfile.TarInfo(f"s{i}.{ext}")
                ti.size, ti.mtime = 3, 1700000000.25 + i
                t.addfile(ti, io.BytesIO(b"xyz"))
    return bytearray(f.getvalue())


def both(data):
    def one(fast):
        stats, out, err = Stats(), [], None
        reader = TarReader(io.BufferedReader(io.BytesIO(bytes(data)), 4096), "in")
        try:
            it = passthru.fast_group(reader, "in", stats, True) if fast else group(reader.members(), "in", stats)
            for s in it:
                out.append(sorted(s.items()))
        except Exception as e:
            err = f"{type(e).__name__}: {e}"
        return out, err, stats.as_dict()
    old = one(False)
    assert one(True) == old
    return old


def test_damage_after_a_cached_pax_block_is_found():
    good = pax_shard()
    out, err, _ = both(good)
    assert err is None and len(out) == 6
    pax_at = [i for i in range(0, len(good), 512) if good[i + 156] == ord("x")]
    assert len(pax_at) == 12 and bytes(good[pax_at[2] : pax_at[2] + 512]) == bytes(good[pax_at[0] : pax_at[0] + 512])
    for where in (148, 124, 0, 100, 515, 600):  # the 3rd pax header's checksum, size, name, mode; its data
        bad = bytearray(good)
        bad[pax_at[2] + where] ^= 0x01
        out, err, _ = both(bad)  # (fast and general paths agree, damaged or not)
        assert err is not None or where not in (148, 124), where
        assert len(out) <= 6
    bad = bytearray(good)
    rec = pax_at[4] + 512
    bad[rec : rec + 3] = b"99 "  # a record whose length field lies
    out, err, _ = both(bad)
    assert err is not None and "pax" in err
