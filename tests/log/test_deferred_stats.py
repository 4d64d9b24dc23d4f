"""A snapshot opened from a checkpoint leaves the files' stats in it until they are asked for.

Each answer is compared with the same table read from its JSON commits alone (the checkpoint
removed from a copy), where every stat is parsed eagerly.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txnlog
from txnlog.log import checkpoint_reader
from txnlog.log.filenames import LAST_CHECKPOINT, LOG_DIR

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("part", pa.string())])


def _rows(start: int, n: int, part: str) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids], "part": [part] * n}, schema=SCHEMA)


def _build(tmp_path: Path, properties: dict[str, str] | None = None) -> str:
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["part"], properties=properties or {})
    for i in range(12):
        table.append(_rows(i * 10, 10, f"p{i % 3}"))
    table.snapshot().checkpoint()
    # After the checkpoint: removes of checkpointed files, new files.
    with table.transaction(operation="DELETE") as txn:
        txn.remove_files(txn.filter_files("part = 'p1' AND id < 40"))
    table.append(_rows(1000, 5, "p2"))
    return uri


def _json_only(uri: str, tmp_path: Path) -> str:
    copy = str(tmp_path / "json-only")
    shutil.copytree(uri, copy)
    log_dir = os.path.join(copy, LOG_DIR)
    for name in os.listdir(log_dir):
        if ".checkpoint" in name or name == LAST_CHECKPOINT:
            os.unlink(os.path.join(log_dir, name))
    return copy


def _by_path(files: pa.Table) -> pa.Table:
    return files.sort_by("path")


class _CountingLoads:
    """Counts the stats rows read from checkpoints (the reads themselves are real)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        load = checkpoint_reader.CheckpointStats.load

        def counted(source: checkpoint_reader.CheckpointStats, rows: pa.Array, keys: pa.Array) -> pa.ChunkedArray:
            self.rows += len(rows)
            return load(source, rows, keys)

        monkeypatch.setattr(checkpoint_reader.CheckpointStats, "load", counted)


def test_files_with_and_without_stats_match_the_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _build(tmp_path)
    expected = _by_path(txnlog.Table(_json_only(uri, tmp_path)).snapshot().files())
    loads = _CountingLoads(monkeypatch)
    snap = txnlog.Table(uri).snapshot()
    assert snap.state.pending_stats is not None  # opened from the checkpoint, stats left there

    without = snap.files(stats=False)
    assert "stats" not in without.column_names and loads.rows == 0
    assert _by_path(without).equals(expected.drop_columns(["stats"]))
    assert snap.num_files == expected.num_rows

    assert _by_path(snap.files()).equals(expected)
    assert 0 < loads.rows < expected.num_rows  # only the files still live from the checkpoint
    assert all(orjson.loads(s)["numRecords"] in (5, 10) for s in snap.files().column("stats").to_pylist())


