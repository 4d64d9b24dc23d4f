"""txnlog.spark.write: executors write the files, the driver commits; round trips through
txnlog.spark.read and deltalake (an independent reader)."""

from __future__ import annotations

import datetime as dt
import decimal
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog
import txnlog.spark as ts
from tests.storage import conftest as storage_fixtures
from txnlog.errors import (
    ConcurrentAppendError,
    InvalidArgumentError,
    ProtocolViolationError,
    SchemaError,
    TableAlreadyExistsError,
)

pytestmark = pytest.mark.spark

# A moto S3 server on 127.0.0.1 and a bucket on it (the storage tests' fixtures).
moto_s3 = storage_fixtures.moto_s3
s3_bucket = storage_fixtures.s3_bucket

ALL_TYPES = (
    "id long, b byte, s short, i int, f float, d double, dec decimal(20,4), str string, bin binary, "
    "flag boolean, day date, ts timestamp, ntz timestamp_ntz"
)


def _rows(n: int) -> list[tuple[Any, ...]]:
    out = []
    for k in range(n):
        if k % 7 == 3:  # a row of nulls (but the id)
            out.append((k, None, None, None, None, None, None, None, None, None, None, None, None))
            continue
        out.append((
            k, k % 100 - 50, k * 3 - 1000, k * 1000, k / 4, k / 3, decimal.Decimal(f"{k}.{k % 10000:04d}"),
            f"s{k}é", bytes([k % 256, 0, 255]), k % 2 == 0, dt.date(2020, 1, 1) + dt.timedelta(days=k),
            dt.datetime(2021, 3, 4, 5, 6, 7, 123456, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=k),
            dt.datetime(1999, 12, 31, 23, 59, 59, 1) + dt.timedelta(minutes=k),
        ))
    return out


def _sorted(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows), key=lambda r: r[0])


