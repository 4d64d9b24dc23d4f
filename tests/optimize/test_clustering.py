"""OPTIMIZE along a space-filling curve: ``z_order_by`` on an unclustered table, incremental
liquid clustering on a clustered one. What matters is data skipping: after it, a point filter on
any one of the columns reads few files (counted by txnlog's own scan planning,
``Snapshot.files(predicate)``), where before it read every file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest

from tests.dml.conftest import duckdb_rows, sorted_rows
from tests.optimize.hooked import HookedStore
from txnlog import Table
from txnlog import properties as props
from txnlog.errors import ConcurrentDeleteReadError, InvalidArgumentError
from txnlog.optimize import CLUSTERING_PROVIDER, ZCUBE_ID, ZCUBE_ZORDER_BY, OptimizeParameters, stage_optimize
from txnlog.optimize.curve import hilbert_key, interleave

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("s", pa.string())])
APPENDS = 16
ROWS = 2000


def _batch(rng: np.random.Generator, rows: int = ROWS) -> pa.Table:
    a = rng.integers(0, 10_000, rows)
    b = rng.integers(0, 10_000, rows)
    return pa.table({"a": a, "b": b, "s": [f"s{x}" for x in a]}, schema=SCHEMA)


def _filled(table: Table, appends: int = APPENDS, seed: int = 7) -> Table:
    """``appends`` files, each with values spread over the whole range of ``a`` and ``b``: no
    filter on either can skip any of them."""
    rng = np.random.default_rng(seed)
    for _ in range(appends):
        table.append(_batch(rng))
    return table


def _rows(table: Table) -> list[tuple]:
    return sorted_rows([(r["a"], r["b"], r["s"]) for r in table.snapshot().to_arrow().to_pylist()])


def _share_read(table: Table, column: str, probes: int = 20) -> float:
    """The mean share of the table's files a point filter ``column = x`` reads, over values
    ``x`` the table holds."""
    snapshot = table.snapshot()
    values = snapshot.to_arrow(columns=[column]).column(column).to_pylist()
    picks = np.random.default_rng(1).choice(values, probes, replace=False)
    return float(np.mean([snapshot.files(f"{column} = {int(x)}").num_rows / snapshot.num_files for x in picks]))


def _target(table: Table, files: int) -> int:
    return int(sum(table.snapshot().files().column("size").to_pylist()) / files)


def _stats(add: dict) -> dict:
    return orjson.loads(add["stats"])


# -- the curves ------------------------------------------------------------------------------


@pytest.mark.parametrize("dims, bits", [(2, 3), (3, 2), (4, 2)])
def test_a_hilbert_key_walks_every_cell_once_from_neighbour_to_neighbour(dims: int, bits: int) -> None:
    grid = np.array(np.meshgrid(*[np.arange(1 << bits, dtype=np.uint64)] * dims)).reshape(dims, -1)
    key = hilbert_key(list(grid), bits)
    assert sorted(key.tolist()) == list(range(1 << (dims * bits)))  # a bijection onto the key range
    path = grid[:, np.argsort(key)].astype(np.int64)
    assert set(np.abs(np.diff(path, axis=1)).sum(axis=0).tolist()) == {1}  # each step moves to an adjacent cell
    z = interleave(list(grid), bits)
    assert sorted(z.tolist()) == list(range(1 << (dims * bits)))
    assert np.abs(np.diff(grid[:, np.argsort(z)].astype(np.int64), axis=1)).sum(axis=0).max() > 1  # Z-order jumps


# -- Z-order -----------------------------------------------------------------------------------


def test_z_order_by_makes_a_point_filter_on_either_column_read_few_files(tmp_path: Path) -> None:
    table = _filled(Table.create(str(tmp_path / "t"), SCHEMA))
    before = _rows(table)
    assert _share_read(table, "a") >= 0.9 and _share_read(table, "b") >= 0.9
    version = table.optimize(z_order_by=["a", "b"], target_size=_target(table, 32))
    assert version is not None
    snapshot = table.snapshot()
    assert snapshot.num_files >= 16
    share_a, share_b = _share_read(table, "a"), _share_read(table, "b")
    assert share_a <= 0.35 and share_b <= 0.35, (share_a, share_b)
    assert _rows(table) == before == sorted_rows(duckdb_rows(table.uri, ["a", "b", "s"]))
    info = table.history(1)[0].commit_info
    assert info.operation == "OPTIMIZE"
    assert info.operation_parameters["zOrderBy"] == '["a","b"]' and info.operation_parameters["clusterBy"] == "[]"
    assert info.operation_metrics["numRemovedFiles"] == str(APPENDS)
    adds = [a for a in snapshot.files().to_pylist()]
    assert not any(a["data_change"] for a in adds)
    assert all(a["clustering_provider"] is None for a in adds)  # a Z-order is no clustering (delta-spark tags nothing)


def test_z_order_rewrites_every_file_of_each_selected_partition_even_one(tmp_path: Path) -> None:
    """delta-spark's rule: a Z-order takes whole partitions (a single file too, since its rows
    are reordered), and only those the predicate selects."""
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("p", pa.string())])
    table = Table.create(str(tmp_path / "t"), schema, partition_by=["p"])
    table.append(pa.table({"a": [3, 1, 2], "b": [1, 2, 3], "p": ["x", "x", "x"]}, schema=schema))
    table.append(pa.table({"a": [9, 8], "b": [1, 2], "p": ["y", "y"]}, schema=schema))
    table.append(pa.table({"a": [7], "b": [0], "p": ["y"]}, schema=schema))
    x_file = table.snapshot().files("p = 'x'").column("path")[0].as_py()
    table.optimize("p = 'y'", z_order_by=["a"])
    files = table.snapshot().files()
    assert x_file in files.column("path").to_pylist()
    assert table.snapshot().files("p = 'y'").num_rows == 1
    table.optimize("p = 'x'", z_order_by=["a"])
    x = table.snapshot().files("p = 'x'")
    assert x.column("path")[0].as_py() != x_file
    assert table.snapshot().to_arrow(predicate="p = 'x'").column("a").to_pylist() == [1, 2, 3]  # in curve order


@pytest.mark.parametrize("z_order_by, message", [
    (["p"], "partition column"),
    (["nope"], "not a column"),
    (["c"], "no statistics"),
])
def test_z_order_by_refuses_a_column_it_cannot_skip_on(tmp_path: Path, z_order_by: list[str], message: str) -> None:
    schema = pa.schema([("a", pa.int64()), ("p", pa.string()), ("c", pa.int64())])
    table = Table.create(str(tmp_path / "t"), schema, partition_by=["p"], properties={"delta.dataSkippingNumIndexedCols": "1"})
    table.append(pa.table({"a": [1], "p": ["x"], "c": [1]}, schema=schema))
    table.append(pa.table({"a": [2], "p": ["x"], "c": [2]}, schema=schema))
    with pytest.raises(InvalidArgumentError, match=message):
        table.optimize(z_order_by=z_order_by)
    assert table.latest_version() == 2


def test_z_order_records_the_files_it_read_and_replans_over_a_concurrent_delete(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = _filled(Table.create(uri, SCHEMA), appends=4)
    txn = table.transaction("OPTIMIZE")
    assert stage_optimize(txn, OptimizeParameters(z_order_by=("a", "b"))).changed
    a_value = table.snapshot().to_arrow().column("a")[0].as_py()
    Table(uri).delete(f"a = {a_value}")  # copy-on-write: rewrites a file the OPTIMIZE read
    with pytest.raises(ConcurrentDeleteReadError):
        txn.commit()
    expected = _rows(Table(uri))
    hooked = Table(uri, store=HookedStore(uri, lambda: Table(uri).delete("b < 100")))
    assert hooked.optimize(z_order_by=["a", "b"]) is not None  # lost to the DELETE, re-planned, committed
    assert [h.commit_info.operation for h in Table(uri).history(2)] == ["OPTIMIZE", "DELETE"]
    assert _rows(Table(uri)) == [r for r in expected if r[1] >= 100] == sorted_rows(duckdb_rows(uri, ["a", "b", "s"]))


def test_a_z_order_carries_a_concurrent_deletion_vector_onto_its_reordered_output(tmp_path: Path) -> None:
    """With row tracking, a DELETE that lands while a Z-order rewrites its rows is carried onto
    the new files by row id, wherever the curve put the rows."""
    properties = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
    table = _filled(Table.create(str(tmp_path / "t"), SCHEMA, properties=properties), appends=3)
    before = _rows(table)
    ids = sorted((r["a"], r["b"], r["row_id"]) for r in table.snapshot().to_arrow(with_row_ids=True).to_pylist())
    optimize = table.transaction("OPTIMIZE")
    stage_optimize(optimize, OptimizeParameters(z_order_by=("b", "a")))
    gone = sorted({a for a, _, _ in ids})[:3]
    deleted = table.delete(f"a in ({', '.join(map(str, gone))})")
    result = optimize.commit()
    assert [(s.version, s.kind) for s in result.rebased] == [(deleted.version, "deletion vector")]
    assert _rows(table) == [r for r in before if r[0] not in gone] == sorted_rows(duckdb_rows(table.uri, ["a", "b", "s"]))
    after = sorted((r["a"], r["b"], r["row_id"]) for r in table.snapshot().to_arrow(with_row_ids=True).to_pylist())
    assert after == [row for row in ids if row[0] not in gone]  # every row kept its id


# -- liquid clustering ---------------------------------------------------------------------------


def test_optimize_clusters_a_clustered_table_and_marks_its_files(tmp_path: Path) -> None:
    table = _filled(Table.create(str(tmp_path / "t"), SCHEMA, cluster_by=["a", "b"]))
    before = _rows(table)
    assert _share_read(table, "a") >= 0.9
    assert table.optimize(target_size=_target(table, 32)) is not None
    share_a, share_b = _share_read(table, "a"), _share_read(table, "b")
    assert share_a <= 0.35 and share_b <= 0.35, (share_a, share_b)
    assert _rows(table) == before == sorted_rows(duckdb_rows(table.uri, ["a", "b", "s"]))
    adds = table.snapshot().files().to_pylist(maps_as_pydicts="strict")
    assert {a["clustering_provider"] for a in adds} == {CLUSTERING_PROVIDER}
    assert len({a["tags"][ZCUBE_ID] for a in adds}) == 1  # one cube
    assert {a["tags"][ZCUBE_ZORDER_BY] for a in adds} == {'["a","b"]'}
    for add in adds:  # PROTOCOL.md: statistics for every clustering column in every add
        stats = _stats(add)
        assert {"a", "b"} <= set(stats["minValues"]) and {"a", "b"} <= set(stats["maxValues"])
    params = table.history(1)[0].commit_info.operation_parameters
    assert (params["clusterBy"], params["zOrderBy"], params["isFull"]) == ('["a","b"]', "[]", "false")
    assert table.optimize() is None  # one cube alone: nothing to do


def test_clustering_is_incremental_leaving_a_full_cube_alone(tmp_path: Path) -> None:
    table = _filled(Table.create(str(tmp_path / "t"), SCHEMA, cluster_by=["a", "b"]))
    table.optimize(target_size=_target(table, 8))
    cube = set(table.snapshot().files().column("path").to_pylist())
    _filled(table, appends=2, seed=8)
    before = _rows(table)
    table.alter.set_table_properties({props.OPTIMIZE_CLUSTERING_MIN_CUBE_SIZE.key: "1"})  # every cube is full
    assert table.optimize() is not None
    assert table.history(1)[0].commit_info.operation_metrics["numRemovedFiles"] == "2"  # the new appends only
    files = table.snapshot().files().to_pylist(maps_as_pydicts="strict")
    assert cube <= {f["path"] for f in files}
    assert len({f["tags"][ZCUBE_ID] for f in files}) == 2
    assert _rows(table) == before
    # Under the default (100 GiB) minimum both cubes are small: the next OPTIMIZE merges them into one.
    table.alter.unset_table_properties([props.OPTIMIZE_CLUSTERING_MIN_CUBE_SIZE.key])
    assert table.optimize() is not None
    assert len({f["tags"][ZCUBE_ID] for f in table.snapshot().files().to_pylist(maps_as_pydicts="strict")}) == 1


def test_a_clustered_table_refuses_z_order_by(tmp_path: Path) -> None:
    table = _filled(Table.create(str(tmp_path / "t"), SCHEMA, cluster_by=["a"]), appends=2)
    with pytest.raises(InvalidArgumentError, match="clustered by"):
        table.optimize(z_order_by=["b"])
    assert table.latest_version() == 2


def test_clustering_follows_a_renamed_clustering_column(tmp_path: Path) -> None:
    table = _filled(Table.create(str(tmp_path / "t"), SCHEMA, cluster_by=["a"]), appends=4)
    table.alter.rename_column("a", "alpha")
    assert table.optimize(target_size=_target(table, 8)) is not None
    adds = table.snapshot().files().to_pylist(maps_as_pydicts="strict")
    assert {a["tags"][ZCUBE_ZORDER_BY] for a in adds} == {'["alpha"]'}
    values = [r["alpha"] for r in table.snapshot().to_arrow().to_pylist()]
    assert values == sorted(values)  # one column: plain order
