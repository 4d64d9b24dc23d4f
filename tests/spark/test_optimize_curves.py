"""Z-order and liquid clustering with Spark: txnlog's Spark executor sorts along the same curve
as the Python one, delta-spark reads what either wrote and agrees on the rows, and an OPTIMIZE of
a table delta-spark clustered keeps its clustering columns (and delta-spark then finds nothing
left to cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.dml.conftest import sorted_rows
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


def _file_rows(table: Table) -> list[list[tuple]]:
    """Each live file's rows in file order."""
    snapshot = table.snapshot()
    out = []
    for path in snapshot.files().column("path").to_pylist():
        rows = pq.read_table(Path(table.uri.removeprefix("file://")) / path, columns=["a", "b", "s"]).to_pylist()
        out.append([(r["a"], r["b"], r["s"]) for r in rows])
    return out


# Z-order's key runs in the default suite through the partitioned test below.
@pytest.mark.parametrize("curve", ["hilbert", pytest.param("zorder", marks=pytest.mark.soak)])
def test_spark_sorts_along_the_curve_natively_and_each_file_is_a_run_of_pythons_order(delta_spark: Any, tmp_path: Path, curve: str) -> None:
    """A clustered table (Hilbert) and a Z-order: Spark's own writer writes the files (no row in
    Python), each file's rows are one consecutive run of the order txnlog's Python curve gives
    the same rows (the same range ids, the same key), and files are cut near the target size."""
    from txnlog.optimize import curve_sorted

    clustered = curve == "hilbert"
    twins = []
    for name in ("spark", "python"):
        table = _filled(Table.create(str(tmp_path / name), SCHEMA, cluster_by=["a", "b"] if clustered else None), appends=6)
        table.append(pa.table({"a": [None, 5, None], "b": [7, None, None], "s": ["n1", "n2", "n3"]}, schema=SCHEMA))  # nulls rank last
        twins.append(table)
    table, python = twins
    before = _rows(table)
    python_order = [(r["a"], r["b"], r["s"]) for r in curve_sorted(table.snapshot().to_arrow(), [("a",), ("b",)], curve).to_pylist()]
    kwargs: dict[str, Any] = {} if clustered else {"z_order_by": ["a", "b"]}
    target = _target(table, 8)
    assert python.optimize(target_size=target, **kwargs) is not None
    result = spark_optimize(delta_spark, table, target_file_size=target, **kwargs)
    assert result.version is not None and result.files_removed == 7
    files = table.snapshot().files()
    assert all(p.startswith("job-") for p in files.column("path").to_pylist()), "Spark's own writer wrote them"
    assert 6 <= files.num_rows <= 10
    delta_rows = sorted_rows([(r.a, r.b, r.s) for r in delta_spark.read.format("delta").load(table.uri).collect()])
    assert _rows(table) == before == delta_rows  # and delta-spark reads what Spark wrote
    first = {}
    for i, row in enumerate(python_order):
        first.setdefault(row, i)  # equal rows share a key and sit side by side
    runs = sorted(_file_rows(table), key=lambda rows: first[rows[0]])
    assert [row for rows in runs for row in rows] == python_order, "each file is one run of the curve's order"
    for column in ("a", "b"):  # as selective as the Python executor's files (every file was read before)
        assert _share_read(table, column) <= _share_read(python, column) + 0.1


def test_a_partitioned_column_mapped_z_order_keeps_each_partitions_order_and_the_row_ids(spark: Any, tmp_path: Path) -> None:
    """Partitions (a window and a sort per partition), physical names and row ids on the native
    path: each file one run of its partition's curve order, every row keeping its row id."""
    from txnlog.optimize import curve_sorted

    schema = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("s", pa.string()), ("p", pa.string())])
    table = Table.create(str(tmp_path / "t"), schema, partition_by=["p"],
                         properties={"delta.columnMapping.mode": "name", "delta.enableRowTracking": "true"})
    rng = np.random.default_rng(5)
    for _ in range(4):
        a, b = rng.integers(0, 1000, 900), rng.integers(0, 1000, 900)
        table.append(pa.table({"a": a, "b": b, "s": [f"s{x}" for x in a], "p": [f"p{x % 2}" for x in b]}, schema=schema))
    ids_before = {(r["a"], r["b"], r["s"], r["row_id"]) for r in table.snapshot().to_arrow(with_row_ids=True).to_pylist()}
    rows = table.snapshot().to_arrow()
    result = spark_optimize(spark, table, z_order_by=["a", "b"], target_file_size=_target(table, 6))
    assert result.version is not None
    snapshot = table.snapshot()
    assert all(p.startswith("job-") for p in snapshot.files().column("path").to_pylist())
    assert {(r["a"], r["b"], r["s"], r["row_id"]) for r in snapshot.to_arrow(with_row_ids=True).to_pylist()} == ids_before
    for part in ("p0", "p1"):
        order = [(r["a"], r["b"], r["s"]) for r in curve_sorted(rows.filter(pc.equal(rows["p"], part)), [("a",), ("b",)], "zorder").to_pylist()]
        first: dict[tuple, int] = {}
        for i, row in enumerate(order):
            first.setdefault(row, i)
        names = snapshot.table_configuration.physical_names
        assert names is not None and names["a"] != "a"
        files = [f for f in snapshot.files().to_pylist() if dict(f["partition_values"])[names["p"]] == part]
        runs = []
        for f in files:
            data = pq.read_table(Path(table.uri.removeprefix("file://")) / f["path"], columns=[names[c] for c in ("a", "b", "s")])
            runs.append([(r[names["a"]], r[names["b"]], r[names["s"]]) for r in data.to_pylist()])
        runs.sort(key=lambda rs: first[rs[0]])
        assert [r for rs in runs for r in rs] == order, part


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
