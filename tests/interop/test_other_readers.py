"""What tarproc writes, read by the other tools, at the edges of the formats:
names around ustar's 100-byte name and 155-byte prefix, names that are not
ASCII or not UTF-8, sizes around ustar's 8 GiB limit, compressed outputs,
and every writing command read back by webdataset and wids.

Not repeated here: tests/library/test_writer_bytes.py (the writer's bytes
against a reference), tests/interop/test_wild_producers.py (archives of other
producers), tests/library/test_tario.py (codec round trips, the pax size
record), tests/library/test_urls.py (compressed outputs by name)."""

import io
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from conftest import require
from helpers import tar_bytes
import make_corpus as M

ENV = dict(os.environ, LC_ALL="C.UTF-8")


def run(cmd, cwd, ok=(0,), input=None):
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, capture_output=True, env=ENV,
                       input=input, timeout=120)
    assert p.returncode in ok, f"{cmd!r} exited {p.returncode}: {p.stderr.decode(errors='replace')}"
    return p


def raw_tar(names, path, data=lambda n: b"data:" + n):
    """A pax archive (tarfile) holding one member per name (``bytes``)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape") as tf:
        for n in names:
            ti = tarfile.TarInfo(n.decode("utf-8", "surrogateescape"))
            body = data(n)
            ti.size = len(body)
            tf.addfile(ti, io.BytesIO(body))


def headers(path):
    """``[(typeflag, prefix/name as stored in the ustar fields)]`` of every header block."""
    out = []
    with open(path, "rb") as f:
        while True:
            h = f.read(512)
            if len(h) < 512 or h == bytes(512):
                return out
            size = int(h[124:136].rstrip(b"\0") or b"0", 8)
            name, prefix = h[:100].rstrip(b"\0"), h[345:500].rstrip(b"\0")
            out.append((h[156:157], prefix + b"/" + name if prefix else name))
            f.seek(size + (-size % 512), 1)


# ---------------------------------------------------------------- names

P155 = b"p" * 155
NAMES = [
    b"a" * 95 + b".txt",  # 99 bytes
    b"a" * 96 + b".txt",  # 100
    b"a" * 97 + b".txt",  # 101: pax
    b"p" * 154 + b"/" + b"n" * 96 + b".txt",  # prefix 154 + name 100
    P155 + b"/" + b"n" * 96 + b".txt",  # prefix 155 + name 100: 256 bytes, still ustar
    b"p" * 156 + b"/" + b"n" * 96 + b".txt",  # prefix 156: pax
    b"x" * 154 + b"//" + b"n" * 96 + b".txt",  # the only split leaves '/' at the end of the prefix
    b"x" * 150 + b"/////" + b"n" * 96 + b".txt",  # the same with a run of slashes
    b"y" * 60 + b"//" + b"n" * 95 + b".txt",  # a split with '/' starting the name part
    b"d/" * 150 + b"f.txt",  # 305 bytes
    "a" * 98 + "\u00e9b.txt",  # é straddles byte 100
    "d/" + "a" * 95 + "\u20ac.txt",  # € ends at byte 100
    "\u00e9" * 40 + "/" + "\u00e9" * 40 + ".bin",  # UTF-8, 126 bytes, splittable
    "\u65e5\u672c/\u5199\u771f.jpg",
    b"\xff" * 50 + b"/" + b"\xfe" * 60 + b".bin",  # not UTF-8, 115 bytes, splittable
    b"q" * 120 + b"/" + b"\xe9t\xe9.bin",  # Latin-1, splittable
    b"z" * 200 + b"\xff.bin",  # not UTF-8, cannot split: pax hdrcharset=BINARY
    b"m.a.n.y.d.o.t.s",
]
NAMES = [n.encode() if isinstance(n, str) else n for n in NAMES]


def test_names_at_the_ustar_edges_read_the_same_in_gnu_tar_bsdtar_and_tarfile(tmp_path):
    """tarcat's output of these names lists the same bytes in GNU tar,
    bsdtar and tarfile, and GNU tar has nothing to say about them except
    for the one name that needs hdrcharset=BINARY (a pax record GNU tar
    does not know: it warns and takes the bytes as they are).  Before: the
    ustar split put a '/' at the end of the prefix (bsdtar then read
    'x/n...' for 'x//n...'), and non-UTF-8 names that fit prefix + name got
    a pax header with hdrcharset all the same."""
    require("tar"), require("bsdtar")
    raw_tar(NAMES, tmp_path / "in.tar")
    run("tarcat in.tar -o out.tar", tmp_path)
    gnu = run("tar --quoting-style=literal -tf out.tar", tmp_path)
    assert gnu.stdout.split(b"\n")[:-1] == NAMES
    # bsdtar lists bytes that are not UTF-8 as \ooo (and extracts them as they are)
    bsd = run("bsdtar -tf out.tar", tmp_path).stdout.split(b"\n")[:-1]
    assert [re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), n) for n in bsd] == NAMES
    with tarfile.open(tmp_path / "out.tar", encoding="utf-8", errors="surrogateescape") as tf:
        got = [(m.name.encode("utf-8", "surrogateescape"), tf.extractfile(m).read()) for m in tf]
    assert got == [(n, b"data:" + n) for n in NAMES]
    assert run("tarcat out.tar", tmp_path).stdout == (tmp_path / "out.tar").read_bytes()  # and ours
    warnings = gnu.stderr.decode().splitlines()
    assert warnings == ["tar: Ignoring unknown extended header keyword 'hdrcharset'"], warnings
    # pax only where ustar cannot hold the name, or where it is UTF-8 beyond ASCII
    flags = b"".join(h[0] for h in headers(tmp_path / "out.tar"))
    assert flags == b"".join(b"x0" if i in PAXED else b"0" for i in range(len(NAMES)))


PAXED = {2, 5, 6, 7, 9, 10, 11, 12, 13, 16}


def test_utf8_names_keep_their_bytes_in_the_ustar_fields_as_gnu_tar_writes_them(tmp_path):
    """A UTF-8 name gets a pax path record, and its ustar name field holds
    the name's own bytes, as GNU tar --format=posix writes it (with the
    prefix when the name needs one: GNU tar leaves the prefix empty and cuts
    the name at 100 bytes, inside a character).  Before, that field held the
    name with its non-ASCII characters dropped ('caf\u00e9.txt' -> 'caf.txt'),
    so readers that take only the ustar field (wids) saw other names."""
    require("tar")
    names = ["caf\u00e9.txt", "\u65e5\u672c/\u5199\u771f.jpg", "\u00e9" * 40 + "/" + "\u00e9" * 40 + ".bin"]
    src = tmp_path / "src"
    for n in names:
        (src / n).parent.mkdir(parents=True, exist_ok=True)
        (src / n).write_bytes(n.encode())
    run("tar --format=posix --pax-option=delete=atime,delete=ctime,delete=mtime -cf gnu.tar -C src "
        + " ".join(f"'{n}'" for n in names), tmp_path)
    gnu = [h[1] for h in headers(tmp_path / "gnu.tar") if h[0] == b"0"]
    assert gnu[:2] == [n.encode() for n in names[:2]]  # GNU tar's own ustar fields
    run("tarcat gnu.tar -o out.tar", tmp_path)
    hs = headers(tmp_path / "out.tar")
    assert [h[1] for h in hs if h[0] == b"0"] == [n.encode() for n in names]
    assert [h[0] for h in hs] == [b"x", b"0"] * 3  # and a pax path record each


def test_long_utf8_names_never_cut_a_character_in_the_ustar_field(tmp_path):
    """A name too long for ustar keeps its last bytes there, from a
    character boundary (a pax-blind reader that decodes UTF-8 gets text)."""
    name = ("\u00e9" * 200 + ".bin").encode()
    raw_tar([name], tmp_path / "in.tar")
    run("tarcat in.tar -o out.tar", tmp_path)
    (flag, short), (flag2, full) = headers(tmp_path / "out.tar")
    assert flag == b"x" and flag2 == b"0" and name.endswith(full) and len(full) <= 100
    assert full.decode("utf-8") == "\u00e9" * 48 + ".bin"


WIDS_READ = """
import json, wids
ds = wids.ShardListDataset("index.json", cache_dir="cache", transformations=[])
print(json.dumps([{k: (v.read() if hasattr(v, "read") else v).decode() if k != "__key__" else v
                   for k, v in ds[i].items() if k == "__key__" or not k.startswith("__")}
                  for i in range(len(ds))]))
