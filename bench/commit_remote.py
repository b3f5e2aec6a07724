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
    ap.add_argument("--rounds", type=int, default=2)
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
        runs = {
            "spool (tarcat, default)": (["tarcat", shard, "-o", "s3://bench/spool.tar"], {"TARPROC_REMOTE_COMMIT": "spool"}),
            "move (tarcat, TARPROC_REMOTE_COMMIT=move)": (["tarcat", shard, "-o", "s3://bench/move.tar"], {"TARPROC_REMOTE_COMMIT": "move"}),
            "aws s3 cp FILE (client alone)": (["aws", "s3", "cp", "--quiet", shard, "s3://bench/ref.tar"], {}),
            "cat FILE | aws s3 cp - (client alone)": (["sh", "-c", f"cat {shard} | aws s3 cp - s3://bench/ref2.tar"], {}),
        }
        times = {k: [] for k in runs}
        for _ in range(a.rounds):
            for name, (argv, extra) in runs.items():
                t0 = time.monotonic()
                subprocess.run(argv, env={**env, **extra}, check=True)
                times[name].append(time.monotonic() - t0)
                subprocess.run(["aws", "s3", "rm", "--recursive", "--quiet", "s3://bench/"], env=env, check=True)
        print(f"shard: {nbytes / 1e9:.2f} GB, moto {subprocess.run([os.path.join(BIN, 'python'), '-c', 'import moto; print(moto.__version__)'], capture_output=True, text=True).stdout.strip()}, "
              f"{subprocess.run(['aws', '--version'], capture_output=True, text=True).stdout.strip() or 'aws'}")
        for name, ts in times.items():
            print(f"{name:45s} " + " ".join(f"{t:6.1f} s" for t in ts) + f"   best {nbytes / min(ts) / 1e6:6.0f} MB/s")
    finally:
        moto.terminate()
        moto.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
