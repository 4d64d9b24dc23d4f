"""txnlog.write_table against deltalake's write_deltalake: the same rows after the same writes,
one commit per call, and every Arrow-compatible input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

import txnlog
from tests.dml.conftest import duckdb_rows, sorted_rows
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, ProtocolViolationError, TableAlreadyExistsError

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])


def rows(uri: str, reader: str = "txnlog") -> list[dict[str, Any]]:
    table = txnlog.Table(uri).snapshot().to_arrow() if reader == "txnlog" else deltalake.DeltaTable(uri).to_pyarrow_table()
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: r["id"])


def batch(ids: list[int], region: str | list[str], amount: float = 1.0) -> pa.Table:
    regions = region if isinstance(region, list) else [region] * len(ids)
    return pa.table({"id": ids, "region": regions, "amount": [amount] * len(ids)}, schema=SCHEMA)


# Each step: (keyword arguments of both calls, the data).
STEPS: list[tuple[dict[str, Any], pa.Table]] = [
    ({"partition_by": ["region"]}, batch([1, 2, 3, 4], ["EU", "EU", "US", "US"])),
    ({"mode": "append"}, batch([5, 6], "EU", 2.0)),
    ({"mode": "ignore"}, batch([99], "EU")),
    ({"mode": "overwrite", "predicate": "region = 'US'"}, batch([7], "US", 3.0)),  # a partition
    ({"mode": "overwrite", "predicate": "amount > 1.5"}, batch([8, 9], "EU", 5.0)),  # rows: the rest of each file is kept
    ({"mode": "append"}, batch([10], "APAC")),
    ({"mode": "overwrite"}, batch([11, 12], ["EU", "US"])),
]


@pytest.mark.parametrize("dv", [False, True])
def test_the_same_writes_give_deltalakes_rows_one_commit_each(tmp_path: Path, dv: bool) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    configuration = {"delta.enableDeletionVectors": "true"} if dv else None
    for step, (options, data) in enumerate(STEPS):
        version = txnlog.write_table(ours, data, configuration=configuration if step == 0 else None, **options)
        deltalake.write_deltalake(theirs, data, **options)
        assert rows(ours) == rows(theirs, "deltalake"), f"after step {step}: {options}"
        # An independent reader of our table: deltalake, or DuckDB where deltalake reads no deletion vectors.
        independent = duckdb_rows(ours, SCHEMA.names) if dv else [tuple(r.values()) for r in rows(ours, "deltalake")]
        assert sorted_rows(independent) == sorted_rows([tuple(r.values()) for r in rows(ours)]), f"after step {step}"
        if options.get("mode") == "ignore":
            assert version is None
        else:
            assert version is not None and version.version == txnlog.Table(ours).latest_version()
    table = txnlog.Table(ours)
    assert table.latest_version() == len(STEPS) - 2  # one commit per call, none for "ignore"
    first = table.history()[-1].commit_info
    assert first.operation == "CREATE TABLE AS SELECT"  # the table and its first rows in one commit
    assert table.snapshot(version=0).to_arrow().num_rows == 4


def test_error_mode_refuses_an_existing_table_and_a_predicate_every_new_row_must_match(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    txnlog.write_table(uri, batch([1, 2], "EU"))
    with pytest.raises(TableAlreadyExistsError):
        txnlog.write_table(uri, batch([3], "EU"))
    with pytest.raises(ProtocolViolationError, match="do not match the replaceWhere condition"):
        txnlog.write_table(uri, batch([3, 4], ["EU", "US"]), mode="overwrite", predicate="region = 'EU'")
    assert txnlog.Table(uri).latest_version() == 0 and rows(uri) == rows(uri, "deltalake")
    assert [r["id"] for r in rows(uri)] == [1, 2]  # nothing committed
    with pytest.raises(InvalidArgumentError, match="replace_where needs mode='overwrite'"):
        txnlog.write_table(uri, batch([3], "EU"), mode="append", predicate="region = 'EU'")
    with pytest.raises(InvalidArgumentError, match="schema_mode must be one of"):
        txnlog.write_table(uri, batch([3], "EU"), mode="append", schema_mode="replace")


def test_schema_modes_as_deltalake(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    wider = pa.table({"id": [2], "region": ["US"], "amount": [1.0], "note": ["new"]})
    other = pa.table({"key": ["a"], "n": [1]})
    for write in (txnlog.write_table, deltalake.write_deltalake):
        uri = ours if write is txnlog.write_table else theirs
        write(uri, batch([1], "EU"))
        write(uri, wider, mode="append", schema_mode="merge")
    assert deltalake.DeltaTable(ours).schema().to_arrow().names == ["id", "region", "amount", "note"]
    key = ["id", "region", "amount", "note"]
    ours_rows = sorted(txnlog.Table(ours).snapshot().to_arrow().select(key).to_pylist(), key=lambda r: r["id"])
    assert ours_rows == sorted(deltalake.DeltaTable(theirs).to_pyarrow_table().select(key).to_pylist(), key=lambda r: r["id"])
    with pytest.raises(InvalidArgumentError, match="goes with mode='overwrite'"):
        txnlog.write_table(ours, other, mode="append", schema_mode="overwrite")
    txnlog.write_table(ours, other, mode="overwrite", schema_mode="overwrite")
    deltalake.write_deltalake(theirs, other, mode="overwrite", schema_mode="overwrite")
    assert txnlog.Table(ours).snapshot().to_arrow().to_pylist() == deltalake.DeltaTable(theirs).to_pyarrow_table().to_pylist()
    assert deltalake.DeltaTable(ours).to_pyarrow_table().to_pylist() == [{"key": "a", "n": 1}]


class CStream:
    """Any object exporting an Arrow C stream, and nothing else."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.table.__arrow_c_stream__(requested_schema)


