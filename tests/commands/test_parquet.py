"""Parquet both ways: `tarcreate TABLE.parquet` (a row per sample) and
`tar2tsv --format parquet` (a sample per row), read back by pyarrow, DuckDB,
Hugging Face datasets and tarfile; damaged tables, hostile keys and columns,
outputs landing on inputs, pyarrow missing."""

import datetime
import decimal
import io
import json
import os
import subprocess
import sys
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import jpeg_bytes, one_line, png_bytes, read_tar, run_measured, samples_of
from test_urls import http_server  # noqa: F401  (a fixture)


def write_table(path, columns, **kw):
    pq.write_table(pa.table(columns), str(path), **kw)


# ------------------------------------------------------------ Parquet -> tar


def test_columns_become_fields_by_type(sh, tmp_path):
    jpg = jpeg_bytes(seed=1)
    write_table(tmp_path / "t.parquet", {
        "__key__": ["a", "b", "c"],
        "jpg": [jpg, None, b"\x00\xff"],
        "txt": ["hello", "ünï", None],
        "cls": pa.array([3, -1, None], pa.int64()),
        "score": [0.5, 1e20, float("nan")],
        "ok": [True, False, None],
        "price": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-2.00")], pa.decimal128(5, 2)),
        "day": [datetime.date(2024, 1, 31), None, None],
        "boxes": [[1, 2], [], None],
        "meta": [{"w": 3, "tag": "x"}, None, {"w": None, "tag": "y"}],
        "raw": pa.array([b"1234", b"abcd", None], pa.binary(4)),
        "big": pa.array([b"B" * 10, None, None], pa.large_binary()),
        "label": pa.array(["cat", "dog", "cat"]).dictionary_encode(),
        "nothing": pa.array([None, None, None], pa.null()),
    })
    data = sh("tarcreate t.parquet").stdout
    got = samples_of(data)
    assert list(got) == ["a", "b", "c"]
    assert got["a"] == {"jpg": jpg, "txt": b"hello", "cls": b"3", "score": b"0.5", "ok": b"true", "price": b"1.50",
                        "day": b"2024-01-31", "boxes": b"[1,2]", "meta": b'{"w":3,"tag":"x"}', "raw": b"1234",
                        "big": b"B" * 10, "label": b"cat"}
    assert got["b"] == {"txt": "ünï".encode(), "cls": b"-1", "score": b"1e+20", "ok": b"false", "boxes": b"[]",
                        "raw": b"abcd", "label": b"dog"}
    assert got["c"] == {"jpg": b"\x00\xff", "score": b"nan", "price": b"-2.00", "meta": b'{"w":null,"tag":"y"}',
                        "label": b"cat"}
    # fields in sorted order, ustar headers GNU tar lists; the same table gives the same bytes
    assert [n for n, _ in read_tar(data)][:3] == ["a.big", "a.boxes", "a.cls"]
    assert sh("tar tf - | wc -l", input=data).stdout.strip() == b"24"
    assert sh("tarcreate t.parquet").stdout == data


def test_grouped_compressed_output_is_indexed(sh, tmp_path):
    """A .tar.gz output is cut into groups of whole samples (the general
    writer), which tarindex and IndexedDataset read one by one."""
    write_table(tmp_path / "t.parquet", {"__key__": [f"k{i}" for i in range(5)], "bin": [os.urandom(700_000)] * 5})
    sh("tarcreate t.parquet -o plain.tar && tarcreate t.parquet --group-size 1MiB -o g.tar.gz")
    assert sh("gzip -dc g.tar.gz | cmp - plain.tar").returncode == 0
    sh("tarindex g.tar.gz -o g.json")
    code = "import tarproc; ds = tarproc.IndexedDataset('g.json'); print(len(ds), ds[3]['__key__'])"
    assert sh(f'python -c "{code}"').stdout.split() == [b"5", b"k3"]
    p = sh("tarcreate -f , t.parquet", ok=False)
    assert p.returncode == 2 and "--delim" in one_line(p)


