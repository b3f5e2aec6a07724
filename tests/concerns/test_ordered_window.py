"""The ordered window both engines share (tarproc/runtime/window.py):
results in input order, or as they finish; never more read ahead than the
window; an error while reading raised after the results before it; the
reader stopped and nothing left running when the consumer closes early or
the output's reader has gone. Checked on the Window itself and through both
engines (map_function on the worker pool, map_command on the spawn loop)."""

import os
import random
import threading
import time

import pytest

from tarproc.runtime.window import Window
from tarproc.stages.command import map_command
from tarproc.stages.function import map_function


def _samples(n, counter=None, fail_at=None):
    for i in range(n):
        if fail_at is not None and i == fail_at:
            raise ValueError(f"input broke at {i}")
        if counter is not None:
            counter.append(i)
        yield {"__key__": f"{i:04d}", "txt": b"text %d" % i}


def _children():
    """This process's live child processes (pids)."""
    me = str(os.getpid())
    kids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me.encode() and fields[0] != b"Z":
            kids.append(int(pid))
    return kids


def _threads():
    # the keeper thread (procs.in_keeper) lives as long as the process, by design
    return {t for t in threading.enumerate() if t.name != "tarproc-keeper"}


def _run_window(items, size, ordered, delay, workers=3):
    """Items submitted from the reading thread to a few threads that finish
    them after ``delay(index)`` seconds; what comes out and the read-ahead seen."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(workers)
    window = Window(size, ordered)
    read = []
    ahead = []

    def counted():
        for item in items:
            read.append(item)
            yield item

    def submit(index, item):
        def job():
            time.sleep(delay(index))
            window.put(index, item * 10)
        pool.submit(job)

    def handle(result):
        ahead.append(len(read) - (len(got) + 1))  # read but not yet handed out, this one included
        yield result

    got = []
    window.start(counted(), on_item=submit)
    try:
        for r in window.results(handle):
            got.append(r)
    finally:
        pool.shutdown()
    return got, ahead


def test_window_keeps_input_order_and_bounds_the_read_ahead():
    rnd = random.Random(1)
    delays = [rnd.random() * 0.01 for _ in range(200)]
    got, ahead = _run_window(range(200), 5, True, lambda i: delays[i])
    assert got == [i * 10 for i in range(200)]
    assert 3 <= max(ahead) <= 5, max(ahead)


def test_window_unordered_hands_out_as_they_finish():
    got, ahead = _run_window(range(30), 8, False, lambda i: 0.4 if i == 0 else 0.0)
    assert sorted(got) == [i * 10 for i in range(30)]
    assert got[0] != 0 and got.index(0) >= 5  # the slow first item did not hold the others back
    assert max(ahead) <= 8


def test_window_error_while_reading_comes_after_the_results_before_it():
    window = Window(4)
    window.start(_samples(50, fail_at=17), on_item=lambda i, s: window.put(i, s))
    got = []
    with pytest.raises(ValueError, match="input broke at 17"):
        for s in window.results(lambda s: [s]):
            got.append(s["__key__"])
    assert got == [f"{i:04d}" for i in range(17)]


def test_window_close_stops_a_reader_waiting_for_a_slot():
    before = _threads()
    window = Window(2)
    window.start(iter(range(10**9)))  # items taken by the consumer: nobody takes them
    time.sleep(0.05)
    assert window.take() == (0, 0) and window.take() == (1, 1) and window.take() is None
    t0 = time.monotonic()
    window.close()
    assert time.monotonic() - t0 < 1.5
    assert _threads() == before


@pytest.mark.parametrize("mode", ["function", "command"])
def test_engines_keep_order_and_bound_the_read_ahead(mode, tmp_path):
    read = []
    p = 2
    n = 40
    if mode == "function":
        gen = map_function(_samples(n, read), lambda s: (time.sleep(0.002 * (int(s["__key__"]) % 3)), s)[1], p,
                           batch=1)
        window = 2 * p + 2  # batches of one sample here
    else:
        gen = map_command(_samples(n, read), "sleep 0.0$(( 10#$(cat sample.__key__) % 3 )); cp sample.txt sample.out",
                          p, workdir=str(tmp_path), quiet=True)
        window = 2 * p + 2
    keys = []
    for s in gen:
        keys.append(s["__key__"])
        assert len(read) - len(keys) <= window, (len(read), len(keys))
    assert keys == [f"{i:04d}" for i in range(n)]


@pytest.mark.parametrize("mode", ["function", "command"])
def test_engines_unordered(mode, tmp_path):
    # the first sample is slow: unordered, others come out before it
    if mode == "function":
        gen = map_function(_samples(12), lambda s: (time.sleep(1.0 if s["__key__"] == "0000" else 0), s)[1], 2,
                           ordered=False, batch=1)
    else:
        gen = map_command(_samples(12), '[ "$(cat sample.__key__)" = 0000 ] && sleep 1; cp sample.txt sample.out', 2,
                          ordered=False, workdir=str(tmp_path), quiet=True)
    keys = [s["__key__"] for s in gen]
    assert sorted(keys) == [f"{i:04d}" for i in range(12)]
    assert keys[0] != "0000" and keys.index("0000") >= 3, keys


@pytest.mark.parametrize("mode", ["function", "command"])
def test_engines_input_error_in_the_middle(mode, tmp_path):
    if mode == "function":
        gen = map_function(_samples(30, fail_at=11), lambda s: s, 2, batch=4)
    else:
        gen = map_command(_samples(30, fail_at=11), "cp sample.txt sample.out", 2, workdir=str(tmp_path), quiet=True)
    keys = []
    with pytest.raises(ValueError, match="input broke at 11"):
        for s in gen:
            keys.append(s["__key__"])
    assert keys == [f"{i:04d}" for i in range(11)]
    if mode == "command":
        assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("mode", ["function", "command"])
def test_engines_closed_mid_stream_leave_no_process_or_thread(mode, tmp_path):
    threads = _threads()
    kids = set(_children())
    if mode == "function":
        gen = map_function(_samples(10**6), lambda s: (time.sleep(0.01), s)[1], 3)
    else:
        gen = map_command(_samples(10**6), "sleep 0.05; cp sample.txt sample.out", 3, workdir=str(tmp_path),
                          quiet=True)
    got = [next(gen)["__key__"] for _ in range(5)]
    assert got == [f"{i:04d}" for i in range(5)]
    assert set(_children()) - kids  # workers or commands were running
    t0 = time.monotonic()
    gen.close()
    assert time.monotonic() - t0 < 10
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (set(_children()) - kids or _threads() - threads):
        time.sleep(0.05)
    assert set(_children()) - kids == set()
    assert _threads() - threads == set(), _threads() - threads
    if mode == "command":
        assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("mode", ["function", "command"])
def test_engines_stop_soon_when_the_output_reader_has_gone(mode, tmp_path):
    """The stall hook raises BrokenPipeError (what it does once the output's
    reader has gone): the engine stops within about a second, with most of
    an endless input never run."""
    from tarproc.runtime.stall import Stall

    read = []
    stall = Stall()
    gone = threading.Event()

    def hook():
        if gone.is_set():
            raise BrokenPipeError("the output's reader has gone")

    stall.add(hook)
    if mode == "function":
        gen = map_function(_samples(10**6, read), lambda s: (time.sleep(0.2), s)[1], 2, stall=stall)
    else:
        gen = map_command(_samples(10**6, read), "sleep 0.2; cp sample.txt sample.out", 2, stall=stall,
                          workdir=str(tmp_path), quiet=True)
    assert next(gen)["__key__"] == "0000"
    gone.set()  # the consumer now waits for the next result: the engine notices while waiting
    t0 = time.monotonic()
    with pytest.raises(BrokenPipeError):
        for _ in gen:
            pass
    assert time.monotonic() - t0 < 2.0
    assert len(read) < 100


def test_cli_both_modes_stop_when_the_reader_leaves(sh, tmp_path):
    from helpers import tar_bytes

    (tmp_path / "all.tar").write_bytes(tar_bytes([(f"s{i:04d}.txt", b"text %d" % i) for i in range(300)]))
    (tmp_path / "f.py").write_text("import time\ndef f(s):\n    time.sleep(0.05)\n    return s\n")
    for run in ("tarproc -p 2 --map f.py:f all.tar", "tarproc -p 2 -c 'sleep 0.05; cp sample.txt sample.y' all.tar"):
        for reader in ("tarcat -c 5 > /dev/null", "head -c 1000 > /dev/null"):
            t0 = time.monotonic()
            p = sh(f"{run} | {reader}; echo \"${{PIPESTATUS[@]}}\"", ok=False, timeout=60)
            assert time.monotonic() - t0 < 4, (run, reader, p.stderr)
            assert p.stdout.split()[0] in (b"141", b"0") and b"Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("mode", ["function", "command"])
def test_engines_a_failing_sample_in_the_middle(mode, tmp_path):
    """-e abort: every sample before the failing one comes out, in order,
    then the run stops; -e skip: the others all come out, in order."""
    from tarproc.errors import SampleFailed

    def run(error_handling, errors):
        if mode == "function":
            def fn(s):
                if s["__key__"] == "0013":
                    raise RuntimeError("bad sample")
                return s
            return map_function(_samples(40), fn, 2, batch=3, error_handling=error_handling,
                                on_error=errors.append)
        return map_command(_samples(40), '[ "$(cat sample.__key__)" != 0013 ] && cp sample.txt sample.out', 2,
                           error_handling=error_handling, on_error=errors.append, workdir=str(tmp_path), quiet=True)

    keys, errors = [], []
    with pytest.raises(SampleFailed, match="0013"):
        for s in run("abort", errors):
            keys.append(s["__key__"])
    assert keys == [f"{i:04d}" for i in range(13)]
    errors = []
    keys = [s["__key__"] for s in run("skip", errors)]
    assert keys == [f"{i:04d}" for i in range(40) if i != 13]
    assert len(errors) == 1 and "0013" in errors[0]
