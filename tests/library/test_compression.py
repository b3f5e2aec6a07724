"""Compressed input decoded beside the parser (sources/compression.py): by the
codec's program (a plain file as its stdin, or fed by a thread) or, where the
program is missing, by a thread with zlib/bz2/lzma.  Both ways give the same
members, the same errors, stop early, and leave no process or thread behind."""

import bz2
import gzip
import io
import lzma
import os
import random
import subprocess
import sys
import tarfile
import threading
import time

import pytest

from tarproc.errors import BadInput
from tarproc.sources import compression as C
from tarproc.sources import unzip
from tarproc.runtime.child import Child
from tarproc.sources.open import open_source
from tarproc.sources.raw import FdReader
from conftest import VENV_BIN, require
from helpers import read_tar, tar_bytes
import make_corpus as mc

MEMBERS = [(f"s{i:03d}.{ext}", random.Random(i).randbytes(i * 37 % 3000) if ext == "bin" else b"x%d" % i)
           for i in range(40) for ext in ("bin", "txt")]
TAR = tar_bytes(MEMBERS)


def zstd(data):
    return subprocess.run([require("zstd"), "-c", "-q"], input=data, capture_output=True, check=True).stdout


PACK = {"gzip": lambda d: gzip.compress(d, mtime=0), "bzip2": bz2.compress, "xz": lzma.compress, "zstd": zstd}
# program: the codec's program where it has one; thread: decoded in-process
MODES = [("gzip", "thread"), ("bzip2", "thread"), ("xz", "thread"), ("zstd", "program"), ("gzip", "program"),
         ("gzip", "unzip"), ("bzip2", "unzip"), ("xz", "unzip")]  # unzip: a file's default decoder program
GZIP_PROGRAM = {"gzip": (("gzip", "-dc"),)}  # not the default: shows the program path works for any codec


def open_with(path, mode, pipe=False, codec=None):
    """The decoded stream of ``path`` (through a pipe from ``cat`` with ``pipe``)."""
    if pipe:
        proc = Child(["cat", str(path)], str(path))
        raw = FdReader(proc.stdout.fileno(), str(path), proc, closefd=False)
        raw._keep = proc.stdout
    else:
        raw = FdReader(os.open(str(path), os.O_RDONLY), str(path))
    if mode == "unzip":  # the default for a file: tarproc.sources.unzip as a program, from any size
        old, C.FILE_PROGRAM_FROM = C.FILE_PROGRAM_FROM, 0
        try:
            stream, codec = C.wrap_compression(raw, str(path))
        finally:
            C.FILE_PROGRAM_FROM = old
        if not pipe:
            assert list(stream.raw.proc.args[-2:]) == [unzip.__file__, codec]
        return stream, codec
    programs = {} if mode == "thread" else GZIP_PROGRAM if codec == "gzip" else None
    stream, codec = C.wrap_compression(raw, str(path), programs)
    return stream, codec


def read_all(stream):
    out = []
    while True:
        b = stream.read(4096)
        if not b:
            return b"".join(out)
        out.append(b)


@pytest.mark.parametrize("pipe", [False, True], ids=["file", "pipe"])
@pytest.mark.parametrize("codec,mode", MODES)
def test_decodes_the_same_bytes_every_way(tmp_path, codec, mode, pipe):
    path = tmp_path / "in.z"
    # two streams back to back (cat a.gz b.gz) read as one
    path.write_bytes(PACK[codec](TAR) + PACK[codec](TAR))
    stream, got_codec = open_with(path, mode, pipe, codec)
    try:
        assert got_codec == codec
        assert read_all(stream) == TAR + TAR
    finally:
        stream.close()


