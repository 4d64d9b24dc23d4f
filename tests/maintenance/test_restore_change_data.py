"""RESTORE of a table with the change data feed: committed without change files, as delta-spark
does, its version reads (by the protocol's rule for versions without cdc files) as the rows of
the files it removed deleted and of the files it re-added inserted; deltalake's load_cdf reads
the same, and the feed's net change is the difference between the two snapshots."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import txnlog
from txnlog.errors import ProtocolViolationError
from txnlog.maintenance import restore

pytest.importorskip("pyroaring")

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.string())])
COLUMNS = SCHEMA.names


def _rows(table: pa.Table) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(r[c] for c in COLUMNS) for r in table.to_pylist())


def _changed_table(path: Path, deletion_vectors: bool) -> txnlog.Table:
    properties = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": str(deletion_vectors).lower()}
    table = txnlog.Table.create(str(path), SCHEMA, partition_by=["part"], properties=properties)
    table.append(pa.table({"id": [1, 2, 3, 4], "part": ["a", "a", "b", "b"], "v": ["w", "x", "y", "z"]}))  # v1
    table.update("id = 2", set={"v": "'X'"})  # v2
    table.delete("id = 3")  # v3
    table.merge(pa.table({"id": [1, 9], "part": ["a", "c"], "v": ["W", "n"]}), "id",
                when_matched_update="*", when_not_matched_insert="*")  # v4
    return table


@pytest.mark.parametrize("deletion_vectors", [False, True])
def test_restore_reads_as_its_removed_rows_deleted_and_its_re_added_rows_inserted(tmp_path: Path, deletion_vectors: bool) -> None:
    table = _changed_table(tmp_path / "t", deletion_vectors)
    latest = table.latest_version()
    result = restore(table, version=1)
    with open(os.path.join(tmp_path / "t", "_delta_log", f"{result.version:020d}.json")) as f:
        actions = [json.loads(line) for line in f]
    assert not any("cdc" in a for a in actions) and any("remove" in a for a in actions) and any("add" in a for a in actions)

    assert _rows(table.snapshot().to_arrow()) == _rows(table.snapshot(1).to_arrow())
    got = table.changes(result.version, result.version)
    deleted = _rows(got.filter(pa.compute.equal(got.column("_change_type"), "delete")))
    inserted = _rows(got.filter(pa.compute.equal(got.column("_change_type"), "insert")))
    assert set(got.column("_change_type").to_pylist()) <= {"insert", "delete"}
    before, after = _rows(table.snapshot(latest).to_arrow()), _rows(table.snapshot(result.version).to_arrow())
    # The net change is the restore's; a row in a file that moved both ways is deleted and re-inserted.
    assert inserted - deleted == after - before and deleted - inserted == before - after
    assert inserted <= after and deleted <= before
    if not deletion_vectors:  # deltalake reads no deletion vectors
        ours = table.changes(2, result.version).drop_columns(["_commit_timestamp"])
        theirs = pa.table(DeltaTable(table.uri).load_cdf(starting_version=2, ending_version=result.version).read_all())
        theirs = theirs.select(ours.column_names).cast(ours.schema)
        keys = [(c, "ascending") for c in ours.column_names]
        assert ours.sort_by(keys).equals(theirs.sort_by(keys))
    # The feed goes on after the restore.
    updated = table.update("id = 4", set={"v": "'Z'"})
    assert sorted(table.changes(updated).column("_change_type").to_pylist()) == ["update_postimage", "update_preimage"]


def test_only_a_declared_commit_may_move_files_without_change_files(tmp_path: Path) -> None:
    """The opt-out is per transaction: the same file moves without it are refused."""
    table = _changed_table(tmp_path / "t", False)
    old = table.snapshot(1).files()
    with pytest.raises(ProtocolViolationError, match="cdc files"):
        with table.transaction("RESTORE") as txn:
            txn.remove_files(txn.read_whole_table())
            txn.add_files(old)
