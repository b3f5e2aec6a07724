"""tarjoin: joins of shard sets and tables by key, through the installed
command in real pipes, read back with tarfile and webdataset."""

import io
import json
import os
import subprocess
import tarfile

import pytest
from conftest import require
from helpers import read_tar, samples_of, tar_bytes


def shard(samples, format=tarfile.USTAR_FORMAT):
    """A tar (made by Python's tarfile) of ``[(key, {field: bytes})]``."""
    return tar_bytes([(f"{k}.{f}", v) for k, fields in samples for f, v in sorted(fields.items())], format)


def A(keys):
    return [(k, {"cls": b"%d" % i, "jpg": b"J%s" % k.encode() * 3}) for i, k in enumerate(keys)]


def B(keys):
    return [(k, {"txt": b"caption of " + k.encode()}) for k in keys]


KEYS = [f"k{i:03d}" for i in range(20)]


def write(tmp_path, name, samples):
    (tmp_path / name).write_bytes(shard(samples))


def keys_of(data):
    return list(samples_of(data))


def one_line(p, *words):
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("tarjoin: ") and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


def test_aligned_join_merges_fields_in_as_order_and_reads_back_in_webdataset(sh, tmp_path):
    write(tmp_path, "a.tar", A(KEYS))
    write(tmp_path, "b.tar", B(KEYS))
    out = sh("tarjoin a.tar b.tar").stdout
    got = samples_of(out)
    assert list(got) == KEYS
    for i, k in enumerate(KEYS):
        assert got[k] == {"cls": b"%d" % i, "jpg": b"J%s" % k.encode() * 3, "txt": b"caption of " + k.encode()}
    (tmp_path / "out.tar").write_bytes(out)
    import webdataset as wds

    ws = list(wds.WebDataset(str(tmp_path / "out.tar"), shardshuffle=False))
    assert [s["__key__"] for s in ws] == KEYS
    assert ws[3]["txt"] == b"caption of k003" and ws[3]["cls"] == b"3"
    # -o FILE gives the same bytes; stdin as A too
    sh("tarjoin a.tar b.tar -o joined.tar")
    assert (tmp_path / "joined.tar").read_bytes() == out
    assert sh("cat a.tar | tarjoin - b.tar").stdout == out


def test_the_fast_path_writes_the_bytes_the_encoder_writes(sh, tmp_path):
    """Inputs read as a writer writes them are joined by copying their bytes;
    the result is byte for byte what encoding the joined samples gives, in
    both field orders (txt after cls/jpg: copied; json between: encoded)."""
    import tarproc

    tarproc.write_samples(str(tmp_path / "a.tar"), ({"__key__": k, **f} for k, f in A(KEYS)))
    tarproc.write_samples(str(tmp_path / "b.tar"), ({"__key__": k, **f} for k, f in B(KEYS)))
    tarproc.write_samples(str(tmp_path / "c.tar"), ({"__key__": k, "json": b"{}"} for k in KEYS))
    for other in ("b.tar", "c.tar"):
        out = sh(f"tarjoin a.tar {other}").stdout
        encoded = io.BytesIO()
        w = tarproc.SampleWriter(encoded)
        for s in tarproc.join_samples([str(tmp_path / "a.tar"), str(tmp_path / other)]):
            w.write(dict(s))
        w.close()
        assert out == encoded.getvalue()
        assert len(samples_of(out)) == 20


def test_strict_is_the_default_and_names_the_key_and_its_shard(sh, tmp_path):
    write(tmp_path, "a.tar", A(KEYS))
    write(tmp_path, "b-missing.tar", B(KEYS[:7] + KEYS[8:]))
    write(tmp_path, "b-extra.tar", B(KEYS + ["k999"]))
    write(tmp_path, "b-short.tar", B(KEYS[:10]))
    p = sh("tarjoin a.tar b-missing.tar -o out.tar", ok=False)
    one_line(p, "'k007'", "a.tar", "missing from B", "'k008'", "b-missing.tar")
    assert not (tmp_path / "out.tar").exists()
    assert [f for f in os.listdir(tmp_path) if "partial" in f] == []
    one_line(sh("tarjoin a.tar b-extra.tar -o out.tar", ok=False), "'k999'", "b-extra.tar", "not in A")
    assert not (tmp_path / "out.tar").exists()
    one_line(sh("tarjoin a.tar b-short.tar > out.tar", ok=False), "'k010'", "B has ended", "b-short.tar")
    # on a stream, the samples joined so far without the end-of-archive marker: no reader takes it as whole
    assert (tmp_path / "out.tar").read_bytes()[-1024:] != bytes(1024)
    assert b"end-of-archive" in sh("tarcat --strict out.tar > /dev/null", ok=False).stderr
    # --how strict is the same as giving nothing
    one_line(sh("tarjoin --how strict a.tar b-missing.tar > /dev/null", ok=False), "'k007'")


