"""Resumed downloads against servers that lie: the object changes between
the first read and the resume (ETag, Last-Modified), a resume answered with
200 and the whole body, a wrong or unreadable Content-Range, a 206 to a
request that asked for no range, more bytes than asked, connections closed
mid-way again and again.  curl is the real client; the server is a small
threaded one on 127.0.0.1, scripted per request.  The verdict is the bytes
of an undisturbed read, or exit 2 with one line and no output written (and
on stdout never a byte that is not the object's)."""

import random
import subprocess
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import require
from helpers import tar_bytes


def _shard(seed, n, size):
    rng = random.Random(seed)
    return tar_bytes([m for i in range(n) for m in ((f"s{i:03d}.bin", rng.randbytes(size)),
                                                     (f"s{i:03d}.cls", str(i).encode()))])


SMALL = _shard(1, 4, 20_000)
OTHER = _shard(2, 4, 20_000)  # same size, other bytes
BIG = _shard(3, 3, 1_100_000)  # each break after a resumed megabyte starts the count again
DATE1, DATE2 = formatdate(1700000000, usegmt=True), formatdate(1700000100, usegmt=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        server = self.server
        with server.lock:
            step = server.script.pop(0) if server.script else {}
            server.log.append(self.headers.get("Range"))
        data = step.get("data", server.data)
        rng = self.headers.get("Range")
        start = int(rng.split("=")[1].split("-")[0]) if rng else 0
        if step.get("as200"):
            start = 0
        status = 206 if (rng and not step.get("as200")) or step.get("send206") else 200
        body = data[start:]
        cut = step.get("cut")
        if cut is not None:
            body = body[:cut]
        body += step.get("extra", b"")
        self.send_response(status)
        if status == 206:
            shown = step.get("content_range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Range", shown)
        if not step.get("no_length"):
            self.send_header("Content-Length", str(len(data) - start + len(step.get("extra", b""))))
        if step.get("etag", '"v1"'):
            self.send_header("ETag", step.get("etag", '"v1"'))
        if step.get("modified", DATE1):
            self.send_header("Last-Modified", step.get("modified", DATE1))
        if step.get("no_length"):
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        if cut is not None or step.get("no_length"):
            self.close_connection = True
            self.connection.close()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass


@pytest.fixture
def web():
    require("curl")
    server = Server(("127.0.0.1", 0), Handler)
    server.lock = threading.Lock()
    server.log = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


HALF = len(SMALL) // 2
# name: (object, script of the requests, verdict: "same" or a word of the one line)
CASES = {
    "etag_changes_and_if_match_ignored": (SMALL, [{"cut": HALF}, {"etag": '"v2"', "data": OTHER}], "ETag"),
    "last_modified_changes_no_etag": (SMALL, [{"cut": HALF, "etag": None}, {"etag": None, "modified": DATE2,
                                                                             "data": OTHER}], "modified"),
    "etag_gone_on_resume": (SMALL, [{"cut": HALF}, {"etag": None, "data": OTHER}], "ETag"),
    "resume_answered_200_whole_body": (SMALL, [{"cut": HALF}, {"as200": True}], "ignores byte ranges"),
    "content_range_from_another_byte": (SMALL, [{"cut": HALF}, {"content_range": f"bytes {HALF + 10}-"
                                                                                 f"{len(SMALL) - 1}/{len(SMALL)}"}],
                                        "from byte"),
    "content_range_unreadable": (SMALL, [{"cut": HALF}, {"content_range": "bytes garbage"}],
                                 "unreadable Content-Range"),
    "content_range_other_total": (SMALL, [{"cut": HALF}, {"content_range": f"bytes {HALF}-{len(SMALL) + 99}/"
                                                                           f"{len(SMALL) + 100}"}], "size"),
    "206_to_a_request_without_range": (SMALL, [{"send206": True,
                                                "content_range": f"bytes 512-{len(SMALL) - 1}/{len(SMALL)}"}],
                                       "the whole object"),
    "resume_sends_more_than_asked": (SMALL, [{"cut": HALF}, {"extra": b"X" * 5000, "no_length": True}],
                                     "more than the object's 92160 bytes (resumed from byte"),
    "resume_sends_more_with_a_length": (SMALL, [{"cut": HALF}, {"extra": b"X" * 5000}], "more than the object's"),
    "closes_midway_again_and_again": (SMALL, [{"cut": 100}] * 10, "gave up"),
    "closes_after_progress_each_time": (BIG, [{"cut": 1_200_000}] * 3, "same"),
    "short_then_honest": (SMALL, [{"cut": HALF}], "same"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_lying_server_gives_the_object_or_one_line(web, tmp_path, name):
    data, script, verdict = CASES[name]
    (tmp_path / "local.tar").write_bytes(data)
    want = subprocess.run(["tarcat", "local.tar"], cwd=tmp_path, capture_output=True, check=True).stdout
    url = f"http://127.0.0.1:{web.server_address[1]}/a.tar"
    env_cmd = ["env", "TARPROC_STALL_TIMEOUT=5", "tarcat", "--retries", "3"]
    for out in (["-o", "out.tar"], []):
        web.data, web.script, web.log = data, [dict(s) for s in script], []
        p = subprocess.run(env_cmd + [url] + out, cwd=tmp_path, capture_output=True, timeout=120)
        err = p.stderr.decode()
        if verdict == "same":
            assert p.returncode == 0, err
            got = (tmp_path / "out.tar").read_bytes() if out else p.stdout
            assert got == want
            continue
        assert p.returncode == 2 and err.count("\n") == 1 and "a.tar" in err and verdict in err, (name, err)
        assert "Traceback" not in err
        if out:
            assert not (tmp_path / "out.tar").exists()
        else:
            assert want.startswith(p.stdout)  # what went out before the refusal is the object's