def test_keys_from_the_key_format_and_stdin(sh, tmp_path):
    write_table(tmp_path / "t.parquet", {"txt": ["x", "y"]})
    assert list(samples_of(sh("tarcreate -k '%06d' t.parquet").stdout)) == ["000000", "000001"]
    # stdin, as a regular file and as a pipe (spooled: the footer is at the end)
    assert list(samples_of(sh("tarcreate < t.parquet").stdout)) == ["000000000", "000000001"]
    assert list(samples_of(sh("cat t.parquet | tarcreate -k 'r{index}' -").stdout)) == ["r0", "r1"]
    # integer keys are text; a table whose name does not say it is detected by its magic
    write_table(tmp_path / "ints.bin", {"__key__": pa.array([7, 12], pa.int32()), "txt": ["x", "y"]})
    assert list(samples_of(sh("tarcreate ints.bin").stdout)) == ["7", "12"]


def test_at_columns_fetch_paths_and_urls(sh, tmp_path, http_server):  # noqa: F811
    (tmp_path / "img").mkdir()
    pngs = [png_bytes(seed=i) for i in range(2)]
    for i, b in enumerate(pngs):
        (tmp_path / "img" / f"{i}.png").write_bytes(b)
    big = os.urandom(3 << 20)  # past the in-memory size: copied in chunks
    (tmp_path / "big.bin").write_bytes(big)
    write_table(tmp_path / "t.parquet", {"__key__": ["p0", "p1", "u0"],
                                         "@png": ["0.png", "1.png", None],
                                         "@bin": [None, None, f"{http_server}/big.bin"]})
    got = samples_of(sh("tarcreate -C img t.parquet").stdout)
    assert got == {"p0": {"png": pngs[0]}, "p1": {"png": pngs[1]}, "u0": {"bin": big}}
    # a missing file or URL: one line naming the row and column, nothing written
    write_table(tmp_path / "bad.parquet", {"@png": ["img/0.png", "img/nothere.png"]})
    p = sh("tarcreate bad.parquet -o out.tar", ok=False)
    line = one_line(p)
    assert p.returncode == 2 and "row 1" in line and "nothere.png" in line and "@png" in line
    write_table(tmp_path / "bad.parquet", {"@png": [f"{http_server}/nothere.png"]})
    p = sh("tarcreate bad.parquet -o out.tar", ok=False)
    assert p.returncode == 2 and "nothere.png" in one_line(p)
    assert not (tmp_path / "out.tar").exists()


def test_hugging_face_image_structs(sh, tmp_path):
    """datasets stores an Image as a struct of bytes and path: the bytes (or,
    when null, the file at the path) become the field."""
    jpg = jpeg_bytes(seed=4)
    (tmp_path / "disk.jpg").write_bytes(b"from disk")
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    write_table(tmp_path / "t.parquet", {
        "image": pa.array([{"bytes": jpg, "path": "x.jpg"}, {"bytes": None, "path": "disk.jpg"}, None], image),
        "label": [1, 2, 3]})
    got = samples_of(sh("tarcreate -C . t.parquet").stdout)
    assert got == {"000000000": {"image": jpg, "label": b"1"}, "000000001": {"image": b"from disk", "label": b"2"},
                   "000000002": {"label": b"3"}}
    # a path is read only under -C, relative, without '..' (the table does not pick this machine's files)
    p = sh("tarcreate t.parquet -o out.tar", ok=False)
    assert p.returncode == 2 and "-C DIR" in one_line(p) and "row 1" in one_line(p)
    for path in ("/etc/passwd", "../disk.jpg"):
        write_table(tmp_path / "t.parquet", {"image": pa.array([{"bytes": None, "path": path}], image)})
        p = sh("tarcreate -C . t.parquet -o out.tar", ok=False)
        assert p.returncode == 2 and path in one_line(p)
    assert not (tmp_path / "out.tar").exists()


