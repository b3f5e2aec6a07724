"""The typer layer of every command: shell completion (bash, zsh, fish),
short usage errors, values checked at parse time, and docs that list every
option of ``--help``."""

import os
import re
import subprocess

import pytest
from conftest import ROOT, require
from test_contract import BUILT, ENTRY_POINTS

DOC_OF = {"tarcats": "tarcat", "tarscat": "tarcat", "tsv2tar": "tarcreate"}
GENERIC = {"--help", "-h", "--install-completion", "--show-completion"}  # typer's own, in README.md


def _run(cmd, env=None, **kw):
    return subprocess.run(["bash", "-c", cmd], capture_output=True, env=dict(os.environ, **(env or {})),
                          timeout=60, **kw)


def help_options(name):
    text = _run(f"{name} --help").stdout.decode()
    opts = text.split("\nOptions:\n", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"(?:^|[\s,/])(--?[A-Za-z][\w-]*)", opts)) - GENERIC


@pytest.mark.parametrize("name", BUILT)
def test_docs_list_every_option(name):
    doc = open(os.path.join(ROOT, "docs", DOC_OF.get(name, name) + ".md")).read()
    missing = sorted(o for o in help_options(name) if not re.search(rf"`[^`]*(?<![\w-]){re.escape(o)}(?![\w-])", doc))
    assert missing == [], f"docs/{DOC_OF.get(name, name)}.md does not mention {missing}"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_gives_a_script_the_shell_accepts(shell, tmp_path):
    require(shell)
    p = subprocess.run([shell, "-c", "tarcat --show-completion; true"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    script = p.stdout.decode()
    assert f"_TARCAT_COMPLETE=complete_{shell}" in script
    (tmp_path / "c").write_text(script)
    q = subprocess.run([shell, "-n", str(tmp_path / "c")], capture_output=True, timeout=60)
    assert q.returncode == 0, q.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_answers_options_and_choices(shell):
    def complete(prog, words):
        env = {f"_{prog.upper()}_COMPLETE": f"complete_{shell}", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
               "_TYPER_COMPLETE_ARGS": words, "_TYPER_COMPLETE_FISH_ACTION": "get-args"}
        return _run(prog, env).stdout.decode()

    assert "--count" in complete("tarcat", "tarcat --cou")
    assert "--num-samples" in complete("tarsplit", "tarsplit --num")
    got = complete("tarsort", "tarsort -S ")
    assert all(v in got for v in ("text", "int", "float", "shuffle")), got


def test_bash_completion_end_to_end(tmp_path):
    # the script bash sources, driven as bash drives it on TAB
    # a clean environment: what other tests of the same worker left in it must not choose the shell
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
    env["HOME"] = str(tmp_path)
    # typer takes the shell's name as a value only so; else it guesses it from the process tree, which a
    # test run started without a shell above it (a reparented run, some CI runners) does not have
    env["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"
    p = subprocess.run(["bash", "-c", "tarsplit --show-completion bash"], capture_output=True, env=env, timeout=60)
    script = p.stdout.decode()  # named: not guessed from the parent process
    assert "_tarsplit_completion()" in script, (p.stdout, p.stderr)
    (tmp_path / "c.bash").write_text(script)
    p = subprocess.run(["bash", "-c", f"source {tmp_path}/c.bash; COMP_WORDS=(tarsplit --max); COMP_CWORD=1; "
                        "_tarsplit_completion tarsplit; printf '%s\\n' \"${COMPREPLY[@]}\""],
                       capture_output=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert sorted(p.stdout.decode().split()) == ["--max-bad-shards", "--max-size", "--maxcount", "--maxshards",
                                                 "--maxsize"], (p.stdout, p.stderr)


@pytest.mark.parametrize("name", BUILT)
def test_usage_error_is_short(name, tmp_path):
    p = _run(f"{name} --no-such-flag < /dev/null", cwd=tmp_path)
    err = p.stderr.decode()
    assert p.returncode == 2, err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"Usage: {name} ") and "Traceback" not in err, err
    assert lines[1].startswith(f"{name}: error: No such option: --no-such-flag"), err


@pytest.mark.parametrize("cmd, msg", [
    ("tarcat -c -1", "-1 is negative"),
    ("tarcat -c curl", "-c is the sample count; downloaders are set with TARPROC_READ_*"),
    ("tarcat --skip -3", "-3 is negative"),
    ("tarsplit -n -5", "-5 is negative"),
    ("tarsplit -o -", "tarsplit writes several shards"),
    ("tarsplit -s -1GB", "negative"),
    ("tarpcat -w 0", "must be at least 1"),
    ("tarfirst -n 0", "must be at least 1"),
    ("tarshow --columns 0", "must be at least 1"),
    ("tarproc -p -2 -c true", "-2 is negative"),
    ("tar2tsv --format xml", "'xml' is not one of"),
])
def test_nonsense_values_exit_2_with_the_reason(cmd, msg, tmp_path):
    p = _run(f"{cmd} < /dev/null", cwd=tmp_path)
    err = p.stderr.decode()
    assert p.returncode == 2 and msg in err and len(err.splitlines()) <= 2, err
    assert os.listdir(tmp_path) == []


def test_help_epilog_keeps_example_lines():
    out = _run("tarcat --help").stdout.decode()
    examples = out.split("examples:\n", 1)[1]
    # one example per line, as written (click does not rewrap them)
    assert "    tarcat -c 10 big.tar > small.tar                 # the first 10 samples\n" in examples


def test_progress_bar_and_counter(tmp_path):
    import tarfile, io

    with tarfile.open(tmp_path / "in.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(3000):
            info = tarfile.TarInfo(f"{i:06d}.txt")
            info.size = 1000
            tf.addfile(info, io.BytesIO(b"x" * 1000))
    # a known total (a local file): percent, rate and ETA
    p = _run("python3 -c 'import sys,time\nfor c in iter(lambda: sys.stdin.buffer.read(65536), b\"\"): time.sleep(0.02)'"
             " < <(tarcat --progress in.tar 2> err)", cwd=tmp_path)
    err = (tmp_path / "err").read_bytes().decode()
    assert re.search(r"\rtarcat: +\d+% \[[#-]{20}\] [\d.]+ [kM]?B/[\d.]+ MB [\d.]+ [kM]?B/s, ETA \d:\d\d:\d\d", err), err
    assert err.endswith("\r\x1b[K")  # cleared at the end
    # an unknown total (stdin): a counter
    _run("python3 -c 'import sys,time\nfor c in iter(lambda: sys.stdin.buffer.read(65536), b\"\"): time.sleep(0.02)'"
         " < <(tarcat --progress < in.tar 2> err)", cwd=tmp_path)
    err = (tmp_path / "err").read_bytes().decode()
    assert re.search(r"\rtarcat: [\d,]+ samples, [\d,.]+ samples/s, \d:\d\d:\d\d", err), err
    # stderr not a terminal and no --progress: nothing
    assert _run("tarcat in.tar > /dev/null", cwd=tmp_path).stderr == b""


@pytest.mark.parametrize("cmd", ["tarshow", "tarsplit -n 1", "tar2tsv", "tarfirst", "tarcheck", "tarcat -o o.tar",
                                 "tarsort -o o.tar", "tarpcat -o o.tar", "tarproc -c true -o o.tar"])
def test_no_input_on_a_terminal_is_refused(cmd, tmp_path):
    require("script")
    # script(1) gives the command a terminal as stdin
    p = _run(f"script -qec '{cmd}' /dev/null < /dev/null", cwd=tmp_path, env={"TERM": "dumb"})
    out = p.stdout.decode().replace("\r", "")
    assert p.returncode == 2, out
    assert "from stdin, which is a terminal: give a file or URL, or pipe one in" in out, out


def test_tarcreate_says_it_reads_the_plan_from_a_terminal(tmp_path):
    p = _run("script -qec 'tarcreate -o out.tar' /dev/null < /dev/null", cwd=tmp_path, env={"TERM": "dumb"})
    assert "tarcreate: reading the plan from the terminal (end with Ctrl-D" in p.stdout.decode(), p.stdout
