"""ParquetTable and TableWriter with their threads: a read broken off (a
``break``, an error raised while the traceback is still held) or a write
that fails stops the thread at once and puts the switch interval back."""

import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tarproc.errors import BadInput, OutputError
from tarproc.sinks.parquet import TableWriter, table_to_tar
from tarproc.sources.parquet import ParquetTable


def threads():
    return [t.name for t in threading.enumerate() if t.name.startswith(("tarproc-readahead", "tarproc-parquet"))]


@pytest.fixture
def table(tmp_path):
    keys = [f"k{i:04d}" for i in range(400)]
    keys[250] = "../bad"  # (row group 5 of 50-row groups)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"__key__": keys, "bin": [b"x" * 100] * 400}), str(path), row_group_size=50)
    return str(path)


def test_an_error_with_its_traceback_held_leaves_no_thread(table, tmp_path):
    before = sys.getswitchinterval()
    with pytest.raises(BadInput, match="row 250") as info:
        table_to_tar(ParquetTable(table), str(tmp_path / "out.tar"))
    assert info.traceback  # (held: the frames of the read are alive)
    assert threads() == []
    assert sys.getswitchinterval() == before
    assert not (tmp_path / "out.tar").exists()


@pytest.mark.parametrize("how", ["samples", "rows", "batches"])
def test_a_read_broken_off_stops_the_thread(table, how):
    before = sys.getswitchinterval()
    t = ParquetTable(table)
    it = iter(t) if how == "samples" else getattr(t, how)()
    first = next(it)
    assert first
    assert threads() == ["tarproc-readahead"]
    it.close()
    assert threads() == []
    assert sys.getswitchinterval() == before


def test_a_writer_that_fails_in_its_thread_raises_in_the_caller_and_ends(tmp_path):
    before = sys.getswitchinterval()
    w = TableWriter("/dev/full", group_rows=10)
    with pytest.raises(OutputError, match="No space left"):
        for i in range(200):
            w.write({"__key__": f"k{i:03d}", "bin": b"y" * 1000})
        w.close()
    w.abort()
    assert threads() == []
    assert sys.getswitchinterval() == before
