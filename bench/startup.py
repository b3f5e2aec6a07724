#!/usr/bin/env python3
"""Start-up cost of a command on typer, and why typer is held to 0.27.x.

    .venv/bin/python bench/startup.py [--quick]

Median wall time (in turns) of ``tarcat --help``, ``tarcat < /dev/null``,
``python -c pass``, a one-option argparse script, the same script on the
project's typer (0.27.x, no pydantic) and on the newest typer (0.28+ imports
pydantic), and what importing ``rich.progress`` would add (the commands never
import rich: click's plain help, our own progress line).  The newest typer is
installed into a throwaway venv under ``bench/out`` (never into the project).
A pipeline of five tools pays five start-ups; the target is
``tarcat < /dev/null`` <= 100 ms.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402

BIN = os.path.dirname(sys.executable)
os.environ["PATH"] = BIN + os.pathsep + os.environ.get("PATH", "")
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # byte code cached, as in a normal install

ARGPARSE_ONE = '''import argparse
p = argparse.ArgumentParser()
p.add_argument("--name", default="x")
print(p.parse_args().name)
'''

TYPER_ONE = '''import typer
def main(name: str = "x"):
    print(name)
if __name__ == "__main__":
    typer.run(main)
'''

RICH = "import rich.progress"

# Where tarcat's start-up goes beyond typer, in one process: import typer, the
# tarproc modules tarcat imports, building the click command, and the run.
PHASES = '''import time; t0 = time.perf_counter()
import typer
t1 = time.perf_counter()
from tarproc.cli.tarcat import tarcat_command
t2 = time.perf_counter()
from typer.main import get_command
c = get_command(tarcat_command.app)
t3 = time.perf_counter()
c.main([], prog_name="tarcat", standalone_mode=False)
t4 = time.perf_counter()
import sys; print(t1 - t0, t2 - t1, t3 - t2, t4 - t3, file=sys.stderr)
'''


def phases(py, repeat):
    """Median ms of each phase of PHASES (stdin: /dev/null)."""
    import statistics

    runs = []
    for _ in range(repeat):
        out = subprocess.run([py, "-c", PHASES], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True)
        runs.append([float(x) * 1000 for x in out.stderr.split()[-4:]])
    return [statistics.median(r[i] for r in runs) for i in range(4)]


def typer_venv(d):
    """A throwaway venv with typer; returns (python, typer version)."""
    py = os.path.join(d, "bin", "python")
    if not os.path.exists(os.path.join(d, ".ok")):
        print(f"creating {d} with typer ...", file=sys.stderr)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", d], check=True)
        pip = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "typer"],
                             stderr=subprocess.PIPE, text=True)
        sys.stderr.write("".join(l for l in pip.stderr.splitlines(True) if not l.startswith("WARNING: Location")))
        if pip.returncode:
            raise SystemExit("pip install typer failed")
        open(os.path.join(d, ".ok"), "w").close()
    v = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('typer'))"],
                       capture_output=True, text=True, check=True).stdout.strip()
    return py, v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 runs each: a smoke test")
    args = ap.parse_args()
    repeat = 5 if args.quick else 31
    d = os.path.join(common.OUT, "startup")
    os.makedirs(d, exist_ok=True)
    empty = os.path.join(d, "empty.tar")
    with open(empty, "wb") as f:
        f.write(bytes(1024))
    for name, text in (("argparse_one.py", ARGPARSE_ONE), ("typer_one.py", TYPER_ONE)):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    tpy, tver = typer_venv(os.path.join(d, "typer-venv"))
    py = sys.executable
    cmds = {
        "tarcat --help": "tarcat --help > /dev/null",
        "tarcat < empty.tar": f"tarcat < {empty} > /dev/null",
        "tarcat < /dev/null": "tarcat < /dev/null > /dev/null",
        "tarsplit --help": "tarsplit --help > /dev/null",
        "kujob --help": "kujob --help > /dev/null",
        "python -c pass (project venv)": f"{py} -c pass",
        "python -c 'import typer' (project venv)": f"{py} -c 'import typer'",
        "argparse one-option script (project venv)": f"{py} {d}/argparse_one.py --name a",
        "typer 0.27 one-option script (project venv)": f"{py} {d}/typer_one.py --name a",
        "python -c 'import rich.progress' (project venv)": f"{py} -c '{RICH}'",
        "python -c pass (plain venv)": f"{tpy} -c pass",
        "argparse one-option script (plain venv)": f"{tpy} {d}/argparse_one.py --name a",
        f"typer {tver} one-option script (plain venv)": f"{tpy} {d}/typer_one.py --name a",
    }
    for cmd in cmds.values():  # untimed: byte code compiled and cached
        common.run_once(cmd)
    res = common.compare(cmds, repeat=repeat)
    base = res["python -c pass (plain venv)"]["median"]
    rows = [[name, f"{r['median'] * 1000:.0f}", f"+{(r['median'] - base) * 1000:.0f}"] for name, r in res.items()]
    print("## startup: median start-up of a command" + (" (--quick: smoke run)" if args.quick else ""))
    print()
    print(common.table(rows, ["command", "median ms", "over a bare interpreter (ms)"]))
    over = (res["tarcat < /dev/null"]["median"] - res["python -c 'import typer' (project venv)"]["median"]) * 1000
    print()
    print(common.table([["`tarcat < /dev/null` - `python -c 'import typer'`", f"{over:.0f} ms", "<= 30 ms",
                         "met" if over <= 30 else "**missed**"]], ["target", "measured", "goal", ""]))
    ph = phases(py, repeat)
    print()
    print(f"Where it goes, in one process (median of {repeat}, ms; load average {os.getloadavg()[0]:.1f}):")
    print()
    print(common.table([["import typer", f"{ph[0]:.1f}"],
                        ["import tarproc.cli.tarcat (the tarproc modules beyond typer)", f"{ph[1]:.1f}"],
                        ["build the click command (typer.main.get_command)", f"{ph[2]:.1f}"],
                        ["parse and run on empty input", f"{ph[3]:.1f}"]], ["phase", "ms"]))
    common.save("startup" + ("_quick" if args.quick else ""), res)


if __name__ == "__main__":
    main()
