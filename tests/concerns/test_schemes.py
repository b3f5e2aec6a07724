"""The scheme table (runtime/schemes): one row per URL scheme says how its
URLs are read, written, listed, moved, removed and checked; overrides
(``TARPROC_<ACTION>_<SCHEME>``) replace a row's command; the readers and
writers dispatch on the row, never on a ladder of their own.  And the seams
of the I/O layer: no import circle, no private name imported across its
modules."""

import ast
import os

import pytest

from tarproc.settings import Settings

from conftest import ROOT
from tarproc.errors import UsageError
from tarproc.runtime import schemes
from tarproc.sinks import output


@pytest.mark.parametrize("url, name", [("-", "-"), ("pipe:cat a", "pipe"), ("a/b.tar", "file"),
                                       ("HTTPS://h/x", "https"), ("s3://b/k", "s3"), ("gs://b/k", "gs"),
                                       ("c:/x.tar", "file"), ("we ird://x", "file")])
def test_scheme_of(url, name):
    assert schemes.scheme_of(url) == name


def test_every_remote_row_has_the_commands_its_writer_and_reader_need():
    for row in schemes.SCHEMES.values():
        if row.reader == "client":
            assert "READ" in row.commands and "EXISTS" in row.commands, row.name
        if row.writer == "remote":
            assert "WRITE" in row.commands, row.name
    for name in ("gs", "s3"):  # the schemes with a server-side move (TARPROC_REMOTE_COMMIT=move)
        assert {"MOVE", "REMOVE", "LIST"} <= set(schemes.SCHEMES[name].commands)


def test_an_override_replaces_the_command_and_is_filled_in_one_pass(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "")
    settings = Settings(commands={"MOVE_S3": "mv {src} {url} {key}"})
    cmd = schemes.command("MOVE", "s3://b/k{url}", settings, src="s3://b/.tmp")
    assert cmd == "mv s3://b/.tmp 's3://b/k{url}' 'k{url}'"  # the {url} inside the key stays inside its quotes


def test_resumable_reads_are_rows_of_the_table_with_options_dropped_when_absent(monkeypatch):
    # the ranged, conditional reads of sources/resume are the table's STAT and RESUME commands
    monkeypatch.setenv("AWS_ENDPOINT_URL", "")
    for row in schemes.SCHEMES.values():
        if row.resumable:
            assert "RESUME" in row.commands and (row.name.startswith("http") or "STAT" in row.commands), row.name
    cmd = schemes.command
    assert cmd("RESUME", "gs://b/a.tar#17", offset=None) == "gsutil -q cat 'gs://b/a.tar#17'"
    assert cmd("RESUME", "gs://b/a.tar#17", offset="100") == "gsutil -q cat -r 100- 'gs://b/a.tar#17'"
    assert cmd("RESUME", "s3://b/k", offset="9", etag='"e;$(x)"') == \
        "aws s3api get-object --bucket b --key k --range bytes=9- --if-match '\"e;$(x)\"' /dev/fd/3 3>&1 1>/dev/null"
    assert cmd("RESUME", "s3://b/k", offset=None, etag=None) == \
        "aws s3api get-object --bucket b --key k /dev/fd/3 3>&1 1>/dev/null"
    import shlex

    got = cmd("RESUME", "http://h/x", headers="5", offset="3", etag="'a'", modified=None)
    assert shlex.split(got) == ["curl", "-gsSfL", "-D", "/dev/fd/5", "-r", "3-", "-H", "If-Match: 'a'", "http://h/x"]
    # an override of the new actions is taken like any other, with the row's options
    settings = Settings(commands={"RESUME_GS": "my-cat {from}{url}"})
    assert cmd("RESUME", "gs://b/k", settings, offset="5") == "my-cat -r 5- gs://b/k"
    assert Settings.from_environ({"TARPROC_STAT_S3": "x {url}"}).command("STAT", "s3") == "x {url}"
    with pytest.raises(UsageError, match="inside quotes"):
        schemes.fill_command("c {from}", "gs://b/k", options={"from": "-r '{offset}'"}, offset="1")


