"""txnlog.spark.read and tx.read hand their scan to delta-spark's reader, pinned to txnlog's
snapshot version, when delta-spark is in the session and ``spark.txnlog.read.deltaReader`` is
on: the same rows as txnlog's own Spark scan (the default) on every layout, txnlog's checks
still first, the reads still recorded."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import txnlog
import txnlog.spark as ts
from txnlog.errors import UnsafePathError
from txnlog.spark.delta import DELTA_READER_CONF

pytestmark = pytest.mark.spark


@pytest.fixture
def delta_reader(delta_spark: Any) -> Iterator[Any]:
    """The shared session with delta-spark's reader turned on for txnlog's reads, restored after."""
    delta_spark.conf.set(DELTA_READER_CONF, "true")
    try:
        yield delta_spark
    finally:
        delta_spark.conf.unset(DELTA_READER_CONF)


def _own_scan(spark: Any, read: Callable[[], Any]) -> Any:
    spark.conf.set(DELTA_READER_CONF, "false")
    try:
        return read()
    finally:
        spark.conf.set(DELTA_READER_CONF, "true")

LAYOUTS = {
    "partitioned": ({}, ["p"]),
    "column-mapping-name": ({"delta.columnMapping.mode": "name"}, ["p"]),
    "column-mapping-id-vectors": ({"delta.columnMapping.mode": "id", "delta.enableDeletionVectors": "true"}, None),
    "vectors-row-tracking-cdf": (
        {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true", "delta.enableChangeDataFeed": "true"}, None),
    "copy-on-write-cdf": ({"delta.enableChangeDataFeed": "true"}, ["p"]),
}


def _delta_scan(df: Any) -> bool:
    """Whether ``df`` scans through delta-spark's file index rather than Spark's listing of files."""
    plan = str(df._jdf.queryExecution().executedPlan().toString())
    return "InMemoryFileIndex" not in plan and "DeltaFileIndex" in plan


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _build(spark: Any, uri: str, properties: dict[str, str], partition_by: list[str] | None) -> None:
    df = spark.range(0, 300, 1, 3).selectExpr("id", "cast(id % 3 as string) as p", "id * 10 as v", "named_struct('a', id, 'b', 'x') as s")
    ts.write(df, uri, partition_by=partition_by, properties=properties)
    ts.write(spark.range(300, 330).selectExpr("id", "cast(id % 3 as string) as p", "id * 10 as v", "named_struct('a', id, 'b', 'y') as s"), uri)
    with ts.transaction(spark, uri, operation="DELETE") as tx:
        tx.delete("id % 7 = 0")
    with ts.transaction(spark, uri, operation="UPDATE") as tx:
        tx.update("id % 11 = 0", set={"v": "v + 1"})


#: By default the layout with the most for delta-spark's reader to apply (vectors, row ids, the
#: change feed) and column mapping by id; every layout under soak.
DEFAULT_LAYOUTS = ("vectors-row-tracking-cdf", "column-mapping-id-vectors")


@pytest.mark.parametrize("layout", [n if n in DEFAULT_LAYOUTS else pytest.param(n, marks=pytest.mark.soak) for n in LAYOUTS])
def test_reads_through_delta_spark_equal_txnlogs_own_reader(delta_reader: Any, tmp_path: Path, layout: str) -> None:
    spark = delta_reader
    uri = str(tmp_path / "t")
    properties, partition_by = LAYOUTS[layout]
    _build(spark, uri, properties, partition_by)
    row_ids = "row-tracking" in layout
    cases = [(None, None), (None, "p = '1' and v > 500"), (1, "id < 100")]
    for version, predicate in cases:
        today = _own_scan(spark, lambda v=version, p=predicate: ts.read(spark, uri, version=v, predicate=p, with_row_ids=row_ids))
        expected = _own_scan(spark, lambda d=today: _rows(d))
        native = ts.read(spark, uri, version=version, predicate=predicate, with_row_ids=row_ids)
        assert _delta_scan(native) and not _delta_scan(today)
        assert [(f.name, f.dataType) for f in native.schema] == [(f.name, f.dataType) for f in today.schema]
        assert _rows(native) == expected, (version, predicate)
        assert expected
    got = txnlog.Table(uri).snapshot().to_arrow(with_row_ids=row_ids)
    assert len(_rows(ts.read(spark, uri, with_row_ids=row_ids))) == got.num_rows


def test_a_transactions_read_goes_to_delta_spark_and_is_still_recorded(delta_reader: Any, tmp_path: Path) -> None:
    spark = delta_reader
    uri = str(tmp_path / "t")
    _build(spark, uri, {"delta.enableDeletionVectors": "true"}, ["p"])
    with ts.transaction(spark, uri, operation="UPDATE") as tx:
        df = tx.read("p = '2'")
        assert _delta_scan(df)
        total = df.groupBy().sum("v").collect()[0][0]
        tx.write(spark.createDataFrame([(9999, "2", total, (1, "z"))], "id long, p string, v long, s struct<a: long, b: string>"))
        staged = tx.read("p = '2'")  # after a staged write: txnlog's own reader sees it
        assert not _delta_scan(staged) and staged.where("id = 9999").count() == 1
    info = txnlog.Table(uri).history(limit=1)[0].commit_info
    assert info.read_version == 3
    expected = _own_scan(spark, lambda: ts.read(spark, uri, version=3, predicate="p = '2'").groupBy().sum("v").collect()[0][0])
    assert total == expected


def test_a_log_entry_leaving_the_table_root_is_refused_before_delta_spark_sees_it(delta_reader: Any, tmp_path: Path) -> None:
    spark = delta_reader
    uri = tmp_path / "t"
    ts.write(spark.range(5), str(uri))
    outside = tmp_path / "outside.parquet"
    data = next(p for p in uri.rglob("*.parquet") if "_delta_log" not in p.parts)
    shutil.copy(data, outside)
    log = uri / "_delta_log" / "00000000000000000001.json"
    add = {"add": {"path": str(outside), "partitionValues": {}, "size": outside.stat().st_size, "modificationTime": 0, "dataChange": True}}
    log.write_text(json.dumps(add) + "\n")
    with pytest.raises(UnsafePathError):
        ts.read(spark, str(uri))
