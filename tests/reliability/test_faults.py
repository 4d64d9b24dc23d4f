"""Commits, checkpoints, expiry, vacuum and restore run under FaultInjectingStore: a call fails
once, fails N times, fails every time, lands but reports an error (ambiguous), is cut short, or a
listing misses the newest commits. Afterwards txnlog and deltalake read the same rows, validate
finds nothing, no acknowledged commit is lost or doubled, every error is a TxnLogError naming the
operation and the file or version, and running the operation again without faults finishes it.

Outside the stores' contract, and so not injected: a commit file cut short (put-if-absent is
atomic on every store txnlog commits to) and a data file cut short without an error (the store
would be lying about a completed write)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import txnlog
from txnlog.errors import CommitConflictError, CommitFailedError, StorageError, TxnLogError
from txnlog.log.filenames import LAST_CHECKPOINT, classic_checkpoint_path, commit_path
from txnlog.maintenance import checkpoint, expire, validate
from txnlog.storage import open_store
from txnlog.testing import FaultInjectingStore
from txnlog.txn.committer import STORE_ERROR_RETRIES

from .helpers import BEFORE, DONE, LEFTOVERS, NEW_ID, base_table, check_table, clean, ids_by_txnlog, prepare_vacuum, rows, run_operation


@pytest.fixture
def table_root(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    base_table(root)
    return root


OPERATIONS: dict[str, Callable[[txnlog.Table], Any]] = {
    name: functools.partial(run_operation, name) for name in ("commit", "checkpoint", "expire", "vacuum", "restore")
}
# The calls each operation depends on, for the faults to hit.
TARGETS = {
    "commit": [("put_if_absent", "_delta_log/*.json"), ("write_data", "*.parquet"), ("read", "_delta_log/*.json")],
    "checkpoint": [("open_atomic_output", "*.checkpoint.parquet"), ("put", LAST_CHECKPOINT)],
    "expire": [("delete", "_delta_log/*"), ("put", LAST_CHECKPOINT)],
    "vacuum": [("delete", "*.parquet"), ("put_if_absent", "_delta_log/*.json")],
    "restore": [("put_if_absent", "_delta_log/*.json"), ("read", "_delta_log/*.json"), ("info", "*.parquet")],
}
KINDS = {
    "fail-once": lambda s, op, pat: s.fail(op, pat, times=1),
    "fail-3-times": lambda s, op, pat: s.fail(op, pat, times=3),
    "fail-always": lambda s, op, pat: s.fail(op, pat, times=None),
    "ambiguous": lambda s, op, pat: s.fail_after(op, pat, times=1),
    "cut-short": lambda s, op, pat: s.truncate(op, pat),
}
WRITES = {"put_if_absent", "put", "open_atomic_output", "write_data", "delete"}
TRUNCATABLE = {"put", "open_atomic_output", "write_data"}


def _cases() -> list[Any]:
    cases = []
    for operation, targets in TARGETS.items():
        for call, pattern in targets:
            for kind in KINDS:
                if kind == "ambiguous" and call not in WRITES or kind == "cut-short" and call not in TRUNCATABLE:
                    continue
                cases.append(pytest.param(operation, call, pattern, kind, id=f"{operation}-{call}-{kind}"))
        cases.append(pytest.param(operation, "list", "_delta_log", "hide-newest", id=f"{operation}-listing-misses-newest"))
    return cases


def _assert_names_the_failure(err: BaseException, operation: str) -> None:
    assert isinstance(err, TxnLogError), f"{type(err).__name__} is not a TxnLogError: {err}"
    text = str(err)
    if isinstance(err, CommitFailedError):
        assert err.version is not None and f"version {err.version}" in text
        if isinstance(err, CommitConflictError):
            return  # names the winning version and operation (a logical outcome, not a fault)
        assert f"{err.version:020d}.json" in text or "commit" in text
        return
    # Expiry checkpoints first: a fault there is named as the checkpoint's.
    allowed = {"expire": {"expire", "checkpoint"}}.get(operation, {operation})
    assert err.operation in allowed or operation == "commit", f"{err!r} does not name {operation}"
    path = getattr(err, "path", None)
    assert path and path.rsplit("/", 1)[-1] in text, f"{err!r} does not name the file"


@pytest.mark.parametrize("operation, call, pattern, kind", _cases())
def test_operation_under_fault(table_root: Path, operation: str, call: str, pattern: str, kind: str) -> None:
    uri = str(table_root)
    if operation == "vacuum":
        prepare_vacuum(table_root)
    store = FaultInjectingStore(open_store(uri))
    if kind == "hide-newest":
        rule = store.hide_newest(pattern, times=None)
    else:
        rule = KINDS[kind](store, call, pattern)
    table = txnlog.Table(uri, store=store)
    error: BaseException | None = None
    try:
        OPERATIONS[operation](table)
    except Exception as e:  # noqa: BLE001  (any exception is judged below)
        error = e
    assert rule.fired, f"the fault never hit ({call} {pattern}): the test proves nothing"
    if error is not None:
        _assert_names_the_failure(error, operation)
    if kind == "fail-once" and call == "put_if_absent" or kind == "fail-3-times" and call == "put_if_absent":
        assert error is None, f"a transient store error was not retried: {error!r}"
    if kind == "ambiguous" and call == "put_if_absent":
        assert error is None, "a commit that landed was reported as failed"

    store.clear()
    acknowledged = {NEW_ID} if operation == "commit" and error is None else set()
    # A failed maintenance run may leave what validate reports (a torn _last_checkpoint hint):
    # readers must not care, and running it again must repair it.
    rerun = error is not None and operation != "commit"
    ids = check_table(uri, acknowledged=acknowledged, attempted={*BEFORE, 1, NEW_ID}, run_validate=not rerun)
    if error is None:
        assert ids == DONE[operation]
    else:
        assert ids in (BEFORE, DONE[operation])
    if rerun:
        OPERATIONS[operation](txnlog.Table(uri))
        assert check_table(uri, acknowledged=set()) == DONE[operation]
    if operation == "vacuum":
        if error is None or rerun:
            assert not [name for name in LEFTOVERS if (table_root / name).exists()], "vacuum left leftovers"


def test_commit_store_errors_are_retried_within_bounds(table_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The committer's policy for a transient StorageError: retry the same version after a
    jittered wait, STORE_ERROR_RETRIES times in a row; then CommitFailedError naming the commit
    file and version, with the store's error as its cause, and the data files as orphans."""
    uri = str(table_root)
    store = FaultInjectingStore(open_store(uri))
    rule = store.fail("put_if_absent", "_delta_log/*.json", times=None)
    with caplog.at_level(logging.WARNING, logger="txnlog"), pytest.raises(CommitFailedError) as info:
        txnlog.Table(uri, store=store).append(rows([NEW_ID]))
    err = info.value
    assert rule.fired == STORE_ERROR_RETRIES + 1
    assert isinstance(err.__cause__, StorageError)
    assert err.version == 6 and f"{6:020d}.json" in str(err) and "store error" in str(err)
    assert err.orphan_files and all(not (table_root / "_delta_log" / f).exists() for f in err.orphan_files)
    assert sum("retrying" in r.getMessage() for r in caplog.records) == STORE_ERROR_RETRIES
    # The orphans are what vacuum removes.
    store.clear()
    removed = set(clean(txnlog.Table(uri)).files)
    assert set(err.orphan_files) <= removed
    assert check_table(uri, acknowledged=set()) == BEFORE