def inputs(tmp_path: Path) -> dict[str, Any]:
    data = batch([1, 2], "EU")
    pads.write_dataset(data, str(tmp_path / "ds"), format="parquet")
    return {
        "table": data,
        "record batch": data.to_batches()[0],
        "reader": pa.RecordBatchReader.from_batches(SCHEMA, data.to_batches()),
        "dataset": pads.dataset(str(tmp_path / "ds"), format="parquet"),
        "pandas": data.to_pandas(),
        "polars": pl.from_arrow(data),
        "c stream": CStream(data),
    }


@pytest.mark.parametrize("kind", ["table", "record batch", "reader", "dataset", "pandas", "polars", "c stream"])
def test_every_arrow_compatible_input_writes_appends_merges_and_creates(tmp_path: Path, kind: str) -> None:
    def fresh() -> Any:
        return inputs(tmp_path / f"in{len(list(tmp_path.iterdir()))}")[kind]

    uri = str(tmp_path / "t")
    txnlog.write_table(uri, fresh(), partition_by="region")
    # A predicate over a string column: polars exports string views, which the check reads too.
    txnlog.write_table(uri, fresh(), mode="overwrite", predicate="region = 'EU'")
    table = txnlog.Table(uri)
    table.append(fresh())
    table.merge(fresh(), "id").when_matched_update({"amount": "t.amount + s.amount"}).execute()
    assert rows(uri) == [{"id": 1, "region": "EU", "amount": 2.0}, {"id": 1, "region": "EU", "amount": 2.0},
                         {"id": 2, "region": "EU", "amount": 2.0}, {"id": 2, "region": "EU", "amount": 2.0}]
    created = txnlog.Table.create(str(tmp_path / "created"), fresh())
    assert created.snapshot().schema.names == SCHEMA.names


def test_an_input_that_is_not_arrow_names_what_it_takes(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentTypeError, match="pandas or polars DataFrame.*got int"):
        txnlog.write_table(str(tmp_path / "t"), 42)
    assert not txnlog.Table(str(tmp_path / "t")).exists()
    txnlog.write_table(str(tmp_path / "t"), pd.DataFrame({"id": [1]}))
    with pytest.raises(InvalidArgumentTypeError, match="merge source"):
        txnlog.Table(str(tmp_path / "t")).merge({"id": [1]}, "id", when_matched_update="*")


