"""Where the gap between ``tarproc -c`` and ``xargs`` goes (issue 18): CPU
spent, or CPU left idle.

    .venv/bin/python bench/proc_idle.py [-n 2000] [--runs 7] [-w DIR] [--sched]

``seq N | xargs -P2 -n1 bash -c true`` and ``tarproc -p 2 -w DIR -c true``
on an N-sample shard run in turns.  For each, the whole machine's user,
system and idle CPU-seconds come from ``/proc/stat`` around the run (so the
commands' CPU is included, and other load on the machine shows up too:
run it on an idle machine).  On a machine with as many cores as ``-p``, a
gap made of idle time is a scheduling gap (a command that could run is
waiting, or nothing is runnable), a gap made of user+system time is work.

``--sched`` then records one run of each with ``perf sched record`` (perf
must be installed and allowed to trace) and prints, per kind of task, the
summed scheduling delay: how long tasks that could run waited for a CPU."""

import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from common import OUT  # noqa: E402
from bench_proc import make_shard  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_times():
    """user (with nice), system, idle CPU-seconds of the machine so far."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1]) / TICK, v[2] / TICK, (v[3] + v[4]) / TICK


def commands(n, shard, workdir):
    return {
        "xargs -P2 bash -c true": ["bash", "-c", f"seq {n} | xargs -P2 -n1 bash -c true"],
        f"tarproc -p 2 -w {workdir} -c true": [os.path.join(VENV_BIN, "tarproc"), "-p", "2", "-w", workdir,
                                               "-c", "true", shard],
    }


def measure(cmds, runs):
    res = {k: [] for k in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            a = cpu_times()
            t = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
            wall = time.perf_counter() - t
            b = cpu_times()
            res[name].append((wall, *(y - x for x, y in zip(a, b))))
    return res


def sched_delays(argv):
    """{task kind: (summed scheduling delay ms, switches)} from one run under perf sched."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "sched.data")
        subprocess.run(["perf", "sched", "record", "-o", data, "--", *argv], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        out = subprocess.run(["perf", "sched", "timehist", "-i", data], capture_output=True, text=True,
                             check=True).stdout
    main_pid = None
    kinds = collections.defaultdict(lambda: [0.0, 0])
    for line in out.splitlines():
        p = line.split()
        if len(p) < 6 or not p[1].startswith("["):
            continue
        try:
            delay = float(p[-2])
        except ValueError:
            continue
        m = re.match(r"([^\[]+)\[(\d+)(?:/(\d+))?\]", p[2])
        if not m:
            continue
        comm, pid = m.group(1), m.group(3) or m.group(2)
        if comm in ("tarproc", "xargs") and main_pid is None:
            main_pid = pid
        if comm == "<idle>":
            continue
        if pid == main_pid:
            kind = f"{comm} (its threads)"
        elif comm in ("tarproc", "xargs"):
            kind = "a command before its exec"
        elif comm == "bash":
            kind = "the commands (bash)"
        else:
            kind = "other (kernel threads, ...)"
        kinds[kind][0] += delay
        kinds[kind][1] += 1
    return kinds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("-w", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir(),
                    help="tarproc's working directory base (default /dev/shm)")
    ap.add_argument("--sched", action="store_true", help="also record scheduling delays with perf sched")
    a = ap.parse_args()
    data = os.path.join(OUT, "proc")
    os.makedirs(data, exist_ok=True)
    shard = os.path.join(data, f"s{a.n}.tar")
    make_shard(shard, a.n)
    cmds = commands(a.n, shard, a.w)
    res = measure(cmds, a.runs)
    print(f"{a.n} samples, {a.runs} runs in turns, {os.cpu_count()} CPUs; medians; CPU-seconds of the whole machine")
    print()
    print("| command | wall s | ratio | user | system | idle | runs (wall s) |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for name, rows in res.items():
        wall, user, system, idle = (statistics.median(c) for c in zip(*rows))
        base = base or wall
        print(f"| {name} | {wall:.2f} | {wall / base:.2f}x | {user:.2f} | {system:.2f} | {idle:.2f} | "
              f"{' '.join(f'{r[0]:.2f}' for r in rows)} |")
    if a.sched:
        if shutil.which("perf") is None:
            print("\n(--sched: perf is not installed)")
            return
        print()
        print("| command | task | scheduling delay ms | times scheduled |")
        print("|---|---|---|---|")
        for name, argv in cmds.items():
            try:
                kinds = sched_delays(argv)
            except (subprocess.CalledProcessError, OSError) as e:
                print(f"| {name} | (perf sched failed: {e}) | | |")
                continue
            for kind, (delay, count) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
                print(f"| {name} | {kind} | {delay:.0f} | {count} |")


if __name__ == "__main__":
    main()
