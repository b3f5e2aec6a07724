"""Class: text shown to people.  Every message, log line, report and error
page goes through ``core.limits.safe_text`` (controls escaped, credentials
removed, bounded); data writers (tar2json, tar2tsv) escape what a terminal
acts on in a way their readers undo (JSON ``\\uHHHH``), so the values read
back unchanged.  Instances here: tarserve's log and error pages, bidi
overrides in tar2json's JSON and YAML, signed-URL parameters and passwords
holding ``@`` in error lines, kujob --dry-run lines."""

import json
import os
import re
import socket
import subprocess
import tarfile
import time

import pytest

from helpers import tar_bytes

OSC52 = "\x1b]52;c;SGVsbG8=\x07"
# raw controls a terminal acts on, as UTF-8 bytes: C0 (not tab/newline), DEL, C1, bidi overrides and isolates
RAW = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def _start_tarserve(root, *args):
    proc = subprocess.Popen(["tarserve", str(root), "--port", "0", *args], stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    line = proc.stderr.readline().decode()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    assert m, line
    return proc, int(m.group(1)), line


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


def test_tarserve_log_and_error_pages_are_safe(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.tar").write_bytes(tar_bytes([("k.txt", b"x")]))
    proc, port, first = _start_tarserve(root)
    try:
        answers = [_get(port, t) for t in (b"/" + OSC52.encode() + b"x.tar", b"/%1b%5b2J.tar",
                                            b"/\xe2\x80\xaegpj.tar", b"/a.tar")]
    finally:
        proc.terminate()
        log = proc.stderr.read()
        proc.wait(20)
    for a in answers[:3]:
        assert a.startswith(b"HTTP/1.1 400"), a[:80]
        assert not RAW.search(a.replace(b"\r\n", b"\n")), a
    assert answers[3].startswith(b"HTTP/1.1 200")
    assert not RAW.search(log), log
    assert b"\\x1b]52;c;SGVsbG8=\\x07x.tar 400" in log  # the access log names the target, escaped
    assert b"GET /a.tar 200" in log


def test_tarserve_hides_credentials_of_its_prefix(tmp_path, sh):
    # an http:// prefix with a password: the start line and a failed shard's log lines hide it
    proc = subprocess.Popen(["tarserve", "http://user:PASSWORD@127.0.0.1:9/x?y", "--port", "0"],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2 and b"PASSWORD" not in err and b"***@127.0.0.1" in err, err
    import http.server
    import threading

    import functools

    (tmp_path / "empty").mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "empty"))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # 404 to all
    threading.Thread(target=server.serve_forever, daemon=True).start()
    http_port = server.server_address[1]
    proc, port, first = _start_tarserve(f"http://user:PASSWORD@127.0.0.1:{http_port}")
    try:
        answer = _get(port, b"/a.tar")
        time.sleep(0.3)
    finally:
        proc.terminate()
        log = proc.stderr.read()
        proc.wait(20)
        server.shutdown()
    assert answer.startswith(b"HTTP/1.1 502"), answer[:80]
    assert b"PASSWORD" not in first.encode() + log + answer, log
    assert f"***@127.0.0.1:{http_port}/a.tar".encode() in log, log


@pytest.mark.parametrize("fmt", ["yaml", "json", "jsonlines"])
def test_tar2json_escapes_bidi_overrides_reversibly(sh, tmp_path, fmt):
    key, value = "a\u202egpj", "v\u202ex\u2066y\x85z"
    data = tar_bytes([(f"{key}.txt", value.encode()), ("b\u2067.cls", b"1")], format=tarfile.PAX_FORMAT)
    (tmp_path / "b.tar").write_bytes(data)
    out = sh(f"tar2json -f {fmt} b.tar").stdout
    assert not RAW.search(out), out
    text = out.decode("utf-8")
    if fmt == "yaml":
        import yaml

        records = list(yaml.safe_load_all(text))
    elif fmt == "json":
        records = [json.loads(r) for r in text.split("\n\n") if r.strip()]
    else:
        records = [json.loads(r) for r in text.splitlines()]
    assert records[0] == {"__key__": key, "txt": value}  # the escapes read back as the same characters
    assert records[1]["__key__"] == "b\u2067"


def test_tables_and_previews_escape_bidi_overrides(sh, tmp_path):
    data = tar_bytes([("a\u202egpj.txt", "v\u202ex".encode())], format=tarfile.PAX_FORMAT)
    (tmp_path / "b.tar").write_bytes(data)
    for cmd in ("tarshow b.tar", "tar2tsv b.tar", "tar2tsv --format csv b.tar", "tar2tsv --format jsonl b.tar"):
        out = sh(cmd).stdout
        assert not RAW.search(out), (cmd, out)
        assert b"u202e" in out, (cmd, out)


URLS = {  # URL: its secret
    "http://user:p@ss@127.0.0.1:9/x.tar": "ss@",  # a password holding an unencoded @
    "http://127.0.0.1:9/x.tar?X-Amz-Credential=AKIAID&X-Amz-Signature=SIGVALUE": "SIGVALUE",
    "http://127.0.0.1:9/x.tar?client_secret=SEKRIT&page=2": "SEKRIT",
    "http://127.0.0.1:9/x.tar?X-Api-Key=APIKEYVALUE": "APIKEYVALUE",
}


def test_credentials_in_urls_never_shown(sh):
    urls = " ".join(f"'{u}'" for u in URLS)
    p = sh(f"for u in {urls}; do tarcat -v \"$u\"; tarcheck --json \"$u\"; done; tarshow {urls}", ok=False,
           env={"TARPROC_RETRIES": "0"})
    shown = p.stdout + p.stderr
    for url, secret in URLS.items():
        assert secret.encode() not in shown, (url, shown)
    lines = p.stderr.decode().splitlines()
    assert sum("***" in line for line in lines) >= 2 * len(URLS), lines
    # the URL ends where it ended (": " after it), and other parameters are shown
    assert any(line.startswith("tarcat: http://127.0.0.1:9/x.tar?client_secret=***&page=2: curl failed")
               for line in lines), lines


def test_kujob_dry_run_shows_no_raw_controls_and_still_runs(sh, tmp_path):
    p = sh("kujob -q -n -s '{1..2}' -- printf '%s|%s\\n' $'\\e]52;c;SGVsbG8=\\a' $'a\\u202eb' > dry.txt; cat dry.txt")
    assert not RAW.search(p.stdout), p.stdout
    assert b"$'\\x1b]52;c;SGVsbG8=\\x07'" in p.stdout and b"$'a\\u202eb'" in p.stdout
    assert sh("bash dry.txt").stdout == ("\x1b]52;c;SGVsbG8=\x07|a\u202eb\n" * 2).encode()


def test_tarfirst_on_a_terminal_escapes_a_value(tmp_path):
    import pty

    (tmp_path / "v.tar").write_bytes(tar_bytes([("k.txt", (OSC52 + "caf\u00e9\n").encode()),
                                                ("k.bin", bytes(range(256)))]))

    def on_tty(*args):
        master, slave = pty.openpty()
        p = subprocess.Popen(["tarfirst", *args, "v.tar"], cwd=tmp_path, stdout=slave, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other end closed
                break
            if not chunk:
                break
            out += chunk
        os.close(master)
        return p.wait(30), out, p.stderr.read()

    rc, out, err = on_tty("-f", "txt")
    assert rc == 0 and not RAW.search(out.replace(b"\r\n", b"\n")), out
    assert "\\x1b]52;c;SGVsbG8=\\x07caf\u00e9".encode() in out, out
    rc, out, err = on_tty("-f", "bin")
    assert rc == 2 and b"binary data to a terminal" in err and out == b"", (out, err)
    # in a pipe, the bytes as they are
    p = subprocess.run(["tarfirst", "-f", "txt", "v.tar"], cwd=tmp_path, capture_output=True)
    assert p.stdout == (OSC52 + "caf\u00e9\n").encode()
