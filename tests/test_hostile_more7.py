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
from helpers import kill_left, processes_with, unique_sleep, wait_for


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


# ------------------------------------------------------------------ interpreter exit with live stages


def _shard(path, n=60):
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(n):
            info = tarfile.TarInfo(f"s{i:04d}.txt")
            info.size = 4
            tf.addfile(info, io.BytesIO(b"%04d" % i))
    path.write_bytes(buf.getvalue())


def _run_script(tmp_path, body, timeout=30):
    spool = tmp_path / "spool"
    spool.mkdir()
    env = dict(os.environ, TMPDIR=str(spool))
    script = "import sys, threading, time\nimport tarproc\n" + textwrap.dedent(body)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, timeout=timeout)
    return p, time.monotonic() - t0, spool


@pytest.mark.parametrize("stage", ["command", "function", "function(command)", "command(function)"])
def test_exit_with_a_live_stage_ends_quickly_and_cleanly(stage, tmp_path):
    """A script that stops reading a ``map_command`` half-way and exits (the
    iterator still referenced by a global) hung for ever: at interpreter
    shutdown the generator's cleanup waited for its directory-removing
    thread, which was already frozen.  A live ``map_function`` printed an
    "Exception ignored ... ImportError: sys.meta_path is None" traceback.
    Stages still open are now closed at exit, while threads run: the
    script ends at once, quietly, with no command and no run directory
    left."""
    _shard(tmp_path / "in.tar")
    marker = unique_sleep()
    slow = f"cp sample.txt sample.out; [ $(cat sample.__key__) = s0000 ] || {marker}"  # the first one is quick
    mc = f"tarproc.map_command({{}}, '{slow}', parallel=2)"
    mf = "tarproc.map_function({}, lambda s: s, parallel=2, batch=1)"
    chain = {"command": mc, "function": mf, "function(command)": mf.format(mc), "command(function)": mc.format(mf)}
    try:
        p, took, spool = _run_script(tmp_path, f"""
            src = tarproc.iter_samples("in.tar")
            it = {chain[stage].format("src")}
            first = next(it)
            time.sleep(0.5)
            print("exiting", first["__key__"], flush=True)
        """)
        err = p.stderr.decode()
        assert p.returncode == 0 and p.stdout == b"exiting s0000\n", err
        assert took < 15, f"exit took {took:.1f} s"
        assert "Traceback" not in err and "Exception ignored" not in err, err
        assert os.listdir(spool) == []
        assert wait_for(lambda: not processes_with(marker), 5), "commands left running"
    finally:
        kill_left(marker)


def test_exit_while_another_thread_runs_map_command_stops_it_first(tmp_path):
    """A ``map_command`` running in a daemon thread (its consumer writing
    an output) when the main thread returned: its commands were left
    running (orphans of init), its run directory stayed in ``TMPDIR``, and
    its samples so far could count as a complete input.  At exit the stage
    now stops: its loop raises (the write is discarded), kills its commands
    and removes its directories in its own thread before the interpreter
    freezes it."""
    _shard(tmp_path / "in.tar")
    marker = unique_sleep()
    try:
        p, took, spool = _run_script(tmp_path, f"""
            it = tarproc.map_command(tarproc.iter_samples("in.tar"), "{marker}", parallel=2)
            def consume():
                try:
                    tarproc.write_samples("out.tar", it)
                except tarproc.SampleFailed as e:
                    print("stopped:", e, flush=True)
            threading.Thread(target=consume, daemon=True).start()
            time.sleep(1)
        """)
        assert p.returncode == 0 and took < 15, (took, p.stderr.decode())
        assert os.listdir(spool) == []
        assert wait_for(lambda: not processes_with(marker), 5), "commands left running"
        assert sorted(os.listdir(tmp_path)) == ["in.tar", "spool"]  # no out.tar, no partial file
    finally:
        kill_left(marker)


