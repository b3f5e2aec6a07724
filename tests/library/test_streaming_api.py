"""The documented Python API: iter_samples from URLs, write_samples to a URL,
pipeline with stages (as in README.md, "Python API")."""

import array
import os
import subprocess
import sys
import tarfile

import pytest

import tarproc
from helpers import read_tar, samples_of, tar_bytes
from test_urls import free_port, wait_for


def make_shards(tmp_path, n=3, per=4):
    for s in range(n):
        members = []
        for i in range(per):
            key = f"shard{s}/{i:03d}"
            members += [(f"{key}.cls", b"%d" % i), (f"{key}.txt", b"text %d %d" % (s, i))]
        (tmp_path / f"shard-{s:04d}.tar").write_bytes(tar_bytes(members))


def test_iter_samples_from_a_path_and_a_brace_pattern(tmp_path):
    make_shards(tmp_path)
    one = list(tarproc.iter_samples(str(tmp_path / "shard-0001.tar")))
    assert [s["__key__"] for s in one] == [f"shard1/{i:03d}" for i in range(4)]
    assert one[2]["txt"] == b"text 1 2" and one[2]["__source__"] == str(tmp_path / "shard-0001.tar")
    stats = tarproc.Stats()
    every = list(tarproc.iter_samples(str(tmp_path / "shard-{0000..0002}.tar"), stats=stats))
    assert len(every) == 12 and stats.read == 12 and stats.inputs == 3
    assert every[4]["__key__"] == "shard1/000"
    listed = list(tarproc.iter_samples([str(tmp_path / "shard-0002.tar"), str(tmp_path / "shard-0000.tar")]))
    assert listed[0]["__key__"] == "shard2/000" and listed[4]["__key__"] == "shard0/000"


def test_iter_samples_over_http(tmp_path):
    make_shards(tmp_path, 2)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port),
                               "--directory", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/")
        got = list(tarproc.iter_samples(f"http://127.0.0.1:{port}/shard-{{0000..0001}}.tar"))
        assert [s["__key__"] for s in got][:5] == ["shard0/000", "shard0/001", "shard0/002", "shard0/003", "shard1/000"]
        with pytest.raises(tarproc.BadInput) as e:
            list(tarproc.iter_samples(f"http://127.0.0.1:{port}/nope.tar"))
        assert "nope.tar" in str(e.value)
    finally:
        server.terminate()
        server.wait()


def test_write_samples_to_a_url_and_pipeline(tmp_path):
    make_shards(tmp_path)
    samples = tarproc.iter_samples(str(tmp_path / "shard-{0000..0002}.tar"))
    clean = tarproc.pipeline(
        samples,
        tarproc.skip(1),
        tarproc.select_fields("label=cls txt"),
        tarproc.take(5),
        tarproc.rekey("{index:06d}"),
    )
    out = str(tmp_path / "clean.tar.gz")
    assert tarproc.write_samples(out, clean) == 5
    got = samples_of((tmp_path / "clean.tar.gz").read_bytes())
    assert list(got) == [f"{i:06d}" for i in range(5)]
    assert got["000000"] == {"label": b"1", "txt": b"text 0 1"}
    assert got["000004"] == {"label": b"1", "txt": b"text 1 1"}
    # shuffle and rename as functions, written to a pipe: URL
    target = tmp_path / "piped.tar"
    stages = (tarproc.shuffle(3, seed=5), tarproc.rename_fields({"txt": "text"}))
    tarproc.write_samples(f"pipe:cat > {target}", tarproc.pipeline(tarproc.iter_samples(out), *stages))
    names = [n for n, _ in read_tar(target.read_bytes())]
    assert sorted(names) == sorted(f"{i:06d}.{f}" for i in range(5) for f in ("label", "text"))


def test_write_samples_failure_leaves_nothing(tmp_path):
    def bad():
        yield {"__key__": "a", "txt": b"ok"}
        raise tarproc.SampleFailed("boom")

    with pytest.raises(tarproc.SampleFailed):
        tarproc.write_samples(str(tmp_path / "out.tar"), bad())
    assert list(tmp_path.iterdir()) == []