def test_left_keeps_as_samples_and_inner_keeps_the_common_keys(sh, tmp_path):
    write(tmp_path, "a.tar", A(KEYS))
    some = KEYS[::3]
    write(tmp_path, "b.tar", B(some))
    left = samples_of(sh("tarjoin --how left a.tar b.tar").stdout)
    assert list(left) == KEYS
    assert all(("txt" in left[k]) == (k in some) for k in KEYS)
    inner = samples_of(sh("tarjoin --how inner a.tar b.tar").stdout)
    assert list(inner) == some and all("txt" in f for f in inner.values())
    # in input order B's keys must come in A's order: a key A lacks is an error at the end
    write(tmp_path, "b-odd.tar", B(["k002", "zzz", "k005"]))
    one_line(sh("tarjoin --how left a.tar b-odd.tar -o out.tar", ok=False), "'zzz'", "b-odd.tar", "--order key")
    assert not (tmp_path / "out.tar").exists()


def test_order_key_joins_any_order_within_memory(sh, tmp_path):
    """Shuffled inputs, sorted with tarsort's machinery under a tiny budget
    (so runs spill), merged by key: the output in key order."""
    import random

    keys = [f"s{i:04d}" for i in range(600)]
    r = random.Random(3)
    ka, kb = keys[:], keys[:]
    r.shuffle(ka)
    r.shuffle(kb)
    write(tmp_path, "a.tar", [(k, {"cls": k[1:].encode()}) for k in ka])
    write(tmp_path, "b.tar", B(kb))
    one_line(sh("tarjoin a.tar b.tar > /dev/null", ok=False), "missing from B")
    got = samples_of(sh("tarjoin --order key --memory 20KB --tmpdir . a.tar b.tar").stdout)
    assert list(got) == sorted(keys)
    assert all(got[k] == {"cls": k[1:].encode(), "txt": b"caption of " + k.encode()} for k in keys)
    assert [f for f in os.listdir(tmp_path) if f.startswith("tarsort-")] == []  # runs removed
    # missing and extra keys in key order
    write(tmp_path, "b-some.tar", B(kb[:500] + ["extra"]))
    one_line(sh("tarjoin --order key a.tar b-some.tar > /dev/null", ok=False), "'extra'", "not in A")
    inner = samples_of(sh("tarjoin --order key --how inner a.tar b-some.tar").stdout)
    assert list(inner) == sorted(kb[:500])
    left = samples_of(sh("tarjoin --order key --how left a.tar b-some.tar").stdout)
    assert list(left) == sorted(keys) and sum("txt" in f for f in left.values()) == 500


def test_duplicate_keys(sh, tmp_path):
    """In input order a key that comes twice in each input is matched in
    turn; in key order it is an error naming the key and its shard."""
    dup = ["k1", "k2", "k1", "k3"]
    (tmp_path / "a.tar").write_bytes(shard([(k, {"cls": b"%d" % i}) for i, k in enumerate(dup)]))
    (tmp_path / "b.tar").write_bytes(shard([(k, {"txt": b"t%d" % i}) for i, k in enumerate(dup)]))
    out = sh("tarjoin a.tar b.tar").stdout
    names = [n for n, _ in read_tar(out)]
    assert names == ["k1.cls", "k1.txt", "k2.cls", "k2.txt", "k1.cls", "k1.txt", "k3.cls", "k3.txt"]
    assert dict(read_tar(out)[4:6]) == {"k1.cls": b"2", "k1.txt": b"t2"}
    one_line(sh("tarjoin --order key a.tar b.tar > /dev/null", ok=False), "'k1'", "twice", "a.tar")


def test_a_field_in_two_inputs_is_refused_unless_renamed(sh, tmp_path):
    write(tmp_path, "lr.tar", A(KEYS[:4]))
    write(tmp_path, "hr.tar", [(k, {"jpg": b"HR" + k.encode()}) for k in KEYS[:4]])
    one_line(sh("tarjoin lr.tar hr.tar -o out.tar", ok=False), "'jpg'", "in A and in B", "--rename B:jpg=")
    assert not (tmp_path / "out.tar").exists()
    got = samples_of(sh("tarjoin lr.tar hr.tar -r B:jpg=jpg_hr").stdout)
    assert got["k002"]["jpg_hr"] == b"HRk002" and got["k002"]["jpg"] == b"Jk002" * 3
    one_line(sh("tarjoin lr.tar hr.tar -r A:jpg=cls -r B:jpg=jpg_hr > /dev/null", ok=False),
             "two fields of A", "'cls'")
    # a rename that meets no field (a typo) is a warning, once
    p = sh("tarjoin lr.tar hr.tar -r B:jpg=jpg_hr -r B:jgp=x > /dev/null", stderr_ok=True)
    assert p.stderr.decode().count("\n") == 1 and "B:jgp=x renamed nothing" in p.stderr.decode()
    got = samples_of(sh("tarjoin lr.tar hr.tar -r 'A:jpg=jpg_lr,cls=label'").stdout)
    assert set(got["k000"]) == {"jpg_lr", "label", "jpg"}
    for bad in ("C:jpg=x", "B:jpg", "B:jpg=a/b", "B:jpg=__key__", "jpg=x", "B:", "B: , "):
        p = sh(f"tarjoin lr.tar hr.tar -r '{bad}' > /dev/null", ok=False)
        one_line(p, "--rename")


