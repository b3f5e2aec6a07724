"""Inputs and outputs by URL: compression both ways, pipe:, HTTP (curl and a
local http.server), S3 (the aws CLI against a local moto server), command
overrides, and atomic file outputs."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import VENV_BIN, require
from helpers import png_bytes, read_tar, tar_bytes

MEMBERS = [("a.cls", b"1"), ("a.txt", b"alpha" * 200), ("b.cls", b"2"), ("b.txt", b"")]


@pytest.fixture
def shard(tmp_path):
    (tmp_path / "in.tar").write_bytes(tar_bytes(MEMBERS))
    return tmp_path / "in.tar"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return
        except urllib.error.HTTPError:
            return  # the server answers
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# ------------------------------------------------------------ compression


@pytest.mark.parametrize("prog", ["gzip", "bzip2", "xz", "zstd"])
def test_compressed_input_is_detected_on_stdin(sh, shard, prog):
    require(prog)
    out = sh(f"{prog} -c < in.tar | tarcat").stdout
    assert read_tar(out) == MEMBERS
    out = sh(f"{prog} -c < in.tar > in.z && tarcat in.z").stdout  # and from a file without a telling name
    assert read_tar(out) == MEMBERS


@pytest.mark.parametrize("name, check, magic", [
    ("out.tar.gz", "tar -xzOf out.tar.gz", b"\x1f\x8b"),
    ("out.tgz", "tar -xzOf out.tgz", b"\x1f\x8b"),
    ("out.tar.bz2", "tar -xjOf out.tar.bz2", b"BZh"),
    ("out.tar.xz", "tar -xJOf out.tar.xz", b"\xfd7zXZ"),
    ("out.tar.zst", "zstd -dc out.tar.zst | tar -xOf -", b"\x28\xb5\x2f\xfd"),
])
def test_compressed_output_by_name(sh, shard, tmp_path, name, check, magic):
    require(check.split()[0])
    sh(f"tarcat in.tar -o {name}")
    data = (tmp_path / name).read_bytes()
    assert data.startswith(magic)
    assert sh(check).stdout == b"".join(d for _, d in MEMBERS)
    first = data
    sh(f"tarcat in.tar -o {name}")
    assert (tmp_path / name).read_bytes() == first  # deterministic, no time stamps
    assert read_tar(sh(f"tarcat {name}").stdout) == MEMBERS


@pytest.mark.parametrize("prog", ["gzip", "zstd"])
def test_damaged_compressed_input(sh, shard, tmp_path, prog):
    sh(f"{prog} -c < in.tar > in.z")
    data = (tmp_path / "in.z").read_bytes()
    p = sh("tarcat > out.tar", input=data[: len(data) // 2], ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and err.startswith("tarcat: "), err
    assert "Traceback" not in err


# ------------------------------------------------------------ pipe:


def test_pipe_input_and_output(sh, shard, tmp_path):
    assert read_tar(sh("tarcat 'pipe:cat in.tar'").stdout) == MEMBERS
    assert read_tar(sh("tarcat 'pipe:gzip -c in.tar'").stdout) == MEMBERS
    sh("tarcat in.tar -o 'pipe:gzip -c > piped.tar.gz'")
    assert read_tar((tmp_path / "piped.tar.gz").read_bytes()) == MEMBERS


def test_failing_pipe_input_names_the_url(sh, shard):
    p = sh("tarcat 'pipe:cat in.tar; exit 3' > out.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "pipe:cat in.tar; exit 3" in err and "3" in err
    p = sh("tarcat 'pipe:cat nothere.tar' > out.tar", ok=False)
    assert p.returncode == 2 and "nothere.tar" in p.stderr.decode()


def test_failing_pipe_output_is_an_error(sh, shard):
    p = sh("tarcat in.tar -o 'pipe:cat > /dev/null; exit 4'", ok=False)
    assert p.returncode == 1 and "exit status 4" in p.stderr.decode()


# ------------------------------------------------------------ HTTP


@pytest.fixture
def http_server(tmp_path):
    require("curl")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port),
                             "--directory", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


def test_http_input(sh, shard, http_server):
    assert read_tar(sh(f"tarcat {http_server}/in.tar").stdout) == MEMBERS
    sh("gzip -c in.tar > in.tgz && cp in.tar part-1.tar")
    assert read_tar(sh(f"tarcat {http_server}/in.tgz").stdout) == MEMBERS
    out = sh(f"tarcat '{http_server}/{{in,part-1}}.tar'").stdout
    assert read_tar(out) == MEMBERS + MEMBERS


def test_http_404_is_an_error_naming_the_url_never_an_empty_shard(sh, shard, tmp_path, http_server):
    url = f"{http_server}/missing.tar"
    p = sh(f"tarcat {url} -o out.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and url in err and "404" in err, err
    assert not (tmp_path / "out.tar").exists()
    p = sh(f"tarcat in.tar {url} > out.tar", ok=False)  # after a good shard
    assert p.returncode == 2 and url in p.stderr.decode()


# ------------------------------------------------------------ S3


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A local moto S3 server and the environment the aws CLI needs."""
    server = os.path.join(VENV_BIN, "moto_server")
    assert os.path.exists(server), "moto[server] is a test dependency"
    require(os.path.join(VENV_BIN, "aws"))
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "log", "wb")
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    }
    try:
        wait_for(env["AWS_ENDPOINT_URL"])
        subprocess.run(["aws", "s3", "mb", "s3://tarproc-test"], env={**os.environ, **env}, check=True,
                       capture_output=True, timeout=120)
        yield env
    finally:
        proc.terminate()
        proc.wait()
        log.close()