def _utc_naive(value: Any) -> Any:
    """A timestamp as naive UTC (Spark returns naive in the session zone, UTC here)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


@pytest.mark.parametrize("partition_by", [None, ["flag", "day"]], ids=["plain", "partitioned"])
def test_every_primitive_type_round_trips_through_spark_and_deltalake(spark: Any, tmp_path: Path, partition_by: Any) -> None:
    deltalake = pytest.importorskip("deltalake")
    rows = _rows(40)
    df = spark.createDataFrame(rows, ALL_TYPES)
    uri = str(tmp_path / "t")
    version = ts.write(df, uri, partition_by=partition_by)
    assert version == 0

    expected = _sorted([tuple(_utc_naive(v) for v in r) for r in rows])
    back = ts.read(spark, uri)
    assert back.schema == df.schema.__class__.fromJson(
        {**df.schema.jsonValue(), "fields": [{**f, "nullable": True} for f in df.schema.jsonValue()["fields"]]}
    )
    assert _sorted(back.collect()) == expected

    snap = txnlog.Table(uri).snapshot()
    assert list(snap.partition_columns) == (partition_by or [])
    independent = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
    assert len(independent) == len(rows)
    by_id = {r["id"]: r for r in independent}
    names = [f.name for f in df.schema.fields]
    for row in expected:
        other = by_id[row[0]]
        assert tuple(_utc_naive(other[n]) for n in names) == row


def test_partitioned_write_writes_one_file_per_partition_value_and_honours_target_size(spark: Any, tmp_path: Path) -> None:
    df = spark.range(0, 30_000, numPartitions=4).selectExpr("id", "cast(id % 3 as string) as region", "repeat('x', 50) as pad")
    ts.write(df, str(tmp_path / "p"), partition_by=["region"])
    files = txnlog.Table(str(tmp_path / "p")).snapshot().files()
    regions = [m[0][1] for m in files.column("partition_values").to_pylist()]
    assert sorted(regions) == ["0", "1", "2"]  # repartitioned by region first: one task, one file each

    small = 64 * 1024
    ts.write(df.drop("region"), str(tmp_path / "s"), target_file_size=small)
    sizes = txnlog.Table(str(tmp_path / "s")).snapshot().files().column("size").to_pylist()
    assert len(sizes) > 4  # more than one file per task
    assert max(sizes) < 3 * small


@pytest.mark.parametrize("native", [True, False], ids=["spark-writer", "python-tasks"])
def test_the_driver_collects_only_file_rows_never_the_data(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    """Every collect/toArrow/toPandas the write path makes is recorded (the real methods still
    run): only the one-row-per-file results of the Python tasks come back, never a data row;
    Spark's own writer collects nothing (the driver reads the files' footers)."""
    from tests.conftest import session_confs
    from txnlog.spark.native import NATIVE_WRITE_CONF

    seen: list[tuple[str, list[str], int]] = []
    classes = {type(spark.range(1))}
    from pyspark.sql import DataFrame

    classes.add(DataFrame)
    for cls in classes:
        for name in ("collect", "toArrow", "toPandas", "toLocalIterator", "take", "head"):
            original = getattr(cls, name, None)
            if original is None:
                continue

            def spy(self: Any, *args: Any, __original: Any = original, __name: str = name, **kwargs: Any) -> Any:
                result = __original(self, *args, **kwargs)
                size = len(result) if hasattr(result, "__len__") else -1
                seen.append((__name, list(self.columns), size))
                return result

            monkeypatch.setattr(cls, name, spy)
    df = spark.range(0, 200_000, numPartitions=4).selectExpr("id", "cast(id % 5 as string) as k", "uuid() as u")
    with session_confs(spark, {NATIVE_WRITE_CONF: str(native).lower()}):
        ts.write(df, str(tmp_path / "t"), partition_by=["k"])
    assert bool(seen) is not native, "only the Python tasks collect their file rows"
    for name, columns, size in seen:
        assert name == "collect" and columns == ["add", "error"], (name, columns)
        assert size <= 20  # 5 partition values; a handful of files
    assert txnlog.Table(str(tmp_path / "t")).snapshot().num_files == 5


def test_time_travel_by_version_and_timestamp(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    ts.write(spark.range(0, 10), uri)
    first = txnlog.Table(uri).history()[0].timestamp
    ts.write(spark.range(10, 25), uri)
    ts.write(spark.range(100, 101), uri, mode="overwrite")
    assert ts.read(spark, uri).count() == 1
    assert ts.read(spark, uri, version=0).count() == 10
    assert ts.read(spark, uri, version=1).count() == 25
    assert ts.read(spark, uri, timestamp=first).count() == 10
    assert sorted(r.id for r in ts.read(spark, uri, version=1, predicate="id >= 20").collect()) == [20, 21, 22, 23, 24]


def test_modes_error_ignore_and_idempotent_app_versions(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = spark.range(0, 5)
    assert ts.write(df, uri, mode="error") == 0
    with pytest.raises(TableAlreadyExistsError):
        ts.write(df, uri, mode="error")
    assert ts.write(df, uri, mode="ignore") is None
    assert ts.write(df, uri, app_id="job", app_version=3) == 1
    assert ts.write(df, uri, app_id="job", app_version=3) is None  # replayed: skipped
    assert ts.write(df, uri, app_id="job", app_version=2) is None
    assert ts.write(df, uri, app_id="job", app_version=4) == 2
    assert txnlog.Table(uri).snapshot().app_transaction_version("job") == 4
    assert ts.read(spark, uri).count() == 15
    with pytest.raises(InvalidArgumentError):
        ts.write(df, uri, mode="upsert")


def _data_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}


def test_schema_is_checked_before_any_file_is_written(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "t"
    ts.write(spark.createDataFrame([(1, "a")], "id long, name string"), str(root))
    before = _data_files(root)
    with pytest.raises(SchemaError, match="name") as info:
        ts.write(spark.createDataFrame([(2, 5)], "id long, name int"), str(root))
    assert info.value.field == "name"
    with pytest.raises(SchemaError, match="extra") as info:
        ts.write(spark.createDataFrame([(2, "b", 1.5)], "id long, name string, extra double"), str(root))
    assert info.value.field == "extra"
    assert _data_files(root) == before
    assert txnlog.Table(str(root)).latest_version() == 0

    version = ts.write(spark.createDataFrame([(2, "b", 1.5)], "id long, name string, extra double"), str(root), merge_schema=True)
    snap = txnlog.Table(str(root)).snapshot()
    assert version == 1 and snap.schema.names == ["id", "name", "extra"]
    assert _sorted(ts.read(spark, str(root)).collect()) == [(1, "a", None), (2, "b", 1.5)]


def test_overwrite_and_replace_where(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = spark.range(0, 30).selectExpr("id", "cast(id % 3 as string) as p")
    ts.write(df, uri, partition_by=["p"])
    # A partition predicate: the p='1' files go, the new rows come.
    new = spark.range(100, 104).selectExpr("id", "'1' as p")
    ts.write(new, uri, mode="overwrite", replace_where="p = '1'")
    got = _sorted(ts.read(spark, uri).collect())
    assert [r for r in got if r[1] == "1"] == [(i, "1") for i in range(100, 104)]
    assert len(got) == 24
    # A data predicate: only the matching rows of the touched files go.
    ts.write(spark.range(7, 9).selectExpr("id", "'0' as p"), uri, mode="overwrite", replace_where="id < 10")
    ids = sorted(r.id for r in ts.read(spark, uri).collect())
    assert ids == sorted([i for i in range(10, 30) if i % 3 != 1] + list(range(100, 104)) + [7, 8])
    # Every written row must match the condition, or nothing is committed.
    version = txnlog.Table(uri).latest_version()
    with pytest.raises(ProtocolViolationError, match="replaceWhere"):
        ts.write(spark.range(5, 7).selectExpr("id", "'2' as p"), uri, mode="overwrite", replace_where="p = '1'")
    assert txnlog.Table(uri).latest_version() == version
    ts.write(spark.range(0, 2).selectExpr("id", "'2' as p"), uri, mode="overwrite")
    assert sorted(r.id for r in ts.read(spark, uri).collect()) == [0, 1]


class _CommitDuringWrite:
    """A DataFrame stage that, the first time it runs (inside the write's Spark task, after the
    write read its snapshot), appends to the table from the executor: a real concurrent writer."""

    def __init__(self, uri: str, region: str, marker: str) -> None:
        self.uri, self.region, self.marker = uri, region, marker

    def __call__(self, batches: Any) -> Any:
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            fd = None
        if fd is not None:
            os.close(fd)
            schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
            txnlog.Table(self.uri).append(pa.table({"id": [999], "p": [self.region]}, schema=schema))
        yield from batches


@pytest.mark.parametrize("region,conflicts", [("1", True), ("2", False)])
def test_replace_where_conflicts_with_a_concurrent_append_it_would_have_read(
    spark: Any, tmp_path: Path, region: str, conflicts: bool
) -> None:
    uri = str(tmp_path / "t")
    ts.write(spark.range(0, 6).selectExpr("id", "cast(id % 3 as string) as p"), uri, partition_by=["p"])
    source = spark.range(100, 102, numPartitions=1).selectExpr("id", "'1' as p")
    racing = source.mapInArrow(_CommitDuringWrite(uri, region, str(tmp_path / "marker")), source.schema)
    if conflicts:
        with pytest.raises(ConcurrentAppendError) as info:
            ts.write(racing, uri, mode="overwrite", replace_where="p = '1'")
        assert info.value.winning_version == 1
        assert txnlog.Table(uri).latest_version() == 1
    else:
        assert ts.write(racing, uri, mode="overwrite", replace_where="p = '1'") == 2
        rows = _sorted(ts.read(spark, uri).collect())
        assert (999, "2") in rows and (100, "1") in rows and (1, "1") not in rows


def test_executors_write_to_s3_with_the_storage_options(spark: Any, s3_bucket: str, moto_s3: dict[str, str]) -> None:  # noqa: F811
    """The storage options reach the executors inside the WriteContext: the files land in moto's
    bucket and an independent reader (deltalake) sees every row."""
    deltalake = pytest.importorskip("deltalake")
    uri = f"{s3_bucket}/events"
    df = spark.range(0, 500, numPartitions=2).selectExpr("id", "cast(id % 2 as string) as p")
    assert ts.write(df, uri, partition_by=["p"], storage_options=moto_s3) == 0
    snap = txnlog.Table(uri, moto_s3).snapshot()
    assert snap.num_files == 2
    rows = deltalake.DeltaTable(uri, storage_options=moto_s3).to_pyarrow_table()
    assert sorted(rows.column("id").to_pylist()) == list(range(500))


# Names other engines write and Spark would read as paths or split: a dot, a space, a backtick.
ODD_NAMES = "id long, `a.b` long, `c d` string, `x``y` double"


def _odd_rows(start: int, n: int) -> list[tuple[Any, ...]]:
    return [(i, i % 2, f"v{i}", i / 2) for i in range(start, start + n)]


def test_column_names_with_dots_spaces_and_backticks_round_trip_through_deltalake(spark: Any, tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    plain, partitioned = str(tmp_path / "plain"), str(tmp_path / "partitioned")
    assert ts.write(spark.createDataFrame(_odd_rows(0, 6), ODD_NAMES), plain) == 0
    assert ts.write(spark.createDataFrame(_odd_rows(0, 6), ODD_NAMES), partitioned, partition_by=["a.b"]) == 0
    # An append is repartitioned by the table's partition column "a.b".
    assert ts.write(spark.createDataFrame(_odd_rows(6, 6), ODD_NAMES), partitioned) == 1
    # Partition directories (below each write's job directory, for Spark's own writer).
    assert sorted({p.name for p in (tmp_path / "partitioned").rglob("*") if p.is_dir() and "=" in p.name}) == ["a.b=0", "a.b=1"]
    for uri, n in ((plain, 6), (partitioned, 12)):
        expected = _odd_rows(0, n)
        seen = deltalake.DeltaTable(uri).to_pyarrow_table()
        assert sorted(seen.column_names) == sorted(["id", "a.b", "c d", "x`y"])
        assert sorted(zip(*[seen.column(c).to_pylist() for c in ("id", "a.b", "c d", "x`y")])) == expected
        assert _sorted(ts.read(spark, uri).collect()) == expected
    with pytest.raises(SchemaError) as info:
        ts.write(spark.createDataFrame(_odd_rows(0, 1), ODD_NAMES), str(tmp_path / "other"), partition_by=["a.c"])
    assert info.value.field == "a.c"


def test_an_empty_append_commits_nothing_and_an_empty_overwrite_removes_the_rows(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    empty = spark.createDataFrame([], "id long, p string")
    assert ts.write(empty, uri, partition_by=["p"]) == 0  # the table is still created
    assert ts.write(empty, uri) is None
    assert ts.write(spark.createDataFrame([(1, "a")], "id long, p string"), uri) == 1
    assert ts.write(empty, uri) is None
    assert ts.write(empty.where("id > 0"), uri, mode="overwrite", replace_where="p = 'b'") is None  # nothing matched
    assert txnlog.Table(uri).latest_version() == 1
    assert ts.write(empty, uri, mode="overwrite") == 2  # the old rows go
    assert ts.read(spark, uri).count() == 0
    assert ts.write(empty, uri, mode="overwrite") is None  # nothing left to remove
    # An app version is progress worth recording even without rows: a replay is then skipped.
    assert ts.write(empty, uri, app_id="job", app_version=1) == 3
    assert ts.write(empty, uri, app_id="job", app_version=1) is None
    assert [e.commit_info.operation for e in txnlog.Table(uri).history()] == ["WRITE", "WRITE", "WRITE", "CREATE TABLE AS SELECT"]


def test_the_driver_checks_the_schema_without_opening_the_store(spark: Any, tmp_path: Path) -> None:
    from txnlog.log.actions import Metadata
    from txnlog.schema import arrow_to_delta_schema
    from txnlog.spark.tasks import check_schema

    schema_string = arrow_to_delta_schema(pa.schema([("id", pa.int64()), ("name", pa.string())]))
    good = spark.createDataFrame([(1, "a")], "id long, name string")
    bad = spark.createDataFrame([(1, 2)], "id long, extra long")
    # A store that cannot even be opened: the check does not need one.
    check_schema(good, txnlog.WriteContext.for_metadata("nosuch://bucket/t", Metadata("id", schema_string)))
    # The error is the one a write raises.
    ctx = txnlog.WriteContext.for_metadata(str(tmp_path / "t"), Metadata("id", schema_string))
    with pytest.raises(SchemaError, match="'extra'") as info:
        check_schema(bad, ctx)
    with pytest.raises(SchemaError) as written:
        ctx.write(pa.schema([("id", pa.int64()), ("extra", pa.int64())]).empty_table())
    assert (str(info.value), info.value.field) == (str(written.value), written.value.field)
    assert not (tmp_path / "t").exists()


def test_a_worker_python_that_cannot_import_a_module_is_named_in_one_line(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    from pyspark.sql import functions as F

    from txnlog.spark.common import SPARK_FAILURES, job_error

    # A module only the driver can import: the workers' Python lacks it as a Python without
    # txnlog lacks txnlog (the function is pickled by reference to its module).
    name = f"driver_only_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text("def double(x):\n    return None if x is None else 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    monkeypatch.setitem(sys.modules, name, module)
    df = spark.range(3).select(F.udf(module.double, "long")("id").alias("id"))

    with pytest.raises(SPARK_FAILURES) as raw:  # Spark's own error, from a real worker
        df.collect()
    error = job_error(raw.value, "the test job")
    assert isinstance(error, ts.SparkWorkerPythonError) and error.module == name
    message = str(error)
    assert "\n" not in message and name in message and "PYSPARK_PYTHON" in message and "spark.pyspark.python" in message

    # The writer's job raises it, and nothing is committed.
    uri = tmp_path / "t"
    with pytest.raises(ts.SparkWorkerPythonError, match=name):
        ts.write(df, str(uri))
    assert not txnlog.Table(str(uri)).exists()

    # A task failing for another reason stays a plain SparkJobError with Spark's message.
    def fail(x):  # type: ignore[no-untyped-def]  # no hints: PySpark would read them as a pandas UDF's
        raise ValueError("bad row")

    with pytest.raises(SPARK_FAILURES) as other:
        spark.range(1).select(F.udf(fail, "long")("id")).collect()
    plain = job_error(other.value, "the test job")
    assert type(plain) is ts.SparkJobError and "bad row" in str(plain)
