"""Spark DML on tables with the change data feed and with row tracking.

Change data: after Spark appends, DELETE, UPDATE and MERGE, deltalake's load_cdf (an
independent reader), Table.changes and txnlog.spark.read_changes return the same rows
(copy-on-write); with deletion vectors, Table.changes equals a plain-Python model of the
operations. Row tracking: OPTIMIZE, UPDATE, MERGE and DELETE keep every surviving row's stable
id; updated rows get the UPDATE's commit version, inserted rows new ids, no two rows share one.
"""

from __future__ import annotations

import collections
import json
import os
import re
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import txnlog
import txnlog.spark as ts
from txnlog.spark.merge import merge

# Every test in both regimes: rows found on the driver (small statements) and in Spark.
pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("dml_regime")]

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.float64())])
COLUMNS = SCHEMA.names
CDF = {"delta.enableChangeDataFeed": "true"}
DV = {"delta.enableDeletionVectors": "true"}
ROW_TRACKING = {"delta.enableRowTracking": "true"}
Change = tuple[Any, ...]  # (id, part, value, _change_type, _commit_version)


def _df(spark: Any, ids: range | list[int], value: float = 0.0) -> Any:
    rows = [(i, "a" if i % 2 else "b", float(i) + value) for i in ids]
    return spark.createDataFrame(pa.Table.from_pylist([dict(zip(COLUMNS, r)) for r in rows], schema=SCHEMA).to_pandas())


