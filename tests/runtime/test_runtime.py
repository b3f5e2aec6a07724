"""The worker runtime (issue 14): one pool on multiprocess, a worker killed on
a sample loses only that sample, the API chained / in threads / in daemon
processes, every start method with lambdas and closures, URL patterns as
strings."""

import io
import os
import subprocess
import sys
import tarfile
import textwrap
import threading
import time

import pytest

import tarproc
from helpers import kill_left, processes_with, samples_of, tar_bytes, unique_sleep, wait_for


def _jpeg(n):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (96, 80), (n * 20 % 256, 100, 50)).save(buf, "JPEG")
    return buf.getvalue()


def _readme_shard(path, n=6):
    members = []
    for i in range(n):
        members += [(f"{i:06d}.cls", b"%d" % i), (f"{i:06d}.jpg", _jpeg(i))]
    path.write_bytes(tar_bytes(members))


def caption(sample):  # as in README.md, "Python API"
    sample["txt"] = b"class " + sample["cls"]
    return sample


def _readme_example():
    """The README's map_function -> map_command lines, as written there (with parallel=2)."""
    mapped = tarproc.map_function(tarproc.iter_samples("data.tar"), caption, parallel=2)
    mapped = tarproc.map_command(mapped, "gm mogrify -resize 64x64 sample.jpg", parallel=2)
    return list(mapped)


def _check_readme_result(got):
    from PIL import Image

    assert [s["__key__"] for s in got] == [f"{i:06d}" for i in range(6)]
    for i, s in enumerate(got):
        assert s["txt"] == b"class %d" % i
        assert Image.open(io.BytesIO(s["jpg"])).size == (64, 53)


