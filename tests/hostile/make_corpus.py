#!/usr/bin/env python3
"""Generate the adversarial corpus of tar streams, deterministically.

Every item is made here from code (no hand-edited bytes are stored), with the
outcome the toolkit must give for it:

    python tests/hostile/make_corpus.py DIR     # writes DIR/<name>.tar ... and DIR/MANIFEST.tsv

The tests import :func:`cases` (and :func:`truncations`) and write the corpus
into a temporary directory.  An expectation is a dict:

``status``   the exit status of a reading command (0 or 2)
``match``    a regular expression the single stderr line must match (status 2)
``offset``   True when the message must name a byte offset (tar-level damage)
``samples``  for status 0: the number of samples a reader yields
``skipped``  for status 0: member-skip reasons that ``-v`` must report
``warn``     for status 0: a warning is expected on stderr
``names``    for status 0: the exact member names (bytes) of the output
"""

import bz2
import gzip
import lzma
import os
import subprocess
import sys

BLOCK = 512


# ------------------------------------------------------------ raw tar bytes


def _octal(value, width):
    return b"%0*o\0" % (width - 1, value)


def header(name=b"a.txt", size=0, flag=b"0", mode=0o644, mtime=1600000000, linkname=b"",
           prefix=b"", magic=b"ustar\x0000", size_field=None, mode_field=None, mtime_field=None,
           chksum_field=None, chksum_delta=0, devmajor=0, devminor=0):
    """One 512-byte tar header with every field under control."""
    if isinstance(name, str):
        name = name.encode()
    h = bytearray(BLOCK)
    h[0:100] = name[:100].ljust(100, b"\0")
    h[100:108] = mode_field if mode_field is not None else _octal(mode, 8)
    h[108:116] = _octal(0, 8)
    h[116:124] = _octal(0, 8)
    h[124:136] = size_field if size_field is not None else _octal(size, 12)
    h[136:148] = mtime_field if mtime_field is not None else _octal(mtime, 12)
    h[148:156] = b" " * 8
    h[156:157] = flag
    h[157:257] = linkname[:100].ljust(100, b"\0")
    if magic:
        h[257:265] = magic
        h[329:337] = _octal(devmajor, 8)
        h[337:345] = _octal(devminor, 8)
        h[345:500] = prefix[:155].ljust(155, b"\0")
    chk = sum(h) + chksum_delta
    h[148:156] = chksum_field if chksum_field is not None else b"%06o\0 " % chk
    assert len(h) == BLOCK
    return bytes(h)


def pad(data):
    return data + bytes(-len(data) % BLOCK)


def member(name, data=b"", **kw):
    kw.setdefault("size", len(data))
    return header(name, **kw) + pad(data)


def special(flag, data, name=b"././@LongLink", claim=None):
    """A GNU long-name (``L``/``K``) or pax (``x``/``g``) header with its data."""
    return header(name, size=len(data) if claim is None else claim, flag=flag) + pad(data)


def pax_record(key, value):
    if isinstance(key, str):
        key = key.encode()
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body


EOA = bytes(2 * BLOCK)


def b256(value, width=12):
    """GNU base-256 number field (negative values: two's complement, 0xFF lead)."""
    if value < 0:
        raw = value.to_bytes(width, "big", signed=True)
        assert raw[0] == 0xFF
        return raw
    return b"\x80" + value.to_bytes(width - 1, "big")