def _actions(uri: str, version: int) -> list[dict[str, Any]]:
    with open(os.path.join(uri, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _cdc_paths(uri: str, version: int) -> list[str]:
    return [a["cdc"]["path"] for a in _actions(uri, version) if "cdc" in a]


def _change_files_metric(uri: str, version: int) -> int:
    info = next(a["commitInfo"] for a in _actions(uri, version) if "commitInfo" in a)
    metrics = info["operationMetrics"]
    return int(metrics.get("numAddedChangeFiles", metrics.get("numTargetChangeFilesAdded", -1)))


def _changes(table: pa.Table) -> collections.Counter[Change]:
    return collections.Counter(tuple(r[c] for c in [*COLUMNS, "_change_type", "_commit_version"]) for r in table.to_pylist())


def _run_dml(spark: Any, uri: str, properties: dict[str, str]) -> dict[int, list[Change]]:
    """Spark appends, a partition delete, DELETE, UPDATE and MERGE on the table at ``uri``;
    the model of each version's changes."""
    rows: dict[int, tuple[str, float]] = {}
    expected: dict[int, list[Change]] = {}

    def record(version: int, kind: str, ids: list[int], new: dict[int, tuple[str, float]] | None = None) -> None:
        for i in ids:
            if kind in ("delete", "update_preimage"):
                expected.setdefault(version, []).append((i, *rows[i], kind, version))
            if kind == "update_preimage":
                assert new is not None
                expected[version].append((i, *new[i], "update_postimage", version))
            if kind == "insert":
                assert new is not None
                expected.setdefault(version, []).append((i, *new[i], kind, version))
        for i in ids:
            if kind == "delete":
                del rows[i]
            else:
                assert new is not None
                rows[i] = new[i]

    first = ts.write(_df(spark, range(0, 20)), uri, partition_by=["part"], properties=properties)
    record(int(first or 0), "insert", list(range(20)), {i: ("a" if i % 2 else "b", float(i)) for i in range(20)})
    v = ts.write(_df(spark, range(20, 30)), uri)
    assert v is not None
    record(int(v), "insert", list(range(20, 30)), {i: ("a" if i % 2 else "b", float(i)) for i in range(20, 30)})
    with ts.transaction(spark, uri, "DELETE") as tx:  # rows in several files
        tx.delete("id % 5 = 0")
    assert tx.result is not None
    record(int(tx.result), "delete", [i for i in sorted(rows) if i % 5 == 0])
    with ts.transaction(spark, uri, "UPDATE") as tx:
        tx.update("id < 8", {"value": "value + 100"})
    assert tx.result is not None
    ids = [i for i in sorted(rows) if i < 8]
    record(int(tx.result), "update_preimage", ids, {i: (rows[i][0], rows[i][1] + 100) for i in ids})
    source = _df(spark, [11, 12, 13, 40, 41], 0.5).withColumnRenamed("id", "key")
    merged = merge(spark, uri, source, on="t.id = s.key", when_matched_update={"value": "s.value"}, when_matched_delete="s.key = 13",
                   when_not_matched_insert={"id": "s.key", "part": "s.part", "value": "s.value"})
    assert merged is not None
    version = int(merged)
    new = {i: ("a" if i % 2 else "b", float(i) + 0.5) for i in (11, 12, 40, 41)}
    record(version, "delete", [13])
    record(version, "update_preimage", [11, 12], new)
    record(version, "insert", [40, 41], new)
    with ts.transaction(spark, uri, "DELETE") as tx:  # whole files of one partition: no cdc files
        tx.delete("part = 'b'")
    assert tx.result is not None
    record(int(tx.result), "delete", [i for i in sorted(rows) if rows[i][0] == "b"])
    return expected


def test_spark_dml_change_data_reads_the_same_in_deltalake_txnlog_and_spark(spark: Any, tmp_path: Any) -> None:
    uri = str(tmp_path / "cdf")
    expected = _run_dml(spark, uri, CDF)
    table = txnlog.Table(uri)
    latest = table.latest_version()
    dml_versions = [v for v, changes in expected.items() if any(c[3] != "insert" for c in changes)]
    assert all(_cdc_paths(uri, v) for v in dml_versions[:-1])  # DELETE, UPDATE, MERGE rewrote files
    # Partitioned like the table; in a job directory where Spark's Parquet writer wrote them.
    assert all(re.fullmatch(r"_change_data/(job-[0-9a-f]{32}/)?part=[ab]/[^/]+\.parquet", p) for v in dml_versions[:-1] for p in _cdc_paths(uri, v))
    assert not _cdc_paths(uri, latest)  # the partition delete removed whole files
    ours = table.changes(0)
    assert _changes(ours) == collections.Counter(c for changes in expected.values() for c in changes)
    theirs = pa.table(DeltaTable(uri).load_cdf(starting_version=0).read_all())
    columns = [*COLUMNS, "_change_type", "_commit_version"]
    assert _changes(theirs.select(columns).cast(ours.select(columns).schema)) == _changes(ours)
    through_spark = ts.read_changes(spark, uri, 0).toArrow()
    assert _changes(through_spark.select(columns).cast(ours.select(columns).schema)) == _changes(ours)
    assert all(_change_files_metric(uri, v) == len(_cdc_paths(uri, v)) for v in dml_versions)


def test_spark_dml_change_data_with_deletion_vectors_equals_the_model(spark: Any, tmp_path: Any) -> None:
    uri = str(tmp_path / "cdf-dv")
    expected = _run_dml(spark, uri, {**CDF, **DV})
    table = txnlog.Table(uri)
    assert table.snapshot().table_configuration.deletion_vectors_enabled
    delete_version = sorted(expected)[2]
    # Rows only marked in vectors still get cdc files (as the Python DML writes them): exact for
    # a reader that takes the protocol's rule literally, unlike delta-spark's vector-only DELETE.
    assert _cdc_paths(uri, delete_version)
    for version, changes in expected.items():
        assert _changes(table.changes(version, version)) == collections.Counter(changes), version


def _ids(snapshot: txnlog.Snapshot) -> dict[int, tuple[int, int]]:
    got = snapshot.to_arrow(["id"], with_row_ids=True).to_pylist()
    ids = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in got}
    assert len({v[0] for v in ids.values()}) == len(got) == len(ids)  # no two rows share a stable id
    return ids


def _spark_ids(spark: Any, uri: str) -> dict[int, tuple[int, int]]:
    rows = ts.read(spark, uri, with_row_ids=True).select("id", "row_id", "row_commit_version").collect()
    return {r["id"]: (r["row_id"], r["row_commit_version"]) for r in rows}


@pytest.mark.parametrize("dv", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_spark_rewrites_keep_stable_row_ids(spark: Any, tmp_path: Any, dv: bool) -> None:
    uri = str(tmp_path / "rows")
    table = txnlog.Table.create(uri, SCHEMA, properties={**ROW_TRACKING, **(DV if dv else {})})
    for start in range(0, 40, 10):  # four small files
        table.append(pa.table({"id": list(range(start, start + 10)), "part": ["a"] * 10, "value": [0.0] * 10}, schema=SCHEMA))
    before = _ids(table.snapshot())

    compacted = ts.optimize(spark, uri)
    assert compacted.files_removed == 4
    assert _ids(table.snapshot()) == before == _spark_ids(spark, uri)

    with ts.transaction(spark, uri, "UPDATE") as tx:
        tx.update("id < 5", {"value": "value + 1"})
    assert tx.result is not None
    update_version = int(tx.result)
    after_update = _ids(table.snapshot())
    assert {i: v[0] for i, v in after_update.items()} == {i: v[0] for i, v in before.items()}
    assert {i for i, v in after_update.items() if v[1] == update_version} == set(range(5))
    assert all(after_update[i] == before[i] for i in range(5, 40))

    with ts.transaction(spark, uri, "DELETE") as tx:
        tx.delete("id = 30")
    del before[30]
    merged = merge(spark, uri, _df(spark, [10, 11, 50]), on="id", when_matched_update="*", when_not_matched_insert="*")
    assert merged is not None
    after = _ids(table.snapshot())
    assert after == _spark_ids(spark, uri)
    assert {i: v[0] for i, v in after.items() if i != 50} == {i: v[0] for i, v in before.items()}
    assert after[10][1] == after[11][1] == after[50][1] == int(merged)
    assert all(after[i] == after_update[i] for i in after if i not in (10, 11, 50))
    assert after[50][0] not in {v[0] for v in before.values()}  # an inserted row gets a new id


def test_spark_refuses_a_rewrite_it_cannot_keep_the_row_ids_of_as_python_does(spark: Any, tmp_path: Any) -> None:
    """Row tracking enabled, but no materialized column names in the metadata: Spark used to
    rewrite the rows with new ids, silently; now it raises the error Python raises."""
    from tests.broken_tables import row_tracking_without_column_names

    uri = str(tmp_path / "t")
    table = row_tracking_without_column_names(tmp_path / "t")
    version = table.latest_version()
    statements = [
        lambda tx: tx.update("id = 1", {"v": "v + 1"}),
        lambda tx: tx.delete("id = 1"),
    ]
    for statement in statements:
        with pytest.raises(txnlog.errors.LogCorruptError, match="materializedRowIdColumnName"), ts.transaction(spark, uri, "DML") as tx:
            statement(tx)
    source = spark.createDataFrame([(1, 5)], "id long, v long")
    with pytest.raises(txnlog.errors.LogCorruptError, match="materializedRowIdColumnName"):
        merge(spark, uri, source, on="id", when_matched_update="*")
    with pytest.raises(txnlog.errors.LogCorruptError, match="materializedRowIdColumnName"):
        table.update("id = 1", {"v": "v + 1"})
    assert table.latest_version() == version