def _caption(sample):
    sample["txt"] = b"caption " + sample["cls"]
    return sample


def test_readme_api_tour(tmp_path):
    """The README's "Python API" example, step by step, through the top-level names."""
    make_shards(tmp_path, n=2, per=10)
    pattern = str(tmp_path / "shard-{0000..0001}.tar")
    mapped = tarproc.map_function(tarproc.iter_samples(pattern), _caption, parallel=2)
    shuffled = tarproc.sort_samples(mapped, sorttype="shuffle", seed=1, memory=1 << 20)
    shards = list(tarproc.split_samples(shuffled, str(tmp_path / "train-%06d.tar"), max_count=8))
    assert [(s.name.rsplit("/", 1)[1], s.samples) for s in shards] == [
        ("train-000000.tar", 8), ("train-000001.tar", 8), ("train-000002.tar", 4)]
    got = {}
    for s in shards:
        got.update(samples_of(open(s.name, "rb").read()))
    assert len(got) == 20 and got["shard1/003"]["txt"] == b"caption 3"
    assert list(got) != sorted(got)  # shuffled
    cmd = tarproc.map_command(tarproc.iter_samples(shards[0].name), "tr a-z A-Z < sample.txt > sample.up",
                              parallel=2)
    assert all(s["up"] == s["txt"].upper() for s in cmd)


def test_import_tarproc_stays_light():
    code = ("import sys, tarproc; heavy = [m for m in ('numpy', 'PIL', 'multiprocess', 'multiprocessing', 'tarproc.stages.command', 'tarproc.stages.function') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_iterator_outlives_the_thread_that_opened_it(tmp_path):
    """A child process started for a reader (the decoder of a large .tar.gz,
    a ``pipe:`` command) dies with the parent, but the kernel ties that to
    the *thread* that started it: a reader opened in a thread that has ended
    (a thread pool's task, a request thread) must read on to the end."""
    import gzip
    import random
    import threading
    import time

    from helpers import tar_bytes

    members = [(f"s{i:04d}.bin", random.Random(i).randbytes(3000)) for i in range(800)]
    plain = tar_bytes(members)
    (tmp_path / "big.tar.gz").write_bytes(gzip.compress(plain, mtime=0))
    (tmp_path / "big.tar").write_bytes(plain)
    assert (tmp_path / "big.tar.gz").stat().st_size > (1 << 20)  # decoded by a program of its own
    for url in (str(tmp_path / "big.tar.gz"), f"pipe:cat {tmp_path / 'big.tar'}"):
        box = {}

        def opener():
            box["it"] = iter(tarproc.iter_samples(url))
            box["first"] = next(box["it"])

        t = threading.Thread(target=opener)
        t.start()
        t.join()
        time.sleep(0.3)  # the thread is gone; its children would be killed by now
        rest = list(box["it"])
        assert [box["first"]["__key__"]] + [s["__key__"] for s in rest] == [f"s{i:04d}" for i in range(800)]
        assert rest[-1]["bin"] == members[-1][1]


def members(path):
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf]


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


def test_a_sort_left_half_read_at_exit_removes_its_runs(tmp_path):
    """A script that reads the first samples of a sort that spilled and
    exits: the generator's cleanup ran during interpreter shutdown, where
    its import failed ("sys.meta_path is None" on stderr) and the run
    directory could stay behind.  Sorts are now closed at exit like the
    other stages: no directory left, nothing on stderr."""
    script = ("import os, glob, tarproc\n"
              "it = tarproc.sort_samples(({'__key__': f'{i:04d}', 'bin': b'x' * 2000} for i in range(400)),\n"
              "                          memory=100 << 10, tmpdir=os.getcwd())\n"
              "print(next(it)['__key__'], len(glob.glob('tarsort-*')))\n")
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == b"0000 1\n" and r.stderr == b"", r
    assert not [p for p in os.listdir(tmp_path) if p.startswith("tarsort-")]
