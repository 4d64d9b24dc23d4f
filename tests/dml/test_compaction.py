"""Table.optimize (txnlog.optimize): small files and files with deletion vectors compacted
partition by partition, rows unchanged (read back by DuckDB), row ids kept, dataChange=false."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tests.dml.conftest import duckdb_rows, sorted_rows
from txnlog import Table

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.int64())])


def _table(path: Path, properties: dict[str, str]) -> Table:
    table = Table.create(str(path), SCHEMA, partition_by=["part"], properties=properties)
    for k in range(6):
        table.append(pa.table({"id": [2 * k, 2 * k + 1], "part": ["a" if k < 4 else "b"] * 2, "v": [k, k]}, schema=SCHEMA))
    return table


def _rows(table: Table) -> list[tuple]:
    return sorted_rows([(r["id"], r["part"], r["v"]) for r in table.snapshot().to_arrow().to_pylist()])


def test_optimize_compacts_each_partition_and_keeps_rows_and_row_ids(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"})
    table.delete("id = 3")
    ids = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in table.snapshot().to_arrow(with_row_ids=True).to_pylist()}
    before = _rows(table)
    version = table.optimize()
    assert version is not None
    snapshot = table.snapshot()
    assert snapshot.num_files == 2  # one per partition
    assert snapshot.files().column("deletion_vector").null_count == 2  # deleted rows dropped
    assert _rows(table) == before == sorted_rows(duckdb_rows(table.uri, ["id", "part", "v"]))
    assert {r["id"]: (r["row_id"], r["row_commit_version"]) for r in snapshot.to_arrow(with_row_ids=True).to_pylist()} == ids
    entry = table.history(1)[0]
    info = entry.commit_info
    assert info.operation == "OPTIMIZE" and info.operation_metrics["numRemovedFiles"] == "6"
    assert info.operation_metrics["numDeletionVectorsRemoved"] == "1"
    assert table.optimize() is None  # nothing left to compact


def test_optimize_with_a_predicate_only_touches_those_partitions(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", {})
    assert table.optimize("part = 'b'") is not None
    counts = {}
    for values in table.snapshot().files().column("partition_values").to_pylist():
        part = dict(values)["part"]
        counts[part] = counts.get(part, 0) + 1
    assert counts == {"a": 4, "b": 1}
    assert _rows(table) == sorted_rows([(i, "a" if i < 8 else "b", i // 2) for i in range(12)])


def test_optimize_commits_data_change_false(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", {})
    version = table.optimize()
    text = (tmp_path / "t" / "_delta_log" / f"{int(version):020d}.json").read_text()
    assert '"dataChange":true' not in text and '"dataChange":false' in text