def test_nested_binary_is_base64_in_json(sh, tmp_path):
    write_table(tmp_path / "t.parquet", {"parts": pa.array([[b"\x00\x01", b"ok"]], pa.list_(pa.binary())),
                                         "m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64()))})
    got = samples_of(sh("tarcreate t.parquet").stdout)["000000000"]
    assert json.loads(got["parts"]) == ["AAE=", "b2s="]
    assert json.loads(got["m"]) == [["k", 1]]


def test_reads_row_groups_in_batches_memory_flat(sh, tmp_path):
    """A table of 32 cells of 4 MiB in row groups of 2 rows: memory holds a
    batch, never the table (128 MB; the command alone takes about 80 MB)."""
    cell = os.urandom(4 << 20)
    keys = [f"k{i:03d}" for i in range(32)]
    write_table(tmp_path / "big.parquet", {"__key__": keys, "bin": [cell] * 32}, row_group_size=2,
                compression="none", use_dictionary=False)
    p, cpu, rss = run_measured("tarcreate big.parquet | tar tvf - | awk '{print $3}' | uniq -c", tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [b"32", str(len(cell)).encode()]
    assert rss < 150, rss


# ------------------------------------------------------------ tar -> Parquet and back


def make_shard(sh, tmp_path, n=6):
    """A shard made by tarcreate (canonical bytes): images, text, a non-UTF-8
    text field, a field with a dot, a sample missing fields."""
    lines = []
    (tmp_path / "latin.bin").write_bytes(b"caf\xe9")
    for i in range(n):
        (tmp_path / f"{i}.jpg").write_bytes(jpeg_bytes(seed=i))
        lines.append(f"s{i}.cls text:{i % 3}")  # (fields in sorted order: the bytes tarcreate writes back)
        lines.append(f"s{i}.jpg {i}.jpg")
        if i == 3:
            lines.append("s3.seg.png latin.bin")
        if i != 2:
            lines.append(f"s{i}.txt text:caption {i}, ünï\ttab")
    (tmp_path / "plan.txt").write_text("\n".join(lines) + "\n")
    sh("tarcreate plan.txt -o in.tar")
    return (tmp_path / "in.tar").read_bytes()


def test_tar_to_parquet_read_by_pyarrow_duckdb_and_datasets_and_back(sh, tmp_path):
    import duckdb

    original = make_shard(sh, tmp_path)
    sh("tar2tsv --format parquet in.tar > out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.schema.names == ["__key__", "cls", "jpg", "seg.png", "txt"]
    assert [str(t) for t in table.schema.types] == ["string", "string", "binary", "binary", "string"]
    rows = table.to_pylist()
    assert rows[0] == {"__key__": "s0", "cls": "0", "jpg": jpeg_bytes(seed=0), "seg.png": None,
                       "txt": "caption 0, ünï\ttab"}
    assert rows[2]["txt"] is None and rows[3]["seg.png"] == b"caf\xe9"
    # DuckDB
    con = duckdb.connect()
    got = con.execute("select __key__, octet_length(jpg), txt from read_parquet(?) where cls = '1' order by __key__",
                      [str(tmp_path / "out.parquet")]).fetchall()
    assert got == [("s1", len(jpeg_bytes(seed=1)), "caption 1, ünï\ttab"),
                   ("s4", len(jpeg_bytes(seed=4)), "caption 4, ünï\ttab")]
    # Hugging Face datasets (offline, its cache in tmp_path)
    code = ("import datasets, sys\n"
            "ds = datasets.Dataset.from_parquet('out.parquet', cache_dir='hf')\n"
            "print(ds.features['jpg'].dtype, ds.features['txt'].dtype, len(ds), ds[3]['seg.png'] == b'caf\\xe9',"
            " ds[5]['jpg'] == open('5.jpg', 'rb').read())\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hfhome"))
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.split() == [b"binary", b"string", b"6", b"True", b"True"]
    # and back: the same bytes
    assert sh("tarcreate out.parquet").stdout == original
    # -o commits; -f chooses and renames columns (a value inside JSON is a string column)
    sh("tar2tsv --format parquet -f 'img=jpg cls' --nokey in.tar -o sel.parquet")
    sel = pq.read_table(tmp_path / "sel.parquet")
    assert sel.schema.names == ["img", "cls"] and sel.num_rows == 6


def test_schema_rule_and_binary_option(sh, tmp_path):
    """Types come from the first row group; a later value that is not UTF-8
    in a string column stops the run, naming --binary; --binary keeps a
    column binary."""
    members = "".join(f"k{i}.txt text:ok {i}\n" for i in range(3))
    (tmp_path / "latin.bin").write_bytes(b"caf\xe9")
    (tmp_path / "plan.txt").write_text(members + "k3.txt latin.bin\n")
    sh("tarcreate plan.txt -o in.tar")
    p = sh("tar2tsv --format parquet --scan 2 in.tar -o out.parquet", ok=False)
    line = one_line(p)
    assert p.returncode == 2 and "k3" in line and "--binary txt" in line
    assert not (tmp_path / "out.parquet").exists()
    sh("tar2tsv --format parquet --scan 2 --binary txt in.tar -o out.parquet")
    t = pq.read_table(tmp_path / "out.parquet")
    assert str(t.schema.field("txt").type) == "binary" and t.column("txt").to_pylist()[3] == b"caf\xe9"
    assert sh("tarcreate out.parquet").stdout == (tmp_path / "in.tar").read_bytes()
    # a field first seen after the scan is named on stderr (no column for it)
    (tmp_path / "plan2.txt").write_text("a.txt text:x\nb.txt text:y\nb.cls text:1\n")
    sh("tarcreate plan2.txt -o two.tar")
    p = sh("tar2tsv --format parquet --scan 1 two.tar -o two.parquet", stderr_ok=True)
    assert "'b'" in p.stderr.decode() and "cls" in p.stderr.decode()
    # options that have no meaning for Parquet are refused
    for opts in ("--hash", "--noheader"):
        p = sh(f"tar2tsv --format parquet {opts} in.tar -o x.parquet", ok=False)
        assert p.returncode == 2 and opts in one_line(p)
    p = sh("tar2tsv --binary txt in.tar", ok=False)
    assert p.returncode == 2 and "--format parquet" in one_line(p)


def test_row_groups_and_a_text_output(sh, tmp_path):
    (tmp_path / "plan.txt").write_text("".join(f"k{i:05d}.cls text:{i % 7}\n" for i in range(10_050)))
    sh("tarcreate plan.txt -o in.tar")
    sh("tar2tsv --format parquet in.tar -o out.parquet")
    meta = pq.ParquetFile(tmp_path / "out.parquet").metadata
    assert meta.num_row_groups == 2 and meta.num_rows == 10_050
    assert sh("tarcreate out.parquet | cmp - in.tar").returncode == 0
    # a cell past the row group's bytes (32 MiB; spooled as a blob on the way) is a row group of its own
    (tmp_path / "huge.bin").write_bytes(os.urandom(33 << 20))
    (tmp_path / "p3.txt").write_text("a.txt text:x\nb.bin huge.bin\nc.txt text:y\n")
    sh("tarcreate p3.txt -o huge.tar && tar2tsv --format parquet huge.tar -o huge.parquet")
    meta = pq.ParquetFile(tmp_path / "huge.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1, 1, 1]
    assert sh("tarcreate huge.parquet | cmp - huge.tar").returncode == 0
    # -o for the text formats too
    sh("tar2tsv -c 2 in.tar -o out.tsv")
    assert (tmp_path / "out.tsv").read_text() == "__key__\tcls\nk00000\t0\nk00001\t1\n"
    # committed only on success: a damaged input leaves no table, text or Parquet
    sh("head -c 100000 in.tar > cut.tar")
    for fmt, out in (("tsv", "cut.tsv"), ("parquet", "cut.parquet")):
        p = sh(f"tar2tsv --format {fmt} cut.tar -o {out}", ok=False)
        assert p.returncode == 2 and "cut.tar" in one_line(p)
        assert not (tmp_path / out).exists()


# ------------------------------------------------------------ hostile tables


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "flipped"])
def test_damaged_table_is_one_line(sh, tmp_path, damage):
    write_table(tmp_path / "t.parquet", {"__key__": [f"k{i}" for i in range(200)], "txt": ["x" * 50] * 200},
                compression="none")
    data = (tmp_path / "t.parquet").read_bytes()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = b"PAR1" + os.urandom(3000)
    elif damage == "empty":
        data = b""
    else:
        data = bytearray(data)
        for i in range(8, 300):
            data[i] ^= 0x5A
        data = bytes(data)
    (tmp_path / "bad.parquet").write_bytes(data)
    p = sh("tarcreate bad.parquet -o out.tar", ok=False)
    line = one_line(p)
    assert p.returncode == 2 and "bad.parquet" in line, line
    assert not (tmp_path / "out.tar").exists()


@pytest.mark.parametrize("grouped", [False, True])
def test_rows_without_a_field_and_empty_tables_are_said(sh, tmp_path, grouped):
    """A row whose every cell is null makes no sample (one warning: the count
    and the first), in the gathered writer and the grouped one alike; a table
    of keys alone or of no rows gives an empty archive, said."""
    out = "-o out.tar.gz --group-size 1MB" if grouped else "-o out.tar"
    read = (lambda: samples_of(subprocess.run(["gzip", "-dc", str(tmp_path / "out.tar.gz")],
                                              capture_output=True, check=True).stdout)) if grouped else \
        (lambda: samples_of((tmp_path / "out.tar").read_bytes()))
    write_table(tmp_path / "t.parquet", {"__key__": ["a", "b", "c", "d"],
                                         "x": pa.array([b"1", None, None, b"2"]),
                                         "y": pa.array([None, None, "q", None])}, row_group_size=2)
    p = sh(f"tarcreate t.parquet {out}", stderr_ok=True)
    assert p.stderr.decode().splitlines() == [
        "tarcreate: warning: t.parquet: 1 row of the table has no field (every cell empty or null), no sample is "
        "written for it (the first: row 1, key 'b')"]
    assert read() == {"a": {"x": b"1"}, "c": {"y": b"q"}, "d": {"x": b"2"}}
    write_table(tmp_path / "t.parquet", {"__key__": ["a", "b"]})
    p = sh(f"tarcreate t.parquet {out}", stderr_ok=True)
    assert p.stderr.decode().splitlines() == [
        "tarcreate: warning: t.parquet: 2 rows of the table have no field (every cell empty or null), no sample is "
        "written for them (the first: row 0, key 'a')",
        "tarcreate: warning: t.parquet: no sample: the archive is empty"]
    assert read() == {}
    write_table(tmp_path / "t.parquet", {"__key__": pa.array([], pa.string()), "x": pa.array([], pa.binary())})
    p = sh(f"tarcreate t.parquet {out}", stderr_ok=True)
    assert one_line(p) == "tarcreate: warning: t.parquet: no sample: the archive is empty"


def test_a_damaged_later_row_group_is_named_and_nothing_is_committed(sh, tmp_path):
    """Row groups are decoded a batch ahead in a thread: the error of group 6
    still comes as one line naming it, after the groups before it were read."""
    write_table(tmp_path / "t.parquet", {"__key__": [f"k{i:03d}" for i in range(100)],
                                         "bin": [bytes([i]) * 4000 for i in range(100)]},
                row_group_size=10, compression="none", use_dictionary=False)
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata
    col = meta.row_group(6).column(1)
    data = bytearray((tmp_path / "t.parquet").read_bytes())
    for i in range(col.data_page_offset, col.data_page_offset + 40):
        data[i] ^= 0xFF  # (the page header of group 6's cells)
    (tmp_path / "bad.parquet").write_bytes(bytes(data))
    p = sh("tarcreate bad.parquet -o out.tar", ok=False)
    line = one_line(p)
    assert p.returncode == 2 and "bad.parquet: row group 6 (from row 60)" in line, line
    assert not (tmp_path / "out.tar").exists()
    p = sh("tarcreate bad.parquet | tar tf - 2>/dev/null | wc -l", ok=False)  # the groups before it streamed
    assert int(p.stdout) == 60, p.stdout


@pytest.mark.parametrize("keys, expect", [
    (["a", "a"], "key of the row before"),
    (["a", None], "null"),
    (["../x", "b"], ".."),
    (["a.b", "c"], "dot"),
    (["/abs", "c"], "absolute"),
    (["ok", "x\x1b[31m"], "control"),
    (["ok", ""], "empty key"),
])
def test_bad_keys_stop_the_run(sh, tmp_path, keys, expect):
    write_table(tmp_path / "t.parquet", {"__key__": pa.array(keys, pa.string()), "txt": ["x", "y"]})
    p = sh("tarcreate t.parquet -o out.tar", ok=False)
    line = one_line(p)
    assert p.returncode == 2 and expect in line and "row" in line, line
    assert "\x1b" not in line
    assert not (tmp_path / "out.tar").exists()


def test_keys_apart_are_written_as_tar_allows(sh, tmp_path):
    """Duplicates that are not adjacent read back as two samples; tarcheck
    reports them."""
    write_table(tmp_path / "t.parquet", {"__key__": ["a", "b", "a"], "txt": ["1", "2", "3"]})
    sh("tarcreate t.parquet -o out.tar")
    assert [n for n, _ in read_tar((tmp_path / "out.tar").read_bytes())] == ["a.txt", "b.txt", "a.txt"]
    p = sh("tarcheck out.tar", ok=False)
    assert p.returncode == 1 and "a" in p.stdout.decode() + p.stderr.decode()


def test_hostile_column_names(sh, tmp_path):
    # named like metadata: left out with a warning; dots make fields with dots
    write_table(tmp_path / "t.parquet", {"__key__": ["k"], "__source__": [b"\x00evil"], "seg.png": [b"P"],
                                         "__index_level_0__": [0]})
    p = sh("tarcreate t.parquet", stderr_ok=True)
    assert samples_of(p.stdout) == {"k": {"seg.png": b"P"}}
    err = p.stderr.decode()
    assert "__source__" in err and "__index_level_0__" in err
    assert sh("tarcreate -q t.parquet").stderr == b""
    # a slash, two columns that read back as one field, @__key__, control characters
    for cols, expect in [({"a/b": ["x"]}, "'/'"), ({"A": ["x"], "a": ["y"]}, "one field"),
                         ({"@__key__": ["x"]}, "holds keys"), ({"x\ny": ["x"]}, "control")]:
        write_table(tmp_path / "c.parquet", cols)
        p = sh("tarcreate c.parquet -o out.tar", ok=False)
        line = one_line(p)
        assert p.returncode == 2 and expect in line, line
        assert not (tmp_path / "out.tar").exists()
    # two __key__ columns (a table may repeat a name)
    pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["__key__", "__key__"]),
                   str(tmp_path / "c.parquet"))
    p = sh("tarcreate c.parquet", ok=False)
    assert p.returncode == 2 and "two __key__ columns" in one_line(p)
    # a type with no field form
    write_table(tmp_path / "c.parquet", {"@img": [1]})
    p = sh("tarcreate c.parquet", ok=False)
    assert p.returncode == 2 and "must be strings" in one_line(p)


