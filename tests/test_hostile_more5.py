"""Red-team pass 7: tarserve, tarindex, tarfirst, tar2json, lines2tar, tarmix.
Each test is a problem an earlier pass missed (see the commit that fixed it)."""

import json
import os
import socket
import subprocess
import threading
import time

import pytest

from helpers import read_tar, tar_bytes
from test_tarserve import Tarserve, raw, status


def run(cmd, cwd, input=None, env=None, timeout=60):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, input=input, capture_output=True,
                          timeout=timeout, env=full_env)


def shard(n, prefix="s", size=0):
    members = []
    for i in range(n):
        members += [(f"{prefix}{i:05d}.txt", b"%s %d " % (prefix.encode(), i) + b"x" * size),
                    (f"{prefix}{i:05d}.cls", b"%d" % (i % 7))]
    return tar_bytes(members)


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(args, env=None):
        s = Tarserve(tmp_path, args, env)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def _dechunk(body):
    """The payload of a chunked body, and whether it ended with the zero chunk."""
    out, pos = bytearray(), 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return bytes(out), False
        size = int(body[pos:eol], 16)
        if size == 0:
            return bytes(out), body[eol:eol + 4] == b"\r\n\r\n"
        out += body[eol + 2:eol + 2 + size]
        if len(body) < eol + 2 + size + 2:
            return bytes(out), False
        pos = eol + 2 + size + 2


# ---------------------------------------------------------------- tarserve


def test_tarserve_a_client_trickling_bytes_after_its_answer_does_not_keep_its_slot(tmp_path, serve):
    """The close of an answered connection read what the client still sent
    with a 1 s timeout per read and no total: a client sending a byte every
    half second after its 404 held one of --max-clients forever (80 such
    connections shut a server out for good, for ~160 bytes/s)."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "a.tar").write_bytes(shard(3))
    s = serve(["root", "-q", "--max-clients", "1"])
    hog = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    hog.sendall(b"GET /missing.tar HTTP/1.1\r\n\r\n")
    stop = threading.Event()

    def trickle():
        while not stop.wait(0.3):
            try:
                hog.send(b"x")
            except OSError:
                return

    t = threading.Thread(target=trickle)
    t.start()
    try:
        assert status(hog.recv(4096)) == 404
        time.sleep(3.5)  # past the bounded linger (2 s); the hog still sends
        answer = raw(s.port, b"GET /a.tar HTTP/1.1\r\n\r\n")
        assert status(answer) == 200, answer[:200]
    finally:
        stop.set()
        t.join()
        hog.close()


def test_tarserve_bytes_sent_after_the_request_do_not_reset_a_complete_answer(tmp_path, serve):
    """A client that sent anything after its request head (a pipelined
    request, a stray CRLF) got a reset instead of the end of a complete
    body: closing a socket with unread bytes discards what is still queued
    for sending, while the server logged a complete 200."""
    (tmp_path / "root").mkdir()
    data = shard(1500, size=3000)  # several MB: more than the socket buffers hold
    (tmp_path / "root" / "big.tar").write_bytes(data)
    s = serve(["root"])
    with socket.create_connection(("127.0.0.1", s.port), timeout=20) as c:
        c.sendall(b"GET /big.tar HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.3)
        c.sendall(b"GET /big.tar HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(1.0)  # the server has written everything by now and closes
        answer = b""
        while True:
            try:
                got = c.recv(1 << 20)
            except ConnectionResetError:
                break
            if not got:
                break
            answer += got
    head, _, body = answer.partition(b"\r\n\r\n")
    assert status(head) == 200
    payload, complete = _dechunk(body)
    assert complete, f"{len(payload)} of {len(data)} bytes, no terminating chunk"
    assert sorted(read_tar(payload)) == sorted(read_tar(data))


# ---------------------------------------------------------------- tarfirst, tarmix: -o naming an input


def test_tarfirst_output_naming_its_input_is_refused(tmp_path):
    """`tarfirst -f jpg -o shard.tar shard.tar` (first.jpg meant) replaced the
    shard by one field's bytes; lines2tar, tarindex and tarmix refuse it."""
    (tmp_path / "a.tar").write_bytes(shard(3))
    before = (tmp_path / "a.tar").read_bytes()
    p = run("tarfirst -f txt -o a.tar a.tar", tmp_path)
    assert p.returncode == 2, p.stderr
    assert b"a.tar: is also the output" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr
    assert (tmp_path / "a.tar").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["a.tar"]
    assert run("tarfirst -f txt -o first.txt a.tar", tmp_path).returncode == 0
    assert (tmp_path / "first.txt").read_bytes() == b"s 0 "


def test_tarmix_output_naming_one_of_its_shards_is_refused(tmp_path):
    """`tarmix mix.json -o a-1.tar` where a-1.tar is a shard of a source:
    the mix (which ends when a source runs out) replaced the shard."""
    for i in range(3):
        (tmp_path / f"a-{i}.tar").write_bytes(shard(4, prefix=f"a{i}-"))
    before = (tmp_path / "a-1.tar").read_bytes()
    spec = {"sources": [{"shards": "a-{0..2}.tar"}]}
    p = run("tarmix --seed 1 - -o a-1.tar", tmp_path, json.dumps(spec).encode())
    assert p.returncode == 2, p.stderr
    assert b"a-1.tar: is also the output" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr
    assert (tmp_path / "a-1.tar").read_bytes() == before
    p = run("tarmix --seed 1 - -o mixed.tar", tmp_path, json.dumps(spec).encode())
    assert p.returncode == 0, p.stderr
    assert len(read_tar((tmp_path / "mixed.tar").read_bytes())) == 24


