"""format("txnlog"): the Python data source for batch reads and writes, on the shared session;
independent readers (deltalake, and txnlog's core for deletion vectors) check what it wrote and read."""

from __future__ import annotations

import datetime as dt
import decimal
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog
import txnlog.spark as ts
from tests.read.test_reader import _same_rows_as_duckdb
from tests.spark.test_write import ALL_TYPES, _rows, _sorted, _utc_naive
from txnlog.errors import InvalidArgumentError
from txnlog.maintenance import vacuum
from txnlog.write import delete_rows

pytestmark = pytest.mark.spark

pyspark = pytest.importorskip("pyspark")
from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import datasource as sds  # noqa: E402

from txnlog.spark.datasource.batch_read import filter_expression, pack_files  # noqa: E402
from txnlog.spark.datasource.batch_write import joined_batches  # noqa: E402
from txnlog.spark.datasource.options import SourceOptions  # noqa: E402

NESTED = "id long, tags array<string>, point struct<x: double, label: struct<name: string, code: int>>, " \
         "attrs map<string, array<int>>, events array<struct<at: timestamp, n: long>>"


@pytest.fixture(scope="module")
def spark_ds(spark: Any) -> Any:
    ts.register(spark)
    return spark


def _data_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}


def _nested_rows(n: int) -> list[tuple[Any, ...]]:
    out = []
    for k in range(n):
        if k % 5 == 4:
            out.append((k, None, None, None, None))
            continue
        at = dt.datetime(2024, 1, 1, 12, 0, k, tzinfo=dt.timezone.utc)
        out.append((k, [f"t{k}", None], (k / 2, (f"n{k}", k)), {"a": [k, None], "b": []}, [(at, k), (None, None)]))
    return out


