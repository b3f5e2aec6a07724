"""runtime/overlap: read_ahead (order, errors at their item, the bound on
items read ahead, the thread stopped on close and on Ctrl-C, a forked
child's copy refused) and WriteBehind (order, one call at a time, the first
error raised once, the rest dropped); the switch interval put back."""

import os
import signal
import sys
import threading
import time

import pytest

from tarproc.runtime.overlap import SWITCH_INTERVAL, ForkedCopy, WriteBehind, read_ahead, short_switch


def refused_in_child(fn):
    """Whether ``fn()`` raises ForkedCopy in a forked child."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        except ForkedCopy:
            os._exit(7)
        except BaseException:
            os._exit(8)
        os._exit(9)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 7


def readers():
    return [t for t in threading.enumerate() if t.name == "tarproc-readahead"]


def test_items_in_order_and_an_error_at_its_item():
    def items():
        yield from range(5)
        raise ValueError("row group 5 is damaged")

    got = []
    with pytest.raises(ValueError, match="row group 5"):
        for x in read_ahead(items()):
            got.append(x)
    assert got == [0, 1, 2, 3, 4]
    assert not readers()


@pytest.mark.parametrize("depth", [1, 3])
def test_never_more_than_depth_ahead(depth):
    made = []

    def items():
        for i in range(50):
            made.append(i)
            yield i

    for x in read_ahead(items(), depth=depth):
        time.sleep(0.002)  # (a slow consumer: the reader runs into the bound)
        # read: the items handed out, up to depth in the queue, one being put
        assert len(made) <= x + 1 + depth + 1, (x, len(made))
    assert made == list(range(50))


def test_close_early_stops_the_thread_and_puts_the_switch_interval_back():
    before = sys.getswitchinterval()
    gen = read_ahead(iter(range(10 ** 9)))
    assert next(gen) == 0
    assert sys.getswitchinterval() == pytest.approx(min(before, SWITCH_INTERVAL))
    gen.close()
    assert not readers()
    assert sys.getswitchinterval() == before


def test_two_at_once_from_threads_put_the_interval_back_once_both_end():
    before = sys.getswitchinterval()
    a = read_ahead(iter(range(100)))
    next(a)
    out = []
    t = threading.Thread(target=lambda: out.append(sum(read_ahead(iter(range(1000))))))
    t.start()
    t.join()
    assert out == [sum(range(1000))]
    assert sys.getswitchinterval() == pytest.approx(min(before, SWITCH_INTERVAL))  # a still runs
    assert list(a) == list(range(1, 100))
    assert sys.getswitchinterval() == before


def test_ctrl_c_while_waiting_stops_the_reader():
    release = threading.Event()

    def items():
        yield 1
        release.wait(5)  # a read that takes long
        yield 2

    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    gen = read_ahead(items())
    try:
        with pytest.raises(KeyboardInterrupt):
            for x in gen:
                assert x == 1
                timer.start()
                time.sleep(5)  # interrupted here
    finally:
        release.set()
        timer.cancel()
    gen.close()
    assert not readers()


def test_a_forked_child_cannot_go_on_reading():
    gen = read_ahead(iter(range(100)))
    assert next(gen) == 0
    assert refused_in_child(lambda: next(gen))  # (its copy has no reader thread)
    assert list(gen) == list(range(1, 100))  # the parent's read goes on


def test_a_forked_child_has_the_interval_as_before_and_its_own_lock():
    from tarproc.runtime import overlap

    before = sys.getswitchinterval()
    gen = read_ahead(iter(range(100)))
    next(gen)
    with overlap._lock:  # (held by another thread at the fork)
        pid = os.fork()
        if pid == 0:
            signal.alarm(10)  # (a child stuck on the lock dies, and the test fails, instead of hanging)
            ok = sys.getswitchinterval() == before
            with overlap.short_switch():  # (would wait forever on the parent's held lock)
                ok = ok and sys.getswitchinterval() < before
            ok = ok and sys.getswitchinterval() == before
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    gen.close()
    assert sys.getswitchinterval() == before


def test_write_behind_runs_calls_in_order_one_at_a_time():
    before = sys.getswitchinterval()
    done, running = [], []

    def write(i):
        running.append(i)
        assert len(running) == 1  # never two at once
        time.sleep(0.01)
        done.append(i)
        running.pop()

    with WriteBehind() as behind:
        for i in range(10):
            behind.call(write, i)
            assert len(done) >= i  # the call before the one just handed over has returned
        assert sys.getswitchinterval() == pytest.approx(min(before, SWITCH_INTERVAL))
        behind.finish()
        assert done == list(range(10))
    assert sys.getswitchinterval() == before
    assert not [t for t in threading.enumerate() if t.name == "tarproc-writebehind"]


def test_write_behind_raises_the_first_error_once_and_drops_the_rest():
    done = []

    def write(i):
        if i == 2:
            raise OSError(28, "No space left on device")
        done.append(i)

    behind = WriteBehind()
    with pytest.raises(OSError, match="No space"):
        for i in range(10):
            behind.call(write, i)
        behind.finish()
    behind.close()
    assert done == [0, 1]
    # an error in the last call comes from finish
    behind = WriteBehind()
    behind.call(write, 1)
    behind.call(write, 2)
    with pytest.raises(OSError):
        behind.finish()
    behind.close()


def test_write_behind_close_waits_for_the_running_call_and_drops_the_waiting():
    started, done = threading.Event(), []

    def write(i):
        started.set()
        time.sleep(0.1)
        done.append(i)

    behind = WriteBehind()
    behind.call(write, 0)
    started.wait(5)
    behind.close()  # (aborting: a sink is closed right after)
    assert done == [0]


def test_write_behind_in_a_forked_child_is_refused():
    behind = WriteBehind()
    behind.call(lambda: None)
    assert refused_in_child(lambda: behind.call(lambda: None))
    behind.finish()
    behind.close()


def test_a_decoder_thread_runs_with_the_short_switch_interval(tmp_path):
    """gzip decoded in a thread beside the parser (a file under 1 MiB): the
    interval is short while it runs and put back once the input is read.
    (16 MB decoded: more than the thread's queue holds, so it is still
    running while the first samples are read.)"""
    import gzip
    import io
    import tarfile

    import tarproc

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for i in range(200):
            info = tarfile.TarInfo(f"s{i:03d}.txt")
            info.size = 80_000
            t.addfile(info, io.BytesIO(b"x" * 80_000))
    (tmp_path / "a.tar.gz").write_bytes(gzip.compress(buf.getvalue()))
    before = sys.getswitchinterval()
    seen = set()
    n = 0
    for sample in tarproc.iter_samples(str(tmp_path / "a.tar.gz")):
        seen.add(round(sys.getswitchinterval(), 9))
        n += 1
    assert n == 200
    assert round(min(before, SWITCH_INTERVAL), 9) in seen
    for _ in range(100):  # (the decoder thread ends just after its last chunk)
        if sys.getswitchinterval() == before:
            break
        time.sleep(0.01)
    assert sys.getswitchinterval() == before


def test_a_worker_pool_keeps_the_default_interval_while_it_runs():
    """While map_function's pool runs (its feeder and collector threads hand
    the GIL over often) an overlap leaves the interval alone; before and
    after, it lowers it."""
    from tarproc.stages.function import map_function

    before = sys.getswitchinterval()
    seen = []

    def samples():
        for i in range(40):
            with short_switch():
                seen.append(sys.getswitchinterval())
            yield {"__key__": f"s{i:03d}", "txt": b"x"}

    with short_switch():
        assert sys.getswitchinterval() == pytest.approx(min(before, SWITCH_INTERVAL))
    out = list(map_function(samples(), lambda s: s, parallel=2))
    assert len(out) == 40
    assert seen[-1] == before  # the pool was running by then
    with short_switch():
        assert sys.getswitchinterval() == pytest.approx(min(before, SWITCH_INTERVAL))
    assert sys.getswitchinterval() == before
