"""The adversarial corpus (tests/hostile/make_corpus.py) through every reading command.

Each item runs through each command that reads tar shards, as a real
subprocess reading stdin, in its own directory whose temporary directory
(TMPDIR) is inside it.  Checks: the exit status the corpus expects (2 for damage,
with exactly one line on stderr naming the problem and, for tar-level damage,
the byte offset); no traceback; no hang (a timeout); nothing created outside
the command's working directory, and no symlink, FIFO or device anywhere;
temporary directories gone afterwards; for readable items, the samples that
come out (tarcat: checked with Python's tarfile against the corpus; the other
filters: the same members as tarcat gives).
"""

import importlib.util
import io
import os
import re
import stat
import subprocess
import sys
import tarfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "hostile"))
import make_corpus  # noqa: E402

TIMEOUT = 20  # seconds per run; every run takes well under one on an idle machine


def _exists(module):
    return importlib.util.find_spec(f"tarproc.cli.{module}") is not None


# How each command reads a shard on stdin.  kind:
#   filter  - tar on stdout; exit status as the corpus says
#   split   - writes shards into the working directory
#   report  - text on stdout; exit status as the corpus says
#   checker - reports problems with exit 1: valid -> 0/1, damage -> 1/2
#   first   - stops at its first match: may not reach damage (0/1/2)
COMMANDS = {
    "tarcat": ("tarcat", "tarcat", "filter"),  # with -v for items that count skipped members
    "tarproc": ("tarproc", "tarproc -c true", "filter"),
    "tarsort": ("tarsort", "tarsort", "filter"),
    "tarpcat": ("tarpcat", "tarpcat -", "filter"),
    "tarsplit": ("tarsplit", "tarsplit -n 2 -o part", "split"),
    "tarshow": ("tarshow", "tarshow", "report"),
    "tar2tsv": ("tar2tsv", "tar2tsv", "report"),
    "tarcheck": ("tarcheck", "tarcheck", "checker"),
    "tarfirst": ("tarfirst", "tarfirst", "first"),
}
PRESENT = [name for name, (module, _, _) in COMMANDS.items() if _exists(module)]
MISSING = [name for name in COMMANDS if name not in PRESENT]

# The normal run: tarcat gets every item and every cut; tarproc every item and
# every 10th cut; the other commands a representative subset (one or two items
# of each kind) and every 20th cut.  TARPROC_HOSTILE_FULL=1 (make fuzz) runs
# everything through every command.
FULL = bool(os.environ.get("TARPROC_HOSTILE_FULL"))
SUBSET = {
    "empty", "small-valid", "checksum-plus-one", "size-non-octal", "mode-non-octal", "size-base256-negative",
    "size-base256-huge", "size-beyond-input", "pax-length-below-5", "pax-nul-in-path", "pax-size-over-ustar-zero",
    "pax-g-2gb-claim", "pax-digits-1mib", "gnu-longname-repeated", "gnu-longname-10mb", "name-dotdot",
    "name-absolute", "name-newline", "name-empty", "name-non-utf8", "specials", "duplicate-field",
    "keys-come-back", "gzip-truncated", "zstd-bad-checksum", "xz-truncated", "gzip-in-gzip",
    "name-tab", "name-c1-csi", "name-800kb-absolute", "json-nested-100k", "png-9000x9000",
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    items = [(n, p, e) for n, p, e in make_corpus.write_corpus(str(d))]
    return items


def _tree(root):
    """Every path under root (relative), with its file type."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = stat.S_IFMT(os.lstat(p).st_mode)
    return out


def _members(data):
    """(name bytes, data) of the regular members, read by tarfile."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*", encoding="utf-8", errors="surrogateescape") as tf:
        for info in tf:
            if info.isfile():
                out.append((info.name.encode("utf-8", "surrogateescape"), tf.extractfile(info).read()))
    return out


def _sample_count(members):
    n, last = 0, None
    for name, _ in members:
        slash = name.rfind(b"/")
        dot = name.find(b".", slash + 1)
        key = name[:dot]
        if key != last:
            n += 1
            last = key
    return n


