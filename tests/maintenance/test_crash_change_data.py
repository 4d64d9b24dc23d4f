"""SIGKILL during an UPDATE of a table with the change data feed, once its change file is
written (right after that write, and at the commit's write itself): the table reads the rows
and the changes it had (txnlog and deltalake), validate finds nothing wrong, vacuum removes the
orphan data and change files, and the UPDATE can then be done in full."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import txnlog
from txnlog.maintenance import vacuum, validate
from txnlog.testing import FaultInjectingStore

_SPAWN = multiprocessing.get_context("spawn")
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.string())])


def _update_killed(uri: str, operation: str, path: str, after: bool) -> None:
    store = FaultInjectingStore(txnlog.Table(uri).store)
    store.kill(operation, path, after=after)
    txnlog.Table(uri, store=store).update("id % 2 = 0", set={"v": "'even'"})


def _files(root: str, directory: str) -> set[str]:
    out = set()
    for parent, _, names in os.walk(os.path.join(root, directory)):
        out.update(os.path.relpath(os.path.join(parent, n), root) for n in names if n.endswith(".parquet"))
    return out


def _changes(table: txnlog.Table) -> list[dict[str, object]]:
    got = table.changes(0).drop_columns(["_commit_timestamp"])
    return got.sort_by([(c, "ascending") for c in got.column_names]).to_pylist()


@pytest.mark.parametrize(
    "operation, path, after",
    [("write_data", "_change_data/*", True), ("put_if_absent", "_delta_log/*.json", False)],
    ids=["after-the-change-file", "at-the-commit"],
)
def test_sigkill_between_the_change_file_and_the_commit(tmp_path: Path, operation: str, path: str, after: bool) -> None:
    root = str(tmp_path / "t")
    table = txnlog.Table.create(root, SCHEMA, partition_by=["part"], properties={"delta.enableChangeDataFeed": "true"})
    table.append(pa.table({"id": list(range(10)), "part": ["a"] * 10, "v": ["x"] * 10}))
    version, rows, changes = table.latest_version(), table.snapshot().to_arrow().sort_by("id"), _changes(table)
    data_before = _files(root, "part=a")

    child = _SPAWN.Process(target=_update_killed, args=(table.uri, operation, path, after))
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL

    orphans = (_files(root, "part=a") - data_before) | _files(root, "_change_data")
    assert len(orphans) == 2 and len(_files(root, "_change_data")) == 1  # a rewritten file, a change file
    fresh = txnlog.Table(root)
    assert fresh.latest_version() == version
    assert fresh.snapshot().to_arrow().sort_by("id").equals(rows)
    assert pa.table(DeltaTable(root).to_pyarrow_table()).sort_by("id").equals(rows)
    assert _changes(fresh) == changes
    assert validate(fresh).ok
    assert set(vacuum(fresh, retention="0s", force=True).files) == orphans
    assert _files(root, "_change_data") == set() and _files(root, "part=a") == data_before

    updated = fresh.update("id % 2 = 0", set={"v": "'even'"})
    assert [r["_change_type"] for r in fresh.changes(updated).to_pylist()].count("update_postimage") == 5
    assert fresh.snapshot().to_arrow().sort_by("id").column("v").to_pylist() == ["even", "x"] * 5
