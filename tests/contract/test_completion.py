"""Shell completion for every command at once (`make completion`, or
`python -m tarproc.cli.completion SHELL`), checked in real bash, zsh and
fish with a fresh HOME."""

import os
import subprocess

import pytest
from conftest import require

from conftest import ROOT
VENV_BIN = os.path.join(ROOT, ".venv", "bin")


def commands():
    from tarproc.cli.completion import commands as names

    return names()


def env_for(home):
    env = dict(os.environ, HOME=str(home))
    env["PATH"] = VENV_BIN + os.pathsep + env["PATH"]  # ahead of Debian's /usr/sbin/tarcat
    env.pop("COLUMNS", None)
    return env


def test_every_command_is_listed():
    names = commands()
    assert {"tarcat", "tarcats", "tarscat", "tarproc", "kujob", "tarserve", "tar2json", "tsv2tar"} <= set(names)
    assert len(names) == 21


def test_make_completion_installs_all_for_bash(tmp_path):
    require("bash")
    env = env_for(tmp_path)
    p = subprocess.run(["make", "-s", "-C", ROOT, "completion", "FOR=bash"], env=env, capture_output=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert b"bash completion installed for 21 commands" in p.stderr
    scripts = sorted(os.listdir(tmp_path / ".bash_completions"))
    assert scripts == sorted(f"{name}.sh" for name in commands())
    rc = (tmp_path / ".bashrc").read_text()
    subprocess.run(["make", "-s", "-C", ROOT, "completion", "FOR=bash"], env=env, capture_output=True, timeout=120)
    assert (tmp_path / ".bashrc").read_text() == rc  # a second run changes nothing
    # what an interactive bash offers after reading ~/.bashrc
    for line, want in (("tarcat --sk", "--skip"), ("tarproc --sl", "--slice"), ("kujob --retry-a", "--retry-all"),
                       ("tarsort --sortt", "--sorttype")):
        words = line.split()
        script = (f"source ~/.bashrc; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
                  f"_{words[0]}_completion {words[0]}; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
        out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, timeout=60)
        assert want in out.stdout.decode().split(), (line, out.stdout, out.stderr)


def test_fish_completes_every_command(tmp_path):
    require("fish")
    env = env_for(tmp_path)
    p = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "tarproc.cli.completion", "fish"], env=env,
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    names = commands()
    assert sorted(os.listdir(tmp_path / ".config/fish/completions")) == sorted(f"{n}.fish" for n in names)
    out = subprocess.run(["fish", "-c", 'complete -C "tarsort -S "; complete -C "tar2json --for"'], env=env,
                         capture_output=True, timeout=60)
    got = out.stdout.decode().split()
    assert {"text", "int", "float", "shuffle", "--format"} <= set(got), out


def test_zsh_finds_every_command_through_compinit(tmp_path):
    require("zsh")
    env = env_for(tmp_path)
    p = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "tarproc.cli.completion", "zsh"], env=env,
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    names = commands()
    script = "source ~/.zshrc 2>/dev/null; " + "; ".join(f"print -r -- {n}=$_comps[{n}]" for n in names)
    out = subprocess.run(["zsh", "-c", script], env=env, capture_output=True, timeout=60).stdout.decode()
    assert out.split() == [f"{n}=_{n}" for n in names], out  # compinit registered each command's function
    # what the function asks the command for: the completions of '--sk'
    got = subprocess.run(["tarcat"], env=dict(env, _TYPER_COMPLETE_ARGS="tarcat --sk", _TARCAT_COMPLETE="complete_zsh"),
                         capture_output=True, timeout=60).stdout.decode()
    assert "--skip" in got


@pytest.mark.parametrize("argv", [["csh"], ["bash", "zsh"]])
def test_unknown_shell_is_a_usage_error(argv, tmp_path):
    p = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "tarproc.cli.completion"] + argv,
                       env=env_for(tmp_path), capture_output=True, timeout=60)
    assert p.returncode == 2 and b"usage:" in p.stderr and os.listdir(tmp_path) == []
