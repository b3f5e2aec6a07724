"""Tar shards from the wild: archives made by real producers (GNU tar,
bsdtar, Python's tarfile in its three formats, webdataset's TarWriter,
``git archive``, zip converted by bsdtar), generated here, run through every
reading command as installed subprocesses.

Each archive either gives the samples GNU tar extracts from it (same names,
same bytes), or one stderr line naming the file and the offset, exit 2.  What
tarcat writes from each reads back the same in GNU tar, bsdtar, tarfile,
webdataset and wids.  The decisions (AppleDouble, multi-volume pieces,
``./`` names, hard links) are in docs/reading.md.  Also here: one directory
in every format of GNU tar and bsdtar, read like GNU tar extracts it.  Not
repeated here: tests/library/test_tario.py (sparse files)."""

import io
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from conftest import require

UTF8 = {"LC_ALL": "C.UTF-8"}

PRODUCE = r"""
set -e
mk() {  # a small dataset: samples a and b (txt, cls), sub/e, dot-prefixed names from tar -C src .
  rm -rf src; mkdir -p src/sub; printf hello > src/a.txt; printf 1 > src/a.cls; printf world > src/b.txt
  printf 2 > src/b.cls; printf x > src/sub/e.txt
}
mk
python3 -c "import os; os.setxattr('src/a.txt', 'user.tag', b'bar\n=baz'); os.setxattr('src/b.txt', 'user.k', b'\xff\0v')"
ln -s a.txt src/sym.txt; ln src/b.cls src/hard.cls
bsdtar --format=pax -cf bsd_pax_xattr.tar -C src .
tar --xattrs --xattrs-include='*' --acls --format=posix -cf gnu_xattr_acl.tar -C src .
mk
long=$(printf 'p%.0s' $(seq 60))/$(printf 'q%.0s' $(seq 60)); mkdir -p src/$long
printf L > src/$long/f.txt; printf 9 > src/$long/f.cls; ln -s $long/f.txt src/$(printf 's%.0s' $(seq 110)).txt
tar --format=gnu -cf gnu_longlink.tar -C src .
tar --format=gnu -V 'LABEL 1' -cf gnu_label.tar -C src a.txt a.cls
tar --format=gnu --listed-incremental=snap -cf gnu_incr.tar -C src .
mk
touch -d 1901-06-01 src/a.txt; touch -d 2500-06-01 src/b.txt; touch -d 1960-01-01 src/a.cls
tar --format=gnu -cf gnu_mtimes.tar -C src .
mk
tar -cf gnu_append.tar -C src a.txt a.cls b.txt b.cls; printf NEW > src/a.txt; tar -rf gnu_append.tar -C src a.txt
mk
head -c 30000 /dev/urandom > src/big.bin
tar --format=gnu -M -L 20 -cf mv1.tar -f mv2.tar -C src a.txt big.bin b.txt b.cls
tar --format=posix -M -L 24 -cf pmv1.tar -f pmv2.tar -C src a.txt big.bin b.txt b.cls
mk
(cd src && git init -q . && git add . && git -c user.email=a@b -c user.name=n commit -qm m \
   && git archive --format=tar HEAD > ../git.tar)
mk
(cd src && zip -qr ../z.zip .) && bsdtar -cf zip2tar.tar @z.zip
mk
tar --format=gnu -P -cf abs.tar "$PWD/src/a.txt"
(cd src/sub && tar -P -cf ../../dotdot.tar ../a.txt)
tar -cf dupfield.tar -C src a.txt a.cls; tar -rf dupfield.tar -C src a.txt
rm -rf src snap z.zip
"""


def _add(tf, name, data, **kw):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in kw.items():
        setattr(info, k, v)
    tf.addfile(info, io.BytesIO(data))


def _resum(data, at=0):
    """``data`` with the checksum of the header at ``at`` made right again."""
    h = bytearray(data[at:at + 512])
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return data[:at] + bytes(h) + data[at + 512:]


