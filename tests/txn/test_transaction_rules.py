"""Transaction bugs found under test (issue 10), each shown by a test that failed before the fix:
own add+remove of one file, removes of files that are not live, commits the protocol forbids,
a listing that lags behind put-if-absent, winners checked in bulk, errors from the store."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable

import txnlog
from txnlog import AddFile, Table
from txnlog.errors import (
    CommitFailedError,
    FileNotLiveError,
    LogCorruptError,
    SchemaError,
    StorageError,
    TransactionError,
    TxnLogError,
)
from txnlog.log.filenames import commit_path
from txnlog.storage import LocalLogStore, open_store
from txnlog.storage.base import FileInfo
from txnlog.txn import committer as committer_module
from txnlog.txn.retry import RetryPolicy

from .conftest import SCHEMA, make_file


def delta_rs_paths(table: Table) -> list[str]:
    return pa.table(DeltaTable(table.uri).get_add_actions()).column("path").to_pylist()


def commit_lines(table: Table, version: int) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in table.store.read(commit_path(version)).splitlines() if line.strip()]


def file_actions(table: Table, version: int) -> list[tuple[str, str]]:
    return [(kind, body["path"]) for obj in commit_lines(table, version) for kind, body in obj.items() if kind in ("add", "remove")]


# --- a transaction's own actions on one file ---------------------------------------------------


def test_remove_then_add_back_of_one_file_commits_one_add(table: Table) -> None:
    """Re-adding a file with new stats used to write an add and a remove of the same path:
    txnlog then saw the file and delta-rs did not."""
    with table.transaction("UPDATE STATS") as txn:
        eu = txn.filter_files("region = 'EU'")
        txn.remove_files(eu)
        row = eu.to_pylist(maps_as_pydicts="lossy")[0]
        txn.add_files([AddFile(row["path"], row["partition_values"], row["size"], row["modification_time"], stats='{"numRecords":10}')])
    assert file_actions(table, 2) == [("add", row["path"])]
    files = table.snapshot().files()
    assert files.num_rows == 2
    assert dict(zip(files.column("path").to_pylist(), files.column("stats").to_pylist()))[row["path"]] == '{"numRecords":10}'
    assert sorted(delta_rs_paths(table)) == sorted(files.column("path").to_pylist())


def test_add_then_remove_keeps_the_later_action(table: Table) -> None:
    live = table.snapshot().files().column("path").to_pylist()
    with table.transaction() as txn:
        txn.add_files(txn.filter_files("region = 'US'"))  # re-add, then remove: the remove wins
        txn.remove_files(txn.filter_files("region = 'US'"))
        new = make_file("EU", 50, 60)
        txn.add_files([new])
        txn.remove_files([new])  # added and removed again: nothing at all
    assert file_actions(table, 2) == [("remove", next(p for p in live if p.startswith("region=US")))]
    assert table.snapshot().num_files == 1
    assert len(delta_rs_paths(table)) == 1


def test_removing_a_file_that_is_not_live_is_refused(table: Table) -> None:
    with table.transaction() as txn:
        with pytest.raises(FileNotLiveError, match="region=EU/ghost.parquet") as err:
            txn.remove_files([dataclasses.replace(make_file("EU", 1, 2), path="region=EU/ghost.parquet")])
        assert err.value.path == "region=EU/ghost.parquet"
        txn.abort()


def test_add_files_refuses_what_the_protocol_forbids(table: Table) -> None:
    with table.transaction() as txn:
        with pytest.raises(SchemaError, match="'country'"):
            txn.add_files([dataclasses.replace(make_file("EU", 1, 2), partition_values={"region": "EU", "country": "FR"})])
        with pytest.raises(TransactionError, match="negative size"):
            txn.add_files([dataclasses.replace(make_file("EU", 1, 2), size=-1)])
        txn.abort()
    assert table.latest_version() == 1


# --- commits the protocol forbids are refused on read ------------------------------------------


def _add(path: str, *, size: int = 10, part: str = "a") -> dict[str, Any]:
    return {"add": {"path": path, "partitionValues": {"part": part}, "size": size, "modificationTime": 1, "dataChange": True}}


@pytest.mark.parametrize(
    "actions, what",
    [
        ([{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 3}}], "two 'protocol'"),
        ("metadata", "two 'metaData'"),
        ([_add("f.parquet"), _add("f.parquet")], "two file actions for 'f.parquet'"),
        ([_add("f.parquet"), {"remove": {"path": "f.parquet", "deletionTimestamp": 1, "dataChange": True}}], "two file actions for 'f.parquet'"),
        ([{"txn": {"appId": "app", "version": 1}}, {"txn": {"appId": "app", "version": 2}}], "two 'txn' actions for appId 'app'"),
        ([{"add": {"path": "f.parquet", "partitionValues": {"part": "a", "other": "x"}, "size": 1, "modificationTime": 1, "dataChange": True}}], "'other', which is not a partition column"),
        ([_add("f.parquet", size=-5)], "negative size"),
    ],
)
def test_forbidden_commits_are_refused_naming_version_and_action(log_writer: Any, actions: Any, what: str) -> None:
    w = log_writer()
    w.create(partition_columns=("part",))
    if actions == "metadata":
        body = orjson.loads(w.store.read(commit_path(0)).splitlines()[1])
        actions = [body, body]
    w.commit(1, *actions)
    with pytest.raises(LogCorruptError, match=what) as err:
        Table(w.uri).snapshot()
    assert err.value.version == 1 and "version 1" in str(err.value)
    assert Table(w.uri).snapshot(0).version == 0  # earlier versions stay readable


# --- races: a lagging listing, winners in bulk, unknown outcomes --------------------------------


class LaggingListing(LocalLogStore):
    """A listing of ``_delta_log`` that never shows the newest commit (object stores and ext4
    under load can lag like this)."""

    def list_from(self, directory: str, start_name: str = "") -> list[FileInfo]:
        found = super().list_from(directory, start_name)
        commits = [f for f in found if f.name.endswith(".json")]
        hidden = commits[-1] if len(commits) > 1 or (commits and start_name) else None
        return [f for f in found if f is not hidden]


def test_a_lagging_listing_does_not_make_the_writer_spin(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    Table.create(uri, SCHEMA, partition_by=["region"])
    base = open_store(uri)
    assert isinstance(base, LocalLogStore)
    laggy = Table(uri, store=LaggingListing(base.root_uri, base.root_path))
    txn = laggy.transaction(retry_policy=RetryPolicy(num_retries=5, min_wait_ms=0, max_wait_ms=1))
    txn.add_files([make_file("EU", 1, 2)])
    Table(uri).append(pa.table({"id": [1], "region": ["US"], "amount": [1.0]}))  # wins version 1
    result = txn.commit()
    assert result == 2 and result.attempts == 2
    assert Table(uri).snapshot().num_files == 2


def test_winners_are_checked_in_one_pass(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = committer_module.check_conflicts

    def counting(mine: Any, winners: Any) -> None:
        calls.append(len(winners.versions))
        real(mine, winners)

    monkeypatch.setattr(committer_module, "check_conflicts", counting)
    txn = table.transaction("UPDATE")
    txn.remove_files(txn.filter_files("region = 'EU'"))
    other = Table(table.uri)
    for i in range(60):  # sixty blind appends to US win versions 2..61
        with other.transaction() as t:
            t.add_files([make_file("US", 100 + i, 100 + i)])
    assert txn.commit() == 62
    assert calls[0] == 60  # all sixty at once, not one call per winner


class LandsThenFails(LocalLogStore):
    """put_if_absent writes the commit, then raises an error no store would classify."""

    fail_after_write = True

    def put_if_absent(self, path: str, data: bytes) -> None:
        if self.fail_after_write:
            super().put_if_absent(path, data)
        raise RuntimeError("connection reset by peer")


def test_an_unknown_error_from_put_if_absent_is_resolved_by_the_txn_id(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    Table.create(uri, SCHEMA, partition_by=["region"])
    base = open_store(uri)
    assert isinstance(base, LocalLogStore)
    store = LandsThenFails(base.root_uri, base.root_path)
    result = Table(uri, store=store).transaction().__enter__()
    result.add_files([make_file("EU", 1, 2)])
    assert result.commit() == 1  # it landed: reported as committed, once
    assert Table(uri).latest_version() == 1

    store.fail_after_write = False  # now it never lands: the error is reported, as a TxnLogError
    txn = Table(uri, store=store).transaction()
    txn.add_files([make_file("EU", 3, 4)])
    with pytest.raises(CommitFailedError, match="connection reset") as err:
        txn.commit()
    assert err.value.orphan_files and Table(uri).latest_version() == 1


def test_memory_store_errors_are_storage_errors(memory_table_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(memory_table_uri)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.fs, "pipe_file", broken)  # type: ignore[attr-defined]
    with pytest.raises(StorageError, match="No space left"):
        store.put_if_absent("_delta_log/00000000000000000000.json", b"{}")


class FullDisk(LocalLogStore):
    def open_atomic_output(self, path: str) -> Any:
        outer = super().open_atomic_output(path)

        class Full:
            def __enter__(self) -> Any:
                f = outer.__enter__()

                class Writer:
                    def write(self, data: bytes) -> int:
                        raise OSError(28, "No space left on device")

                    def __getattr__(self, name: str) -> Any:
                        return getattr(f, name)

                return Writer()

            def __exit__(self, *exc: Any) -> Any:
                return outer.__exit__(*exc)

        return Full()


def test_checkpoint_on_a_full_disk_raises_storage_error_and_leaves_nothing(table: Table) -> None:
    base = table.store
    assert isinstance(base, LocalLogStore)
    full = Table(table.uri, store=FullDisk(base.root_uri, base.root_path))
    with pytest.raises(StorageError, match="No space left"):
        full.snapshot().checkpoint()
    assert not [n for n in os.listdir(os.path.join(base.root_path, "_delta_log")) if "checkpoint" in n]


def test_table_create_takes_a_store(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    base = open_store(uri)
    assert isinstance(base, LocalLogStore)
    store = LaggingListing(base.root_uri, base.root_path)
    table = Table.create(uri, SCHEMA, store=store)
    assert table.store is store
    with pytest.raises(TxnLogError, match="not at the table URI"):
        Table(str(tmp_path / "elsewhere"), store=store)
    assert txnlog.Table(uri).latest_version() == 0


def test_a_footprint_built_by_hand_checks_against_winners(table: Table) -> None:
    """TransactionFootprint and Winners are usable on their own (an engine's planner may build them)."""
    from txnlog.log.commits import read_commits
    from txnlog.log.segment import list_log
    from txnlog.txn.conflicts import TransactionFootprint, Winners, check_conflicts
    from txnlog.txn.isolation import IsolationLevel

    with table.transaction() as txn:
        txn.remove_files(txn.filter_files("region = 'US'"))
    listing = list_log(table.store, 2)
    winners = Winners.of(read_commits(table.store, [listing.commits[2]]))
    check_conflicts(TransactionFootprint(1, IsolationLevel.SERIALIZABLE), winners)  # read nothing: no conflict
    with pytest.raises(txnlog.errors.ConcurrentDeleteReadError):
        check_conflicts(TransactionFootprint(1, IsolationLevel.SERIALIZABLE, read_whole_table=True), winners)
