"""Class: format corners, read as the reference tools read them (GNU tar,
``zstd -dc``, Python's tarfile).  Instances here: a .tar.zst holding only
a skippable frame (``zstd -dc`` decodes it to nothing; tarindex said "no
frame"); pax numbers that Python's ``int`` accepts and GNU tar refuses
(``size=1_0``, ``+1``, `` 1``, Arabic-Indic digits) and octal fields
with ``_`` or ``+``: damage, one line naming the offset.  Other readers'
corpora (libarchive, Go's archive/tar): signed-byte checksums, a pax
``mtime`` that is not a number (a warning), global headers, Solaris ACLs;
extended headers left before an end-of-archive marker never rename the next
archive's members (``cat a.tar b.tar``), on every reading path."""

import json
import struct
import subprocess

import pytest

from helpers import tar_bytes

SKIPPABLE = struct.pack("<II", 0x184D2A50, 4) + b"SKIP"


def test_zstd_of_only_a_skippable_frame_is_an_empty_archive(sh, tmp_path):
    (tmp_path / "s.tar.zst").write_bytes(SKIPPABLE)
    assert subprocess.run(["zstd", "-dc", str(tmp_path / "s.tar.zst")], capture_output=True).returncode == 0
    assert sh("tarcat s.tar.zst | tar tf -").stdout == b""
    sh("tarindex s.tar.zst -o i.json")
    assert json.loads((tmp_path / "i.json").read_text())["shardlist"][0]["nsamples"] == 0
    p = sh("python -c \"import tarproc; print(len(tarproc.IndexedDataset('i.json')))\"")
    assert p.stdout == b"0\n"
    # and a skippable frame before real frames still indexes every sample
    plain = tar_bytes([("a.txt", b"A"), ("b.txt", b"B")])
    z = subprocess.run(["zstd", "-q", "-c"], input=plain, capture_output=True, check=True).stdout
    (tmp_path / "t.tar.zst").write_bytes(SKIPPABLE + z + SKIPPABLE)
    sh("tarindex t.tar.zst -o j.json")
    assert sh("python -c \"import tarproc; print([s['__key__'] for s in tarproc.IndexedDataset('j.json')])\"") \
        .stdout == b"['a', 'b']\n"


def _header(name, size_field, typ=b"0"):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size_field
    h[136:148] = b"00000000000\0"
    h[156:157] = typ
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"        "
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def _pax(key, value):
    rec = b" " + key + b"=" + value + b"\n"
    n = len(rec) + 2
    while len(str(n)) + len(rec) != n:
        n += 1
    body = str(n).encode() + rec
    return _header(b"././@PaxHeader", b"%011o\0" % len(body), b"x") + body + b"\0" * (-len(body) % 512)


@pytest.mark.parametrize("archive, why", [
    (_pax(b"size", b"1_0") + _header(b"b.txt", b"%011o\0" % 10) + b"B" * 512, b"bad pax size value"),
    (_pax(b"size", b"+1") + _header(b"b.txt", b"%011o\0" % 1) + b"B" * 512, b"bad pax size value"),
    (_pax(b"size", b" 1") + _header(b"b.txt", b"%011o\0" % 1) + b"B" * 512, b"bad pax size value"),
    (_pax(b"size", "\u0661".encode()) + _header(b"b.txt", b"%011o\0" % 1) + b"B" * 512, b"bad pax size value"),
    (_header(b"b.txt", b"0000000_001\0") + b"B" * 512, b"non-octal size field"),
    (_header(b"b.txt", b"+0000000001\0") + b"B" * 512, b"non-octal size field"),
])
def test_numbers_python_accepts_and_tar_refuses(sh, tmp_path, archive, why):
    (tmp_path / "x.tar").write_bytes(archive + b"\0" * 1024)
    assert subprocess.run(["tar", "tf", str(tmp_path / "x.tar")], capture_output=True).returncode != 0
    for cmd in ("tarcat x.tar", "tarcheck x.tar"):
        p = sh(cmd, ok=False)
        assert p.returncode == 2, (cmd, p.stderr)
        assert why in p.stderr and b"offset" in p.stderr and b"Traceback" not in p.stderr, p.stderr


def _named_twice(order):
    """One member named by a GNU long name ('L') and a pax path ('x'), in
    ``order`` ("Lx" or "xL"), as no writer makes them but a hostile shard can."""
    import tarfile

    def raw(name, size, typ):
        ti = tarfile.TarInfo(name)
        ti.size, ti.type = size, typ
        return ti._create_header(ti.get_info(), tarfile.GNU_FORMAT, "utf-8", "surrogateescape")

    def pad(data):
        return data + b"\0" * (-len(data) % 512)

    long = b"L" * 120 + b".txt"
    rec = b"path=pax.txt\n"
    rec = b"%d %s" % (len(rec) + 3, rec)
    parts = {"L": raw("././@LongLink", len(long) + 1, b"L") + pad(long + b"\0"),
             "x": raw("././@PaxHeader", len(rec), b"x") + pad(rec)}
    body = b"".join(parts[c] for c in order) + raw("short.txt", 5, b"0") + pad(b"hello") + b"\0" * 1024
    return body


