"""What each maintenance operation guarantees to a reader (or writer) working at the same time,
txnlog's or another engine's (docs/maintenance.md, "Concurrent readers and writers"): each
guarantee played in order against real files, with deltalake (delta-rs) as the other engine.

Guarantees held elsewhere and named in the docs: checkpoints are never written over
(tests/log/test_checkpoint_writer.py), deferred stats survive a checkpoint replaced or deleted
under them (tests/log/test_deferred_stats.py), readers list the log again when expiry deletes a
file they listed (tests/reliability/test_faults.py, tests/storage), a writer never commits into
an expired version (tests/reliability/test_faults.py), a crash leaves no partial checkpoint
(tests/reliability/test_crash_ops.py).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import txnlog
from txnlog.log.filenames import LAST_CHECKPOINT, classic_checkpoint_path, commit_path
from txnlog.log.last_checkpoint import LastCheckpointHint, read_hint, write_hint
from txnlog.maintenance import checkpoint, expire, vacuum

from .conftest import SCHEMA, build, checkpoint_versions, read_with_both


def test_last_checkpoint_is_replaced_whole_under_readers(tmp_path: Path) -> None:
    """``_last_checkpoint`` is the one log file replaced in place: a reader reading it while
    writers replace it gets a whole hint, old or new, never a torn one."""
    table = build(tmp_path / "t", 3)
    store = table.store
    torn: list[bytes] = []
    stop = threading.Event()

    def read_forever() -> None:
        while not stop.is_set():
            try:
                data = store.read(LAST_CHECKPOINT)
            except txnlog.errors.ObjectNotFoundError:
                torn.append(b"<absent>")
                continue
            try:
                orjson.loads(data)
            except orjson.JSONDecodeError:
                torn.append(data)

    write_hint(store, LastCheckpointHint(version=0, size=1))
    reader = threading.Thread(target=read_forever)
    reader.start()
    try:
        for i in range(400):
            # A long hint and a short one in turn: an in-place write would show a mix.
            write_hint(store, LastCheckpointHint(version=i, size=1, size_in_bytes=10**12 if i % 2 else None))
    finally:
        stop.set()
        reader.join()
    assert not torn, torn[:3]


def test_the_hint_always_has_a_checkpoint_at_or_above_it_after_expiry(tmp_path: Path) -> None:
    """Expiry points ``_last_checkpoint`` at the new earliest version's checkpoint (or a newer
    one) before it deletes older checkpoints: delta-rs 1.6.6 refuses to open a table whose hint
    has no complete checkpoint at or above it ("Had a _last_checkpoint hint but didn't find any
    checkpoints"), as this test shows first."""
    table = build(tmp_path / "t", 25)  # the checkpoint hook wrote 10 and 20
    root = Path(table.uri.removeprefix("file://"))
    write_hint(table.store, LastCheckpointHint(version=10, size=1))
    os.rename(root / classic_checkpoint_path(20), root / "aside")
    os.rename(root / classic_checkpoint_path(10), root / "aside-10")
    with pytest.raises(Exception, match="_last_checkpoint"):
        DeltaTable(table.uri)
    assert txnlog.Table(table.uri).snapshot().version == 25  # txnlog lists the log instead
    os.rename(root / "aside", root / classic_checkpoint_path(20))
    os.rename(root / "aside-10", root / classic_checkpoint_path(10))

    result = expire(table, retain_min=3, older_than=0)
    assert result.earliest_after == 23 and checkpoint_versions(table) == [23]
    hint = read_hint(table.store)
    assert hint is not None and hint.version == 23
    assert DeltaTable(table.uri).version() == 25
    ours, theirs, _, _ = read_with_both(table.uri, 25)
    assert ours == theirs


def test_a_stale_hint_below_the_kept_checkpoints_is_harmless(tmp_path: Path) -> None:
    """Two writers racing can leave the hint naming a checkpoint expiry deleted for a moment (it
    is moved on after): with a checkpoint kept above it, both engines open the table."""
    table = build(tmp_path / "t", 25)
    expire(table, retain_min=3, older_than=0)  # deletes checkpoints 10 and 20, keeps 23
    write_hint(table.store, LastCheckpointHint(version=10, size=1))  # a writer's late, stale hint
    assert DeltaTable(table.uri).version() == 25
    assert txnlog.Table(table.uri).snapshot().version == 25


def test_a_reader_that_opened_a_retained_version_before_expiry_keeps_reading_it(tmp_path: Path) -> None:
    """A snapshot opened before expiry deleted its checkpoint gives every file of its version,
    stats included, as long as the version is retained; once expiry removed the version itself,
    asking for what it left in the checkpoint fails, naming the version."""
    table = build(tmp_path / "t", 25)
    kept, gone = txnlog.Table(table.uri).snapshot(), txnlog.Table(table.uri).snapshot()
    expected = kept.files(stats=False).sort_by("path")
    for i in range(26, 40):
        table.append(pa.table({"id": [i], "part": ["a"]}))
    expire(table, retain_min=15, older_than=0)  # keeps 25..39: checkpoint 20 goes, 25 is written
    assert checkpoint_versions(table) == [25, 30]
    assert kept.files().drop_columns(["stats"]).sort_by("path").equals(expected)
    assert all(s is not None for s in kept.files().column("stats").to_pylist())
    expire(table, retain_min=3, older_than=0)  # version 25 itself goes
    with pytest.raises(txnlog.errors.VersionNotFoundError, match="version 25"):
        gone.files()


def test_delta_rs_refuses_to_commit_once_its_read_version_is_expired(tmp_path: Path) -> None:
    """delta-rs 1.6.6 lists the log from its read version before each commit attempt, so a
    writer whose read version was expired fails ("Invalid table version") rather than write
    into an expired version. (Only the moment between that listing and its write is left
    open: docs/reliability.md.) delta-rs reads its input after it has read the table, so the
    log moves on while it does."""
    table = build(tmp_path / "t", 5)

    def batches():  # type: ignore[no-untyped-def]
        for i in range(6, 80):
            table.append(pa.table({"id": [i], "part": ["a"]}))
        expire(table, retain_min=60, older_than=0, limit=1000)
        assert not os.path.exists(os.path.join(table.uri.removeprefix("file://"), commit_path(6)))
        yield pa.record_batch({"id": pa.array([999], pa.int64()), "part": pa.array(["a"])})

    with pytest.raises(Exception, match="Invalid table version: 5"):
        write_deltalake(table.uri, pa.RecordBatchReader.from_batches(SCHEMA, batches()), mode="append")
    assert not os.path.exists(os.path.join(table.uri.removeprefix("file://"), commit_path(6)))
    assert 999 not in txnlog.Table(table.uri).snapshot().to_arrow().column("id").to_pylist()


def test_vacuum_keeps_every_file_a_retained_version_reads(tmp_path: Path) -> None:
    """A reader of any version the log still holds finds its data files after a vacuum, however
    short the retention; only versions expiry removed lose theirs."""
    table = build(tmp_path / "t", 12)
    with table.transaction("DELETE") as txn:
        txn.remove_files(txn.snapshot.files().slice(0, 6))
    reader = txnlog.Table(table.uri).snapshot(6)  # a reader at an old, retained version
    checkpoint(table)
    vacuum(table, retention=0, force=True, now_ms=int(1e13))
    assert sorted(reader.to_arrow().column("id").to_pylist()) == list(range(1, 7))
    ours, theirs, _, _ = read_with_both(table.uri, 13)
    assert ours == theirs
