"""The small-member fast paths (issue 18) write the same bytes as before: the
writer's one-write path against the header builder it replaces, on varied
names and sizes; tarcat's output of archives in other formats (GNU long
names, pax, ustar prefixes, non-canonical headers) against that reference;
and the reader's cache of numeric fields never lets a bad field through."""

import io
import os
import random
import subprocess
import tarfile

import pytest

from conftest import VENV_BIN, require
from tarproc.core import tario
from tarproc.core.tario import BLOCK, TarReader, TarWriter
from tarproc.errors import BadArchive

NAMES = ["a.txt", "k/x.cls", "d" * 99 + ".b", "p/" * 60 + "f.txt", "caf\u00e9.txt", "x" * 300 + ".bin",
         "dir/" + "n" * 95 + ".json", "bad\udcff.bin"]
SIZES = [0, 1, 511, 512, 513, 1024, 8191, 8192, 8193, 70_000]


def reference(members, **defaults):
    """What TarWriter wrote before the fast path: header, data, padding in turn."""
    out = io.BytesIO()
    w = TarWriter(out, **defaults)
    for name, data in members:
        nameb = name.encode("utf-8", "surrogateescape")
        if len(nameb) <= 100 and nameb.isascii():
            header = w._header(nameb, len(data))
        else:
            header = w._slow_header(nameb, len(data))
        out.write(header + data + bytes(-len(data) % BLOCK))
    out.write(bytes(2 * BLOCK))
    return out.getvalue()


def ours(members, **defaults):
    out = io.BytesIO()
    w = TarWriter(out, **defaults)
    for name, data in members:
        w.write(name, data)
    w.close()
    assert w.bytes_written == len(out.getvalue())
    return out.getvalue()


@pytest.mark.parametrize("defaults", [{}, {"mode": 0o600, "mtime": 1_700_000_000, "uname": "u", "gname": "g"}])
def test_fast_path_writes_the_same_bytes(defaults):
    r = random.Random(0)
    members = [(name, r.randbytes(size)) for name in NAMES for size in SIZES]
    members += [(f"m{i}.txt", bytearray(r.randbytes(i))) for i in range(0, 600, 7)]  # not bytes: slow path
    assert ours(members, **defaults) == reference(members, **defaults)


def test_gathered_members_are_the_bytes_of_one_by_one(tmp_path):
    """write_members (Parquet rows: a Sink's gathered writev, or a plain
    stream's joins) writes the bytes of write() one by one, for every name
    form, size, bytes-like type and a Blob, in groups of any size."""
    from tarproc.core.blob import Blob, SharedFile
    from tarproc.sinks.output import open_sink

    r = random.Random(1)
    members = [(name, r.randbytes(size)) for name in NAMES for size in SIZES]
    members = [(n, memoryview(d) if i % 3 == 0 else bytearray(d) if i % 3 == 1 else d)
               for i, (n, d) in enumerate(members)]
    blob_bytes = r.randbytes(200_000)
    (tmp_path / "blob").write_bytes(blob_bytes)
    fd = os.open(tmp_path / "blob", os.O_RDONLY)
    members.insert(7, ("big.bin", Blob(SharedFile(fd, None, False), 0, len(blob_bytes))))
    want = reference([(n, blob_bytes if isinstance(d, Blob) else bytes(d)) for n, d in members])
    plain = io.BytesIO()
    w = TarWriter(plain)
    for k in range(0, len(members), 5):
        w.write_members([n for n, _ in members[k:k + 5]], [d for _, d in members[k:k + 5]])
    w.close()
    assert plain.getvalue() == want and w.bytes_written == len(want)
    for group in (1, 13, len(members)):
        out = tmp_path / f"g{group}.tar"
        with open_sink(str(out)) as sink:
            w = TarWriter(sink)
            for k in range(0, len(members), group):
                w.write_members([n for n, _ in members[k:k + group]], [d for _, d in members[k:k + group]])
            w.close()
        assert out.read_bytes() == want, group
    os.close(fd)


