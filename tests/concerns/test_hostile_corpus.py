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
import tarfile

import pytest

import make_corpus

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

