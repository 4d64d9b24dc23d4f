"""Z-order and liquid clustering with Spark: txnlog's Spark executor sorts along the same curve
as the Python one, delta-spark reads what either wrote and agrees on the rows, and an OPTIMIZE of
a table delta-spark clustered keeps its clustering columns (and delta-spark then finds nothing
left to cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.optimize.test_clustering import SCHEMA, _filled, _rows, _share_read, _target
from txnlog import Table
from txnlog.optimize import CLUSTERING_PROVIDER, ZCUBE_ID
from txnlog.spark.optimize import optimize as spark_optimize

pytestmark = pytest.mark.spark


def _delta_rows(spark: Any, uri: str) -> list[tuple]:
    return sorted((r.a, r.b, r.s) for r in spark.read.format("delta").load(uri).collect())


def test_spark_z_order_skips_like_pythons_and_delta_spark_agrees(delta_spark: Any, tmp_path: Path) -> None:
    table = _filled(Table.create(str(tmp_path / "t"), SCHEMA), appends=8)
    before = _rows(table)
    result = spark_optimize(delta_spark, table, z_order_by=["a", "b"], target_file_size=_target(table, 32))
    assert result.version is not None and result.files_removed == 8
    assert _share_read(table, "a") <= 0.5 and _share_read(table, "b") <= 0.5  # every file was read before
    assert _rows(table) == before == _delta_rows(delta_spark, table.uri)
    history = delta_spark.sql(f"DESCRIBE HISTORY delta.`{table.uri}` LIMIT 1").collect()[0]
    assert history.operation == "OPTIMIZE" and json.loads(history.operationParameters["zOrderBy"]) == ["a", "b"]


def test_delta_spark_reads_a_table_txnlog_clustered_and_leaves_its_cube_alone(delta_spark: Any, tmp_path: Path) -> None:
    table = _filled(Table.create(str(tmp_path / "t"), SCHEMA, cluster_by=["a", "b"]), appends=8)
    assert table.optimize(target_size=_target(table, 16)) is not None
    assert _rows(table) == _delta_rows(delta_spark, table.uri)
    version = table.latest_version()
    delta_spark.sql(f"OPTIMIZE delta.`{table.uri}`")  # one cube of the same columns: delta-spark has nothing to do
    assert Table(table.uri).latest_version() == version
    detail = delta_spark.sql(f"DESCRIBE DETAIL delta.`{table.uri}`").collect()[0]
    assert list(detail.clusteringColumns) == ["a", "b"]


def test_txnlog_clusters_a_table_delta_spark_clustered_and_keeps_its_columns(delta_spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    delta_spark.sql(f"CREATE TABLE delta.`{uri}` (a BIGINT, b BIGINT, s STRING) USING delta CLUSTER BY (a, b)")
    rng = np.random.default_rng(3)
    for _ in range(6):
        a, b = rng.integers(0, 10_000, 500), rng.integers(0, 10_000, 500)
        rows = [(int(x), int(y), f"s{x}") for x, y in zip(a, b)]
        delta_spark.createDataFrame(rows, "a BIGINT, b BIGINT, s STRING").write.format("delta").mode("append").save(uri)
    table = Table(uri)
    domain = table.snapshot().domain_metadata("delta.clustering")
    before = _rows(table)
    assert table.optimize(target_size=_target(table, 8)) is not None
    snapshot = table.snapshot()
    assert snapshot.domain_metadata("delta.clustering") == domain
    adds = snapshot.files().to_pylist(maps_as_pydicts="strict")
    assert {a["clustering_provider"] for a in adds} == {CLUSTERING_PROVIDER} and len({a["tags"][ZCUBE_ID] for a in adds}) == 1
    assert _rows(table) == before == _delta_rows(delta_spark, uri)
    detail = delta_spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").collect()[0]
    assert list(detail.clusteringColumns) == ["a", "b"]
    delta_spark.createDataFrame([(1, 2, "new")], "a BIGINT, b BIGINT, s STRING").write.format("delta").mode("append").save(uri)
    assert (1, 2, "new") in _rows(Table(uri))
