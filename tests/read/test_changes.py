"""Table.changes: the change data feed read by the protocol's rule, checked against deltalake's
load_cdf (an independent reader) on delta-spark's corpus tables and on tables txnlog writes, and
against a model (snapshot differences) where deletion vectors changed."""

from __future__ import annotations

import collections
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import txnlog
from txnlog.errors import ChangeDataNotRecordedError, InvalidArgumentError, ProtocolViolationError, VersionNotFoundError
from txnlog.log import write_checkpoint
from txnlog.write import WriteContext, write_change_files

CDF_TABLES = ["cdf-table", "cdf-table-non-partitioned", "checkpoint-cdf-table", "cdc_ict_table", "simple_table_with_cdc", "cdf-table-with-cdc-and-dvs"]
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string())])
CDF = {"delta.enableChangeDataFeed": "true"}


def _sorted(table: pa.Table, columns: list[str]) -> pa.Table:
    return table.select(columns).sort_by([(c, "ascending") for c in columns])


def _same_as_deltalake(uri: str, ours: pa.Table, **range_: Any) -> None:
    """Row for row equal to deltalake's load_cdf, in txnlog's column types. Commit timestamps
    aside: deltalake takes commitInfo.timestamp, the protocol (and delta-spark) the commit
    file's time or the in-commit timestamp."""
    theirs = pa.table(DeltaTable(uri).load_cdf(**range_).read_all())
    columns = [c for c in ours.column_names if c != "_commit_timestamp"]
    expected = _sorted(theirs.select(columns).cast(ours.select(columns).schema), columns)
    got = _sorted(ours, columns)
    assert got.num_rows == expected.num_rows
    assert got.equals(expected), (got.to_pylist(), expected.to_pylist())


def _check_timestamps(table: txnlog.Table, ours: pa.Table) -> None:
    by_version = {e.version: e.timestamp for e in table.history()}
    for row in ours.select(["_commit_version", "_commit_timestamp"]).to_pylist():
        assert int(row["_commit_timestamp"].timestamp() * 1000) == by_version[row["_commit_version"]]


@pytest.mark.parametrize("name", CDF_TABLES)
def test_corpus_tables_read_as_deltalake_reads_them(conformance_dir: Path, name: str) -> None:
    uri = str(conformance_dir / "tables" / name)
    table = txnlog.Table(uri)
    start = min(int(n[:20]) for n in os.listdir(os.path.join(uri, "_delta_log")) if n.endswith(".json") and n[:20].isdigit())
    latest = table.latest_version()
    ours = table.changes(start)
    assert ours.schema.field("_commit_version").type == pa.int64()
    assert ours.schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    assert set(ours.column("_commit_version").to_pylist()) <= set(range(start, latest + 1))
    _same_as_deltalake(uri, ours, starting_version=start)
    _check_timestamps(table, ours)
    middle = table.changes(start + 1, latest - 1)
    _same_as_deltalake(uri, middle, starting_version=start + 1, ending_version=latest - 1)
    streamed = pa.Table.from_batches(list(table.change_batches(start + 1, latest - 1)))
    assert streamed.equals(middle)


def _cdc_version(uri: str, version: int) -> list[str] | None:
    cdc = [action["cdc"]["path"] for action in _actions(uri, version) if "cdc" in action]
    return cdc or None


