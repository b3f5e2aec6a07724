"""Adversarial review, twelfth pass: indexes and random access (``tarindex``,
``tarproc.IndexedDataset``) given hostile index JSON.  An index is input like a
shard (it may come from a URL): whatever it holds, ``IndexedDataset`` reads a
bounded amount, runs nothing, and fails with one ``BadInput`` line, never a
traceback of another type.  Each test failed before the fix it comes with."""

import copy
import json
import os

import pytest

import tarproc
from helpers import tar_bytes


@pytest.fixture
def indexed(tmp_path):
    (tmp_path / "a.tar").write_bytes(tar_bytes([(f"{i:03d}.txt", b"x" * i) for i in range(20)]))
    tarproc.index_shards([str(tmp_path / "a.tar")], str(tmp_path / "index.json"))
    return tmp_path, json.loads((tmp_path / "index.json").read_text())


def _open(tmp_path, desc, i=3):
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(desc))
    ds = tarproc.IndexedDataset(str(path))
    len(ds)
    return ds[i]


def test_index_naming_a_pipe_sidecar_runs_nothing(indexed):
    """An index whose ``tarproc_offsets.file`` was ``pipe:CMD`` ran CMD in a
    shell as soon as the dataset was used: an index downloaded from anywhere
    could run any command.  The sidecar is a path or a remote URL, never a
    command."""
    tmp_path, good = indexed
    desc = copy.deepcopy(good)
    marker = tmp_path / "ran"
    desc["tarproc_offsets"]["file"] = f"pipe:touch {marker}; cat {tmp_path / 'index.offsets'}"
    with pytest.raises(tarproc.BadInput, match="hostile.json: the offsets file .*pipe:.* not a path or URL"):
        _open(tmp_path, desc)
    assert not marker.exists()


@pytest.mark.parametrize("change, message", [
    (lambda d: d.__setitem__("tarproc_offsets", "index.offsets"), "tarproc_offsets"),
    (lambda d: d.__setitem__("tarproc_offsets", [1]), "tarproc_offsets"),
    (lambda d: d["tarproc_offsets"].__setitem__("file", 3), "tarproc_offsets"),
    (lambda d: d.pop("tarproc_offsets"), "shard entry 0 has offsets but the index names no offsets file"),
    (lambda d: d["shardlist"][0].__setitem__("filesize", "x"), "shard entry 0 has a bad filesize"),
    (lambda d: d["shardlist"][0].__setitem__("nsamples", True), r"shard entry 0 is not"),
    (lambda d: (d["shardlist"][0].__setitem__("nsamples", 10 ** 30), d["shardlist"][0].__setitem__("offsets", False)),
     "more samples than"),
])
def test_malformed_index_fields_are_one_line(indexed, change, message):
    """A ``tarproc_offsets`` that is not an object, or whose ``file`` is not a
    string, was a TypeError/AttributeError; a shard with ``"offsets": true``
    in an index without a sidecar a TypeError on ``ds[i]``; a huge
    ``nsamples`` an OverflowError from ``len()``; a ``filesize`` that is not a
    number and a boolean ``nsamples`` were taken as they were."""
    tmp_path, good = indexed
    desc = copy.deepcopy(good)
    change(desc)
    with pytest.raises(tarproc.BadInput, match=message):
        _open(tmp_path, desc)


def test_deeply_nested_index_json_is_one_line(tmp_path):
    """JSON nested 100,000 deep was a RecursionError."""
    (tmp_path / "deep.json").write_bytes(b"[" * 100000 + b"]" * 100000)
    with pytest.raises(tarproc.BadInput, match="deep.json: not a JSON index: .*nested"):
        len(tarproc.IndexedDataset(str(tmp_path / "deep.json")))


def test_bad_max_sample_setting_is_a_usage_error(indexed, monkeypatch):
    """``TARPROC_MAX_SAMPLE=abc`` was a bare ValueError on every ``ds[i]``."""
    tmp_path, _ = indexed
    monkeypatch.setenv("TARPROC_MAX_SAMPLE", "abc")
    with pytest.raises(tarproc.UsageError, match="TARPROC_MAX_SAMPLE"):
        tarproc.IndexedDataset(str(tmp_path / "index.json"))[3]


def test_oversized_index_and_sidecar_are_refused_before_reading_them_whole(indexed, monkeypatch):
    """An index JSON (or a sidecar) of any size was read whole into memory
    before anything was checked: a 1 GB index took gigabytes.  The JSON is read
    up to ``TARPROC_MAX_INDEX`` bytes, the sidecar up to the size the index
    gives it."""
    tmp_path, good = indexed
    monkeypatch.setenv("TARPROC_MAX_INDEX", "4096")
    big = tmp_path / "big.json"
    big.write_text(json.dumps(good) + " " * 10000)
    with pytest.raises(tarproc.BadInput, match="big.json: the index is larger than 4096 bytes.*TARPROC_MAX_INDEX"):
        len(tarproc.IndexedDataset(str(big)))
    monkeypatch.delenv("TARPROC_MAX_INDEX")
    with open(tmp_path / "index.offsets", "ab") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB that takes no disk
    for _ in range(2):  # the first time may import modules (their reads count too)
        before = _rchar()
        with pytest.raises(tarproc.BadInput, match="index.offsets: offsets file has more than"):
            len(tarproc.IndexedDataset(str(tmp_path / "index.json")))
    assert _rchar() - before < 16 << 20  # not the 1 GiB


