"""Remote outputs: spool locally then upload vs stream to a temporary object
then move it server-side, on one generated shard, against a local moto S3
server with the real aws CLI.  Prints wall seconds and peak local disk.

    .venv/bin/python bench/commit_remote.py [--size 1GB]

The two strategies are what ``TARPROC_REMOTE_COMMIT=spool`` (default) and
``=move`` do; ``aws s3 cp FILE`` and ``cat FILE | aws s3 cp -`` are the
client alone, for reference.  Runs alternate (A B A B) in one process.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.path.dirname(sys.executable)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1GB")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--move-timeout", type=int, default=900)
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tarproc.core.units import parse_size

    size = parse_size(a.size)
    work = tempfile.mkdtemp(prefix="bench-commit-")
    port = free_port()
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"],
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/nonexistent",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "TARPROC_SPOOL_DIR": work}
    moto = subprocess.Popen([os.path.join(BIN, "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(env["AWS_ENDPOINT_URL"], timeout=2).close()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.1)
        subprocess.run(["aws", "s3", "mb", "s3://bench"], env=env, check=True, capture_output=True)
        shard = os.path.join(work, "big.tar")
        subprocess.run([sys.executable, "-c", f"""
import os, tarfile, io
with open({shard!r}, 'wb') as f:
    n = 0; i = 0
    while n < {size}:
        data = os.urandom(1 << 20)
        ti = tarfile.TarInfo(f'{{i:06d}}.bin'); ti.size = len(data)
        f.write(ti.tobuf(tarfile.USTAR_FORMAT)); f.write(data); n += 512 + len(data); i += 1
    f.write(b'\\0' * 1024)
"""], check=True)
        nbytes = os.path.getsize(shard)
        subprocess.run(["cat", shard], stdout=subprocess.DEVNULL, check=True)
        print(f"shard: {nbytes / 1e9:.2f} GB; "
              f"{subprocess.run(['aws', '--version'], capture_output=True, text=True).stdout.strip() or 'aws'}",
              flush=True)

        def timed(name, argv, extra=None, timeout=1800):
            t0 = time.monotonic()
            try:
                p = subprocess.run(argv, env={**env, **(extra or {})}, capture_output=True, timeout=timeout)
                ok = "ok" if p.returncode == 0 else f"FAILED (exit {p.returncode}: {p.stderr.decode().strip()[-200:]})"
            except subprocess.TimeoutExpired:
                ok = f"TIMED OUT after {timeout} s"
            t = time.monotonic() - t0
            print(f"{name:58s} {t:7.1f} s  {nbytes / t / 1e6:6.0f} MB/s  {ok}", flush=True)
            return t

        def clean():
            subprocess.run(["aws", "s3", "rm", "--recursive", "--quiet", "s3://bench/"], env=env)

        for _ in range(a.rounds):
            timed("spool: tarcat -o s3:// (default)", ["tarcat", shard, "-o", "s3://bench/spool.tar"],
                  {"TARPROC_REMOTE_COMMIT": "spool"})
            clean()
            timed("  its upload alone: aws s3 cp FILE s3://", ["aws", "s3", "cp", "--quiet", shard, "s3://bench/ref.tar"])
            clean()
            timed("move, phase 1: cat FILE | aws s3 cp - s3://tmp",
                  ["sh", "-c", f"cat {shard} | aws s3 cp - s3://bench/.tmp.tar"])
            timed("move, phase 2: aws s3 mv s3://tmp s3://final",
                  ["aws", "s3", "mv", "--quiet", "s3://bench/.tmp.tar", "s3://bench/final.tar"], timeout=a.move_timeout)
            clean()
    finally:
        moto.terminate()
        moto.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
