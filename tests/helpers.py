"""Test-data makers and independent readers, shared by the test modules."""

import io
import os
import random
import signal
import subprocess
import tarfile
import time


def tar_bytes(members, format=tarfile.USTAR_FORMAT):
    """A tar archive made by Python's tarfile from ``[(name, bytes), ...]``;
    names may hold lone surrogates (written as the raw bytes they stand for)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=format, encoding="utf-8", errors="surrogateescape") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1600000000
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def read_tar(data):
    """``[(name, bytes)]`` of the regular files in a tar, read by tarfile."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
        for info in tf:
            if info.isfile():
                out.append((info.name, tf.extractfile(info).read()))
    return out


def samples_of(data):
    """Group a tar's members (read by tarfile) into ``{key: {field: bytes}}``
    with the WebDataset key rule, in order."""
    out = {}
    for name, body in read_tar(data):
        slash = name.rfind("/")
        dot = name.find(".", slash + 1)
        out.setdefault(name[:dot], {})[name[dot + 1 :]] = body
    return out


def png_bytes(width=32, height=24, seed=0, mode="RGB"):
    """A small real PNG image made by Pillow."""
    from PIL import Image

    r = random.Random(seed)
    img = Image.new(mode, (width, height))
    img.putdata([tuple(r.randrange(256) for _ in range(len(mode))) if len(mode) > 1 else r.randrange(256)
                 for _ in range(width * height)])
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def jpeg_bytes(width=32, height=24, seed=0):
    from PIL import Image

    r = random.Random(seed)
    img = Image.new("RGB", (width, height), tuple(r.randrange(256) for _ in range(3)))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


def image_shard(n=10, ext="png", prefix=""):
    """Members of a shard of ``n`` samples: an image and a class label each."""
    members = []
    for i in range(n):
        key = f"{prefix}{i:04d}"
        img = png_bytes(seed=i) if ext == "png" else jpeg_bytes(seed=i)
        members.append((f"{key}.{ext}", img))
        members.append((f"{key}.cls", str(i % 3).encode()))
    return members


def kubernetes_expand(text, env):
    """What Kubernetes does to a container's command, args and env values
    (documented for EnvVar.value and Container.args): `$$` becomes `$`,
    `$(NAME)` becomes NAME's value when it is defined, anything else stays."""
    import re

    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        m = re.match(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", text[i:])
        if m and m.group(1) in env:
            out.append(env[m.group(1)])
            i += m.end()
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


# ---------------------------------------------------------------- processes a test starts and must see end

from make_corpus import processes_with  # noqa: F401  (tests/hostile, on sys.path by conftest)


def one_line(p):
    err = p.stderr.decode(errors="replace")
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def unique_sleep():
    """A `sleep` command line no other test runs: `sleep 7<digits>` (seconds)."""
    return f"sleep 7{time.time_ns() % 10**9:09d}"


def wait_for(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


def kill_left(words):
    for pid in processes_with(words):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


MEASURE = ("import resource, subprocess, sys\n"
            "p = subprocess.run(['bash', '-o', 'pipefail', '-c', sys.argv[1]])\n"
            "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "open(sys.argv[2], 'w').write(f'{u.ru_utime + u.ru_stime} {u.ru_maxrss}')\n"
            "sys.exit(p.returncode)\n")


def run_measured(cmd, cwd, env=None, input=None, timeout=120):
    """Run a bash command; returns (CompletedProcess, CPU seconds, max RSS in
    MB) of the command and the pipeline around it (measured in a fresh
    process, so earlier tests do not count)."""
    import subprocess
    import sys
    import tempfile

    full = dict(os.environ, **(env or {}))
    with tempfile.NamedTemporaryFile("r", suffix=".usage") as usage:
        p = subprocess.run([sys.executable, "-c", MEASURE, cmd, usage.name], cwd=cwd, env=full, input=input,
                           capture_output=True, timeout=timeout)
        cpu, rss = usage.read().split()
    return p, float(cpu), int(rss) / 1024


def tar_of(members):
    """A plain ustar archive (mtime 0, owner 0) of ``[(name, bytes), ...]``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def text_shard(n, prefix="s"):
    """``n`` samples, each one ``PREFIXnnn.txt``."""
    return tar_of([(f"{prefix}{i:03d}.txt", f"text {prefix} {i}\n".encode()) for i in range(n)])


def _default_signals():
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def signalled(argv, cwd, marker, sig, started):
    """Start ``argv``, wait until ``started()`` (it is mid-run, its input
    command alive), send ``sig``; return the exit status."""
    # the default dispositions of a terminal's job: a test run under nohup (or in the background of a
    # script, which ignores SIGINT) must not hand its SIG_IGN on to the command
    proc = subprocess.Popen(argv, cwd=cwd, stderr=subprocess.PIPE, preexec_fn=_default_signals)
    try:
        assert wait_for(lambda: started() and processes_with(marker)), proc.stderr.read1() if proc.poll() else ""
        proc.send_signal(sig)
        return proc.wait(30), proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_left(marker)


def run_pipefail(cmd, cwd, input=None, env=None, timeout=60):
    """Run a bash command (``pipefail`` set) in ``cwd``, its output captured;
    ``env`` adds to the environment."""
    import subprocess

    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, input=input, capture_output=True,
                          timeout=timeout, env=full_env)


def prefixed_shard(n, prefix="s", size=0):
    """``n`` samples ``PREFIXnnnnn`` of a ``txt`` (``size`` more bytes) and a ``cls`` field."""
    members = []
    for i in range(n):
        members += [(f"{prefix}{i:05d}.txt", b"%s %d " % (prefix.encode(), i) + b"x" * size),
                    (f"{prefix}{i:05d}.cls", b"%d" % (i % 7))]
    return tar_bytes(members)