def _rchar():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def test_close_while_other_threads_read_gives_no_error_nor_another_file(tmp_path):
    """``ds.close()`` (documented: files are reopened on the next access) while
    other threads were inside ``ds[i]`` closed the descriptors under them:
    their reads failed with "Bad file descriptor", or read *another shard* that
    had been opened on the reused descriptor number ("bad header checksum").
    A descriptor is now closed only when no read is using it."""
    import random
    import threading

    for s in range(4):
        (tmp_path / f"s{s}.tar").write_bytes(tar_bytes([(f"{s}-{i:04d}.txt", b"%d" % i * (i % 300))
                                                        for i in range(200)]))
    tarproc.index_shards([str(tmp_path / f"s{s}.tar") for s in range(4)], str(tmp_path / "t.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "t.json"))
    ref = list(tarproc.iter_samples(ds.urls))
    errors = []

    def work(seed):
        r = random.Random(seed)
        for _ in range(250):
            i = r.randrange(len(ds))
            try:
                if ds[i] != ref[i]:
                    errors.append(f"sample {i} differs")
            except Exception as e:  # noqa: BLE001 (what the test looks for)
                errors.append(repr(e))
            if r.random() < 0.1:
                ds.close()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ds.close()
    assert ds._fds == {}


def test_fork_while_another_thread_opens_a_shard_does_not_hang_the_child(indexed):
    """A process forked (a DataLoader worker, a Pool) while another thread was
    inside ``ds[i]`` opening a shard inherited the dataset's lock held by a
    thread that does not exist in the child: the child's first ``ds[i]`` hung
    for ever.  The lock is made anew in a forked child."""
    import signal
    import threading
    import time

    tmp_path, _ = indexed
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"))
    len(ds)
    held, release = threading.Event(), threading.Event()

    def opener():  # stands for a thread inside the lock (os.open of a slow file system)
        with ds._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=opener)
    t.start()
    held.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: 3 seconds to read one sample
        signal.alarm(3)
        try:
            os._exit(0 if ds[3]["__key__"] == "003" else 1)
        except BaseException:
            os._exit(1)
    try:
        deadline = time.monotonic() + 10
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        release.set()
        t.join()
    assert done and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_a_wids_index_of_plain_shards_says_how_to_get_offsets(indexed):
    """A ``widsindex`` index (counts only) of an uncompressed shard was
    refused with "random access needs uncompressed shards: tarcat it to a
    .tar": advice for a compressed shard, wrong for this one."""
    tmp_path, good = indexed
    desc = {"__kind__": "wids-shard-index-v1", "wids_version": 1,
            "shardlist": [{"url": "a.tar", "nsamples": 20, "filesize": good["shardlist"][0]["filesize"]}]}
    ds = tarproc.IndexedDataset(desc, base=str(tmp_path))
    assert len(ds) == 20
    with pytest.raises(tarproc.BadInput) as e:
        ds[3]
    assert "tarcat" not in str(e.value) and "tarindex" in str(e.value), str(e.value)


def test_a_member_moved_across_the_sample_boundary_is_caught(tmp_path):
    """A shard rewritten at the same size where a member moved from the next
    sample into this one: the indexed range still parsed as this sample,
    with a field missing, silently.  The header after the range is read too."""
    before = [("a.txt", b"1" * 10), ("b.cls", b"2" * 10), ("b.txt", b"3" * 10)]
    after = [("a.txt", b"1" * 10), ("a.cls", b"2" * 10), ("b.txt", b"3" * 10)]
    shard = tmp_path / "s.tar"
    shard.write_bytes(tar_bytes(before))
    tarproc.index_shards([str(shard)], str(tmp_path / "index.json"))
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"), verify="size")
    s0 = ds[0]
    assert s0["__key__"] == "a" and s0["txt"] == b"1" * 10 and "cls" not in s0
    assert ds[1]["cls"] == b"2" * 10 and ds[1]["txt"] == b"3" * 10  # the last sample: the end marker follows
    shard.write_bytes(tar_bytes(after))
    assert shard.stat().st_size == len(tar_bytes(before))
    ds = tarproc.IndexedDataset(str(tmp_path / "index.json"), verify="size")
    with pytest.raises(tarproc.BadInput, match=r"s.tar: sample 0 \('a'\).*the member after these bytes, 'a.cls', "
                                               r"belongs to this sample too: the shard changed"):
        ds[0]
