"""Deletion vectors exported as Iceberg v2 position delete files: pyiceberg reads the rows
Snapshot.to_arrow and DuckDB's delta_scan read, through deletes, vector unions, purges and
vectors dropped without a rewrite, commit by commit through the hook and in rebuilds."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntry

import txnlog
from txnlog.iceberg import export, export_snapshot

from .helpers import delete_rows_where, duckdb_rows, iceberg_rows, iceberg_table, local_path, same_rows, snapshots_by_delta_version

pytest.importorskip("pyroaring")

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.float64())])
DV_EXPORTED = {"delta.enableDeletionVectors": "true", "txnlog.iceberg.export.enabled": "true"}


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "part": ["a" if i % 2 else "b" for i in ids], "value": [i / 4 for i in ids]}, schema=SCHEMA)


def _create(path: Path, partition_by: list[str]) -> txnlog.Table:
    table = txnlog.Table.create(str(path), SCHEMA, partition_by=partition_by, properties=DV_EXPORTED)
    for start in (0, 100):
        result = table.append(_rows(start, 100))
        assert result is not None and not result.hook_failures
    return table


def _ids_where(predicate: Any) -> Any:
    return lambda rows: pa.array([predicate(v) for v in rows["id"].to_pylist()], pa.bool_())


def _assert_same_rows(uri: str, *, duckdb: bool = True) -> None:
    """pyiceberg (and DuckDB) read exactly the rows txnlog reads at the latest version."""
    expected = txnlog.Table(uri).snapshot().to_arrow()
    columns = expected.column_names
    got = iceberg_rows(uri)
    assert same_rows(got, expected, columns), f"pyiceberg read {got.num_rows} rows, txnlog {expected.num_rows}"
    if duckdb:
        assert same_rows(duckdb_rows(uri).select(columns), expected, columns)


def _assert_every_version(uri: str, since: int = 0) -> None:
    table = txnlog.Table(uri)
    for version, snapshot_id in snapshots_by_delta_version(uri).items():
        if version < since:
            continue
        expected = table.snapshot(version).to_arrow()
        got = iceberg_rows(uri, snapshot_id)
        assert same_rows(got, expected, expected.column_names), f"Delta version {version}"


def _vectors(table: txnlog.Table) -> dict[str, list[int]]:
    """Data file URI -> the positions its deletion vector deletes, at the latest version."""
    snap = table.snapshot()
    files = snap.files()
    out = {}
    for path, positions in zip(files["path"].to_pylist(), snap.read_context().deleted_rows(files)):
        if positions is not None:
            out[table.data_file_uri(path)] = positions.to_pylist()
    return out


def _applied_deletes(uri: str) -> dict[str, list[int]]:
    """Data file URI (as the data manifest names it) -> the positions of the delete files
    pyiceberg's scan planning attaches to it, in file order."""
    out = {}
    for task in iceberg_table(uri).scan().plan_files():
        if not task.delete_files:
            continue
        assert len(task.delete_files) == 1, f"{task.file.file_path}: one delete file per data file, got {len(task.delete_files)}"
        (delete,) = task.delete_files
        rows = pq.read_table(local_path(delete.file_path))
        assert set(rows["file_path"].to_pylist()) == {task.file.file_path}
        out[task.file.file_path] = rows["pos"].to_pylist()
    return out


def _live_entries(uri: str, content: ManifestContent) -> list[ManifestEntry]:
    table = iceberg_table(uri)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    manifests = [m for m in snapshot.manifests(table.io) if m.content == content]
    return [e for m in manifests for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]


def _assert_delete_files_are_iceberg_position_deletes(uri: str, table: txnlog.Table) -> None:
    """The current snapshot's deletes: in delete manifests, one position delete file per data
    file with a vector, holding exactly its positions, sorted, with Iceberg's reserved field
    ids, and a sequence number that makes it apply to its data file."""
    assert iceberg_table(uri).metadata.format_version == 2
    data_seq = {e.data_file.file_path: e.sequence_number for e in _live_entries(uri, ManifestContent.DATA)}
    assert all(seq is not None and seq >= 1 for seq in data_seq.values())  # v2 sequence numbers start at 1
    deletes = _live_entries(uri, ManifestContent.DELETES)
    vectors = _vectors(table)
    assert len(deletes) == len(vectors)
    for entry in deletes:
        delete = entry.data_file
        assert delete.content == DataFileContent.POSITION_DELETES
        schema = pq.read_schema(local_path(delete.file_path))
        assert schema.names == ["file_path", "pos"] and schema.field("pos").type == pa.int64()
        assert schema.field("file_path").metadata[b"PARQUET:field_id"] == b"2147483546"
        assert schema.field("pos").metadata[b"PARQUET:field_id"] == b"2147483545"
        rows = pq.read_table(local_path(delete.file_path))
        (data_uri,) = set(rows["file_path"].to_pylist())
        positions = rows["pos"].to_pylist()
        assert positions == sorted(positions) == vectors[data_uri]
        assert delete.record_count == len(positions)
        assert entry.sequence_number is not None and entry.sequence_number >= data_seq[data_uri]
    assert _applied_deletes(uri) == vectors


