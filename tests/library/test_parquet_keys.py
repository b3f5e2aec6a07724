"""The batch test of Parquet keys (sources/parquet._plain_keys) passes only
batches whose every key passes the sample rule key by key: never a key the
rule refuses, never one repeating the key before."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tarproc.core.rules import bad_key
from tarproc.sources import parquet


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(alphabet="ab./\n\x1b\u2028 \u00e9", max_size=6)), max_size=8),
       st.one_of(st.none(), st.text(alphabet="ab", max_size=2)))
def test_a_batch_passed_at_once_passes_key_by_key(keys, last):
    if parquet._plain_keys(keys, last):
        before = last
        for key in keys:
            assert isinstance(key, str) and bad_key(key) is None and key != before, (keys, last)
            before = key


def test_the_common_batch_passes_at_once():
    keys = [f"train/{i:06d}" for i in range(1000)]
    assert parquet._plain_keys(keys, "train/-00001")
    assert not parquet._plain_keys(keys, keys[0])  # the key before repeats
    assert not parquet._plain_keys(keys[:5] + keys[4:], None)