def test_tables_add_their_columns_as_fields(sh, tmp_path):
    keys = KEYS[:5]
    write(tmp_path, "a.tar", A(keys))
    rows = [{"__key__": k, "caption": f"a\tb\nc {k}", "score": i / 2, "tags": ["x", i], "none": None}
            for i, k in enumerate(reversed(keys))]  # any order: tables are looked up by key
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = samples_of(sh("tarjoin a.tar --table t.jsonl").stdout)
    assert list(got) == keys
    assert got["k004"]["caption"] == b"a\tb\nc k004" and got["k004"]["score"] == b"0.0"
    assert got["k000"]["tags"] == b'["x",4]' and "none" not in got["k000"]
    # TSV (escaped as tar2tsv writes) and CSV
    tsv = sh("tar2tsv -f 'cls' a.tar").stdout.decode().replace("cls", "label")
    (tmp_path / "t.tsv").write_text(tsv)
    got = samples_of(sh("tarjoin a.tar --table t.tsv").stdout)
    assert got["k003"]["label"] == b"3"
    (tmp_path / "t.csv").write_text('__key__,text\nk000,"x, y"\nk001,z\\nw\nk002,\nk003,"two\nlines"\nk004,b\n')
    (tmp_path / "bom.csv").write_bytes("\ufeff__key__,text\r\nk000,a\r\n".encode())  # as spreadsheets save it
    assert samples_of(sh("tarjoin --how left a.tar --table bom.csv").stdout)["k000"]["text"] == b"a"
    got = samples_of(sh("tarjoin a.tar --table t.csv").stdout)
    assert got["k000"]["text"] == b"x, y" and got["k001"]["text"] == b"z\nw" and "text" not in got["k002"]
    assert got["k003"]["text"] == b"two\nlines"
    # strict: a key without a row, a row without a key; left keeps, inner drops
    (tmp_path / "part.jsonl").write_text('{"__key__": "k001", "c": "1"}\n{"__key__": "nope", "c": "2"}\n')
    one_line(sh("tarjoin a.tar --table part.jsonl > /dev/null", ok=False), "'k000'", "no row in B", "part.jsonl")
    (tmp_path / "extra.jsonl").write_text("".join(json.dumps({"__key__": k, "c": "1"}) + "\n"
                                                  for k in keys + ["zz"]))
    one_line(sh("tarjoin a.tar --table extra.jsonl > /dev/null", ok=False), "'zz'", "line 6", "not in A")
    assert list(samples_of(sh("tarjoin --how inner a.tar --table part.jsonl").stdout)) == ["k001"]
    left = samples_of(sh("tarjoin --how left a.tar --table part.jsonl").stdout)
    assert list(left) == keys and left["k001"]["c"] == b"1"
    # a column that is also a field of A is refused unless renamed
    (tmp_path / "cls.jsonl").write_text("".join(json.dumps({"__key__": k, "cls": "x"}) + "\n" for k in keys))
    one_line(sh("tarjoin a.tar --table cls.jsonl > /dev/null", ok=False), "'cls'", "in A and in B")
    assert samples_of(sh("tarjoin a.tar --table cls.jsonl -r B:cls=cls2").stdout)["k001"]["cls2"] == b"x"


def test_a_npy_table_adds_a_row_per_sample_in_order(sh, tmp_path):
    import numpy as np

    write(tmp_path, "a.tar", A(KEYS[:6]))
    np.save(tmp_path / "emb.npy", np.arange(18, dtype="float32").reshape(6, 3))
    out = sh("tarjoin a.tar --table emb.npy -r B:npy=emb.npy").stdout
    got = samples_of(out)
    assert list(got) == KEYS[:6]
    row = np.load(io.BytesIO(got["k004"]["emb.npy"]))
    assert row.tolist() == [12.0, 13.0, 14.0] and row.dtype == np.float32
    # renamed onto a field of A: refused as any field in two inputs, not A's field overwritten
    one_line(sh("tarjoin a.tar --table emb.npy -r B:npy=cls -o out.tar", ok=False), "'cls'", "in A and in B")
    assert "npy" in samples_of(sh("tarjoin a.tar --table emb.npy -r B:npy=npy").stdout)["k000"]
    one_line(sh("tarjoin a.tar --table emb.npy -r B:emb=x > /dev/null", ok=False), "B:emb", ".npy table")
    np.save(tmp_path / "short.npy", np.zeros((4, 2)))
    one_line(sh("tarjoin a.tar --table short.npy -o out.tar", ok=False), "4 rows", "'k004'")
    np.save(tmp_path / "long.npy", np.zeros((9, 2)))
    one_line(sh("tarjoin a.tar --table long.npy -o out.tar", ok=False), "9 rows", "A has 6")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    one_line(sh("tarjoin a.tar --table obj.npy -o out.tar", ok=False), "obj.npy", "Python objects")
    (tmp_path / "junk.npy").write_bytes(bytes(range(256)) * 4)  # (numpy would call it a pickle)
    one_line(sh("tarjoin a.tar --table junk.npy -o out.tar", ok=False), "junk.npy", "not a .npy file")
    assert not (tmp_path / "out.tar").exists()


