"""tar2json's YAML: scalars plain exactly where PyYAML's safe_dump leaves them
plain for ordinary names and words, quoted where a plain scalar would read
back as something else; every document reads back to the JSON lines output.
A `json` field is the value it holds, in tar2json and tar2tsv --format jsonl."""

import io
import json
import os
import subprocess
import tarfile

import pytest
import yaml

from helpers import one_line
from helpers import text_shard


def shard(path, samples):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for key, fields in samples:
            for field, value in fields.items():
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(value)
                tf.addfile(info, io.BytesIO(value))
    return path


def run(cmd, cwd):
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    return p.stdout.decode()


# values PyYAML writes plain; ours must be plain too, the same line
PLAIN = ["a", "hello world", "n07734744", "train/n0142", "x_y.z-1", "/abs/path", "_under", "CamelCase"]
# values that need quotes (another type, an indicator, spaces at an end, non-ASCII, empty ...)
QUOTED = ["", "yes", "No", "TRUE", "null", "Null", "~", "y", "n", "on", "OFF", "1", "1e3", "0x10", ".inf", ".nan",
          "2001-12-14", "1:20", "- x", "a: b", "#c", "a #c", " lead", "trail ", "two  spaces", "{x}", "[x]", "'q'",
          '"dq"', "%t", "@a", "`b", "!t", "&a", "*a", "|", ">", "caf\u00e9", "tab\tx", "line\nbreak", "-1", "+1",
          "a,b", "?x", "<<"]


def test_plain_where_pyyaml_is_plain_and_quoted_where_needed(tmp_path):
    values = PLAIN + QUOTED
    shard(tmp_path / "t.tar", [(f"k{i:03d}", {"txt": v.encode()}) for i, v in enumerate(values)])
    out = run("tar2json -k txt t.tar", tmp_path)
    lines = [line for line in out.split("---\n") if line]
    assert len(lines) == len(values)
    for value, doc in zip(values, lines):
        assert yaml.safe_load(doc) == {"txt": value}, (value, doc)  # reads back as the same string
        if value in PLAIN:
            assert doc == yaml.safe_dump({"txt": value}), (value, doc)  # the very line PyYAML writes
        else:
            assert doc.startswith('txt: "'), (value, doc)


def test_keys_plain_and_documents_equal_json_lines(tmp_path):
    shard(tmp_path / "t.tar", [("train/n01", {"cls": b"3", "json": b'{"label": "yes", "box": [1, 2.5], "n": null}',
                                              "x.txt": b"a b"}),
                               ("k2", {"cls": b"no", "json": b"not json {", "x.txt": b"1"})])
    out = run("tar2json t.tar", tmp_path)
    assert out.splitlines()[:5] == ["---", "__key__: train/n01", 'cls: "3"',
                                    'json: {label: "yes", box: [1, 2.5], "n": null}', "x.txt: a b"]
    lines = [json.loads(line) for line in run("tar2json -f jsonlines t.tar", tmp_path).splitlines()]
    assert list(yaml.safe_load_all(out)) == lines
    assert lines[0]["json"] == {"label": "yes", "box": [1, 2.5], "n": None}  # the object, not its text
    assert lines[1]["json"] == "not json {"  # not JSON: its text


@pytest.mark.parametrize("cmd", ["tar2json -f jsonlines t.tar", "tar2tsv --format jsonl t.tar",
                                 "tar2tsv --format jsonl -f '__key__ json' t.tar"])
def test_json_field_is_the_object(cmd, tmp_path):
    shard(tmp_path / "t.tar", [("a", {"json": b'{"k": [1, {"z": true}]}', "cls": b"1"})])
    rec = json.loads(run(cmd, tmp_path))
    assert rec["json"] == {"k": [1, {"z": True}]} and rec["__key__"] == "a"


def test_json_field_too_deep_is_its_text(tmp_path):
    deep = b"[" * 300 + b"]" * 300
    shard(tmp_path / "t.tar", [("a", {"json": deep})])
    rec = json.loads(run("tar2json -f jsonlines t.tar", tmp_path))
    assert rec["json"] == deep.decode()


def test_tar2tsv_key_column_once(tmp_path):
    shard(tmp_path / "t.tar", [("a", {"cls": b"1"}), ("b", {"cls": b"2"})])
    assert run("tar2tsv -f '__key__ cls' t.tar", tmp_path) == "__key__\tcls\na\t1\nb\t2\n"
    assert run("tar2tsv -f 'cls __key__' t.tar", tmp_path) == "cls\t__key__\n1\ta\n2\tb\n"
    assert run("tar2tsv -f cls t.tar", tmp_path) == "__key__\tcls\na\t1\nb\t2\n"


def run_bash(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


def test_tar2json_full_disk_is_output_not_written(tmp_path):
    """tar2json on a full disk said 'No space left on device' with exit 2
    (bad usage); every other writer says 'write failed', exit 1."""
    (tmp_path / "a.tar").write_bytes(text_shard(200))
    p = run_bash("tar2json a.tar > /dev/full", tmp_path)
    assert p.returncode == 1 and one_line(p) == "tar2json: stdout: write failed: No space left on device"


def run_pipefail(cmd, cwd, input=None, env=None, timeout=60):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, input=input, capture_output=True,
                          timeout=timeout, env=full_env)


def test_tar2json_json_output_is_json_for_numbers_floats_cannot_hold(tmp_path):
    """A JSON field holding 1e999 (valid JSON, beyond a float) or NaN (which
    Python's parser accepts) came out as the bare words Infinity / NaN: not
    JSON, strict readers (JavaScript's JSON.parse, Go, serde) refuse the
    whole line. They are null now, as JSON.stringify writes them; YAML keeps
    .inf / .nan (valid YAML)."""
    line = b'k1\t{"v": 1e999, "m": -1e999, "w": NaN, "x": [1.5, {"y": 1e999}]}\n'
    (tmp_path / "j.tar").write_bytes(run_pipefail("lines2tar -k '__key__ json'", tmp_path, line).stdout)

    def strict(text):
        def refuse(c):
            raise ValueError(f"not JSON: {c}")
        return json.loads(text, parse_constant=refuse)

    p = run_pipefail("tar2json -f jsonlines -k 'json.v json.m json.w json.x'", tmp_path, (tmp_path / "j.tar").read_bytes())
    assert p.returncode == 0, p.stderr
    assert strict(p.stdout) == {"json.v": None, "json.m": None, "json.w": None, "json.x": [1.5, {"y": None}]}
    p = run_pipefail("tar2json -f json -k 'json.v json.x' j.tar", tmp_path)
    assert strict(p.stdout) == {"json.v": None, "json.x": [1.5, {"y": None}]}
    p = run_pipefail("tar2tsv --format jsonl -f 'json.v json.x' j.tar", tmp_path)  # the same rows in tar2tsv
    assert p.returncode == 0, p.stderr
    assert strict(p.stdout) == {"__key__": "k1", "json.v": None, "json.x": [1.5, {"y": None}]}
    p = run_pipefail("tar2json -k 'json.v json.w' j.tar", tmp_path)
    assert b'json.v: .inf' in p.stdout and b'json.w: .nan' in p.stdout  # plain YAML keys, as PyYAML writes them
