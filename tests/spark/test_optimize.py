"""OPTIMIZE on local Spark: bin-packing committed with dataChange=false, rows unchanged,
limited to the partitions a predicate names, and safe under races: a concurrent append only
costs a commit retry, a concurrent delete of a file being compacted makes it re-plan."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from tests.optimize.hooked import HookedStore  # noqa: E402
from txnlog import Table  # noqa: E402
from txnlog.errors import InvalidPredicateError  # noqa: E402
from txnlog.log.filenames import commit_path  # noqa: E402
from txnlog.optimize import BIN_COLUMN, bin_batches, plan_bins  # noqa: E402
from txnlog.spark.optimize import optimize  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("amount", pa.float64())])


def small_files(uri: str, days: list[str], per_day: int, rows: int = 5) -> Table:
    """``per_day`` appends of ``rows`` rows per day: one small file each."""
    table = Table.create(uri, SCHEMA, partition_by=["day"])
    next_id = 0
    for _ in range(per_day):
        for day in days:
            ids = list(range(next_id, next_id + rows))
            next_id += rows
            table.append(pa.table({"id": ids, "day": [day] * rows, "amount": [i / 4 for i in ids]}, schema=SCHEMA))
    return table


def table_rows(uri: str) -> list[tuple]:
    data = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
    return sorted((r["id"], r["day"], r["amount"]) for r in data)


def commit_actions(table: Table, version: int) -> list[dict]:
    return [orjson.loads(line) for line in table.store.read(commit_path(version)).splitlines() if line.strip()]


def test_plan_bins_packs_small_files_per_partition():
    files = pa.table(
        {
            "path": [f"f{i}" for i in range(6)],
            "partition_values": pa.array([[("d", "1")]] * 4 + [[("d", "2")]] * 2, pa.map_(pa.string(), pa.string())),
            "size": [10, 20, 30, 500, 40, 45],
        }
    )
    bins = plan_bins(files, target_file_size=60)
    # Day 1: 10+20+30 fits 60; the 500-byte file is already big enough. Day 2: 40+45 > 60.
    assert [b.column("path").to_pylist() for b in bins] == [["f0", "f1", "f2"]]
    assert [b.column("path").to_pylist() for b in plan_bins(files, target_file_size=100)] == [["f0", "f1", "f2"], ["f4", "f5"]]


def test_the_bin_plan_runs_in_spark_through_map_in_arrow(spark, tmp_path):
    """The bin plan is an Arrow function: Spark runs it over a DataFrame of the file list (all
    files of a partition in one task) and gets the bins the driver plans."""
    from pyspark.sql import functions as F

    uri = str(tmp_path / "t")
    table = small_files(uri, ["2024-01-01", "2024-01-02", "2024-01-03"], per_day=4)
    files = table.snapshot().files()
    target = 2 * max(files.column("size").to_pylist()) + 1
    on_driver = {tuple(sorted(b.column("path").to_pylist())) for b in plan_bins(files, target)}
    assert len(on_driver) == 6  # two bins of two files per day

    df = spark.createDataFrame(files.select(["path", "partition_values", "size", "deletion_vector", "stats"]))
    schema = df.select("path", F.lit("").alias(BIN_COLUMN)).schema
    keyed = df.repartition(F.to_json(F.col("partition_values")))

    def planned(batches):
        for batch in bin_batches(batches, target):
            yield batch.select(["path", BIN_COLUMN])

    rows = keyed.mapInArrow(planned, schema).collect()
    in_spark: dict[str, list[str]] = {}
    for row in rows:
        in_spark.setdefault(row[BIN_COLUMN], []).append(row["path"])
    assert {tuple(sorted(paths)) for paths in in_spark.values()} == on_driver


def test_compacts_with_data_change_false_and_rows_unchanged(spark, tmp_path):
    uri = str(tmp_path / "t")
    table = small_files(uri, ["2024-01-01", "2024-01-02"], per_day=4)
    before_rows = table_rows(uri)
    before = table.snapshot()
    assert before.num_files == 8

    result = optimize(spark, uri, target_file_size=1 << 20)
    assert result.version == before.version + 1
    assert (result.files_removed, result.files_added, result.partitions_optimized, result.attempts) == (8, 2, 2, 1)

    actions = commit_actions(table, result.version)
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(adds) == 2 and len(removes) == 8
    assert all(a["dataChange"] is False for a in adds + removes)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE" and info["isolationLevel"] == "SnapshotIsolation"
    # The core's parameters, the ones Table.optimize records (delta-spark's names).
    assert info["operationParameters"] == {"predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]", "auto": "false"}
    assert info["operationMetrics"]["numBins"] == "2" and info["operationMetrics"]["maxFileSize"] == str(max(a["size"] for a in adds))
    assert table_rows(uri) == before_rows
    # Nothing left to do: a second run commits nothing.
    assert optimize(spark, uri, target_file_size=1 << 20).version is None


def test_predicate_limits_compaction_to_old_partitions(spark, tmp_path):
    uri = str(tmp_path / "t")
    table = small_files(uri, ["2024-01-01", "2024-01-02", "2024-01-03"], per_day=3)
    fresh = set(table.snapshot().files("day = '2024-01-03'").column("path").to_pylist())
    result = optimize(spark, uri, predicate="day < '2024-01-03'", target_file_size=1 << 20)
    assert (result.files_removed, result.files_added) == (6, 2)
    live = table.snapshot().files()
    assert fresh <= set(live.column("path").to_pylist())  # the fresh partition was not touched
    assert live.num_rows == 5
    with pytest.raises(InvalidPredicateError, match="partition columns only"):
        optimize(spark, uri, predicate="id < 3")


def test_concurrent_append_costs_a_retry_not_a_replan(spark, tmp_path):
    uri = str(tmp_path / "t")
    small_files(uri, ["2024-01-01"], per_day=3)
    appended: list[str] = []

    def append() -> None:
        other = Table(uri)
        other.append(pa.table({"id": [1000], "day": ["2024-01-01"], "amount": [1.0]}, schema=SCHEMA))
        appended.extend(other.snapshot().files("id = 1000").column("path").to_pylist())

    expected = table_rows(uri) + [(1000, "2024-01-01", 1.0)]
    hooked = Table(uri, store=HookedStore(uri, append))
    result = optimize(spark, hooked, target_file_size=1 << 20)
    assert result.attempts == 1 and result.conflicts == ()
    assert result.version.attempts == 2  # lost the race for one version, then committed after the append
    live = set(Table(uri).snapshot().files().column("path").to_pylist())
    assert appended and appended[0] in live  # the appended file is not compacted away
    assert len(live) == 2
    assert table_rows(uri) == sorted(expected)


def test_concurrent_delete_of_a_compacted_file_makes_it_replan(spark, tmp_path):
    uri = str(tmp_path / "t")
    small_files(uri, ["2024-01-01"], per_day=4)

    def delete_rows() -> None:
        """Copy-on-write DELETE of ids 0..2 (in the first file): the file is replaced."""
        other = Table(uri)
        with other.transaction("DELETE") as txn:
            files = txn.filter_files("id < 3")
            txn.remove_files(files)
            txn.write(pa.table({"id": [3, 4], "day": ["2024-01-01"] * 2, "amount": [0.75, 1.0]}, schema=SCHEMA))

    expected = [r for r in table_rows(uri) if r[0] >= 3]
    hooked = Table(uri, store=HookedStore(uri, delete_rows))
    result = optimize(spark, hooked, target_file_size=1 << 20)
    assert result.attempts == 2 and len(result.conflicts) == 1
    assert "DELETE" in result.conflicts[0]
    assert table_rows(uri) == expected  # the deleted rows did not come back
    assert Table(uri).snapshot().num_files == 1


def test_compacts_a_table_partitioned_by_a_column_named_with_a_dot(spark, tmp_path):
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("d.ay", pa.string())])
    table = Table.create(uri, schema, partition_by=["d.ay"])
    for i in range(4):
        table.append(pa.table({"id": [i, i + 10], "d.ay": ["x", "y"]}, schema=schema))
    result = optimize(spark, uri)
    assert (result.files_removed, result.files_added) == (8, 2)
    data = deltalake.DeltaTable(uri).to_pyarrow_table()
    assert sorted(zip(data.column("id").to_pylist(), data.column("d.ay").to_pylist())) == sorted(
        [(i, "x") for i in range(4)] + [(i + 10, "y") for i in range(4)]
    )