def run_item(cmd, path, root):
    """Run ``cmd < path`` in ``root/work``; returns (rc, stdout, stderr, problems)."""
    work = os.path.join(root, "work")
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp)
    env = dict(os.environ, TMPDIR=tmp, HOME=work, TARPROC_DEBUG="")
    with open(path, "rb") as f:
        try:
            p = subprocess.run(["bash", "-c", cmd], stdin=f, capture_output=True, cwd=work, env=env,
                               timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return None, b"", b"", [f"no answer within {TIMEOUT} s (hang?)"]
    problems = []
    tree = _tree(root)
    outside = [p for p in tree if p != "work" and not p.startswith("work" + os.sep)]
    if outside:
        problems.append(f"wrote outside its working directory: {outside}")
    odd = [p for p, t in tree.items() if t not in (stat.S_IFREG, stat.S_IFDIR)]
    if odd:
        problems.append(f"created symlinks/FIFOs/devices: {odd}")
    left = os.listdir(tmp)
    if left:
        problems.append(f"left temporary files in TMPDIR: {left}")
    return p.returncode, p.stdout, p.stderr, problems


def check(name, kind, exp, rc, out, err, root, reference):
    """Problems with one run, as a list of strings."""
    text = err.decode("utf-8", "replace")
    lines = text.splitlines()
    problems = []
    if "Traceback" in text or "internal error" in text:
        return [f"traceback/internal error: {text[-500:]}"]
    want = exp["status"]
    if kind == "first":
        allowed = {0, 1, 2}
    elif kind == "checker":
        allowed = {0, 1} if want == 0 else {1, 2}
    else:
        allowed = {want}
    if rc not in allowed:
        return [f"exit {rc}, expected {sorted(allowed)}; stderr: {text[-300:]!r}"]
    if len(err) > 4000:  # round 2: names in messages are shortened, output tails bounded
        problems.append(f"{len(err)} bytes on stderr: {text[:200]!r}…")
    if rc == 2:
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr, expected 1: {text[-500:]!r}")
        elif want == 2:
            if not re.search(exp["match"], lines[0]):
                problems.append(f"message does not name the problem ({exp['match']}): {lines[0]!r}")
            if exp.get("offset") and not re.search(r"offset \d+", lines[0]):
                problems.append(f"message does not name the offset: {lines[0]!r}")
    if rc == 0 and kind in ("filter", "split"):
        if kind == "split":
            parts = sorted(f for f in os.listdir(os.path.join(root, "work")) if f.startswith("part"))
            members = []
            for f in parts:
                with open(os.path.join(root, "work", f), "rb") as fh:
                    members += _members(fh.read())
        else:
            members = _members(out)
        if reference is None:  # tarcat: against the corpus
            if _sample_count(members) != exp["samples"]:
                problems.append(f"{_sample_count(members)} samples out, expected {exp['samples']}")
            if "names" in exp and sorted(n for n, _ in members) != sorted(exp["names"]):
                problems.append(f"names {[n for n, _ in members]} != {exp['names']}")
            for reason in exp.get("skipped", ()):
                if reason not in text:
                    problems.append(f"-v does not report skipped {reason}: {text!r}")
            if bool(exp.get("warn")) != ("warning" in text):
                problems.append(f"warning expected: {bool(exp.get('warn'))}; stderr: {text!r}")
        elif sorted(members) != sorted(reference):
            problems.append("members differ from what tarcat gives")
    return problems


def _items(corpus, command):
    if command == "tarcat":
        return list(corpus)
    if FULL:  # the 20,000-sample item is for tarcat (with tarsplit -n 2 it is 10,000 shards)
        return [item for item in corpus if item[2].get("samples", 0) < 1000]
    step = 10 if command == "tarproc" else 20
    out = []
    cut_index = 0
    for name, path, exp in corpus:
        if name.startswith("cut-"):
            cut_index += 1
            if cut_index % step == 0:
                out.append((name, path, exp))
        elif (command == "tarproc" and exp.get("samples", 0) < 1000) or name in SUBSET:
            out.append((name, path, exp))
    return out


def test_corpus_is_deterministic(tmp_path):
    a = make_corpus.cases(big=False) + make_corpus.truncations()
    b = make_corpus.cases(big=False) + make_corpus.truncations()
    assert [(n, d) for n, d, _ in a] == [(n, d) for n, d, _ in b]
    assert len(a) > 150
    # the shard the truncations cut is valid for an independent reader
    members = _members(make_corpus.small_shard())
    assert _sample_count(members) == make_corpus.SMALL_SAMPLES
    assert members[2][0] == b"d" * 120 + b"/0001.txt"


@pytest.mark.parametrize("command", PRESENT)
def test_corpus(command, corpus, tmp_path):
    module, cmd, kind = COMMANDS[command]
    reference = {}
    if command != "tarcat":
        # what tarcat gives for each readable item is the reference
        for name, path, exp in _items(corpus, command):
            if exp["status"] == 0 and kind in ("filter", "split"):
                with open(path, "rb") as f:
                    p = subprocess.run(["tarcat"], stdin=f, capture_output=True, timeout=TIMEOUT)
                assert p.returncode == 0, (name, p.stderr)
                reference[name] = _members(p.stdout)
    failures = []
    for name, path, exp in _items(corpus, command):
        root = tmp_path / name
        verbose = command == "tarcat" and exp.get("skipped")
        rc, out, err, problems = run_item(cmd + " -v" if verbose else cmd, path, str(root))
        if rc is not None:
            problems += check(name, kind, exp, rc, out, err, str(root), reference.get(name))
        failures += [f"{name}: {p}" for p in problems]
    assert not failures, f"{command}: {len(failures)} problems:\n" + "\n".join(failures)


def test_strict_fails_a_cut_off_shard(sh, tmp_path):
    data = make_corpus.small_shard()
    ends, eoa = make_corpus.small_layout()
    (tmp_path / "cut.tar").write_bytes(data[:eoa])
    p = sh("tarcat --strict cut.tar > out.tar", ok=False)
    assert p.returncode == 2
    assert re.search(rb"offset \d+: input ends without the end-of-archive", p.stderr)
    assert len(p.stderr.splitlines()) == 1
    p = sh("tarcat cut.tar > out.tar", stderr_ok=True)
    assert b"warning" in p.stderr
    assert _sample_count(_members((tmp_path / "out.tar").read_bytes())) == make_corpus.SMALL_SAMPLES


def test_samples_before_damage_are_written(sh, tmp_path):
    """Damage is an error, but everything before it has already gone out."""
    data = make_corpus.small_shard()
    good = data[: data.index(b"cafe/0002.txt") - 1024]  # up to the pax header of the third sample
    (tmp_path / "bad.tar").write_bytes(good + make_corpus.header(b"z.txt", 5, chksum_delta=1) + bytes(1024))
    p = sh("tarcat bad.tar > out.tar", ok=False)
    assert p.returncode == 2 and b"checksum" in p.stderr
    names = [n for n, _ in _members((tmp_path / "out.tar").read_bytes() + bytes(1024))]
    assert names[:2] == [b"0000.cls", b"0000.txt"]


def test_non_utf8_names_round_trip_through_gnu_tar(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(make_corpus.member(b"caf\xe9.txt", b"latin") + make_corpus.EOA)
    sh("tarcat in.tar | tarcat > out.tar")
    # a short non-UTF-8 name goes raw into the ustar field: GNU tar reads it silently
    p = sh("tar --quoting-style=literal -tf out.tar")
    assert p.stdout == b"caf\xe9.txt\n"


def test_specials_are_never_created(sh, tmp_path):
    corpus = {n: (d, e) for n, d, e in make_corpus.cases(big=False)}
    (tmp_path / "in.tar").write_bytes(corpus["specials"][0])
    p = sh("tarcat -v in.tar > out.tar", stderr_ok=True)
    assert re.search(rb"members skipped 8 \(", p.stderr), p.stderr
    assert [n for n, _ in _members((tmp_path / "out.tar").read_bytes())] == [b"k.txt"]
    assert sorted(os.listdir(tmp_path)) == ["in.tar", "out.tar"]



@pytest.mark.parametrize("plan", [
    b"../../x.txt text:hi\n", b"/abs/x.txt text:hi\n", b"a/../../b.txt text:hi\n",
    b"ok.txt text:fine\n../x.txt text:late\n",
])
def test_tarcreate_refuses_unsafe_names(plan, sh, tmp_path):
    """tarcreate writes names from a plan: the same names are refused there,
    and nothing is written (not even the members before the bad line)."""
    (tmp_path / "plan.txt").write_bytes(plan)
    p = sh("tarcreate plan.txt -o out.tar", ok=False)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 2, err
    assert len(err.splitlines()) == 1 and re.search(r"absolute|'\.\.' component", err), err
    assert sorted(os.listdir(tmp_path)) == ["plan.txt"]


# ============================================================ round 2
# Hostile conditions found by a second, independent attack (issue 13): bounded
# resources, linear time, what we write we read, work directories, child
# stdin, signals.  Time bounds are on the child's CPU time (not wall time, which
# depends on the machine's load) and generous: they catch quadratic code, they
# are not benchmarks.

import signal  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402


_MEASURE = ("import resource, subprocess, sys\n"
            "p = subprocess.run(['bash', '-o', 'pipefail', '-c', sys.argv[1]])\n"
            "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "open(sys.argv[2], 'w').write(f'{u.ru_utime + u.ru_stime} {u.ru_maxrss}')\n"
            "sys.exit(p.returncode)\n")


def _run_measured(cmd, cwd, env=None, input=None, timeout=120):
    """Run a bash command; returns (CompletedProcess, CPU seconds, max RSS in
    MB) of the command and the pipeline around it (measured in a fresh
    process, so earlier tests do not count)."""
    import tempfile

    full = dict(os.environ, **(env or {}))
    with tempfile.NamedTemporaryFile("r", suffix=".usage") as usage:
        p = subprocess.run([sys.executable, "-c", _MEASURE, cmd, usage.name], cwd=cwd, env=full, input=input,
                           capture_output=True, timeout=timeout)
        cpu, rss = usage.read().split()
    return p, float(cpu), int(rss) / 1024


def _tar(members):
    return b"".join(make_corpus.member(n, d) for n, d in members) + make_corpus.EOA


def _png(width, height):
    """A grey PNG of any size made with zlib (no pixels in memory)."""
    return make_corpus.png_header_bomb(width, height)


# ---------------------------------------------------------------- 1. bounded sizes


def test_tarshow_gzip_bomb(tmp_path):
    """A 400 KB .tar.gz whose first member inflates to 96 MB: tarshow -c 1
    shows it (holding the member is the codec's part: issue 12 spools large
    members to disk; the preview's part is the next test)."""
    size = 96 << 20
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = comp.compress(make_corpus.header(b"bomb.txt", size))
    zeros = b"a" * (1 << 20)
    for _ in range(size >> 20):
        body += comp.compress(zeros)
    body += comp.compress(make_corpus.EOA) + comp.flush()
    assert len(body) < 1 << 20
    (tmp_path / "bomb.tar.gz").write_bytes(body)
    p, cpu, rss = _run_measured("tarshow --format blocks -c 1 bomb.tar.gz", tmp_path)
    assert p.returncode == 0, p.stderr
    assert b"bomb" in p.stdout and b"101 MB" in p.stdout and len(p.stdout) < 1000


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
        table._is_binary(field, data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * limits.PREVIEW_BYTES + (1 << 20), peak
    assert len(line) < 200
    blob = _Blob(data)
    assert show.preview(field, blob, 64) == line
    assert max(blob.asked) <= limits.PREVIEW_BYTES


def test_pixel_budget(tmp_path):
    """A 9000x9000 PNG of 40 KB is not decoded by tarshow --grid or terminal
    images (a warning names it); TARPROC_MAX_PIXELS moves the budget."""
    (tmp_path / "in.tar").write_bytes(_tar([("big.png", _png(9000, 9000)), ("small.png", _png(64, 64))]))
    p, cpu, rss = _run_measured("tarshow --grid sheet.png in.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert re.search(rb"warning: sample 'big': png: not drawn: .*pixel budget", p.stderr), p.stderr
    assert rss < 250, f"{rss:.0f} MB"
    from PIL import Image

    with Image.open(tmp_path / "sheet.png") as sheet:  # the small one is on the sheet
        assert sheet.size[0] > 0
    p, _, _ = _run_measured("tarshow -f png --images always in.tar", tmp_path, env={"TARPROC_MAX_PIXELS": "1000"})
    assert p.returncode == 0
    assert p.stderr.count(b"not drawn") == 2, p.stderr
    assert b"\x1b[38;2" not in p.stdout
    p, _, _ = _run_measured("tarshow -f png --images always in.tar", tmp_path, env={"TARPROC_MAX_PIXELS": "5000"})
    assert p.stderr.count(b"not drawn") == 1 and b"\x1b[38;2" in p.stdout


def test_npy_over_the_pixel_budget_is_not_loaded(tmp_path):
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.zeros((300, 300), dtype=np.uint8))
    (tmp_path / "in.tar").write_bytes(_tar([("a.npy", buf.getvalue())]))
    p, _, _ = _run_measured("tarshow -f npy --images always in.tar", tmp_path, env={"TARPROC_MAX_PIXELS": "1000"})
    assert p.returncode == 0 and b"pixel budget" in p.stderr, p.stderr


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


def test_long_names_are_shortened_in_messages(tmp_path):
    name = "/" + "n" * 800000 + ".txt"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        ti = tarfile.TarInfo(name)
        ti.size = 1
        t.addfile(ti, io.BytesIO(b"x"))
    (tmp_path / "in.tar").write_bytes(buf.getvalue())
    for cmd in ("tarcat in.tar", "tarshow in.tar", "tar2tsv in.tar", "tarsort in.tar", "tarproc -c true in.tar"):
        p, _, _ = _run_measured(cmd + " > /dev/null", tmp_path)
        assert p.returncode == 2, (cmd, p.stderr[:300])
        assert b"absolute member name" in p.stderr and b"chars]" in p.stderr, cmd
        assert len(p.stderr) < 1000, (cmd, len(p.stderr))
    p, _, _ = _run_measured("tarcheck in.tar", tmp_path)
    assert p.returncode == 1 and len(p.stdout) < 2000


# ---------------------------------------------------------------- 2. linear time


def test_tarcheck_many_distinct_fields_is_linear(tmp_path):
    from tarproc.core.tario import TarWriter

    with open(tmp_path / "in.tar", "wb") as f:
        w = TarWriter(f)
        for i in range(30000):
            w.write(f"s{i:06d}.f{i}", b"x")
            w.write(f"s{i:06d}.common", b"x")
        w.close()
    for extra in ("", "--majority 0"):
        p, cpu, _ = _run_measured(f"tarcheck {extra} in.tar > report.txt", tmp_path)
        assert p.returncode in (0, 1), p.stderr
        assert cpu < 10, f"tarcheck {extra}: {cpu:.1f} s CPU"
    assert b"30000 samples" in (tmp_path / "report.txt").read_bytes()


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


# ---------------------------------------------------------------- 3. what we write we read


@pytest.mark.parametrize("key", ["../x", "/abs", "a/../../b", "tab\there", "esc\x1b[31m", "new\nline",
                                 "csi\x9bx", "del\x7f"])
def test_writers_refuse_what_readers_refuse(key, tmp_path):
    from tarproc.core.grouping import SampleWriter, group
    from tarproc.core.tario import TarReader
    from tarproc.errors import BadArchive, BadSample

    with pytest.raises(BadSample):
        SampleWriter(io.BytesIO()).write({"__key__": key, "txt": b"x"})
    if not key.isprintable():  # the same characters in a field name
        with pytest.raises(BadSample):
            SampleWriter(io.BytesIO()).write({"__key__": "ok", "t" + key + "x": b"x"})
    # and a reader refuses the same name
    data = make_corpus.member((key + ".txt").encode(), b"x") + make_corpus.EOA
    with pytest.raises(BadArchive):
        list(group(TarReader(io.BytesIO(data), "t").members()))


def test_rekey_map_text_and_command_outputs_are_checked(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x"), ("b.txt", b"y")]))
    # --rekey to an escaping name: exit 2, the sample named, no output file
    p = sh("tarcat --rekey '../{key}' in.tar -o out.tar", ok=False)
    assert p.returncode == 2 and b"'../a'" in p.stderr and b"'..'" in p.stderr, p.stderr
    assert not (tmp_path / "out.tar").exists()
    # text modes: a key line with an ESC sequence
    (tmp_path / "keys.txt").write_bytes(b"good\nbad\x1b[2J\n")
    p = sh("tarproc --mode keys -c true keys.txt -o out.tar", ok=False)
    assert p.returncode == 2 and b"control characters" in p.stderr, p.stderr
    # files made by tarproc -c with a tab or an ESC in their names: the sample fails
    p = sh("tarproc -c 'echo x > \"sample.a\tb\"; echo y > sample.ok' in.tar | tar t; exit ${PIPESTATUS[0]}",
           ok=False)
    assert p.returncode == 1 and b"control characters" in p.stderr, p.stderr
    assert p.stdout == b""
    # --map results
    (tmp_path / "mapfn.py").write_text("def f(s):\n    return {'__key__': s['__key__'], 'x\\ty': b'1'}\n")
    p = sh("PYTHONPATH=. tarproc --map mapfn:f in.tar -o out.tar", ok=False)
    assert p.returncode in (1, 2) and b"sample 'a'" in p.stderr and b"control characters" in p.stderr, p.stderr
    if (tmp_path / "out.tar").exists():  # exit 1 (failed samples): whether it is kept is the commit rule's
        with tarfile.open(tmp_path / "out.tar") as t:
            assert t.getnames() == []


# ---------------------------------------------------------------- 4. work directories


def test_command_replacing_its_directory_with_a_symlink(sh, tmp_path):
    """Cleanup removes the link, never touches (chmods, deletes) its target."""
    target = tmp_path / "precious"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "file").write_text("keep")
    os.chmod(target / "sub", 0o500)
    (tmp_path / "wd").mkdir()
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x"), ("b.txt", b"y")]))
    try:
        sh(f"tarproc -p 1 -w wd -c 'here=$PWD; cd /; rm -rf \"$here\"; ln -s {target} \"$here\"' in.tar "
           f"-o out.tar", ok=False)
        assert (target / "sub" / "file").read_text() == "keep"
        assert stat.S_IMODE(os.stat(target / "sub").st_mode) == 0o500
        assert os.listdir(tmp_path / "wd") == []
    finally:
        os.chmod(target / "sub", 0o700)


def test_deep_and_locked_trees_are_removed(sh, tmp_path):
    """1,500 levels (deeper than Python's recursion limit) and a directory
    chmod 000: the run directory is gone afterwards, no RecursionError."""
    (tmp_path / "wd").mkdir()
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x")]))
    (tmp_path / "deep.py").write_text(
        "import os\n"
        "os.makedirs('locked/in'); os.chmod('locked', 0)\n"
        "for _ in range(1500):\n"
        "    os.mkdir('d'); os.chdir('d')\n"
        "open('f', 'w').write('x')\n")
    p = sh(f"tarproc -w wd -c '{sys.executable} {tmp_path}/deep.py' in.tar > out.tar", stderr_ok=True)
    assert b"Error" not in p.stderr, p.stderr
    assert os.listdir(tmp_path / "wd") == []


def test_detached_process_cannot_write_into_another_sample(sh, tmp_path):
    """A command of sample a leaves a setsid'ed writer behind: its file and
    its output must not appear in sample b (directories are never reused)."""
    (tmp_path / "in.tar").write_bytes(_tar([("a.txt", b"x"), ("b.txt", b"y"), ("c.txt", b"z")]))
    (tmp_path / "cmd.sh").write_text(
        'if [ "$(cat sample.__key__)" = a ]; then\n'
        '  setsid sh -c \'touch "$1.started"; sleep 0.3; echo LEAK; echo leak > "$0/sample.leak"; touch "$1"\' '
        f'"$PWD" {tmp_path}/done &\n'
        f'  for i in $(seq 100); do [ -e {tmp_path}/done.started ] && break; sleep 0.1; done\n'
        'else  # wait until the escaped writer has written\n'
        f'  for i in $(seq 100); do [ -e {tmp_path}/done ] && break; sleep 0.1; done; sleep 0.1\n'
        'fi\n'
        'echo out\n')
    sh(f"tarproc -p 1 --add-log log -s {tmp_path}/cmd.sh in.tar -o out.tar", stderr_ok=True)
    with tarfile.open(tmp_path / "out.tar") as t:
        names = t.getnames()
        logs = [t.extractfile(n).read() for n in names if n.endswith(".log")]
    assert names == ["a.log", "a.txt", "b.log", "b.txt", "c.log", "c.txt"], names
    assert all(log == b"out\n" for log in logs), logs


# ---------------------------------------------------------------- 5. child stdin


def test_post_command_does_not_eat_the_input(sh, tmp_path):
    data = _tar([(f"s{i:04d}.txt", b"x" * 600) for i in range(400)])
    p = sh("tarsplit -n 50 -o 'part-%02d.tar' -p 'cat > /dev/null' -", input=data)
    total = 0
    for name in sorted(os.listdir(tmp_path)):
        if name.startswith("part-"):
            with tarfile.open(tmp_path / name) as t:
                total += len(t.getnames())
    assert total == 400, p.stderr


# ---------------------------------------------------------------- 6. signals


SIGNAL_COMMANDS = ["tarcat", "tarshow", "tar2tsv", "tarsort -s txt", "tarproc -c true", "tarpcat"]


@pytest.fixture(scope="module")
def many_samples(tmp_path_factory):
    from tarproc.core.tario import TarWriter

    path = tmp_path_factory.mktemp("sig") / "many.tar"
    with open(path, "wb") as f:
        w = TarWriter(f)
        for i in range(20000):
            w.write(f"s{i:06d}.txt", b"hello %d" % i)
        w.close()
    return path


def _blocked_then_signalled(argv, stdin, signum):
    r, w = os.pipe()  # nobody reads r
    try:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=w, stderr=subprocess.PIPE)
    finally:
        os.close(w)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until it blocks writing (or reading)
            try:
                with open(f"/proc/{proc.pid}/wchan") as f:
                    if f.read() in ("pipe_write", "anon_pipe_write", "pipe_read", "anon_pipe_read"):
                        break
            except OSError:
                pass
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signum)
        t = time.monotonic()
        rc = proc.wait(10)
        return rc, time.monotonic() - t, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(r)


@pytest.mark.parametrize("command", SIGNAL_COMMANDS)
def test_sigterm_while_blocked_writing(command, many_samples):
    with open(many_samples, "rb") as stdin:
        rc, seconds, err = _blocked_then_signalled(command.split(), stdin, signal.SIGTERM)
    assert rc == 143, (command, rc, err)
    assert seconds < 5


def test_sigint_while_blocked_writing_and_reading(many_samples, tmp_path):
    with open(many_samples, "rb") as stdin:
        rc, seconds, err = _blocked_then_signalled(["tarcat"], stdin, signal.SIGINT)
    assert rc == 130 and b"interrupted" in err
    r, w = os.pipe()  # stdin: a pipe nobody writes
    try:
        rc, seconds, err = _blocked_then_signalled(["tarcat", "-o", str(tmp_path / "out.tar")], r,
                                                   signal.SIGTERM)
    finally:
        os.close(r)
        os.close(w)
    assert rc == 143 and seconds < 5
    assert not (tmp_path / "out.tar").exists()
