"""Shared fixtures: the installed commands on PATH, a shell runner, test data.

Command tests run the installed console scripts (``.venv/bin``) through
``bash`` in real pipes, and read what comes out with independent readers
(GNU tar, Python's tarfile, webdataset)."""

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV_BIN = os.path.dirname(sys.executable)


def _realdata():
    """``../shared/realdata`` beside the checkout (``TARPROC_REALDATA``
    overrides); for a clone of a local checkout (``git clone . /tmp/x``),
    beside the checkout it was cloned from."""
    if os.environ.get("TARPROC_REALDATA"):
        return os.environ["TARPROC_REALDATA"]
    here = os.path.join(os.path.dirname(ROOT), "shared", "realdata")
    if os.path.isdir(here):
        return here
    try:
        origin = subprocess.run(["git", "-C", ROOT, "config", "--get", "remote.origin.url"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    if origin and os.path.isdir(origin):
        there = os.path.join(os.path.dirname(os.path.abspath(origin)), "shared", "realdata")
        if os.path.isdir(there):
            return there
    return here


REALDATA = _realdata()

# The commands under test are the installed ones, first on PATH.
os.environ["PATH"] = VENV_BIN + os.pathsep + os.environ.get("PATH", "")

# tests/ is laid out by what the tests test (tests/README.md); every folder is
# importable by module name, whatever the depth of the file that imports:
# `helpers`, `conftest`, `make_corpus` (tests/hostile) and the modules that
# other tests share fixtures from (`from test_urls import s3`).  Test file
# names are unique across the folders (pytest's default import mode needs it).
HOSTILE = os.path.join(HERE, "hostile")
_FOLDERS = []
for _dir, _subdirs, _files in os.walk(HERE):
    _subdirs[:] = sorted(d for d in _subdirs if not d.startswith((".", "__")))
    _FOLDERS.append(_dir)
sys.path[:0] = [d for d in _FOLDERS if d not in sys.path]


@pytest.fixture
def sh(tmp_path):
    """Run a bash pipeline in tmp_path; returns CompletedProcess (bytes).

    ``sh("tarcat a.tar | tar tf -")``; ``input=`` feeds stdin; ``ok=True``
    (default) asserts exit 0 and an empty stderr unless ``stderr_ok``."""

    def run(cmd, input=None, ok=True, timeout=120, env=None, stderr_ok=False):
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], input=input, cwd=tmp_path,
                           capture_output=True, timeout=timeout, env=full_env)
        if ok:
            assert p.returncode == 0, f"{cmd!r} exited {p.returncode}: {p.stderr.decode(errors='replace')}"
            if not stderr_ok:
                assert p.stderr == b"", f"{cmd!r} wrote to stderr: {p.stderr.decode(errors='replace')}"
        return p

    return run


def require(tool):
    """A tool the Makefile installs (`make sysdeps`): fail, never skip."""
    path = shutil.which(tool)
    assert path, f"{tool} is missing: `make test` installs it (make sysdeps)"
    return path


# `make test-fast` runs `pytest -m "not sysdeps"`: the tests that need none of
# the system packages `make test` installs (Makefile SYSTOOLS: bsdtar, gm,
# zstd, jq, zsh, fish, tmux, Slurm and munge, /usr/bin/time).  A test module
# that names one of them is marked as a whole; test_docs.py runs the docs'
# examples, which use gm and jq.
SYSDEPS_WORDS = r"\b(bsdtar|gm|zstd|jq|zsh|fish|tmux|sbatch|slurm\w*|munged?)\b|/usr/bin/time"
SYSDEPS_MODULES = {"test_docs.py"}


def pytest_configure(config):
    config.addinivalue_line("markers", "sysdeps: needs a system package that `make test` installs "
                                       "(`make test-fast` leaves these tests out)")


def pytest_collection_modifyitems(config, items):
    import re

    words = re.compile(SYSDEPS_WORDS)
    marked = {}
    for item in items:
        path = str(item.fspath)
        if path not in marked:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    marked[path] = os.path.basename(path) in SYSDEPS_MODULES or bool(words.search(f.read()))
            except OSError:
                marked[path] = False
        if marked[path]:
            item.add_marker(pytest.mark.sysdeps)