def _rows_cases():
    from hypothesis import strategies as st

    key = st.text(alphabet="abz09/_-\u00e9\udcff", min_size=1, max_size=40)
    suffix = st.text(alphabet="abcxyz_", min_size=1, max_size=70).map(lambda s: "." + s)
    cell = st.one_of(st.none(), st.sampled_from([0, 1, 511, 512, 513, 2000]).map(lambda n: b"q" * n),
                     st.binary(max_size=1100), st.binary(max_size=600).map(memoryview),
                     st.binary(max_size=600).map(bytearray))

    @st.composite
    def cases(draw):
        width = draw(st.integers(1, 40))
        same = draw(st.booleans())  # keys of one length (the numpy path) or not (the fallback)
        n = draw(st.integers(0, 30))
        keys = [draw(key.map(lambda k: (k * 40)[:width])) if same else draw(key) for _ in range(n)]
        suffixes = sorted(set(draw(st.lists(suffix, min_size=1, max_size=4))))
        return keys, suffixes, [[draw(cell) for _ in keys] for _ in suffixes]
    return cases()


def test_rows_are_the_bytes_of_their_members():
    """write_rows (a Parquet batch: headers made with numpy, the data
    gathered) writes the bytes write_members writes for the same names and
    data, whatever the keys, suffixes, cells and nulls, in chunks of any
    size, to a plain stream and to a Sink."""
    from hypothesis import given, settings

    @settings(max_examples=300, deadline=None)
    @given(_rows_cases(), st_chunk())
    def check(case, chunk):
        keys, suffixes, columns = case
        names, datas = [], []
        for r, k in enumerate(keys):
            for s, col in zip(suffixes, columns):
                if col[r] is not None:
                    names.append(k + s)
                    datas.append(col[r])
        want = io.BytesIO()
        w = TarWriter(want)
        w.write_members(names, datas)
        got = io.BytesIO()
        g = TarWriter(got)
        old = tario.ROWS_MEMBERS
        tario.ROWS_MEMBERS = chunk
        try:
            g.write_rows(keys, suffixes, columns)
        finally:
            tario.ROWS_MEMBERS = old
        assert got.getvalue() == want.getvalue()
        assert (g.members_written, g.bytes_written) == (w.members_written, w.bytes_written) == (len(names),
                                                                                               len(want.getvalue()))

    check()


def st_chunk():
    from hypothesis import strategies as st

    return st.sampled_from([1, 3, 16384])


def test_gathered_writes_of_more_pieces_than_one_writev_takes():
    """writev_all: 3,000 pieces (three writev calls) into a pipe read by a
    thread arrive whole and in order."""
    import threading

    from tarproc.sinks.output import writev_all

    pieces = [bytes([i % 251]) * (i % 700) for i in range(3000)]
    rfd, wfd = os.pipe()
    got = []
    t = threading.Thread(target=lambda: got.append(b"".join(iter(lambda: os.read(rfd, 1 << 16), b""))))
    t.start()
    assert writev_all(wfd, pieces) == sum(map(len, pieces))
    os.close(wfd)
    t.join()
    os.close(rfd)
    assert got[0] == b"".join(pieces)


def test_gathered_writes_cut_short_by_signals_go_on_where_they_stopped():
    """A writev into a small pipe that a timer signal interrupts writes part
    of its pieces (a short write): the rest follows, every byte once."""
    import fcntl
    import signal
    import threading
    import time

    from tarproc.sinks.output import writev_all

    pieces = [bytes([i % 256]) * (i * 37 % 5000) for i in range(300)]
    rfd, wfd = os.pipe()
    fcntl.fcntl(wfd, 1031, 4096)  # F_SETPIPE_SZ: a pipe of one page
    got = []

    def drain():
        buf = []
        while True:
            time.sleep(0.0005)
            d = os.read(rfd, 1000)
            if not d:
                break
            buf.append(d)
        got.append(b"".join(buf))

    t = threading.Thread(target=drain)
    t.start()
    old = signal.signal(signal.SIGALRM, lambda *a: None)
    signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
    try:
        n = writev_all(wfd, pieces)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    os.close(wfd)
    t.join()
    os.close(rfd)
    assert n == sum(map(len, pieces)) and got[0] == b"".join(pieces)


