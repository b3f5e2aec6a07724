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

from hypothesis import HealthCheck, given, settings, strategies as st

import make_corpus as M  # noqa: E402
from helpers import tar_bytes  # noqa: E402

import tarproc as S  # noqa: E402
from tarproc.core.rules import is_meta  # noqa: E402
from tarproc.errors import TarprocError  # noqa: E402
from tarproc.core.tario import parse_pax  # noqa: E402

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
            assert all(isinstance(v, bytes) for k, v in sample.items() if not is_meta(k))
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


# ---------------------------------------------------------------- round 2: closure and bounds

_NAME_CHARS = st.sampled_from(list("ab.-_/ ") + ["..", "\t", "\n", "\x1b", "\x7f", "\x9b", "\x00", "é", "\udcff"])


@FUZZ
@given(key=st.lists(_NAME_CHARS, min_size=0, max_size=12).map("".join),
       field=st.lists(_NAME_CHARS, min_size=0, max_size=6).map("".join),
       data=st.binary(max_size=20))
def test_what_we_write_we_read(key, field, data):
    """Any key and field: the writer refuses (BadSample, exit 2 in a command)
    or what it wrote reads back as the same sample."""
    import io

    from tarproc.core.grouping import SampleWriter, group
    from tarproc.core.tario import TarReader
    from tarproc.errors import BadSample

    from tarproc.core.rules import is_meta

    if is_meta(field):  # metadata travels with a sample, never written
        return
    buf = io.BytesIO()
    w = SampleWriter(buf)
    try:
        w.write({"__key__": key, field: data})
    except BadSample:
        return
    w.close()
    back = list(group(TarReader(io.BytesIO(buf.getvalue()), "t").members()))
    assert len(back) == 1 and back[0]["__key__"] == key and bytes(back[0][field]) == data


@FUZZ
@given(text=st.text(alphabet='[]{}"\\:,1 ab', max_size=400), depth=st.integers(1, 30))
def test_json_depth_bound(text, depth):
    """limits.json_loads: a value, or ValueError; never RecursionError; and
    the depth scan agrees with Python's parser on what is too deep."""
    import json

    from tarproc.core import limits

    deep = "[" * (depth * 50) + text + "]" * (depth * 50)
    for t in (text, deep):
        try:
            value = limits.json_loads(t, limit=depth * 40)
        except ValueError:
            continue
        assert value == json.loads(t)


@FUZZ
@given(name=st.text(max_size=3000), limit=st.integers(10, 500))
def test_shorten_is_bounded(name, limit):
    from tarproc.core.limits import clip_lines, shorten

    s = shorten(name, limit)
    whole = shorten(name, 10 ** 6)  # line breaks and controls escaped, nothing cut
    assert len(s) <= limit + 40 and (s == whole or "chars]" in s)
    assert "\n" not in s and "\x1b" not in s
    assert all(len(line) <= limit + 40 for line in clip_lines(name, limit).split("\n"))


@FUZZ
@given(pattern=st.lists(st.sampled_from(["{", "}", ",", "..", "a", "b", "0", "1", "2", "\\", "x{0..2}", "{a,b}"]),
                        max_size=12).map("".join))
def test_lazy_brace_expansion_is_braceexpand(pattern):
    """expand_urls (lazy, its own product) gives braceexpand's URLs in
    braceexpand's order, or a usage error where braceexpand raises."""
    import itertools

    import braceexpand

    from tarproc.errors import UsageError
    from tarproc.sources.shardlist import expand_urls

    try:
        want = list(itertools.islice(braceexpand.braceexpand(pattern), 1000))
    except Exception:
        want = None
    try:
        got = list(itertools.islice(expand_urls(pattern), 1000))
    except UsageError:
        got = None
    if "{" not in pattern:
        want = [pattern]
    assert got == want
