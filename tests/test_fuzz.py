"""Fuzzing the reader: damaged shards give samples or tarproc's own error.

Valid shards (from tests/hostile/make_corpus.py and Python's tarfile) are
damaged by hypothesis (bytes overwritten, inserted, deleted, the stream cut;
also before gzip/bzip2/xz compression and inside the compressed bytes).
Reading them through the library's real input path (``iter_samples`` on a
file) must yield samples or raise :class:`tarproc.errors.TarprocError`, never
another exception, and must finish within a time bound (a SIGALRM timer).

The number of examples per test comes from ``TARPROC_FUZZ_EXAMPLES`` (default
300); ``make fuzz`` runs 20000.
"""

import bz2
import gzip
import lzma
import os
import signal
import sys

from hypothesis import HealthCheck, given, settings, strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "hostile"))
import make_corpus as M  # noqa: E402
from helpers import tar_bytes  # noqa: E402

from tarproc import samples as S  # noqa: E402
from tarproc.errors import TarprocError  # noqa: E402
from tarproc.tario import parse_pax  # noqa: E402

EXAMPLES = int(os.environ.get("TARPROC_FUZZ_EXAMPLES", "300"))
TIME_BOUND = 10  # seconds for one read; a correct reader needs milliseconds

FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("TARPROC_FUZZ_RANDOM"),
                suppress_health_check=list(HealthCheck), database=None)


def _seeds():
    import tarfile

    return [
        M.small_shard(),
        tar_bytes([("a/0001.jpg", b"\xff\xd8" + bytes(700)), ("a/0001.cls", b"1"), ("a/0002.jpg", b"x" * 3)]),
        tar_bytes([("long/" + "n" * 150 + "/k.txt", b"t" * 40), ("u\u00e9.txt", b"")], format=tarfile.PAX_FORMAT),
        tar_bytes([("g/" + "m" * 120 + ".txt", b"gnu" * 100)], format=tarfile.GNU_FORMAT),
    ]


SEEDS = _seeds()


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def read_all(path):
    """Read every sample of ``path``; returns the count.  TarprocError passes
    through; anything else, or taking longer than TIME_BOUND, fails."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_BOUND)
    try:
        n = 0
        for sample in S.iter_samples([path], warn=lambda m: None):
            assert isinstance(sample["__key__"], str)
            assert all(isinstance(v, bytes) for k, v in sample.items() if not S.is_meta(k))
            n += 1
        return n
    except Hang:
        raise AssertionError(f"reading took longer than {TIME_BOUND} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check(data, tmp_path):
    path = tmp_path / "fuzz.tar"
    path.write_bytes(data)
    try:
        read_all(str(path))
    except TarprocError as e:
        msg = str(e)
        assert msg and "\n" not in msg.rstrip("\n"), f"error message is not one line: {msg!r}"


def damage(data, ops):
    buf = bytearray(data)
    for kind, pos, payload in ops:
        if not buf:
            buf += payload
            continue
        pos %= len(buf) + 1
        if kind == "overwrite":
            buf[pos : pos + len(payload)] = payload
            buf = buf  # may grow at the end, like a write past the end
        elif kind == "insert":
            buf[pos:pos] = payload
        elif kind == "delete":
            del buf[pos : pos + max(1, len(payload))]
        else:  # cut
            del buf[pos:]
    return bytes(buf)


# Header-aware positions make damage inside headers and size fields likely.
_pos = st.one_of(st.integers(0, 20000), st.integers(0, 20).map(lambda b: b * 512 + 124),
                 st.integers(0, 20).map(lambda b: b * 512 + 148), st.integers(0, 20).map(lambda b: b * 512))
_payload = st.one_of(st.binary(min_size=1, max_size=16),
                     st.sampled_from([b"\xff" * 12, b"\x80" + b"\xff" * 11, b"77777777777\0", b"\0", b" ",
                                      b"9", b"-1", b"x", b"L", b"K", b"g", b"2", b"5", b"../", b"/",
                                      b"\n", b"100 path=", b"=", b"99999999999 "]))
_ops = st.lists(st.tuples(st.sampled_from(["overwrite", "insert", "delete", "cut"]), _pos, _payload),
                min_size=1, max_size=6)


@FUZZ
@given(seed=st.sampled_from(range(len(SEEDS))), ops=_ops)
def test_damaged_tar(tmp_path_factory, seed, ops):
    check(damage(SEEDS[seed], ops), tmp_path_factory.getbasetemp())


_COMPRESS = {"gzip": lambda d: gzip.compress(d, mtime=0), "bzip2": bz2.compress, "xz": lzma.compress}


@FUZZ
@given(seed=st.sampled_from(range(len(SEEDS))), codec=st.sampled_from(sorted(_COMPRESS)), ops=_ops,
       inside=st.booleans())
def test_damaged_compressed(tmp_path_factory, seed, codec, ops, inside):
    """Damage the tar, then compress; or compress, then damage the compressed bytes."""
    compress = _COMPRESS[codec]
    data = damage(compress(SEEDS[seed]), ops) if inside else compress(damage(SEEDS[seed], ops))
    check(data, tmp_path_factory.getbasetemp())


@FUZZ
@given(records=st.lists(st.tuples(st.sampled_from([b"path", b"size", b"linkpath", b"mtime", b"x", b""]),
                                  st.binary(max_size=30), st.integers(-3, 3)), max_size=5),
       junk=st.binary(max_size=40))
def test_pax_records(tmp_path_factory, records, junk):
    """pax records with wrong lengths and values, in front of a member."""
    body = b""
    for key, value, delta in records:
        rec = M.pax_record(key, value)
        n = int(rec.split(b" ", 1)[0]) + delta
        body += str(n).encode() + rec[rec.index(b" "):]
    body += junk
    try:
        parse_pax(body)
    except TarprocError:
        pass
    data = M.special(b"x", body, name=b"././@PaxHeader") + M.member(b"k.txt", b"hello") + M.EOA
    check(data, tmp_path_factory.getbasetemp())


def test_fuzz_finds_damage():
    """The damage functions do damage (so the tests above are not vacuous)."""
    assert damage(b"abcdef", [("overwrite", 1, b"XY")]) == b"aXYdef"
    assert damage(b"abcdef", [("insert", 1, b"XY")]) == b"aXYbcdef"
    assert damage(b"abcdef", [("delete", 1, b"XY")]) == b"adef"
    assert damage(b"abcdef", [("cut", 2, b"X")]) == b"ab"