@pytest.mark.parametrize("order", ["Lx", "xL"])
def test_a_member_named_by_a_long_name_and_a_pax_path_is_reported(sh, tmp_path, order):
    """With the long name first, GNU tar reads the pax path and tarfile (as
    bsdtar and webdataset) the long name: the readers disagree on the
    member's name, and tarcheck said "ok".  Read as GNU tar reads it, and
    reported by tarcheck (exit 1) in either order."""
    import tarfile

    (tmp_path / "two.tar").write_bytes(_named_twice(order))
    assert sh("tar tf two.tar").stdout == b"pax.txt\n"
    with tarfile.open(tmp_path / "two.tar") as tf:
        assert tf.getnames() == (["L" * 120 + ".txt"] if order == "Lx" else ["pax.txt"])
    assert sh("tarcat two.tar | tar tf -").stdout == b"pax.txt\n"
    p = sh("tarcheck --json two.tar", ok=False)
    assert p.returncode == 1, p.stderr
    (prob,) = json.loads(p.stdout)["shards"][0]["problems"]
    assert prob["kind"] == "conflicting_names" and "pax.txt" in prob["examples"][0], prob


# ---------------------------------------------------------------- other readers' corpora, concatenations

import make_corpus as M  # noqa: E402

# (the command, how its result names the members): the general reader, the fast path, tarpcat's
# workers, tarcheck's and tarindex's member readers
READERS = ["tarcat {} | tar tf -", "tarcat --rekey '{{key}}' {} | tar tf -", "tarpcat {} | tar tf -",
           "tarcheck --json {}", "tarindex -o i.json {} && cat i.json"]


def _signed_checksum(h):
    h = bytearray(h)
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(b if b < 128 else b - 256 for b in h)
    return bytes(h)


_B = M.member(b"b.txt", b"bbb") + M.EOA
CORPUS = {  # name: (archive, GNU tar's names, what our readers must say: names or an error)
    # plexus archiver summed signed bytes: GNU tar, bsdtar and tarfile accept it
    "signed-checksum": (_signed_checksum(M.header("caf\u00e9.txt".encode(), size=5)) + M.pad(b"hello")
                        + M.member(b"caf2.txt", b"x") + M.EOA, ["caf\u00e9.txt", "caf2.txt"], None),
    # Go's pax-bad-mtime: all three references read on (GNU tar complains): a warning
    "pax-mtime-not-a-number": (M.special(b"x", M.pax_record("mtime", b"not-a-number"), name=b"p")
                               + M.member(b"a.txt", b"aaa") + M.member(b"b.txt", b"bbb") + M.EOA,
                               ["a.txt", "b.txt"], None),
    "global-pax-mtime-not-a-number": (M.special(b"g", M.pax_record("mtime", b"xyz"), name=b"g")
                                      + M.member(b"a.txt", b"aaa") + M.member(b"b.txt", b"bbb") + M.EOA,
                                      ["a.txt", "b.txt"], None),
    # a Solaris ACL describes the member after it (GNU tar lists it as an unknown type, bsdtar skips it)
    "solaris-acl": (M.header(b"a.txt", size=20, flag=b"A") + M.pad(b"16777218\0user::rw-\0\0")
                    + M.member(b"a.txt", b"aaa") + M.member(b"b.txt", b"bbb") + M.EOA, None, ["a.txt", "b.txt"]),
    # a global header applies to the members after it, as GNU tar applies it (size, mtime, path)
    "global-pax-size": (M.special(b"g", M.pax_record("size", b"512"), name=b"g") + M.member(b"a.txt", b"aaa")
                        + M.member(b"b.txt", b"bbb") + M.EOA, ["a.txt", "b.txt"], None),
    "global-then-x-path": (M.special(b"g", M.pax_record("path", b"g.txt"), name=b"g")
                           + M.special(b"x", M.pax_record("path", b"x.txt"), name=b"p")
                           + M.member(b"a.txt", b"aaa") + M.member(b"b.txt", b"bbb") + M.EOA, ["x.txt", "g.txt"], None),
    # extended headers never survive an end-of-archive marker (cat a.tar b.tar: b's names are b's)
    "global-path-before-eoa": (M.member(b"a.txt", b"aaa") + M.special(b"g", M.pax_record("path", b"renamed.txt"),
                                                                     name=b"g") + M.EOA + _B, None, ["a.txt", "b.txt"]),
}
# (zeros: one zero block, read on as tar -i does, or the whole marker)
for flag, body, zeros in ((b"x", M.pax_record("path", b"renamed.txt"), 2), (b"X", M.pax_record("path", b"renamed.txt"), 1),
                          (b"L", b"renamed.txt\0", 2), (b"K", b"renamed.txt\0", 1)):
    CORPUS[f"dangling-{flag.decode()}-{zeros}-zeros"] = (
        M.member(b"a.txt", b"aaa") + M.special(flag, body, name=b"p") + bytes(512 * zeros) + _B,
        ["a.txt", "b.txt"] if zeros == 2 else None, "end-of-archive block right after a long-name or pax header")


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_other_readers_corpus_on_every_reading_path(sh, tmp_path, case):
    data, gnu, ours = CORPUS[case]
    (tmp_path / "c.tar").write_bytes(data)
    if gnu is not None:
        assert sh("tar -itf c.tar", stderr_ok=True, ok=False).stdout.decode().split() == gnu
    names = gnu if ours is None else ours
    for cmd in READERS:
        if cmd.startswith("tarindex") and case in ("global-pax-size", "global-then-x-path"):
            # a read at one sample's offset cannot see a global header: no offsets (IndexedDataset failed)
            p = sh(cmd.format("c.tar"), ok=False)
            assert p.returncode == 2 and b"a global pax header sets the names, links or sizes" in p.stderr, p.stderr
            cmd = cmd.replace("-o i.json", "--no-offsets -o i.json")  # counts: still
        p = sh(cmd.format("c.tar"), ok=False)
        out, err = p.stdout.decode(), p.stderr.decode()
        assert "Traceback" not in err and "renamed" not in out, (cmd, out, err)
        if isinstance(names, str):  # refused: one line naming the offset, on every path
            ours_ = [line for line in err.splitlines() if not line.startswith("tar: ")]
            assert p.returncode == 2 and len(ours_) == 1, (cmd, p.returncode, err)
            assert names in err and "offset 2048" in err, (cmd, out, err)
            continue
        # tarcheck reports a skipped member, and members after an end marker (tarfile never sees them)
        reported = cmd.startswith("tarcheck") and case in ("solaris-acl", "global-path-before-eoa")
        assert p.returncode == (1 if reported else 0), (cmd, err)
        if cmd.endswith("tar tf -"):
            assert out.split() == names, (cmd, out)
        elif cmd.startswith("tarindex"):
            assert json.loads(out)["shardlist"][0]["nsamples"] == len(names), out
        else:
            assert json.loads(out)["shards"][0]["samples"] == len(names), out
        if "mtime" in case:  # a warning (tarcheck: in its report)
            told = json.loads(out)["shards"][0]["warnings"][0] if cmd.startswith("tarcheck") else err
            assert "bad pax mtime value" in told and "the header's time is used" in told, (cmd, err)
    if "mtime" in case:  # --strict: the error
        p = sh("tarcat --strict c.tar", ok=False)
        assert p.returncode == 2 and b"bad pax mtime value" in p.stderr
    if case == "solaris-acl":
        assert b"1 Solaris ACLs" in sh("tarcat -v c.tar > /dev/null", stderr_ok=True).stderr


