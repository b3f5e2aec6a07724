"""The worker runtime (issue 14): one pool on multiprocess, a worker killed on
a sample loses only that sample, the API chained / in threads / in daemon
processes, every start method with lambdas and closures, URL patterns as
strings."""

import io
import os
import subprocess
import sys
import tarfile
import threading

import pytest

import tarproc
from helpers import samples_of, tar_bytes


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
    r = subprocess.run(["tarproc", "-p", "2", "--map", f"{f}:fn"], input=_text_shard(90), env=env,
                       capture_output=True, timeout=120)
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
    r = subprocess.run(["tarproc", "-p", "2", "--batch", "4", "--map", f"{f}:fn"], input=_text_shard(8),
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
        while time.monotonic() < deadline and not (out.exists() and b"001.txt" in out.read_bytes()):
            time.sleep(0.05)
        early = out.read_bytes() if out.exists() else b""
    finally:
        go.touch()
        t.join(60)
    assert b"000.txt" in early and b"X1" in early and b"002.txt" not in early
    assert [s["txt"] for s in samples_of(out.read_bytes()).values()] == [b"X0", b"X1", b"X2", b"X3"]