def _python_made(d):
    """tarfile in its GNU and pax formats (ustar: tests/commands/test_tarcat.py; huge and non-ASCII owners, negative and
    far-future times, long names), a pax global header, webdataset's writer,
    and what no installed producer writes but real ones do (Solaris 'X'
    headers, pre-POSIX directories, AppleDouble members, a base-256 size),
    made by tarfile with one header byte changed."""
    import webdataset as wds

    for fmt, name in ((tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax")):
        ustar = fmt == tarfile.USTAR_FORMAT
        with tarfile.open(d / f"py_{name}.tar", "w", format=fmt, encoding="utf-8") as tf:
            _add(tf, "./k1.txt", b"one", uid=7, gid=8, uname="u", gname="g")
            _add(tf, "k1.cls", b"1")
            _add(tf, "k2.txt", b"two", uid=2**20 if ustar else 2**40, gid=5 if ustar else 2**40,
                 uname="jose" if ustar else "jos\u00e9", gname="g" if ustar else "gr\u00fcn",
                 mtime=0 if ustar else -1000)
            _add(tf, "k2.cls", b"2", mtime=1 if ustar else 2**40)
            _add(tf, "dir/" + "x" * (80 if ustar else 150) + ".txt", b"long")
    with tarfile.open(d / "py_pax_global.tar", "w", format=tarfile.PAX_FORMAT,
                      pax_headers={"comment": "made by hand", "mtime": "12345.5"}) as tf:
        _add(tf, "g.txt", b"G")
        _add(tf, "g.cls", b"0")
    with open(d / "wds.tar", "wb") as f:
        w = wds.TarWriter(f)
        w.write({"__key__": "s1", "txt": "a", "cls": 1})
        w.write({"__key__": "s2", "txt": "b", "cls": 2})
        w.close()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        _add(tf, "s\u00e9.txt", b"solaris")
        _add(tf, "s\u00e9.cls", b"1")
    data = bytearray(buf.getvalue())
    assert data[156:157] == b"x"
    data[156:157] = b"X"
    (d / "solaris_X.tar").write_bytes(_resum(bytes(data)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo("d.x/")  # a directory as old tars wrote one: a regular entry ending in /
        info.type = tarfile.AREGTYPE
        tf.addfile(info)
        _add(tf, "d.x/a.txt", b"A")
    (d / "v7dir.tar").write_bytes(buf.getvalue())
    with tarfile.open(d / "appledouble.tar", "w", format=tarfile.PAX_FORMAT) as tf:
        for k in ("k1", "k2"):  # as bsdtar on macOS writes them: the resource fork first
            _add(tf, f"./._{k}.jpg", b"\0\x05\x16\x07\0\x02\0\0Mac OS X        " + bytes(60))
            _add(tf, f"./{k}.jpg", b"JPEG" + k.encode())
            _add(tf, f"./{k}.cls", b"1")
        _add(tf, "__MACOSX/._k3.txt", b"\0\x05\x16\x07")  # Finder's zip, converted
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        _add(tf, "b.txt", b"base256")
        _add(tf, "b.cls", b"1")
    data = bytearray(buf.getvalue())
    data[124:136] = b"\x80" + bytes(10) + b"\x07"  # GNU base-256 size 7
    (d / "b256size.tar").write_bytes(_resum(bytes(data)))
    with tarfile.open(d / "binary_name.tar", "w", format=tarfile.PAX_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tf:
        _add(tf, "caf\udce9.txt", b"latin-1 name")
        _add(tf, "x" * 120 + "\udcff.txt", b"hdrcharset=BINARY")


@pytest.fixture(scope="module")
def wild(tmp_path_factory):
    for tool in ("tar", "bsdtar", "git", "zip"):
        require(tool)
    d = tmp_path_factory.mktemp("wild")
    p = subprocess.run(["bash", "-c", PRODUCE], cwd=d, capture_output=True, env={**os.environ, **UTF8})
    assert p.returncode == 0, p.stderr.decode()
    _python_made(d)
    return d


def _records(path):
    """Every pax record keyword of an archive, and the raw bytes."""
    keys = set()
    with tarfile.open(path, encoding="utf-8", errors="surrogateescape") as tf:
        keys.update(tf.pax_headers)
        for m in tf:
            keys.update(m.pax_headers)
    return keys


def _blocks(data):
    return [data[i:i + 512] for i in range(0, len(data), 512)]


def test_the_producers_wrote_what_each_case_is_about(wild):
    """The archives hold the features they stand for (else the tests below prove nothing)."""
    raw = {p.stem: p.read_bytes() for p in wild.glob("*.tar")}
    assert any(k.startswith("LIBARCHIVE.xattr.") for k in _records(wild / "bsd_pax_xattr.tar"))
    assert any(k.startswith("SCHILY.xattr.") for k in _records(wild / "bsd_pax_xattr.tar"))
    assert any(k.startswith("SCHILY.xattr.") for k in _records(wild / "gnu_xattr_acl.tar"))
    assert "comment" in _records(wild / "git.tar")  # git's commit id, in a pax global header
    assert raw["git"].startswith(b"pax_global_header") and raw["git"][156:157] == b"g"
    assert {b"L", b"K"} <= {h[156:157] for h in _blocks(raw["gnu_longlink"]) if h.startswith(b"././@LongLink")}
    assert raw["gnu_label"][156:157] == b"V" and raw["mv2"][156:157] == b"M"
    assert b"GNU.volume.offset" in raw["pmv2"] and b"GNUFileParts" in raw["pmv2"]
    assert any(h[156:157] == b"D" and h[257:265] == b"ustar  \0" for h in _blocks(raw["gnu_incr"]))
    mt = {h[136:137] for h in _blocks(raw["gnu_mtimes"])}
    assert b"\x80" in mt and b"\xff" in mt  # base-256 far future and negative times
    assert b"uid=1099511627776" in raw["py_pax"] and b"uname=jos\xc3\xa9" in raw["py_pax"]
    assert any(h[108:109] == b"\x80" and h.startswith(b"k2.txt") for h in _blocks(raw["py_gnu"]))  # base-256 uid
    assert raw["b256size"][124:125] == b"\x80" and raw["solaris_X"][156:157] == b"X"
    assert b"GNU.volume" not in raw["gnu_append"] and raw["gnu_append"].count(b"a.txt") == 2


READABLE = ["bsd_pax_xattr", "gnu_xattr_acl", "gnu_longlink", "gnu_label", "gnu_incr", "gnu_mtimes", "gnu_append",
            "mv2", "pmv2", "git", "zip2tar", "py_gnu", "py_pax", "py_pax_global", "wds", "solaris_X", "v7dir",
            "appledouble", "b256size", "binary_name"]


def _tree(root):
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, root).encode("utf-8", "surrogateescape")] = fh.read()
    return out


def _groups(path, wild=False):
    """``[(key, {field: bytes})]`` of a tar read by tarfile, consecutive
    members with one key together.  ``wild``: the members docs/reading.md
    says are samples: regular files with a dot in the file name but not first
    (AppleDouble ``._x`` out), fields lower-cased, no piece of a file
    continued from another volume (GNU tar names them GNUFileParts/...)."""
    out = []
    with tarfile.open(path, encoding="utf-8", errors="surrogateescape") as tf:
        for m in tf:
            if not m.isfile():
                continue
            name = m.name
            if wild and path.name == "gnu_incr.tar":
                # tarfile takes the atime GNU tar -g keeps where ustar has its prefix ("ustar  " magic,
                # not "ustar\0") for a prefix; GNU tar, bsdtar and tarproc do not
                name = re.sub(r"^[0-7]+/", "", name)
            slash = name.rfind("/")
            dot = name.find(".", slash + 1)
            if wild and (dot <= slash + 1 or "GNUFileParts/" in name):
                continue
            key, field = name[:dot], name[dot + 1:]
            if wild:
                field = field.lower()
            if not out or out[-1][0] != key:
                out.append((key, {}))
            out[-1][1][field] = tf.extractfile(m).read()
    return out


def _run(cmd, cwd, ok=(0,)):
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, capture_output=True, timeout=60,
                       env={**os.environ, **UTF8})
    assert b"Traceback" not in p.stderr, (cmd, p.stderr.decode(errors="replace"))
    assert p.returncode in ok, (cmd, p.returncode, p.stderr.decode(errors="replace"))
    return p


@pytest.mark.parametrize("case", READABLE)
def test_archives_read_like_gnu_tar_extracts_them_and_what_we_write_reads_back(wild, tmp_path, case):
    """tarcat, tarsort, tarsplit and tarfirst give the files GNU tar extracts
    (sample members only: no AppleDouble, no hard-link names, whose data come
    under the first name, no piece of a multi-volume file); tarcat's output
    reads back the same in GNU tar, bsdtar, tarfile and webdataset."""
    import webdataset as wds

    src = wild / f"{case}.tar"
    for d in ("ref", "got", "bsd", "sorted", "split"):
        (tmp_path / d).mkdir()
    subprocess.run(["tar", "-xf", str(src), "-C", "ref"], cwd=tmp_path, capture_output=True, env={**os.environ, **UTF8})
    with tarfile.open(src, encoding="utf-8", errors="surrogateescape") as tf:
        links = {os.path.normpath(m.name).encode("utf-8", "surrogateescape") for m in tf if m.islnk()}
    expected = {n: v for n, v in _tree(tmp_path / "ref").items()
                if b"." in n.rsplit(b"/", 1)[-1][1:] and not n.rsplit(b"/", 1)[-1].startswith(b".")
                and n not in links and b"GNUFileParts" not in n}
    assert expected, "GNU tar extracted no sample member"

    p = _run(f"tarcat -v {src} > out.tar", tmp_path)
    warned = [line for line in p.stderr.decode().splitlines() if "warning" in line]
    assert (case in ("mv2", "pmv2")) == bool(warned), warned  # a piece of a file: skipped, said once
    if warned:
        assert len(warned) == 1 and "offset" in warned[0] and "another volume" in warned[0]
    # gnu_append (samples a, b, a, each a with a.txt): sorted, the two samples a would be one with a field
    # twice: refused (docs/reading.md); GNU tar extracts the later a.txt
    dup = case == "gnu_append"
    _run("tar -xf out.tar -C got && bsdtar -xf out.tar -C bsd"
         + ("" if dup else f" && tarsort {src} | tar -xf - -C sorted")
         + f" && tarsplit -n 2 -o part {src} && for f in part-*.tar; do tar -xf $f -C split; done", tmp_path)
    for d in ("got", "bsd", "split") if dup else ("got", "bsd", "sorted", "split"):
        assert _tree(tmp_path / d) == expected, d
    if dup:
        p = _run(f"tarsort {src} -o sorted.tar", tmp_path, ok=(2,))
        assert len(p.stderr.splitlines()) == 1 and b"sample 'a': field 'txt' written twice" in p.stderr
        assert not (tmp_path / "sorted.tar").exists()

    samples = _groups(tmp_path / "out.tar")
    assert samples == _groups(src, wild=True)
    by_wds = [(s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")})
              for s in wds.WebDataset(str(tmp_path / "out.tar"), shardshuffle=False, empty_check=False)]
    assert by_wds == samples
    txt = [f["txt"] for _, f in samples if "txt" in f]
    p = _run(f"tarfirst -f txt {src}", tmp_path, ok=(0, 1))
    assert p.stdout == (txt[0] if txt else b"") and p.returncode == (0 if txt else 1)
    (wild / "out").mkdir(exist_ok=True)
    os.replace(tmp_path / "out.tar", wild / "out" / f"{case}.tar")  # for wids, below


def test_reports_of_every_wild_archive(wild, tmp_path):
    """tarindex, tar2tsv, tarshow and tarcheck, all archives in one run each:
    the samples of each, as tarfile groups them by the rules of docs/reading.md."""
    srcs = [wild / f"{c}.tar" for c in READABLE]
    want = {c: _groups(wild / f"{c}.tar", wild=True) for c in READABLE}
    args = " ".join(str(s) for s in srcs)
    _run(f"tarindex -q -o idx.json {args}", tmp_path)
    index = json.loads((tmp_path / "idx.json").read_text())
    assert [e["nsamples"] for e in index["shardlist"]] == [len(want[c]) for c in READABLE]
    rows = _run(f"tar2tsv {args}", tmp_path).stdout.decode("utf-8", "surrogateescape").splitlines()
    assert [r.split("\t")[0] for r in rows[1:]] == [k for c in READABLE for k, _ in want[c]]
    shown = _run(f"tarshow -q --format blocks {args}", tmp_path).stdout.decode("utf-8", "surrogateescape")
    assert all(k in shown for c in READABLE for k, _ in want[c])
    report = _run(f"tarcheck {args}", tmp_path, ok=(1,)).stdout.decode()
    for c in READABLE:
        assert f"{c}.tar: {len(want[c])} samples," in report, c
    assert "(1 multi-volume continuations)" not in report and "big.bin (multi-volume continuations)" in report
    assert "._k1.jpg (macOS AppleDouble files (._*))" in report


REFUSED = [
    ("abs", 0, "absolute member name"),
    ("dotdot", 0, "'..' component"),
    ("dupfield", None, "field 'txt' appears twice"),
    ("mv1", 1024, "input ends inside member data of 'big.bin'"),
    ("pmv1", None, "input ends inside member data of 'big.bin'"),
]


@pytest.mark.parametrize("case,offset,what", REFUSED, ids=[c for c, _, _ in REFUSED])
def test_refused_archives_give_one_line_naming_file_and_offset(wild, tmp_path, case, offset, what):
    """GNU tar strips a leading / and skips '..' names (then exits 2); a
    field twice in a row (tar -r) is one sample with a field twice; the first
    volume of a multi-volume set ends inside a member.  Every reading command:
    exit 2, one line naming the file, the offset (or the key) and the problem."""
    src = wild / f"{case}.tar"
    for cmd in ("tarcat", "tarsort", "tarsplit -n 1 -o part", "tarindex -o i.json", "tar2tsv", "tarshow",
                "tarfirst -f cls"):
        p = _run(f"{cmd} {src} > out", tmp_path, ok=(2,))
        lines = p.stderr.decode().splitlines()
        assert len(lines) == 1, (cmd, lines)
        assert str(src) in lines[0] and what in lines[0], (cmd, lines)
        if offset is not None:
            assert f"offset {offset}:" in lines[0], (cmd, lines)
    assert not list(tmp_path.glob("i.json")) and not list(tmp_path.glob(".*partial"))
    p = _run(f"tarcheck {src}", tmp_path, ok=(1, 2))
    assert "PROBLEM" in p.stdout.decode()


def test_adjacent_samples_with_one_key_are_never_written(wild, tmp_path):
    """Two shards, one ending and one (git archive) starting with a sample 'a':
    joined or sorted, the writer would put two samples 'a' side by side,
    which every reader takes as one sample (or one with a field twice).
    tarcat and tarsplit refuse with one line naming the key, exit 2, and
    leave no output when a field repeats (as here)."""
    a = wild / "gnu_append.tar"
    for cmd in (f"tarcat {a} {wild / 'git.tar'} -o out.tar", f"tarcat -f txt {a} {a} -o out.tar",
                f"tarsplit -n 10 -o part {a} {a}"):
        p = _run(cmd, tmp_path, ok=(2,))
        assert len(p.stderr.splitlines()) == 1 and b"sample 'a'" in p.stderr and b"same key" in p.stderr, cmd
        assert not list(tmp_path.iterdir()), cmd


WIDS_READ = r"""
import json, sys
import wids
ds = wids.ShardListDataset("index.json", cache_dir="cache", transformations=[])
print(json.dumps([[ds[i]["__key__"], sorted(k for k in ds[i] if not k.startswith("__"))] for i in range(len(ds))]))
"""


def test_wids_reads_what_we_write_from_the_wild(wild, tmp_path):
    """wids (one process: importing torch is the slow part) through a
    tarindex index of tarcat's output of each archive whose names are ASCII
    and fit ustar's 100 bytes (wids reads only that field, not pax records:
    docs/tarindex.md).  Not
    gnu_append: wids gathers a key that comes back (a, b, a) into one sample
    while the index counts three (docs/reading.md)."""
    names = []
    expect = []
    for case in READABLE:
        out = wild / "out" / f"{case}.tar"
        if not out.exists():
            (wild / "out").mkdir(exist_ok=True)
            _run(f"tarcat {wild / f'{case}.tar'} -o {out}", tmp_path)
        groups = _groups(out)
        if case != "gnu_append" and all(len(k + "." + f) <= 100 and (k + f).isascii() for k, fs in groups for f in fs):
            names.append(str(out))
            expect += [[k, sorted("." + f for f in fs)] for k, fs in groups]
    assert len(names) >= 12
    _run(f"tarindex -q -o index.json {' '.join(names)}", tmp_path)
    p = subprocess.run([sys.executable, "-c", WIDS_READ], cwd=tmp_path, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert json.loads(p.stdout.decode().splitlines()[-1]) == expect


@pytest.mark.parametrize("fmt,what", [("cpio", "a cpio archive (odc)"), ("newc", "a cpio archive (newc)"),
                                      ("bin", "a cpio archive (binary)"), ("ar", "an ar archive"),
                                      ("zip", "a ZIP archive")])
def test_other_archive_formats_are_named(tmp_path, fmt, what):
    """bsdtar writes other archive formats too; a small one is shorter than
    a tar header: still named, never 'input ends inside a header'.  A cpio
    archive converts with bsdtar and then reads."""
    (tmp_path / "a.txt").write_bytes(b"A")
    _run(f"bsdtar --format={fmt} -cf x a.txt", tmp_path)
    p = _run("tarcat x", tmp_path, ok=(2,))
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tarcat: x: offset 0: not a tar archive (looks like {what}")
    if fmt != "ar":
        assert _run("bsdtar -cf conv.tar @x && tarcat conv.tar | tar -xOf -", tmp_path).stdout == b"A"


def _tree_files(root):
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, root)] = fh.read()
    return out


@pytest.fixture(scope="module")
def dialect_dir(tmp_path_factory):
    """Files with a bit of everything a real directory has: dots in directory
    names, a 120-character directory, UTF-8, an empty file, a symlink, a hard
    link, a FIFO, and sparse files (one with more holes than the header map holds)."""
    d = tmp_path_factory.mktemp("dialects") / "src"
    (d / "a.b").mkdir(parents=True)
    (d / "a.b" / "c.d.jpg").write_bytes(b"jpeg")
    (d / "a.b" / "c.cls").write_bytes(b"3")
    (d / ("n" * 120)).mkdir()
    (d / ("n" * 120) / "0001.txt").write_bytes(b"long")
    (d / "caf\u00e9.txt").write_bytes("\u00e9".encode())
    (d / "empty.txt").write_bytes(b"")
    os.symlink("a.b/c.cls", d / "link.txt")
    os.link(d / "a.b" / "c.cls", d / "hard.cls")
    os.mkfifo(d / "fifo.p")
    with open(d / "many.bin", "wb") as f:  # 10 data regions: old GNU needs extension headers
        for i in range(10):
            f.seek(i * 50000)
            f.write(b"D%d" % i * 3000)
        f.truncate(600000)
    with open(d / "few.bin", "wb") as f:
        f.seek(70000)
        f.write(b"Y" * 1000)
        f.truncate(100000)
    return d


DIALECTS = [("tar", "gnu"), ("tar", "oldgnu"), ("tar", "posix"), ("tar", "ustar"), ("tar", "v7"),
            ("tar", "posix --sparse-version=0.1"), ("tar", "posix --sparse-version=1.0"),
            ("bsdtar", "pax"), ("bsdtar", "ustar"), ("bsdtar", "gnutar"), ("bsdtar", "v7")]


@pytest.mark.parametrize("tool,fmt", DIALECTS, ids=[f"{t}-{f.split()[-1]}" for t, f in DIALECTS])
def test_tar_dialects_read_like_gnu_tar_extracts(sh, tmp_path, dialect_dir, tool, fmt):
    """GNU tar and bsdtar archives of the same files, in every format they
    write (sparse files stored as sparse where the format can): tarcat gives
    exactly the regular files GNU tar extracts from the same archive, sparse
    files whole (holes as zeros), names and bytes equal; links, directories
    and FIFOs are skipped and counted."""
    require("bsdtar")
    sparse = "--sparse" if tool == "tar" and fmt != "v7" and fmt != "ustar" else ""
    sh(f"{tool} --format={fmt} {sparse} -cf in.tar -C {dialect_dir} . 2>/dev/null || test -s in.tar")
    p = sh("tarcat -v in.tar > out.tar", stderr_ok=True)
    assert b"samples read" in p.stderr
    (tmp_path / "ref").mkdir()
    (tmp_path / "got").mkdir()
    sh("tar -xf in.tar -C ref 2>/dev/null; tar -xf out.tar -C got")
    ref = {k: v for k, v in _tree_files(tmp_path / "ref").items() if "." in os.path.basename(k)}
    got = _tree_files(tmp_path / "got")
    # hard links: the first name holds the data, the second is a link member,
    # which readers skip (as webdataset): exactly one of the two names comes out
    linked = [n for n in ("hard.cls", os.path.join("a.b", "c.cls")) if n in got]
    assert len(linked) == 1 and got[linked[0]] == b"3"
    ref = {k: v for k, v in ref.items() if k not in ("hard.cls", os.path.join("a.b", "c.cls"))}
    got = {k: v for k, v in got.items() if k not in ("hard.cls", os.path.join("a.b", "c.cls"))}
    assert got.keys() == ref.keys()
    assert got == ref
    if fmt.startswith(("gnu", "oldgnu", "posix", "pax")):
        assert got["many.bin"][:6] == b"D0D0D0" and len(got["many.bin"]) == 600000
        assert got["few.bin"][70000:71000] == b"Y" * 1000
