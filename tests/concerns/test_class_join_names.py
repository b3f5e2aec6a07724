"""tarjoin's tables and renames, with names that collide or only look alike:
a table key twice, a column twice, a rename that makes two fields one name
or lands on a field of A or on a metadata name, a table column that is a
metadata name, a key that differs from A's only in Unicode normalization
(in a table, in a shard joined in input order, and by key), a table past
the memory budget: one line naming what and where, exit 2, no output."""

import io
import subprocess
import tarfile
import unicodedata

import pytest

NFC = "caf\u00e9"
NFD = unicodedata.normalize("NFD", NFC)


def _shard(keys, exts):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT) as t:
        for k in keys:
            for e in exts:
                data = f"{k} {e}".encode()
                info = tarfile.TarInfo(f"{k}.{e}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return b.getvalue()


def _tsv(header, keys, cells=("a",)):
    return "\t".join(header) + "\n" + "".join("\t".join((k, *cells)) + "\n" for k in keys)


KEYS = ["k0", "k1", NFC, "k3"]
FILES = {
    "a.tar": _shard(KEYS, ("txt", "cls")),
    "b.tar": _shard(["k0", "k1", NFD, "k3"], ("jpg",)),
    "t.tsv": _tsv(["__key__", "label", "cap"], KEYS, ("a", "b")),
    "dupkey.tsv": _tsv(["__key__", "label"], ["k0", "k0", "k1", NFC, "k3"]),
    "dupcol.tsv": _tsv(["__key__", "label", "label"], KEYS, ("a", "b")),
    "keycol.tsv": _tsv(["__key__", "__key__"], KEYS),
    "metacol.tsv": _tsv(["__key__", "__url__"], KEYS),
    "nfd.tsv": _tsv(["__key__", "label"], ["k0", "k1", NFD, "k3"]),
    "big.tsv": _tsv(["__key__", "label"], [f"k{i}" for i in range(20000)], ("x" * 30,)),
}

CASES = {
    "table_key_twice": ("a.tar --table dupkey.tsv", "line 3: key 'k0' appears twice"),
    "table_column_twice": ("a.tar --table dupcol.tsv", "column 'label' appears twice"),
    "table_key_column_twice": ("a.tar --table keycol.tsv", "column '__key__' appears twice"),
    "table_metadata_column": ("a.tar --table metacol.tsv", "'__url__' is a metadata name"),
    "rename_two_onto_one": ("a.tar --table t.tsv -r B:label=cap", "two fields of B are named 'cap'"),
    "rename_onto_a_field_of_a": ("a.tar --table t.tsv -r B:label=txt", "field 'txt' is in A and in B"),
    "rename_onto_key": ("a.tar --table t.tsv -r B:label=__key__", "'__key__' is a metadata name"),
    "rename_shard_field_onto_key": ("a.tar a.tar -r B:txt=__key__,cls=c2", "'__key__' is a metadata name"),
    "table_key_other_normal_form": ("a.tar --table nfd.tsv", "only in Unicode normalization"),
    "shard_key_other_normal_form": ("a.tar b.tar", "only in Unicode normalization"),
    "shard_key_other_normal_form_by_key": ("--order key a.tar b.tar", "only in Unicode normalization"),
    "shard_key_other_normal_form_by_key_b_first": ("--order key b.tar a.tar", "only in Unicode normalization"),
    "table_past_memory": ("--how left --memory 256KB a.tar --table big.tsv", "larger than the memory budget"),
    "table_past_memory_pair_by_pair": ("--how left --memory 256KB -p 2 'a-{0..1}.tar' --table big.tsv",
                                       "larger than the memory budget"),
}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("join")
    for name, data in FILES.items():
        (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    for i in range(2):
        (d / f"a-{i}.tar").write_bytes(FILES["a.tar"])
    return d


@pytest.mark.parametrize("name", list(CASES))
def test_names_that_collide_or_look_alike_are_one_line(work, name):
    args, words = CASES[name]
    out = "'o-{0..1}.tar'" if "-p 2" in args else "o.tar"
    p = subprocess.run(["bash", "-c", f"tarjoin {args} -o {out}"], cwd=work, capture_output=True, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and words in err, err
    assert not list(work.glob("o*.tar"))
