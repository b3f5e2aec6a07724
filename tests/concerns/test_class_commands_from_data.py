"""Class: commands from data.  A list read from anywhere but a local file or
stdin is data, and data never runs a command or reaches outside what the
command owns (``sources.shardlist.url_from_data``; client templates filled
by ``sources.open.fill_command``; tarserve's names under its root).
Instances here: a brace pattern in a remote file list or mix spec that
expands to ``pipe:``; a URL holding ``$(...)`` pasted into a template that
put ``{url}`` inside quotes; tarserve requests for ``..``, ``pipe:`` and
symbolic links out of its root."""

import functools
import http.server
import os
import re
import socket
import subprocess
import threading

import pytest

from helpers import tar_bytes


@pytest.fixture
def served(tmp_path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("line", ["{pipe:touch PWNED,a.tar}", "{pi,x}pe:touch PWNED"])
def test_brace_pattern_in_a_remote_list_never_runs(sh, tmp_path, served, line):
    (tmp_path / "a.tar").write_bytes(tar_bytes([("k.txt", b"x")]))
    (tmp_path / "b.tar").write_bytes(tar_bytes([("j.txt", b"y")]))
    (tmp_path / "list.txt").write_text(line + "\n")
    (tmp_path / "mix.yaml").write_text(f'sources:\n  - shards: "{line}"\n')
    for cmd in (f"tarcat -T {served}/list.txt", f"tarpcat -T {served}/list.txt", f"tarmix {served}/mix.yaml"):
        p = sh(cmd, ok=False)
        assert p.returncode == 2, (cmd, p.stderr)
        assert b"may not name commands" in p.stderr, p.stderr
        assert not (tmp_path / "PWNED").exists(), cmd
    # a local list is the user's own: its patterns still expand
    (tmp_path / "local.txt").write_text("{a,b}.tar\n")
    assert sh("tarcat -T local.txt | tar tf -").stdout == b"k.txt\nj.txt\n"
    (tmp_path / "remote.txt").write_text(f"{served}/{{a,b}}.tar\n")
    assert sh(f"tarcat -T {served}/remote.txt | tar tf -").stdout == b"k.txt\nj.txt\n"


@pytest.mark.parametrize("template", ['curl -sf "{url}"', "curl -sf '{url}'", 'f="x{url}"; curl -sf "$f"'])
def test_a_placeholder_inside_quotes_is_refused(sh, tmp_path, served, template):
    # inside double quotes the value's own quotes are literal: $(...) in a URL from a list would run
    (tmp_path / "list.txt").write_text(f"{served}/a.tar?x=$(touch PWNED)\n")
    p = sh(f"tarcat -T {served}/list.txt", ok=False, env={"TARPROC_READ_HTTP": template})
    assert p.returncode == 2, p.stderr
    assert b"is inside quotes" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert not (tmp_path / "PWNED").exists()


def test_an_unquoted_placeholder_keeps_the_url_one_word(sh, tmp_path, served):
    (tmp_path / "a.tar").write_bytes(tar_bytes([("k.txt", b"x")]))
    (tmp_path / "list.txt").write_text(f"{served}/a.tar?x=$(touch${{IFS}}PWNED)'$(touch${{IFS}}PWNED)'`touch${{IFS}}PWNED`\n")
    p = sh(f"tarcat -T {served}/list.txt | tar tf -", env={"TARPROC_READ_HTTP": "curl -gsf {url}"})
    assert p.stdout == b"k.txt\n"
    assert not (tmp_path / "PWNED").exists()


def _get(port, target):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def test_tarserve_serves_only_what_is_under_its_root(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    secret = tmp_path / "secret.tar"
    secret.write_bytes(tar_bytes([("secret.txt", b"s")]))
    (root / "ok.tar").write_bytes(tar_bytes([("k.txt", b"x")]))
    os.symlink(secret, root / "out.tar")  # a symbolic link out of the root
    os.symlink(tmp_path, root / "sub" / "up")  # a directory link out of the root
    proc = subprocess.Popen(["tarserve", str(root), "--port", "0", "-q"], stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        port = int(re.search(rb"127\.0\.0\.1:(\d+)/", proc.stderr.readline()).group(1))
        status = {t: _get(port, t).split(b"\r\n")[0] for t in
                  (b"/ok.tar", b"/out.tar", b"/sub/up/secret.tar", b"/../secret.tar", b"/%2e%2e/secret.tar",
                   b"/pipe:touch%20PWNED", b"//etc/passwd", b"/sub/..%2fok.tar")}
        listing = _get(port, b"/")
    finally:
        proc.terminate()
        proc.wait(20)
    assert status[b"/ok.tar"] == b"HTTP/1.1 200 OK"
    for target, line in status.items():
        if target != b"/ok.tar":
            assert line.split()[1] in (b"400", b"404"), (target, line)
    assert b"ok.tar" in listing and b"out.tar" not in listing and b"secret" not in listing
    assert not (tmp_path / "PWNED").exists() and not (root / "PWNED").exists()