# ------------------------------------------------------------------ daemon processes


def _in_pool_worker(kind):
    import tarproc

    samples = [{"__key__": f"{i:03d}", "txt": b"%d" % i} for i in range(20)]

    def inner(s):
        s["up"] = s["txt"] + b"!"
        return s

    def outer(s):  # map_function inside a map_function worker (a multiprocess daemon)
        return list(tarproc.map_function([s], inner))

    if kind == "default":
        out = list(tarproc.map_function(samples, inner))
    else:
        out = list(tarproc.map_function(samples, outer, parallel=2))
    return [(s["__key__"], s["up"]) for s in out]


@pytest.mark.parametrize("kind", ["default", "nested"])
def test_map_function_with_default_parallel_inside_a_multiprocess_daemon(kind):
    """``map_function(samples, fn)`` (default ``parallel``) inside a
    ``multiprocess`` daemon worker (a ``multiprocess.Pool`` worker, or a
    ``map_function`` worker calling it again) raised UsageError "a daemonic
    multiprocess process cannot start worker processes", while the same call
    in a ``multiprocessing`` daemon (a DataLoader worker) worked.  In a
    daemon the default is now ``parallel=1``: ``fn`` runs in that process."""
    want = [(f"{i:03d}", b"%d!" % i) for i in range(20)]
    if kind == "nested":
        assert _in_pool_worker("nested") == want
        return
    import multiprocess

    with multiprocess.get_context("fork").Pool(1) as pool:
        assert pool.apply(_in_pool_worker, ("default",)) == want


@pytest.mark.parametrize("stage", ["function"])
def test_a_forked_child_that_exits_leaves_the_parents_workers_alone(stage, tmp_path):
    """A process that forks (``os.fork``) while a ``map_function`` pool runs,
    whose child then exits normally: the child's exit hook of
    ``multiprocess`` took the parent's workers for its own, sent them
    SIGTERM and failed to join them ("AssertionError: can only join a
    child process" on the child's stderr); the parent's samples in hand
    failed as "worker process died", and the child's copy of the stage,
    closed as it exited, stopped the parent's workers.  A forked child now
    starts with no workers of its own, and a copy of a stage (a
    ``map_function``'s pool, a ``map_command``'s commands and run directory)
    leaves the parent's alone."""
    mc = 'tarproc.map_command(samples, "sleep 0.01; cp sample.txt sample.out", parallel=2, on_error=errors.append)'
    mf = "tarproc.map_function(samples, slow, parallel=2, batch=1, on_error=errors.append)"
    p, took, spool = _run_script(tmp_path, """
        import os
        errors = []
        def slow(s):
            time.sleep(0.01)
            return s
        samples = ({"__key__": f"{i:03d}", "txt": b"x"} for i in range(120))
        it = STAGE
        got = [next(it)]
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
        got += list(it)
        print(len(got), errors, flush=True)
    """.replace("STAGE", mf if stage == "function" else mc))
    err = p.stderr.decode()
    assert p.returncode == 0 and p.stdout == b"120 []\n", (p.stdout, err)
    assert "Traceback" not in err and "can only join" not in err, err


# ------------------------------------------------------------------ URLs as pathlib paths, and non-URLs


