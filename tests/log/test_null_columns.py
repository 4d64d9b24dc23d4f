"""File lists hold several fields no file uses: their null columns share one zeroed buffer."""

from __future__ import annotations

import pyarrow as pa

from txnlog.log.file_actions import FILES_SCHEMA, TOMBSTONES_SCHEMA, null_column


def test_null_columns_share_one_buffer_and_equal_arrow_nulls() -> None:
    for field in [*FILES_SCHEMA, *TOMBSTONES_SCHEMA]:
        for n in (0, 1, 7, 70_000):
            column = null_column(n, field.type)
            column.validate(full=True)
            assert column.equals(pa.nulls(n, field.type)), field
        assert null_column(5, field.type).slice(2).equals(pa.nulls(3, field.type))
    before = pa.total_allocated_bytes()
    columns = [null_column(100_000, f.type) for f in FILES_SCHEMA for _ in range(10)]
    assert pa.total_allocated_bytes() - before < 100_000 and len(columns) == 10 * len(FILES_SCHEMA)
    validity = {c.buffers()[0].address for c in columns if c.buffers()[0] is not None}
    assert len(validity) == 1  # one buffer behind every column


def test_null_columns_from_threads_racing_to_grow_the_buffer_are_whole() -> None:
    # Commits are parsed on a thread pool, each growing the shared buffer as its chunk needs.
    from concurrent.futures import ThreadPoolExecutor

    def build(seed: int) -> int:
        for n in range(seed, 200_000, 9_973):
            null_column(n, FILES_SCHEMA.field("deletion_vector").type).validate(full=True)
        return seed

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(build, range(8))) == list(range(8))
