"""__del__ methods that run at interpreter shutdown, after the module globals
they would use have been set to None (what a program that imports torch
meets at every exit: `Exception ignored in: IndexedDataset.__del__ ...
TypeError: 'NoneType' object is not callable`).

The class is reproduced with plain Python: the object lives in a module
imported before tarproc, and both modules are kept alive past the clearing
of sys.modules (as C extensions keep theirs), so at exit Python sets the
globals of the newer module (tarproc's) to None first, then clears the
older one's, which runs the object's __del__."""

import os
import subprocess
import sys
import textwrap

from conftest import ROOT
from helpers import tar_bytes

PRELUDE = """
import ctypes, sys, types
holder = types.ModuleType("aaa_holder")       # imported before tarproc
sys.modules["aaa_holder"] = holder
ctypes.pythonapi.Py_IncRef(ctypes.py_object(holder))

def keep(module):
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(module))
"""


def _run(tmp_path, body):
    script = PRELUDE + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p


def _dataset(tmp_path):
    (tmp_path / "a.tar").write_bytes(tar_bytes([(f"{i}.txt", b"x%d" % i) for i in range(3)]))
    subprocess.run(["tarindex", "-q", "a.tar", "-o", "a.json"], cwd=tmp_path, check=True)


def test_indexed_dataset_at_shutdown(tmp_path):
    _dataset(tmp_path)
    p = _run(tmp_path, """
        import tarproc.sources.indexed as m
        keep(m)
        ds = m.IndexedDataset("a.json")
        assert ds[1]["txt"] == b"x1"            # a shard file is open
        holder.ds = ds
        holder.ds2 = ds[1:]                     # a slice, never read
    """)
    assert p.stderr == b""


def test_indexed_dataset_in_a_cycle_and_a_global(tmp_path):
    _dataset(tmp_path)
    p = _run(tmp_path, """
        import tarproc
        import tarproc.sources.indexed as m
        keep(m)
        ds = tarproc.IndexedDataset("a.json")
        ds[0]
        ds.me = ds                              # a reference cycle
        holder.ds = ds
        m.GLOBAL = tarproc.IndexedDataset("a.json")   # a global of the module itself
        m.GLOBAL[2]
    """)
    assert p.stderr == b""


def test_blob_file_at_shutdown_removes_what_it_owns(tmp_path):
    (tmp_path / "owned.bin").write_bytes(b"y" * 100)
    p = _run(tmp_path, """
        import tarproc.core.blob as b
        keep(b)
        blob = b.Blob.from_path("owned.bin", owned=True)
        assert bytes(blob) == b"y" * 100
        holder.blob = blob
    """)
    assert p.stderr == b""
    assert not os.path.exists(tmp_path / "owned.bin")  # unlinked by its __del__, at exit


def test_capture_at_shutdown(tmp_path):
    p = _run(tmp_path, """
        import tarproc.runtime.capture as c
        keep(c)
        holder.cap = c.Capture()                # a pipe held open
    """)
    assert p.stderr == b""


def test_every_del_in_the_package_is_covered():
    """A new __del__ gets a test here: these are the ones there are."""
    root = os.path.join(ROOT, "tarproc")
    found = set()
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                text = open(os.path.join(d, f), encoding="utf-8").read()
                if "def __del__" in text or "__del__ =" in text:
                    found.add(os.path.relpath(os.path.join(d, f), root))
    # (sources/sidecars.py: a shard's sidecar held open, test_indexed_dataset_at_shutdown reads a sample)
    assert found == {"sources/indexed.py", "sources/sidecars.py", "core/blob.py", "runtime/capture.py"}