def test_random_access_reads_are_rows_of_the_table(monkeypatch):
    # the ranged reads of sources/indexed (RANGE) and get_many's (RANGES)
    import shlex

    from tarproc.settings import COMMAND_KINDS

    assert set(schemes.ACTIONS) == set(COMMAND_KINDS)  # every action can be replaced, and only those
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9/e p")
    for row in schemes.SCHEMES.values():
        assert ("RANGE" in row.commands) == row.resumable, row.name
    cmd = schemes.command
    # http(s): in process (sources/keepalive.py), never a command
    for action in ("RANGE", "RANGES"):
        assert schemes.SCHEMES["https"].commands[action] == schemes.BUILTIN
        with pytest.raises(UsageError, match="done in process"):
            cmd(action, "https://h/a b[1].tar", start="5", end="9")
    assert shlex.split(cmd("RANGE", "s3://b/k'$(x)", start="0", end="511", file="/tmp/t")) == \
        ["aws", "s3api", "get-object", "--bucket", "b", "--key", "k'$(x)", "--range", "bytes=0-511",
         "--endpoint-url", "http://127.0.0.1:9/e p", "/tmp/t"]
    assert cmd("RANGE", "gs://b/k x", start="1", end="2") == "gsutil -q cat -r 1-2 'gs://b/k x'"
    assert "RANGES" not in schemes.SCHEMES["gs"].commands
    settings = Settings.from_environ({"TARPROC_RANGE_GS": "my-cat {start} {end} {url}"})
    assert cmd("RANGE", "gs://b/k", settings, start="1", end="2") == "my-cat 1 2 gs://b/k"
    assert Settings.from_environ({"TARPROC_RANGES_HTTPS": "c -K -"}).command("RANGES", "https") == "c -K -"


def test_an_action_a_scheme_lacks_is_a_usage_error_naming_the_variable(monkeypatch):
    monkeypatch.delenv("TARPROC_MOVE_HTTPS", raising=False)
    with pytest.raises(UsageError, match="TARPROC_MOVE_HTTPS"):
        schemes.command("MOVE", "https://h/x")
    with pytest.raises(UsageError, match="unknown URL scheme 'ftp'"):
        schemes.command("READ", "ftp://user:pw@h/x")
    try:
        schemes.command("WRITE", "ftp://user:pw@h/x")
    except UsageError as e:
        assert "pw" not in str(e)  # the URL shown without its password


def test_an_unknown_scheme_is_read_and_written_by_its_override_alone(monkeypatch, tmp_path):
    from tarproc.sources.open import open_source

    (tmp_path / "x").write_bytes(b"hello")
    settings = Settings(commands={"READ_FOO": f"cat {tmp_path / 'x'}"})
    with open_source("foo://anything", decompress=False, settings=settings) as f:
        assert f.read() == b"hello"


@pytest.mark.parametrize("url, strategy", [("-", "Stream"), ("/dev/null", "Stream"), ("pipe:cat", "Stream"),
                                           ("out.tar", "LocalFile"), ("s3://b/k.tar", "SpoolUpload"),
                                           ("https://h/k.tar", "SpoolUpload")])
def test_each_output_gets_its_commit_strategy(url, strategy, monkeypatch):
    monkeypatch.delenv("TARPROC_REMOTE_COMMIT", raising=False)
    assert type(output.strategy_for(url)).__name__ == strategy


def test_move_mode_is_a_strategy_only_where_the_scheme_can_move(monkeypatch):
    settings = Settings(remote_commit="move")
    assert type(output.strategy_for("s3://b/k.tar", settings)).__name__ == "Move"
    assert type(output.strategy_for("https://h/k.tar", settings)).__name__ == "SpoolUpload"
    # the environment is the command line's to read, never the library's
    monkeypatch.setenv("TARPROC_REMOTE_COMMIT", "move")
    assert type(output.strategy_for("s3://b/k.tar")).__name__ == "SpoolUpload"
    assert output.strategy_for("out.tar").deferred and not output.strategy_for("-").deferred


# ------------------------------------------------------------------ seams

IO_MODULES = ["sources/open", "sources/compression", "sources/shardlist", "sources/fragment", "sources/raw",
              "sources/resume", "sinks/output", "sinks/remote", "sinks/partials", "runtime/child",
              "runtime/schemes", "runtime/procs", "sources/indexed", "sources/ranges"]


def _imports(module):
    """``{(imported module, name)}`` of every import in ``module`` (functions' included)."""
    path = os.path.join(ROOT, "tarproc", module + ".py")
    package = ["tarproc"] + module.split("/")[:-1]
    out = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            for alias in node.names:
                sub = "/".join(base[1:] + [alias.name])
                target = sub if os.path.exists(os.path.join(ROOT, "tarproc", sub + ".py")) else "/".join(base[1:])
                out.add((target, alias.name))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tarproc."):
            for alias in node.names:
                out.add((node.module[len("tarproc."):].replace(".", "/"), alias.name))
    return out


def test_the_io_layer_imports_no_private_name_across_modules():
    private = [(m, t, n) for m in IO_MODULES for t, n in _imports(m) if n.startswith("_") and t != m]
    assert private == []


def test_the_io_layer_has_no_import_circle():
    """A function-level import counts: a lazy import that breaks a circle is still one."""
    graph = {m: {t for t, _ in _imports(m) if t in IO_MODULES and t != m} for m in IO_MODULES}

    def reaches(start, goal, seen):
        for nxt in graph[start]:
            if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
                return True
        return False

    circles = [m for m in IO_MODULES if reaches(m, m, set())]
    assert circles == []
