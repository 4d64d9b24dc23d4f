"""txnlog reads and continues what delta-spark writes: each table is made by delta-spark itself,
one per feature it writes. txnlog returns delta-spark's rows at every version, then appends,
deletes, updates and merges, each read back by delta-spark (and delta-spark writes again after
txnlog), with the change feed and row ids compared where the table has them. Never a wrong
row, never a table delta-spark then refuses."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import ProtocolViolationError
from txnlog.log.filenames import LOG_DIR

from .agree import (
    assert_detail_agrees,
    assert_feed_agrees,
    assert_history_agrees,
    assert_row_ids_agree,
    assert_rows_agree,
    quoted,
    spark_rows,
    txnlog_rows,
)

pytestmark = pytest.mark.spark


@dataclass(frozen=True)
class Feature:
    """A delta-spark table using one feature: DDL after ``CREATE TABLE t``, then statements."""

    ddl: str
    statements: tuple[str, ...]
    change_feed: bool = False
    row_tracking: bool = False
    session: dict[str, str] = field(default_factory=dict)  # delta-spark confs while it makes the table


FEATURES = {
    # Identity, generated and default columns: tests/spark/test_supplied_columns_delta.py has
    # txnlog continue delta-spark's tables of them (ids unique across both writers).
    "liquid-clustering": Feature(
        "(id BIGINT, v STRING) USING delta CLUSTER BY (id)",
        ("INSERT INTO {t} VALUES (1, 'a'), (2, 'b')", "INSERT INTO {t} VALUES (3, 'c')", "OPTIMIZE {t}"),
    ),
    "type-widening": Feature(
        "(id BIGINT, v STRING, n INT) USING delta TBLPROPERTIES ('delta.enableTypeWidening' = 'true')",
        ("INSERT INTO {t} VALUES (1, 'a', 1)", "ALTER TABLE {t} ALTER COLUMN n TYPE BIGINT", "INSERT INTO {t} VALUES (2, 'b', 10000000000)"),
    ),
    "variant": Feature(
        "(id BIGINT, v VARIANT) USING delta",
        ("INSERT INTO {t} SELECT 1, parse_json('{{\"a\": 1}}')", "INSERT INTO {t} SELECT 2, parse_json('[1, \"x\", null]')"),
    ),
    "deletion-vectors-change-feed-row-tracking": Feature(
        "(id BIGINT, part STRING, v DOUBLE) USING delta PARTITIONED BY (part) TBLPROPERTIES ("
        "'delta.enableDeletionVectors' = 'true', 'delta.enableChangeDataFeed' = 'true', 'delta.enableRowTracking' = 'true', "
        "'delta.checkpointInterval' = '3')",
        (
            "INSERT INTO {t} VALUES (1, 'a', 1.0), (2, 'a', 2.0), (3, 'b', 3.0), (4, 'b', 4.0)",
            "INSERT INTO {t} VALUES (5, 'a', 5.0), (6, 'b', 6.0)",
            "DELETE FROM {t} WHERE id = 2",
            "UPDATE {t} SET v = v * 10 WHERE id = 3",
            "MERGE INTO {t} t USING (SELECT 5L AS id, 'a' AS part, 0.5 AS v UNION ALL SELECT 9L, 'c', 9.0) s ON t.id = s.id "
            "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *",
        ),
        change_feed=True,
        row_tracking=True,
    ),
    "v2-checkpoints-in-commit-timestamps": Feature(
        "(id BIGINT, v STRING) USING delta TBLPROPERTIES ('delta.checkpointPolicy' = 'v2', 'delta.checkpointInterval' = '2', "
        "'delta.enableInCommitTimestamps' = 'true', 'delta.enableChangeDataFeed' = 'true')",
        ("INSERT INTO {t} VALUES (1, 'a'), (2, 'b')", "INSERT INTO {t} VALUES (3, 'c')", "UPDATE {t} SET v = 'z' WHERE id = 1"),
        change_feed=True,
    ),
    "multi-part-checkpoint-compaction-checksums": Feature(
        "(id BIGINT, v STRING) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '3', 'delta.enableChangeDataFeed' = 'true')",
        ("INSERT INTO {t} VALUES (1, 'a'), (2, 'b')", "INSERT INTO {t} VALUES (3, 'c')", "DELETE FROM {t} WHERE id = 1",
         "INSERT INTO {t} VALUES (4, 'd')"),
        change_feed=True,
        session={"spark.databricks.delta.checkpoint.partSize": "1"},  # one action per part
    ),
    "column-mapping-renames-drops": Feature(
        "(id BIGINT, a STRING, b STRING, c INT) USING delta TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
        ("INSERT INTO {t} VALUES (1, 'x', 'y', 1)", "ALTER TABLE {t} RENAME COLUMN a TO a2", "ALTER TABLE {t} DROP COLUMN b",
         "ALTER TABLE {t} ADD COLUMN b STRING", "INSERT INTO {t} VALUES (2, 'z', 2, 'w')", "ALTER TABLE {t} RENAME COLUMN c TO a"),
    ),
    "check-constraints": Feature(
        "(id BIGINT, v INT) USING delta",
        ("ALTER TABLE {t} ADD CONSTRAINT positive CHECK (v > 0)", "INSERT INTO {t} VALUES (1, 5), (2, 6)"),
    ),
}


def make(spark: Any, path: Path, feature: Feature, spark_conf: Any) -> None:
    with spark_conf(feature.session):
        spark.sql(f"CREATE TABLE {quoted(path)} {feature.ddl}").collect()
        for statement in feature.statements:
            spark.sql(statement.format(t=quoted(path))).collect()


def write_compaction_file(spark: Any, path: Path, low: int, high: int) -> Path:
    """A log compaction file of commits ``low..high``, made by delta-spark's own log replay (as
    its DeltaLogMinorCompactionSuite makes them: delta-spark 4.4 reads these files but writes
    none by itself)."""
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    log = delta.DeltaLog.forTable(spark._jsparkSession, str(path))
    none = jvm.scala.Option.apply(None)
    replay = delta.actions.InMemoryLogReplay(none, none)
    changes = log.getChanges(low, none, False)
    while changes.hasNext():
        commit = changes.next()
        if commit._1() > high:
            break
        replay.append(commit._1(), commit._2().iterator())
    actions = replay.checkpoint()
    lines = []
    while actions.hasNext():
        lines.append(actions.next().json())
    target = path / LOG_DIR / f"{low:020d}.{high:020d}.compacted.json"
    target.write_text("\n".join(lines) + "\n")
    return target


def new_rows(table: Table, ids: list[int]) -> pa.Table:
    """Rows shaped as the table's: copies of its first rows under new ids."""
    rows = table.snapshot().to_arrow().slice(0, len(ids))
    assert rows.num_rows == len(ids)
    return rows.set_column(rows.schema.get_field_index("id"), rows.schema.field("id"), pa.array(ids, rows.schema.field("id").type))