def test_checkpoint_cut_short_silently_is_not_trusted_and_is_replaced(table_root: Path) -> None:
    """A store that tears a checkpoint without reporting it: txnlog falls back to the commits,
    validate names the file, and the next checkpoint replaces it."""
    uri = str(table_root)
    store = FaultInjectingStore(open_store(uri))
    store.truncate("open_atomic_output", "*.checkpoint.parquet", raise_error=False)
    checkpoint(txnlog.Table(uri, store=store))
    torn = classic_checkpoint_path(5)
    assert ids_by_txnlog(uri) == BEFORE
    problems = validate(txnlog.Table(uri)).problems
    assert [p.path for p in problems] == [torn], problems
    (table_root / torn).unlink()  # what a user does with the file validate names
    checkpoint(txnlog.Table(uri))
    assert check_table(uri, acknowledged=set()) == BEFORE


def test_last_checkpoint_cut_short_is_only_a_hint(table_root: Path) -> None:
    uri = str(table_root)
    store = FaultInjectingStore(open_store(uri))
    store.truncate("put", LAST_CHECKPOINT, raise_error=False)
    checkpoint(txnlog.Table(uri, store=store))
    assert ids_by_txnlog(uri) == BEFORE
    txnlog.Table(uri).append(rows([NEW_ID]))
    checkpoint(txnlog.Table(uri))  # the next checkpoint writes a whole hint again
    assert check_table(uri, acknowledged={NEW_ID}) == [*BEFORE, NEW_ID]


