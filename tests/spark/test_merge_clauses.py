"""MERGE clause lists run by Spark's executors (not on the driver): ordered matched,
not-matched and not-matched-by-source clauses, each with a condition, give the rows, the
change data and the metrics of the Python MERGE and of delta-spark's MERGE on the same inputs."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from tests.conftest import session_confs  # noqa: E402
from tests.dml.test_merge_builder import PROPERTIES as MODEL_PROPERTIES  # noqa: E402
from tests.dml.test_merge_builder import clauses as model_clauses  # noqa: E402
from tests.dml.test_merge_builder import model  # noqa: E402
from tests.dml.test_merge_builder import read as model_rows  # noqa: E402
from tests.dml.test_merge_builder import rows_of as model_rows_of  # noqa: E402
from tests.dml.test_merge_builder import write_target as model_target  # noqa: E402
from txnlog import Table  # noqa: E402
from txnlog.errors import DuplicateMatchError  # noqa: E402
from txnlog.spark.driver import DRIVER_SCAN_CELLS_CONF  # noqa: E402
from txnlog.spark.merge import merge  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("key", pa.int64()), ("user_id", pa.int64()), ("amount", pa.float64()), ("note", pa.string())])
SOURCE_DDL = "key long, user_id long, amount double, note string"

# Source rows: matched keys with each matched clause's case, new keys for both inserts.
SOURCE = [
    (1, 100, 5.0, "delete"),  # matched, deleted
    (2, 200, 500.0, "more"),  # matched, amount larger: t.amount + s.amount
    (3, 300, -1.0, "less"),  # matched, every column from the source
    (17, 1700, 0.0, "upd"),
    (20, 2000, 900.0, "upd"),
    (41, 4100, 1.0, "odd"),  # not matched, odd: inserted by the second insert clause
    (42, 4200, 2.0, "even"),  # not matched, even: the first insert clause
    (None, 1, 1.0, "null key"),  # matches nothing: inserted
]

DELTA_SQL = """
MERGE INTO delta.`{uri}` t USING merge_source s ON t.key = s.key
WHEN MATCHED AND s.note = 'delete' THEN DELETE
WHEN MATCHED AND s.amount > t.amount THEN UPDATE SET amount = t.amount + s.amount
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED AND s.key % 2 = 0 THEN INSERT (key, note) VALUES (s.key, 'new')
WHEN NOT MATCHED THEN INSERT *
WHEN NOT MATCHED BY SOURCE AND t.key % 3 = 0 THEN UPDATE SET note = 'stale', amount = t.amount * 2
WHEN NOT MATCHED BY SOURCE AND t.key % 5 = 0 THEN DELETE
"""


def clauses(builder: Any) -> Any:
    """The clauses of DELTA_SQL, through a MERGE builder."""
    return (builder.when_matched_delete(predicate="s.note = 'delete'")
            .when_matched_update({"amount": "t.amount + s.amount"}, predicate="s.amount > t.amount")
            .when_matched_update_all()
            .when_not_matched_insert({"key": "s.key", "note": "'new'"}, predicate="s.key % 2 = 0")
            .when_not_matched_insert_all()
            .when_not_matched_by_source_update({"note": "'stale'", "amount": "t.amount * 2"}, predicate="t.key % 3 = 0")
            .when_not_matched_by_source_delete(predicate="t.key % 5 = 0"))


def make(uri: str, properties: dict[str, str]) -> None:
    """Keys 0..29 in three files."""
    table = Table.create(uri, SCHEMA, properties=properties)
    for lo in (0, 10, 20):
        keys = list(range(lo, lo + 10))
        table.append(pa.table({"key": keys, "user_id": [k * 10 for k in keys], "amount": [float(k) for k in keys],
                               "note": [f"n{k}" for k in keys]}, schema=SCHEMA))


def rows_of(uri: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in Table(uri).snapshot().to_arrow().to_pylist()), key=repr)


def changes_of(uri: str, version: int) -> list[tuple[Any, ...]]:
    data = Table(uri).changes(version, version).drop_columns(["_commit_timestamp"])
    return sorted((tuple(r.values()) for r in data.to_pylist()), key=repr)


def source_table() -> pa.Table:
    return pa.table({name: [row[i] for row in SOURCE] for i, name in enumerate(SCHEMA.names)}, schema=SCHEMA)


def in_spark(spark: Any) -> Any:
    """Nothing fits the driver: the executors run every clause."""
    return session_confs(spark, {DRIVER_SCAN_CELLS_CONF: "0"})


COUNTED = ("numSourceRows", "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsMatchedUpdated",
           "numTargetRowsNotMatchedBySourceUpdated", "numTargetRowsDeleted", "numTargetRowsMatchedDeleted",
           "numTargetRowsNotMatchedBySourceDeleted")


def counted(metrics: dict[str, Any]) -> dict[str, int]:
    return {k: int(metrics[k]) for k in COUNTED}


#: The change-feed variants run by default (each rewrites through its plain twin's path and writes
#: the feed too); the plain ones run under ``soak``.
@pytest.mark.parametrize("properties", [
    pytest.param({}, marks=pytest.mark.soak),
    pytest.param({"delta.enableDeletionVectors": "true"}, marks=pytest.mark.soak),
    {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
    {"delta.enableChangeDataFeed": "true"},
], ids=["copy-on-write", "deletion-vectors", "deletion-vectors-cdf", "copy-on-write-cdf"])
def test_every_clause_kind_with_conditions_runs_on_the_executors_as_python_and_delta_spark_merge(
    delta_spark: Any, tmp_path: Path, properties: dict[str, str],
) -> None:
    spark = delta_spark
    ours, python, theirs = (str(tmp_path / n) for n in ("spark", "python", "delta"))
    make(ours, properties)
    shutil.copytree(ours, python)
    shutil.copytree(ours, theirs)

    clauses(Table(python).merge(source_table(), "t.key = s.key")).execute()
    with in_spark(spark):
        result = clauses(merge(spark, ours, spark.createDataFrame(SOURCE, SOURCE_DDL), "t.key = s.key")).execute()
    assert result is not None
    spark.createDataFrame(SOURCE, SOURCE_DDL).createOrReplaceTempView("merge_source")
    try:
        spark.sql(DELTA_SQL.format(uri=theirs))
    finally:
        spark.catalog.dropTempView("merge_source")

    expected = rows_of(theirs)
    assert rows_of(ours) == expected
    assert rows_of(python) == expected
    # What each clause did, among others: 1 deleted; 2 summed; 3 from the source; 0, 6, ...
    # stale and doubled; 5, 10, ... deleted; 42 inserted with only key and note.
    got = {r[0]: r for r in expected}
    assert 1 not in got and got[2][2] == 502.0 and got[3] == (3, 300, -1.0, "less")
    assert got[6] == (6, 60, 12.0, "stale") and 5 not in got and 10 not in got and got[15][3] == "stale" and got[14][3] == "n14"
    assert got[42] == (42, None, None, "new") and got[41] == (41, 4100, 1.0, "odd")

    before = set(Table(ours).snapshot(3).files().column("path").to_pylist())
    ours_info = Table(ours).history(limit=1)[0].commit_info
    assert counted(ours_info.operation_metrics) == counted(Table(python).history(limit=1)[0].commit_info.operation_metrics)
    assert counted(ours_info.operation_metrics) == counted(spark.sql(f"DESCRIBE HISTORY delta.`{theirs}` LIMIT 1").collect()[0]["operationMetrics"])
    assert ours_info.operation_parameters == Table(python).history(limit=1)[0].commit_info.operation_parameters
    if "delta.enableChangeDataFeed" in properties:
        version = Table(ours).latest_version()
        assert changes_of(ours, version) == changes_of(python, version) == changes_of(theirs, version)
    live = Table(ours).snapshot().files()
    vectors = dict(zip(live.column("path").to_pylist(), live.column("deletion_vector").to_pylist()))
    kept = {path: vector for path, vector in vectors.items() if path in before}
    if "delta.enableDeletionVectors" in properties:  # each file keeps its other rows, its changed ones in a vector
        assert len(kept) == 3 and all(vector is not None for vector in kept.values())
    else:  # each file held a changed row: rewritten
        assert not kept


def test_by_source_clauses_with_an_empty_source_change_every_row_they_hold(delta_spark: Any, tmp_path: Path) -> None:
    spark = delta_spark
    ours, theirs = str(tmp_path / "spark"), str(tmp_path / "delta")
    make(ours, {"delta.enableDeletionVectors": "true"})
    shutil.copytree(ours, theirs)
    empty = spark.createDataFrame([], SOURCE_DDL)
    with in_spark(spark):
        (merge(spark, ours, empty, "t.key = s.key")
         .when_not_matched_by_source_delete(predicate="t.key < 4")
         .when_not_matched_by_source_update({"note": "'left'"})
         .execute())
    empty.createOrReplaceTempView("merge_source")
    try:
        spark.sql(f"MERGE INTO delta.`{theirs}` t USING merge_source s ON t.key = s.key "
                  "WHEN NOT MATCHED BY SOURCE AND t.key < 4 THEN DELETE WHEN NOT MATCHED BY SOURCE THEN UPDATE SET note = 'left'")
    finally:
        spark.catalog.dropTempView("merge_source")
    assert rows_of(ours) == rows_of(theirs)
    assert sorted(r[0] for r in rows_of(ours)) == list(range(4, 30)) and {r[3] for r in rows_of(ours)} == {"left"}


def test_a_target_row_two_source_rows_match_is_refused_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    make(uri, {"delta.enableDeletionVectors": "true"})
    files = sorted(p.name for p in Path(uri).rglob("*.parquet"))
    twice = spark.createDataFrame([(7, 1, 1.0, "a"), (7, 2, 2.0, "b"), (50, 5, 5.0, "c")], SOURCE_DDL)
    with in_spark(spark), pytest.raises(DuplicateMatchError, match="2 source rows match the same target row"):
        (merge(spark, uri, twice, "t.key = s.key")
         .when_matched_update({"note": "s.note"}, predicate="s.amount > 0")
         .when_not_matched_insert_all(predicate="s.key > 10")
         .execute())
    assert Table(uri).latest_version() == 3
    assert sorted(p.name for p in Path(uri).rglob("*.parquet")) == files


def test_row_ids_are_kept_by_updates_and_new_for_inserts(spark: Any, tmp_path: Path) -> None:
    ours, python = str(tmp_path / "spark"), str(tmp_path / "python")
    make(ours, {"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"})
    shutil.copytree(ours, python)
    clauses(Table(python).merge(source_table(), "t.key = s.key")).execute()
    with in_spark(spark):
        clauses(merge(spark, ours, spark.createDataFrame(SOURCE, SOURCE_DDL), "t.key = s.key")).execute()

    def ids(uri: str) -> dict[Any, tuple[int, int]]:
        rows = Table(uri).snapshot().to_arrow(["key"], with_row_ids=True).to_pylist()
        return {r["key"]: (r["row_id"], r["row_commit_version"]) for r in rows}

    ours_ids, python_ids = ids(ours), ids(python)
    assert ours_ids.keys() == python_ids.keys()
    merged = Table(ours).latest_version()
    # Every surviving row keeps its id (0..29 in key order); an updated row gets the MERGE's
    # commit version, as in the Python MERGE; inserted rows get new ids past the high-water mark.
    for key in (k for k in range(30) if k in ours_ids):
        assert ours_ids[key][0] == python_ids[key][0] == key
        assert ours_ids[key][1] == python_ids[key][1]
    assert ours_ids[2][1] == merged and ours_ids[4][1] < merged
    new = sorted(row_id for key, (row_id, _) in ours_ids.items() if key is None or key >= 30)
    assert len(new) == 3 and new[0] >= 30 and len({row_id for row_id, _ in ours_ids.values()}) == len(ours_ids)


def _random_merge(spark: Any, base: Path, target: list[dict[str, int]], source: list[dict[str, int]], clause_list: list[Any],
                  properties: dict[str, str]) -> None:
    """The executors' MERGE of random clauses against the model of Delta's MERGE that the
    Python MERGE is checked against (tests/dml/test_merge_builder.py): rows, change rows, row ids."""
    table = model_target(str(base / "spark"), target, properties)
    ids_before = {r["id"]: r["row_id"] for r in table.snapshot().to_arrow(with_row_ids=True).to_pylist()} \
        if "delta.enableRowTracking" in properties else {}
    builder = merge(spark, table, spark.createDataFrame([(r["id"], r["v"]) for r in source], "id long, v long"), "t.id = s.id")
    for clause in clause_list:
        clause.add(builder)
    with in_spark(spark):
        result = builder.execute()
    expected, changes = model(target, source, clause_list)
    assert model_rows(table) == expected
    assert (result is None) == (not changes)
    if result is not None and "delta.enableChangeDataFeed" in properties:
        recorded = table.changes(result.version, result.version).select(["id", "v", "_change_type"]).to_pylist()
        assert Counter((r["id"], r["v"], r["_change_type"]) for r in recorded) == changes
    if result is not None and ids_before:
        after = table.snapshot().to_arrow(with_row_ids=True).to_pylist()
        assert all(r["row_id"] == ids_before[r["id"]] for r in after if r["id"] in ids_before)
        assert len({r["row_id"] for r in after}) == len(after)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(target=model_rows_of, source=model_rows_of, clause_list=model_clauses(), properties=st.sampled_from(MODEL_PROPERTIES))
def test_random_clause_lists_on_the_executors_do_what_delta_does(spark: Any, tmp_path_factory: pytest.TempPathFactory, target: Any,
                                                                  source: Any, clause_list: Any, properties: dict[str, str]) -> None:
    _random_merge(spark, tmp_path_factory.mktemp("merge"), target, source, clause_list, properties)


@pytest.mark.soak
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(target=model_rows_of, source=model_rows_of, clause_list=model_clauses(), properties=st.sampled_from(MODEL_PROPERTIES))
def test_many_random_clause_lists_on_the_executors_do_what_delta_does(spark: Any, tmp_path_factory: pytest.TempPathFactory, target: Any,
                                                                       source: Any, clause_list: Any, properties: dict[str, str]) -> None:
    _random_merge(spark, tmp_path_factory.mktemp("merge"), target, source, clause_list, properties)
