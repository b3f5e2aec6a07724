"""How map_function's batches cross to its workers (stages/function.py
pack_batch / unpack_batch): large fields beside a small pickle, written
from the samples' own bytes; what the function gets is what was sent
(bytes stay bytes, other types and dict subclasses as they were)."""

import os

from tarproc.stages.function import BESIDE, map_function, pack_batch, unpack_batch


def _round_trip(batch):
    return unpack_batch(bytearray(b"".join(bytes(p) for p in pack_batch(batch))))


class Tagged(dict):
    pass


def test_batches_round_trip_with_large_fields_beside_the_pickle():
    big = os.urandom(BESIDE)
    batch = [{"__key__": "a", "jpg": big, "cls": b"1", "n": 3, "s": "text"},
             {"__key__": "b", "small": b"x"},
             Tagged(__key__="c", jpg=big + b"!"),
             {"__key__": "d", "jpg": b"y" * (3 * BESIDE), "empty": b""}]
    pieces = pack_batch(batch)
    assert any(p is big or getattr(p, "obj", None) is big for p in pieces)  # sent from the sample's own bytes
    out = _round_trip(batch)
    assert out == batch
    assert type(out[2]) is Tagged
    assert all(type(v) in (bytes, str, int) for s in out for v in s.values())
    for small in ([], [{"__key__": "x", "t": b"t"}], [{"__key__": "x", "t": b"t"}, {"__key__": "y", "b": big}]):
        assert _round_trip(small) == small


def test_the_function_gets_bytes_and_returns_them_whole():
    samples = [{"__key__": f"{i:03d}", "jpg": os.urandom(50_000 + i), "cls": b"%d" % i} for i in range(40)]

    def fn(s):
        assert type(s["jpg"]) is bytes and type(s["cls"]) is bytes
        s["len"] = b"%d" % len(s["jpg"])
        return s

    out = list(map_function(iter(samples), fn, 2))
    assert [o["__key__"] for o in out] == [s["__key__"] for s in samples]
    assert all(o["jpg"] == s["jpg"] and o["len"] == b"%d" % len(s["jpg"]) for o, s in zip(out, samples))
