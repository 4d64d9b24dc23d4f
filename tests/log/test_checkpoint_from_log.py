"""checkpoint_from_log: a checkpoint written from the previous checkpoint streamed row group by
row group plus the commits after it, without opening a snapshot. It must hold exactly what a
checkpoint of the replayed snapshot holds, whatever the previous checkpoint's layout (classic,
multi-part, V2 with sidecars) and whatever the commits did to its files."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import txnlog
from txnlog.errors import CorruptCheckpointError, LogCorruptError, TxnLogError
from txnlog.log import checkpoint_writer
from txnlog.log.actions import DeletionVectorDescriptor, DomainMetadata, Protocol, RemoveFile, Txn
from txnlog.log.checkpoint_writer import checkpoint_from_log, write_checkpoint
from txnlog.log.file_actions import file_keys
from txnlog.log.filenames import LOG_DIR, classic_checkpoint_path, parse_checkpoint
from txnlog.log.replay import replay
from txnlog.log.segment import LogSegment, list_log
from txnlog.storage import open_store

NOW_MS = 1_800_000_000_000
DAY_MS = 86_400_000


def _files(table: Any) -> list[dict[str, Any]]:
    rows = table.take(pc.sort_indices(file_keys(table))).to_pylist()
    for row in rows:
        row["stats"] = orjson.loads(row["stats"]) if row.get("stats") else None
    return rows


def _checkpoint_alone(uri: str, version: int) -> txnlog.log.table_state.TableState:
    """The state the checkpoint at ``version`` describes, read without any commit."""
    store = open_store(uri)
    parts = list_log(store, version).complete_checkpoint(version)
    assert parts, f"no checkpoint at {version}"
    return replay(store, LogSegment(version, parts, []))


def _assert_same(state: Any, snapshot: txnlog.Snapshot) -> None:
    assert state.version == snapshot.version
    assert state.protocol == snapshot.protocol and state.metadata == snapshot.metadata
    assert _files(state.files) == _files(snapshot.files())
    # Checkpoint tombstones carry no stats or tags (they only serve VACUUM).
    dropped = ("stats", "tags")
    assert _files(state.tombstones().drop_columns(list(dropped))) == _files(snapshot.tombstones().drop_columns(list(dropped)))
    assert {k: v.version for k, v in state.app_transactions.items()} == {k: v.version for k, v in snapshot.app_transactions.items()}
    assert {k: v.configuration for k, v in state.domains.items()} == {k: v.configuration for k, v in snapshot.domains.items()}


def _dv(n: int) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor(storage_type="u", path_or_inline_dv=f"ab^-aqEH.-t@S}}K{n:08d}", size_in_bytes=34, cardinality=n, offset=1)


def _busy_table(writer: Any, **create: Any) -> None:
    """A checkpoint at version 2, then commits that remove, re-add, replace with a DV, and
    touch app transactions and domains."""
    writer.create(Txn("app", 1, NOW_MS), DomainMetadata("keep", "{}"), DomainMetadata("gone", "{}"), **create)
    writer.commit(1, *(writer.add(f"part={i % 3}/f{i}.parquet", num_records=i, partition_values={"part": str(i % 3)}) for i in range(30)))
    writer.commit(2, *(RemoveFile(f"part={i % 3}/f{i}.parquet", deletion_timestamp=NOW_MS - i * DAY_MS) for i in range(0, 30, 5)))
    write_checkpoint(txnlog.Table(writer.uri).snapshot(), now_ms=0)
    writer.commit(
        3,
        RemoveFile("part=1/f1.parquet", deletion_timestamp=NOW_MS),
        writer.add("part=1/f1.parquet", num_records=100, partition_values={"part": "1"}, deletion_vector=_dv(3)),
        writer.add("part=0/f0.parquet", num_records=5, partition_values={"part": "0"}),  # re-added tombstone
        RemoveFile("part=2/f2.parquet", deletion_timestamp=NOW_MS),
        Txn("app", 2, NOW_MS),
        Txn("other", 9, NOW_MS),
    )
    writer.commit(
        4,
        writer.add("part=0/new.parquet", num_records=7, partition_values={"part": "0"}),
        RemoveFile("part=0/f3.parquet", deletion_timestamp=NOW_MS),
        DomainMetadata("gone", "", removed=True),
    )
    writer.commit(5, writer.add("part=0/f3.parquet", num_records=8, partition_values={"part": "0"}), RemoveFile("part=0/new.parquet", deletion_timestamp=NOW_MS))


V2 = Protocol(3, 7, ("v2Checkpoint", "deletionVectors"), ("v2Checkpoint", "domainMetadata", "deletionVectors"))


@pytest.mark.parametrize(
    "layout",
    ["classic", "classic-stats-as-struct", "multi-part", "v2-sidecars"],
)
def test_agrees_with_a_checkpoint_of_the_replayed_snapshot(
    layout: str, log_writer: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = log_writer()
    protocol = Protocol(3, 7, ("deletionVectors",), ("domainMetadata", "deletionVectors"))
    configuration: dict[str, str] = {}
    if layout == "classic-stats-as-struct":
        configuration = {"delta.checkpoint.writeStatsAsStruct": "true", "delta.checkpoint.writeStatsAsJson": "false"}
    if layout == "v2-sidecars":
        protocol = V2
        configuration = {"delta.checkpointPolicy": "v2"}
        monkeypatch.setattr(checkpoint_writer, "CHUNK_ROWS", 4)
        monkeypatch.setattr(checkpoint_writer, "SIDECAR_MAX_ROWS", 8)
    _busy_table(writer, protocol=protocol, partition_columns=("part",), configuration=configuration)
    if layout == "multi-part":
        _split_checkpoint(writer.uri, 2, parts=3)
    before = txnlog.Table(writer.uri).snapshot()
    assert before.version == 5

    def no_full_replay(*args: Any) -> None:
        raise AssertionError("the previous checkpoint should have been streamed, not the log replayed")

    monkeypatch.setattr(checkpoint_writer, "replay", no_full_replay)
    result = checkpoint_from_log(open_store(writer.uri), now_ms=0)
    monkeypatch.undo()

    assert result.version == 5 and result.num_add_files == before.num_files
    _assert_same(_checkpoint_alone(writer.uri, 5), before)
    if layout == "v2-sidecars":
        assert len(result.paths) > 2  # several sidecars: the previous ones were streamed too
    # The same table checkpointed from the materialized snapshot holds the same state.
    other = str(Path(writer.uri).parent / "other")
    shutil.copytree(writer.uri, other)
    for name in os.listdir(Path(other, LOG_DIR)):
        if name.startswith(f"{5:020d}.checkpoint"):
            os.unlink(Path(other, LOG_DIR, name))
    write_checkpoint(txnlog.Table(other).snapshot(), now_ms=0)
    assert _files(_checkpoint_alone(other, 5).files) == _files(_checkpoint_alone(writer.uri, 5).files)
    # delta-rs reads it too (it lists files of v2Checkpoint tables, not their data).
    if "deletionVectors" not in (protocol.reader_features or ()):
        assert sorted(DeltaTable(writer.uri).file_uris()) == sorted(before.file_uris())


def _split_checkpoint(uri: str, version: int, parts: int) -> None:
    """Replace the classic checkpoint at ``version`` by a multi-part one with the same rows."""
    log = Path(uri, LOG_DIR)
    classic = Path(uri, classic_checkpoint_path(version))
    table = pq.read_table(classic)
    classic.unlink()
    size = -(-table.num_rows // parts)
    for i in range(parts):
        name = f"{version:020d}.checkpoint.{i + 1:010d}.{parts:010d}.parquet"
        pq.write_table(table.slice(i * size, size), log / name)
    assert parse_checkpoint(str(log / name)) is not None


def test_retention_drops_old_tombstones_from_both_sources(log_writer: Callable[..., Any]) -> None:
    writer = log_writer()
    _busy_table(writer, partition_columns=("part",))
    result = checkpoint_from_log(open_store(writer.uri), now_ms=NOW_MS)  # 7-day default retention
    state = _checkpoint_alone(writer.uri, result.version)
    deleted = state.tombstones().column("deletion_timestamp").to_pylist()
    assert deleted and all(t >= NOW_MS - 7 * DAY_MS for t in deleted)
    snapshot = txnlog.Table(writer.uri).snapshot()
    assert _files(state.files) == _files(snapshot.files())


def test_an_earlier_version_and_an_existing_checkpoint(log_writer: Callable[..., Any]) -> None:
    writer = log_writer()
    _busy_table(writer, partition_columns=("part",))
    first = checkpoint_from_log(open_store(writer.uri), 4, now_ms=0)
    _assert_same(_checkpoint_alone(writer.uri, 4), txnlog.Table(writer.uri).snapshot(4))
    assert checkpoint_from_log(open_store(writer.uri), 4, now_ms=0) == first  # kept, not rewritten
    # The next one builds on the checkpoint at 4.
    checkpoint_from_log(open_store(writer.uri), now_ms=0)
    _assert_same(_checkpoint_alone(writer.uri, 5), txnlog.Table(writer.uri).snapshot())


def test_without_an_earlier_checkpoint_the_log_is_replayed(log_writer: Callable[..., Any]) -> None:
    writer = log_writer()
    writer.create(partition_columns=("part",))
    writer.commit(1, *(writer.add(f"part=a/f{i}.parquet", partition_values={"part": "a"}) for i in range(5)))
    checkpoint_from_log(open_store(writer.uri), now_ms=0)
    _assert_same(_checkpoint_alone(writer.uri, 1), txnlog.Table(writer.uri).snapshot())


def test_a_corrupt_commit_is_named(log_writer: Callable[..., Any]) -> None:
    writer = log_writer()
    _busy_table(writer, partition_columns=("part",))
    writer.commit(6, {"add": {"path": "part=0/x.parquet", "partitionValues": {"part": "0"}, "size": -5, "modificationTime": 1, "dataChange": True}})
    with pytest.raises(LogCorruptError, match="00000000000000000006.json"):
        checkpoint_from_log(open_store(writer.uri), now_ms=0)
    assert list_log(open_store(writer.uri)).complete_checkpoint(6) is None


# --- the conformance corpus --------------------------------------------------------------------


def conformance_cases(root: Path, test_name: str) -> list[Any]:
    tables = root / "tables"
    names = sorted(str(p.parent.relative_to(tables)) for p in tables.rglob("_delta_log"))
    return [pytest.param(name, id=name) for name in names]


def _writable_copy(src: Path, dst: str) -> None:
    shutil.copytree(src, dst)
    for root, _dirs, files in os.walk(dst):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)


def test_corpus_at_every_version_after_a_checkpoint(tmp_path: Path, conformance_dir: Path, conformance_case: str) -> None:
    """Each version after the table's first checkpoint (one written here at its first version
    if it has none), checkpointed from the newest
    checkpoint below it (so later ones chain on earlier ones written here), equals the
    snapshot of the original table at that version."""
    source = conformance_dir / "tables" / conformance_case
    original = txnlog.Table(source)
    try:
        latest = original.snapshot().version
    except TxnLogError as e:
        pytest.skip(f"txnlog cannot open {conformance_case}: {type(e).__name__}")
    path = str(tmp_path / "t")
    _writable_copy(source, path)
    store = open_store(path)
    listing = list_log(store)
    checkpointed = sorted(v for v in listing.checkpoints if listing.complete_checkpoint(v))
    if checkpointed:
        first = checkpointed[0]
    else:  # checkpoint the first version txnlog reads, then stream from there
        readable = []
        for v in sorted(listing.commits):
            try:
                readable.append(original.snapshot(v))
                break
            except TxnLogError:
                continue
        if not readable:
            pytest.skip(f"txnlog reads no version of {conformance_case}")
        first = readable[0].version
        write_checkpoint(store, readable[0].state, now_ms=0)
    done = 0
    for version in range(first + 1, latest + 1):
        try:
            expected = original.snapshot(version)
        except TxnLogError:
            continue
        checkpoint_from_log(store, version, now_ms=0)
        _assert_same(_checkpoint_alone(path, version), expected)
        done += 1
    if not done:
        pytest.skip(f"{conformance_case}: nothing after its checkpoint")


def test_non_file_actions_anywhere_in_a_many_row_group_checkpoint(log_writer: Callable[..., Any]) -> None:
    """Other writers may put protocol, metaData and txn rows after the file rows: the reader
    finds them in whichever row group they are, both when opening and when streaming."""
    writer = log_writer()
    writer.create(Txn("app", 3, NOW_MS), partition_columns=("part",))
    writer.commit(1, *(writer.add(f"part=a/f{i}.parquet", partition_values={"part": "a"}) for i in range(50)))
    write_checkpoint(txnlog.Table(writer.uri).snapshot(), now_ms=0)
    path = Path(writer.uri, classic_checkpoint_path(1))
    rows = pq.read_table(path)
    is_file = pc.is_valid(rows.column("add"))
    # File rows first, the three other actions last, in row groups of 7 rows.
    reordered = pa.concat_tables([rows.filter(is_file), rows.filter(pc.invert(is_file))])
    pq.write_table(reordered, path, row_group_size=7)
    assert pq.ParquetFile(path).metadata.num_row_groups > 5
    snapshot = txnlog.Table(writer.uri).snapshot()
    assert snapshot.app_transaction_version("app") == 3 and snapshot.num_files == 50
    writer.commit(2, writer.add("part=a/late.parquet", partition_values={"part": "a"}))
    checkpoint_from_log(open_store(writer.uri), now_ms=0)
    _assert_same(_checkpoint_alone(writer.uri, 2), txnlog.Table(writer.uri).snapshot())


def test_an_unreadable_previous_checkpoint_fails_cleanly(log_writer: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A sidecar lost after the top-level file was listed: the error names it, no checkpoint
    appears, and the read-ahead thread is gone."""
    monkeypatch.setattr(checkpoint_writer, "CHUNK_ROWS", 4)
    monkeypatch.setattr(checkpoint_writer, "SIDECAR_MAX_ROWS", 8)
    writer = log_writer()
    _busy_table(writer, protocol=V2, partition_columns=("part",), configuration={"delta.checkpointPolicy": "v2"})
    sidecars = sorted(Path(writer.uri, LOG_DIR, "_sidecars").iterdir())
    assert len(sidecars) >= 3
    sidecars[-1].unlink()  # the first ones stream fine, then this one is missing
    with pytest.raises(CorruptCheckpointError, match=sidecars[-1].name):
        checkpoint_from_log(open_store(writer.uri), now_ms=0)
    assert list_log(open_store(writer.uri)).complete_checkpoint(5) is None
    assert not [t for t in threading.enumerate() if t.name == "txnlog-checkpoint-read"]
