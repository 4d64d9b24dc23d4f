"""txnlog.spark.read: pruning, partition values from the log, path safety, deletion vectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txnlog
import txnlog.spark as ts
from txnlog.errors import UnsafePathError
from txnlog.spark.reader import ROW_INDEX_COLUMN

pytestmark = pytest.mark.spark


@pytest.mark.usefixtures("own_scan")  # the plan of txnlog's own scan
def test_predicate_prunes_files_before_spark_and_filters_rows(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    ts.write(spark.range(0, 40).selectExpr("id", "cast(id % 4 as string) as p"), uri, partition_by=["p"])
    ts.write(spark.range(1000, 1010).selectExpr("id", "'0' as p"), uri)
    df = ts.read(spark, uri, predicate="p = '0' and id >= 1000")
    assert len(df.inputFiles()) == 1  # the p=0 file of the second write only: stats and partitions
    assert sorted(r.id for r in df.collect()) == list(range(1000, 1010))


def test_partition_values_come_from_the_log_not_directory_names(spark: Any, log_writer: Any, tmp_table_uri: str) -> None:
    root = Path(tmp_table_uri)
    (root / "part=WRONG").mkdir(parents=True)
    pq.write_table(pa.table({"id": [1, 2]}), root / "part=WRONG" / "a.parquet")
    (root / "elsewhere").mkdir()
    pq.write_table(pa.table({"id": [3]}), root / "elsewhere" / "b.parquet")
    w = log_writer()
    w.create(partition_columns=("part",))
    w.commit(1, w.add("part=WRONG/a.parquet", partition_values={"part": "right"}),
             w.add("elsewhere/b.parquet", partition_values={"part": None}))
    rows = sorted((r.id, r.part) for r in ts.read(spark, tmp_table_uri).collect())
    assert rows == [(1, "right"), (2, "right"), (3, None)]


@pytest.mark.parametrize("path", ["../outside.parquet", "/etc/passwd", "file:///etc/hosts"])
def test_a_path_out_of_the_table_root_is_refused_naming_version_and_path(spark: Any, log_writer: Any, tmp_table_uri: str, path: str) -> None:
    w = log_writer()
    w.create()
    w.commit(1, w.add(path))
    with pytest.raises(UnsafePathError) as info:
        ts.read(spark, tmp_table_uri)
    assert info.value.path == path and info.value.version == 1
    assert path in str(info.value)


def test_an_empty_table_reads_as_no_rows_with_its_schema(spark: Any, log_writer: Any, tmp_table_uri: str) -> None:
    log_writer().create()
    df = ts.read(spark, tmp_table_uri)
    assert df.columns == ["id", "part"] and df.count() == 0


def test_a_table_another_engine_wrote_with_dots_spaces_and_backticks_in_names(spark: Any, tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    uri = str(tmp_path / "t")
    data = pa.table({"a.b": [1, 2, 3, 4], "c d": ["x", "y", "x", "y"], "e`f": [0.5, 1.5, 2.5, 3.5]})
    deltalake.write_deltalake(uri, data, partition_by=["c d"])
    df = ts.read(spark, uri)
    assert df.columns == ["a.b", "c d", "e`f"]
    assert sorted(tuple(r) for r in df.collect()) == sorted(zip(*data.to_pydict().values()))
    assert sorted(r[0] for r in ts.read(spark, uri, predicate="`c d` = 'y' AND `a.b` > 2").collect()) == [4]


@pytest.mark.usefixtures("own_scan")  # the plan of txnlog's own scan
def test_deletion_vectors_are_applied_by_each_row_position_without_a_join_on_deleted_rows(spark: Any, tmp_path: Path) -> None:
    """Dense, sparse (first and last row only, blocks apart) and no deletions: each file's
    deleted rows leave, the others keep their physical position, and the plan joins the rows
    once (to their file's broadcast row), never against the deleted positions."""
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, pa.schema([("id", pa.int64())]), properties={"delta.enableDeletionVectors": "true"})
    per_file = 10_000
    for f in range(3):
        table.append(pa.table({"id": pa.array(range(f * per_file, (f + 1) * per_file), pa.int64())}))
    table.delete(f"id < {per_file} and id % 7 = 3")
    table.delete(f"id = {per_file} or id = {2 * per_file - 1}")
    kept = [i for i in range(3 * per_file) if not (i < per_file and i % 7 == 3) and i not in (per_file, 2 * per_file - 1)]

    df = ts.read(spark, uri)
    assert sorted(r.id for r in df.collect()) == kept
    plan = df._jdf.queryExecution().executedPlan().toString().split("== Initial Plan ==")[0]  # the plan that ran
    assert plan.count("BroadcastHashJoin") == 1 and "LeftAnti" not in plan, plan
    # Rows meet their file's row on a long hashed from the path, not on the path's text.
    assert "BroadcastHashJoin [_txnlog_spark_path_hash" in plan and "xxhash64(_metadata" in plan, plan
    # Deletes over most of each file's blocks: one flat bitset per file, one lookup per row.
    assert "_txnlog_deleted_blocks" not in plan, plan
    snapshot = txnlog.Table(uri).snapshot()
    positions = ts.read_files(spark, snapshot, snapshot.files(), with_row_index=True)
    assert sorted((r.id, r[ROW_INDEX_COLUMN]) for r in positions.collect()) == [(i, i % per_file) for i in kept]
    assert ts.read(spark, uri, version=3).count() == 3 * per_file  # before the deletes