def test_s3_write_and_read(sh, shard, s3):
    sh("tarcat in.tar -o s3://tarproc-test/dir/a.tar.gz", env=s3)
    # the real aws CLI sees a gzip-compressed tar under that key
    data = sh("aws s3 cp s3://tarproc-test/dir/a.tar.gz - | gzip -dc", env=s3).stdout
    assert read_tar(data) == MEMBERS
    out = sh("tarcat -c 1 s3://tarproc-test/dir/a.tar.gz", env=s3).stdout
    assert read_tar(out) == MEMBERS[:2]


def test_s3_missing_object_and_bucket(sh, shard, tmp_path, s3):
    url = "s3://tarproc-test/missing.tar"
    p = sh(f"tarcat {url} -o out.tar", env=s3, ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and url in err, err
    assert not (tmp_path / "out.tar").exists()
    p = sh("tarcat in.tar -o s3://no-such-bucket-here/x.tar", env=s3, ok=False)
    assert p.returncode == 1 and "s3://no-such-bucket-here/x.tar" in p.stderr.decode()


# ------------------------------------------------------------ command overrides


def test_env_overrides_read_and_write_commands(sh, shard, tmp_path):
    env = {
        "TARPROC_READ_GS": 'f={url}; cat "${f##*/}"',
        "TARPROC_WRITE_GS": 'f={url}; cat > "uploaded-${f##*/}"',
        "TARPROC_READ_MEM": 'f={url}; cat "${f#mem://}"',
    }
    assert read_tar(sh("tarcat gs://bucket/in.tar", env=env).stdout) == MEMBERS
    sh("tarcat in.tar -o gs://bucket/out.tar", env=env)
    assert read_tar((tmp_path / "uploaded-out.tar").read_bytes()) == MEMBERS
    assert read_tar(sh("tarcat mem://in.tar", env=env).stdout) == MEMBERS  # a scheme of one's own
    p = sh("tarcat nosuch://x/y.tar", ok=False)
    assert p.returncode == 2 and "unknown URL scheme" in p.stderr.decode()


def test_reader_command_missing_is_an_error_naming_the_url(sh):
    env = {"TARPROC_READ_GS": "no-such-gsutil-here cat {url}"}
    p = sh("tarcat gs://bucket/x.tar > out.tar", env=env, ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "gs://bucket/x.tar" in err


# ------------------------------------------------------------ atomic outputs


def test_file_output_appears_only_when_complete(tmp_path):
    data = tar_bytes(MEMBERS)
    p = subprocess.Popen(["tarcat", "-o", "out.tar"], cwd=tmp_path, stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        p.stdin.write(data[:2048])
        p.stdin.flush()
        wait_for_partial(tmp_path, p.pid)
        assert not (tmp_path / "out.tar").exists()
        p.stdin.write(data[2048:])
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    finally:
        p.kill()
        p.wait()
    assert os.listdir(tmp_path) == ["out.tar"]
    assert read_tar((tmp_path / "out.tar").read_bytes()) == MEMBERS


def test_sigterm_leaves_no_output(tmp_path):
    p = subprocess.Popen(["tarcat", "-o", "out.tar"], cwd=tmp_path, stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdin.write(tar_bytes(MEMBERS)[:2048])
    p.stdin.flush()
    wait_for_partial(tmp_path, p.pid)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 143
    p.stdin.close()
    assert os.listdir(tmp_path) == []


def test_leftovers_of_dead_writers_are_cleaned(sh, shard, tmp_path):
    import fcntl

    from tarproc.runtime.lease import host_id

    # liveness is the writer's lock, never the PID in the name (issue 13.7)
    dead = tmp_path / f".out.tar.{host_id()}-000000.{os.getpid()}.tarproc-partial"
    alive = tmp_path / f".out.tar.{host_id()}-000001.999999999.tarproc-partial"
    other = tmp_path / f".other.tar.{host_id()}-000000.999999999.tarproc-partial"
    for f in (dead, alive, other):
        f.write_bytes(b"junk")
    with open(alive, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        sh("tarcat in.tar -o out.tar")
        assert not dead.exists() and alive.exists() and other.exists()
    assert read_tar((tmp_path / "out.tar").read_bytes()) == MEMBERS


def test_special_file_outputs_are_written_in_place(sh, shard, tmp_path):
    sh("mkfifo fifo && { cat fifo > got.tar & } && tarcat in.tar -o fifo && wait")
    assert (tmp_path / "fifo").is_fifo()
    assert read_tar((tmp_path / "got.tar").read_bytes()) == MEMBERS
    sh("tarcat in.tar -o /dev/null")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_missing_output_directory(sh, shard):
    p = sh("tarcat in.tar -o nodir/out.tar", ok=False)  # (a usage line and the error: docs/commit.md)
    assert p.returncode == 2 and "directory nodir does not exist" in p.stderr.decode().splitlines()[-1]


def wait_for_partial(tmp_path, pid, name="out.tar"):
    """Wait until a writer's temporary file exists; return its path."""
    deadline = time.monotonic() + 60
    while True:
        found = list(tmp_path.glob(f".{name}.*.{pid}.tarproc-partial"))
        if found:
            return found[0]
        assert time.monotonic() < deadline
        time.sleep(0.05)


def small_tar(n=4, ext="png"):
    return tar_bytes([m for i in range(n) for m in ((f"s{i}.{ext}", png_bytes(4, 4, seed=i)),
                                                    (f"s{i}.cls", str(i).encode()))])


@pytest.mark.parametrize("name", ["out.tar.lz4", "out.tar.Z", "out.tar.lzma", "out.tar.lz", "out.tar.br",
                                  "out.zip"])
def test_unwritable_compression_suffix_is_refused(sh, tmp_path, name):
    (tmp_path / "in.tar").write_bytes(small_tar())
    p = sh(f"tarcat in.tar -o {name}", ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and b"cannot write" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.tar"]  # nothing written, no leftovers
    p = sh(f"tarsplit -n 2 -o 'part-%02d{name[3:]}' in.tar", ok=False)
    assert p.returncode == 2 and b"cannot write" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.tar"]


def test_tar_zstd_suffix_is_honoured_as_zstd(sh, tmp_path):
    from conftest import require

    require("zstd")
    (tmp_path / "in.tar").write_bytes(small_tar())
    sh("tarcat in.tar -o out.tar.zstd")
    assert (tmp_path / "out.tar.zstd").read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    plain = sh("zstd -dc out.tar.zstd").stdout
    assert sorted(read_tar(plain)) == sorted(read_tar(small_tar()))