def test_size_cache_is_bounded():
    w = TarWriter(io.BytesIO())
    for i in range(5000):
        w.write("a.b", bytes(i % 4500))
    assert len(w._sizes) <= 4096


def tar_in(fmt, path):
    """An archive written by tarfile in ``fmt`` with long names, non-ASCII
    names, odd modes and times: headers our writer would not emit."""
    fmtc = {"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT, "ustar": tarfile.USTAR_FORMAT}[fmt]
    r = random.Random(1)
    with tarfile.open(path, "w", format=fmtc) as tf:
        for i, name in enumerate(NAMES[:6] if fmt == "ustar" else NAMES[:6] + ["y" * 200 + ".bin"]):
            if fmt == "ustar" and len(name.encode()) > 100 and "/" not in name[-100:]:
                continue
            data = r.randbytes(SIZES[i % len(SIZES)])
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime, ti.uid, ti.uname = len(data), 0o755, 1234567890 + i, 1000 + i, "someone"
            tf.addfile(ti, io.BytesIO(data))
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf]


def as_samples(members):
    """The order tarcat writes members in: consecutive keys, fields sorted."""
    from tarproc.core.rules import split_name

    groups = []
    for name, data in members:
        key, field = split_name(name)
        if not groups or groups[-1][0] != key:
            groups.append((key, []))
        groups[-1][1].append((field, name, data))
    return [(name, data) for _, fields in groups for _, name, data in sorted(fields)]


@pytest.mark.parametrize("fmt", ["gnu", "pax", "ustar"])
def test_tarcat_rewrites_foreign_headers_to_the_reference_bytes(tmp_path, fmt):
    members = tar_in(fmt, tmp_path / "in.tar")
    out = subprocess.run([f"{VENV_BIN}/tarcat", str(tmp_path / "in.tar")], capture_output=True, check=True).stdout
    assert out == reference(as_samples(members))


def test_gnu_tar_archive_reads_and_rewrites(tmp_path):
    require("tar")
    (tmp_path / "d").mkdir()
    for i in range(5):
        (tmp_path / "d" / f"s{i}.txt").write_bytes(b"x" * (i * 300))
    (tmp_path / "d" / ("L" * 150 + ".txt")).write_bytes(b"long")
    subprocess.run(["tar", "--format=gnu", "-cf", "g.tar", "--sort=name", "d"], cwd=tmp_path, check=True)
    with tarfile.open(tmp_path / "g.tar") as tf:
        members = [(m.name, tf.extractfile(m).read()) for m in tf if m.isfile()]
    out = subprocess.run([f"{VENV_BIN}/tarcat", "g.tar"], cwd=tmp_path, capture_output=True, check=True).stdout
    assert out == reference(as_samples(members))


def test_number_cache_keeps_bad_fields_bad():
    good = tario._number(b"0000644\0", "mode", "-", 0)
    assert good == 0o644 and tario._number(b"0000644\0", "mode", "-", 0) == 0o644
    for bad in (b"00006 9\0", b"0_644\0\0\0", b"+644\0\0\0\0", b"\x81" + bytes(7)):
        for _ in range(2):  # twice: a failure is never cached as a value
            with pytest.raises(BadArchive):
                tario._number(bad, "mode", "-", 0)


def test_reader_takes_bytearray_blocks():
    data = ours([("a.txt", b"hello"), ("b.txt", b"")])

    class Chunks:
        def __init__(self):
            self.f = io.BytesIO(data)

        def read(self, n):
            return bytearray(self.f.read(n))

    assert [(m.name, bytes(m.data)) for m in TarReader(Chunks())] == [("a.txt", b"hello"), ("b.txt", b"")]
