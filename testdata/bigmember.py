"""Write a tar stream with large members to stdout, generated, never stored.

    python testdata/bigmember.py SIZE [SAMPLES] [--cut N] [--fields N]

Each sample ``sNNNN`` has ``bin`` (SIZE bytes of a deterministic pattern that
differs per sample) and ``txt`` (a short line).  ``--cut N`` stops after N
bytes of the first ``bin`` (a header that claims SIZE, then the end).
``--fields N`` gives each sample N such members, ``sNNNN.00000.bin`` ...
(a sample of many members: a clip's frames)."""

import sys


def header(name, size):
    import tarfile

    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = 0
    return ti.tobuf(format=tarfile.USTAR_FORMAT if size < 8 ** 11 else tarfile.PAX_FORMAT)


def pattern(i, n=1 << 20):
    base = bytes((j * 7 + i) & 0xFF for j in range(256))
    return (base * (n // 256 + 1))[:n]


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    cut = int(argv[argv.index("--cut") + 1]) if "--cut" in argv else None
    if cut is not None:
        args.remove(str(cut))
    fields = int(argv[argv.index("--fields") + 1]) if "--fields" in argv else None
    if fields is not None:
        args.remove(str(fields))
    size = int(float(args[0]))
    samples = int(args[1]) if len(args) > 1 else 1
    out = sys.stdout.buffer
    for i in range(samples):
        if fields is not None:
            chunk = pattern(i, size)
            for f in range(fields):
                out.write(header(f"s{i:04d}.{f:05d}.bin", size) + chunk + bytes(-size % 512))
            continue
        out.write(header(f"s{i:04d}.bin", size))
        chunk = pattern(i)
        left = size if cut is None else cut
        while left:
            k = min(left, len(chunk))
            out.write(chunk if k == len(chunk) else chunk[:k])
            left -= k
        if cut is not None:
            return
        out.write(bytes(-size % 512))
        text = f"sample {i}\n".encode()
        out.write(header(f"s{i:04d}.txt", len(text)) + text + bytes(-len(text) % 512))
    out.write(bytes(1024))


if __name__ == "__main__":
    main(sys.argv[1:])