def test_hostile_tables(sh, tmp_path):
    write(tmp_path, "a.tar", A(KEYS[:2]))
    with open(tmp_path / "huge.jsonl", "wb") as f:
        f.write(b'{"__key__": "k000", "c": "' + b"x" * (17 << 20) + b'"}\n')
    one_line(sh("tarjoin a.tar --table huge.jsonl > /dev/null", ok=False), "huge.jsonl", "line 1", "longer than")
    cases = {
        "dup.jsonl": ('{"__key__": "k000"}\n{"__key__": "k000"}\n', "appears twice"),
        "bad.jsonl": ('{"__key__": "k000", "a/b": "x"}\n', "'a/b'"),
        "nokey.tsv": ("a\tb\n1\t2\n", "no __key__ column"),
        "ragged.tsv": ("__key__\tc\nk000\t1\t2\n", "3 cells"),
        "dotkey.jsonl": ('{"__key__": "k.000"}\n', "dot"),
        "deep.jsonl": ('{"__key__": "k000", "c": ' + "[" * 5000 + "]" * 5000 + "}\n", "line 1"),
        "t.xlsx": ("x", "unknown table format"),
    }
    for name, (text, word) in cases.items():
        (tmp_path / name).write_text(text)
        one_line(sh(f"tarjoin a.tar --table {name} > /dev/null", ok=False), word)
    one_line(sh("tarjoin a.tar --table missing.jsonl > /dev/null", ok=False), "missing.jsonl")
    # the table budget
    (tmp_path / "big.jsonl").write_text("".join(json.dumps({"__key__": f"k{i:05d}", "c": "x" * 100}) + "\n"
                                                for i in range(2000)))
    one_line(sh("tarjoin a.tar --table big.jsonl --memory 50KB > /dev/null", ok=False), "memory budget")


