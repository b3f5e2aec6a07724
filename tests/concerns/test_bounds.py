"""Every input-controlled size is bounded and no path is quadratic in its input:
previews and tables read a bounded prefix, JSON depth, the tail kept of a
child's output, one huge text line, brace patterns naming 10^8 URLs, URL lists
that would not fit in memory.  Time bounds are on the child's CPU time (not wall
time, which depends on the machine's load) and generous: they catch quadratic
code, they are not benchmarks."""

import re

import pytest

import make_corpus


from helpers import run_measured as _run_measured  # noqa: E402


def _tar(members):
    return b"".join(make_corpus.member(n, d) for n, d in members) + make_corpus.EOA


class _Blob:
    """A field that is not in memory: only its head may be read."""

    def __init__(self, data):
        self.data = data
        self.size = len(data)
        self.asked = []

    def head(self, n):
        self.asked.append(n)
        return self.data[:n]


@pytest.mark.parametrize("field,data", [
    ("txt", b"a" * (64 << 20)), ("json", b"[" * (32 << 20)), ("bin", bytes(64 << 20)),
    ("txt", "é".encode() * (8 << 20)),
])
def test_previews_and_tables_read_a_bounded_prefix(field, data):
    """preview() and the table's text/binary decision look at a prefix: no
    allocation of the member's size (measured), and a blob-like field is
    asked for at most PREVIEW_BYTES."""
    import tracemalloc

    from tarproc.core import limits
    from tarproc.sinks import show, table

    tracemalloc.start()
    try:
        line = show.preview(field, data, 64)
        table.is_binary(field, data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * limits.PREVIEW_BYTES + (1 << 20), peak
    assert len(line) < 200
    blob = _Blob(data)
    assert show.preview(field, blob, 64) == line
    assert max(blob.asked) <= limits.PREVIEW_BYTES


def test_deep_json_is_not_an_internal_error(sh, tmp_path):
    deep = b"[" * 100000 + b"]" * 100000
    (tmp_path / "in.tar").write_bytes(_tar([("a.json", deep), ("b.json", b'{"x": [[[1]]]}')]))
    p = sh("tarshow in.tar")
    assert p.stdout.count(b"json") == 2
    p = sh("tar2tsv -f 'json.0 json.x.0' in.tar", stderr_ok=True)
    assert p.stdout.splitlines()[1:] == [b"a\t\t", b"b\t\t[[1]]"]
    # json.0 has a value in no sample (the deep one is past the depth limit): one warning, no traceback
    assert p.stderr.decode() == "tar2tsv: warning: -f: no sample has 'json.0' (2 samples read; their fields: json)\n"
    p = sh("tar2tsv -q --format jsonl -f 'json.x' in.tar", env={"TARPROC_JSON_DEPTH": "2"})
    assert p.stdout.splitlines() == [b'{"__key__": "a", "json.x": null}', b'{"__key__": "b", "json.x": null}']
    p = sh("tarfirst -f json --select '_.json.json == 1' in.tar", ok=False)
    assert p.returncode in (1, 2) and b"RecursionError" not in p.stderr and len(p.stderr.splitlines()) == 1


def test_failed_command_output_is_a_bounded_tail(tmp_path):
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x")]))
    p, _, _ = _run_measured("tarproc -c 'head -c 20000000 /dev/zero | tr \"\\0\" x; echo; echo LAST; exit 3' "
                            "in.tar > out.tar", tmp_path)
    assert p.returncode == 1
    assert b"LAST" in p.stderr and b"exit status 3" in p.stderr
    assert len(p.stderr) < 3 * 8192, len(p.stderr)


def test_child_stderr_flood_neither_blocks_nor_fills_memory(tmp_path):
    """A pipe: source that writes 50 MB to stderr before its data: read as it
    comes (no deadlock on a full pipe), only its tail kept for the message."""
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x")]))
    p, _, rss = _run_measured("tarcat 'pipe:head -c 50000000 /dev/zero >&2; cat in.tar' | tar t", tmp_path,
                              timeout=60)
    assert p.returncode == 0 and p.stdout == b"a.txt\n", p.stderr
    p, _, _ = _run_measured("tarcat 'pipe:yes | head -c 50000000 >&2; echo the-end >&2; exit 4' > /dev/null",
                            tmp_path, timeout=60)
    assert p.returncode == 2 and p.stderr.rstrip().endswith(b"exit status 4: the-end"), p.stderr[-300:]
    assert len(p.stderr) < 1000


def test_one_huge_line_is_linear(tmp_path):
    size = 60 << 20
    with open(tmp_path / "line.txt", "wb") as f:
        f.write(b"a" * size + b"\nb\n")
    p, cpu, _ = _run_measured("tarproc --mode lines -c true line.txt | tar tv", tmp_path)
    assert p.returncode == 0, p.stderr
    assert re.search(rb" %d .*000000000\.txt" % size, p.stdout) and b"000000001.txt" in p.stdout, p.stdout
    assert cpu < 10, f"{cpu:.1f} s CPU"


def test_brace_patterns_are_expanded_lazily(tmp_path):
    """A 27-byte -T line naming 10^8 URLs: the first input opens at once."""
    (tmp_path / "x-00000000.tar").write_bytes(_tar([("a.txt", b"x")]))
    # one range (braceexpand's own product() would hold 10^8 strings), then a product of two
    (tmp_path / "list.txt").write_text("x-{00000000..99999999}.tar\nx-{0..9999}{0..9999}.tar\n")
    for cmd in ("tarcat -c 1 -T list.txt", "tarfirst -f txt -T list.txt", "tarshow -c 1 -T list.txt",
                "tar2tsv -c 1 -T list.txt"):
        p, cpu, _ = _run_measured(cmd, tmp_path, timeout=60)
        assert p.returncode == 0, (cmd, p.stderr)
        assert cpu < 10, (cmd, cpu)
    from tarproc.sources.shardlist import expand_urls

    assert list(expand_urls("x-{0..3}.tar")) == ["x-0.tar", "x-1.tar", "x-2.tar", "x-3.tar"]
    assert next(iter(expand_urls(["y-{0..99999999}.tar"]))) == "y-0.tar"
    assert list(expand_urls()) == ["-"]


run = make_corpus.bash


@pytest.mark.parametrize("command", [
    "tarpcat 'x-{0..99999999}.tar'",
    "tarpcat --shuffle 10 'x-{0..99999999}.tar'",
    "tarmix spec.json",
    "kujob -s '{0..99999999}' -- true",
])
def test_huge_url_lists_are_one_line_not_gigabytes(command, tmp_path):
    (tmp_path / "spec.json").write_text('{"sources": [{"shards": "x-{0..99999999}.tar"}]}')
    p = run(f"/usr/bin/time -f 'maxrss %M' {command}", tmp_path, env={"TARPROC_MAX_URLS": "1000"})
    err, _, rss = p.stderr.decode().rpartition("maxrss")
    assert p.returncode != 0 and int(rss) < 200 * 1024, (p.returncode, rss)
    lines = [line for line in err.splitlines() if line.strip() and "exited with" not in line]
    assert len(lines) == 1 and "more than 1000 entries" in lines[0] and "TARPROC_MAX_URLS" in lines[0], err


def test_the_column_scan_holds_rows_not_samples(tmp_path, sh):
    """tar2tsv without -f holds the first --scan samples until it knows its
    columns: their rows (a binary field's cell is its size), not their
    bytes.  40 samples of a 1 MB field (in memory: under the blob
    threshold) peaked 40 MB above the same run with -f."""
    data = _tar([m for i in range(40) for m in ((f"s{i:03d}.bin", bytes(1 << 20)), (f"s{i:03d}.cls", b"%d" % i))])
    (tmp_path / "in.tar").write_bytes(data)

    def peak(args):
        p = sh(f"cat in.tar | /usr/bin/time -v tar2tsv {args} 2> rss > out.tsv")
        assert p.returncode == 0
        return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", (tmp_path / "rss").read_text())[1])

    with_f = peak("-f 'bin cls'")
    assert (tmp_path / "out.tsv").read_text().splitlines()[1] == "s000\t1048576\t0"
    scanned = peak("")
    assert (tmp_path / "out.tsv").read_text().splitlines()[:2] == ["__key__\tbin\tcls", "s000\t1048576\t0"]
    assert scanned - with_f < 15_000, (with_f, scanned)


def test_the_column_scan_is_bounded_in_bytes(sh, tmp_path):
    """Text cells are held as text: past TARPROC_SCAN_MEMORY the scan ends
    early (a warning says where), and every row is still written."""
    data = _tar([m for i in range(30) for m in ((f"s{i:03d}.txt", b"t" * 100_000),) + (
        ((f"s{i:03d}.late", b"x"),) if i == 25 else ())])
    (tmp_path / "in.tar").write_bytes(data)
    p = sh("TARPROC_SCAN_MEMORY=1MB tar2tsv in.tar", stderr_ok=True)
    lines = p.stdout.decode().splitlines()
    assert lines[0] == "__key__\ttxt" and len(lines) == 31 and lines[30] == "s029\t" + "t" * 100_000
    err = p.stderr.decode()
    assert "columns taken from the first 10 samples, not 1000" in err, err
    assert "sample 's025': field late not in the columns (taken from the first 10 samples" in err, err
    assert "late" in sh("tar2tsv in.tar").stdout.decode().splitlines()[0]  # (default bound: all 30 scanned)
