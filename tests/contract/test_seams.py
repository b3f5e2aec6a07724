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



#: What each layer may import (docs/architecture.md, "Layers and folders"), besides
#: itself and the shared modules every layer may use (``tarproc.errors``,
#: ``tarproc.settings``, which import only leaves of core).  A source never
#: depends on a sink (the index format both use is in core: ``core/indexfile``),
#: nor a stage on a sink, nor a sink on a stage.
LAYERS = {
    "core": set(),
    "runtime": {"core"},
    "sources": {"core", "runtime"},
    "stages": {"core", "runtime", "sources"},
    "sinks": {"core", "runtime", "sources"},
    "jobs": {"core", "runtime", "sources", "stages", "sinks"},
    "server": {"core", "runtime", "sources", "stages", "sinks"},
    "cli": {"core", "runtime", "sources", "stages", "sinks", "jobs", "server", "tarproc"},
}
SHARED = {"errors": {"core"}, "settings": {"core", "errors"}}


def _layer(name):
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "tarproc"


def test_every_module_is_in_a_layer():
    assert {_layer(name) for name in _modules()} == set(LAYERS) | set(SHARED) | {"tarproc"}


def test_no_import_crosses_the_layers_the_wrong_way():
    mods = _modules()
    rules = {**LAYERS, **{k: v for k, v in SHARED.items()}}
    found = []
    for name in mods:
        here = _layer(name)
        if here == "tarproc":  # the package's API: it may name any module
            continue
        for mod, _ in _imports(mods, name):
            if not mod.startswith("tarproc"):
                continue
            there = _layer(mod)
            if there != here and there not in rules[here] and not (there in SHARED and here not in SHARED):
                found.append(f"{name} ({here}) imports {mod} ({there})")
    assert found == []