def _plain(value: Any) -> Any:
    """Rows from Spark and from deltalake in one comparable form (dicts, lists, naive UTC)."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in value):
            return {k: _plain(v) for k, v in value}  # deltalake's map: a list of (key, value)
        return [_plain(v) for v in value]
    return _utc_naive(value)


# --- options and filter translation (no Spark job) --------------------------------------------


def test_options_are_checked_and_storage_options_pass_through() -> None:
    parsed = SourceOptions.parse({"path": "/t", "versionasof": "3", "storage.aws_endpoint_url": "http://x"}, writing=False)
    assert (parsed.version, dict(parsed.storage_options)) == (3, {"aws_endpoint_url": "http://x"})
    with pytest.raises(InvalidArgumentError, match="replacewher"):
        SourceOptions.parse({"path": "/t", "replacewher": "id > 1"}, writing=True)  # a typo must not overwrite everything
    with pytest.raises(InvalidArgumentError, match="writes only"):
        SourceOptions.parse({"path": "/t", "replacewhere": "id > 1"}, writing=False)
    with pytest.raises(InvalidArgumentError, match="go together"):
        SourceOptions.parse({"path": "/t", "txnappid": "job"}, writing=True)
    written = SourceOptions.parse({"path": "/t", "partitionby": '["a,b", "c"]', "delta.enabledeletionvectors": "true"}, writing=True)
    assert written.partition_by == ["a,b", "c"] and dict(written.properties) == {"delta.enableDeletionVectors": "true"}
    assert SourceOptions.parse({"path": "/t", "partitionby": "a, b"}, writing=True).partition_by == ["a", "b"]


def test_spark_filters_become_expression_trees() -> None:
    at = dt.datetime(2021, 1, 1, tzinfo=dt.timezone.utc)
    cases = [
        (sds.EqualTo(("id",), 3), "id = 3"),
        (sds.EqualNullSafe(("id",), None), "id IS NULL"),
        (sds.GreaterThanOrEqual(("s", "a"), 1.5), "s.a >= 1.5"),
        (sds.In(("p",), ["x", None]), "p IN ('x', NULL)"),
        (sds.Not(sds.EqualTo(("a.b",), 2)), "`a.b` <> 2"),
        (sds.IsNotNull(("id",)), "id IS NOT NULL"),
        (sds.StringStartsWith(("p",), "a%"), "p LIKE 'a\\%%'"),
        (sds.LessThan(("ts",), at), "ts < TIMESTAMP '2021-01-01 00:00:00+00:00'"),
    ]
    for spark_filter, text in cases:
        assert str(filter_expression(spark_filter)) == text
    assert filter_expression(sds.EqualTo(("arr",), [1, 2])) is None  # no array literals in the tree


def test_small_files_are_packed_into_tasks_by_size() -> None:
    files = pa.table({"path": [f"f{i}" for i in range(6)], "size": [100, 10, 10, 10, 10, 10]})
    groups = pack_files(files, max_bytes=60, open_cost=5, min_partitions=1)
    assert sorted(g.num_rows for g in groups) == [1, 1, 4]  # 100 alone; 15-byte files packed up to 60
    assert sorted(p for g in groups for p in g.column("path").to_pylist()) == sorted(files.column("path").to_pylist())
    assert len(pack_files(files, max_bytes=10**9, open_cost=5, min_partitions=3)) >= 3  # spread over the cores


def test_a_write_task_hands_the_table_writer_batches_joined_from_sparks_small_ones() -> None:
    # Spark sends a task's rows 10,000 at a time; the writer's per-batch work is paid per join.
    batches = [pa.record_batch({"_0": list(range(i * 10, (i + 1) * 10))}) for i in range(25)]
    joined = list(joined_batches(iter(batches), ["id"], rows=40))
    assert [b.num_rows for b in joined] == [40] * 6 + [10]
    assert all(b.schema.names == ["id"] for b in joined)
    assert pa.Table.from_batches(joined).column("id").to_pylist() == list(range(250))
    assert list(joined_batches(iter([]), ["id"])) == []


# --- read --------------------------------------------------------------------------------------


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])
def test_every_type_round_trips_through_the_format_and_deltalake(spark_ds: Any, tmp_path: Path, partitioned: bool) -> None:
    deltalake = pytest.importorskip("deltalake")
    rows = _rows(30)
    df = spark_ds.createDataFrame(rows, ALL_TYPES)
    uri = str(tmp_path / "t")
    writer = df.write.format("txnlog").mode("append")
    if partitioned:
        writer = writer.option("partitionBy", "flag,day")
    writer.save(uri)
    snapshot = txnlog.Table(uri).snapshot()
    assert snapshot.version == 0 and list(snapshot.partition_columns) == (["flag", "day"] if partitioned else [])

    back = spark_ds.read.format("txnlog").load(uri)
    assert [(f.name, f.dataType) for f in back.schema.fields] == [(f.name, f.dataType) for f in df.schema.fields]
    expected = _sorted([tuple(_utc_naive(v) for v in r) for r in rows])
    assert _sorted(back.collect()) == expected
    independent = {r["id"]: r for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()}
    names = df.schema.fieldNames()
    assert sorted(tuple(_utc_naive(independent[row[0]][n]) for n in names) for row in expected) == expected


def test_nested_types_round_trip_through_the_format_and_deltalake(spark_ds: Any, tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    df = spark_ds.createDataFrame(_nested_rows(12), NESTED)
    uri = str(tmp_path / "t")
    df.write.format("txnlog").mode("append").save(uri)
    ours = sorted((_plain(r) for r in spark_ds.read.format("txnlog").load(uri).collect()), key=lambda r: r["id"])
    assert ours == sorted((_plain(r) for r in df.collect()), key=lambda r: r["id"])
    theirs = sorted((_plain(r) for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()), key=lambda r: r["id"])
    assert theirs == ours


def test_a_table_with_deletion_vectors_reads_as_the_core_reads_it(spark_ds: Any, tmp_path: Path) -> None:
    pytest.importorskip("pyroaring")
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    table = txnlog.Table.create(uri, schema, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.table({"id": list(range(200)), "p": ["a" if i % 2 else "b" for i in range(200)]}, schema=schema))
    snapshot = table.snapshot()
    files, ctx = snapshot.files(), snapshot.read_context()
    positions = []
    for i in range(files.num_rows):
        rows = ctx.read(files.slice(i, 1), columns=["id"], row_index="__pos")
        gone = pa.array([v % 7 == 0 for v in rows["id"].to_pylist()], pa.bool_())
        positions.append(rows.filter(gone)["__pos"].combine_chunks())
    deletes = delete_rows(table.store, files, positions, ctx.deleted_rows(files))
    with table.transaction("DELETE") as txn:
        txn.remove_files(deletes.removed)
        txn.add_files(deletes.added)
    latest = table.snapshot()
    assert latest.files().column("deletion_vector").null_count == 0  # every file has a vector now

    got = sorted(tuple(r) for r in spark_ds.read.format("txnlog").load(uri).collect())
    expected = sorted(tuple(r.values()) for r in latest.to_arrow().to_pylist())
    assert got == expected and len(got) == 200 - len(range(0, 200, 7))
    _same_rows_as_duckdb(uri, spark_ds.read.format("txnlog").load(uri).toArrow())
    assert spark_ds.read.format("txnlog").option("versionAsOf", 1).load(uri).count() == 200  # before the delete


def test_a_column_mapped_table_reads_its_logical_names(spark_ds: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = spark_ds.createDataFrame([(i, f"v{i}", (i, "x")) for i in range(20)], "id long, `odd name` string, s struct<a: long, b: string>")
    df.write.format("txnlog").mode("append").option("delta.columnMapping.mode", "name").save(uri)
    snapshot = txnlog.Table(uri).snapshot()
    assert snapshot.table_configuration.is_column_mapped
    # The files hold physical names only; the format gives back the logical ones.
    import pyarrow.parquet as pq

    first = snapshot.file_uris()[0].removeprefix("file://")
    assert "odd name" not in pq.read_schema(first).names
    back = spark_ds.read.format("txnlog").load(uri)
    assert back.columns == ["id", "odd name", "s"]
    assert sorted(tuple(_plain(v) for v in r) for r in back.collect()) == sorted(tuple(_plain(v) for v in r) for r in df.collect())
    _same_rows_as_duckdb(uri, back.select("id", "odd name").toArrow())  # deltalake's pyarrow reader ignores column mapping


def test_version_and_timestamp_as_of_and_a_loaded_dataframe_stays_on_its_version(spark_ds: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    spark_ds.range(0, 10).write.format("txnlog").mode("append").save(uri)
    first = txnlog.Table(uri).history()[0].timestamp
    loaded = spark_ds.read.format("txnlog").load(uri)
    spark_ds.range(10, 25).write.format("txnlog").mode("append").save(uri)
    assert loaded.count() == 10  # pinned to the version whose schema it has
    assert spark_ds.read.format("txnlog").load(uri).count() == 25
    assert spark_ds.read.format("txnlog").option("versionAsOf", 0).load(uri).count() == 10
    stamp = dt.datetime.fromtimestamp(first / 1000, tz=dt.timezone.utc).isoformat()
    assert spark_ds.read.format("txnlog").option("timestampAsOf", stamp).load(uri).count() == 10
    empty = str(tmp_path / "empty")
    spark_ds.createDataFrame([], "id long").write.format("txnlog").mode("append").save(empty)  # creates the table
    assert txnlog.Table(empty).latest_version() == 0 and spark_ds.read.format("txnlog").load(empty).count() == 0


def test_a_given_schema_of_some_columns_reads_only_those(spark_ds: Any, tmp_path: Path) -> None:
    """The data source API has no column pruning: a schema naming some of the table's columns
    (any order, names matched as Spark matches them) is how a query reads only those."""
    uri = str(tmp_path / "t")
    df = spark_ds.range(0, 40).selectExpr("id", "cast(id % 2 as string) as p", "concat('n', id) as `odd name`", "cast(id * 0.5 as double) as v")
    df.write.format("txnlog").mode("append").option("partitionBy", "p").option("delta.columnMapping.mode", "name").save(uri)
    some = spark_ds.read.format("txnlog").schema("v double, P string").load(uri)
    assert some.columns == ["v", "P"]
    assert sorted(tuple(r) for r in some.collect()) == sorted((i * 0.5, str(i % 2)) for i in range(40))
    only_partition = spark_ds.read.format("txnlog").schema("p string").load(uri)
    assert sorted(r.p for r in only_partition.collect()) == sorted(str(i % 2) for i in range(40))
    pushed = spark_ds.read.format("txnlog").schema("`odd name` string, v double").option("filterPushdown", "true").load(uri)
    assert sorted(r["odd name"] for r in pushed.where("v >= 18").collect()) == ["n36", "n37", "n38", "n39"]
    for schema, problem in (("id long, nope string", "'nope' of the given schema is not a column"),
                            ("id int", "'id' of the given schema has type int, the table's column bigint"),
                            ("id long, ID long", "'ID' of the given schema is named twice"),
                            ("p string not null", "'p' .* NOT NULL")):
        with pytest.raises(PySparkException, match=problem):
            spark_ds.read.format("txnlog").schema(schema).load(uri).collect()


def _many_files(spark: Any, uri: str) -> None:
    """Four partitions of two files each, ids clustered by file (so stats skip)."""
    for chunk in range(2):
        df = spark.range(chunk * 400, (chunk + 1) * 400, numPartitions=1).selectExpr("id", "cast(id % 4 as string) as p")
        df.write.format("txnlog").mode("append").option("partitionBy", "p").save(uri)


def test_pushed_filters_skip_files_by_partition_values_and_stats(spark_ds: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _many_files(spark_ds, uri)
    assert txnlog.Table(uri).snapshot().num_files == 8

    def scan(condition: str) -> tuple[int, list[int]]:
        # One task per file, so the number of tasks is the number of files read.
        df = (spark_ds.read.format("txnlog").option("filterPushdown", "true").option("maxPartitionBytes", "1")
              .load(uri).where(condition))
        return df.rdd.getNumPartitions(), sorted(r.id for r in df.collect())

    assert scan("id >= 0")[0] == 8
    tasks, ids = scan("p = '1'")
    assert tasks == 2 and ids == [i for i in range(800) if i % 4 == 1]
    tasks, ids = scan("p = '1' and id >= 700")  # the partition filter, then the stats of the id column
    assert tasks == 1 and ids == [i for i in range(700, 800) if i % 4 == 1]
    tasks, ids = scan("p in ('1', '2') and id < 10")
    assert tasks == 2 and ids == [1, 2, 5, 6, 9]
    tasks, ids = scan("p = '1' or id = 3")  # an OR is not pushed: Spark filters every file
    assert tasks == 8 and ids == sorted({i for i in range(800) if i % 4 == 1} | {3})


def test_without_pushdown_a_dataframe_can_be_queried_again_with_other_filters(spark_ds: Any, tmp_path: Path) -> None:
    """The default reader takes no pushed filter: PySpark 4.3 reuses the read planned for one
    query's pushed filters in a later query of the same DataFrame (see FilteringTableReader)."""
    uri = str(tmp_path / "t")
    _many_files(spark_ds, uri)
    df = spark_ds.read.format("txnlog").load(uri)
    assert df.where("p = '1'").count() == 200
    assert df.count() == 800
    pushed = spark_ds.read.format("txnlog").option("filterPushdown", "true").load(uri)
    assert pushed.where("p = '1'").count() == 200
    assert pushed.count() == 200  # Spark's reuse, documented in docs/spark.md: load again per query
    assert spark_ds.read.format("txnlog").option("filterPushdown", "true").load(uri).count() == 800