# ---------------------------------------------------------------- tarmix: weights and URL bounds


def test_tarmix_huge_equal_weights_still_mix(tmp_path):
    """Weights near the float maximum summed to inf: every pick fell on the
    last source and the first was never drawn, whatever the seed."""
    (tmp_path / "a.tar").write_bytes(shard(200, prefix="a"))
    (tmp_path / "b.tar").write_bytes(shard(200, prefix="b"))
    spec = {"sources": [{"shards": "a.tar", "weight": 1e308}, {"shards": "b.tar", "weight": 1e308}]}
    p = run("tarmix --seed 1 -", tmp_path, json.dumps(spec).encode())
    assert p.returncode == 0, p.stderr
    names = [n for n, _ in read_tar(p.stdout) if n.endswith(".txt")]
    a = sum(n.startswith("a") for n in names)
    b = sum(n.startswith("b") for n in names)
    assert a > 20 and b > 20, (a, b)


def test_tarmix_url_bound_is_for_all_sources_together(tmp_path):
    """Each source's shard list was bounded on its own (TARPROC_MAX_URLS),
    so a 1 MiB spec of thousands of '{000000..999999}' sources held billions
    of names: 4 such sources took 300 MB and 9 s before the first sample."""
    spec = {"sources": [{"shards": f"x{i}-{{000..599}}.tar"} for i in range(3)]}
    p = run("tarmix --seed 1 - > out.tar", tmp_path, json.dumps(spec).encode(),
            env={"TARPROC_MAX_URLS": "1000"})
    assert p.returncode == 2, p.stderr
    assert b"more than 1000" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr


def test_tarserve_a_cut_off_shard_is_never_a_complete_answer(tmp_path, serve):
    """A shard that ends on a member boundary without its end-of-archive
    marker (a shard still being copied into the directory: cp writes whole
    blocks) was served as a complete 200: offline readers warn, but the
    client of a server never sees the warning. tarserve is strict by
    default now (--no-strict serves what is there)."""
    (tmp_path / "root").mkdir()
    data = shard(40)
    cut = data[:10 * 2048]  # 10 samples of 2 one-block members: a member boundary
    (tmp_path / "root" / "cut.tar").write_bytes(cut)
    s = serve(["root", "-q"])
    p = subprocess.run(["curl", "-sS", s.url + "cut.tar"], capture_output=True, timeout=30)
    assert p.returncode != 0, "a cut-off shard looked complete"
    s2 = serve(["root", "-q", "--no-strict"])
    p = subprocess.run(["curl", "-sS", "--fail", s2.url + "cut.tar"], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert len([n for n, _ in read_tar(p.stdout)]) == 20
    assert "end-of-archive" in s2.text()


# ---------------------------------------------------------------- tarindex


@pytest.mark.parametrize("offsets", ["x.json", "./x.json", "sub/../x.json"])
def test_tarindex_offsets_naming_the_index_itself_is_refused(offsets, tmp_path):
    """`tarindex a.tar -o x.json --offsets x.json` exited 0 with one file
    that was the JSON (the sidecar written first, then replaced): an index
    that IndexedDataset cannot read ("not this index's offsets")."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.tar").write_bytes(shard(3))
    p = run(f"tarindex a.tar -o x.json --offsets {offsets}", tmp_path)
    assert p.returncode == 2, p.stderr
    assert b"--offsets" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr
    assert not (tmp_path / "x.json").exists()


# ---------------------------------------------------------------- tar2json


def test_tar2json_json_output_is_json_for_numbers_floats_cannot_hold(tmp_path):
    """A JSON field holding 1e999 (valid JSON, beyond a float) or NaN (which
    Python's parser accepts) came out as the bare words Infinity / NaN: not
    JSON, strict readers (JavaScript's JSON.parse, Go, serde) refuse the
    whole line. They are null now, as JSON.stringify writes them; YAML keeps
    .inf / .nan (valid YAML)."""
    line = b'k1\t{"v": 1e999, "m": -1e999, "w": NaN, "x": [1.5, {"y": 1e999}]}\n'
    (tmp_path / "j.tar").write_bytes(run("lines2tar -k '__key__ json'", tmp_path, line).stdout)

    def strict(text):
        def refuse(c):
            raise ValueError(f"not JSON: {c}")
        return json.loads(text, parse_constant=refuse)

    p = run("tar2json -f jsonlines -k 'json.v json.m json.w json.x'", tmp_path, (tmp_path / "j.tar").read_bytes())
    assert p.returncode == 0, p.stderr
    assert strict(p.stdout) == {"json.v": None, "json.m": None, "json.w": None, "json.x": [1.5, {"y": None}]}
    p = run("tar2json -f json -k 'json.v json.x' j.tar", tmp_path)
    assert strict(p.stdout) == {"json.v": None, "json.x": [1.5, {"y": None}]}
    p = run("tar2tsv --format jsonl -f 'json.v json.x' j.tar", tmp_path)  # the same rows in tar2tsv
    assert p.returncode == 0, p.stderr
    assert strict(p.stdout) == {"__key__": "k1", "json.v": None, "json.x": [1.5, {"y": None}]}
    p = run("tar2json -k 'json.v json.w' j.tar", tmp_path)
    assert b'json.v: .inf' in p.stdout and b'json.w: .nan' in p.stdout  # plain YAML keys, as PyYAML writes them