@pytest.mark.parametrize("predicate", ["part = 'p0'", "part = 'p0' AND id >= 30", "id > 105", "name = 'n3'", "id < 0"])
def test_a_predicate_reads_only_the_stats_partitions_keep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, predicate: str
) -> None:
    uri = _build(tmp_path)
    json_snap = txnlog.Table(_json_only(uri, tmp_path)).snapshot()
    expected = _by_path(json_snap.files(predicate))
    loads = _CountingLoads(monkeypatch)
    snap = txnlog.Table(uri).snapshot()
    assert _by_path(snap.files(predicate)).equals(expected)
    assert _by_path(snap.files(predicate, stats=False)).equals(expected.drop_columns(["stats"]))
    if predicate.startswith("part = 'p0'"):
        live_from_checkpoint = len(snap.state.pending_stats.rows)  # type: ignore[union-attr]
        assert loads.rows <= 2 * (live_from_checkpoint // 3 + 1)  # p0's share, asked twice
    # The transaction's read goes the same way and records what it read.
    with txnlog.Table(uri).transaction() as txn:
        assert _by_path(txn.filter_files(predicate)).equals(expected)
        txn.abort()


def test_stats_stay_right_as_the_snapshot_moves_forward(tmp_path: Path) -> None:
    uri = _build(tmp_path)
    table = txnlog.Table(uri)
    snap = table.snapshot()
    with table.transaction(operation="DELETE") as txn:
        txn.remove_files(txn.filter_files("part = 'p2' AND id < 60"))
    table.append(_rows(2000, 3, "p0"))
    moved = snap.update()
    assert moved.version == snap.version + 2 and moved.state.pending_stats is not None
    json_snap = txnlog.Table(_json_only(uri, tmp_path)).snapshot()
    assert _by_path(moved.files()).equals(_by_path(json_snap.files()))
    assert _by_path(moved.files("id >= 2000")).equals(_by_path(json_snap.files("id >= 2000")))


def test_a_checkpoint_deleted_after_opening_is_read_around(tmp_path: Path) -> None:
    uri = _build(tmp_path)
    expected = _by_path(txnlog.Table(_json_only(uri, tmp_path)).snapshot().files())
    snap = txnlog.Table(uri).snapshot()
    log_dir = os.path.join(uri, LOG_DIR)
    for name in os.listdir(log_dir):
        if ".checkpoint" in name:
            os.unlink(os.path.join(log_dir, name))  # a log expiry between open and use
    assert _by_path(snap.files()).equals(expected)


def test_stats_written_only_as_a_struct_are_read_back_as_json(tmp_path: Path) -> None:
    uri = _build(tmp_path, {"delta.checkpoint.writeStatsAsJson": "false", "delta.checkpoint.writeStatsAsStruct": "true"})
    expected = _by_path(txnlog.Table(_json_only(uri, tmp_path)).snapshot().files())
    got = _by_path(txnlog.Table(uri).snapshot().files())
    assert got.drop_columns(["stats"]).equals(expected.drop_columns(["stats"]))
    for ours, theirs in zip(got.column("stats").to_pylist(), expected.column("stats").to_pylist()):
        assert orjson.loads(ours) == orjson.loads(theirs)


def test_fields_a_row_group_leaves_null_are_skipped_and_the_others_read(tmp_path: Path) -> None:
    """Row groups whose statistics say a field is null throughout are not decoded for it; the
    groups that hold it still give it (tags here, as delta-rs and Spark write null counts)."""

    from txnlog.log.actions import AddFile

    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["part"])
    for i in range(4):
        with table.transaction() as txn:
            txn.add_files([
                AddFile(path=f"part=p{i}/f{i}-{j}.parquet", partition_values={"part": f"p{i}"}, size=10 + j,
                        modification_time=1, stats='{"numRecords":1}', tags={"origin": f"t{j}"} if i == 2 else None)
                for j in range(3)
            ])
    table.snapshot().checkpoint()
    log_dir = os.path.join(uri, LOG_DIR)
    (name,) = [n for n in os.listdir(log_dir) if n.endswith(".checkpoint.parquet")]
    checkpoint = os.path.join(log_dir, name)
    rows = pq.read_table(checkpoint)
    pq.write_table(rows, checkpoint, row_group_size=3, write_statistics=True)  # a group per commit's adds
    assert pq.ParquetFile(checkpoint).metadata.num_row_groups > 2
    expected = _by_path(txnlog.Table(_json_only(uri, tmp_path)).snapshot().files())
    got = _by_path(txnlog.Table(uri).snapshot().files())
    assert got.equals(expected)
    assert sorted(t for t in got.column("tags").to_pylist() if t) == [[("origin", f"t{j}")] for j in range(3)]


# --- a checkpoint replaced between opening a snapshot and reading its stats (issue 28) ---------


def _checkpoint_path(uri: str) -> str:
    log_dir = os.path.join(uri, LOG_DIR)
    (name,) = [n for n in os.listdir(log_dir) if n.endswith(".checkpoint.parquet")]
    return os.path.join(log_dir, name)


def _reversed(group: pa.Table) -> pa.Table:
    return group.take(pa.array(range(group.num_rows - 1, -1, -1)))


def _rewrite(path: str, transform: Callable[[pa.Table], pa.Table], row_group_size: int | None = None) -> None:
    """Replace ``path`` as another writer would: a new file renamed over it, each row group
    transformed (same boundaries unless ``row_group_size`` is given)."""
    pf = pq.ParquetFile(path)
    groups = [transform(pf.read_row_group(g)) for g in range(pf.metadata.num_row_groups)]
    tmp = path + ".replacement"
    with pq.ParquetWriter(tmp, pf.schema_arrow) as writer:
        for group in groups:
            writer.write_table(group, row_group_size=row_group_size or max(1, group.num_rows))
    os.replace(tmp, path)


