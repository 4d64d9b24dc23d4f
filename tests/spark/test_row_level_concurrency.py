"""Row-level concurrency through the Spark API: a Spark OPTIMIZE that loses to a merge-on-read
DELETE carries the deleted rows onto its output instead of re-planning, and a Spark UPDATE that
loses to an OPTIMIZE is rebased instead of failing. Checked with DuckDB's delta_scan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog
import txnlog.spark as ts
from tests.dml.conftest import duckdb_rows, sorted_rows
from tests.spark.test_optimize import HookedStore
from txnlog.spark import optimize
from txnlog.spark.merge import merge_into

# Every test in both regimes: rows found on the driver (small statements) and in Spark.
pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("dml_regime")]

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
PROPERTIES = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}


def _table(uri: str) -> txnlog.Table:
    table = txnlog.Table.create(uri, SCHEMA, properties=PROPERTIES)
    for start in range(0, 40, 10):
        table.append(pa.table({"id": list(range(start, start + 10)), "v": [0] * 10}, schema=SCHEMA))
    return table


def _rows(uri: str) -> list[tuple]:
    return sorted_rows(duckdb_rows(uri, ["id", "v"]))


def test_spark_optimize_carries_a_concurrent_delete_instead_of_replanning(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _table(uri)
    hooked = txnlog.Table(uri, store=HookedStore(uri, lambda: txnlog.Table(uri).delete("id in (3, 17, 38)")))
    result = optimize(spark, hooked, target_file_size=1 << 20)
    assert result.attempts == 1 and result.conflicts == ()
    assert result.version is not None
    assert [(s.operation, s.kind) for s in result.version.rebased] == [("DELETE", "deletion vector")]
    assert _rows(uri) == [(i, 0) for i in range(40) if i not in (3, 17, 38)]
    assert txnlog.Table(uri).snapshot().num_files == 1


def test_spark_update_is_rebased_over_a_concurrent_optimize(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = _table(uri)
    with ts.transaction(spark, uri, operation="UPDATE") as tx:
        tx.update("id in (4, 27)", {"v": "v + 5"})
        compacted = table.optimize()
    result = tx.txn.result
    assert result is not None and [(s.version, s.kind) for s in result.rebased] == [(compacted, "compaction")]
    assert _rows(uri) == [(i, 5 if i in (4, 27) else 0) for i in range(40)]
    info = txnlog.Table(uri).history(1)[0].commit_info
    assert info.operation == "UPDATE" and info.other[txnlog.properties.REBASE_COMMIT_INFO_KEY][0]["kind"] == "compaction"


def test_spark_merge_commits_through_a_delete_of_other_rows_of_its_files(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = _table(uri)
    source = spark.createDataFrame([(2, 9), (33, 9), (50, 9)], "id long, v long")
    txn = table.transaction("MERGE")
    merge_into(txn, spark, source, "id", when_matched_update="*", when_not_matched_insert="*")
    won = table.delete("id in (3, 34)")
    result = txn.commit()
    assert [(s.version, s.kind) for s in result.rebased] == [(won.version, "deletion vector")]
    expected = sorted_rows([(i, 9 if i in (2, 33) else 0) for i in range(40) if i not in (3, 34)] + [(50, 9)])
    assert _rows(uri) == expected
