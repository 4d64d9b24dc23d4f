"""SIGKILL between writing a deletion vector file and committing the DELETE that names it: the
table still reads the rows it had (txnlog and DuckDB), validate finds nothing wrong, and vacuum
removes the orphan vector file. The child process is killed by its parent once the vector file
is written (it says so and blocks), and, in a second test, by a fault-injecting store at the
commit's write itself."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog
from tests.dv_tables import build_dv, delete_where, duckdb_ids, dv_files, txnlog_ids
from txnlog.maintenance import vacuum, validate
from txnlog.testing import FaultInjectingStore

pytest.importorskip("pyroaring")

_SPAWN = multiprocessing.get_context("spawn")
GONE = 5  # the child deletes every id divisible by this


def _write_vectors_then_block(uri: str, written: Any, never: Any) -> None:
    table = txnlog.Table(uri)
    snapshot = table.snapshot()
    files, ctx = snapshot.files(), snapshot.read_context()
    positions = []
    for i in range(files.num_rows):
        rows = ctx.read(files.slice(i, 1), columns=["id"], row_index="__pos")
        positions.append(rows.filter(pa.array([v % GONE == 0 for v in rows["id"].to_pylist()]))["__pos"].combine_chunks())
    deletes = txnlog.write.delete_rows(table.store, files, positions, ctx.deleted_rows(files), max_inline_bytes=0)
    assert deletes.added.num_rows == files.num_rows
    written.set()
    never.wait(120)  # killed here, before the transaction that would commit the vectors


def _delete_killed_at_commit(uri: str) -> None:
    store = FaultInjectingStore(txnlog.Table(uri).store)
    store.kill("put_if_absent", "_delta_log/*.json")
    delete_where(txnlog.Table(uri, store=store), lambda v: v % GONE == 0)


def _check_after_crash(table: txnlog.Table, vectors_before: set[str], version_before: int) -> None:
    orphans = dv_files(table) - vectors_before
    assert len(orphans) == 1
    assert table.latest_version() == version_before
    expected = [v for v in range(40) if v % 7]
    assert txnlog_ids(txnlog.Table(table.uri)) == duckdb_ids(table.uri) == expected
    assert validate(table).ok
    done = vacuum(table, retention="0s", force=True)
    assert done.files == tuple(orphans)
    assert dv_files(table) == vectors_before
    assert txnlog_ids(txnlog.Table(table.uri)) == duckdb_ids(table.uri) == expected
    # The DELETE can be done again in full.
    delete_where(table, lambda v: v % GONE == 0)
    assert txnlog_ids(table) == duckdb_ids(table.uri) == [v for v in expected if v % GONE]


def _table_with_one_delete(path: Path) -> txnlog.Table:
    table = build_dv(path)
    delete_where(table, lambda v: v % 7 == 0)  # so the crashed DELETE has vectors to union with
    return table


def test_sigkill_after_writing_the_vector_file(tmp_path):
    table = _table_with_one_delete(tmp_path / "t")
    before, version = dv_files(table), table.latest_version()
    written, never = _SPAWN.Event(), _SPAWN.Event()
    child = _SPAWN.Process(target=_write_vectors_then_block, args=(table.uri, written, never))
    child.start()
    try:
        assert written.wait(120), f"the child never wrote its vectors (exit code {child.exitcode})"
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join(30)
    assert child.exitcode == -signal.SIGKILL
    _check_after_crash(table, before, version)


def test_sigkill_at_the_commit_write(tmp_path):
    table = _table_with_one_delete(tmp_path / "t")
    before, version = dv_files(table), table.latest_version()
    child = _SPAWN.Process(target=_delete_killed_at_commit, args=(table.uri,))
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    _check_after_crash(table, before, version)
