"""tar2tsv: rows per sample, checked against tarfile reads of the same shard."""

import csv
import hashlib
import io
import json

from helpers import jpeg_bytes, png_bytes, samples_of, tar_bytes


def make_shard(tmp_path, n=5):
    members = []
    for i in range(n):
        key = f"s{i:03d}"
        img = png_bytes(seed=i) if i % 2 else jpeg_bytes(seed=i)
        members.append((f"{key}.{'png' if i % 2 else 'jpg'}", img))
        members.append((f"{key}.cls", str(i).encode()))
        meta = {"label": f"l{i}", "nested": {"a": [i, i + 1]}, "note": "tab\there\nnewline, \"q\""}
        members.append((f"{key}.json", json.dumps(meta).encode()))
    data = tar_bytes(members)
    (tmp_path / "small.tar").write_bytes(data)
    return samples_of(data)


def test_example_cls(sh, tmp_path):
    samples = make_shard(tmp_path)
    out = sh("tar2tsv -f cls small.tar").stdout.decode()
    lines = out.splitlines()
    assert lines[0] == "__key__\tcls"
    assert lines[1:] == [f"{k}\t{s['cls'].decode()}" for k, s in samples.items()]


def test_alternatives_sizes_hash_and_json_paths(sh, tmp_path):
    samples = make_shard(tmp_path)
    p = sh("tar2tsv -f 'img=jpg;png json.label json.nested.a.1 json.note json.nosuch' small.tar", stderr_ok=True)
    out = p.stdout.decode()
    assert p.stderr.decode().count("\n") == 1 and "no sample has 'json.nosuch'" in p.stderr.decode()
    lines = out.split("\n")
    assert lines[-1] == "" and len(lines) == 1 + len(samples) + 1  # every row is one line
    assert lines[0].split("\t") == ["__key__", "img", "json.label", "json.nested.a.1", "json.note", "json.nosuch"]
    for line, (key, s) in zip(lines[1:], samples.items()):
        cells = line.split("\t")
        img = s.get("jpg", s.get("png"))
        meta = json.loads(s["json"])
        assert cells == [key, str(len(img)), meta["label"], str(meta["nested"]["a"][1]),
                         "tab\\there\\nnewline, \"q\"", ""]
    out = sh("tar2tsv --hash --nokey --noheader -f 'jpg;png' small.tar").stdout.decode().split()
    assert out == [hashlib.sha256(s.get("jpg", s.get("png"))).hexdigest() for s in samples.values()]


def test_default_columns_count_and_slice(sh, tmp_path):
    make_shard(tmp_path)
    lines = sh("tar2tsv -c 2 small.tar").stdout.decode().splitlines()
    assert lines[0] == "__key__\tcls\tjpg\tjson\tpng" and len(lines) == 3  # every field of the first samples
    # the original's -s/--slice: START,STOP
    lines = sh("tar2tsv -s 1,3 -f cls --noheader small.tar").stdout.decode().splitlines()
    assert lines == ["s001\t1", "s002\t2"]
    lines = sh("tar2tsv --skip 3 -f cls --noheader --nokey small.tar").stdout.decode().splitlines()
    assert lines == ["3", "4"]


def test_csv_and_jsonl(sh, tmp_path):
    samples = make_shard(tmp_path)
    out = sh("tar2tsv --format csv -f 'cls json.note' small.tar").stdout.decode()
    assert len(out.splitlines()) == 1 + len(samples)
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["__key__", "cls", "json.note"]
    assert rows[1] == ["s000", "0", "tab\there\\nnewline, \"q\""]
    out = sh("tar2tsv --format jsonl -f 'cls json.nested png' small.tar").stdout.decode()
    objs = [json.loads(line) for line in out.splitlines()]
    assert len(objs) == len(samples)
    assert objs[1] == {"__key__": "s001", "cls": "1", "json.nested": {"a": [1, 2]},
                       "png": len(samples["s001"]["png"])}
    assert objs[0]["png"] is None


def test_stdin_and_empty_input(sh, tmp_path):
    make_shard(tmp_path)
    assert sh("cat small.tar | tar2tsv -f cls | wc -l").stdout.strip() == b"6"
    assert sh("tar2tsv -f cls", input=bytes(1024)).stdout == b"__key__\tcls\n"
    p = sh("head -c 1000 small.tar | tar2tsv", ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    assert b"examples:" in sh("tar2tsv --help").stdout


def test_tar2tsv_columns_are_every_field_of_the_first_samples(sh, tmp_path):
    members = [("a.x", b"1"), ("b.y", b"2"), ("c.x", b"3"), ("c.z", b"9"), ("d.w", b"0")]
    (tmp_path / "m.tar").write_bytes(tar_bytes(members))
    assert sh("tar2tsv m.tar").stdout.decode() == "__key__\tw\tx\ty\tz\na\t\t1\t\t\nb\t\t\t2\t\nc\t\t3\t\t9\nd\t0\t\t\t\n"
    p = sh("tar2tsv --scan 2 --format csv m.tar", stderr_ok=True)
    assert p.stdout.decode() == "__key__,x,y\na,1,\nb,,2\nc,3,\nd,,\n"
    err = p.stderr.decode().splitlines()  # each new field named once
    assert len(err) == 2 and "'c': field z not in the columns" in err[0] and "'d': field w" in err[1]
    rows = [json.loads(x) for x in sh("tar2tsv --format jsonl m.tar").stdout.splitlines()]
    assert rows[2] == {"__key__": "c", "x": "3", "z": "9"} and rows[3] == {"__key__": "d", "w": "0"}
    # with -f the header comes at once (streaming) and has exactly those columns
    assert sh("tar2tsv -f 'y x' -c 2 m.tar").stdout.decode() == "__key__\ty\tx\na\t\t1\nb\t2\t\n"