def text(n, seed):
    """Deterministic filler bytes."""
    out = bytearray()
    x = seed * 2654435761 + 1
    while len(out) < n:
        x = (x * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
        out += x.to_bytes(8, "little")
    return bytes(out[:n])


def small_shard():
    """A small valid shard that has a bit of everything: plain members, data
    with padding, a GNU long name, a pax path, a base-256 size field."""
    longdir = b"d" * 120
    parts = [
        member(b"0000.txt", text(300, 1)),
        member(b"0000.cls", b"3"),
        special(b"L", longdir + b"/0001.txt\0"),
        member(longdir[:100], text(700, 2)),
        special(b"x", pax_record("path", "caf\u00e9/0002.txt".encode())),
        member(b"cafe/0002.txt", text(1000, 3)),
        member(b"0003.bin", text(90, 4), size_field=b256(90)),
        member(b"0003.cls", b"7"),
    ]
    return b"".join(parts) + EOA


SMALL_SAMPLES = 4


def small_layout():
    """Byte offsets in :func:`small_shard` where a cut leaves a clean end on a
    member boundary (a warning, not an error), with the number of complete
    samples read before it; plus the offset where the end-of-archive starts."""
    data = small_shard()
    ends = {}
    pos = 0
    names = []
    while pos < len(data) - 2 * BLOCK:
        h = data[pos:pos + BLOCK]
        flag = h[156:157]
        sf = h[124:136]
        size = int.from_bytes(sf[1:], "big") if sf[0] & 0x80 else int(sf.strip(b"\0 ") or b"0", 8)
        nxt = pos + BLOCK + size + (-size % BLOCK)
        if flag in (b"0", b"\0"):
            names.append(h[0:8])
            ends[nxt] = names[:]
        pos = nxt
    return ends, pos


def _keys(names):
    keys = []
    for n in names:
        k = n.split(b".")[0]
        if not keys or keys[-1] != k:
            keys.append(k)
    return keys


def truncations(step=100):
    """``(name, bytes, expectation)`` for the small shard cut at every
    ``step``-th byte.  A cut at a member boundary is a cut-off download: the
    complete members are kept and a warning given (exit 0; ``--strict`` fails).
    A cut inside a header, a long-name or pax header, member data or padding
    is damage: exit 2 with the offset.  A cut inside the end-of-archive
    blocks loses nothing: exit 0."""
    data = small_shard()
    ends, eoa = small_layout()
    out = []
    for cut in range(step, len(data), step):
        piece = data[:cut]
        if cut > eoa:  # inside the end-of-archive blocks: a warning until one whole zero block is in
            exp = {"status": 0, "samples": SMALL_SAMPLES, "warn": cut < eoa + BLOCK}
        elif cut in ends:
            # complete samples: every key whose members all came before the cut;
            # the last key may be continued later, but nothing follows.
            exp = {"status": 0, "samples": len(_keys(ends[cut])), "warn": True}
        elif cut == eoa:
            exp = {"status": 0, "samples": SMALL_SAMPLES, "warn": True}
        else:
            exp = {"status": 2, "match": r"input ends|end-of-archive|ends after", "offset": True}
        out.append((f"cut-{cut:05d}", piece, exp))
    # the block boundaries too (every 512th byte), where cuts are clean or not
    for cut in range(BLOCK, eoa, BLOCK):
        if cut % step == 0:
            continue
        if cut in ends:
            exp = {"status": 0, "samples": len(_keys(ends[cut])), "warn": True}
        else:
            exp = {"status": 2, "match": r"input ends|ends after", "offset": True}
        out.append((f"cut-{cut:05d}", data[:cut], exp))
    return out


def _err(match, offset=True):
    return {"status": 2, "match": match, "offset": offset}


def _ok(samples, **kw):
    d = {"status": 0, "samples": samples}
    d.update(kw)
    return d


def png_header_bomb(width, height):
    """A valid grey PNG of ``width x height`` pixels, small on disk (zeros)."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    comp = zlib.compressobj(9)
    row = bytes(width + 1)
    idat = b"".join(comp.compress(row) for _ in range(height)) + comp.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def _compress(codec, data):
    if codec == "gzip":
        return gzip.compress(data, mtime=0)
    if codec == "bzip2":
        return bz2.compress(data)
    if codec == "xz":
        return lzma.compress(data)
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout


def cases(big=True):
    """``[(name, bytes, expectation)]``: the adversarial corpus (without the
    truncation series, see :func:`truncations`).  ``big=False`` leaves out the
    items of several megabytes."""
    good = member(b"k.txt", b"hello")
    C = []

    def add(name, data, exp):
        C.append((name, data, exp))

    # -- empty and trivial
    add("empty", b"", _ok(0))
    add("only-eoa", EOA, _ok(0))
    add("one-zero-block", bytes(BLOCK), _ok(0))
    add("small-valid", small_shard(), _ok(SMALL_SAMPLES))

    # -- header fields
    add("checksum-plus-one", header(b"k.txt", 5, chksum_delta=1) + pad(b"hello") + EOA, _err(r"checksum"))
    add("checksum-minus-one", header(b"k.txt", 5, chksum_delta=-1) + pad(b"hello") + EOA, _err(r"checksum"))
    add("checksum-non-octal", header(b"k.txt", 5, chksum_field=b"12x456\0 ") + pad(b"hello") + EOA,
        _err(r"non-octal checksum"))
    add("size-non-octal", header(b"k.txt", size_field=b"0000000009\0\0") + pad(b"hello") + EOA,
        _err(r"non-octal size"))
    add("size-letters", header(b"k.txt", size_field=b"hello world\0") + pad(b"hello") + EOA,
        _err(r"non-octal size"))
    add("mode-non-octal", header(b"k.txt", 5, mode_field=b"0006-44\0") + pad(b"hello") + EOA,
        _err(r"non-octal mode"))
    add("mtime-non-octal", header(b"k.txt", 5, mtime_field=b"1234567890z\0") + pad(b"hello") + EOA,
        _err(r"non-octal mtime"))
    add("size-base256-negative", header(b"k.txt", size_field=b256(-5)) + pad(b"hello") + EOA,
        _err(r"negative size"))
    add("size-base256-min", header(b"k.txt", size_field=b"\xff" + bytes(11)) + pad(b"hello") + EOA,
        _err(r"negative size"))
    add("size-base256-huge", header(b"k.txt", size_field=b256(1 << 80)) + pad(b"hello") + EOA,
        _err(r"input ends inside member data"))
    add("size-base256-bad-lead", header(b"k.txt", size_field=b"\x81" + bytes(11)) + pad(b"hello") + EOA,
        _err(r"base-256"))
    add("size-beyond-input", header(b"k.txt", size=1 << 30) + pad(b"hello") + EOA,
        _err(r"input ends inside member data"))
    add("size-just-beyond-input", good + header(b"m.txt", size=2000) + pad(b"x" * 1500),
        _err(r"input ends inside member data"))
    add("garbage-not-tar", text(5000, 9), _err(r"checksum|non-octal|base-256"))
    add("garbage-after-good", good + text(1024, 10) + EOA, _err(r"checksum|non-octal|base-256"))
    add("html-error-page", b"<html><body>404 Not Found</body></html>\n" * 20,
        _err(r"not a tar archive \(looks like an HTML document"))

    # -- pax
    def paxed(records, flag=b"x", claim=None, body=b"hello", name=b"k.txt", size=None):
        return (special(flag, records, name=b"././@PaxHeader", claim=claim)
                + member(name, body, **({} if size is None else {"size": size})) + EOA)

    add("pax-length-zero", paxed(b"0 path=x\n"), _err(r"pax record.*(too small|bad length)"))
    add("pax-length-below-5", paxed(b"3 a\n"), _err(r"pax record.*too small"))
    add("pax-length-overrun", paxed(b"99 path=abc.txt\n"), _err(r"pax record.*overruns"))
    add("pax-length-huge", paxed(b"99999999999999999999 path=abc.txt\n"), _err(r"pax record.*overruns"))
    add("pax-no-newline", paxed(b"16 path=abc.txtX"), _err(r"pax record.*newline"))
    add("pax-no-equals", paxed(b"16 pathabc.txtx\n"), _err(r"pax record.*keyword=value"))
    add("pax-no-space", paxed(b"16path=abc.txt\n"), _err(r"pax record"))
    add("pax-negative-length", paxed(b"-5 a=b\n"), _err(r"pax record"))
    add("pax-nul-in-path", paxed(pax_record("path", b"a\0b.txt")), _err(r"NUL"))
    add("pax-size-over-ustar-zero", paxed(pax_record("size", b"5"), size=0) , _ok(1))
    add("pax-size-bad", paxed(pax_record("size", b"12abc")), _err(r"pax size"))
    add("pax-size-negative", paxed(pax_record("size", b"-5")), _err(r"negative pax size"))
    add("pax-size-beyond-input", paxed(pax_record("size", b"999999999")), _err(r"input ends"))
    add("pax-path-wins", paxed(pax_record("path", b"dir/long-" + b"n" * 200 + b".txt")), _ok(1))
    add("pax-empty-x", paxed(b""), _ok(1))
    add("pax-two-x-in-a-row", special(b"x", pax_record("path", b"a.txt"), name=b"p")
        + special(b"x", pax_record("path", b"b.txt"), name=b"p") + member(b"k.txt", b"hi") + EOA,
        _err(r"two pax headers"))
    add("pax-x-then-eoa", special(b"x", pax_record("path", b"a.txt"), name=b"p") + EOA,
        _err(r"end-of-archive block right after"))
    add("pax-x-then-end", special(b"x", pax_record("path", b"a.txt"), name=b"p"),
        _err(r"ends after a long-name or pax header"))
    add("pax-digits-1mib", paxed(b"9" * ((1 << 20) - 1024)), _err(r"pax record.*(length|overruns)"))
    add("pax-digits-len-field", paxed(b"1048000 " + b"7" * 1046000 + b"\n"), _err(r"pax record.*overruns"))
    add("pax-g-2gb-claim", special(b"g", b"", name=b"././@PaxHeader", claim=2 << 30) + good + EOA,
        _err(r"pax header of \d+ bytes is larger"))
    add("pax-x-over-limit", special(b"x", pax_record("comment", b"c" * (1 << 20)), name=b"p") + good + EOA,
        _err(r"larger than"))
    add("pax-g-applies-on", special(b"g", pax_record("comment", b"hi"), name=b"g") + good
        + member(b"z.txt", b"zz") + EOA, _ok(2))
    add("pax-g-repeated", b"".join(special(b"g", pax_record(f"k{i}", b"v" * 1000000), name=b"g")
                                   for i in range(4)) + good + EOA, _ok(1))
    if big:
        add("pax-digits-4mb", paxed(b"12345678" * (1 << 19)), _err(r"larger than"))
        # a global header of 50,000 keys in front of 20,000 members: must stay linear
        many = b"".join(pax_record(f"k{i:05d}", b"") for i in range(50000))
        add("pax-g-many-keys", special(b"g", many, name=b"g")
            + b"".join(member(b"%05d.txt" % i, b"") for i in range(20000)) + EOA, _ok(20000))

    # -- GNU long names
    add("gnu-longname-repeated", special(b"L", b"a" * 200 + b".txt\0") + special(b"L", b"b" * 200 + b".txt\0")
        + member(b"short.txt", b"x") + EOA, _err(r"two GNU long-name headers"))
    add("gnu-longname-cut", special(b"L", b"a" * 300 + b".txt\0")[: BLOCK + 100], _err(r"input ends inside header data"))
    add("gnu-longname-then-end", special(b"L", b"a" * 300 + b".txt\0"), _err(r"ends after a long-name"))
    add("gnu-longname-2gb-claim", special(b"L", b"", claim=2 << 30) + good + EOA, _err(r"long-name header of \d+ bytes"))
    add("gnu-longlink-ok", special(b"K", b"t" * 200 + b"\0") + member(b"l.txt", flag=b"2", linkname=b"t")
        + good + EOA, _ok(1, skipped=["symlinks"]))
    add("gnu-longname-ok", special(b"L", b"n" * 300 + b"/0.txt\0") + member(b"short", b"x") + EOA, _ok(1))
    if big:
        add("gnu-longname-10mb", special(b"L", b"n" * (10 << 20) + b".txt\0") + member(b"short", b"x") + EOA,
            _err(r"long-name header of \d+ bytes is larger"))

    # -- names
    for label, name in [("dotdot", b"../../x.jpg"), ("absolute", b"/abs/x.jpg"), ("inner-dotdot", b"a/../../b.jpg"),
                        ("dotdot-only", b".."), ("trailing-dotdot", b"a/.."), ("newline", b"a\nb.jpg"),
                        ("carriage-return", b"x\r.jpg"), ("escape", b"\x1b[2Jx.jpg"), ("del", b"x\x7f.jpg")]:
        add(f"name-{label}", good + member(name, b"data") + EOA,
            _err(r"absolute|'\.\.' component|control characters"))
    # round 2: tab, C1 control (CSI), and an 800 KB name that messages must shorten
    for label, name in [("tab", b"a\tb.jpg"), ("c1-csi", "x\u009b2J.jpg".encode()),
                        ("escape-in-field", b"k.j\x1b]0;title\x07pg")]:
        add(f"name-{label}", good + member(name, b"data") + EOA, _err(r"control characters"))
    add("name-800kb-absolute", paxed(pax_record("path", b"/" + b"n" * 800000 + b".txt")), _err(r"absolute"))
    add("name-800kb-dotdot-longname", special(b"L", b"../" * 270000 + b"x.txt\0") + member(b"x", b"data") + EOA,
        _err(r"'\.\.' component"))
    add("name-dotdot-longname", special(b"L", b"../../../escape.txt\0") + member(b"x", b"data") + EOA,
        _err(r"'\.\.' component"))
    add("name-dotdot-pax", paxed(pax_record("path", b"../evil.txt")), _err(r"'\.\.' component"))
    add("name-absolute-prefix", member(b"x.txt", b"data", prefix=b"/etc") + EOA, _err(r"absolute"))
    add("name-empty", good + member(b"", b"data") + EOA, _err(r"empty member name"))
    add("name-non-utf8", member(b"caf\xe9.txt", b"latin") + member(b"caf\xe9.cls", b"1")
        + member(b"\xff\xfe/k.bin", b"x") + EOA,
        _ok(2, names=[b"caf\xe9.cls", b"caf\xe9.txt", b"\xff\xfe/k.bin"]))
    add("json-nested-100k", member(b"k.json", b"[" * 100000 + b"]" * 100000) + member(b"k.txt", b"x") + EOA, _ok(1))
    add("png-9000x9000", member(b"k.png", png_header_bomb(9000, 9000)) + EOA, _ok(1))
    add("name-no-extension", member(b"README", b"x") + good + EOA, _ok(1, skipped=["names without an extension"]))
    add("name-dots-ok", member(b"a..b.txt", b"x") + member(b"..hidden", b"y") + good + EOA, _ok(2))

    # -- links, devices, FIFOs, directories: skipped and counted, never created
    specials = (member(b"dir/", flag=b"5", mode=0o755)
                + member(b"link.txt", flag=b"2", linkname=b"/etc/passwd")
                + member(b"up.txt", flag=b"2", linkname=b"../../../../tmp/evil")
                + member(b"hard.txt", flag=b"1", linkname=b"/etc/shadow")
                + member(b"null.txt", flag=b"3", devmajor=1, devminor=3)
                + member(b"sda.txt", flag=b"4", devmajor=8, devminor=0)
                + member(b"fifo.txt", flag=b"6")
                + member(b"link2.txt", flag=b"2", linkname=b"k.txt", size=5) + pad(b"")  # size field lies
                + good + EOA)
    add("specials", specials, _ok(1, skipped=["symlinks", "hard links", "character devices", "block devices",
                                              "FIFOs", "directories"]))

    # -- samples
    add("duplicate-field", member(b"a.txt", b"1") + member(b"a.txt", b"2") + EOA, _err(r"appears twice", offset=False))
    add("keys-come-back", member(b"a.txt", b"1") + member(b"b.txt", b"2") + member(b"a.cls", b"3") + EOA, _ok(3))
    add("concatenated", small_shard() + small_shard(), _ok(2 * SMALL_SAMPLES))

    # -- compression
    base = small_shard()
    for codec in ("gzip", "bzip2", "xz", "zstd"):
        z = _compress(codec, base)
        add(f"{codec}-ok", z, _ok(SMALL_SAMPLES))
        add(f"{codec}-truncated", z[: len(z) // 2], _err(rf"{codec}|input ends", offset=False))
        add(f"{codec}-truncated-end", z[:-3], _err(rf"{codec}|input ends", offset=False))
        bad = bytearray(z)
        if codec == "gzip":
            bad[-8] ^= 0xFF  # CRC32 in the trailer
        elif codec == "bzip2":
            bad[-6] ^= 0xFF  # combined stream CRC
        elif codec == "xz":
            bad[len(bad) // 2] ^= 0x55  # inside the block: check fails
        else:
            bad[len(bad) // 2] ^= 0x55
        add(f"{codec}-bad-checksum", bytes(bad), _err(rf"{codec}|checksum|non-octal|input ends|pax", offset=False))
    add("gzip-in-gzip", gzip.compress(gzip.compress(base, mtime=0), mtime=0), _err(r"checksum|not a tar"))
    add("gzip-trailing-garbage", gzip.compress(base, mtime=0) + b"garbage!" * 8, _err(r"gzip", offset=False))
    return C


def write_corpus(directory, big=True, step=100):
    """Write the corpus into ``directory``; returns ``[(name, path, expectation)]``."""
    os.makedirs(directory, exist_ok=True)
    out = []
    for name, data, exp in cases(big) + truncations(step):
        path = os.path.join(directory, name + ".tar")
        with open(path, "wb") as f:
            f.write(data)
        out.append((name, path, exp))
    with open(os.path.join(directory, "MANIFEST.tsv"), "w") as f:
        for name, path, exp in out:
            f.write(f"{name}\t{exp['status']}\t{exp.get('match', '')}\n")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py DIR")
    items = write_corpus(sys.argv[1])
    print(f"{len(items)} items written to {sys.argv[1]}")


def plain_shard(n, prefix="s", size=100):
    """A shard of ``n`` samples (``.txt`` of ``size`` bytes, ``.cls``) as bytes."""
    parts = []
    for i in range(n):
        key = f"{prefix}{i:04d}".encode()
        parts.append(member(key + b".txt", text(size, i)))
        parts.append(member(key + b".cls", str(i % 7).encode()))
    return b"".join(parts) + EOA


def bash(cmd, cwd, env=None, timeout=60, **kw):
    """``bash -c cmd`` in ``cwd``, output captured (a CompletedProcess)."""
    import os
    import subprocess

    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})), **kw)


def one_line(p):
    """The one line a failed command wrote on stderr (asserts there is one,
    and no traceback)."""
    err = p.stderr.decode(errors="replace")
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def processes_with(words):
    """Live processes whose command line is exactly ``words``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if cmdline.rstrip(b"\0").split(b"\0") == words.encode().split() and state != b"Z":
            found.append(int(pid))
    return found