def test_writer_checkpoints_after_expiry_deleted_its_base_checkpoint(tmp_path: Path) -> None:
    """Found by the load run: a long-lived Table's state reads its tombstones lazily from the
    checkpoint it was built on; once expiry deleted that checkpoint, the writer's checkpoint
    (and vacuum's tombstone listing) failed. They rebuild from the log as it is now instead."""
    root = tmp_path / "t"
    table = base_table(root)  # version 5 removes a file: a tombstone
    checkpoint(table)
    writer = txnlog.Table(str(root))
    assert writer.snapshot().version == 5  # built on checkpoint 5
    other = txnlog.Table(str(root))
    for i in range(10, 14):
        other.append(rows([i]))
    expire(other, retain_min=4, older_than=0)  # checkpoints 6, deletes checkpoint 5 and commits 0..5
    assert not (root / classic_checkpoint_path(5)).exists() and (root / classic_checkpoint_path(6)).exists()

    writer.append(rows([NEW_ID]))  # advances the cached state from checkpoint 5
    snap = writer.snapshot()
    assert snap.tombstones().num_rows == 1
    assert snap.checkpoint().version == snap.version
    assert check_table(str(root), acknowledged={NEW_ID}) == [*BEFORE, 10, 11, 12, 13, NEW_ID]


def test_vacuum_rereads_the_log_when_expiry_removes_a_commit_under_it(table_root: Path) -> None:
    """Found by the load run: vacuum listed the log, a concurrent expiry deleted commits, and
    vacuum's read of them failed. It reads the log again instead (ObjectNotFoundError is what a
    store raises for a commit deleted between listing and reading)."""
    from txnlog.errors import ObjectNotFoundError

    uri = str(table_root)
    store = FaultInjectingStore(open_store(uri))
    # Commit 3 is read once to open the table, then again by vacuum's walk over the log.
    rule = store.fail(
        "read", commit_path(3), skip=1, error=lambda op, path: ObjectNotFoundError(f"{path} is gone", path=path)
    )
    result = clean(txnlog.Table(uri, store=store))
    assert rule.fired == 1
    assert result.end_version is not None
    assert check_table(uri, acknowledged=set()) == BEFORE


@pytest.mark.parametrize("vanishing", [commit_path(3), classic_checkpoint_path(5)])
def test_a_log_file_vanishing_under_a_read_is_read_again(table_root: Path, vanishing: str) -> None:
    """Found by the second load run: a fresh reader listed the log, a concurrent expiry deleted
    a commit or checkpoint, and the read failed. The log is listed again instead."""
    from txnlog.errors import ObjectNotFoundError

    checkpoint(txnlog.Table(str(table_root)))
    uri = str(table_root)
    store = FaultInjectingStore(open_store(uri))
    gone = lambda op, path: ObjectNotFoundError(f"{path} is gone", path=path)  # noqa: E731
    operation = "open_input" if "checkpoint" in vanishing else "read"
    rule = store.fail(operation, vanishing, error=gone)
    if operation == "read":
        (table_root / classic_checkpoint_path(5)).unlink()  # so that commit 3 is read
    snap = txnlog.Table(uri, store=store).snapshot()
    assert rule.fired == 1 and snap.version == 5
    assert ids_by_txnlog(uri) == BEFORE


def test_a_commit_is_never_written_into_an_expired_version(tmp_path: Path) -> None:
    """Issue 28: a transaction reads version R and writes its data; meanwhile 70 commits land and
    log expiry (60 versions kept, whatever their age) deletes commits 0..20, R+1 among them.
    The commit's first attempt at R+1 used to succeed (the file was gone), below the earliest
    checkpoint where no reader looks: acknowledged and lost. Now it fails, with nothing
    written, and the table keeps every acknowledged row."""
    root = tmp_path / "t"
    table = base_table(root)  # version 5
    txn = table.transaction()
    txn.write(rows([NEW_ID]))
    other = txnlog.Table(str(root))
    for i in range(10, 80):
        other.append(rows([i]))
    expired = expire(other, retain_min=60, older_than=0, limit=1000)
    assert expired.earliest_after > 6 and not (root / commit_path(6)).exists()

    with pytest.raises(CommitFailedError, match="removed by log expiry") as info:
        txn.commit()
    assert info.value.version == 6 and info.value.orphan_files
    assert not (root / commit_path(6)).exists()
    assert check_table(str(root), acknowledged=set(range(10, 80))) == [*BEFORE, *range(10, 80)]


def test_a_commit_reading_from_a_checkpoint_whose_commit_expired_still_lands(tmp_path: Path) -> None:
    """The check above looks for the version before the attempt as a commit or a checkpoint:
    a snapshot read at a checkpointed version whose commit file was expired is no hazard."""
    root = tmp_path / "t"
    table = base_table(root)
    for i in range(10, 20):
        table.append(rows([i]))
    expire(table, retain_min=1, older_than=0)  # keeps only the latest version, from its checkpoint
    latest = table.latest_version()
    (root / commit_path(latest)).unlink()  # as a checkpoint-only version: its commit is gone
    assert table.append(rows([NEW_ID])) == latest + 1
    assert check_table(str(root), acknowledged={NEW_ID}) == [*BEFORE, *range(10, 20), NEW_ID]
