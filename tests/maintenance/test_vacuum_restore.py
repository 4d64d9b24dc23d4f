"""VACUUM and RESTORE: what goes and what stays, the safety check, the commits they record,
refusing hostile log entries, and deltalake reading the result as txnlog does."""

from __future__ import annotations

import logging
import os
import time

import orjson
import pyarrow as pa
import pytest

import txnlog
from txnlog.errors import CorruptCheckpointError, MissingFilesError, RetentionCheckError, UnsafePathError
from txnlog.log.actions import RemoveFile
from txnlog.maintenance import expire, restore, tags, vacuum

from .conftest import DAY_MS, age, build, commit_versions, read_with_both


def _root(table: txnlog.Table) -> str:
    return table.uri.removeprefix("file://")


def _touch(table: txnlog.Table, relative: str, data: bytes = b"x" * 10, days_old: float = 0) -> str:
    path = os.path.join(_root(table), relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    if days_old:
        stamp = time.time() - days_old * 86_400
        os.utime(path, (stamp, stamp))
    return path


def _delete_rows(table: txnlog.Table, where: str) -> None:
    with table.transaction("DELETE") as txn:
        txn.remove_files(txn.filter_files(where))


def _exists(table: txnlog.Table, relative: str) -> bool:
    return os.path.exists(os.path.join(_root(table), relative))


def test_vacuum_deletes_old_orphans_and_old_tombstones_only(table_path):
    table = build(table_path, 6)
    removed = table.snapshot().files("part = 'b'").column("path").to_pylist()
    _delete_rows(table, "part = 'b'")  # version 7 removes the 'b' files
    age(table, range(8), days=60)
    expire(table, retain_min=1, limit=100)  # only version 7 is retained now
    old_orphan = "part=a/part-orphan-old.parquet"
    young_orphan = "part=a/part-orphan-young.parquet"
    _touch(table, old_orphan, days_old=10)
    _touch(table, young_orphan)
    _touch(table, "_txnlog/notes.json", days_old=30)
    _touch(table, ".hidden/x", days_old=30)
    _touch(table, "metadata/v1.metadata.json", days_old=30)
    live = table.snapshot().files().column("path").to_pylist()
    for p in [*live, *removed]:
        os.utime(os.path.join(_root(table), p), (time.time() - 30 * 86_400,) * 2)

    # Tombstones are 0 days old: only the old orphan goes with the default 7 days.
    result = vacuum(table)
    assert result.files == (old_orphan,) and result.bytes == 10
    assert not _exists(table, old_orphan) and _exists(table, young_orphan)
    # Eight days on, the tombstones are past the horizon too; the young orphan still is not.
    later = int(time.time() * 1000) + 8 * DAY_MS
    dry = vacuum(table, dry_run=True, now_ms=later)
    assert set(dry.files) == set(removed) | {young_orphan}
    assert dry.bytes == sum(os.path.getsize(os.path.join(_root(table), p)) for p in dry.files)
    assert all(_exists(table, p) for p in dry.files)  # a dry run deletes nothing
    assert vacuum(table, now_ms=later).files == dry.files
    for p in live:
        assert _exists(table, p)
    for p in ("_txnlog/notes.json", ".hidden/x", "metadata/v1.metadata.json"):
        assert _exists(table, p)
    ours, theirs, our_ids, their_ids = read_with_both(table.uri, table.latest_version())
    assert ours == theirs == set(live) and our_ids == their_ids


def test_vacuum_keeps_files_of_retained_and_tagged_versions(table_path):
    table = build(table_path, 4)
    tagged_files = table.snapshot(2).files().column("path").to_pylist()
    tags.create(table, "v2", 2)
    _delete_rows(table, "id >= 0")  # version 5 removes every file
    for p in tagged_files:
        os.utime(os.path.join(_root(table), p), (time.time() - 30 * 86_400,) * 2)
    later = int(time.time() * 1000) + 30 * DAY_MS
    # Versions 0..5 are all retained: version 4 still references every file.
    assert vacuum(table, retention="0s", force=True, now_ms=later).files == ()
    age(table, range(6), days=60)
    expire(table, retain_min=1, limit=100)
    result = vacuum(table, retention="0s", force=True, now_ms=later)
    assert result.files and not set(result.files) & set(tagged_files)  # the tag's files stay
    ours, theirs, our_ids, their_ids = read_with_both(table.uri, 2)
    assert ours == theirs == set(tagged_files) and our_ids == their_ids == [1, 2]


def test_expire_then_vacuum_on_the_same_table_object_warns_of_nothing(table_path, caplog):
    build(table_path, 25)  # checkpoints at 10 and 20
    table = txnlog.Table(str(table_path))
    _delete_rows(table, "id = 3")
    age(table, range(27), days=60)
    table.snapshot()  # the Table keeps this state, read from checkpoint 20
    with caplog.at_level(logging.INFO, logger="txnlog"):
        assert expire(table, retain_min=3).earliest_after == 24  # deletes checkpoint 20
        later = int(time.time() * 1000) + 8 * DAY_MS
        result = vacuum(table, dry_run=True, now_ms=later)
    assert result.files == ()  # the file version 26 removed is live at retained versions 24 and 25
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("vanished" in r.getMessage() for r in caplog.records)  # rebuilt, as information
    # A checkpoint that is there but unreadable still warns.
    caplog.clear()
    stale = txnlog.Table(str(table_path))
    stale.snapshot()
    checkpoint = os.path.join(_root(table), "_delta_log", f"{24:020d}.checkpoint.parquet")
    with open(checkpoint, "r+b") as f:
        f.truncate(20)
    with caplog.at_level(logging.INFO, logger="txnlog"), pytest.raises(CorruptCheckpointError):
        stale.snapshot().tombstones()  # nothing older rebuilds version 26
    assert any(r.levelno == logging.WARNING and "rebuilding" in r.getMessage() for r in caplog.records)


def test_retention_below_the_table_threshold_is_refused_without_force(table_path):
    table = build(table_path, 2)
    _touch(table, "orphan.parquet", days_old=3)
    with pytest.raises(RetentionCheckError) as e:
        vacuum(table, retention="1h")
    assert e.value.minimum_ms == 7 * DAY_MS and "--force" in str(e.value)
    assert _exists(table, "orphan.parquet") and table.latest_version() == 2
    assert vacuum(table, retention="1h", force=True).files == ("orphan.parquet",)


def test_vacuum_records_start_and_end_commits(table_path):
    table = build(table_path, 2)
    _touch(table, "orphan.parquet", b"y" * 33, days_old=30)
    result = vacuum(table)
    assert (result.start_version, result.end_version) == (3, 4)
    start, end = [h.commit_info for h in reversed(table.history(limit=2))]
    assert start.operation == "VACUUM START" and end.operation == "VACUUM END"
    assert start.operation_metrics["numFilesToDelete"] == "1" and start.operation_metrics["sizeOfDataToDelete"] == "33"
    assert start.operation_parameters["specifiedRetentionMillis"] == str(7 * DAY_MS)
    assert end.operation_parameters["status"] == "COMPLETED" and end.operation_metrics["numDeletedFiles"] == "1"
    assert vacuum(table, dry_run=True).start_version is None and table.latest_version() == 4


@pytest.mark.parametrize("hostile", ["../outside/victim.parquet", "{abs}", "file://{abs}", "s3://other-bucket/victim.parquet"])
def test_vacuum_refuses_a_log_that_names_paths_outside_the_table(tmp_path, log_writer, hostile):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.parquet"
    victim.write_bytes(b"precious")
    os.utime(victim, (0, 0))
    uri = str(tmp_path / "table")
    writer = log_writer(uri)
    writer.create()
    path = hostile.format(abs=str(victim))
    writer.commit(1, writer.add("ok.parquet"))
    writer.commit(2, RemoveFile(path=path, deletion_timestamp=0, data_change=True))
    table = txnlog.Table(uri)
    _touch(table, "orphan.parquet", days_old=30)
    with pytest.raises(UnsafePathError) as e:
        vacuum(table, retention="0s", force=True)
    assert e.value.path == path
    assert victim.read_bytes() == b"precious" and _exists(table, "orphan.parquet")
    assert table.latest_version() == 2  # not even VACUUM START


def test_restore_to_an_earlier_version(table_path):
    table = build(table_path, 5)
    _delete_rows(table, "part = 'a'")
    table.append(pa.table({"id": [99], "part": ["b"]}))
    expected = table.snapshot(3).files()
    result = restore(table, version=3)
    assert result.version == 8 and result.restored_version == 3
    assert (result.num_restored_files, result.num_removed_files) == (2, 2)  # ids 1, 3 back; 4, 99 out
    assert result.num_files_after == 3 and result.bytes_after == sum(expected.column("size").to_pylist())
    info = table.history(limit=1)[0].commit_info
    assert info.operation == "RESTORE" and info.operation_parameters["version"] == "3"
    for key in ("numRestoredFiles", "numRemovedFiles", "restoredFilesSize", "removedFilesSize", "tableSizeAfterRestore", "numOfFilesAfterRestore"):
        assert key in info.operation_metrics
    ours, theirs, our_ids, their_ids = read_with_both(table.uri, 8)
    assert ours == theirs == set(expected.column("path").to_pylist()) and our_ids == their_ids == [1, 2, 3]


def test_restore_by_timestamp(table_path):
    table = build(table_path, 3)
    stamp = table.history(limit=1)[0].timestamp
    time.sleep(0.01)
    table.append(pa.table({"id": [7], "part": ["a"]}))
    assert restore(table, timestamp=stamp).restored_version == 3
    assert table.snapshot().num_files == 3


def test_restore_refuses_when_a_file_it_needs_is_gone(table_path):
    table = build(table_path, 3)
    _delete_rows(table, "id >= 0")
    gone = table.snapshot(2).files().column("path").to_pylist()
    os.unlink(os.path.join(_root(table), gone[0]))
    with pytest.raises(MissingFilesError) as e:
        restore(table, version=2)
    assert e.value.paths == (gone[0],) and gone[0] in str(e.value)
    assert table.latest_version() == 4  # nothing committed


@pytest.mark.parametrize("hostile", ["../../x.parquet", "/etc/passwd", "file:///etc/passwd"])
def test_restore_refuses_hostile_paths(log_writer, hostile):
    writer = log_writer()
    writer.create()
    writer.commit(1, writer.add(hostile))
    writer.commit(2, writer.add("fine.parquet"), orjson.loads(orjson.dumps({"remove": {"path": hostile, "deletionTimestamp": 1, "dataChange": True}})))
    table = txnlog.Table(writer.uri)
    with pytest.raises(UnsafePathError) as e:
        restore(table, version=1)
    assert e.value.path == hostile and e.value.version == 1
    assert table.latest_version() == 2


def test_expire_vacuum_restore_then_deltalake_reads_what_txnlog_reads(table_path):
    table = build(table_path, 12)
    _delete_rows(table, "part = 'b'")  # 13
    table.append(pa.table({"id": [100, 101], "part": ["c", "c"]}))  # 14
    tags.create(table, "before-delete", 12)
    age(table, range(15), days=60)
    expire(table, retain_min=2, limit=100)  # versions 13, 14 retained; 12 kept by the tag
    later = int(time.time() * 1000) + 30 * DAY_MS
    result = vacuum(table, retention="0s", force=True, now_ms=later)
    assert result.files == ()  # everything removed is still in version 12 (tagged) or 13
    restore(table, version=12)  # re-adds the 'b' files, removes the 'c' one
    tags.delete(table, "before-delete")
    for version in (12, 13, 14, table.latest_version()):
        ours, theirs, our_ids, their_ids = read_with_both(table.uri, version)
        assert ours == theirs and our_ids == their_ids
    latest = table.latest_version()
    assert read_with_both(table.uri, latest)[2] == list(range(1, 13))
    # Vacuum now removes the 'c' file once nothing retained references it.
    age(table, commit_versions(table), days=60)
    expire(table, retain_min=1, limit=100)
    gone = vacuum(table, retention="0s", force=True, now_ms=later).files
    assert len(gone) == 1 and gone[0].startswith("part=c/")
    ours, theirs, our_ids, their_ids = read_with_both(table.uri, table.latest_version())
    assert ours == theirs and our_ids == their_ids == list(range(1, 13))


def test_vacuum_keeps_deletion_vector_files(tmp_path, log_writer):
    from txnlog.log.actions import DeletionVectorDescriptor, Protocol

    writer = log_writer(str(tmp_path / "dv"))
    writer.create(protocol=Protocol(3, 7, ("deletionVectors",), ("deletionVectors",)))
    # A 'u' descriptor: a 0-char prefix then the Z85 encoding of the UUID (as Delta writes it).
    dv = DeletionVectorDescriptor("u", "vBn[lx{q8@P<9BNH/isA", 34, 1, offset=1)
    writer.commit(1, writer.add("data.parquet", deletion_vector=dv))
    table = txnlog.Table(writer.uri)
    from txnlog.maintenance.core import dv_file_path

    dv_name = dv_file_path("u", "vBn[lx{q8@P<9BNH/isA")
    assert dv_name is not None and dv_name.startswith("deletion_vector_") and dv_name.endswith(".bin")
    _touch(table, dv_name, days_old=30)
    _touch(table, "data.parquet", days_old=30)
    _touch(table, "deletion_vector_00000000-0000-0000-0000-000000000000.bin", days_old=30)
    result = vacuum(table, retention="0s", force=True, dry_run=True)
    assert result.files == ("deletion_vector_00000000-0000-0000-0000-000000000000.bin",)
