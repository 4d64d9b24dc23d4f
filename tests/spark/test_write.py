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


def test_the_driver_collects_only_file_rows_never_the_data(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every collect/toArrow/toPandas the write path makes is recorded (the real methods still
    run): only the one-row-per-file results come back, never a data row."""
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
    ts.write(df, str(tmp_path / "t"), partition_by=["k"])
    assert seen, "the write path collects its file rows"
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
