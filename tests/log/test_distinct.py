"""The duplicate-key check replay runs on every add and remove it reads."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from txnlog.log.distinct import all_distinct, fingerprints

keys = st.lists(st.text(alphabet="ab/=.-é0", max_size=12), max_size=60)


@settings(max_examples=300, deadline=None)
@given(keys, st.integers(1, 7), st.sampled_from([pa.string(), pa.large_string()]))
def test_all_distinct_agrees_with_a_set(values: list[str], chunk: int, kind: pa.DataType) -> None:
    # Chunked and sliced as replay's columns are: prints depend on the bytes, not the layout.
    column = pa.chunked_array([pa.array(values[i : i + chunk], kind) for i in range(0, len(values), chunk)], kind)
    assert all_distinct(column) == (len(set(values)) == len(values))
    sliced = pa.array(["pad", *values, "pad"], kind).slice(1, len(values))
    assert all_distinct(sliced) == (len(set(values)) == len(values))


def test_equal_keys_get_equal_prints_wherever_they_sit() -> None:
    path = "part=p007/part-00001-b1cb0501-f360-af76-1003-a4ade26a971b.c000.snappy.parquet"
    column = pa.chunked_array([pa.array(["x", path, "y" * 300]), pa.array([path, "", "y" * 300]).slice(0, 3)])
    prints = fingerprints(column)
    assert prints[1] == prints[3] and prints[2] == prints[5]
    assert len(set(prints.tolist())) == 4


def test_a_repeat_among_a_million_keys_is_found() -> None:
    paths = [f"part=p{i % 50:03d}/part-{i:08d}-c000.snappy.parquet" for i in range(1_000_000)]
    chunks = [pa.array(paths[i : i + 10_000]) for i in range(0, len(paths), 10_000)]
    assert all_distinct(pa.chunked_array(chunks))
    chunks.append(pa.array([paths[123_456]]))
    assert not all_distinct(pa.chunked_array(chunks))