def test_shard_by_shard_in_parallel(sh, tmp_path):
    """-o naming one output per pair: pair i joined into output i, -p 2 in
    worker processes; a failing pair leaves nothing under its name, the
    others are committed; exit 2 with one line naming the failing output."""
    for s in range(3):
        keys = [f"s{s}/{i:03d}" for i in range(30)]
        write(tmp_path, f"a-{s}.tar", A(keys))
        write(tmp_path, f"b-{s}.tar", B(keys if s != 1 else keys[:-1]))
    one = sh("tarjoin 'a-{0..2}.tar' 'b-{0..2}.tar' -o 'ab-{0..2}.tar' -p 2", ok=False)
    one_line(one, "ab-1.tar", "'s1/029'")
    assert not (tmp_path / "ab-1.tar").exists()
    for s in (0, 2):
        got = samples_of((tmp_path / f"ab-{s}.tar").read_bytes())
        assert len(got) == 30 and all(set(f) == {"cls", "jpg", "txt"} for f in got.values())
    assert [f for f in os.listdir(tmp_path) if "partial" in f] == []
    sh("tarjoin --how left 'a-{0..2}.tar' 'b-{0..2}.tar' -o 'ab-{0..2}.tar' -p 2")
    assert len(samples_of((tmp_path / "ab-1.tar").read_bytes())) == 30
    # the same pairs joined by one process into one output
    whole = samples_of(sh("tarjoin --how left 'a-{0..2}.tar' 'b-{0..2}.tar'").stdout)
    assert len(whole) == 90
    # a keyed table, read once and looked up by every pair; strict: a row no pair used is named at the end
    rows = [{"__key__": f"s{s}/{i:03d}", "c": f"{s}.{i}"} for s in range(3) for i in range(30)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = sh("tarjoin -p 2 --how left 'a-{0..2}.tar' 'b-{0..2}.tar' --table t.jsonl -o 'abt-{0..2}.tar' "
           "-r C:zz=y", stderr_ok=True)  # (a rename no pair used: one warning, not one per pair)
    assert p.stderr.decode().count("\n") == 1 and "C:zz=y renamed nothing" in p.stderr.decode(), p.stderr
    assert samples_of((tmp_path / "abt-2.tar").read_bytes())["s2/017"]["c"] == b"2.17"
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [{"__key__": "zz"}]))
    one_line(sh("tarjoin -p 2 'a-{0..2}.tar' --table t.jsonl -o 'at-{0..2}.tar'", ok=False),
             "'zz'", "line 91", "any pair")
    import numpy as np

    np.save(tmp_path / "emb.npy", np.zeros((90, 2)))
    one_line(sh("tarjoin -p 2 'a-{0..2}.tar' --table emb.npy -o 'at-{0..2}.tar'", ok=False), "one pass")
    one_line(sh("tarjoin -p 2 a-0.tar b-0.tar > /dev/null", ok=False), "-p")
    one_line(sh("tarjoin 'a-{0..2}.tar' b-0.tar -o 'ab-{0..2}.tar'", ok=False), "as many shards")
    one_line(sh("tarjoin 'a-{0..2}.tar' 'b-{0..2}.tar' -o 'ab-{0..3}.tar'", ok=False), "as many shards")
    one_line(sh("tarjoin 'a-{0..2}.tar' 'b-{0..2}.tar' -o '{x,./x,y}.tar'", ok=False), "one output twice")
    # an output directory that is missing: refused before anything is read (docs/commit.md)
    p = sh("tarjoin --how left 'a-{0..2}.tar' 'b-{0..2}.tar' -o 'nodir/ab-{0..2}.tar' -p 2", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and "directory nodir does not exist" in err.splitlines()[-1], err
    # one that only the pattern names (no directory spelled out): exit 1 in a worker, the output named once
    p = sh("tarjoin --how left 'a-{0..2}.tar' 'b-{0..2}.tar' -o '{n0,n1,n2}/ab.tar' -p 2", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.splitlines()) == 1 and err.count("n0/ab.tar") == 1, err
    # the same bytes from one process as from two workers
    sh("tarjoin --how left 'a-{0..2}.tar' 'b-{0..2}.tar' -o 'one-{0..2}.tar'")
    assert all((tmp_path / f"one-{s}.tar").read_bytes() == (tmp_path / f"ab-{s}.tar").read_bytes()
               for s in range(3))


def _foreign(tmp_path, n=12):
    """The same samples written by GNU tar (gnu format), bsdtar, tarfile (pax) and webdataset."""
    import random

    r = random.Random(5)
    samples = [(f"d{i % 3}/{i:05d}", {"cls": b"%d" % (i % 7), "jpg": r.randbytes(300 + i),
                                      "json": b'{"i": %d}' % i}) for i in range(n)]
    tree = tmp_path / "tree"
    names = []
    for k, fields in samples:
        for f in sorted(fields):
            p = tree / f"{k}.{f}"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(fields[f])
            names.append(f"{k}.{f}")
    require("tar")
    subprocess.run(["tar", "--format=gnu", "-cf", str(tmp_path / "gnu.tar"), "-C", str(tree), "--no-recursion"]
                   + names, check=True)
    require("bsdtar")
    subprocess.run(["bsdtar", "-cf", str(tmp_path / "bsd.tar"), "-C", str(tree), "-n"] + names, check=True)
    (tmp_path / "pax.tar").write_bytes(shard(samples, tarfile.PAX_FORMAT))
    import webdataset as wds

    with wds.TarWriter(str(tmp_path / "wds.tar")) as w:
        for k, fields in samples:
            w.write({"__key__": k, **fields})
    return samples


def test_joins_shards_other_tools_wrote(sh, tmp_path):
    samples = _foreign(tmp_path)
    expect = {k: f for k, f in samples}
    sh("tarcat -f json wds.tar -o json.tar")
    for a, b in (("gnu.tar", "pipe:tarcat -f json wds.tar"), ("wds.tar", "json.tar"), ("pax.tar", "gnu.tar"),
                 ("bsd.tar", "wds.tar")):
        renames = "B:json=json2" if "json" in b else "B:json=json2,cls=cls2,jpg=jpg2"
        out = sh(f"tarjoin {a} '{b}' -r {renames}").stdout
        got = samples_of(out)
        assert list(got) == list(expect)
        for k, f in expect.items():
            assert got[k]["jpg"] == f["jpg"] and got[k]["json2"] == f["json"]
    # GNU tar reads what we wrote
    (tmp_path / "out.tar").write_bytes(sh("tarjoin gnu.tar 'pipe:tarcat -f json wds.tar' -r B:json=j2").stdout)
    listing = subprocess.run(["tar", "-tf", str(tmp_path / "out.tar")], capture_output=True, check=True).stdout
    assert listing.decode().splitlines()[:4] == ["d0/00000.cls", "d0/00000.j2", "d0/00000.jpg", "d0/00000.json"]


def test_hostile_inputs(sh, tmp_path):
    write(tmp_path, "a.tar", A(KEYS))
    write(tmp_path, "b.tar", B(KEYS))
    # empty inputs: both empty is an empty archive; one empty is a missing key (strict)
    (tmp_path / "empty.tar").write_bytes(b"\0" * 1024)
    out = sh("tarjoin empty.tar empty.tar").stdout
    assert read_tar(out) == []
    one_line(sh("tarjoin empty.tar b.tar > /dev/null", ok=False), "'k000'", "not in A")
    one_line(sh("tarjoin a.tar empty.tar > /dev/null", ok=False), "'k000'", "B has ended")
    assert len(samples_of(sh("tarjoin --how left a.tar empty.tar").stdout)) == 20
    # truncated input: exit 2, one line, no output file
    data = (tmp_path / "b.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(data[: len(data) // 2 + 100])
    one_line(sh("tarjoin a.tar cut.tar -o out.tar", ok=False), "cut.tar")
    one_line(sh("cat cut.tar | tarjoin - a.tar -o out.tar", ok=False))
    assert not (tmp_path / "out.tar").exists()
    # | head ends quietly
    big = [f"k{i:05d}" for i in range(3000)]
    write(tmp_path, "a3.tar", A(big))
    write(tmp_path, "b3.tar", B(big))
    p = sh("tarjoin a3.tar b3.tar | head -c 100 > out; echo ${PIPESTATUS[0]} > rc")
    assert p.stderr == b"" and int((tmp_path / "rc").read_text()) in (0, 141)
    assert (tmp_path / "out").stat().st_size == 100
    # an input that is the output, stdin twice, a missing input, a directory output
    one_line(sh("tarjoin a.tar b.tar -o b.tar", ok=False), "b.tar", "also the output")
    os.symlink("b.tar", tmp_path / "link.tar")
    one_line(sh("tarjoin a.tar link.tar -o ./b.tar", ok=False), "link.tar", "also the output")
    sh("tarjoin a.tar b.tar -o link.tar")  # a link as the output is replaced, never written through
    assert not os.path.islink(tmp_path / "link.tar") and (tmp_path / "b.tar").read_bytes() == data
    assert (tmp_path / "b.tar").read_bytes() == data
    one_line(sh("tarjoin - - < a.tar > /dev/null", ok=False), "stdin")
    p = sh("tarjoin a.tar b.tar -o nodir/out.tar", ok=False)
    assert p.returncode == 2 and b"directory nodir does not exist" in p.stderr, p.stderr
    one_line(sh("tarjoin a.tar nosuch.tar > /dev/null", ok=False), "nosuch.tar")
    p = sh("tarjoin a.tar b.tar --how outer > /dev/null", ok=False)  # click's usage line, then the error
    assert p.returncode == 2 and p.stderr.decode().splitlines()[-1].startswith("tarjoin: error: ") \
        and "'outer'" in p.stderr.decode()


def test_large_members_stay_spooled(sh, tmp_path):
    """Members over the blob threshold pass as files, never loaded whole;
    the output holds their bytes."""
    big = bytes(range(256)) * 8192  # 2 MiB
    (tmp_path / "a.tar").write_bytes(shard([("v0", {"mp4": big}), ("v1", {"mp4": big[::-1]})]))
    write(tmp_path, "b.tar", B(["v0", "v1"]))
    for order in ("input", "key"):
        got = samples_of(sh(f"tarjoin --order {order} --blob-threshold 64KiB --tmpdir . a.tar b.tar").stdout)
        assert got["v0"]["mp4"] == big and got["v1"]["mp4"] == big[::-1] and got["v1"]["txt"] == b"caption of v1"
    assert [f for f in os.listdir(tmp_path) if "spool" in f] == []


def test_api_join_samples(tmp_path):
    import tarproc

    a = [{"__key__": k, "cls": b"1"} for k in ("x", "y", "z")]
    b = [{"__key__": k, "txt": b"t" + k.encode()} for k in ("x", "z")]
    out = list(tarproc.join_samples([a, b], how="left"))
    assert [s["__key__"] for s in out] == ["x", "y", "z"] and "txt" not in out[1] and out[2]["txt"] == b"tz"
    out = list(tarproc.join_samples([a, b], how="inner", rename={"B": {"txt": "caption"}}))
    assert [s["caption"] for s in out] == [b"tx", b"tz"]
    with pytest.raises(tarproc.BadInput, match="'y'"):
        list(tarproc.join_samples([a, b]))
    with pytest.raises(tarproc.UsageError):
        tarproc.join_samples([a, b], how="outer")
    # metadata of either input (__url__, __local_path__, ...) travels, and is never written as a member
    ma = [{"__key__": "x", "__url__": "http://a", "__local_path__": "/a", "cls": b"1"}]
    mb = [{"__key__": "x", "__url__": "http://b", "__source__": "b.tar", "__index__": 7, "txt": b"t"}]
    joined = list(tarproc.join_samples([ma, mb]))
    assert joined[0]["__url__"] == "http://a" and joined[0]["txt"] == b"t"
    buf = io.BytesIO()
    w = tarproc.SampleWriter(buf)
    for s in joined:
        w.write(s)
    w.close()
    assert [n for n, _ in read_tar(buf.getvalue())] == ["x.cls", "x.txt"]
    # from a thread, over URLs
    import threading

    tarproc.write_samples(str(tmp_path / "a.tar"), a)
    res = []
    t = threading.Thread(target=lambda: res.extend(tarproc.join_samples([str(tmp_path / "a.tar"), a[::-1]],
                                                                         order="key", rename=["B:cls=c2"])))
    t.start()
    t.join()
    assert [s["__key__"] for s in res] == ["x", "y", "z"] and res[0]["c2"] == b"1"


def test_output_flows_while_input_arrives(tmp_path):
    """A joined sample comes out while A (a live pipe) is still open."""
    import select
    import time

    write(tmp_path, "b.tar", B(KEYS))
    first = shard(A(KEYS[:2]))[:-1024]  # two samples, no end-of-archive marker yet
    p = subprocess.Popen(["tarjoin", "-", "b.tar"], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        p.stdin.write(first)
        p.stdin.flush()
        deadline = time.monotonic() + 30
        got = b""
        while b"k000.txt" not in got and time.monotonic() < deadline:
            if select.select([p.stdout], [], [], 1)[0]:
                got += os.read(p.stdout.fileno(), 65536)
        assert b"k000.txt" in got and p.poll() is None  # out before the input ended
    finally:
        p.kill()
        p.wait()


def test_sigterm_in_shard_by_shard_leaves_no_partial_output(tmp_path):
    """Stopped while its workers are mid-pair, nothing stays behind: no
    output under a final name, no temporary file, no worker."""
    import signal
    import threading
    import time

    feeders = []
    for s in range(2):
        keys = [f"s{s}/{i:03d}" for i in range(30)]
        write(tmp_path, f"b-{s}.tar", B(keys))
        data = shard(A(keys))
        os.mkfifo(tmp_path / f"a-{s}.tar")

        def feed(path=tmp_path / f"a-{s}.tar", data=data):
            with open(path, "wb") as f:
                f.write(data[:2048])
                f.flush()
                time.sleep(20)  # (the reader is gone before this ends: the write below fails)
                try:
                    f.write(data[2048:])
                except OSError:
                    pass

        feeders.append(threading.Thread(target=feed, daemon=True))
        feeders[-1].start()
    p = subprocess.Popen(["tarjoin", "-p", "2", "a-{0..1}.tar", "b-{0..1}.tar", "-o", "ab-{0..1}.tar"],
                         cwd=tmp_path, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while len([f for f in os.listdir(tmp_path) if "partial" in f]) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len([f for f in os.listdir(tmp_path) if "partial" in f]) == 2  # both pairs under way
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 143
    time.sleep(0.5)
    assert [f for f in os.listdir(tmp_path) if f.startswith(("ab-", ".ab-"))] == []
    ps = subprocess.run(["pgrep", "-f", "tarjoin -p 2 a-"], capture_output=True, text=True).stdout.split()
    assert ps == []


def test_help_examples_run(sh, tmp_path):
    """Every line of ``tarjoin --help``'s examples runs, on files named as there."""
    import numpy as np

    from tarproc.cli.tarjoin import EXAMPLES

    keys = KEYS[:6]
    for name in ("images.tar", "data.tar", "lr.tar", "shuffled-a.tar"):
        write(tmp_path, name, [(k, dict(f, txt=b"text of " + k.encode())) for k, f in A(keys)]
              if name == "data.tar" else A(keys))
    write(tmp_path, "captions.tar", B(keys))
    write(tmp_path, "hr.tar", [(k, {"jpg": b"HR"}) for k in keys])
    write(tmp_path, "labels.tar", [(k, {"label": b"1"}) for k in keys[::2]])
    write(tmp_path, "shuffled-b.tar", B(keys[::-1]))
    (tmp_path / "captions.jsonl").write_text("".join(json.dumps({"__key__": k, "caption": k}) + "\n"
                                                     for k in keys))
    np.save(tmp_path / "clip.npy", np.ones((len(keys), 4), dtype="float32"))
    for i in range(10):
        ks = [f"s{i}_{j}" for j in range(2)]
        for a, b in (("img", "emb"), ("a", "b")):
            write(tmp_path, f"{a}-{i:04d}.tar", A(ks))
            write(tmp_path, f"{b}-{i:04d}.tar", B(ks))
    lines = EXAMPLES.strip().replace("\\\n", " ").splitlines()
    assert len(lines) >= 8
    for line in lines:
        p = sh(line, ok=False)
        assert p.returncode == 0, f"{line}: {p.stderr.decode(errors='replace')}"
    assert np.load(io.BytesIO(samples_of((tmp_path / "with-emb.tar").read_bytes())["k001"]["clip.npy"])).shape == (4,)
    assert samples_of((tmp_path / "both.tar").read_bytes())["k002"]["jpg_hr"] == b"HR"
    assert samples_of((tmp_path / "data-up.tar").read_bytes())["k003"]["up"] == b"TEXT OF K003"
    assert list(samples_of((tmp_path / "by-key.tar").read_bytes())) == keys
    assert len(samples_of((tmp_path / "ab-0009.tar").read_bytes())) == 2


def test_many_fields_named_anew_in_each_sample_keep_memory_flat():
    """The fast path remembers the shapes of the samples it joined (their
    dict keys), a bounded number of names in all: samples that each bring
    fields of new names (1200 samples of 2 x 30 fields held 4 MB) cost no
    more memory than samples with the same fields."""
    import tracemalloc

    import tarproc
    from tarproc.core.passthru import RawSample

    def raw(key, fields):
        s = RawSample({"__key__": key, "__source__": "x.tar", **fields})
        s.raw = ([b"member bytes"], len(fields))
        return s

    def shard(prefix, n, fresh):
        for i in range(n):
            yield raw(f"k{i:05d}", {f"{prefix}{i if fresh else 0}_{j:02d}": b"" for j in range(30)})

    def peak(fresh):
        tracemalloc.start()
        try:
            n = 0
            for s in tarproc.join_samples([shard("a", 1200, fresh), shard("b", 1200, fresh)]):
                assert s.raw is not None  # joined by its bytes
                n += 1
            return n, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    (n_same, same), (n_fresh, fresh) = peak(False), peak(True)
    assert n_same == n_fresh == 1200
    assert fresh < same + (2 << 20), (same, fresh)


def test_names_in_messages_are_escaped(sh, tmp_path):
    """Paths with a newline or an escape sequence (a shard, a table, a
    missing input) come out on one line, escaped, with no raw ESC."""
    write(tmp_path, "a.tar", A(KEYS[:3]))
    write(tmp_path, "b\nx\x1b[31m.tar", B(["k000", "zzz"]))
    (tmp_path / "t\n\x1b[2J.jsonl").write_text('{"__key__": "zz", "c": "1"}\n')

    def check(cmd, *words):
        err = one_line(sh(cmd, ok=False), *words)
        assert "\x1b" not in err, err
        return err

    check("tarjoin a.tar $'b\\nx\\e[31m.tar' > /dev/null", "'zzz'", "b\\nx\\x1b[31m.tar")
    check("tarjoin a.tar --table $'t\\n\\e[2J.jsonl' > /dev/null", "t\\n\\x1b[2J.jsonl")
    check("tarjoin a.tar $'no\\nsuch\\e[1m.tar' > /dev/null", "no\\nsuch\\x1b[1m.tar", "cannot open")
    check("tarjoin a.tar --table $'no\\nsuch\\e[1m.jsonl' > /dev/null", "no\\nsuch\\x1b[1m.jsonl")


def test_one_stream_given_as_two_inputs_is_refused(sh, tmp_path):
    """A join reads its inputs side by side: stdin twice under two names,
    or a FIFO named twice, would split one stream between them (a hang or
    a wrong error); a regular file redirected to stdin may be read twice."""
    write(tmp_path, "a.tar", A(KEYS[:3]))
    one_line(sh("cat a.tar | tarjoin - /dev/stdin -r B:cls=c,jpg=j > /dev/null", ok=False), "same stream")
    os.mkfifo(tmp_path / "ff")
    one_line(sh("tarjoin --how left ff ./ff -r B:cls=c,jpg=j > /dev/null", ok=False, timeout=30),
             "ff and ./ff", "same stream")
    got = samples_of(sh("tarjoin - /dev/stdin -r B:cls=c,jpg=j < a.tar").stdout)
    assert got["k002"]["c"] == b"2" and got["k002"]["jpg"] == got["k002"]["j"]


def test_a_quote_left_open_in_a_csv_table_is_an_error(sh, tmp_path):
    """Not the rest of the table read into one cell (its rows lost without a word with --how left)."""
    write(tmp_path, "a.tar", A(KEYS[:3]))
    (tmp_path / "t.csv").write_text('__key__,c\nk000,"open\nk001,x\nk002,y\n')
    one_line(sh("tarjoin --how left a.tar --table t.csv > /dev/null", ok=False), "t.csv", "from line 2 to line 4",
             "never closed")


def test_a_keyed_table_stays_within_its_memory_budget(tmp_path):
    """What a table holds in memory is counted with what Python's objects
    cost (a row of two short cells takes about 500 bytes): one it accepts
    fits in the budget (counting only the bytes let it take 2.4 times as much)."""
    import tracemalloc

    import tarproc
    from tarproc.sources.columns import KeyedTable

    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"__key__": f"k{i:06d}", "c": "short", "n": i % 10}) + "\n"
                                              for i in range(10000)))
    budget = 3 << 20
    tracemalloc.start()
    try:
        table = KeyedTable(str(tmp_path / "t.jsonl"), budget)
        held = tracemalloc.get_traced_memory()[0]
    except tarproc.BadInput as e:
        assert "memory budget" in str(e)
        held = 0
    finally:
        tracemalloc.stop()
    assert held <= budget, held
    table = KeyedTable(str(tmp_path / "t.jsonl"), 64 << 20)
    assert len(table) == 10000 and table.get("k000007") == {"c": b"short", "n": b"7"}


def test_an_inner_join_with_no_common_key_says_so(sh, tmp_path):
    (tmp_path / "a.tar").write_bytes(tar_bytes([(f"k{i}.cls", b"1") for i in range(4)]))
    (tmp_path / "b.tar").write_bytes(tar_bytes([(f"x{i}.txt", b"t") for i in range(4)]))
    p = sh("tarjoin --how inner --order key a.tar b.tar -o j.tar", stderr_ok=True)
    assert p.stderr.decode() == ("tarjoin: warning: no key is in every input (--how inner): none of the 4 samples "
                                 "of A joined, the output is empty\n")
    assert tarfile.open(tmp_path / "j.tar").getnames() == []
    for i in range(2):
        sh(f"cp a.tar a-{i}.tar; cp b.tar b-{i}.tar")
    p = sh("tarjoin -p 2 --how inner --order key 'a-{0..1}.tar' 'b-{0..1}.tar' -o 'j-{0..1}.tar'", stderr_ok=True)
    assert "no key is in every input (--how inner): the outputs are empty" in p.stderr.decode()
    assert sh("tarjoin --how inner --order key a.tar a.tar --rename B:cls=c2 -o j.tar").stderr == b""
