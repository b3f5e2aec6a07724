"""The package's layout (DESIGN.md): the flow in folder names, the library
never imports the CLI layer, `import tarproc` cheap. (Module length is no
gate: a long module is a prompt to look for a seam, never a reason to cut.)"""

import ast
import os
import re
import subprocess
import sys

from conftest import ROOT

PKG = os.path.join(ROOT, "tarproc")
LIBRARY = ["core", "sources", "stages", "sinks", "runtime", "jobs", "server"]


def _modules(folders):
    for folder in folders:
        for name in sorted(os.listdir(os.path.join(PKG, folder))):
            if name.endswith(".py"):
                yield os.path.join(PKG, folder, name)


def test_flow_folders_exist():
    for folder in LIBRARY + ["cli"]:
        assert os.path.isfile(os.path.join(PKG, folder, "__init__.py")), folder


def test_library_never_imports_the_cli():
    offenders = []
    for path in list(_modules(LIBRARY)) + [os.path.join(PKG, f) for f in os.listdir(PKG) if f.endswith(".py")]:
        tree = ast.parse(open(path).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if "cli" in mod.split(".") or (node.level and any(a.name == "cli" for a in node.names)):
                    offenders.append(f"{path}:{node.lineno}")
            elif isinstance(node, ast.Import):
                offenders += [f"{path}:{node.lineno}" for a in node.names if a.name.startswith("tarproc.cli")]
    assert offenders == []


def test_import_tarproc_loads_nothing_heavy():
    code = ("import sys, tarproc; heavy = [m for m in ('numpy', 'PIL', 'multiprocess', 'typer', 'rich') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_empty_section_headers():
    """A section header (`# ---- name`) with nothing under it, before the end
    of the file or the next header, says a module was cut, not laid out."""
    header = re.compile(r"^\s*#\s*(?:[-=]{3,}.*|.*[-=]{3,}\s*)$")
    empty = []
    for path in list(_modules(LIBRARY + ["cli"])) + [os.path.join(PKG, f) for f in os.listdir(PKG) if f.endswith(".py")]:
        lines = [line for line in open(path).read().splitlines() if line.strip()]
        for i, line in enumerate(lines):
            if header.match(line) and (i + 1 == len(lines) or header.match(lines[i + 1])):
                empty.append(f"{os.path.relpath(path, ROOT)}: {line.strip()}")
    assert empty == []