# ---------------------------------------------------------------- compressed streams and what follows them

TAILS = {"zero padding": bytes(1000), "one zero byte": b"\0", "junk": b"garbage junk\n" * 10, "second stream": None}


@pytest.mark.parametrize("codec", ["gzip", "bzip2", "xz", "zstd"])
@pytest.mark.parametrize("tail", sorted(TAILS))
def test_what_follows_a_compressed_stream_has_one_verdict(sh, tmp_path, codec, tail):
    """tarcat, tarcheck and tarindex read a compressed shard followed by
    padding or junk alike, as the codec's own tool does: zero padding after
    gzip is taken (gzip -d takes it; tarindex said "truncated"), after zstd
    refused (zstd -d refuses it; tarindex took it), junk refused, a second
    stream read on."""
    plain = tar_bytes([(f"s{i}.txt", b"hello %d" % i) for i in range(5)])
    z = M._compress(codec, plain)
    ext = {"gzip": "gz", "bzip2": "bz2", "xz": "xz", "zstd": "zst"}[codec]
    (tmp_path / f"t.tar.{ext}").write_bytes(z + (z if TAILS[tail] is None else TAILS[tail]))
    # taken: zeros after gzip (gzip -d), bzip2 and xz (their decoders stop at the stream's end), a second
    # stream; refused: junk (bzip2 -d only warns of it), zeros after zstd (zstd -d refuses them)
    taken = tail == "second stream" or (tail != "junk" and codec != "zstd")
    verdicts = {cmd: sh(f"{cmd} t.tar.{ext} > /dev/null", ok=False).returncode
                for cmd in ("tarcat", "tarcheck", "tarindex -o i.json")}
    if tail == "second stream":
        verdicts["tarcheck"] = 0 if verdicts["tarcheck"] == 1 else verdicts["tarcheck"]  # (its keys come again)
    assert set(verdicts.values()) == {0 if taken else 2}, verdicts
    if taken and codec in ("gzip", "zstd"):  # random access reads what the stream holds
        n = 10 if tail == "second stream" else 5
        assert sh("python -c \"import tarproc; print(len(list(tarproc.IndexedDataset('i.json'))))\"").stdout \
            == b"%d\n" % n
