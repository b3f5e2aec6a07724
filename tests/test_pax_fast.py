"""core/dialects' shortcuts for pax headers (the one-mtime-record regex, the
cache of pax header blocks already checked) accept exactly what the slow
checks accept: agreement on arbitrary records, and damage after a cached
block is still found where the general parser finds it."""

import io
import tarfile

from hypothesis import given, settings
from hypothesis import strategies as st

from tarproc.core import passthru
from tarproc.core.dialects import MTIME_ONLY, _pax_number, parse_pax_fast
from tarproc.core.grouping import group
from tarproc.core.stats import Stats
from tarproc.core.tario import TarReader


def slow(data):
    """What parse_pax_fast and the mtime check say of pax data."""
    records = parse_pax_fast(data)
    if records is None or set(records) != {b"mtime"}:
        return None
    return bool(_pax_number(records[b"mtime"], True))


VALUE = st.one_of(st.binary(max_size=12),
                  st.from_regex(rb"\A-?[0-9]{0,32}(\.[0-9a.]{0,5})?\Z"))


@settings(max_examples=400, deadline=None)
@given(VALUE, st.sampled_from([0, 0, 1, -1]), st.booleans(), st.booleans())
def test_the_mtime_regex_takes_only_what_the_checks_take(value, off, zero, nul):
    body = b" mtime=" + value + b"\n"
    n = len(body) + 2 + (len(body) + 2 >= 100) + off
    data = (b"0" if zero else b"") + str(n).encode() + body + (b"\0" if nul else b"")
    m = MTIME_ONLY.fullmatch(data)
    if m is not None and int(m[1]) == len(data):
        assert slow(data) is True
    elif slow(data) is True:  # the regex may leave a valid record to the slow path, never take a bad one
        assert zero or len(value.split(b".", 1)[0].lstrip(b"-")) > 0


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