def test_the_api_takes_pathlib_paths_and_refuses_non_urls_in_one_line(tmp_path):
    """``pathlib.Path`` is how Python code names files, but ``write_samples``
    raised "AttributeError: 'PosixPath' object has no attribute
    'startswith'", ``iter_samples`` and ``index_shards`` "TypeError:
    'PosixPath' object is not iterable", ``check_shards`` an AttributeError
    and ``IndexedDataset`` a UsageError; ``iter_samples(None)`` was a
    TypeError, and ``write_samples(url, sample)`` (one dict, not a list)
    "a sample is a dict, not str".  Paths now work wherever a URL does (one
    file, as named), and anything else is a one-line UsageError."""
    samples = [{"__key__": f"{i:03d}", "txt": b"%d" % i} for i in range(5)]
    out = tmp_path / "out.tar"
    assert tarproc.write_samples(out, iter(samples)) == 5
    assert [s["__key__"] for s in tarproc.iter_samples(out)] == [s["__key__"] for s in samples]
    assert len(list(tarproc.iter_samples([out, str(out)]))) == 10
    shards = [s.name for s in tarproc.split_samples(tarproc.iter_samples(out), tmp_path / "sp-%d.tar", max_count=3)]
    assert shards == [str(tmp_path / "sp-0.tar"), str(tmp_path / "sp-1.tar")]
    tarproc.index_shards([tmp_path / "sp-0.tar", tmp_path / "sp-1.tar"], tmp_path / "index.json")
    assert tarproc.IndexedDataset(tmp_path / "index.json")[4]["txt"] == b"4"
    assert tarproc.check_shards(tmp_path / "sp-1.tar")["ok"]
    for call in (lambda: list(tarproc.iter_samples(None)), lambda: list(tarproc.iter_samples(5)),
                 lambda: tarproc.write_samples(tmp_path / "one.tar", samples[0]),
                 lambda: tarproc.write_samples(None, samples), lambda: tarproc.check_shards(3)):
        with pytest.raises(tarproc.UsageError) as e:
            call()
        assert "\n" not in str(e.value) and ("expected" in str(e.value) or "iterable" in str(e.value))
    assert not [n for n in os.listdir(tmp_path) if n.startswith((".", "one", "None"))]


@pytest.mark.parametrize("stage", ["command", "function"])
def test_map_stages_fail_only_the_sample_that_is_not_a_sample(stage):
    """A non-dict item in the input of ``map_command`` ended the run with a
    bare AttributeError ("'int' object has no attribute 'get'"), a field
    name that is not a ``str`` with a TypeError; in ``map_function`` a
    non-dict failed its whole batch ("worker process failed") even under
    ``error_handling="skip"``.  Each is now that sample's failure, under
    the error policy, and the other samples go through."""
    items = [{"__key__": "a", "x": b"1"}, 7, {"__key__": "b", 3: b"x", "x": b"2"}, {"__key__": "c", "x": b"3"}]
    errors = []
    if stage == "command":
        run = lambda items, **kw: tarproc.map_command(iter(items), "true", parallel=2, **kw)  # noqa: E731
    else:
        run = lambda items, **kw: tarproc.map_function(iter(items), lambda s: s, parallel=2, **kw)  # noqa: E731
    out = list(run(items, on_error=errors.append))
    assert [s["__key__"] for s in out] == ["a", "c"]
    assert any("a sample is a dict, not int" in m for m in errors), errors
    with pytest.raises(tarproc.SampleFailed) as e:
        list(run([7], error_handling="abort"))
    assert "a sample is a dict, not int" in str(e.value)


@pytest.mark.parametrize("make, message", [
    (lambda: tarproc.take("3"), "take: n must be a whole number >= 0, not '3'"),
    (lambda: tarproc.skip(-1), "skip: n must be a whole number >= 0, not -1"),
    (lambda: tarproc.shuffle(0), "shuffle: bufsize must be a whole number >= 1, not 0"),
    (lambda: tarproc.slice_samples(1, "x"), "slice_samples: stop must be a whole number >= 0, not 'x'"),
    (lambda: tarproc.slice_samples(0, 5, 0), "slice_samples: step must be a whole number >= 1, not 0"),
])
def test_stage_arguments_are_checked_when_the_stage_is_made(make, message):
    """``take("3")`` raised a bare TypeError in the middle of the run, and
    ``shuffle(0)`` a ValueError from ``randrange``; now one UsageError when
    the stage is made."""
    with pytest.raises(tarproc.UsageError) as e:
        make()
    assert str(e.value) == message