@pytest.mark.parametrize("codec,mode", MODES)
def test_truncated_and_damaged_streams_are_one_clean_error(tmp_path, codec, mode):
    packed = PACK[codec](TAR)
    path = tmp_path / "cut.z"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    stream, _ = open_with(path, mode, codec=codec)
    with pytest.raises(BadInput) as e:
        read_all(stream)
    stream.close()
    msg = str(e.value)
    assert msg.startswith(str(path)) and f"{codec} stream is" in msg and "\n" not in msg, msg
    damaged = bytearray(packed)
    for i in range(len(damaged) // 3, len(damaged) // 3 + 64):
        damaged[i] ^= 0x55
    path.write_bytes(bytes(damaged))
    stream, _ = open_with(path, mode, codec=codec)
    with pytest.raises(BadInput) as e:
        read_all(stream)
    stream.close()
    assert str(e.value).startswith(str(path)) and f"{codec} stream is" in str(e.value)


@pytest.mark.parametrize("mode", ["program", "thread", "unzip"])
def test_gzip_zero_padding_is_fine_junk_is_an_error(tmp_path, mode):
    """As Python's gzip module and ``gzip -d`` do."""
    path = tmp_path / "in.tgz"
    path.write_bytes(PACK["gzip"](TAR) + bytes(10240))  # a blocked writer pads with zeros
    stream, _ = open_with(path, mode, codec="gzip")
    assert read_all(stream) == TAR
    stream.close()
    path.write_bytes(PACK["gzip"](TAR) + b"not gzip at all")
    stream, _ = open_with(path, mode, codec="gzip")
    with pytest.raises(BadInput):
        read_all(stream)
    stream.close()


def test_thread_decoder_bounds_its_chunks():
    """A gzip bomb comes out in chunks of at most 1 MiB, never at once."""
    bomb = gzip.compress(bytes(50 << 20), mtime=0)
    pieces = [bomb[i : i + 4096] for i in range(0, len(bomb), 4096)] + [b""]
    sizes = [len(c) for c in unzip.decoded_chunks("gzip", iter(pieces).__next__)]
    assert sum(sizes) == 50 << 20 and max(sizes) <= unzip.CHUNK


SLOW = "import sys, time; sys.stdout.buffer.write(open('big.z', 'rb').read()); sys.stdout.flush(); time.sleep(600)"


def _our_processes(marker):
    """Processes whose environment carries ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("codec,mode", MODES[:4])
def test_closing_early_stops_the_decoder_and_its_feeder(tmp_path, codec, mode, monkeypatch):
    big = tar_bytes([(f"k{i}.bin", random.Random(i).randbytes(100_000)) for i in range(40)])
    (tmp_path / "big.z").write_bytes(PACK[codec](big))
    marker = f"TARPROC_TEST_MARKER={os.getpid()}{codec}{mode}"
    monkeypatch.setenv(marker.split("=")[0], marker.split("=")[1])
    monkeypatch.chdir(tmp_path)
    before = threading.active_count()
    # a download that never ends: the input pipe stays open after the data
    slow = f"exec {sys.executable} -c {SLOW!r}"
    stream = open_source(f"pipe:{slow}") if mode == "program" else None
    if stream is None:
        proc = Child(slow, "slow")
        raw = FdReader(proc.stdout.fileno(), "slow", proc, closefd=False)
        raw._keep = proc.stdout
        stream, _ = C.wrap_compression(raw, "slow", {})
    assert stream.read(1000) == big[:1000]
    assert _our_processes(marker)
    stream.close()
    deadline = time.monotonic() + 10
    while (_our_processes(marker) or threading.active_count() > before) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [open(f"/proc/{p}/cmdline", "rb").read() for p in _our_processes(marker)]
    assert left == [] and threading.active_count() == before


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_closing_early_from_a_plain_file(cwd):
    """The program reads the file itself (no feeder); closing kills and reaps it."""
    (cwd / "big.zst").write_bytes(zstd(tar_bytes([(f"k{i}.bin", random.Random(i).randbytes(100_000))
                                                 for i in range(100)])))
    stream = open_source("big.zst")
    stream.read(512)
    assert stream.raw.thread is None
    proc = stream.raw.proc
    stream.close()
    assert proc.returncode is not None  # killed and reaped


@pytest.mark.parametrize("no_programs", [False, True], ids=["program", "thread"])
def test_tarcat_head_ends_quietly_and_leaves_nothing(tmp_path, no_programs):
    """``tarcat big.tgz | head -c 100``: exit 0, one quiet end, no process left."""
    data = tar_bytes([(f"k{i}.bin", random.Random(i).randbytes(50_000)) for i in range(200)])
    (tmp_path / "big.tgz").write_bytes(PACK["gzip"](data))
    marker = f"TARPROC_HEAD_MARKER{os.getpid()}{int(no_programs)}"
    env = dict(os.environ, **{marker: "1"})
    if no_programs:
        env["PATH"] = "/nonexistent"  # no gzip: decoded in a thread
    p = subprocess.run(["/bin/bash", "-o", "pipefail", "-c", f"{VENV_BIN}/tarcat big.tgz | /usr/bin/head -c 100"],
                       cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert p.stdout == data[:100]
    assert p.stderr == b"" and p.returncode in (0, 141), p
    time.sleep(0.2)
    assert [pid for pid in _our_processes(marker)] == []


def test_tarcat_reads_gzip_without_the_gzip_program(tmp_path):
    (tmp_path / "in.tgz").write_bytes(PACK["gzip"](TAR) + PACK["gzip"](TAR))
    env = dict(os.environ, PATH="/nonexistent")
    p = subprocess.run([f"{VENV_BIN}/tarcat", "in.tgz"], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert p.returncode == 0 and read_tar(p.stdout) == MEMBERS + MEMBERS
    (tmp_path / "cut.tgz").write_bytes(PACK["gzip"](TAR)[:300])
    p = subprocess.run([f"{VENV_BIN}/tarcat", "cut.tgz"], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "cut.tgz: gzip stream is truncated" in err, err


def test_failed_download_wins_over_the_decoder_error(tmp_path, monkeypatch):
    """A source command that fails mid-stream is reported as such, not as a
    damaged gzip stream (the feeder's error comes first)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.tgz").write_bytes(PACK["gzip"](TAR))
    stream = open_source("pipe:head -c 300 in.tgz; exit 7")
    with pytest.raises(BadInput) as e:
        read_all(stream)
    stream.close()
    assert "exit status 7" in str(e.value)


@pytest.mark.parametrize("codec,feed", [("gzip", "file"), ("xz", "pipe"), ("zstd", "file"), ("zstd", "pipe")])
def test_compression_bomb_is_refused_real_data_is_not(tmp_path, codec, feed):
    """Decoded bytes are bounded by TARPROC_MAX_RATIO times the compressed
    bytes once past TARPROC_RATIO_FLOOR (lowered here to keep the test small):
    one line, exit 2, no output under its final name; a shard of ordinary
    data (about 2:1) passes under the same bounds."""
    bomb = tar_bytes([("k0.bin", bytes(8 << 20)), ("k0.txt", b"x")])
    rng = random.Random(1)
    plain = tar_bytes([(f"k{i}.txt", bytes(rng.choice(b"abcdefgh \n") for _ in range(40_000))) for i in range(60)])
    (tmp_path / "bomb.z").write_bytes(PACK[codec](bomb))
    (tmp_path / "plain.z").write_bytes(PACK[codec](plain))
    env = dict(os.environ, TARPROC_RATIO_FLOOR="1000000", TARPROC_MAX_RATIO="50")
    for name, ok in (("plain.z", True), ("bomb.z", False)):
        cmd = f"{VENV_BIN}/tarcat {name} -o out.tar" if feed == "file" else \
            f"cat {name} | {VENV_BIN}/tarcat -o out.tar"  # a real pipe: fed to the decoder by a thread
        p = subprocess.run(["/bin/bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, timeout=60)
        err = p.stderr.decode()
        if ok:
            assert p.returncode == 0, err
            assert read_tar((tmp_path / "out.tar").read_bytes()) == read_tar(plain)
            (tmp_path / "out.tar").unlink()
        else:
            assert p.returncode == 2 and err.count("\n") == 1, err
            assert f"{codec} stream decodes to more than 50:1" in err and "TARPROC_MAX_RATIO" in err, err
            assert not (tmp_path / "out.tar").exists()


def test_large_compressed_files_decode_in_a_process_of_their_own(sh, tmp_path):
    """tarcat on a .tar.gz/.tar.bz2/.tar.xz file of more than FILE_PROGRAM_FROM
    bytes: the same samples as the plain tar, and a cut or junk-tailed file is
    one line and exit 2, as through the thread (pigz would take the junk)."""
    members = [(f"s{i:03d}.bin", random.Random(i).randbytes(40_000)) for i in range(40)]
    plain = tar_bytes(members)
    for codec, ext in (("gzip", "gz"), ("bzip2", "bz2"), ("xz", "xz")):
        packed = PACK[codec](plain)
        assert len(packed) >= C.FILE_PROGRAM_FROM
        (tmp_path / f"a.tar.{ext}").write_bytes(packed)
        (tmp_path / f"cut.tar.{ext}").write_bytes(packed[: len(packed) - 5000])
        (tmp_path / f"junk.tar.{ext}").write_bytes(packed + b"junk after the stream")
        got = sh(f"tarcat a.tar.{ext}").stdout
        assert read_tar(got) == members
        for bad in ("cut", "junk"):
            r = sh(f"tarcat {bad}.tar.{ext} > /dev/null", ok=False)
            lines = r.stderr.decode().strip().splitlines()
            assert r.returncode == 2 and len(lines) == 1 and f"{codec} stream is" in lines[0], (codec, bad, lines)
            assert "truncated" in lines[0] if bad == "cut" else "damaged" in lines[0]


def members_of(data):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*", encoding="utf-8", errors="surrogateescape") as tf:
        return [(m.name.encode("utf-8", "surrogateescape"), tf.extractfile(m).read()) for m in tf if m.isfile()]


@pytest.mark.parametrize("codec", ["gzip", "bzip2", "xz", "zstd"])
def test_multi_stream_compressed_input(sh, tmp_path, codec):
    """`cat a.tar.gz b.tar.gz` (and pigz/pbzip2/zstd -T output, which are
    multi-stream too) reads as one stream, split anywhere, as gzip -dc does;
    gzip followed by zero padding (a tape or a preallocated file) too."""
    require("zstd")
    data = b"".join(mc.member(b"%04d.txt" % i, b"x" * i) for i in range(60)) + mc.EOA
    cut = 12345  # not on a block boundary
    z = mc._compress(codec, data[:cut]) + mc._compress(codec, data[cut:])
    if codec == "gzip":
        z += bytes(1000)
    (tmp_path / "in").write_bytes(z)
    p = sh("tarcat < in")
    assert members_of(p.stdout) == members_of(data)


def test_a_gzip_file_of_incompressible_data_is_decoded_in_the_thread(cwd, monkeypatch):
    """JPEG shards gzipped (issue 40, README's gzip row): inflating what
    does not compress costs next to nothing, so no decoder program is
    started for it (its start and pipe hop were the cost); a file that
    compresses keeps the program."""
    noise = tar_bytes([(f"k{i}.jpg", random.Random(i).randbytes(50_000)) for i in range(40)])
    text = tar_bytes([(f"k{i}.txt", b"the same words again " * 2500) for i in range(40)])
    (cwd / "noise.tar.gz").write_bytes(gzip.compress(noise, mtime=0))
    (cwd / "text.tar.gz").write_bytes(gzip.compress(text, mtime=0))
    assert os.path.getsize(cwd / "noise.tar.gz") >= C.FILE_PROGRAM_FROM
    p = subprocess.run(["tarcat", "noise.tar.gz"], cwd=cwd, capture_output=True, timeout=60)
    assert p.returncode == 0 and read_tar(p.stdout) == read_tar(noise)
    monkeypatch.setattr(C, "FILE_PROGRAM_FROM", 0)  # (the text is small once compressed)
    for name, data, kind in (("noise.tar.gz", noise, "_ThreadDecompressed"),
                             ("text.tar.gz", text, "_ProgramDecompressed")):
        stream = open_source(name)
        try:
            assert type(stream.raw).__name__ == kind and read_all(stream) == data, name
        finally:
            stream.close()
