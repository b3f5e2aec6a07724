"""Text shown to people goes through one function
(``tarproc.core.limits.safe_text``): controls escaped (no escape sequence or
OSC 52 clipboard write reaches a terminal), credentials of URLs removed,
length bounded, and always encodable (lone surrogates, non-UTF-8 names on a
strict UTF-8 stdout)."""

import io
import json
import re
import subprocess
import tarfile

import pytest

from tarproc.core.limits import NAME_CHARS, safe_text
from helpers import tar_bytes

OSC52 = "\x1b]52;c;SGVsbG8=\x07"


def _no_controls(data):
    assert b"\x1b" not in data and b"\x07" not in data and b"\x9b" not in data.replace(b"\xc2\x9b", b"")


def test_safe_text_rules():
    for value in (OSC52, "a\x00b\rc\n", "\ud800x", "k\udce9", b"\xff\x1b[2J", "\u202eevil", "x" * 10000):
        text = safe_text(value)
        text.encode("utf-8")  # strict: no surrogate is left
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text), text
        assert len(text) <= NAME_CHARS + 30
    assert safe_text("k\udce9") == "k\\xe9"
    assert safe_text("http://user:PASSWORD@host/x.tar") == "http://***@host/x.tar"
    assert "PASSWORD" not in safe_text("s3://b/x?X-Amz-Signature=PASSWORD&a=1")
    assert safe_text("line1\nline2\tx\x1b", lines=True) == "line1\nline2\tx\\x1b"


def test_values_and_names_never_reach_the_terminal_raw(sh, tmp_path):
    data = tar_bytes([("k.txt", OSC52.encode()), ("k.json", json.dumps({"a": OSC52}).encode())])
    (tmp_path / "esc.tar").write_bytes(data)
    for cmd in ("tarshow esc.tar", "tar2tsv esc.tar", "tar2json esc.tar", "tar2json -k 'json.a' esc.tar"):
        _no_controls(sh(cmd).stdout)
    # a name in an error line (a URL given on the command line)
    p = sh(f"tarcat $'{OSC52.encode('unicode_escape').decode()}.tar'", ok=False)
    assert p.returncode == 2
    _no_controls(p.stderr)
    assert b"\\x1b]52" in p.stderr


def test_credentials_never_shown(sh, tmp_path):
    url = "http://user:PASSWORD@127.0.0.1:1/x.tar"
    for cmd in (f"tarcat -v {url}", f"tarcheck {url}", f"tarcheck --json {url}", f"tar2json -v {url}",
                f"tarpcat -v {url}"):
        p = sh(cmd, ok=False, env={"TARPROC_RETRIES": "0"})  # (a refused connection is not resumed)
        assert p.returncode == 2, cmd
        assert b"PASSWORD" not in p.stdout + p.stderr, cmd
        assert b"***@127.0.0.1" in p.stdout + p.stderr, cmd


def test_lone_surrogate_in_json_is_shown(sh, tmp_path):
    (tmp_path / "s.tar").write_bytes(tar_bytes([("k.json", b'{"a": "\\ud800x"}'), ("k.cls", b"1")]))
    for cmd in ("tarshow s.tar", "tar2json -k 'json.a' s.tar", "tar2tsv s.tar", "tar2tsv --format jsonl s.tar"):
        out = sh(cmd).stdout
        out.decode("utf-8")
        assert b"ud800" in out, cmd


@pytest.mark.parametrize("cmd, shown", [("tarshow n.tar", b"k\\xe9"), ("tar2tsv n.tar", b"k\\xe9"),
                                        ("tar2json n.tar", b"k\\udce9"), ("tarcheck n.tar", b"k\\xe9.txt")])
def test_non_utf8_names_on_a_strict_utf8_stdout(sh, tmp_path, cmd, shown):
    data = tar_bytes([("k\udce9.txt", b"x"), ("k\udce9.cls", b"1")], format=tarfile.GNU_FORMAT)
    (tmp_path / "n.tar").write_bytes(data)
    p = sh(cmd, env={"PYTHONIOENCODING": "utf-8"}, ok=False)
    assert p.returncode == (1 if cmd.startswith("tarcheck") else 0), p.stderr  # tarcheck: a non-UTF-8 name
    p.stdout.decode("utf-8")
    assert shown in p.stdout