def test_outputs_never_land_on_inputs(sh, tmp_path):
    write_table(tmp_path / "t.parquet", {"txt": ["x"]})
    p = sh("tarcreate t.parquet -o t.parquet", ok=False)
    assert p.returncode == 2 and "t.parquet" in one_line(p)
    sh("tarcreate t.parquet -o in.tar")
    p = sh("tarcreate t.parquet > t.parquet", ok=False)
    assert p.returncode == 2 and "output" in one_line(p)
    p = sh("tar2tsv --format parquet in.tar -o in.tar", ok=False)
    assert p.returncode == 2 and "in.tar" in one_line(p)
    assert tarfile.open(tmp_path / "in.tar").getnames() == ["000000000.txt"]


def test_without_pyarrow_the_commands_say_how_to_install_it(sh, tmp_path):
    """pyarrow hidden (a package of that name that fails to import, first on
    the path): one line naming the extra, exit 2."""
    (tmp_path / "hide" / "pyarrow").mkdir(parents=True)
    (tmp_path / "hide" / "pyarrow" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pyarrow'\", name='pyarrow')\n")
    write_table(tmp_path / "t.parquet", {"txt": ["x"]})
    (tmp_path / "plan.txt").write_text("a.txt text:x\n")
    sh("tarcreate plan.txt -o in.tar")
    env = {"PYTHONPATH": str(tmp_path / "hide")}
    for cmd in ("tarcreate t.parquet", "tar2tsv --format parquet in.tar -o out.parquet"):
        p = sh(cmd, ok=False, env=env)
        line = one_line(p)
        assert p.returncode == 2 and "pip install 'tarproc[parquet]'" in line, line
    # the other formats need no pyarrow
    assert sh("tar2tsv in.tar", env=env).stdout == b"__key__\ttxt\na\tx\n"


def test_key_and_json_columns_blobs_empty_input_and_a_closed_pipe(sh, tmp_path):
    (tmp_path / "rnd.bin").write_bytes(os.urandom(3 << 20))
    (tmp_path / "plan.txt").write_text('a.cls text:1\na.json text:{"label": 5, "b": [1]}\n'
                                       "b.bin rnd.bin\nb.cls text:2\n")
    sh("tarcreate plan.txt -o in.tar")
    sh("tar2tsv --format parquet -f '__key__ cls lab=json.label b=json.b' in.tar -o o.parquet")
    assert pq.read_table(tmp_path / "o.parquet").to_pylist() == [
        {"__key__": "a", "cls": "1", "lab": "5", "b": "[1]"}, {"__key__": "b", "cls": "2", "lab": None, "b": None}]
    # a field spooled as a blob (past --blob-threshold) is a cell like any other; back to the same bytes
    sh("tar2tsv --format parquet --blob-threshold 1MiB in.tar -o all.parquet")
    assert sh("tarcreate all.parquet | cmp - in.tar").returncode == 0
    # no samples: a table of no rows, and back an empty tar
    sh("tarcreate -q --plan-format lines /dev/null -o empty.tar && tar2tsv --format parquet empty.tar -o e.parquet")
    assert pq.read_table(tmp_path / "e.parquet").num_rows == 0
    p = sh("tarcreate e.parquet", stderr_ok=True)
    assert p.stdout == bytes(1024) and one_line(p) == "tarcreate: warning: e.parquet: no sample: the archive is empty"
    # a reader that closes early ends the command quietly
    p = sh("tar2tsv --format parquet in.tar | head -c 100 | wc -c; echo ${PIPESTATUS[0]}")
    assert p.stdout.split() == [b"100", b"141"] and p.stderr == b""


def test_names_that_are_not_utf8_cannot_be_columns_or_keys(sh, tmp_path):
    """Names kept byte for byte (not UTF-8) have no Parquet string form:
    one line each, nothing written."""
    with tarfile.open(tmp_path / "nu.tar", "w", format=tarfile.GNU_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tf:
        for name in ("a\udce9.txt", "b.t\udce9xt"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    for opts, expect in (("", "column name"), ("-f txt", "key is not UTF-8")):
        p = sh(f"tar2tsv --format parquet {opts} nu.tar -o out.parquet", ok=False)
        line = one_line(p)
        assert p.returncode == 2 and expect in line, line
        assert not (tmp_path / "out.parquet").exists()
