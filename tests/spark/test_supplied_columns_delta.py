"""Identity, generated and default columns between txnlog and delta-spark, both ways: each
reads and continues the other's tables, and identity values stay unique across both writers."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import ProtocolViolationError
from txnlog.schema import default_column, generated_column, identity_column

pytestmark = pytest.mark.spark

UTC = pa.timestamp("us", tz="UTC")


def _ts(*days: int) -> pa.Array:
    return pa.array([dt.datetime(2024, 5, d, 12, tzinfo=dt.timezone.utc) for d in days], UTC)


def _mark(table: Table) -> int:
    fields = json.loads(table.snapshot().metadata.schema_string)["fields"]
    return int(next(f for f in fields if f["name"] == "id")["metadata"]["delta.identity.highWaterMark"])


def _check_rows(rows: list[dict], n: int) -> None:
    ids = [r["id"] for r in rows]
    assert len(ids) == n and None not in ids and len(set(ids)) == n, ids
    for r in rows:
        assert r["day"] == r["ts"].date() and r["status"] == "new", r


def test_delta_spark_reads_and_continues_txnlogs_identity_generated_default_table(delta_spark, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([identity_column("id"), pa.field("ts", UTC), generated_column("day", pa.date32(), "CAST(ts AS DATE)"),
                        default_column("status", pa.string(), "'new'"), pa.field("v", pa.int64())])
    table = Table.create(path, schema=schema, partition_by=["day"])
    table.append(pa.table({"ts": _ts(1, 2), "v": [1, 2]}))
    assert sorted(r.id for r in delta_spark.read.format("delta").load(path).collect()) == [1, 2]
    delta_spark.sql(f"INSERT INTO delta.`{path}` (ts, v) VALUES (TIMESTAMP'2024-05-03 12:00:00', 3), (TIMESTAMP'2024-05-03 12:00:00', 4)")
    # delta-spark enforces txnlog's generation expression and refuses an explicit id.
    with pytest.raises(Exception, match="(?i)generated|constraint|identity"):
        delta_spark.sql(f"INSERT INTO delta.`{path}` (ts, day, v) VALUES (TIMESTAMP'2024-05-03 12:00:00', DATE'2020-01-01', 5)")
    table.append(pa.table({"ts": _ts(4), "v": [6]}))
    rows = Table(path).snapshot().to_arrow().to_pylist()
    _check_rows(rows, 5)
    assert _mark(Table(path)) == max(r["id"] for r in rows)
    spark_rows = [r.asDict() for r in delta_spark.read.format("delta").load(path).collect()]
    assert sorted(r["id"] for r in spark_rows) == sorted(r["id"] for r in rows)


def test_txnlog_continues_delta_sparks_identity_generated_default_table(delta_spark, tmp_path: Path) -> None:
    # The hazard: txnlog refused to append to delta-spark's generated or identity tables.
    from txnlog.spark import write

    path = str(tmp_path / "t")
    delta_spark.sql(
        f"""CREATE TABLE delta.`{path}` (
              id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 5 INCREMENT BY 3),
              ts TIMESTAMP, day DATE GENERATED ALWAYS AS (CAST(ts AS DATE)),
              status STRING DEFAULT 'new', v BIGINT)
            USING delta PARTITIONED BY (day)
            TBLPROPERTIES ('delta.feature.allowColumnDefaults' = 'supported')"""
    )
    delta_spark.sql(f"INSERT INTO delta.`{path}` (ts, v) VALUES (TIMESTAMP'2024-05-01 12:00:00', 1), (TIMESTAMP'2024-05-02 12:00:00', 2)")
    table = Table(path)
    table.append(pa.table({"ts": _ts(3, 3), "v": [3, 4]}))
    with pytest.raises(ProtocolViolationError, match="'day'"):
        table.append(pa.table({"ts": _ts(3), "day": [dt.date(2020, 1, 1)], "v": [5]}))
    # Spark executors through txnlog: several tasks, none overlapping.
    df = delta_spark.createDataFrame([(dt.datetime(2024, 5, 5, 12), i) for i in range(10, 30)], "ts timestamp, v long").repartition(4)
    write(df, path)
    delta_spark.sql(f"INSERT INTO delta.`{path}` (ts, v) VALUES (TIMESTAMP'2024-05-06 12:00:00', 99)")
    table.append(pa.table({"ts": _ts(7), "v": [100]}))
    rows = Table(path).snapshot().to_arrow().to_pylist()
    _check_rows(rows, 26)
    assert all((r["id"] - 5) % 3 == 0 for r in rows)
    assert _mark(Table(path)) == max(r["id"] for r in rows)
    assert delta_spark.read.format("delta").load(path).count() == 26


def test_spark_paths_number_generate_and_default_as_txnlogs_writer_does(delta_spark, tmp_path: Path) -> None:
    from txnlog import spark as ts
    from txnlog.spark import merge
    from txnlog.spark.driver import DRIVER_SCAN_CELLS_CONF

    ts.register(delta_spark)

    path = str(tmp_path / "t")
    schema = pa.schema([identity_column("id"), pa.field("ts", UTC), generated_column("day", pa.date32(), "CAST(ts AS DATE)"),
                        default_column("status", pa.string(), "'new'"), pa.field("v", pa.int64())])
    Table.create(path, schema=schema, partition_by=["day"])
    df = delta_spark.createDataFrame([(dt.datetime(2024, 5, 1 + i % 3, 12), i) for i in range(12)], "ts timestamp, v long").repartition(3)
    df.write.format("txnlog").mode("append").save(path)  # the data source: three tasks, one plan
    _check_rows(Table(path).snapshot().to_arrow().to_pylist(), 12)
    source = delta_spark.createDataFrame([(dt.datetime(2024, 5, 9, 12), i) for i in range(10, 16)], "ts timestamp, v long").repartition(2)
    previous = delta_spark.conf.get(DRIVER_SCAN_CELLS_CONF, None)
    delta_spark.conf.set(DRIVER_SCAN_CELLS_CONF, "0")  # Spark's own MERGE, not the driver's
    try:
        merge(delta_spark, path, source, on="v", when_matched_update={"ts": "s.ts"}, when_not_matched_insert={"v": "s.v", "ts": "s.ts"})
    finally:
        if previous is None:
            delta_spark.conf.unset(DRIVER_SCAN_CELLS_CONF)
        else:
            delta_spark.conf.set(DRIVER_SCAN_CELLS_CONF, previous)
    rows = Table(path).snapshot().to_arrow().to_pylist()
    _check_rows(rows, 16)  # 10 and 11 updated (day recomputed), 12..15 inserted
    assert {r["v"] for r in rows if r["day"] == dt.date(2024, 5, 9)} == {10, 11, 12, 13, 14, 15}
    assert _mark(Table(path)) == max(r["id"] for r in rows)
