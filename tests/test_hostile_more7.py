"""Adversarial review, ninth pass: the documented Python API (``iter_samples``,
``write_samples``, ``map_function``, ``map_command``) given hostile values,
abandoned half-way, left running at interpreter exit, and used inside daemon
processes.  Outputs are read back with Python's tarfile.  Each test failed
before the fix it comes with."""

import array
import os
import subprocess
import sys
import tarfile
import textwrap
import time

import pytest

import tarproc
from test_hostile_more2 import kill_left, processes_with, unique_sleep, wait_for


def members(path):
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf]


# ------------------------------------------------------------------ write_samples: hostile values


def test_write_samples_memoryview_of_wide_items_is_written_whole(tmp_path):
    """A memoryview whose items are wider than a byte (of an ``array('i')``,
    of a numpy array) has ``len()`` items, not bytes: the header said 3
    bytes, 12 were written, and the next member's header landed 9 bytes
    off: a tar that no reader could read (tarproc: "bad header checksum"),
    written with success.  Its bytes are now the member, whole."""
    out = tmp_path / "out.tar"
    wide = array.array("i", [1, 2, 3])
    strided = memoryview(b"abcdef")[::2]  # not contiguous
    n = tarproc.write_samples(str(out), [{"__key__": "a", "x": memoryview(wide)},
                                         {"__key__": "b", "x": strided, "y": bytearray(b"yy")},
                                         {"__key__": "c", "x": b"hello"}])
    assert n == 3
    assert members(out) == [("a.x", wide.tobytes()), ("b.x", b"ace"), ("b.y", b"yy"), ("c.x", b"hello")]
    assert [s["__key__"] for s in tarproc.iter_samples(str(out))] == ["a", "b", "c"]


@pytest.mark.parametrize("sample, words", [
    ({"__key__": "a", 3: b"x"}, ["3", "not a str"]),
    ({"__key__": "a", 3: b"x", "y": b"z"}, ["3", "not a str"]),
    ({"__key__": 5, "y": b"z"}, ["__key__", "int"]),
    (["a", "b"], ["list", "dict"]),
    (None, ["NoneType", "dict"]),
    ({"__key__": "a\ud800", "y": b"1"}, ["'a\\ud800'", "UTF-8"]),
    ({"__key__": "a", "y\ud800": b"1"}, ["UTF-8"]),
])
def test_write_samples_unwritable_samples_are_one_clear_error(sample, words, tmp_path):
    """A sample that is not a dict, a field name that is not a ``str`` or a
    key that UTF-8 cannot encode (a lone surrogate) raised a bare
    AttributeError, TypeError ("'<' not supported between instances of
    'int' and 'str'") or UnicodeEncodeError; a ``__key__`` of 5 was "sample
    has no __key__".  Each is now a BadSample naming what is wrong, and
    nothing is written."""
    out = tmp_path / "out.tar"
    with pytest.raises(tarproc.BadSample) as e:
        tarproc.write_samples(str(out), [{"__key__": "ok", "y": b"1"}, sample])
    message = str(e.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("where", ["key", "field"])
def test_write_samples_names_too_long_to_read_back_are_refused(where, tmp_path):
    """A key or field name of 2 MiB was written (in a pax header of 2 MiB)
    into a tar that every tarproc reader refuses ("pax header of 2097168
    bytes is larger than the 1048576 byte limit"): what we write we could
    not read back.  Such a name is now refused before anything is written;
    one just under the bound round-trips."""
    from tarproc.core.rules import MAX_NAME_BYTES

    big = "k" * (2 << 20)
    sample = {"__key__": big, "y": b"1"} if where == "key" else {"__key__": "a", big: b"1"}
    with pytest.raises(tarproc.BadSample) as e:
        tarproc.write_samples(str(tmp_path / "out.tar"), [sample])
    assert "longer than" in str(e.value) and len(str(e.value)) < 1000
    assert os.listdir(tmp_path) == []
    edge = "é" * ((MAX_NAME_BYTES - 8) // 2)  # two bytes each in UTF-8
    sample = {"__key__": edge, "y": b"1"} if where == "key" else {"__key__": "a", edge: b"1"}
    tarproc.write_samples(str(tmp_path / "edge.tar"), [sample])
    back = list(tarproc.iter_samples(str(tmp_path / "edge.tar")))
    assert len(back) == 1 and back[0].get(edge if where == "field" else "y") == b"1"

