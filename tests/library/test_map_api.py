"""tarproc's map_command / map_function as a library: map_command / map_function from Python."""

import os

import pytest

from tarproc import SampleFailed, Stats, UsageError
import tarproc
from tarproc.stages.command import bad_field_name, map_command
from tarproc.stages.function import load_function, map_function
from helpers import png_bytes, tar_bytes


def samples(n):
    return [{"__key__": f"{i:03d}", "txt": f"t{i}".encode()} for i in range(n)]


def test_map_command_order_stats_and_cleanup(tmp_path):
    stats = Stats()
    out = list(map_command(samples(12), "sleep 0.0$((RANDOM % 5)); rev < sample.txt > sample.rev", parallel=3,
                           workdir=str(tmp_path), stats=stats))
    assert [s["__key__"] for s in out] == [f"{i:03d}" for i in range(12)]
    assert out[11]["rev"] == b"11t\n" or out[11]["rev"] == b"11t"
    assert stats.failed == 0 and os.listdir(tmp_path) == []


def test_map_command_bad_fields_and_errors(tmp_path):
    messages = []
    bad = [{"__key__": "a", "x/y": b"1"}, {"__key__": "b", "a\tb": b"1"}, {"__key__": "c", "ok": b"1"},
           {"__key__": "d", "..": b"1"}]  # (a field "..", the file sample..., reads back)
    stats = Stats()
    out = list(map_command(bad, "true", parallel=2, workdir=str(tmp_path), stats=stats, on_error=messages.append))
    assert [(s["__key__"], sorted(s)) for s in out] == [("c", ["__key__", "ok"]), ("d", ["..", "__key__"])]
    assert stats.failed == 2
    assert "'/'" in messages[0] and "control characters" in messages[1]
    with pytest.raises(SampleFailed):
        list(map_command(samples(3), "exit 1", parallel=1, error_handling="abort", workdir=str(tmp_path)))
    assert os.listdir(tmp_path) == []
    assert bad_field_name("jpg") is None and bad_field_name("a\0b")


def test_closing_early_kills_and_cleans(tmp_path):
    it = map_command(samples(20), "echo x > sample.y; sleep 0.2", parallel=2, workdir=str(tmp_path))
    first = next(it)
    assert first["y"] == b"x\n"
    it.close()
    assert os.listdir(tmp_path) == []


def double(sample):
    return [sample, dict(sample, __key__=sample["__key__"] + "b")]


def test_map_function_callable_and_spec():
    out = list(map_function(samples(50), double, parallel=2, batch=7))
    assert [s["__key__"] for s in out][:4] == ["000", "000b", "001", "001b"] and len(out) == 100
    out = list(map_function(samples(5), "json:dumps", parallel=1, error_handling="ignore",
                            on_error=lambda m: None))
    assert [s["__key__"] for s in out] == [f"{i:03d}" for i in range(5)]  # failed, kept as input
    with pytest.raises(UsageError):
        load_function("nosuchmodule_xyz:f")
    with pytest.raises(UsageError):
        map_command(samples(1), "true", error_handling="bogus")


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


def small_tar(n=4, ext="png"):
    return tar_bytes([m for i in range(n) for m in ((f"s{i}.{ext}", png_bytes(4, 4, seed=i)),
                                                    (f"s{i}.cls", str(i).encode()))])


def test_map_function_chained_into_map_command(tmp_path):
    # the README's Python example: failed before the runtime rewrite (the pool was started from a thread)
    import tarproc

    (tmp_path / "in.tar").write_bytes(small_tar(2))

    def tag(sample):
        sample["tag"] = b"x"
        return sample

    mapped = tarproc.map_function(tarproc.iter_samples(str(tmp_path / "in.tar")), tag, parallel=2)
    out = list(tarproc.map_command(mapped, "cp sample.tag sample.tag2", parallel=2))
    assert [s["tag2"] for s in out] == [b"x", b"x"]
