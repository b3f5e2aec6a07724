"""Timing helpers for the benchmarks: whole commands, in turns, with peak memory.

Every figure is measured in the same run as its baselines (cat, GNU tar,
webdataset), because the machines' pipes and page cache vary run to run."""

import http.server
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
DATA = os.environ.get("TARPROC_BENCH_DATA", os.path.join(OUT, "data"))
GNU_TIME = "/usr/bin/time"
_TIME_OUT = os.path.join(OUT, f".time-{os.getpid()}.txt")


#: The venv's interpreter and its commands (the benches run as `.venv/bin/python bench/X.py`).
BIN = os.path.dirname(sys.executable)
PY = sys.executable


def use_venv():
    """The venv's commands first on PATH, and byte code kept: some sandboxes
    set PYTHONDONTWRITEBYTECODE, which would make every run recompile
    tarproc (~10 ms a start)."""
    os.environ["PATH"] = BIN + os.pathsep + os.environ.get("PATH", "")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def warm(*paths):
    """Read inputs once, untimed: the page cache drops idle pages quickly."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def run_once(cmd, env=None):
    """Run a bash command; returns (seconds, peak RSS in MB of its largest process)."""
    # A child exec'd from this Python process inherits its peak RSS (Linux
    # keeps the pre-exec high-water mark), so every command would show
    # ~30 MB; GNU time forks from a small process and reports the real peak.
    argv = ["bash", "-o", "pipefail", "-c", cmd]
    if os.path.exists(GNU_TIME):
        argv = [GNU_TIME, "-q", "-f", "%M", "-o", _TIME_OUT] + argv
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t0
    if argv[0] == GNU_TIME:
        with open(_TIME_OUT) as f:
            usage = type("U", (), {"ru_maxrss": int(f.read().split()[-1])})
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{cmd!r} exited {code}: {err}")
    return dt, usage.ru_maxrss / 1024


def compare(cmds, repeat=3, warm_paths=()):
    """Time several commands in turns (a, b, c, a, b, c, ...); returns
    ``{name: {"median": s, "runs": [...], "peak_mb": mb, "cpu": s}}``
    (``cpu``: the median user + system seconds of the command's processes)."""
    import resource

    results = {name: {"runs": [], "peak_mb": 0.0, "cpus": []} for name in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            warm(*warm_paths)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            dt, mb = run_once(cmd)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            results[name]["runs"].append(dt)
            results[name]["cpus"].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            results[name]["peak_mb"] = max(results[name]["peak_mb"], mb)
    for r in results.values():
        r["median"] = statistics.median(r["runs"])
        r["cpu"] = statistics.median(r["cpus"])
    return results


def save(name, payload):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(payload, f, indent=2)


def table(rows, header):
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """A local server's handler that answers ``Range: bytes=A-B`` with 206
    (``python -m http.server`` ignores Range): ``lambda *a:
    RangeHandler(*a, directory=D)`` for ``http.server.ThreadingHTTPServer``."""

    protocol_version = "HTTP/1.1"  # connections kept alive (curl's ds[i] opens one per sample anyway)
    disable_nagle_algorithm = True  # as real servers do (else a kept-alive answer waits for a delayed ACK)

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = self.translate_path(self.path)
        size = os.path.getsize(path)
        a, b = (int(x) for x in self.headers["Range"].split("=", 1)[1].split("-"))
        with open(path, "rb") as f:
            f.seek(a)
            body = f.read(b - a + 1)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