def test_readme_example_chained_in_main_thread_and_in_a_thread(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _readme_shard(tmp_path / "data.tar")
    _check_readme_result(_readme_example())
    out, errors = [], []

    def run():
        try:
            out.append(_readme_example())
        except BaseException as e:  # shown by the assertion below
            errors.append(repr(e))

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert not t.is_alive() and errors == []
    _check_readme_result(out[0])


def test_stages_chain_in_the_other_order_from_a_thread(tmp_path):
    _readme_shard(tmp_path / "data.tar", n=4)
    result = []

    def run():
        cmd = tarproc.map_command(tarproc.iter_samples(str(tmp_path / "data.tar")),
                                  "cp sample.cls sample.copy", parallel=2)
        result.extend(tarproc.map_function(cmd, lambda s: dict(s, both=s["cls"] + s["copy"]), parallel=2))

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert [s["both"] for s in result] == [b"%d%d" % (i, i) for i in range(4)]


def _in_daemon(queue, parallel):
    samples = ({"__key__": f"k{i}", "x": b"%d" % i} for i in range(50))
    try:
        got = list(tarproc.map_function(samples, lambda s: dict(s, y=s["x"] * 2), parallel=parallel))
        queue.put(("ok", [s["y"] for s in got]))
    except tarproc.TarprocError as e:
        queue.put(("error", str(e)))


@pytest.mark.parametrize("library", ["multiprocessing", "multiprocess"])
def test_map_function_inside_a_daemon_process(library):
    mp = __import__(library).get_context("fork")
    want = [b"%d" % i * 2 for i in range(50)]
    for parallel in (1, 2):
        queue = mp.Queue()
        p = mp.Process(target=_in_daemon, args=(queue, parallel), daemon=True)
        p.start()
        kind, value = queue.get(timeout=60)
        p.join(30)
        assert p.exitcode == 0
        if parallel == 1 or library == "multiprocessing":
            assert (kind, value) == ("ok", want)
        else:  # a multiprocess daemon may not have children: one line saying why
            assert kind == "error" and "daemonic" in value and "parallel=1" in value and "\n" not in value


def _killer_module(tmp_path):
    f = tmp_path / "killer.py"
    f.write_text("import os, signal\n"
                 "def fn(sample):\n"
                 "    if sample['__key__'] in os.environ.get('KILL_KEYS', '').split(','):\n"
                 "        os.kill(os.getpid(), signal.SIGKILL)\n"
                 "    sample['out'] = sample['txt'].upper()\n"
                 "    return sample\n")
    return f


def _text_shard(n):
    return tar_bytes([(f"{i:06d}.txt", b"s%d" % i) for i in range(n)])


def test_sigkilled_worker_loses_only_its_sample_and_names_it(tmp_path):
    f = _killer_module(tmp_path)
    env = dict(os.environ, KILL_KEYS="000042,000077")
    # 1%: checked at the end, so every sample runs
    r = subprocess.run(["tarproc", "-p", "2", "--max-failures", "1%", "--map", f"{f}:fn"], input=_text_shard(90),
                       env=env, capture_output=True, timeout=120)
    assert r.returncode == 1, r.stderr
    err = r.stderr.decode()
    assert "'000042'" in err and "'000077'" in err and "SIGKILL" in err, err
    assert "Traceback" not in err
    got = samples_of(r.stdout)
    want = [f"{i:06d}" for i in range(90) if i not in (42, 77)]
    assert list(got) == want
    assert all(got[k]["out"] == got[k]["txt"].upper() for k in want)


def test_worker_killed_on_every_sample_never_hangs(tmp_path):
    f = _killer_module(tmp_path)
    env = dict(os.environ, KILL_KEYS=",".join(f"{i:06d}" for i in range(8)))
    r = subprocess.run(["tarproc", "-p", "2", "--batch", "4", "--max-failures", "99%", "--map", f"{f}:fn"],
                       input=_text_shard(8),
                       env=env, capture_output=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.decode().count("SIGKILL") == 8
    assert r.stdout == b""  # a failed run on stdout: not even an end marker


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_lambdas_and_closures_under_spawn_and_forkserver(method):
    suffix = b"!"

    def closure(sample):
        return dict(sample, out=sample["x"] + suffix)

    samples = [{"__key__": f"k{i}", "x": b"%d" % i} for i in range(40)]
    got = list(tarproc.map_function(iter(samples), closure, parallel=2, start_method=method, batch=8))
    assert [s["out"] for s in got] == [b"%d!" % i for i in range(40)]
    got = list(tarproc.map_function(iter(samples), lambda s: dict(s, n=str(len(s["x"]))), parallel=2,
                                    start_method=method))
    assert [s["n"] for s in got] == [b"%d" % len(b"%d" % i) for i in range(40)]


@pytest.mark.parametrize("how", ["-c", "script"])
def test_spawned_workers_do_not_rerun_the_main_script(tmp_path, how):
    """An unguarded script (or python -c) whose lambda reads one of its globals."""
    code = ("import tarproc\n"
            "K = b'-global'\n"
            "samples = [{'__key__': f'k{i}', 'x': b'%d' % i} for i in range(5)]\n"
            "got = tarproc.map_function(iter(samples), lambda s: dict(s, y=s['x'] + K), parallel=2,\n"
            "                           start_method='spawn')\n"
            "print(b' '.join(s['y'] for s in got).decode())\n")
    (tmp_path / "script.py").write_text(code)
    argv = [sys.executable, "-c", code] if how == "-c" else [sys.executable, str(tmp_path / "script.py")]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [f"{i}-global" for i in range(5)]
    assert r.stderr == ""


def test_start_method_option_on_the_commands(tmp_path):
    f = tmp_path / "up.py"
    f.write_text("def up(sample):\n    sample['txt'] = sample['txt'].upper()\n    return sample\n")
    r = subprocess.run(["tarproc", "--start-method", "spawn", "-p", "2", "--map", f"{f}:up"],
                       input=_text_shard(20), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [s["txt"] for s in samples_of(r.stdout).values()] == [b"S%d" % i for i in range(20)]
    for s in range(3):
        (tmp_path / f"p-{s}.tar").write_bytes(tar_bytes([(f"{s}/{i}.txt", b"%d" % i) for i in range(30)]))
    outs = {}
    for method in ("fork", "forkserver"):
        r = subprocess.run(["tarpcat", "--start-method", method, "-w", "2", str(tmp_path / "p-{0..2}.tar")],
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs[method] = r.stdout
    assert outs["fork"] == outs["forkserver"]
    with tarfile.open(fileobj=io.BytesIO(outs["fork"])) as t:
        assert len(t.getnames()) == 90
    r = subprocess.run(["tarpcat", "--start-method", "nope", str(tmp_path / "p-0.tar")], capture_output=True)
    assert r.returncode == 2


def test_url_taking_functions_accept_a_pattern_string(tmp_path):
    for s in range(3):
        (tmp_path / f"u-{s}.tar").write_bytes(tar_bytes([(f"{s}/{i}.txt", b"%d" % i) for i in range(4)]))
        (tmp_path / f"u-{s}.txt").write_bytes(b"a\nb\n")
    pattern = str(tmp_path / "u-{0..2}.tar")
    assert len(list(tarproc.iter_samples(pattern))) == 12
    assert sorted(s["__key__"] for s in tarproc.parallel_samples(pattern, workers=2)) == sorted(
        f"{s}/{i}" for s in range(3) for i in range(4))
    report = tarproc.check_shards(pattern)
    assert len(report["shards"]) == 3
    assert len(list(tarproc.iter_text_samples(str(tmp_path / "u-{0..2}.txt")))) == 6


def test_no_module_level_stall_hooks():
    from tarproc.runtime import stall

    assert not hasattr(stall, "_stall_hooks")
    a, b = stall.Stall(), stall.Stall()
    seen = []
    a.add(lambda: seen.append("a"))
    b()
    assert seen == []
    a()
    assert seen == ["a"]


def test_one_stall_object_makes_a_library_pipeline_stream(tmp_path):
    """Source, --map batcher and sink share a Stall: output comes before the input ends."""
    import time

    data = tar_bytes([(f"{i:03d}.txt", b"x%d" % i) for i in range(4)])
    (tmp_path / "a").write_bytes(data[: 3 * 1024])  # three members: samples 000 and 001 are complete
    (tmp_path / "b").write_bytes(data[3 * 1024 :])
    go, out = tmp_path / "go", tmp_path / "out.tar"
    source = f"pipe:cat {tmp_path / 'a'}; while [ ! -e {go} ]; do sleep 0.05; done; cat {tmp_path / 'b'}"
    stall = tarproc.Stall()
    samples = tarproc.iter_samples(source, stall=stall)
    mapped = tarproc.map_function(samples, lambda s: dict(s, txt=s["txt"].upper()), parallel=2, stall=stall)
    t = threading.Thread(target=tarproc.write_samples, args=(f"pipe:cat > {out}", mapped), kwargs={"stall": stall})
    t.start()
    try:
        deadline = time.monotonic() + 30
        # (until sample 001 is there whole: its header and its data may reach the file in two writes)
        while time.monotonic() < deadline and not (out.exists() and b"X1" in out.read_bytes()):
            time.sleep(0.05)
        early = out.read_bytes() if out.exists() else b""
    finally:
        go.touch()
        t.join(60)
    assert b"000.txt" in early and b"X1" in early and b"002.txt" not in early
    assert [s["txt"] for s in samples_of(out.read_bytes()).values()] == [b"X0", b"X1", b"X2", b"X3"]


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


@pytest.mark.parametrize("stage", ["function", "command"])
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
    leaves the parent's alone.  The copy of the ordered window, closed as the
    child exited, took a lock that one of the parent's threads held when the
    process forked, and the child hung for ever (and the parent with it, in
    ``waitpid``): about one run in two.  Run three times in a row."""
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
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                sys.exit(0)
            os.waitpid(pid, 0)
            got.append(next(it))
        got += list(it)
        print(len(got), errors, flush=True)
    """.replace("STAGE", mf if stage == "function" else mc))
    err = p.stderr.decode()
    assert p.returncode == 0 and p.stdout == b"120 []\n", (p.stdout, err)
    assert "Traceback" not in err and "can only join" not in err, err


def test_a_forked_childs_copies_leave_the_parents_files_alone(tmp_path):
    """The class above, for what the library owns on disk: a child made by
    ``os.fork`` while the parent holds an open output (its temporary file),
    a spooled large member (a spool file) and a sort that has spilled (its
    run directory) exits by an exception through the parent's ``with``
    block, and then by interpreter exit.  Its copies of those objects
    removed the parent's files (the output's temporary file, the spool file
    at the child's exit, the sort's runs) or would have published the
    output; they now close their own descriptors and touch nothing else.
    The parent then finishes all three."""
    p, took, spool = _run_script(tmp_path, """
        import os, glob, tarfile
        big = b"B" * (300 << 10)
        def samples():
            for i in range(400):
                yield {"__key__": f"{i:04d}", "bin": bytes([i % 251]) * 2000}
        blobs = tarproc.Spooler(threshold=64 << 10)
        with open("in.tar", "wb") as f:
            w = tarproc.TarWriter(f)
            w.write("a.bin", big)
            w.write("b.bin", b"small")
            w.close()
        (sample,) = list(tarproc.iter_samples("in.tar", spooler=blobs))[:1]
        blob = sample["bin"]
        assert isinstance(blob, tarproc.Blob), type(blob)
        ordered = tarproc.sort_samples(samples(), memory=100 << 10, tmpdir=os.getcwd())
        first = next(ordered)
        runs = glob.glob("tarsort-*")
        with tarproc.open_sink("out.tar") as sink:
            sink.write(b"x" * 512)
            partial = glob.glob(".out.tar.*")
            pid = os.fork()
            if pid == 0:
                sys.exit(0)  # through the with block: the copy is aborted
            os.waitpid(pid, 0)
            pid = os.fork()
            if pid == 0:
                try:
                    sink.close()  # a copy may not publish
                except tarproc.OutputError as e:
                    print(str(e), file=sys.stderr)
                os._exit(0)
            os.waitpid(pid, 0)
            still = [bool(partial) and os.path.exists(partial[0]), os.path.exists(blob.path),
                     bool(runs) and os.path.isdir(runs[0]), os.path.exists("out.tar")]
            sink.write(b"y" * 512)
        rest = [s["__key__"] for s in ordered]
        print(still, bytes(blob) == big, len(rest) + 1, first["__key__"], os.path.getsize("out.tar"), flush=True)
    """)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert p.stdout == b"[True, True, True, False] True 400 0000 1024\n", (p.stdout, err)
    assert "cannot finish or publish" in err and "Traceback" not in err, err


def test_ctrl_c_while_the_main_thread_forks_is_not_lost(tmp_path):
    """A SIGINT whose handler runs inside an at-fork hook (the interpreter
    drops an exception raised there) is handled once the child has started:
    popen raises KeyboardInterrupt then, and the handler is put back."""
    import signal

    from tarproc.runtime import procs

    armed = []

    def before():
        if armed:
            armed.clear()
            os.kill(os.getpid(), signal.SIGINT)
            total = 0
            for i in range(10000):  # (bytecodes: the handler runs here, inside the hook)
                total += i

    os.register_at_fork(before=before)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    armed.append(1)
    with pytest.raises(KeyboardInterrupt):
        procs.popen(["sleep", "0"])
    assert not armed  # (the hook did fire)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    procs.popen(["true"]).wait()  # and the next start is untouched