def test_reports_keep_whole_names_but_escape_them(sh, tmp_path):
    # tarcheck's JSON report: escaped, valid UTF-8, credentials removed
    data = tar_bytes([("k\udce9.txt", b"x"), ("k\udce9.txt", b"y")], format=tarfile.GNU_FORMAT)
    (tmp_path / "d.tar").write_bytes(data)
    out = sh("tarcheck --json d.tar", ok=False).stdout
    report = json.loads(out.decode("utf-8"))
    assert report["ok"] is False
    assert "\\xe9" in json.dumps(report)


def test_tar_written_from_escaped_names_is_unchanged(sh, tmp_path):
    # data streams are not "shown": tarcat keeps non-UTF-8 names byte for byte
    data = tar_bytes([("k\udce9.txt", b"x")], format=tarfile.GNU_FORMAT)
    (tmp_path / "n.tar").write_bytes(data)
    out = sh("tarcat n.tar", env={"PYTHONIOENCODING": "utf-8"}).stdout
    with tarfile.open(fileobj=io.BytesIO(out), encoding="utf-8", errors="surrogateescape") as tf:
        assert tf.getnames() == ["k\udce9.txt"]


from helpers import run_measured as _run_measured  # noqa: E402


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


def tar_of(members):
    return tar_bytes(members, format=tarfile.GNU_FORMAT)


def run(cmd, cwd, input=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60, **kw)


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


# ---------------------------------------------------------------- names never forge a line

FORGE = "a\n  ok FORGED\nz"  # a name that would print an "  ok" line of its own
READING = ["tarcheck -v {}", "tarcheck --json {}", "tarcat -v {}", "tar2tsv {}", "tar2json {}", "tarshow {}",
           "tarindex -v -o i.json {}", "tarproc -v -c true {}", "tarsplit -v -n 1 -o sp {}", "tarfirst {}",
           "tarpcat -v {}", "tarjoin -v {} -o /dev/null"]


def _forged(p):
    """Lines of output that are a forged "ok" (or carry an escape)."""
    out = p.stdout + p.stderr
    _no_controls(out)
    return [line for line in out.decode("utf-8", "replace").splitlines() if line.strip().startswith(("ok FORGED", "z"))]


@pytest.mark.parametrize("cmd", READING)
def test_member_names_never_forge_a_line(sh, tmp_path, cmd):
    """A member name with newlines (``a\\n  ok\\nz.txt``) in every command's
    reports and messages: tarcheck printed it raw and forged an "  ok"
    line."""
    import make_corpus as M

    (tmp_path / "nl.tar").write_bytes(
        M.member(f"{FORGE}.txt".encode(), b"x") + M.member(b"k\x1b[2J\n.txt", b"y")
        + M.member(f"{FORGE}.lnk".encode(), flag=b"2", linkname=FORGE.encode()) + M.EOA)
    p = sh(cmd.format("nl.tar"), ok=False)
    assert not _forged(p), (cmd, p.stdout, p.stderr)
    told = p.stdout + p.stderr
    assert b"a\\n  ok FORGED\\nz" in told or b"a\\\\n  ok FORGED\\\\nz" in told, (cmd, told)  # escaped (in JSON too)


@pytest.mark.parametrize("cmd", READING)
def test_input_names_never_forge_a_line(sh, tmp_path, cmd):
    """An input file named with newlines, sound and damaged: "reading NAME"
    (-v), the report's header, the error line."""
    (tmp_path / f"{FORGE}.tar").write_bytes(tar_bytes([("k.txt", b"t"), ("k.cls", b"1")]))
    (tmp_path / f"{FORGE}-bad.tar").write_bytes(b"x" * 1024)
    for name in (f"{FORGE}.tar", f"{FORGE}-bad.tar"):
        quoted = "$'" + name.replace("\n", "\\n") + "'"
        p = sh(cmd.format(quoted), ok=False)
        assert not _forged(p), (cmd, p.stdout, p.stderr)