# --- write -------------------------------------------------------------------------------------


def test_append_overwrite_and_replace_where(spark_ds: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = spark_ds.range(0, 30).selectExpr("id", "cast(id % 3 as string) as p")
    df.write.format("txnlog").mode("append").option("partitionBy", "p").save(uri)
    # A partition predicate: the p='1' files go, the new rows come.
    spark_ds.range(100, 104).selectExpr("id", "'1' as p").write.format("txnlog").mode("overwrite") \
        .option("replaceWhere", "p = '1'").save(uri)
    rows = _sorted(spark_ds.read.format("txnlog").load(uri).collect())
    assert [r for r in rows if r[1] == "1"] == [(i, "1") for i in range(100, 104)] and len(rows) == 24
    # A data predicate: only the matching rows of the touched files go (rewritten on the driver).
    spark_ds.range(7, 9).selectExpr("id", "'0' as p").write.format("txnlog").mode("overwrite") \
        .option("replaceWhere", "id < 10").save(uri)
    ids = sorted(r.id for r in spark_ds.read.format("txnlog").load(uri).collect())
    assert ids == sorted([i for i in range(10, 30) if i % 3 != 1] + list(range(100, 104)) + [7, 8])
    # A written row outside the condition: nothing committed, no file left.
    version, before = txnlog.Table(uri).latest_version(), _data_files(tmp_path / "t")
    with pytest.raises(PySparkException, match="replaceWhere"):
        spark_ds.range(5, 7).selectExpr("id", "'2' as p").write.format("txnlog").mode("overwrite") \
            .option("replaceWhere", "p = '1'").save(uri)
    assert txnlog.Table(uri).latest_version() == version
    assert _data_files(tmp_path / "t") == before  # abort deleted the tasks' files
    spark_ds.range(0, 2).selectExpr("id", "'2' as p").write.format("txnlog").mode("overwrite").save(uri)
    assert sorted(r.id for r in spark_ds.read.format("txnlog").load(uri).collect()) == [0, 1]
    history = txnlog.Table(uri).history()
    assert [e.commit_info.operation for e in history] == ["WRITE"] * 3 + ["CREATE TABLE AS SELECT"]
    assert history[1].commit_info.operation_parameters["predicate"] == "id < 10"


def test_the_schema_is_checked_before_any_file_is_written_and_merge_schema_adds_columns(spark_ds: Any, tmp_path: Path) -> None:
    root = tmp_path / "t"
    spark_ds.createDataFrame([(1, "a")], "id long, name string").write.format("txnlog").mode("append").save(str(root))
    before = _data_files(root)
    with pytest.raises(PySparkException, match="SchemaError.*extra"):
        spark_ds.createDataFrame([(2, "b", 1.5)], "id long, name string, extra double").write.format("txnlog") \
            .mode("append").save(str(root))
    assert _data_files(root) == before and txnlog.Table(str(root)).latest_version() == 0
    spark_ds.createDataFrame([(2, "b", 1.5)], "id long, name string, extra double").write.format("txnlog") \
        .mode("append").option("mergeSchema", "true").save(str(root))
    assert txnlog.Table(str(root)).snapshot().schema.names == ["id", "name", "extra"]
    assert _sorted(spark_ds.read.format("txnlog").load(str(root)).collect()) == [(1, "a", None), (2, "b", 1.5)]


def test_app_versions_make_a_write_idempotent(spark_ds: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")

    def save(version: int) -> None:
        spark_ds.range(0, 5).write.format("txnlog").mode("append").option("txnAppId", "job") \
            .option("txnVersion", str(version)).save(uri)

    save(3)
    save(3)  # a replay: skipped
    save(2)
    save(4)
    table = txnlog.Table(uri)
    assert table.latest_version() == 1 and table.snapshot().app_transaction_version("job") == 4
    assert spark_ds.read.format("txnlog").load(uri).count() == 10


def test_error_and_ignore_modes_go_through_the_save_mode_option(spark_ds: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = spark_ds.range(0, 5)
    # Spark refuses these modes (and partitionBy) for every Python data source.
    for mode in ("error", "ignore"):
        with pytest.raises(PySparkException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            df.write.format("txnlog").mode(mode).save(uri)
    with pytest.raises(PySparkException, match="partitioning"):
        df.write.format("txnlog").mode("append").partitionBy("id").save(uri)
    assert not txnlog.Table(uri).exists()

    df.write.format("txnlog").mode("append").option("saveMode", "error").save(uri)  # creates it
    with pytest.raises(PySparkException, match="TableAlreadyExistsError"):
        df.write.format("txnlog").mode("append").option("saveMode", "error").save(uri)
    df.write.format("txnlog").mode("append").option("saveMode", "ignore").save(uri)
    assert txnlog.Table(uri).latest_version() == 0 and spark_ds.read.format("txnlog").load(uri).count() == 5
    with pytest.raises(PySparkException, match="unknown option 'replacewher'"):
        df.write.format("txnlog").mode("overwrite").option("replaceWher", "id > 1").save(uri)


def test_a_failed_job_commits_nothing_and_leaves_no_file(spark_ds: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    root = tmp_path / "t"
    spark_ds.range(0, 4).write.format("txnlog").mode("append").save(str(root))
    before = _data_files(root)

    def fail_on_last(x):  # type: ignore[no-untyped-def]  # no hints: PySpark would read them as a pandas UDF's
        if x == 399:
            raise ValueError("bad row")
        return x

    failing = spark_ds.range(0, 400, numPartitions=4).select(F.udf(fail_on_last, "long")("id").alias("id"))
    with pytest.raises(PySparkException, match="bad row"):
        failing.write.format("txnlog").mode("append").save(str(root))
    assert txnlog.Table(str(root)).latest_version() == 0
    # abort deletes what the finished tasks reported; a task Spark was still cancelling may
    # finish its file after that: nothing in the log names it, and vacuum removes it once it is
    # done (vacuum keeps a file written at or after its own start, even with no retention).
    tracker = spark_ds.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while tracker.getActiveStageIds() and time.monotonic() < deadline:
        time.sleep(0.05)

    def files_as_they_are() -> set[tuple[str, int, int]]:
        return {(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*.parquet")}

    seen = files_as_they_are()
    while time.monotonic() < deadline:  # a killed task's Python worker may still be writing
        time.sleep(0.3)
        seen, previous = files_as_they_are(), seen
        if seen == previous:
            break
    leftovers = _data_files(root) - before
    assert before <= _data_files(root)
    done = vacuum(txnlog.Table(str(root)), retention="0s", force=True)
    assert {str(f) for f in done.files} >= leftovers
    assert _data_files(root) == before
    assert sorted(r.id for r in spark_ds.read.format("txnlog").load(str(root)).collect()) == [0, 1, 2, 3]


def test_decimal_and_timestamp_filters_reach_the_stats(spark_ds: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    for chunk in range(2):
        rows = [(i, decimal.Decimal(i) / 4, start + dt.timedelta(days=i)) for i in range(chunk * 50, (chunk + 1) * 50)]
        spark_ds.createDataFrame(rows, "id long, amount decimal(10,2), at timestamp").coalesce(1) \
            .write.format("txnlog").mode("append").save(uri)
    df = spark_ds.read.format("txnlog").option("filterPushdown", "true").option("maxPartitionBytes", "1").load(uri)
    late = df.where("at >= timestamp'2024-02-25 00:00:00'")
    assert late.rdd.getNumPartitions() == 1 and sorted(r.id for r in late.collect()) == list(range(55, 100))
    cheap = df.where("amount < 2.5")
    assert cheap.rdd.getNumPartitions() == 1 and sorted(r.id for r in cheap.collect()) == list(range(10))