def _num_records(files: pa.Table) -> dict[str, int]:
    return {p: orjson.loads(s)["numRecords"] for p, s in zip(files.column("path").to_pylist(), files.column("stats").to_pylist())}


def _two_group_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, int]]:
    """A partitioned table of 6 files of 1..6 rows whose checkpoint holds its adds in 2 row
    groups, and each file's true numRecords (from its commits)."""
    from txnlog.log import checkpoint_writer

    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["part"], properties={"delta.checkpointInterval": "1000"})
    for i in range(6):
        table.append(_rows(i * 10, i + 1, f"p{i % 3}"))
    with monkeypatch.context() as patch:
        patch.setattr(checkpoint_writer, "CHUNK_ROWS", 3)
        table.snapshot().checkpoint()
    pf = pq.ParquetFile(_checkpoint_path(uri))
    adds = [pf.read_row_group(g, columns=["add.path"]).column("add") for g in range(pf.metadata.num_row_groups)]
    assert sum(1 for a in adds if a.null_count < len(a)) == 2
    truth = _num_records(txnlog.Table(_json_only(uri, tmp_path)).snapshot().files())
    assert sorted(truth.values()) == [1, 2, 3, 4, 5, 6]
    return uri, truth


def test_stats_stay_with_their_files_when_the_checkpoint_is_replaced_in_another_row_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The experiment of issue 28: open a snapshot, replace its checkpoint with the same actions,
    each row group's rows reversed, then list the files. Before the fix every file got another
    file's numRecords, silently."""
    uri, truth = _two_group_checkpoint(tmp_path, monkeypatch)
    snap, pruned = txnlog.Table(uri).snapshot(), txnlog.Table(uri).snapshot()
    assert snap.state.pending_stats is not None
    _rewrite(_checkpoint_path(uri), _reversed)
    assert _num_records(snap.files()) == truth
    # Through a predicate: only the stats of the files partition values keep are read.
    assert _num_records(pruned.files("part = 'p1'")) == {p: n for p, n in truth.items() if "part=p1" in p}


def test_stats_stay_with_their_files_when_the_replacement_has_other_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, truth = _two_group_checkpoint(tmp_path, monkeypatch)
    snap = txnlog.Table(uri).snapshot()
    _rewrite(_checkpoint_path(uri), _reversed, row_group_size=2)
    assert _num_records(snap.files()) == truth


def test_stats_stay_with_their_files_when_delta_rs_replaces_the_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """delta-rs (1.6.6) writes its checkpoint over one of the same version that appeared after it
    listed the log (its post-commit checkpoint at every 100th version racing txnlog's). Played
    here in order: txnlog's checkpoint and hint are moved aside while delta-rs lists the log, and
    delta-rs writes its own, in its own row order, where txnlog's was."""
    from deltalake import DeltaTable

    uri, truth = _two_group_checkpoint(tmp_path, monkeypatch)
    path, hint = _checkpoint_path(uri), os.path.join(uri, LAST_CHECKPOINT)
    snap = txnlog.Table(uri).snapshot()
    ours = pq.read_table(path, columns=["add"]).column("add").to_pylist()
    os.rename(path, path + ".aside")
    os.rename(hint, hint + ".aside")
    DeltaTable(uri).create_checkpoint()
    theirs = pq.read_table(path, columns=["add"]).column("add").to_pylist()
    assert sorted(r["path"] for r in ours if r) == sorted(r["path"] for r in theirs if r)
    assert [r["path"] for r in ours if r] != [r["path"] for r in theirs if r]
    assert _num_records(snap.files()) == truth


def test_a_replacement_that_lacks_a_file_is_not_used_for_stats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of other content in the checkpoint's place (one add row fewer): no stats are taken
    from it by position or by key; it counts as an unreadable checkpoint, which the snapshot
    reads around."""
    uri, _truth = _two_group_checkpoint(tmp_path, monkeypatch)
    state = txnlog.Table(uri).snapshot().state
    pending = state.pending_stats
    assert pending is not None
    path = _checkpoint_path(uri)
    rows = pq.read_table(path)
    dropped = next(i for i, add in enumerate(rows.column("add").to_pylist()) if add)
    pq.write_table(rows.take([i for i in range(rows.num_rows) if i != dropped]), path + ".x")
    os.replace(path + ".x", path)
    with pytest.raises(txnlog.errors.CorruptCheckpointError, match="no longer lists file"):
        pending.source.load(pending.rows, state.file_keys().slice(0, len(pending.rows)))
