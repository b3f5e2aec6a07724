"""The documented Python API: iter_samples from URLs, write_samples to a URL,
pipeline with stages (as in README.md, "Python API")."""

import subprocess
import sys

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
