"""Settings passed in (tarproc/settings.py): the ``TARPROC_*`` variables are
read at the command line's edge only; the library takes keyword arguments
(or a :class:`~tarproc.settings.Settings`) and ignores the environment,
except :class:`~tarproc.IndexedDataset`, the one documented entry point that
honours it."""

import ast
import gzip
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import tarproc
from tarproc.settings import DEFAULTS, FIELDS, Settings

from helpers import png_bytes, read_tar, tar_bytes

from conftest import ROOT as _ROOT  # noqa: E402 (the project root, at any depth of tests/)

ROOT = pathlib.Path(_ROOT)
PACKAGE = ROOT / "tarproc"
VENV_BIN = os.path.dirname(sys.executable)


# ------------------------------------------------------------ who reads the environment


def _library_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("cli/") or rel == "settings.py":
            continue
        yield rel, ast.parse(path.read_text(), rel)


def _env_reads(tree):
    """``(line, key)`` of every read of one environment variable:
    ``os.environ.get(K)``, ``os.environ[K]``, ``os.getenv(K)``, ``environ.get(K)``;
    ``key`` is the constant name, or None when it is computed."""

    def is_environ(node):
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
            (isinstance(node, ast.Name) and node.id == "environ")

    def key_of(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):  # f"TARPROC_READ_{scheme}": its constant start
            first = node.values[0] if node.values else None
            if isinstance(first, ast.Constant) and str(first.value).startswith("TARPROC_"):
                return str(first.value)
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            if (f.attr in ("get", "pop", "setdefault") and is_environ(f.value)) or \
                    (f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os"):
                yield node.lineno, key_of(node.args[0])
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            yield node.lineno, key_of(node.slice)


def test_no_library_module_reads_a_tarproc_variable():
    """Only tarproc/cli and tarproc/settings.py read TARPROC_* (the edge); the
    library reads no environment variable through a computed name either
    (that is how a TARPROC_* read hides)."""
    bad = []
    for rel, tree in _library_modules():
        for line, key in _env_reads(tree):
            if key is None or key.startswith("TARPROC_"):
                bad.append(f"{rel}:{line}: {key or 'a computed name'}")
    assert not bad, "library modules reading the environment:\n" + "\n".join(bad)


def test_settings_from_the_environment_only_at_the_edge():
    """Settings.from_environ is called by the commands (tarproc/cli) and by
    IndexedDataset, the documented entry point that honours the environment;
    no library module keeps the old helpers that read it at import."""
    callers = []
    for rel, tree in _library_modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "from_environ":
                callers.append(rel)
            if isinstance(node, ast.Name) and node.id in ("env_int", "_env_limit"):
                callers.append(f"{rel} ({node.id})")
    assert callers == ["sources/indexed.py"], callers


def test_defaults_are_the_library_defaults():
    """One set of defaults: Settings() equals the constants the library
    uses when no value is passed."""
    from tarproc.core import blob, limits, pack
    from tarproc.runtime import capture, lease
    from tarproc.sources import create, indexed, resume

    expected = {
        "preview_bytes": limits.PREVIEW_BYTES, "max_pixels": limits.MAX_PIXELS, "json_depth": limits.JSON_DEPTH,
        "tail_bytes": limits.TAIL_BYTES, "name_chars": limits.NAME_CHARS, "check_keys": limits.CHECK_KEYS,
        "check_fields": limits.CHECK_FIELDS, "scan_memory": limits.SCAN_MEMORY, "sparse_holes": limits.SPARSE_HOLES, "max_ratio": limits.MAX_RATIO,
        "ratio_floor": limits.RATIO_FLOOR, "max_urls": limits.MAX_URLS, "max_plan": create.MAX_PLAN,
        "max_index": indexed.MAX_INDEX, "max_sample": indexed.MAX_SAMPLE, "sample_memory": pack.SAMPLE_MEMORY,
        "capture_spill": capture.SPILL_BYTES, "blob_threshold": blob.DEFAULT_THRESHOLD,
        "foreign_stale_seconds": lease.FOREIGN_STALE_SECONDS, "retries": resume.RETRIES,
        "stall_timeout": resume.STALL_TIMEOUT,
    }
    for name, value in expected.items():
        assert getattr(DEFAULTS, name) == value, name


def test_every_variable_in_the_docs_is_a_setting():
    """Each TARPROC_* name the docs give is a setting (or a client command
    TARPROC_<KIND>_<SCHEME>, or tarserve's token, an option's default)."""
    known = {env for _, env, _, _ in FIELDS} | {"TARPROC_SERVE_TOKEN"}
    from tarproc.settings import COMMAND_KINDS

    kinds = re.compile(r"TARPROC_(" + "|".join(COMMAND_KINDS) + r"|<ACTION>)(_[A-Z0-9<>]+)?$")
    texts = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    unknown = set()
    for path in texts:
        for name in re.findall(r"TARPROC_[A-Z0-9_<>]*[A-Z0-9>]", path.read_text()):
            if name not in known and not kinds.match(name):
                unknown.add(f"{path.name}: {name}")
    assert not unknown, sorted(unknown)


# ------------------------------------------------------------ parsing


@pytest.mark.parametrize("env, field, value", [
    ({"TARPROC_MAX_URLS": "50"}, "max_urls", 50),
    ({"TARPROC_MAX_RATIO": "1e3"}, "max_ratio", 1000),
    ({"TARPROC_BLOB_THRESHOLD": "64KiB"}, "blob_threshold", 64 << 10),
    ({"TARPROC_BLOB_THRESHOLD": "0"}, "blob_threshold", 0),
    ({"TARPROC_PREVIEW_BYTES": "1MB"}, "preview_bytes", 10 ** 6),
    ({"TARPROC_STALL_TIMEOUT": "0"}, "stall_timeout", 0.0),
    ({"TARPROC_RETRIES": "0"}, "retries", 0),
    ({"TARPROC_REMOTE_COMMIT": "move"}, "remote_commit", "move"),
    ({"TARPROC_MAX_URLS": ""}, "max_urls", DEFAULTS.max_urls),
])
def test_from_environ_parses(env, field, value):
    assert getattr(Settings.from_environ(env), field) == value


@pytest.mark.parametrize("name, text", [
    ("TARPROC_MAX_URLS", "abc"), ("TARPROC_MAX_URLS", "0"), ("TARPROC_MAX_URLS", "-5"),
    ("TARPROC_PREVIEW_BYTES", "lots"), ("TARPROC_SPARSE_HOLES", "0"), ("TARPROC_STALL_TIMEOUT", "soon"),
    ("TARPROC_FOREIGN_STALE_SECONDS", "nan"), ("TARPROC_RETRIES", "-1"),
])
def test_a_bad_value_is_a_usage_error_naming_the_variable(name, text):
    with pytest.raises(tarproc.UsageError, match=re.escape(name)):
        Settings.from_environ({name: text})


def test_client_commands_and_copies():
    s = Settings.from_environ({"TARPROC_READ_GS": "cat x", "TARPROC_WRITE_MEM": "cat > y", "TARPROC_OTHER_X": "z",
                               "TARPROC_EXISTS_S3": ""})
    assert s.command("READ", "gs") == "cat x" and s.command("WRITE", "mem") == "cat > y"
    assert s.command("READ", "s3") is None and s.command("EXISTS", "s3") is None
    assert Settings.from_dict(json.loads(json.dumps(s.as_dict()))) == s
    t = s.replace(max_urls=3, commands={"RANGE_GS": "r"})
    assert t.max_urls == 3 and t.command("RANGE", "gs") == "r" and t.command("READ", "gs") is None
    with pytest.raises(Exception):
        s.max_urls = 1  # frozen: shared safely between threads and workers
    hash(s)


# ------------------------------------------------------------ the library ignores the environment

HOSTILE = {
    "TARPROC_MAX_URLS": "abc", "TARPROC_NAME_CHARS": "5", "TARPROC_MAX_PIXELS": "1", "TARPROC_JSON_DEPTH": "x",
    "TARPROC_BLOB_THRESHOLD": "garbage", "TARPROC_MAX_RATIO": "1", "TARPROC_RATIO_FLOOR": "1",
    "TARPROC_PREVIEW_BYTES": "-1", "TARPROC_SAMPLE_MEMORY": "1", "TARPROC_CAPTURE_SPILL": "nope",
    "TARPROC_MAX_PLAN": "1", "TARPROC_CHECK_FIELDS": "1", "TARPROC_SPARSE_HOLES": "1", "TARPROC_TAIL_BYTES": "1",
    "TARPROC_REMOTE_COMMIT": "teleport", "TARPROC_SPOOL_DIR": "/nonexistent", "TARPROC_WRITE_FILE": "exit 1",
}

_IMPORT_ALL = r"""
import importlib, io, json, os, pkgutil, sys, gzip
import tarproc
for m in pkgutil.walk_packages(tarproc.__path__, "tarproc."):
    importlib.import_module(m.name)
from tarproc.core import limits, blob, pack
out = {}
out["limits"] = [limits.MAX_URLS, limits.NAME_CHARS, limits.MAX_PIXELS, limits.PREVIEW_BYTES, limits.MAX_RATIO]
out["threshold"] = blob.Spooler().threshold
out["budget"] = pack.sample_budget(blob.Spooler())
out["urls"] = len(limits.bounded_list(range(5000)))
out["name"] = len(limits.shorten("n" * 1000))
limits.check_pixels(100, 100)
out["json"] = limits.json_loads("[[[[1]]]]")
samples = list(tarproc.iter_samples(sys.argv[1]))
out["samples"] = [s["__key__"] for s in samples]
with tarproc.open_sink(sys.argv[2]) as sink:
    sink.write(open(sys.argv[1], "rb").read())
print(json.dumps(out))
"""


def test_importing_the_library_with_hostile_settings_changes_nothing(tmp_path):
    """Hostile TARPROC_* values in the environment: every module imports,
    and the API behaves as with none (bounds, spooling, reading a gzip shard
    past a 1:1 "ratio", writing a file)."""
    shard = tar_bytes([(f"k{i}.txt", b"x" * 5000) for i in range(3)])
    (tmp_path / "in.tar.gz").write_bytes(gzip.compress(shard))
    runs = {}
    for name, extra in (("clean", {}), ("hostile", HOSTILE)):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TARPROC_")}
        env.update(extra)
        p = subprocess.run([sys.executable, "-c", _IMPORT_ALL, "in.tar.gz", f"{name}.tar"], cwd=tmp_path, env=env,
                           capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        runs[name] = json.loads(p.stdout)
        assert read_tar((tmp_path / f"{name}.tar").read_bytes()) == read_tar(shard)
    assert runs["hostile"] == runs["clean"]
    assert runs["clean"]["threshold"] == 4 << 20 and runs["clean"]["name"] < 250


def test_the_api_ignores_the_environment_in_process(tmp_path, monkeypatch):
    """Set in this process, after import: still no effect on the API."""
    shard = tar_bytes([("a.txt", b"\0" * 300_000)])
    (tmp_path / "z.tar.gz").write_bytes(gzip.compress(shard))
    (tmp_path / "list.txt").write_text("z.tar.gz\n")
    for k, v in {"TARPROC_MAX_RATIO": "2", "TARPROC_RATIO_FLOOR": "1000", "TARPROC_MAX_URLS": "1",
                 "TARPROC_READ_FILE": "exit 3", "TARPROC_CHECK_FIELDS": "1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    assert [s["txt"] for s in tarproc.iter_samples("z.tar.gz")] == [b"\0" * 300_000]
    assert list(tarproc.expand_urls([], "list.txt")) == ["z.tar.gz"]
    from tarproc.core.limits import bounded_list

    assert bounded_list(["a", "b", "c"]) == ["a", "b", "c"]
    assert tarproc.check_shards(["z.tar.gz"])["ok"]


# ------------------------------------------------------------ the API takes the bound as a keyword


def test_api_bounds_are_keywords(tmp_path):
    from tarproc.core import limits
    from tarproc.core.blob import Spooler
    from tarproc.core.pack import sample_budget

    with pytest.raises(tarproc.UsageError, match="more than 2 entries"):
        limits.bounded_list(range(3), max_urls=2)
    assert limits.bounded_list(range(3), max_urls=3) == [0, 1, 2]
    with pytest.raises(limits.OverBudget):
        limits.open_image(png_bytes(32, 24), limit=100)
    assert limits.open_image(png_bytes(32, 24), limit=1000).size == (32, 24)
    with pytest.raises(tarproc.BadInput, match="more than 5:1"):
        limits.check_ratio("u", "gzip", 1000, 100, max_ratio=5, ratio_floor=10)
    limits.check_ratio("u", "gzip", 1000, 100)  # the defaults: far from a bomb
    assert sample_budget(Spooler(1 << 20, sample_memory=1000)) == 1000
    assert sample_budget(Spooler(1 << 20)) == 4 << 20


def test_api_settings_reach_reading_checking_and_plans(tmp_path):
    shard = tar_bytes([("a.txt", b"\0" * 300_000)] + [(f"b.f{i}", b"x") for i in range(5)])
    (tmp_path / "z.tar.gz").write_bytes(gzip.compress(shard))
    z = str(tmp_path / "z.tar.gz")
    bomb = Settings(max_ratio=2, ratio_floor=1000)
    with pytest.raises(tarproc.BadInput, match="decodes to more than 2:1"):
        list(tarproc.iter_samples(z, settings=bomb))
    assert len(list(tarproc.iter_samples(z))) == 2
    kinds = [p["kind"] for p in tarproc.check_shards([z], settings=Settings(check_fields=2))["shards"][0]["problems"]]
    assert "too_many_fields" in kinds, kinds
    assert "too_many_fields" not in [p["kind"] for p in tarproc.check_shards([z])["shards"][0]["problems"]]
    (tmp_path / "plan.tsv").write_text("k\ta.txt\tz.tar.gz\n")
    with pytest.raises(tarproc.BadInput, match="larger than 5 bytes"):
        tarproc.read_plan(str(tmp_path / "plan.tsv"), max_plan=5)


def test_api_client_commands_come_from_settings(tmp_path):
    """A scheme's client command comes from the settings passed, for
    reading (open_source, iter_samples) and writing (open_sink)."""
    shard = tar_bytes([("a.txt", b"hello")])
    (tmp_path / "src.tar").write_bytes(shard)
    s = Settings(commands={"READ_MEM": f'f={{url}}; cat "{tmp_path}/${{f#mem://}}"',
                           "WRITE_MEM": f'f={{url}}; cat > "{tmp_path}/up-${{f#mem://}}"'},
                 spool_dir=str(tmp_path))
    assert [x["txt"] for x in tarproc.iter_samples("mem://src.tar", settings=s)] == [b"hello"]
    with tarproc.open_sink("mem://out.tar", settings=s) as sink:
        sink.write(shard)
    assert (tmp_path / "up-out.tar").read_bytes() == shard
    with pytest.raises(tarproc.UsageError, match="unknown URL scheme"):
        tarproc.open_source("mem://src.tar")  # no settings: no such client


def test_indexed_dataset_honours_the_environment_unless_given_settings(tmp_path, monkeypatch):
    (tmp_path / "a.tar").write_bytes(tar_bytes([(f"k{i}.txt", b"v%d" % i) for i in range(4)]))
    tarproc.index_shards([str(tmp_path / "a.tar")], str(tmp_path / "i.json"))
    monkeypatch.setenv("TARPROC_MAX_INDEX", "10")
    with pytest.raises(tarproc.BadInput, match="larger than 10 bytes"):
        len(tarproc.IndexedDataset(str(tmp_path / "i.json")))
    ds = tarproc.IndexedDataset(str(tmp_path / "i.json"), settings=Settings())
    assert len(ds) == 4 and ds[2]["txt"] == b"v2" and ds[1:3][0]["txt"] == b"v1"
    import pickle

    assert pickle.loads(pickle.dumps(ds))[3]["txt"] == b"v3"  # a worker's copy keeps the settings
    with pytest.raises(tarproc.BadInput, match="a damaged index"):
        tarproc.IndexedDataset(str(tmp_path / "i.json"), settings=Settings(max_sample=10))[0]


# ------------------------------------------------------------ the commands honour the variables


def _run(cmd, cwd, env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("TARPROC_")}
    full.update(env)
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=full, capture_output=True,
                          timeout=120)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("settings")
    (d / "in.tar").write_bytes(tar_bytes([("a.json", b'{"x": [[[1]]]}'), ("a.png", png_bytes(32, 24))]
                                         + [(f"a.f{i}", b"v") for i in range(5)]))
    (d / "bomb.tar.gz").write_bytes(gzip.compress(tar_bytes([("z.bin", b"\0" * 3_000_000)])))
    for i in range(5):
        (d / f"s{i}.tar").write_bytes(tar_bytes([(f"k{i}.txt", b"t")]))
    (d / "plan.tsv").write_text("k1\tone.txt\tplan.tsv\n")
    (d / "fail.txt").write_text('one.txt pipe:printf "%020000dEND" 0 >&2; exit 3\n')  # a line of 20003 characters
    (d / LONG).parent.mkdir(parents=True)
    (d / LONG).write_bytes(bytes(range(256)) * 4)  # not a tar archive, under a name of 250 characters
    (d / "t.jsonl").write_text('{"__key__": "a", "deep": [[[[[[[[1]]]]]]]]}\n')
    with open(d / "sp.bin", "wb") as f:  # a GNU sparse member: 3 MiB of holes, then "tail"
        f.truncate(3 << 20)
        f.seek(3 << 20)
        f.write(b"tail")
    subprocess.run(["tar", "--sparse", "-cf", "sp.tar", "sp.bin"], cwd=d, check=True)
    (d / "sp.tar.gz").write_bytes(gzip.compress((d / "sp.tar").read_bytes()))
    for name in ("sp.tar", "sp.tar.gz"):
        tarproc.index_shards([str(d / name)], str(d / (name + ".json")))
    (d / "read.py").write_text("import sys, tarproc\ntry:\n    print(len(tarproc.IndexedDataset(sys.argv[1])[0]['bin']))\n"
                               "except tarproc.BadInput as e:\n    print(e)\n")
    return d


LONG = "d" * 120 + "/" + "e" * 120 + "/bad.tar"
_FAIL = 'for i in $(seq 30); do printf "%01499d\\n" $i; done; exit 1'  # 30 lines of 1500 bytes
_READ = sys.executable + " read.py {}"  # (IndexedDataset given no settings reads the environment)


# (variable, value, command, what shows the default, what shows the value): each run both ways
COMMANDS = [
    ("TARPROC_MAX_URLS", "3", "tarindex 's{0..4}.tar' -o i.json", "", "more than 3 entries"),
    ("TARPROC_CHECK_FIELDS", "3", "tarcheck --json in.tar", "", "too_many_fields"),
    ("TARPROC_SCAN_MEMORY", "100", "tar2tsv in.tar s1.tar", "\tt\n", "columns taken from the first 1 samples"),
    ("TARPROC_JSON_DEPTH", "2", "tar2tsv --format jsonl -f json.x in.tar", '"json.x": [[[1]]]', '"json.x": null'),
    ("TARPROC_JSON_DEPTH", "2", "tarfirst -f png --select '_.json.json[\"x\"] == [[[1]]]' in.tar | wc -c", "",
     "nested deeper than 2 levels"),
    ("TARPROC_MAX_PIXELS", "100", "tarshow -f png --images always in.tar", "", "not drawn"),
    ("TARPROC_MAX_PLAN", "10", "tarcreate plan.tsv -o plan.tar", "", "larger than 10 bytes (TARPROC_MAX_PLAN)"),
    ("TARPROC_MAX_RATIO", "50", "TARPROC_RATIO_FLOOR=1000000 tarcat bomb.tar.gz -o b.tar", "",
     "more than 50:1"),
    # the one-stream gzip shard indexed with checkpoints (indexed_gzip) too: that path forgot the bound
    ("TARPROC_MAX_RATIO", "50", "TARPROC_RATIO_FLOOR=1000000 tarindex bomb.tar.gz -o b.json", "",
     "more than 50:1"),
    ("TARPROC_READ_MEM", 'f={url}; cat "${f#mem://}"', "tarcat mem://s1.tar | tar tf -", "unknown URL scheme",
     "k1.txt"),
    ("TARPROC_SPOOL_DIR", "/nonexistent-spool", "tarcat s1.tar -o mem://o.tar && ls up-o.tar", "up-o.tar",
     "spool directory"),
    ("TARPROC_NAME_CHARS", "20", "tarcat " + "n" * 150 + ".tar", "n" * 150, "chars]"),
    # the bound reaches the names a library exception carries (a damaged archive's source)
    ("TARPROC_NAME_CHARS", "1000", "tarcat " + LONG, "chars]", "e" * 120 + "/bad.tar: offset 0"),
    # the failed command's last 10 lines, past 8 KiB: the whole of each, the first too
    ("TARPROC_TAIL_BYTES", "64KiB", f"tarproc -c '{_FAIL}' in.tar -o /dev/null", "", "0021\n"),
    # the stderr tail kept of a failed input command: its one line of 20003 characters, cut to 8 KiB or whole
    ("TARPROC_TAIL_BYTES", "64KiB", "tarcat 'pipe:printf \"%020000dEND\" 0 >&2; exit 3'", "…[7912 chars]…",
     "…[19723 chars]…"),
    ("TARPROC_TAIL_BYTES", "64KiB", "tarcreate --plan-format lines fail.txt -o /dev/null", "…[7912 chars]…",
     "…[19723 chars]…"),
    ("TARPROC_JSON_DEPTH", "5", "tarjoin in.tar --table t.jsonl -o /dev/null", "",
     "nested deeper than 5 levels"),
    ("TARPROC_SPARSE_HOLES", "1MiB", _READ.format("sp.tar.json"), "3145732", "set TARPROC_SPARSE_HOLES higher"),
    ("TARPROC_SPARSE_HOLES", "1MiB", _READ.format("sp.tar.gz.json"), "3145732", "set TARPROC_SPARSE_HOLES higher"),
]


@pytest.mark.parametrize("name, value, cmd, default_shows, value_shows", COMMANDS,
                         ids=[f"{c[0]}-{c[2].split()[0]}" for c in COMMANDS])
def test_the_commands_honour_the_variables(data, name, value, cmd, default_shows, value_shows):
    env = {"TARPROC_WRITE_MEM": 'f={url}; cat > "up-${f#mem://}"'} if "mem://o" in cmd else {}
    before = _run(cmd, data, env)
    after = _run(cmd, data, {**env, name: value})
    out_before = (before.stdout + before.stderr).decode("utf-8", "replace")
    out_after = (after.stdout + after.stderr).decode("utf-8", "replace")
    assert value_shows not in out_before, out_before
    assert value_shows in out_after, out_after
    if default_shows:
        assert default_shows in out_before and default_shows not in out_after, (out_before, out_after)
    assert "Traceback" not in out_after


@pytest.mark.parametrize("name", ["sp.tar", "sp.tar.gz"])
def test_a_sample_over_a_bound_is_told_as_the_bound_not_as_a_changed_shard(data, name):
    # the shard is as indexed: the bound set for the read is lower than its sample needs
    ds = tarproc.IndexedDataset(str(data / (name + ".json")), settings=Settings(sparse_holes=1 << 20))
    with pytest.raises(tarproc.BadInput) as e:
        ds[0]
    msg = str(e.value)
    assert "1048576 byte limit" in msg and "set TARPROC_SPARSE_HOLES higher" in msg, msg
    assert "changed" not in msg and "index it again" not in msg, msg
    assert len(tarproc.IndexedDataset(str(data / (name + ".json")), settings=Settings())[0]["bin"]) == 3145732


@pytest.mark.parametrize("cmd", ["tarcat in.tar", "tar2tsv in.tar", "tarindex in.tar -o i2.json",
                                 "kujob -s '{0..1}' -- true"])
def test_a_bad_value_is_one_line_exit_2(data, cmd):
    p = _run(cmd, data, {"TARPROC_MAX_URLS": "many"})
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1, err
    assert "TARPROC_MAX_URLS='many'" in err and "Traceback" not in err, err
    assert p.stdout == b""
    h = _run(cmd.split()[0] + " --help", data, {"TARPROC_MAX_URLS": "many"})  # help still shows
    assert h.returncode == 0 and b"example" in h.stdout


def test_the_blob_threshold_reaches_tarpcat_workers(data):
    """tarpcat's workers get the spooler and settings as arguments (they
    used to inherit TARPROC_BLOB_THRESHOLD written into os.environ)."""
    big = _run("tarpcat -w 2 bomb.tar.gz s1.tar | tar tvf -", data, {"TARPROC_BLOB_THRESHOLD": "1KiB",
                                                                    "TARPROC_MAX_RATIO": "100000"})
    assert big.returncode == 0, big.stderr
    assert b"3000000" in big.stdout and b"k1.txt" in big.stdout
    p = _run("tarpcat -w 2 's{0..4}.tar' > /dev/null", data, {"TARPROC_MAX_URLS": "3"})
    assert p.returncode == 2 and b"more than 3 entries" in p.stderr, p.stderr


def test_a_per_call_pixel_budget_leaves_pillows_global_fence_alone():
    """A budget passed to one call must not become the process's: Pillow's
    MAX_IMAGE_PIXELS is global, so setting it there leaked a small budget
    into every later image the process (or the caller) opened."""
    import io

    from PIL import Image

    from tarproc.core import limits

    buf = io.BytesIO()
    Image.new("RGB", (140, 172)).save(buf, "PNG")
    before = Image.MAX_IMAGE_PIXELS
    with pytest.raises(limits.OverBudget):
        limits.open_image(buf.getvalue(), 1000)
    assert Image.MAX_IMAGE_PIXELS == before
    with limits.open_image(buf.getvalue(), 10**6) as img:
        assert img.size == (140, 172)
