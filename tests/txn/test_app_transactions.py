"""Idempotent writes: ``OptimisticTransaction.already_applied``, the one app-version check that
Table.append and the Spark writer and sink share."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import ConcurrentTransactionError

from .conftest import SCHEMA, make_file


def rows(n: int) -> pa.Table:
    return pa.table({"id": list(range(n)), "region": ["EU"] * n, "amount": [1.0] * n}, schema=SCHEMA)


def test_already_applied_compares_the_app_version_committed(table):
    with table.transaction("STREAMING UPDATE") as txn:
        txn.set_app_transaction("stream", 5)
        txn.add_files([make_file("EU", 1, 2)])
    txn = table.transaction()
    assert txn.already_applied("stream", 4)
    assert txn.already_applied("stream", 5)
    assert not txn.already_applied("stream", 6)
    assert not txn.already_applied("another-stream", 0)
    txn.abort()


def test_a_transaction_creating_the_table_has_applied_nothing(tmp_path):
    txn = Table(tmp_path / "new").create_transaction()
    assert not txn.already_applied("stream", 0)
    txn.abort()


def test_the_check_is_a_read_a_concurrent_commit_of_the_same_app_conflicts_with(table):
    # The checking transaction never sets the app id itself: the check alone must count as
    # having read it, or two writers could both decide the batch is new and both commit it.
    checker = table.transaction("STREAMING UPDATE")
    assert not checker.already_applied("stream", 1)
    checker.add_files([make_file("EU", 10, 20)])
    other_app = table.transaction("STREAMING UPDATE")
    assert not other_app.already_applied("other", 1)
    other_app.add_files([make_file("US", 10, 20)])
    with table.transaction("STREAMING UPDATE") as winner:
        winner.set_app_transaction("stream", 1)
        winner.add_files([make_file("US", 30, 40)])
    with pytest.raises(ConcurrentTransactionError, match="stream"):
        checker.commit()
    assert other_app.commit() == winner.result + 1  # another app id is no conflict


def test_append_with_an_app_version_is_applied_once(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA)
    assert t.append(rows(3), app_id="loader", app_version=1) == 1
    assert t.append(rows(3), app_id="loader", app_version=1) is None
    assert t.append(rows(3), app_id="loader", app_version=0) is None
    assert t.append(rows(2), app_id="loader", app_version=2) == 2
    snap = t.snapshot()
    assert snap.app_transaction_version("loader") == 2
    assert snap.num_files == 2  # one file per append that ran
