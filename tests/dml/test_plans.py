"""DML plans: what each decides before any row is read, the same for Python and Spark.

The portability visitor (``txnlog.expressions.Portability``) decides which plans Spark may hand
to the Python executor on its driver: only those whose rows and values both engines compute
alike (ANSI Spark fails on overflow, a remainder by zero, a failed cast; its case tables and
trim differ from Arrow's). Row-id columns: a table with row tracking but without its
materialized column names refuses every rewrite with one error, in Python and in Spark.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import txnlog
from txnlog.dml import MergeClause, MergePlan, RowChangePlan, SqlExpression


@pytest.mark.parametrize(
    ("predicate", "on_driver"),
    [
        ("key % 1000 = 7", True),
        ("name LIKE 'a%' AND key IN (1, 2)", True),
        ("coalesce(name, 'z') = 'z' OR key IS NULL", True),
        ("key % 0 = 1", False),  # Spark fails: a remainder by zero
        ("small + 1 < 0", False),  # Spark fails on overflow
        ("name = 5", False),  # Spark casts the strings to numbers, failing on 'abc'
        ("upper(name) = 'ABC'", False),  # Java's and Arrow's case tables differ
        ("name ILIKE 'a%'", False),
        ("key / 3 = 0.3333", False),  # a double
        ("trim(name) = 'a'", False),  # Spark trims spaces only
    ],
)
def test_only_conditions_spark_computes_alike_run_on_the_driver(tmp_path: Any, predicate: str, on_driver: bool) -> None:
    data = pa.table({"key": pa.array([1, 2], pa.int64()), "small": pa.array([2**31 - 1, 0], pa.int32()), "name": ["abc", None]})
    table = txnlog.Table.create(str(tmp_path / "t"), data.schema)
    assert RowChangePlan.delete(table.snapshot(), predicate).portable is on_driver


@pytest.mark.parametrize(
    ("on", "clauses", "source_types", "on_driver"),
    [
        ("key", {"when_matched_update": "*", "when_not_matched_insert": "*"}, {}, True),
        ("key", {"when_matched_update": {"name": "concat(s.name, t.name)"}, "when_matched_delete": "s.name IS NULL"}, {}, True),
        ("key", {"when_matched_update": {"name": "'gone'", "small": "NULL"}}, {"name": pa.large_string()}, True),
        ("key", {"when_matched_update": {"small": "s.small + 1"}}, {}, False),  # Spark fails on overflow
        ("key", {"when_matched_update": {"small": "s.key"}}, {}, False),  # a narrowing cast
        ("key", {"when_matched_update": {"small": "0"}}, {}, False),  # numbers: Spark's own casts
        ("key", {"when_matched_update": {"name": "upper(s.name)"}}, {}, False),
        ("key", {"when_matched_update": {"name": "name"}}, {}, False),  # ambiguous: Spark refuses it
        ("key", {"when_not_matched_insert": "*"}, {"key": pa.int32()}, False),  # Spark widens the key
        ("t.key = s.key AND s.small > 0", {"when_matched_delete": True}, {}, False),  # a residual condition
        ("score", {"when_matched_delete": True}, {}, False),  # floating point keys: NaN equals NaN in Spark
    ],
)
def test_only_merges_spark_computes_alike_run_on_the_driver(
    tmp_path: Any, on: str, clauses: dict[str, Any], source_types: dict[str, pa.DataType], on_driver: bool
) -> None:
    target = pa.schema({"key": pa.int64(), "small": pa.int32(), "name": pa.string(), "score": pa.float64()})
    source = pa.schema([pa.field(f.name, source_types.get(f.name, f.type)) for f in target])
    snapshot = txnlog.Table.create(str(tmp_path / "t"), target).snapshot()
    assert MergePlan.of(snapshot, source.names, on, strict=False, **clauses).portable(source) is on_driver


def test_a_rewrite_of_a_table_whose_row_id_columns_are_unnamed_is_refused_before_anything_is_written(tmp_path: Any) -> None:
    from tests.broken_tables import row_tracking_without_column_names

    table = row_tracking_without_column_names(tmp_path / "t")
    version = table.latest_version()
    assert table.snapshot().to_arrow().num_rows == 3  # readable as ever
    for change in (lambda: table.update("id = 1", {"v": "1"}), lambda: table.delete("id = 1"),
                   lambda: table.merge(pa.table({"id": [1], "v": [5]}), "id", when_matched_update="*")):
        with pytest.raises(txnlog.errors.LogCorruptError, match="materializedRowIdColumnName"):
            change()
    assert table.latest_version() == version
    assert not list((tmp_path / "t").glob("*.parquet"))[1:]  # only the appended file


def test_dml_records_nothing_in_the_transaction_it_runs_in(tmp_path: Any) -> None:
    table = txnlog.Table.create(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("v", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3], "v": [0, 0, 0]}))
    with table.transaction("STREAMING UPDATE", operation_parameters={"epochId": 7}) as txn:
        metrics = txnlog.dml.merge(txn, pa.table({"id": [2, 9], "v": [5, 5]}), "id", when_matched_update="*", when_not_matched_insert="*")
        assert txn.operation_parameters == {"epochId": 7}
        txn.set_operation_metrics(**metrics.operation_metrics())
    info = table.history(1)[0].commit_info
    assert info.operation_parameters == {"epochId": "7"}
    assert info.operation_metrics["numTargetRowsUpdated"] == "1" and info.operation_metrics["numTargetRowsInserted"] == "1"
    assert info.operation_metrics["numOutputRows"] == "4"  # what was written: 2 copied, 1 updated, 1 inserted


def test_merge_clauses_apply_in_order_first_match_wins(tmp_path: Any) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    table = txnlog.Table.create(str(tmp_path / "t"), schema)
    table.append(pa.table({"id": [1, 2, 3, 4], "v": [10, 20, 30, 40]}, schema=schema))
    source = pa.table({"id": [1, 2, 3, 7, 8], "v": [1, 2, 3, 7, 8]})
    clauses = [
        MergeClause("matched", "update", SqlExpression.parse("s.v = 1", "c"), {"v": SqlExpression.parse("t.v + 100", "u")}),
        MergeClause("matched", "delete", SqlExpression.parse("s.v <= 2", "d")),
        MergeClause("matched", "update", None, {"v": SqlExpression.parse("0", "u")}),
        MergeClause("not_matched", "insert", SqlExpression.parse("s.v = 7", "i"), {"id": SqlExpression.parse("s.id", "i"), "v": SqlExpression.parse("s.v * 2", "i")}),
    ]
    with table.transaction("MERGE") as txn:
        assert txn.snapshot is not None
        plan = MergePlan.from_clauses(txn.snapshot, source.column_names, "id", clauses)
        assert not plan.keyword_form
        metrics = txnlog.dml.run_merge(txn, plan, source)
    rows = sorted(table.snapshot().to_arrow().to_pylist(), key=lambda r: r["id"])
    # 1: the first clause; 2: the delete (the first clause's condition fails); 3: the last
    # matched clause; 4 untouched; 7 inserted by its condition, 8 by none.
    assert rows == [{"id": 1, "v": 110}, {"id": 3, "v": 0}, {"id": 4, "v": 40}, {"id": 7, "v": 14}]
    assert (metrics.rows_updated, metrics.rows_deleted, metrics.rows_inserted) == (2, 1, 1)
    assert plan.parameters["matchedPredicates"] == [
        {"predicate": "s.v = 1", "actionType": "update"}, {"predicate": "s.v <= 2", "actionType": "delete"}, {"actionType": "update"}]