def continue_with_txnlog(spark: Any, path: Path) -> None:
    """Append, DELETE, UPDATE and MERGE by txnlog (each version is compared with delta-spark's
    after); then a delta-spark INSERT after them."""
    table = Table(path)
    new = new_rows(table, [900, 901])
    assert table.append(new) is not None
    assert table.delete("id = 900") is not None
    assert table.update("id = 901", set={"id": "id + 1"}) is not None
    assert table.merge(new_rows(table, [902, 903]), on="id", when_matched_update="*", when_not_matched_insert="*") is not None
    spark.sql(f"INSERT INTO {quoted(path)} SELECT * FROM {quoted(path)} WHERE id = 903").collect()


#: The features tested by default (the richest tables, and those txnlog had to be fixed for); the
#: rest, checkpoint layouts and in-commit timestamps among them, under soak.
DEFAULT_FEATURES = {"deletion-vectors-change-feed-row-tracking", "column-mapping-renames-drops"}


@pytest.mark.parametrize("name", [n if n in DEFAULT_FEATURES else pytest.param(n, marks=pytest.mark.soak) for n in FEATURES])
def test_txnlog_reads_and_continues_delta_spark_tables(delta_spark: Any, spark_conf: Any, tmp_path: Path, name: str) -> None:
    feature = FEATURES[name]
    path = tmp_path / name
    make(delta_spark, path, feature, spark_conf)
    if name == "multi-part-checkpoint-compaction-checksums":
        log = sorted(os.listdir(path / LOG_DIR))
        assert any(".checkpoint.0000000001.00000000" in f for f in log) and any(f.endswith(".crc") for f in log)
        write_compaction_file(delta_spark, path, 1, 3)
    continue_with_txnlog(delta_spark, path)
    assert_rows_agree(delta_spark, path)  # delta-spark's versions, txnlog's and the last INSERT
    if feature.change_feed:
        assert_feed_agrees(delta_spark, path)
    if feature.row_tracking:
        assert_row_ids_agree(delta_spark, path)
    assert_history_agrees(delta_spark, path)
    assert_detail_agrees(delta_spark, path)


def test_clustering_survives_txnlog_writes(delta_spark: Any, spark_conf: Any, tmp_path: Path) -> None:
    """txnlog keeps the clustering domain and writes stats for the clustering column (the
    protocol's demands on a clustered table's writers); delta-spark's OPTIMIZE then clusters
    txnlog's files and both read the same rows."""
    path = tmp_path / "t"
    make(delta_spark, path, FEATURES["liquid-clustering"], spark_conf)
    table = Table(path)
    domain = table.snapshot().domain_metadata("delta.clustering")
    assert domain is not None and "clusteringColumns" in domain
    before = set(table.snapshot().files().column("path").to_pylist())
    table.append(new_rows(table, [50, 60]))
    assert table.snapshot().domain_metadata("delta.clustering") == domain
    (added,) = [f for f in table.snapshot().files().to_pylist() if f["path"] not in before]
    assert json.loads(added["stats"])["minValues"]["id"] == 50
    delta_spark.sql(f"OPTIMIZE {quoted(path)}").collect()
    assert txnlog_rows(table) == spark_rows(delta_spark, path)
    (detail,) = delta_spark.sql(f"DESCRIBE DETAIL {quoted(path)}").collect()
    assert detail.clusteringColumns == ["id"]


def test_check_constraints_bind_txnlog(delta_spark: Any, spark_conf: Any, tmp_path: Path) -> None:
    path = tmp_path / "t"
    make(delta_spark, path, FEATURES["check-constraints"], spark_conf)
    table = Table(path)
    bad = new_rows(table, [7]).set_column(1, "v", pa.array([-1], pa.int32()))
    with pytest.raises(ProtocolViolationError, match="positive"):
        table.append(bad)
    with pytest.raises(ProtocolViolationError, match="positive"):
        table.update("id = 1", set={"v": "0"})
    assert spark_rows(delta_spark, path) == txnlog_rows(table)


def test_delta_spark_cannot_write_collations(delta_spark: Any, tmp_path: Path) -> None:
    """delta-spark 4.4 refuses a collated column, so there is no table to continue; when a
    release writes them, this fails and the feature joins FEATURES."""
    with pytest.raises(Exception, match="DELTA_UNSUPPORTED_DATA_TYPES"):
        delta_spark.sql(f"CREATE TABLE {quoted(tmp_path / 't')} (id BIGINT, s STRING COLLATE UTF8_LCASE) USING delta").collect()