@pytest.mark.parametrize("partition_by", [[], ["part"]], ids=["unpartitioned", "partitioned"])
def test_deletes_and_their_union_are_position_deletes_pyiceberg_applies(tmp_path, partition_by):
    uri = str(tmp_path / "t")
    table = _create(tmp_path / "t", partition_by)
    first = delete_rows_where(table, _ids_where(lambda v: v % 5 == 0))
    assert not first.hook_failures
    assert _vectors(table)  # the delete went into vectors, not a rewrite
    _assert_same_rows(uri)
    _assert_delete_files_are_iceberg_position_deletes(uri, table)
    first_deletes = {e.data_file.file_path for e in _live_entries(uri, ManifestContent.DELETES)}

    second = delete_rows_where(table, _ids_where(lambda v: v % 3 == 0))  # unioned with the first vectors
    assert not second.hook_failures
    _assert_same_rows(uri)
    _assert_delete_files_are_iceberg_position_deletes(uri, table)
    # The first delete files were replaced, not kept beside the new ones.
    assert not first_deletes & {e.data_file.file_path for e in _live_entries(uri, ManifestContent.DELETES)}
    assert sorted(iceberg_rows(uri)["id"].to_pylist()) == [v for v in range(200) if v % 5 and v % 3]

    summary = iceberg_table(uri).current_snapshot().summary
    assert summary["added-position-delete-files"] == summary["removed-position-delete-files"] == str(len(_vectors(table)))
    # Every exported version, the first delete's included, still reads as txnlog reads it.
    assert sorted(snapshots_by_delta_version(uri)) == [1, 2, 3, 4]
    _assert_every_version(uri)


def test_purging_vectors_by_rewriting_the_files_drops_the_delete_files(tmp_path):
    uri = str(tmp_path / "t")
    table = _create(tmp_path / "t", ["part"])
    delete_rows_where(table, _ids_where(lambda v: v % 4 == 0))
    assert _applied_deletes(uri)
    # A purge (REORG ... APPLY (PURGE)): files with vectors rewritten with their live rows only.
    with table.transaction("REORG") as txn:
        files = txn.filter_files(None)
        with_vectors = files.filter(pc.is_valid(files["deletion_vector"]))
        live = table.snapshot().read_context().read(with_vectors)
        txn.remove_files(with_vectors, data_change=False)
        txn.write(live, data_change=False)
    assert txn.result is not None and not txn.result.hook_failures
    assert _vectors(table) == {}
    assert _applied_deletes(uri) == {} and _live_entries(uri, ManifestContent.DELETES) == []
    snapshot = iceberg_table(uri).current_snapshot()
    assert snapshot.summary.operation.value == "replace" and snapshot.summary["total-delete-files"] == "0"
    _assert_same_rows(uri)
    _assert_every_version(uri)


def test_a_vector_dropped_without_a_rewrite_brings_the_rows_back(tmp_path):
    """remove(file, vector) + add(file, no vector), as RESTORE to before a delete commits: the
    same data file stays, and its old delete file must no longer apply."""
    uri = str(tmp_path / "t")
    table = _create(tmp_path / "t", [])
    delete_rows_where(table, _ids_where(lambda v: v % 3 == 0))
    assert sorted(iceberg_rows(uri)["id"].to_pylist()) == [v for v in range(200) if v % 3]
    with table.transaction("RESTORE") as txn:
        files = txn.filter_files(None)
        with_vectors = files.filter(pc.is_valid(files["deletion_vector"]))
        txn.remove_files(with_vectors)
        txn.add_files(with_vectors.drop_columns(["deletion_vector"]))
    assert txn.result is not None and not txn.result.hook_failures
    assert _vectors(table) == {} and _applied_deletes(uri) == {}
    assert sorted(iceberg_rows(uri)["id"].to_pylist()) == list(range(200))
    _assert_same_rows(uri)
    _assert_every_version(uri)