@pytest.mark.usefixtures("own_scan")  # the plan of txnlog's own scan
def test_sparse_deletes_travel_as_a_two_level_bitset_and_keep_every_other_row(spark: Any, tmp_path: Path) -> None:
    """Three deleted rows blocks apart in a file of 100,000: a flat bitset would take a bit per
    row up to the last deleted one, the two-level one a word array per block holding a delete."""
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, pa.schema([("id", pa.int64())]), properties={"delta.enableDeletionVectors": "true"})
    rows = 100_000
    table.append(pa.table({"id": pa.array(range(rows), pa.int64())}))
    table.append(pa.table({"id": pa.array(range(rows, rows + 10), pa.int64())}))
    gone = {0, 4095, 4096, 50_000, rows - 1, rows + 9}
    table.delete(f"id in ({', '.join(map(str, sorted(gone)))})")
    df = ts.read(spark, uri)
    assert sorted(r.id for r in df.collect()) == [i for i in range(rows + 10) if i not in gone]
    plan = df._jdf.queryExecution().executedPlan().toString().split("== Initial Plan ==")[0]
    assert "_txnlog_deleted_blocks" in plan, plan


@pytest.mark.usefixtures("own_scan")  # the plan of txnlog's own scan
def test_rows_of_files_without_a_deletion_vector_are_not_joined_to_their_file(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, pa.schema([("id", pa.int64())]), properties={"delta.enableDeletionVectors": "true"})
    for f in range(2):
        table.append(pa.table({"id": pa.array(range(f * 100, (f + 1) * 100), pa.int64())}))
    table.delete("id = 5")
    df = ts.read(spark, uri)
    assert sorted(r.id for r in df.collect()) == [i for i in range(200) if i != 5]
    plan = df._jdf.queryExecution().executedPlan().toString().split("== Initial Plan ==")[0]
    assert plan.count("FileScan parquet") == 2 and plan.count("BroadcastHashJoin") == 1, plan


@pytest.mark.usefixtures("own_scan")  # the plan of txnlog's own scan, which names the table in SQL text
def test_a_table_whose_path_holds_quotes_reads_with_its_vectors(spark: Any, tmp_path: Path) -> None:
    """The scan's plan is SQL text that names the table (in the error for a row of an unknown
    file): quotes in its path must neither break the plan nor change the text, and no text does
    (Hadoop itself cannot open a path holding a backslash, so those are checked as text only)."""
    from txnlog.spark.common import sql_string

    name = "it's a table \"q\" ü"
    uri = str(tmp_path / name)
    table = txnlog.Table.create(uri, pa.schema([("id", pa.int64()), ("p", pa.string())]), partition_by=["p"],
                                properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.table({"id": pa.array(range(100), pa.int64()), "p": ["a", "b"] * 50}))
    table.delete("id % 3 = 0")
    assert sorted((r.id, r.p) for r in ts.read(spark, uri).collect()) == [(i, "ab"[i % 2]) for i in range(100) if i % 3]
    for text in (uri, "", "\\'", "''", "\\\\u0041", "a\nb\\"):
        assert spark.range(1).selectExpr(f"{sql_string(text)} AS t").first().t == text
