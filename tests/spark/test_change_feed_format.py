"""A batch read of the change data feed through ``format("txnlog")``, as delta-spark users write
it: the same rows as Table.changes and as delta-spark's own ``readChangeFeed`` on the same table.
Before, the options were refused as unknown to a batch read."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog
import txnlog.spark as ts
from txnlog.errors import InvalidArgumentError

pytestmark = pytest.mark.spark

COLUMNS = ["id", "p", "v", "_change_type", "_commit_version", "_commit_timestamp"]
LAYOUTS = {
    "partitioned": ({}, ["p"]),
    "vectors-and-id-mapping": ({"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "id"}, None),
}


def _rows(table: pa.Table | list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    rows = table.select(COLUMNS).to_pylist() if isinstance(table, pa.Table) else table

    def plain(value: Any) -> Any:  # Spark's rows hold naive UTC times (the session's zone), Arrow's aware ones
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None) if isinstance(value, dt.datetime) and value.tzinfo else value

    return sorted(tuple(plain(r[c]) for c in COLUMNS) for r in rows)


def _changed_table(spark: Any, uri: str, properties: dict[str, str], partition_by: list[str] | None) -> None:
    """Versions 0-4: create, append, DELETE, UPDATE, MERGE (inserts and updates)."""
    df = spark.range(0, 40).selectExpr("id", "cast(id % 3 as string) as p", "id * 10 as v")
    ts.write(df, uri, partition_by=partition_by, properties={"delta.enableChangeDataFeed": "true", **properties})
    ts.write(spark.range(40, 50).selectExpr("id", "cast(id % 3 as string) as p", "id * 10 as v"), uri)
    with ts.transaction(spark, uri, operation="DELETE") as tx:
        tx.delete("id < 5")
    with ts.transaction(spark, uri, operation="UPDATE") as tx:
        tx.update("id >= 45", set={"v": "v + 1"})
    source = spark.range(38, 55).selectExpr("id", "cast(id % 3 as string) as p", "id * 100 as v")
    ts.merge(spark, uri, source, on="t.id = s.id AND t.p = s.p", when_matched_update="*", when_not_matched_insert="*")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_batch_change_feed_read_equals_table_changes_and_delta_spark(delta_spark: Any, tmp_path: Path, layout: str) -> None:
    spark = delta_spark
    ts.register(spark)
    uri = str(tmp_path / "t")
    properties, partition_by = LAYOUTS[layout]
    _changed_table(spark, uri, properties, partition_by)
    table = txnlog.Table(uri)
    assert table.snapshot().version == 4
    for start, end in ((0, None), (1, 3), (3, 4), (2, 2)):
        reader = spark.read.format("txnlog").option("readChangeFeed", "true").option("startingVersion", start)
        theirs = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start)
        if end is not None:
            reader, theirs = reader.option("endingVersion", end), theirs.option("endingVersion", end)
        df = reader.load(uri)
        assert df.columns == COLUMNS
        got = _rows(df.toArrow())
        assert got == _rows(table.changes(start, end)), (start, end)
        assert got == _rows([r.asDict() for r in theirs.load(uri).select(*COLUMNS).collect()]), (start, end)
        assert got, (start, end)


def test_timestamps_bound_the_range_and_a_loaded_frame_stays_on_its_range(delta_spark: Any, tmp_path: Path) -> None:
    spark = delta_spark
    ts.register(spark)
    uri = str(tmp_path / "t")
    _changed_table(spark, uri, {}, None)
    table = txnlog.Table(uri)
    stamps = {h.version: h.timestamp for h in table.history()}

    def iso(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()

    ours = (spark.read.format("txnlog").option("readChangeFeed", "true")
            .option("startingTimestamp", iso(stamps[1])).option("endingTimestamp", iso(stamps[3])).load(uri))
    theirs = (spark.read.format("delta").option("readChangeFeed", "true")
              .option("startingTimestamp", iso(stamps[1])).option("endingTimestamp", iso(stamps[3])).load(uri))
    got = _rows(ours.toArrow())
    assert got == _rows(table.changes(starting_timestamp=iso(stamps[1]), ending_timestamp=iso(stamps[3])))
    assert got == _rows([r.asDict() for r in theirs.select(*COLUMNS).collect()])
    assert {r[4] for r in got} == {1, 2, 3}

    loaded = spark.read.format("txnlog").option("readChangeFeed", "true").option("startingVersion", 4).load(uri)
    before = loaded.count()
    ts.write(spark.range(900, 905).selectExpr("id", "'x' as p", "id as v"), uri)
    assert loaded.count() == before  # pinned to the range as loaded
    again = spark.read.format("txnlog").option("readChangeFeed", "true").option("startingVersion", 4).load(uri)
    assert again.count() == before + 5


def test_change_feed_options_are_checked(spark: Any, tmp_path: Path) -> None:
    ts.register(spark)
    uri = str(tmp_path / "t")
    _changed_table(spark, uri, {}, None)

    def load(**options: str) -> Any:
        return spark.read.format("txnlog").options(**options).load(uri).count()

    with pytest.raises(Exception, match="endingVersion.*readChangeFeed"):
        load(endingVersion="2")
    with pytest.raises(Exception, match="needs startingVersion or startingTimestamp"):
        load(readChangeFeed="true", endingVersion="2")
    with pytest.raises(Exception, match="versionAsOf/timestampAsOf do not apply"):
        load(readChangeFeed="true", startingVersion="1", versionAsOf="2")
    with pytest.raises(Exception, match="after the latest version"):
        load(readChangeFeed="true", startingVersion="9")
    with pytest.raises(Exception, match="maxFilesPerTrigger"):
        load(readChangeFeed="true", startingVersion="1", endingVersion="2", maxFilesPerTrigger="3")
    from txnlog.spark.datasource.options import SourceOptions

    with pytest.raises(InvalidArgumentError, match="endingVersion or endingTimestamp"):
        SourceOptions.parse({"path": uri, "readChangeFeed": "true", "startingVersion": "0", "endingVersion": "1", "endingTimestamp": "x"}, writing=False)