def test_a_rebuild_writes_the_same_delete_files_and_reads_the_same_rows(tmp_path):
    uri = str(tmp_path / "t")
    table = _create(tmp_path / "t", ["part"])
    delete_rows_where(table, _ids_where(lambda v: v % 7 == 0))
    before = sorted(e.data_file.file_path for e in _live_entries(uri, ManifestContent.DELETES))
    result = export(uri, full=True)
    assert result.rebuilt
    # Named by data file and vector, so a rebuild writes no second copy of each.
    assert sorted(e.data_file.file_path for e in _live_entries(uri, ManifestContent.DELETES)) == before
    _assert_delete_files_are_iceberg_position_deletes(uri, table)
    _assert_same_rows(uri)


def test_many_vector_changes_through_the_hook_merge_delete_manifests_apart_from_data(tmp_path):
    """One delete file per data file, each in a delete manifest of its own commit: past 32
    manifests the small ones merge, delete manifests with delete manifests, and the deletes
    still apply; a second delete of a file swaps its delete file wherever it was merged to."""
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA, properties=DV_EXPORTED)
    files = 36
    for start in range(0, 3 * files, 3):
        table.append(_rows(start, 3))
    first_delete = table.latest_version() + 1
    for start in range(0, 3 * files, 3):  # the first row of every file
        assert not delete_rows_where(table, _ids_where(lambda v, start=start: v == start)).hook_failures
    for start in range(0, 30, 3):  # and the second row of some, unioned
        assert not delete_rows_where(table, _ids_where(lambda v, start=start: v == start + 1)).hook_failures
    ice = iceberg_table(uri)
    manifests = ice.current_snapshot().manifests(ice.io)
    assert len(manifests) <= 33
    delete_manifests = [m for m in manifests if m.content == ManifestContent.DELETES]
    assert 0 < len(delete_manifests) < files  # merged: fewer manifests than the commits that wrote them
    expected = [v for v in range(3 * files) if v % 3 == 2 or (v % 3 == 1 and v >= 30)]
    assert sorted(iceberg_rows(uri)["id"].to_pylist()) == expected
    _assert_delete_files_are_iceberg_position_deletes(uri, table)
    _assert_same_rows(uri)
    _assert_every_version(uri, since=first_delete)  # merges of older delete manifests happen along the way


def _has_vectors_in_history(table: Path) -> bool:
    return any('"deletionVector":{' in f.read_text() for f in (table / "_delta_log").glob("*.json"))


def conformance_cases(root: Path, _name: str) -> list[object]:
    tables = sorted(p.parent for p in (root / "tables").rglob("_delta_log") if _has_vectors_in_history(p.parent))
    return [pytest.param(t, id=str(t.relative_to(root / "tables"))) for t in tables]


def test_corpus_tables_with_delta_spark_vectors(conformance_dir, conformance_case, tmp_path):
    """delta-spark's deletion vectors (files of several vectors, unions, purges): exported from
    the first version commit by commit, every snapshot reads as txnlog reads that version, and
    the latest as DuckDB reads it; a rebuild reads the same."""
    uri = str(tmp_path / "t")
    shutil.copytree(conformance_case, uri)  # never write into the shared corpus
    table = txnlog.Table(uri)
    export_snapshot(table.snapshot(0))
    result = export(uri)
    assert not result.rebuilt or result.delta_version == 0
    _assert_every_version(uri)
    _assert_delete_files_are_iceberg_position_deletes(uri, table)
    _assert_same_rows(uri)
    assert export(uri, full=True).rebuilt
    _assert_same_rows(uri, duckdb=False)


def _iceberg_spark_jar() -> Path | None:
    """The Iceberg runtime on the shared SparkSession's classpath (pyspark's own jars)."""
    pyspark = pytest.importorskip("pyspark")
    jars = Path(next(iter(pyspark.__path__))) / "jars"
    return next(iter(sorted(jars.glob("iceberg-spark-runtime-*.jar"))), None)


def test_spark_with_iceberg_reads_the_rows_txnlog_reads(tmp_path, request):
    jar = _iceberg_spark_jar()
    if jar is None:
        pytest.skip("no Iceberg Spark runtime jar (iceberg-spark-runtime-*.jar) in pyspark/jars: not installed here, and it cannot be downloaded")
    spark = request.getfixturevalue("spark")
    uri = str(tmp_path / "t")
    table = _create(tmp_path / "t", ["part"])
    delete_rows_where(table, _ids_where(lambda v: v % 5 == 0))
    delete_rows_where(table, _ids_where(lambda v: v % 3 == 0))
    got = spark.read.format("iceberg").load(local_path(uri)).toArrow()
    expected = table.snapshot().to_arrow()
    assert same_rows(got, expected, expected.column_names)