def _actions(uri: str, version: int) -> list[dict[str, Any]]:
    import json

    with open(os.path.join(uri, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _multiset(table: pa.Table) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(r.values()) for r in table.to_pylist())


def test_deletion_vector_changes_without_cdc_files_are_the_rows_the_version_removed(conformance_dir: Path) -> None:
    """delta-spark's DELETE with deletion vectors writes no cdc files: the version's changes are
    the rows the new vector hides (model: the difference between the two snapshots), and an
    UPDATE/MERGE's cdc files are read as they are."""
    uri = str(conformance_dir / "tables" / "cdf-table-with-cdc-and-dvs")
    table = txnlog.Table(uri)
    columns = ["id", "comment"]
    for v in range(1, table.latest_version() + 1):
        got = table.changes(v, v).drop_columns(["_commit_version", "_commit_timestamp"])
        cdc = _cdc_version(uri, v)
        if cdc is not None:
            expected = pa.concat_tables(pq.read_table(os.path.join(uri, p)).select([*columns, "_change_type"]) for p in cdc)
            assert _multiset(got) == _multiset(expected), v
            continue
        before, after = _multiset(table.snapshot(v - 1).to_arrow(columns)), _multiset(table.snapshot(v).to_arrow(columns))
        expected_rows = collections.Counter({(*k, "delete"): n for k, n in (before - after).items()})
        expected_rows.update({(*k, "insert"): n for k, n in (after - before).items()})
        assert _multiset(got) == expected_rows, v
    assert "delete" in table.changes(2, 2).column("_change_type").to_pylist()  # a DV-only DELETE


def _cdf_table(uri: str, properties: dict[str, str] | None = None) -> txnlog.Table:
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["p"], properties={**CDF, **(properties or {})})
    table.append(pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"], "v": ["x", "y", "z"]}))  # v1
    table.append(pa.table({"id": [4], "p": ["c"], "v": ["w"]}))  # v2
    return table


def _update_with_change_files(table: txnlog.Table, rows: pa.Table) -> None:
    """What the DML step will do for UPDATE: rewrite the file, stage its change rows."""
    with table.transaction("UPDATE") as txn:
        old = txn.filter_files("p = 'a'")
        new_rows = pa.table({"id": [1, 2], "p": ["a", "a"], "v": ["x2", "y"]})
        txn.remove_files(old)
        txn.write(new_rows)
        txn.add_cdc_files(write_change_files(WriteContext.for_configuration(table.uri, txn.table_configuration), rows))


def test_appends_whole_file_deletes_and_change_files_read_as_deltalake_reads_them(tmp_table_uri: str) -> None:
    table = _cdf_table(tmp_table_uri)
    table.delete("p = 'c'")  # v3: whole-file delete, no cdc files needed
    changes = pa.table({"id": [1, 1], "p": ["a", "a"], "v": ["x", "x2"], "_change_type": ["update_preimage", "update_postimage"]})
    _update_with_change_files(table, changes)  # v4
    ours = table.changes(0)
    _same_as_deltalake(tmp_table_uri, ours, starting_version=0)
    _check_timestamps(table, ours)
    rows = {(r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in ours.to_pylist()}
    assert (4, "w", "delete", 3) in rows and (1, "x2", "update_postimage", 4) in rows
    assert not [r for r in rows if r[3] == 4 and r[2] == "insert"]  # the rewrite's adds are not read: cdc files exclusively
    cdc_paths = [a["cdc"]["path"] for a in _actions(tmp_table_uri, 4) if "cdc" in a]
    assert cdc_paths and all(p.startswith("_change_data/p=a/cdc-") for p in cdc_paths)
    picked = table.changes(3, columns=["v"])
    assert picked.column_names == ["v", "_change_type", "_commit_version", "_commit_timestamp"]
    assert sorted(picked.column("v").to_pylist()) == ["w", "x", "x2"]


def test_change_files_under_column_mapping_hold_physical_names(tmp_table_uri: str) -> None:
    table = _cdf_table(tmp_table_uri, {"delta.columnMapping.mode": "name"})
    changes = pa.table({"id": [1, 1], "p": ["a", "a"], "v": ["x", "x2"], "_change_type": ["update_preimage", "update_postimage"]})
    _update_with_change_files(table, changes)
    path = next(a["cdc"]["path"] for a in _actions(tmp_table_uri, 3) if "cdc" in a)
    names = pq.read_schema(os.path.join(tmp_table_uri, path)).names
    assert "_change_type" in names and "v" not in names  # physical names, _change_type as is
    got = table.changes(3).select(["id", "p", "v", "_change_type"])
    assert got.sort_by("v").to_pylist() == changes.sort_by("v").to_pylist()


def test_a_rewrite_without_change_files_is_refused_but_a_whole_file_delete_is_not(tmp_table_uri: str) -> None:
    table = _cdf_table(tmp_table_uri)
    with pytest.raises(ProtocolViolationError, match="cdc files"), table.transaction("UPDATE") as txn:
        txn.remove_files(txn.filter_files("p = 'a'"))
        txn.write(pa.table({"id": [1], "p": ["a"], "v": ["x"]}))
    with table.transaction("DELETE") as txn:
        txn.remove_files(txn.filter_files("p = 'a'"))
    assert table.changes(3).column("_change_type").to_pylist() == ["delete", "delete"]


def test_a_range_with_versions_not_recording_change_data_is_refused_naming_the_version(tmp_table_uri: str) -> None:
    table = txnlog.Table.create(tmp_table_uri, SCHEMA, partition_by=["p"])
    table.append(pa.table({"id": [1], "p": ["a"], "v": ["x"]}))  # v1
    with table.transaction("SET TBLPROPERTIES") as txn:  # v2
        txn.update_metadata(configuration=CDF)
    table.append(pa.table({"id": [2], "p": ["a"], "v": ["y"]}))  # v3
    with pytest.raises(ChangeDataNotRecordedError, match="version 1") as caught:
        table.changes(1, 3)
    assert caught.value.version == 1
    assert table.changes(2).column("id").to_pylist() == [2]
    _same_as_deltalake(tmp_table_uri, table.changes(2), starting_version=2)


def test_version_bounds(tmp_table_uri: str) -> None:
    table = _cdf_table(tmp_table_uri)
    assert set(table.changes(1, 99).column("_commit_version").to_pylist()) == {1, 2}  # clamped to the latest
    with pytest.raises(VersionNotFoundError, match="after the latest version 2"):
        table.changes(3)
    with pytest.raises(InvalidArgumentError, match="before starting_version"):
        table.changes(2, 1)
    with pytest.raises(InvalidArgumentError):
        table.changes()


def test_timestamp_ranges_pick_the_commits_between_them(tmp_table_uri: str) -> None:
    table = _cdf_table(tmp_table_uri)
    table.append(pa.table({"id": [5], "p": ["a"], "v": ["u"]}))  # v3
    stamps = {e.version: e.timestamp for e in table.history()}
    got = table.changes(starting_timestamp=stamps[2], ending_timestamp=stamps[3] - 1)
    assert set(got.column("_commit_version").to_pylist()) == {2}
    got = table.changes(starting_timestamp=stamps[1] + 1)  # the first commit at or after it
    assert set(got.column("_commit_version").to_pylist()) == {2, 3}
    with pytest.raises(VersionNotFoundError, match="after the latest commit"):
        table.changes(starting_timestamp=stamps[3] + 1)
    iso = table.changes(starting_timestamp="1970-01-01T00:00:00Z", ending_timestamp=stamps[1])
    assert set(iso.column("_commit_version").to_pylist()) == {1}


def test_a_range_reaching_an_expired_version_names_it_and_the_retention_property(tmp_table_uri: str) -> None:
    table = _cdf_table(tmp_table_uri)
    table.append(pa.table({"id": [5], "p": ["a"], "v": ["u"]}))  # v3
    write_checkpoint(table.store, table.snapshot(2).state)
    for v in (0, 1):
        os.remove(os.path.join(tmp_table_uri, "_delta_log", f"{v:020d}.json"))
    with pytest.raises(VersionNotFoundError, match="version 1 .*delta.logRetentionDuration") as caught:
        table.changes(1)
    assert caught.value.version == 1
    assert table.changes(2).column("id").to_pylist() == [4, 5]
    with pytest.raises(VersionNotFoundError, match="version 1"):
        table.changes(starting_timestamp=0)


def test_change_rows_with_an_unknown_change_type_are_refused(tmp_table_uri: str) -> None:
    table = _cdf_table(tmp_table_uri)
    bad = pa.table({"id": [1], "p": ["a"], "v": ["x"], "_change_type": ["upsert"]})
    with pytest.raises(InvalidArgumentError, match="upsert"):
        write_change_files(WriteContext.for_snapshot(table.snapshot()), bad)
    assert not os.path.exists(os.path.join(tmp_table_uri, "_change_data")) or not any(
        files for _, _, files in os.walk(os.path.join(tmp_table_uri, "_change_data"))
    )


def test_corpus_copy_reads_the_same_after_a_txnlog_append(conformance_dir: Path, tmp_path: Path) -> None:
    """txnlog appending to delta-spark's CDF table: the new version reads as inserts, as deltalake reads it."""
    uri = str(tmp_path / "t")
    shutil.copytree(conformance_dir / "tables" / "cdf-table", uri)
    table = txnlog.Table(uri)
    table.append(pa.table({"id": pa.array([100], pa.int32()), "name": ["Zed"], "birthday": pa.array([pa.scalar(19000, pa.date32()).as_py()])}))
    got = table.changes(4)
    assert got.select(["id", "_change_type"]).to_pylist() == [{"id": 100, "_change_type": "insert"}]
    _same_as_deltalake(uri, table.changes(0), starting_version=0)


def test_a_commit_that_only_grows_deletion_vectors_needs_no_change_files(tmp_table_uri: str) -> None:
    """The protocol's removes-only case, as delta-spark's DELETE with deletion vectors: the log
    tells the rows. Adding data besides still needs cdc files."""
    from txnlog.write import delete_rows

    table = _cdf_table(tmp_table_uri, {"delta.enableDeletionVectors": "true"})
    with table.transaction("DELETE") as txn:
        files = txn.filter_files("p = 'a'")
        deletes = delete_rows(table.store, files, [pa.array([0], pa.int64())], txn.snapshot.read_context().deleted_rows(files))
        txn.remove_files(deletes.removed)
        txn.add_files(deletes.added)
    assert not _cdc_version(tmp_table_uri, 3)
    assert table.changes(3).select(["id", "_change_type"]).to_pylist() == [{"id": 1, "_change_type": "delete"}]
    with pytest.raises(ProtocolViolationError, match="cdc files"), table.transaction("UPDATE") as txn:
        files = txn.filter_files("p = 'a'")
        deletes = delete_rows(table.store, files, [pa.array([1], pa.int64())], txn.snapshot.read_context().deleted_rows(files))
        txn.remove_files(deletes.removed)
        txn.add_files(deletes.added)
        txn.write(pa.table({"id": [2], "p": ["a"], "v": ["y2"]}))
