"""Commands from data: a list of URLs that came from a non-local source (a
URL, a command's output) is data, and data never names ``pipe:`` commands.
The rule lives in one place (``sources.shardlist.url_from_data``) and is
applied wherever URLs are read from a list: ``-T`` file lists, tarmix specs,
shard indexes.  Also here: stdin named twice where shard lists are made."""

import functools
import http.server
import io
import json
import tarfile
import threading

import pytest

from helpers import tar_bytes


@pytest.fixture
def served(tmp_path):
    """A real HTTP server on 127.0.0.1 serving ``tmp_path``; yields its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _shard(tmp_path):
    (tmp_path / "a.tar").write_bytes(tar_bytes([("s0.txt", b"zero"), ("s1.txt", b"one")]))


def _one_error_line(p, *words):
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert "Traceback" not in lines[0] and "internal error" not in lines[0]


def test_file_list_from_url_may_not_run_commands(sh, tmp_path, served):
    _shard(tmp_path)
    (tmp_path / "list.txt").write_text("a.tar\npipe:touch PWNED; cat a.tar\n")
    p = sh(f"tarcat -T {served}/list.txt -o out.tar", ok=False)
    assert p.returncode == 2
    _one_error_line(p, "list.txt", "pipe:")
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "out.tar").exists()
    # every reading command makes its lists in the same place
    for cmd in ("tarpcat -T {u}/list.txt", "tarcheck -T {u}/list.txt", "tarindex -T {u}/list.txt"):
        p = sh(cmd.format(u=served) + " > /dev/null", ok=False)
        assert p.returncode == 2, cmd
        assert not (tmp_path / "PWNED").exists(), cmd


def test_file_list_from_a_command_may_not_run_commands(sh, tmp_path):
    _shard(tmp_path)
    p = sh("tarcat -T \"pipe:printf 'pipe:touch PWNED\\n'\" > /dev/null", ok=False)
    assert p.returncode == 2
    assert not (tmp_path / "PWNED").exists()


def test_local_file_list_and_stdin_list_may(sh, tmp_path):
    _shard(tmp_path)
    (tmp_path / "list.txt").write_text("pipe:cat a.tar\n")
    out = sh("tarcat -T list.txt").stdout
    assert tarfile.open(fileobj=io.BytesIO(out)).getnames() == ["s0.txt", "s1.txt"]
    out = sh("echo 'pipe:cat a.tar' | tarcat -T -").stdout
    assert tarfile.open(fileobj=io.BytesIO(out)).getnames() == ["s0.txt", "s1.txt"]


def test_mix_spec_from_url_may_not_run_commands(sh, tmp_path, served):
    _shard(tmp_path)
    (tmp_path / "mix.json").write_text(json.dumps({"sources": [{"shards": "pipe:touch PWNED; cat a.tar"}]}))
    p = sh(f"tarmix {served}/mix.json -o out.tar", ok=False)
    assert p.returncode == 2
    _one_error_line(p, "mix spec", "pipe:")
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out.tar").exists()
    # the same spec read from a local file runs (the user wrote it)
    sh("tarmix mix.json -o out.tar")
    assert (tmp_path / "PWNED").exists()


def test_index_from_url_may_not_name_commands(sh, tmp_path, served):
    import tarproc
    from tarproc.errors import UsageError

    _shard(tmp_path)
    sh("tarindex a.tar -o index.json")
    index = json.loads((tmp_path / "index.json").read_text())
    index["shardlist"][0]["url"] = "pipe:touch PWNED; cat a.tar"
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(UsageError, match="pipe:"):
        tarproc.IndexedDataset(f"{served}/index.json")[0]
    assert not (tmp_path / "PWNED").exists()


def test_stdin_named_twice_is_refused(sh, tmp_path):
    _shard(tmp_path)
    for cmd in ("tarpcat - - < a.tar", "tarcat - - < a.tar", "echo - | tarcat -T -", "tarcat -T - - < a.tar"):
        p = sh(cmd + " > out.tar", ok=False)
        assert p.returncode == 2, cmd
        _one_error_line(p, "stdin")
    out = sh("tarpcat - < a.tar").stdout
    assert sorted(tarfile.open(fileobj=io.BytesIO(out)).getnames()) == ["s0.txt", "s1.txt"]


def test_a_tar_given_as_the_list_is_one_clear_error(sh, tmp_path):
    _shard(tmp_path)
    p = sh("tarcat -T a.tar > out.tar", ok=False)
    assert p.returncode == 2
    _one_error_line(p, "a.tar", "NUL")


@pytest.mark.parametrize("where", ["exists", "remove", "read"])
def test_a_name_holding_a_placeholder_stays_quoted(tmp_path, monkeypatch, where):
    """Client command templates are filled in ONE pass (sources/open.fill_command):
    an object key holding ``{url}`` must not get the URL put inside its own
    quotes, which would end them and run what follows.  kujob's --done-if
    check, the sinks' remove/move/list and the readers share the function."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "")
    url = "s3://b/x{url}$(touch PWNED)"
    if where == "exists":
        from tarproc.jobs.local import is_done

        import tarproc

        is_done(url + "-{}", "1", tarproc.Settings(commands={"EXISTS_S3": "echo {bucket} {key} {url} > seen.txt"}))
    elif where == "remove":
        from tarproc.sinks.remote import run_client

        import tarproc

        settings = tarproc.Settings(commands={"REMOVE_S3": "echo {url} > seen.txt"})
        run_client("REMOVE", url, "remove", settings)
    else:
        from tarproc.sources.open import fill_command

        import subprocess

        subprocess.run(["/bin/sh", "-c", fill_command("echo {key} {url} > seen.txt", url)], check=True)
    assert not (tmp_path / "PWNED").exists()
    assert "$(touch PWNED)" in (tmp_path / "seen.txt").read_text()  # the name, as it is
