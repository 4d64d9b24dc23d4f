"""pyiceberg reads the exported metadata and sees the rows deltalake sees, at every version."""

from __future__ import annotations

import pyarrow as pa
import pytest

import txnlog
from txnlog.iceberg import export

from .helpers import canon, delta_rows, iceberg_rows, iceberg_table, keep_not, overwrite, rewrite, snapshots_by_delta_version

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.float64())])


def _batch(start: int, n: int, part: str | None = "a") -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "part": [part] * n, "value": [float(i) / 3 for i in range(start, start + n)]}, schema=SCHEMA)


def _check_every_version(uri: str, columns: list[str]) -> None:
    versions = snapshots_by_delta_version(uri)
    for version, snapshot_id in versions.items():
        assert canon(iceberg_rows(uri, snapshot_id), columns) == canon(delta_rows(uri, version), columns), f"Delta version {version}"


@pytest.mark.parametrize("partition_by", [[], ["part"]], ids=["unpartitioned", "partitioned"])
def test_each_operation_is_one_snapshot_with_the_delta_rows(tmp_path, partition_by):
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA, partition_by=partition_by)
    table.append(_batch(0, 5, "a"))
    first = export(uri)
    assert first.rebuilt and first.delta_version == 1 and len(first.snapshot_ids) == 1

    table.append(_batch(5, 5, "b"))  # v2 append
    table.append(_batch(10, 3, None))  # v3 append, NULL partition
    rewrite(table, "part = 'a'", keep_not("id", 2))  # v4 delete one row: overwrite
    rewrite(table, "part = 'b'", lambda t: pa.array([False] * t.num_rows))  # v5 delete files only: delete
    rewrite(table, None, None, data_change=False, operation="OPTIMIZE")  # v6 compaction: replace
    with table.transaction("ADD COLUMNS") as txn:  # v7 schema evolution, no files
        txn.update_metadata(schema=SCHEMA.append(pa.field("note", pa.string())))
    table.append(pa.table({"id": [100], "part": ["c"], "value": [1.5], "note": ["new"]}))  # v8
    overwrite(table, pa.table({"id": [200, 201], "part": ["a", "d"], "value": [2.0, 3.0], "note": [None, "x"]}))  # v9

    result = export(uri)
    assert not result.rebuilt and result.previous_delta_version == 1 and result.delta_version == 9
    ops = [s.summary.operation.value for s in iceberg_table(uri).metadata.snapshots]
    # v7 changed only the schema: no snapshot for it.
    assert ops == ["append", "append", "append", "overwrite", "delete", "replace", "append", "overwrite"]
    assert sorted(snapshots_by_delta_version(uri)) == [1, 2, 3, 4, 5, 6, 8, 9]
    _check_every_version(uri, ["id", "part", "value"])
    latest = iceberg_rows(uri)
    assert "note" in latest.column_names
    assert canon(latest) == canon(delta_rows(uri).select(latest.column_names))

    # Already up to date: nothing new is written.
    again = export(uri)
    assert again.snapshot_ids == () and again.metadata_location == result.metadata_location


def test_field_ids_survive_schema_evolution_and_name_mapping_is_written(tmp_path):
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA)
    table.append(_batch(0, 2))
    export(uri)
    before = {f.name: f.field_id for f in iceberg_table(uri).schema().fields}
    with table.transaction("ADD COLUMNS") as txn:
        txn.update_metadata(schema=SCHEMA.append(pa.field("extra", pa.int32())))
    table.append(pa.table({"id": [9], "part": ["z"], "value": [0.0], "extra": [7]}))
    export(uri)
    meta = iceberg_table(uri).metadata
    after = {f.name: f.field_id for f in meta.schema().fields}
    assert {k: after[k] for k in before} == before
    assert after["extra"] not in before.values()
    assert "schema.name-mapping.default" in meta.properties
    assert len(meta.schemas) == 2
    rows = iceberg_rows(uri, row_filter="extra = 7")
    assert rows.column("id").to_pylist() == [9]


def test_hundreds_of_commits_from_the_hook_one_snapshot_each(tmp_path):
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["part"], properties={"txnlog.iceberg.export.enabled": "true"})
    for i in range(220):
        result = table.append(_batch(i, 1, f"p{i % 7}"))
        assert result is not None and not result.hook_failures
        if i % 50 == 49:
            rewrite(table, f"part = 'p{i % 7}'", keep_not("id", i))
    versions = snapshots_by_delta_version(uri)
    latest = table.latest_version()
    assert sorted(versions) == list(range(1, latest + 1))  # one snapshot per commit but the create, none twice
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))
    meta = iceberg_table(uri).metadata
    # Small manifests were merged: the manifest list stays short.
    assert len(meta.current_snapshot().manifests(iceberg_table(uri).io)) <= 33
    for version in (1, 57, 150, latest):
        assert canon(iceberg_rows(uri, versions[version])) == canon(delta_rows(uri, version))


def test_rebuild_when_commits_since_the_last_export_were_expired(tmp_path):
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA)
    table.append(_batch(0, 2))
    export(uri)
    for i in range(3):
        table.append(_batch(10 + i, 1))
    table.snapshot().checkpoint()
    (tmp_path / "t" / "_delta_log" / f"{2:020d}.json").unlink()  # as log cleanup would
    result = export(uri)
    assert result.rebuilt and "expired" in (result.rebuild_reason or "")
    assert len(result.snapshot_ids) == 1
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))


def test_rebuild_when_the_gap_is_large_and_when_asked(tmp_path):
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA, properties={"txnlog.iceberg.export.maxIncrementalCommits": "3"})
    table.append(_batch(0, 2))
    export(uri)
    for i in range(5):
        table.append(_batch(10 + i, 1))
    result = export(uri)
    assert result.rebuilt and "more than txnlog.iceberg.export.maxIncrementalCommits=3" in (result.rebuild_reason or "")
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))
    full = export(uri, full=True)
    assert full.rebuilt and full.snapshot_ids and canon(iceberg_rows(uri)) == canon(delta_rows(uri))


def test_a_table_recreated_at_the_same_path_is_rebuilt_not_taken_as_up_to_date(tmp_path):
    import shutil

    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA)
    table.append(_batch(0, 3))
    table.append(_batch(3, 3))
    export(uri)
    shutil.rmtree(tmp_path / "t" / "_delta_log")
    again = txnlog.Table.create(uri, SCHEMA)  # a new table id, at version 0..1 again
    again.append(_batch(100, 1))
    result = export(uri)
    assert result.rebuilt and "table id changed" in (result.rebuild_reason or "")
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))


def test_the_create_commit_gets_no_snapshot_and_reads_as_an_empty_table(tmp_path):
    """Creating a table commits metadata only: Iceberg gets the schema and no snapshot (as for any
    metadata-only commit), and pyiceberg reads a table without a current snapshot as empty."""
    uri = str(tmp_path / "t")
    txnlog.Table.create(uri, SCHEMA, partition_by=["part"], properties={"txnlog.iceberg.export.enabled": "true"})
    meta = iceberg_table(uri).metadata
    assert meta.snapshots == [] and meta.current_snapshot_id is None
    assert meta.properties["txnlog.delta.version"] == "0"
    assert [f.name for f in meta.schema().fields] == ["id", "part", "value"]
    empty = iceberg_rows(uri)
    assert empty.num_rows == 0 and empty.column_names == ["id", "part", "value"]

    txnlog.Table(uri).append(_batch(0, 3))
    assert sorted(snapshots_by_delta_version(uri)) == [1]
    assert [s.summary.operation.value for s in iceberg_table(uri).metadata.snapshots] == ["append"]
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))
