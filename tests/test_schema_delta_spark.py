"""Schema changes across txnlog and delta-spark: delta-spark reads and continues tables txnlog
altered (column mapping turned on by a rename or drop, type widening, constraints, NOT NULL),
txnlog continues tables delta-spark altered, and the Spark writers evolve schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import ProtocolViolationError

pytestmark = pytest.mark.spark


def _spark_rows(spark: Any, uri: str, order: str = "id") -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in spark.read.format("delta").load(uri).orderBy(order).collect()]


def test_delta_spark_reads_and_continues_a_table_txnlog_altered(delta_spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = Table.create(uri, pa.schema([("id", pa.int64()), ("x", pa.int32()), ("s", pa.struct([("a", pa.int32())])), ("gone", pa.string())]))
    t.append(pa.table({"id": [1, 2], "x": pa.array([10, None], pa.int32()), "s": pa.array([{"a": 1}, None], pa.struct([("a", pa.int32())])),
                       "gone": ["g", "h"]}))
    t.alter.add_columns([pa.field("s.b", pa.string()), pa.field("y", pa.string())])
    t.alter.rename_column("x", "xx")  # turns column mapping on
    t.alter.drop_columns("gone")
    t.alter.set_column_type("xx", pa.int64())
    t.alter.set_column_comment("id", "the key")
    t.alter.add_constraint({"positive": "id > 0"})
    t.alter.set_not_null("id")

    assert _spark_rows(delta_spark, uri) == [
        {"id": 1, "xx": 10, "s": {"a": 1, "b": None}, "y": None},
        {"id": 2, "xx": None, "s": None, "y": None},
    ]
    delta_spark.sql(f"INSERT INTO delta.`{uri}` VALUES (3, {2**40}, named_struct('a', 3, 'b', 'c'), 'new')")
    with pytest.raises(Exception, match="(?i)positive|constraint"):  # delta-spark enforces txnlog's constraint
        delta_spark.sql(f"INSERT INTO delta.`{uri}` VALUES (-1, 1, null, null)")
    delta_spark.sql(f"ALTER TABLE delta.`{uri}` RENAME COLUMN y TO why")
    t.append(pa.table({"id": [4], "xx": [5], "why": ["txnlog"]}))
    with pytest.raises(ProtocolViolationError):
        t.append(pa.table({"id": [-4], "xx": [5]}))
    rows = sorted(t.snapshot().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["xx"], r["why"]) for r in rows] == [(1, 10, None), (2, None, None), (3, 2**40, "new"), (4, 5, "txnlog")]
    assert rows[2]["s"] == {"a": 3, "b": "c"}
    assert [(r["id"], r["xx"], r["why"]) for r in _spark_rows(delta_spark, uri)] == [(r["id"], r["xx"], r["why"]) for r in rows]
    comment = delta_spark.sql(f"DESCRIBE TABLE delta.`{uri}`").filter("col_name = 'id'").collect()[0].comment
    assert comment == "the key"


def test_txnlog_continues_a_table_delta_spark_widened_and_renamed(delta_spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    delta_spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, v STRING) USING delta "
                    "TBLPROPERTIES ('delta.enableTypeWidening' = 'true', 'delta.columnMapping.mode' = 'name')")
    delta_spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1, 'a'), (2, 'b')")
    delta_spark.sql(f"ALTER TABLE delta.`{uri}` ALTER COLUMN id TYPE BIGINT")
    delta_spark.sql(f"ALTER TABLE delta.`{uri}` RENAME COLUMN v TO w")
    t = Table(uri)
    assert t.snapshot().schema.field("id").type == pa.int64()
    t.append(pa.table({"id": [2**40], "w": ["big"]}))
    t.alter.set_column_comment("w", "renamed by Spark")
    rows = [(r["id"], r["w"]) for r in _spark_rows(delta_spark, uri)]
    assert rows == [(1, "a"), (2, "b"), (2**40, "big")]
    assert sorted((r["id"], r["w"]) for r in t.snapshot().to_arrow().to_pylist()) == rows


def test_spark_writers_merge_and_overwrite_schemas(delta_spark: Any, tmp_path: Path) -> None:
    from txnlog.spark import register, write

    register(delta_spark)
    uri = str(tmp_path / "t")
    write(delta_spark.createDataFrame([(1, "a")], "id long, v string"), uri)
    write(delta_spark.createDataFrame([(2, "b", 2.5)], "id long, v string, d double"), uri, schema_mode="merge")
    assert sorted(r["d"] or 0 for r in Table(uri).snapshot().to_arrow().to_pylist()) == [0, 2.5]
    df = delta_spark.createDataFrame([("k", 7)], "k string, n int")
    df.write.format("txnlog").mode("overwrite").option("overwriteSchema", "true").save(uri)
    snap = Table(uri).snapshot()
    assert snap.schema.names == ["k", "n"] and snap.to_arrow().to_pylist() == [{"k": "k", "n": 7}]
    assert _spark_rows(delta_spark, uri, "k") == [{"k": "k", "n": 7}]


def test_delta_spark_continues_and_optimizes_a_table_txnlog_clustered(delta_spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = Table.create(uri, pa.schema([("id", pa.int64()), ("k", pa.string())]), cluster_by=["k"])
    t.append(pa.table({"id": [1, 2], "k": ["b", "a"]}))
    detail = delta_spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").collect()[0]
    assert list(detail.clusteringColumns) == ["k"]
    delta_spark.sql(f"INSERT INTO delta.`{uri}` VALUES (3, 'c')")
    delta_spark.sql(f"OPTIMIZE delta.`{uri}`")
    delta_spark.sql(f"ALTER TABLE delta.`{uri}` CLUSTER BY (id, k)")
    assert json.loads(t.snapshot().domain_metadata("delta.clustering"))["clusteringColumns"] == [["id"], ["k"]]
    t.append(pa.table({"id": [4], "k": ["d"]}))
    assert sorted(r["id"] for r in t.snapshot().to_arrow().to_pylist()) == [1, 2, 3, 4]
    assert [r["id"] for r in _spark_rows(delta_spark, uri)] == [1, 2, 3, 4]


#: ``spark`` (txnlog.spark.merge finding the rows on the driver) evolves the schema in the same
#: step as ``spark-executors`` and differs only in where the matched rows are found; it runs
#: under ``soak``.
@pytest.mark.parametrize("executor", ["python", pytest.param("spark", marks=pytest.mark.soak), "spark-executors"])
def test_merge_schema_evolution_agrees_with_delta_sparks_auto_merge(delta_spark: Any, tmp_path: Path, executor: str) -> None:
    """The same MERGEs with ``UPDATE SET *``/``INSERT *`` and new source columns, txnlog's with
    ``schema_mode="merge"`` (``Table.merge``; ``txnlog.spark.merge`` on the driver, and on
    Spark's executors) and delta-spark's with ``schema.autoMerge.enabled``: the same schema and
    the same rows (read by delta-spark), including a source that lacks a column."""
    from tests.conftest import session_confs
    from txnlog.spark.driver import DRIVER_SCAN_CELLS_CONF
    from txnlog.spark.merge import merge as spark_merge

    def merge_ours(df: Any) -> None:
        if executor == "python":
            Table(ours).merge(df.toArrow(), "id", when_matched_update="*", when_not_matched_insert="*", schema_mode="merge")
            return
        confs = {DRIVER_SCAN_CELLS_CONF: "0"} if executor == "spark-executors" else {}
        with session_confs(delta_spark, confs):
            spark_merge(delta_spark, ours, df, "id", when_matched_update="*", when_not_matched_insert="*", schema_mode="merge")

    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    Table.create(ours, pa.schema([("id", pa.int64()), ("v", pa.string())])).append(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    delta_spark.sql(f"CREATE TABLE delta.`{theirs}` (id BIGINT, v STRING) USING delta")
    delta_spark.sql(f"INSERT INTO delta.`{theirs}` VALUES (1, 'a'), (2, 'b')")
    sources = [
        ([(2, "B", 20), (3, "C", 30)], "id BIGINT, v STRING, extra BIGINT"),
        ([(1, 10, "x"), (4, 40, "y")], "id BIGINT, extra BIGINT, more STRING"),  # no v: kept by the update, NULL on insert
    ]
    for rows, ddl in sources:
        df = delta_spark.createDataFrame(rows, ddl)
        merge_ours(df)
        df.createOrReplaceTempView("merge_source")
        with session_confs(delta_spark, {"spark.databricks.delta.schema.autoMerge.enabled": "true"}):
            delta_spark.sql(f"MERGE INTO delta.`{theirs}` t USING merge_source s ON t.id = s.id "
                            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert Table(ours).snapshot().schema.names == Table(theirs).snapshot().schema.names == ["id", "v", "extra", "more"]
    assert _spark_rows(delta_spark, ours) == _spark_rows(delta_spark, theirs)
    assert [(r["id"], r["v"], r["extra"], r["more"]) for r in _spark_rows(delta_spark, ours)] == [
        (1, "a", 10, "x"), (2, "B", 20, None), (3, "C", 30, None), (4, None, 40, "y")]
