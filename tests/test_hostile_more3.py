"""Adversarial review, fifth pass: tarsort, tarsplit, tar2tsv, tarshow,
tarfirst and determinism at their edges.  Every command runs installed, as a
subprocess; outputs are read back with Python's tarfile or GNU tar.  Each test
failed before the fix it comes with (the spill-full case is a guard)."""

import io
import os
import re
import resource
import subprocess
import tarfile

import pytest

from helpers import read_tar, tar_bytes


def tar_of(members):
    return tar_bytes(members, format=tarfile.GNU_FORMAT)


def run(cmd, cwd, input=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60, **kw)


def raw_names(data):
    with tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as tf:
        return [m.name.encode("utf-8", "surrogateescape") for m in tf]


def test_tarsort_text_order_is_byte_order_for_names_that_are_not_utf8(tmp_path):
    # b"\xff" (not UTF-8) came out before U+E000 (bytes ee 80 80): lone
    # surrogates compare as U+DCxx code points, not as the bytes they are.
    names = ["\udcff.txt", "\ue000.txt", "z.txt", "\udc80a.txt", "\U0001f600.txt", "a\udcfe.txt"]
    data = tar_of([(n, n.encode("utf-8", "surrogateescape")) for n in names])
    want = sorted(n.encode("utf-8", "surrogateescape") for n in names)
    for memory in ("512MB", "1"):  # in memory, and one spilled run per sample
        p = run(["tarsort", "--memory", memory, "--tmpdir", str(tmp_path)], tmp_path, data)
        assert p.returncode == 0, p.stderr
        assert raw_names(p.stdout) == want
        p = run(["tarsort", "-r", "--memory", memory, "--tmpdir", str(tmp_path)], tmp_path, data)
        assert raw_names(p.stdout) == want[::-1]
    assert os.listdir(tmp_path) == []


def test_tarsort_float_nan_sorts_first_and_does_not_depend_on_memory(tmp_path):
    # NaN compares false with everything: the output was not sorted, and
    # differed between an in-memory and a spilled sort of the same input.
    values = [b"3", b"nan", b"1", b"-inf", b"2", b"NaN", b"0", b"inf", b"-1e3"]
    data = tar_of([(f"s{i:02d}.v", v) for i, v in enumerate(values)])
    outs = []
    for extra in ([], ["--memory", "1"], ["--memory", "300"]):
        p = run(["tarsort", "-s", "v", "-S", "float", "--tmpdir", str(tmp_path)] + extra, tmp_path, data)
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout)
    assert outs[0] == outs[1] == outs[2]
    got = [body for _, body in read_tar(outs[0])]
    assert got == [b"nan", b"NaN", b"-inf", b"-1e3", b"0", b"1", b"2", b"3", b"inf"]
    p = run(["tarsort", "-s", "v", "-S", "float", "-r", "--memory", "1", "--tmpdir", str(tmp_path)], tmp_path, data)
    assert [body for _, body in read_tar(p.stdout)] == [b"inf", b"3", b"2", b"1", b"0", b"-1e3", b"-inf",
                                                         b"nan", b"NaN"]
    assert os.listdir(tmp_path) == []


def test_tarsort_spill_directory_full_is_one_line_and_leaves_nothing(tmp_path):
    # a file-size limit hits a sort run (stdout is a pipe, not limited):
    # one line naming the run, exit 1, no spill directory left.
    data = tar_of([(f"{(i * 7919) % 3000:05d}.bin", bytes([i % 251]) * 300) for i in range(3000)])
    tdir = tmp_path / "t"
    tdir.mkdir()

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    p = run(["tarsort", "--memory", "1MB", "--tmpdir", str(tdir)], tmp_path, data, preexec_fn=limit)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert len(err.splitlines()) == 1 and "cannot write a sort run: File too large" in err, err
    assert os.listdir(tdir) == []


HOSTILE = [
    ("a", "tab\there\nnl\rcr\x1b[31mRED\x1b]0;title\x07 end"),
    ("b", "\x9b2J\x85NEL"),                       # 8-bit CSI and NEL, valid UTF-8
    ("c", "\u202eRLO\u2028LS\u2029PS\x7fDEL"),    # bidi override, line/paragraph separators
]
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def test_tables_and_previews_never_pass_terminal_controls(tmp_path):
    members = []
    for key, text in HOSTILE:
        members.append((f"{key}.txt", text.encode()))
        members.append((f"{key}.json", ('{"s": "%s"}' % text.encode("unicode_escape").decode()
                                        .replace('\\x', '\\u00')).encode()))
    members.append(("k\u202eevil\u2028x.t\u2029xt", b"1"))  # names may carry them too
    (tmp_path / "h.tar").write_bytes(tar_of(members))
    for cmd in (["tar2tsv", "-f", "txt json.s"], ["tar2tsv", "-f", "txt json.s", "--format", "csv"],
                ["tar2tsv", "-f", "txt json.s", "--format", "jsonl"], ["tar2tsv"], ["tarshow"],
                ["tarshow", "--format", "blocks"]):
        p = run(cmd + ["h.tar"], tmp_path)
        assert p.returncode == 0, (cmd, p.stderr)
        out = p.stdout.decode()
        assert not UNSAFE.search(out), (cmd, out)
        if cmd[0] == "tar2tsv":
            rows = 4 + ("jsonl" not in cmd)  # one per sample, and a header
            assert out.endswith("\n") and out.count("\n") == rows, (cmd, out)
            assert len(out.splitlines()) == rows, (cmd, out)  # also for readers splitting at U+2028/NEL
    tsv = run(["tar2tsv", "-f", "txt", "--nokey", "--noheader"], tmp_path, (tmp_path / "h.tar").read_bytes())
    assert tsv.stdout.decode().splitlines()[:3] == [
        "tab\\there\\nnl\\rcr\\x1b[31mRED\\x1b]0;title\\x07 end", "\\x9b2J\\x85NEL",
        "\\u202eRLO\\u2028LS\\u2029PS\\x7fDEL"]
    import json

    rows = [json.loads(line) for line in run(["tar2tsv", "-f", "txt", "--format", "jsonl", "h.tar"],
                                             tmp_path).stdout.decode().splitlines()]
    assert [r["txt"] for r in rows[:3]] == [t for _, t in HOSTILE]  # JSON still carries the exact text


@pytest.mark.parametrize("cmd, gen", [
    (["tarcat"], "--fields 600"),   # a sample of many members, packed past the sample budget
    (["tarcat"], ""),               # one large member, spooled
    (["tarproc", "-c", "true"], "--fields 600"),
])
def test_full_spool_directory_is_one_line_naming_it(tmp_path, cmd, gen):
    """A spool file that cannot be written (a full disk; here a file-size
    limit) is one line naming it and where spool files go, exit 1, and no
    spool file is left."""
    import sys

    from conftest import ROOT

    args = "10000 3 " + gen if gen else "30000000 1"
    data = subprocess.run([sys.executable, f"{ROOT}/testdata/bigmember.py", *args.split()], capture_output=True,
                          check=True).stdout

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000))

    p = run(cmd + ["--tmpdir", str(tmp_path)], tmp_path, data, preexec_fn=limit,
            env={**os.environ, "TARPROC_BLOB_THRESHOLD": "256KB"})  # a sample budget of 1 MiB
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert len(err.splitlines()) == 1 and "cannot write a spool file: File too large" in err, err
    assert "--tmpdir" in err and str(tmp_path) in err
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tarproc-spool")] == []
