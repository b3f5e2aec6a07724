"""Shell completion for every tarproc command at once.

    python -m tarproc.cli.completion [bash|zsh|fish]     (or: make completion)

Each command can install its own (``tarcat --install-completion``); this
installs all of them, for the shell named (default: the one ``$SHELL``
names), where that shell looks for them: bash ``~/.bash_completions/CMD.sh``
sourced from ``~/.bashrc``; zsh ``~/.zfunc/_CMD`` with ``fpath`` and
``compinit`` in ``~/.zshrc``; fish ``~/.config/fish/completions/CMD.fish``.
Running it again changes nothing.  The commands are the console scripts of
the installed tarproc (``tarcat``, ``tarcats``, ... ``kujob``)."""

import os
import sys

SHELLS = ("bash", "zsh", "fish")


def commands():
    """The names of tarproc's installed commands, sorted."""
    from importlib.metadata import entry_points

    return sorted({e.name for e in entry_points(group="console_scripts") if e.value.startswith("tarproc.cli.")})


def install_all(shell):
    """Install the completion script of every command for ``shell``; the
    list of files written."""
    # typer writes each script and (zsh) the rc lines that load them (typer is
    # pinned to 0.27.x: README, "Design decisions"); bash's rc lines are
    # added here, once each (typer's adds a blank line at every run)
    from pathlib import Path

    from typer._completion_shared import get_completion_script, install

    paths = []
    for name in commands():
        var = f"_{name.upper()}_COMPLETE"
        if shell == "bash":
            path = Path.home() / ".bash_completions" / f"{name}.sh"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(get_completion_script(prog_name=name, complete_var=var, shell=shell))
        else:
            _, path = install(shell=shell, prog_name=name, complete_var=var)
        paths.append(str(path))
    if shell == "bash":
        rc = Path.home() / ".bashrc"
        text = rc.read_text() if rc.is_file() else ""
        missing = [f"source '{path}'" for path in paths if f"source '{path}'" not in text]
        if missing:
            rc.write_text(text + ("\n" if text and not text.endswith("\n") else "") + "\n".join(missing) + "\n")
    return paths


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    shell = argv[0] if argv else os.path.basename(os.environ.get("SHELL", ""))
    if len(argv) > 1 or shell not in SHELLS:
        print(f"usage: python -m tarproc.cli.completion [{'|'.join(SHELLS)}] (default: $SHELL's; "
              f"{shell or 'unset'} is not one of them)", file=sys.stderr)
        return 2
    paths = install_all(shell)
    print(f"{shell} completion installed for {len(paths)} commands in {os.path.dirname(paths[0])}; "
          "it takes effect in a new shell", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