"""


def wids_samples(cwd, shards):
    run(f"tarindex -q -o index.json {' '.join(shards)}", cwd)
    p = subprocess.run([sys.executable, "-c", WIDS_READ], cwd=cwd, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    return json.loads(p.stdout.decode().splitlines()[-1])


# ---------------------------------------------------------------- every writer, read by webdataset and wids

KEYS = [("a.b/c{}", ["JPG", "seg.PNG", "cls"]), ("d.e.f/g{}", ["txt", "json", "empty"]),
        ("\u00e9{}", ["cls", "Txt"]), ("\u65e5\u672c/\u5199\u771f{}", ["jpg"])]

MAPPER = "def same(sample):\n    return sample\n"


def _wds(path):
    import webdataset as wds

    return [{k: v for k, v in s.items() if k not in ("__url__", "__local_path__")}
            for s in wds.WebDataset(str(path), shardshuffle=False, empty_check=False)]


def _by_tarfile(path):
    """wids' view of a shard, made with tarfile: keys and fields by the
    WebDataset rule, field names as written (wids does not lower-case)."""
    out = []
    with tarfile.open(path) as tf:
        for m in tf:
            slash = m.name.rfind("/")
            dot = m.name.find(".", slash + 1)
            if not out or out[-1]["__key__"] != m.name[:dot]:
                out.append({"__key__": m.name[:dot]})
            out[-1][m.name[dot:]] = tf.extractfile(m).read().decode()
    return out


def test_every_writer_reads_back_the_same_in_webdataset_and_wids(tmp_path):
    """Keys with dots in directory names, upper-case and dotted extensions,
    empty members and non-ASCII keys through every writing command: the
    samples webdataset reads from each output are those it reads from the
    input, and wids (through a tarindex index of all outputs) reads the
    names tarfile reads.  Before, wids saw non-ASCII keys with those
    characters dropped ('\u00e90' as '0', and two keys 'a\u00e9', 'a\u00e8' as one 'a')."""
    members = [(k.format(i) + "." + f, b"" if f == "empty" else f"{k.format(i)}.{f}/{i}".encode())
               for i in range(4) for k, fs in KEYS for f in fs]
    raw_tar([n.encode() for n, _ in members], tmp_path / "in.tar", dict((n.encode(), d) for n, d in members).get)
    (tmp_path / "same.py").write_text(MAPPER)
    (tmp_path / "mix.yaml").write_text("sources:\n  - shards: in.tar\n")
    (tmp_path / "files").mkdir()
    plan = []
    for j, (n, d) in enumerate(members):
        (tmp_path / "files" / str(j)).write_bytes(d)
        plan.append(f"{n} file:files/{j}\n")
    (tmp_path / "plan.txt").write_text("".join(plan))
    run("set -e; tarcat in.tar -o o_tarcat.tar; tarsplit -n 1000 -o 'o_tarsplit-%d.tar' in.tar 2>/dev/null;"
        "tarsort in.tar -o o_tarsort.tar; tarproc -p 2 -c true in.tar -o o_tarproc.tar;"
        "tarproc -p 2 --map same.py:same in.tar -o o_tarproc_map.tar; tarpcat -w 2 in.tar -o o_tarpcat.tar;"
        "tarmix mix.yaml -o o_tarmix.tar; tarcreate plan.txt -o o_tarcreate.tar", tmp_path)
    outs = sorted(p.name for p in tmp_path.glob("o_*.tar"))
    assert len(outs) == 8
    expect = _wds(tmp_path / "in.tar")
    assert len(expect) == 16 and expect[0]["jpg"] == b"a.b/c0.JPG/0" and expect[1]["empty"] == b""
    for out in outs:
        got = _wds(tmp_path / out)
        if out == "o_tarsort.tar":
            got, want = sorted(got, key=lambda s: s["__key__"]), sorted(expect, key=lambda s: s["__key__"])
        else:
            want = expect
        assert got == want, out
    assert wids_samples(tmp_path, outs) == [s for out in outs for s in _by_tarfile(tmp_path / out)]


# ---------------------------------------------------------------- sizes

def _sparse_tar(path, header, size):
    """``header`` + ``size`` bytes of hole + an end marker: an 8 GiB member
    that costs no disk and that GNU tar and bsdtar list by seeking."""
    with open(path, "wb") as f:
        f.write(header)
        f.seek(len(header) + size + (-size % 512))
        f.write(bytes(1024))


@pytest.mark.parametrize("size,pax", [(8 * 2**30 - 1, False), (8 * 2**30, True)])
def test_members_at_ustars_8_gib_limit(tmp_path, size, pax):
    """8 GiB - 1 is the largest size ustar's 11 octal digits hold: a plain
    header; 8 GiB gets a pax size record (not GNU base-256).  Written by
    tarcat from a sparse input (its data read as a region: no copy until the
    output is read), the headers list the right size in GNU tar, bsdtar and
    tarfile."""
    require("tar"), require("bsdtar")
    ti = tarfile.TarInfo("big.bin")
    ti.size, ti.mtime = size, 0
    _sparse_tar(tmp_path / "in.tar", ti.tobuf(format=tarfile.GNU_FORMAT), size)  # base-256 when 8 GiB
    head = run("tarcat in.tar | head -c 2048", tmp_path, ok=(0, 141)).stdout
    hlen = 3 * 512 if pax else 512
    if pax:
        assert head[156:157] == b"x" and head[512:1024].rstrip(b"\0") == b"19 size=8589934592\n"
    assert head[hlen - 512:hlen - 412].rstrip(b"\0") == b"big.bin"
    assert head[hlen - 512 + 124:hlen - 512 + 136] == (b"00000000000\0" if pax else b"77777777777\0")
    _sparse_tar(tmp_path / "ours.tar", head[:hlen], size)
    for lister in ("tar -tvf ours.tar", "bsdtar -tvf ours.tar"):
        line = run(lister, tmp_path).stdout.decode()
        assert f" {size} " in line and line.rstrip().endswith("big.bin"), (lister, line)
    with tarfile.open(tmp_path / "ours.tar") as tf:
        assert [(m.name, m.size) for m in tf] == [("big.bin", size)]


# ---------------------------------------------------------------- compressed outputs

@pytest.mark.parametrize("ext,untar", [("tgz", "tar -xzOf"), ("tar.bz2", "tar -xjOf"),
                                       ("tar.xz", "tar -xJOf"), ("tar.zst", "tar --zstd -xOf")])
def test_compressed_outputs_are_reproducible_and_read_by_gnu_tar(tmp_path, ext, untar):
    """The same command gives the same compressed bytes twice, and with -p 1
    and -p 3; GNU tar decompresses it to what the plain output holds; a
    gzip input (two gzip members, as `cat a.gz b.gz` makes) written to a
    compressed output is compressed once."""
    require("tar"), require("zstd")
    members = [(f"s{i:03d}.{f}", f"{i}{f}".encode() * (i * 37 % 500)) for i in range(60) for f in ("cls", "txt")]
    (tmp_path / "a.tar").write_bytes(tar_bytes(members[:60]))
    (tmp_path / "b.tar").write_bytes(tar_bytes(members[60:]))
    run("gzip -n -c a.tar > a.tar.gz && gzip -n -c b.tar > b.tar.gz && cat a.tar.gz b.tar.gz > ab.tar.gz", tmp_path)
    run(f"tarcat a.tar b.tar -o plain.tar && tarcat ab.tar.gz -o 1.{ext} && tarcat a.tar b.tar -o 2.{ext}"
        f" && tarproc -p 1 -c true ab.tar.gz -o p1.{ext} && tarproc -p 3 -c true a.tar b.tar -o p3.{ext}", tmp_path)
    outs = [(tmp_path / f"{n}.{ext}").read_bytes() for n in ("1", "2", "p1", "p3")]
    assert all(o == outs[0] for o in outs)
    plain = (tmp_path / "plain.tar").read_bytes()
    assert run(f"{untar} 1.{ext} | md5sum", tmp_path).stdout == run("tar -xOf plain.tar | md5sum", tmp_path).stdout
    assert run(f"tarcat 1.{ext}", tmp_path).stdout == plain


def test_non_utf8_names_round_trip_through_gnu_tar(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(M.member(b"caf\xe9.txt", b"latin") + M.EOA)
    sh("tarcat in.tar | tarcat > out.tar")
    # a short non-UTF-8 name goes raw into the ustar field: GNU tar reads it silently
    p = sh("tar --quoting-style=literal -tf out.tar")
    assert p.stdout == b"caf\xe9.txt\n"


def names(path):
    with tarfile.open(path) as tf:
        return [m.name for m in tf if m.isfile()]


run_bash = M.bash


def test_the_empty_field_round_trips_through_every_writer(tmp_path):
    """A member `KEY.` is field "" of sample KEY (webdataset reads it so);
    every command writes it back as `KEY.`, including a sample whose only
    field it is.  tarproc -c used to drop it (and the whole sample), and the
    library's general writer refused it as 'it would not read back'."""
    import webdataset as wds

    members = [(b"k.", b"A"), (b"k.txt", b"B"), (b"d/j.", b"C")]
    (tmp_path / "in.tar").write_bytes(b"".join(M.member(n, d) for n, d in members) + M.EOA)
    want = ["k.", "k.txt", "d/j."]
    for cmd in ["tarcat in.tar", "tarpcat -w 1 in.tar", "tarproc -c true in.tar", "tarsort -r in.tar",
                "tarproc -c 'cp sample. sample.copy' in.tar"]:
        p = run_bash(f"{cmd} > out.tar", tmp_path)
        assert p.returncode == 0, (cmd, p.stderr)
        got = names(tmp_path / "out.tar")
        if "sort" in cmd:
            assert sorted(got) == sorted(want), cmd
        elif "copy" in cmd:
            assert got == ["k.", "k.copy", "k.txt", "d/j.", "d/j.copy"], got
        else:
            assert got == want, (cmd, got)
    samples = list(wds.WebDataset(str(tmp_path / "out.tar"), shardshuffle=False))
    assert [(s["__key__"], s[""], s["copy"]) for s in samples] == [("k", b"A", b"A"), ("d/j", b"C", b"C")]
    # the library's general writer (a sample that is not raw bytes read from a tar)
    code = ("import sys, tarproc as S\n"
            "w = S.SampleWriter(sys.stdout.buffer)\n"
            "w.write({'__key__': 'k.x'[:1], '': 'A', 'txt': bytearray(b'B')})\n"
            "w.close()\n")
    with open(tmp_path / "lib.tar", "wb") as f:
        p = subprocess.run([sys.executable, "-c", code], stdout=f, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr
    assert names(tmp_path / "lib.tar") == ["k.", "k.txt"]
