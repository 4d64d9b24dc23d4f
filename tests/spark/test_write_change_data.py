"""txnlog.spark.write and format("txnlog") on a table that records change data: the change feed
of every write mode equals a model of its row changes (and what deltalake's change reader
reads). Before the core write planner, an overwrite of such a table was refused (a commit of
whole-file removes and adds needs no cdc file), and a replaceWhere that rewrote rows recorded
cdc files with its deletes only, so its inserts never reached the feed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import txnlog
import txnlog.spark as ts
from tests import write_modes_model as model

pytestmark = pytest.mark.spark

CDF = {"delta.enableChangeDataFeed": "true"}
DV = {"delta.enableDeletionVectors": "true"}
LAYOUTS = {"partitioned": ({}, ["p"]), "unpartitioned": ({}, None), "unpartitioned-dv": (DV, None)}


@pytest.fixture
def spark_ds(spark: Any) -> Any:
    ts.register(spark)
    return spark


def _frame(spark: Any, rows: list[model.Row]) -> Any:
    return spark.createDataFrame(model.rows_table(rows).to_pandas() if rows else [], "id long, p string, v long")


def _check(uri: str, expected: dict[int, Any], dv: bool, spark: Any) -> None:
    table = txnlog.Table(uri)
    assert model.all_changes(table.changes(0)) == model.expected_all(expected)
    columns = ["id", "p", "v", "_change_type", "_commit_version"]
    through_spark = ts.read_changes(spark, uri, 0).toArrow().select(columns)
    assert model.all_changes(through_spark) == model.expected_all(expected)
    if not dv:
        theirs = pa.table(DeltaTable(uri).load_cdf(starting_version=0).read_all())
        assert model.all_changes(theirs.select(columns)) == model.expected_all(expected)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_change_feed_of_every_write_mode_of_spark_write_equals_the_model(spark: Any, tmp_path: Path, layout: str) -> None:
    properties, partition_by = LAYOUTS[layout]
    uri = str(tmp_path / "t")

    def write(rows: list[model.Row], mode: str, replace_where: str | None) -> Any:
        return ts.write(_frame(spark, rows), uri, mode=mode, replace_where=replace_where, partition_by=partition_by,
                        properties={**CDF, **properties})

    _check(uri, model.run(uri, write), "dv" in layout, spark)


@pytest.mark.parametrize("layout", ["partitioned", "unpartitioned-dv"])
def test_the_change_feed_of_every_write_mode_of_the_format_equals_the_model(spark_ds: Any, tmp_path: Path, layout: str) -> None:
    properties, partition_by = LAYOUTS[layout]
    uri = str(tmp_path / "t")

    def write(rows: list[model.Row], mode: str, replace_where: str | None) -> Any:
        before = txnlog.Table(uri).latest_version() if txnlog.Table(uri).exists() else -1
        writer = _frame(spark_ds, rows).write.format("txnlog").mode(mode)
        for key, value in {**CDF, **properties}.items():
            writer = writer.option(key, value)
        if partition_by:
            writer = writer.option("partitionBy", ",".join(partition_by))
        if replace_where is not None:
            writer = writer.option("replaceWhere", replace_where)
        writer.save(uri)
        after = txnlog.Table(uri).latest_version()
        return after if after != before else None

    _check(uri, model.run(uri, write), "dv" in layout, spark_ds)


def test_the_issue_s_replace_where_keeps_its_inserts_in_the_feed(spark_ds: Any, tmp_path: Path) -> None:
    """The case the issue names: ids 1 (x), 2 (y), 3 (x); replaceWhere p = 'x' writes 10 (x)."""
    uri = str(tmp_path / "t")
    spark_ds.createDataFrame([(1, "x"), (2, "y"), (3, "x")], "id long, p string").write.format("txnlog").mode("append") \
        .option("delta.enableChangeDataFeed", "true").save(uri)
    spark_ds.createDataFrame([(10, "x")], "id long, p string").write.format("txnlog").mode("overwrite") \
        .option("replaceWhere", "p = 'x'").save(uri)
    changes = txnlog.Table(uri).changes(1, 1).to_pylist()
    assert sorted((r["id"], r["_change_type"]) for r in changes) == [(1, "delete"), (3, "delete"), (10, "insert")]


def test_a_dynamic_partition_overwrite_replaces_only_the_partitions_the_dataframe_writes(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    ts.write(_frame(spark, [(1, "x", 1), (2, "y", 2), (3, "z", 3)]), uri, partition_by=["p"], properties=CDF)
    version = ts.write(_frame(spark, [(10, "x", 10), (11, "z", 11)]), uri, mode="overwrite", partition_overwrite_mode="dynamic")
    assert version == 1
    assert sorted(txnlog.Table(uri).snapshot().to_arrow().column("id").to_pylist()) == [2, 10, 11]
    changes = model.changes_of(txnlog.Table(uri).changes(1, 1))
    assert changes == model.changes_of(pa.Table.from_pylist([{"id": i, "p": p, "v": i, "_change_type": kind} for i, p, kind in
                                                              [(1, "x", "delete"), (3, "z", "delete"), (10, "x", "insert"), (11, "z", "insert")]]))