def test_a_stream_is_written_as_it_is_read(tmp_path: Path) -> None:
    # 40 batches of ~1 MiB each: were the input gathered before the write, Arrow would hold
    # all of it at once when the last batch is made. Scattered ids: sequential ones are
    # delta-encoded, so small on disk that a 4 MiB file would hold the whole stream.
    n, size = 40, 1 << 17
    peak = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal peak
        for i in range(n):
            peak = max(peak, pa.total_allocated_bytes())
            ids = np.arange(i * size, (i + 1) * size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) >> np.uint64(1)
            yield pa.record_batch({"id": pa.array(ids.astype(np.int64))})

    before = pa.total_allocated_bytes()
    reader = pa.RecordBatchReader.from_batches(pa.schema([("id", pa.int64())]), batches())
    txnlog.write_table(str(tmp_path / "t"), reader, configuration={"delta.targetFileSize": str(4 << 20)})
    assert txnlog.Table(str(tmp_path / "t")).snapshot().to_arrow().num_rows == n * size
    assert peak - before < 16 * size * 8, f"{(peak - before) >> 20} MiB held while streaming {n * size * 8 >> 20} MiB"


def test_columns_whose_values_repeat_are_dictionary_encoded_and_unique_keys_are_not(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    n = 20_000
    data = pa.table({"key": pa.array(range(n), pa.int64()), "user": pa.array([i % 10 for i in range(n)], pa.int64()),
                     "note": pa.array([f"n{i % 7}" for i in range(n)]), "nested": pa.array([[i] for i in range(n)])})
    txnlog.write_table(str(tmp_path / "flat"), data.drop_columns(["nested"]))
    txnlog.write_table(str(tmp_path / "nested"), data)
    (flat,) = (tmp_path / "flat").glob("*.parquet")
    chunks = pq.ParquetFile(flat).metadata.row_group(0)
    encodings = {chunks.column(i).path_in_schema: chunks.column(i).encodings for i in range(chunks.num_columns)}
    assert not any("DICTIONARY" in e for e in encodings["key"])
    assert any("DICTIONARY" in e for e in encodings["user"]) and any("DICTIONARY" in e for e in encodings["note"])
    (nested,) = (tmp_path / "nested").glob("*.parquet")
    chunks = pq.ParquetFile(nested).metadata.row_group(0)
    assert any("DICTIONARY" in e for e in chunks.column(0).encodings)  # nested columns: every column keeps Parquet's default
    assert txnlog.Table(str(tmp_path / "flat")).snapshot().to_arrow().equals(data.drop_columns(["nested"]))


def stepped_integers(n: int) -> pa.Table:
    """Integer columns with small steps (delta-encoded), with nulls, near int64's ends, going
    down, or all one large step; one that repeats (a dictionary) and one of random int64s (neither)."""
    rng = np.random.default_rng(7)
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "down": pa.array([None if i % 97 == 0 else 2**63 - 1 - 3 * i for i in range(n)], pa.int64()),
        "i32": pa.array(range(-n, 0), pa.int32()),
        "i16": pa.array([i % 30_000 - 15_000 for i in range(n)], pa.int16()),
        "stride": pa.array([-(2**62) + i * 2**40 for i in range(n)], pa.int64()),
        "repeats": pa.array([(i * 7) % 100 - 50 for i in range(n)], pa.int8()),
        "random": pa.array(rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)),
    })


def test_integer_columns_with_small_steps_are_delta_encoded_and_every_reader_reads_them(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    data = stepped_integers(20_000)
    uri = str(tmp_path / "t")
    txnlog.write_table(uri, data)
    (path,) = (tmp_path / "t").glob("*.parquet")
    chunks = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {chunks.column(i).path_in_schema: chunks.column(i).encodings for i in range(chunks.num_columns)}
    assert {c for c, e in encodings.items() if "DELTA_BINARY_PACKED" in e} == {"id", "down", "i32", "i16", "stride"}
    assert any("DICTIONARY" in e for e in encodings["repeats"]) and encodings["random"] == ("RLE", "PLAIN")

    assert txnlog.Table(uri).snapshot().to_arrow().equals(data)
    assert deltalake.DeltaTable(uri).to_pyarrow_table().sort_by("id").equals(data)
    assert sorted_rows(duckdb_rows(uri, data.column_names)) == sorted_rows([tuple(r.values()) for r in data.to_pylist()])
