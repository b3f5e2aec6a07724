"""The library's seams: no private name imported across modules, no import
circles (lazy imports included).  (Empty section headers: test_layout.)"""

import ast
import pathlib

PKG = next(d / "tarproc" for d in pathlib.Path(__file__).resolve().parents if (d / "tarproc" / "__init__.py").is_file())


def _modules():
    mods = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p
    return mods


def _imports(mods, name):
    """(module imported, names imported) for every import in module ``name``."""
    p = mods[name]
    package = name.split(".") if p.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(p.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{mod}.{a.name}"
                yield (full, ()) if full in mods else (mod, (a.name,))
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, ()


def test_no_private_name_is_imported_across_modules():
    mods = _modules()
    found = [f"{name}: from {mod} import {n}" for name in mods for mod, names in _imports(mods, name)
             if mod in mods for n in names if n.startswith("_") and not n.startswith("__")]
    assert found == []


def test_no_import_circles():
    mods = _modules()
    graph = {name: {mod for mod, _ in _imports(mods, name) if mod in mods and mod != name and mod != "tarproc"}
             for name in mods}
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []

