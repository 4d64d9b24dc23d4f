"""Checkpoint writing, with delta-rs (deltalake) as the independent reader.

Most tests write a table with deltalake, checkpoint it with txnlog, then delete the JSON
commits the checkpoint covers, so that both deltalake and txnlog can only rebuild the table
from it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

import txnlog
from txnlog.errors import FileAlreadyExistsError, StorageError, TxnLogError
from txnlog.log import checkpoint_writer
from txnlog.log.actions import DeletionVectorDescriptor, DomainMetadata, Protocol, RemoveFile, Txn
from txnlog.log.checkpoint_writer import CheckpointResult, write_checkpoint
from txnlog.log.codec import encode_action
from txnlog.log.file_actions import file_keys
from txnlog.log.filenames import (
    LAST_CHECKPOINT,
    LOG_DIR,
    SIDECAR_DIR,
    classic_checkpoint_path,
    commit_path,
    parse_checkpoint,
)
from txnlog.log.last_checkpoint import read_hint
from txnlog.maintenance import validate
from txnlog.schema import delta_field_metadata
from txnlog.storage import open_store

DAY_MS = 86_400_000
NOW_MS = 1_800_000_000_000


# --- helpers -----------------------------------------------------------------------------------


def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "small": pa.array([i % 100 for i in ids], pa.int32()),
            "name": pa.array([f"name-{i:04d}" if i % 7 else None for i in ids]),
            "value": pa.array([i / 3 for i in ids], pa.float64()),
            "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 40) for i in ids], pa.date32()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "amount": pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
            "flag": pa.array([i % 2 == 0 for i in ids]),
            "part": pa.array([f"p{i % 3}" for i in ids]),
            "bucket": pa.array([i % 2 for i in ids], pa.int32()),
        }
    )


def _deltalake_table(path: str, *, partition_by: list[str] | None, configuration: dict[str, str] | None = None) -> None:
    """Appends, an overwrite (so there are tombstones), more appends, and an app transaction."""
    write_deltalake(
        path,
        _batch(0, 30),
        partition_by=partition_by,
        configuration=configuration,
        commit_properties=CommitProperties(app_transactions=[Transaction("stream-1", 7, NOW_MS)]),
    )
    write_deltalake(path, _batch(30, 20), mode="append")
    write_deltalake(path, _batch(100, 25), mode="overwrite")
    write_deltalake(path, _batch(200, 10), mode="append")
    write_deltalake(path, _batch(300, 10), mode="append")


def _drop_commits(path: str, through: int) -> None:
    """Delete the JSON commits up to ``through``: readers must use the checkpoint."""
    log = Path(path, LOG_DIR)
    for f in log.iterdir():
        if f.suffix in (".json", ".crc") and f.name[:20].isdigit() and int(f.name[:20]) <= through:
            f.unlink()


def _deltalake_state(path: str) -> dict[str, Any]:
    table = DeltaTable(path)
    protocol = table.protocol()
    metadata = table.metadata()
    return {
        "version": table.version(),
        "files": sorted(table.file_uris()),
        "protocol": (
            protocol.min_reader_version,
            protocol.min_writer_version,
            sorted(protocol.reader_features or []),
            sorted(protocol.writer_features or []),
        ),
        "metadata": (metadata.id, metadata.partition_columns, metadata.configuration, table.schema().to_json()),
    }


def _deltalake_rows(path: str) -> list[dict[str, Any]]:
    return DeltaTable(path).to_pyarrow_table().sort_by("id").to_pylist()


def _stats_value(value: Any) -> Any:
    """Stats, normalized: a table with writeStatsAsJson=false keeps only stats_parsed, and the
    JSON is rebuilt from there (decimals may come back as strings, timestamps spelled another
    ISO way, Spark's INT96 ones without a zone)."""
    if isinstance(value, dict):
        return {k: _stats_value(v) for k, v in value.items() if v is not None}
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
        except ValueError:
            pass
        try:
            return float(value)
        except ValueError:
            return value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _txnlog_state(snapshot: txnlog.Snapshot) -> dict[str, Any]:
    files = snapshot.files()
    files = files.take(pc.sort_indices(file_keys(files))).to_pylist()
    for f in files:
        f["stats"] = _stats_value(orjson.loads(f["stats"])) if f["stats"] else None
    return {
        "version": snapshot.version,
        "protocol": snapshot.protocol,
        "metadata": snapshot.metadata,
        "files": files,
        "txns": {k: v.version for k, v in snapshot.app_transactions.items()},
        "domains": {k: v.configuration for k, v in snapshot.domains.items()},
    }


def _tombstone_paths(snapshot: txnlog.Snapshot) -> list[str]:
    return sorted(snapshot.tombstones().column("path").to_pylist())


def _log_files(path: str) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in Path(path, LOG_DIR).rglob("*") if p.is_file())


def _checkpoint_rows(path: str, result: CheckpointResult) -> pa.Table:
    return pa.concat_tables(
        [pq.read_table(os.path.join(path, p)) for p in result.paths], promote_options="permissive"
    )


def _valid(table: pa.Table, column: str) -> list[dict[str, Any]]:
    if column not in table.column_names:
        return []
    col = table.column(column)
    return col.filter(col.is_valid()).to_pylist()


def _type_mismatches(ours: pa.DataType, theirs: pa.DataType, where: str) -> list[str]:
    """Fields both types have whose types differ (nullability and field order aside)."""
    if pa.types.is_struct(ours) and pa.types.is_struct(theirs):
        by_name = {f.name: f.type for f in theirs}
        out = []
        for f in ours:
            if f.name in by_name:
                out += _type_mismatches(f.type, by_name[f.name], f"{where}.{f.name}")
        return out
    if pa.types.is_map(ours) and pa.types.is_map(theirs):
        return _type_mismatches(ours.key_type, theirs.key_type, where + ".key") + _type_mismatches(
            ours.item_type, theirs.item_type, where + ".value"
        )
    if pa.types.is_list(ours) and pa.types.is_list(theirs):
        return _type_mismatches(ours.value_type, theirs.value_type, where + ".element")
    return [] if ours == theirs else [f"{where}: ours {ours}, theirs {theirs}"]


# --- classic checkpoints read by delta-rs ------------------------------------------------------


@pytest.mark.parametrize("partition_by", [None, ["part"]], ids=["unpartitioned", "partitioned"])
def test_deltalake_reads_the_checkpoint(tmp_path: Path, partition_by: list[str] | None) -> None:
    path = str(tmp_path / "t")
    _deltalake_table(path, partition_by=partition_by)
    before, rows = _deltalake_state(path), _deltalake_rows(path)
    snapshot = txnlog.Table(path).snapshot()

    result = write_checkpoint(snapshot)

    assert result.version == snapshot.version == before["version"]
    assert result.paths == (classic_checkpoint_path(snapshot.version),)
    written = pq.ParquetFile(os.path.join(path, result.paths[0]))
    adds = written.read(columns=["add.path"]).column("add")
    assert result.num_actions == written.metadata.num_rows
    assert result.num_add_files == len(adds) - adds.null_count == snapshot.num_files
    assert result.size_in_bytes == os.path.getsize(os.path.join(path, result.paths[0]))
    hint = read_hint(open_store(path))
    assert hint is not None and (hint.version, hint.size, hint.size_in_bytes, hint.num_of_add_files) == (
        result.version,
        result.num_actions,
        result.size_in_bytes,
        result.num_add_files,
    )

    _drop_commits(path, snapshot.version)
    assert _deltalake_state(path) == before
    assert _deltalake_rows(path) == rows
    assert DeltaTable(path).transaction_version("stream-1") == 7
    reread = txnlog.Table(path).snapshot()
    assert _txnlog_state(reread) == _txnlog_state(snapshot)
    assert _tombstone_paths(reread) == _tombstone_paths(snapshot) != []


def test_layout_matches_delta_rs_and_spark(tmp_path: Path, conformance_dir: Path) -> None:
    ours_path, theirs_path = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _deltalake_table(ours_path, partition_by=["part"])
    shutil.copytree(ours_path, theirs_path)
    result = write_checkpoint(txnlog.Table(ours_path).snapshot())
    DeltaTable(theirs_path).create_checkpoint()
    ours = pq.read_schema(os.path.join(ours_path, result.paths[0]))
    theirs = pq.read_schema(os.path.join(theirs_path, result.paths[0]))
    corpus = conformance_dir / "tables"
    # Spark 3.5.1, on a table without domain metadata; Spark 4.0; Spark 3.3 with deletion vectors.
    spark = pq.read_schema(corpus / "checkpoint-cdf-table/_delta_log/00000000000000000003.checkpoint.parquet")
    spark4 = pq.read_schema(corpus / "spark-variant-checkpoint/_delta_log/00000000000000000002.checkpoint.parquet")
    spark_dv = pq.read_schema(corpus / "table_with_deletion_logs/_delta_log/00000000000000000020.checkpoint.parquet")

    # Spark writes exactly these action columns (domainMetadata even when there is none);
    # delta-rs adds an empty `sidecar` column.
    assert set(ours.names) == set(spark.names) == set(spark4.names)
    assert set(ours.names) <= set(theirs.names)
    for other in (theirs, spark, spark4, spark_dv):
        for name in ours.names:
            if name in other.names:
                their_type = other.field(name).type
                if name == "add":  # the parsed structs follow each table's own schema
                    their_type = pa.struct([f for f in their_type if not f.name.endswith("_parsed")])
                assert _type_mismatches(ours.field(name).type, their_type, name) == []
    # Checkpoint tombstones carry neither stats nor tags, as in Spark's checkpoints.
    remove_fields = {f.name for f in ours.field("remove").type}
    assert not remove_fields & {"stats", "tags"}
    assert remove_fields >= {f.name for f in spark_dv.field("remove").type}


# --- stats_parsed and partitionValues_parsed ---------------------------------------------------


def _as_json_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _parse_json_value(value: Any, parsed: Any) -> Any:
    if isinstance(parsed, dt.datetime) and isinstance(value, str):
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(parsed, decimal.Decimal):
        return float(value)
    return value


def _assert_parsed_matches(parsed: dict[str, Any] | None, stats: dict[str, Any]) -> None:
    assert parsed is not None
    assert parsed["numRecords"] == stats["numRecords"]
    assert {k: v for k, v in parsed["nullCount"].items() if v is not None} == stats["nullCount"]
    for key in ("minValues", "maxValues"):
        got = {k: _as_json_value(v) for k, v in parsed[key].items() if v is not None}
        want = {
            k: _as_json_value(_parse_json_value(v, parsed[key][k])) for k, v in stats[key].items() if k in parsed[key]
        }
        assert got == want
        assert set(stats[key]) <= set(parsed[key])  # no statistic was lost


@pytest.mark.parametrize("as_json", ["true", "false"])
def test_stats_as_struct(tmp_path: Path, as_json: str) -> None:
    path = str(tmp_path / "t")
    config = {"delta.checkpoint.writeStatsAsStruct": "true", "delta.checkpoint.writeStatsAsJson": as_json}
    _deltalake_table(path, partition_by=["day", "bucket"], configuration=config)
    before, rows = _deltalake_state(path), _deltalake_rows(path)
    before_adds = pa.table(DeltaTable(path).get_add_actions(flatten=True)).sort_by("path")
    snapshot = txnlog.Table(path).snapshot()
    original_stats = {r["path"]: orjson.loads(r["stats"]) for r in snapshot.files().to_pylist()}

    result = write_checkpoint(snapshot)

    adds = _valid(_checkpoint_rows(path, result), "add")
    assert len(adds) == snapshot.num_files
    for add in adds:
        assert ("stats" in add) == (as_json == "true")
        _assert_parsed_matches(add["stats_parsed"], original_stats[add["path"]])
        values = dict(add["partitionValues"])
        assert add["partitionValues_parsed"] == {
            "day": dt.date.fromisoformat(values["day"]),
            "bucket": int(values["bucket"]),
        }

    _drop_commits(path, snapshot.version)
    assert _deltalake_state(path) == before
    assert _deltalake_rows(path) == rows
    # delta-rs takes its per-file stats (and so its data skipping) from what we wrote; from
    # stats_parsed alone it reads no boolean min/max (its stats schema has none), though we keep them.
    after_adds = pa.table(DeltaTable(path).get_add_actions(flatten=True)).sort_by("path")
    compared = [c for c in before_adds.column_names if as_json == "true" or c not in ("min.flag", "max.flag")]
    assert after_adds.select(compared).to_pylist() == before_adds.select(compared).to_pylist()
    filtered = DeltaTable(path).to_pyarrow_table(filters=[("id", ">=", 205)]).sort_by("id").to_pylist()
    assert filtered == [r for r in rows if r["id"] >= 205]
    reread = txnlog.Table(path).snapshot()
    for row in reread.files().to_pylist():
        stats = orjson.loads(row["stats"])
        assert stats["numRecords"] == original_stats[row["path"]]["numRecords"]
        assert stats["minValues"]["id"] == original_stats[row["path"]]["minValues"]["id"]


def test_stats_that_do_not_fit_the_schema_are_left_to_the_json(log_writer: Callable[..., Any]) -> None:
    writer = log_writer()
    writer.create(configuration={"delta.checkpoint.writeStatsAsStruct": "true"})
    good = writer.add("good.parquet", num_records=3)
    bad = dataclasses.replace(writer.add("bad.parquet"), stats='{"numRecords":"many"}')
    writer.commit(1, good, bad)

    result = write_checkpoint(txnlog.Table(writer.uri).snapshot())

    adds = {a["path"]: a for a in _valid(_checkpoint_rows(writer.uri, result), "add")}
    assert adds["bad.parquet"]["stats"] == '{"numRecords":"many"}'
    assert adds["bad.parquet"]["stats_parsed"] is None
    assert adds["good.parquet"]["stats"] == good.stats


def test_column_mapped_structs_use_physical_names(tmp_path: Path, conformance_dir: Path) -> None:
    path = str(tmp_path / "t")
    _writable_copy(conformance_dir / "tables/table_with_column_mapping", path)
    table = txnlog.Table(path)
    metadata = table.snapshot().metadata
    config = {**metadata.configuration, "delta.checkpoint.writeStatsAsStruct": "true"}
    store = open_store(path)
    new_metadata = dataclasses.replace(metadata, configuration=config)
    store.put_if_absent(commit_path(1), orjson.dumps(encode_action(new_metadata)))
    snapshot = table.snapshot()
    physical = {f.name: delta_field_metadata(f)["delta.columnMapping.physicalName"] for f in snapshot.schema}
    part_col = snapshot.partition_columns[0]
    data_col = next(name for name in physical if name != part_col)

    result = write_checkpoint(snapshot)

    adds = _valid(_checkpoint_rows(path, result), "add")
    assert len(adds) == snapshot.num_files > 0
    for add in adds:
        stats = orjson.loads(add["stats"])
        parsed = add["stats_parsed"]
        assert set(parsed["minValues"]) == {physical[data_col]}
        _assert_parsed_matches(parsed, stats)
        assert add["partitionValues_parsed"] == {physical[part_col]: dict(add["partitionValues"])[physical[part_col]]}


# --- what is kept: tombstones, app transactions, domains ---------------------------------------


@pytest.mark.parametrize(
    ("configuration", "kept_tombstones", "kept_txns"),
    [
        ({}, {"recent.parquet"}, {"old-app", "new-app", "undated-app"}),
        (
            {
                "delta.deletedFileRetentionDuration": "interval 9 days",
                "delta.setTransactionRetentionDuration": "interval 1 days",
            },
            {"recent.parquet", "week-old.parquet"},
            {"new-app", "undated-app"},
        ),
    ],
    ids=["defaults", "custom-retention"],
)
def test_retention(
    log_writer: Callable[..., Any], configuration: dict[str, str], kept_tombstones: set[str], kept_txns: set[str]
) -> None:
    writer = log_writer()
    writer.create(configuration=configuration)
    writer.commit(
        1,
        *(writer.add(name) for name in ("week-old.parquet", "recent.parquet", "undated.parquet", "live.parquet")),
        Txn("old-app", 1, NOW_MS - 2 * DAY_MS),
        Txn("new-app", 2, NOW_MS - DAY_MS // 24),
        Txn("undated-app", 3),
        DomainMetadata("gone", "{}"),
        DomainMetadata("kept", '{"k":1}'),
    )
    writer.commit(
        2,
        RemoveFile("week-old.parquet", deletion_timestamp=NOW_MS - 8 * DAY_MS),
        RemoveFile("recent.parquet", deletion_timestamp=NOW_MS - DAY_MS),
        RemoveFile("undated.parquet"),
        DomainMetadata("gone", "{}", removed=True),
    )

    result = write_checkpoint(txnlog.Table(writer.uri).snapshot(), now_ms=NOW_MS)

    rows = _checkpoint_rows(writer.uri, result)
    assert {r["path"] for r in _valid(rows, "remove")} == kept_tombstones
    assert {r["appId"] for r in _valid(rows, "txn")} == kept_txns
    assert [r["domain"] for r in _valid(rows, "domainMetadata")] == ["kept"]
    assert [r["path"] for r in _valid(rows, "add")] == ["live.parquet"]
    _drop_commits(writer.uri, 2)
    reread = txnlog.Table(writer.uri).snapshot()
    assert set(_tombstone_paths(reread)) == kept_tombstones
    assert set(reread.app_transactions) == kept_txns
    assert set(reread.domains) == {"kept"}


# --- re-runs, races and the hint ---------------------------------------------------------------


def test_rerun_and_another_writers_checkpoint_are_kept(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _deltalake_table(path, partition_by=["part"])
    DeltaTable(path).create_checkpoint()
    snapshot = txnlog.Table(path).snapshot()
    theirs = Path(path, classic_checkpoint_path(snapshot.version))
    their_stat, their_hint = theirs.stat(), orjson.loads(Path(path, LAST_CHECKPOINT).read_bytes())

    result = write_checkpoint(snapshot)

    assert theirs.stat().st_mtime_ns == their_stat.st_mtime_ns and theirs.stat().st_ino == their_stat.st_ino
    assert (result.num_actions, result.num_add_files, result.size_in_bytes) == (
        their_hint["size"],
        their_hint["numOfAddFiles"],
        their_stat.st_size,
    )

    theirs.unlink()
    ours = write_checkpoint(txnlog.Table(path).snapshot())
    our_stat = theirs.stat()
    assert write_checkpoint(txnlog.Table(path).snapshot()) == ours
    assert theirs.stat().st_mtime_ns == our_stat.st_mtime_ns and theirs.stat().st_ino == our_stat.st_ino
    assert not [f for f in _log_files(path) if Path(f).name.startswith(".")]  # no temp files left


def test_hint_never_moves_backwards(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _deltalake_table(path, partition_by=None)
    table = txnlog.Table(path)
    latest = write_checkpoint(table.snapshot())
    older = write_checkpoint(table.snapshot(version=1))

    assert Path(path, older.paths[0]).exists()
    assert read_hint(table.store).version == latest.version  # type: ignore[union-attr]

    # A corrupt hint is replaced, and by the newest checkpoint, whichever one is written.
    Path(path, LAST_CHECKPOINT).write_text("{not json")
    write_checkpoint(table.snapshot(version=1))
    assert read_hint(table.store).version == latest.version  # type: ignore[union-attr]


def test_hint_ends_at_the_newest_checkpoint_when_two_writers_race(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Writer A checkpoints version 1 and reads the old hint; before it writes its own, writer B
    # checkpoints the latest version and writes that hint. A's write then lands last.
    path = str(tmp_path / "t")
    _deltalake_table(path, partition_by=None)
    table = txnlog.Table(path)
    first = write_checkpoint(table.snapshot(version=0))
    real_read_hint = checkpoint_writer.read_hint
    interleaved: list[CheckpointResult] = []
    b_ran: list[bool] = []

    def read_then_let_b_in(store: Any) -> Any:
        hint = real_read_hint(store)
        if not b_ran:
            b_ran.append(True)
            interleaved.append(write_checkpoint(table.snapshot()))
        return hint

    monkeypatch.setattr(checkpoint_writer, "read_hint", read_then_let_b_in)
    older = write_checkpoint(table.snapshot(version=1))
    monkeypatch.undo()

    latest = interleaved[0]
    assert first.version < older.version < latest.version
    hint = read_hint(table.store)
    assert hint is not None and hint.version == latest.version
    assert hint.size == latest.num_actions and hint.num_of_add_files == latest.num_add_files
    assert validate(txnlog.Table(path)).ok, "the validator finds no stale hint"


@pytest.mark.parametrize("streamed", [False, True], ids=["from-snapshot", "from-log"])
def test_a_checkpoint_written_after_the_check_is_kept_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    """Issue 28: writer A (the checkpointer) finds no checkpoint of version V and starts writing
    one; writer B (a commit's checkpoint hook) writes V's checkpoint meanwhile. A must keep B's,
    which readers may have opened, not replace it (before, A's put replaced it, in another row
    order), and point the hint at it."""
    path = str(tmp_path / "t")
    _deltalake_table(path, partition_by=["part"])
    write_checkpoint(txnlog.Table(path).snapshot(version=1))
    DeltaTable(path).create_checkpoint()  # B: another writer's checkpoint of the latest version
    snapshot = txnlog.Table(path).snapshot()
    theirs = Path(path, classic_checkpoint_path(snapshot.version))
    before = theirs.stat()
    real_existing = checkpoint_writer.existing_checkpoint
    checks: list[int] = []

    def checked_before_b_wrote(store: Any, version: int) -> CheckpointResult | None:
        checks.append(version)
        return None if len(checks) == 1 else real_existing(store, version)  # A's first look saw nothing

    monkeypatch.setattr(checkpoint_writer, "existing_checkpoint", checked_before_b_wrote)
    result = checkpoint_writer.checkpoint_from_log(snapshot.store) if streamed else write_checkpoint(snapshot)
    monkeypatch.undo()

    after = theirs.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    assert result.paths == (classic_checkpoint_path(snapshot.version),) and result.size_in_bytes == before.st_size
    assert read_hint(snapshot.store).version == snapshot.version  # type: ignore[union-attr]
    assert not [f for f in _log_files(path) if Path(f).name.startswith(".")]  # A's temp file is gone


def test_an_unreadable_checkpoint_is_never_written_over(tmp_path: Path) -> None:
    """A checkpoint file cut short by a foreign writer stays (readers rebuild the version
    without it); checkpointing that version says which file is in the way."""
    path = str(tmp_path / "t")
    _deltalake_table(path, partition_by=["part"])
    snapshot = txnlog.Table(path).snapshot()
    torn = Path(path, classic_checkpoint_path(snapshot.version))
    torn.write_bytes(b"PAR1 cut short")
    with pytest.raises(FileAlreadyExistsError, match="never writes over a checkpoint") as info:
        write_checkpoint(snapshot)
    assert info.value.path == classic_checkpoint_path(snapshot.version)
    assert torn.read_bytes() == b"PAR1 cut short"
    assert txnlog.Table(path).snapshot().num_files == snapshot.num_files  # read around it


@pytest.mark.parametrize("v2", [False, True], ids=["classic", "v2"])
def test_a_failed_write_leaves_nothing(
    log_writer: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, v2: bool
) -> None:
    writer = log_writer()
    protocol = Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",)) if v2 else Protocol(1, 2)
    writer.create(protocol=protocol)
    writer.commit(1, *(writer.add(f"f{i}.parquet", num_records=i) for i in range(10)))
    before = _log_files(writer.uri)
    monkeypatch.setattr(checkpoint_writer, "CHUNK_ROWS", 2)
    monkeypatch.setattr(checkpoint_writer, "SIDECAR_MAX_ROWS", 4)
    encode = checkpoint_writer._AddEncoder.encode
    calls = []

    def failing_encode(self: Any, batch: pa.RecordBatch) -> pa.StructArray:
        calls.append(batch.num_rows)
        if len(calls) == 4:  # a disk, a network, a bug: anything failing mid-stream
            raise OSError("injected failure")
        return encode(self, batch)

    monkeypatch.setattr(checkpoint_writer._AddEncoder, "encode", failing_encode)

    with pytest.raises(StorageError, match="injected"):  # an OSError leaves the store as a StorageError
        write_checkpoint(txnlog.Table(writer.uri).snapshot())

    assert _log_files(writer.uri) == before
    assert txnlog.Table(writer.uri).snapshot().num_files == 10


# --- V2 checkpoints ----------------------------------------------------------------------------


def test_v2_checkpoint_with_sidecars(log_writer: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_writer, "CHUNK_ROWS", 4)
    monkeypatch.setattr(checkpoint_writer, "SIDECAR_MAX_ROWS", 10)
    writer = log_writer()
    writer.create(
        Txn("app", 5, NOW_MS),
        DomainMetadata("d", "{}"),
        protocol=Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint", "domainMetadata")),
        partition_columns=("part",),
        configuration={"delta.checkpointPolicy": "v2", "delta.checkpoint.writeStatsAsStruct": "true"},
    )
    writer.commit(
        1,
        *(
            writer.add(f"part={i % 3}/f{i}.parquet", num_records=i, partition_values={"part": str(i % 3)})
            for i in range(25)
        ),
    )
    writer.commit(2, *(RemoveFile(f"part={i % 3}/f{i}.parquet", deletion_timestamp=NOW_MS) for i in range(0, 25, 4)))
    snapshot = txnlog.Table(writer.uri).snapshot()
    files_before = sorted(DeltaTable(writer.uri).file_uris())

    result = write_checkpoint(snapshot, now_ms=NOW_MS)

    top = parse_checkpoint(result.paths[0])
    assert top is not None and top.version == 2 and top.v2_format == "parquet"
    sidecars = result.paths[1:]
    assert len(sidecars) >= 2 and all(p.startswith(SIDECAR_DIR + "/") for p in sidecars)
    top_rows = pq.read_table(os.path.join(writer.uri, result.paths[0]))
    # File actions only in the sidecars; the top-level file keeps null add/remove columns, as
    # delta-spark's own does (it reads the top-level file with the file's schema).
    assert top_rows.column("add").null_count == top_rows.column("remove").null_count == top_rows.num_rows
    assert _valid(top_rows, "checkpointMetadata") == [{"version": 2, "tags": None}]
    assert sorted(f"{SIDECAR_DIR}/{s['path']}" for s in _valid(top_rows, "sidecar")) == sorted(sidecars)
    assert result.num_add_files == snapshot.num_files == 18
    rows_per_file = [pq.ParquetFile(os.path.join(writer.uri, p)).metadata.num_rows for p in result.paths]
    assert result.num_actions == sum(rows_per_file)
    assert all(a["stats_parsed"]["numRecords"] is not None for a in _valid(_checkpoint_rows(writer.uri, result), "add"))

    _drop_commits(writer.uri, 2)
    reread = txnlog.Table(writer.uri).snapshot()
    assert _txnlog_state(reread) == _txnlog_state(snapshot)
    assert _tombstone_paths(reread) == _tombstone_paths(snapshot)
    # delta-rs lists files from a V2 checkpoint (it refuses to read the data of v2Checkpoint tables).
    assert sorted(DeltaTable(writer.uri).file_uris()) == files_before
    assert write_checkpoint(reread) == result


@pytest.mark.parametrize("taken", ["sidecar", "top-level"])
def test_v2_files_are_never_written_over(log_writer: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, taken: str) -> None:
    """V2 checkpoint files have random names, but are written put-if-absent as well: a name
    taken (here by forcing the same UUID) is never replaced, and the sidecars written for a
    checkpoint that cannot be put in place are removed."""
    import uuid

    writer = log_writer()
    writer.create(protocol=Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",)))
    writer.commit(1, *(writer.add(f"f{i}.parquet", num_records=i) for i in range(5)))
    fixed = uuid.UUID(int=28)
    monkeypatch.setattr(checkpoint_writer.uuid, "uuid4", lambda: fixed)
    path = f"{SIDECAR_DIR}/{fixed}.parquet" if taken == "sidecar" else f"{LOG_DIR}/{1:020d}.checkpoint.{fixed}.parquet"
    Path(writer.uri, path).parent.mkdir(parents=True, exist_ok=True)
    Path(writer.uri, path).write_bytes(b"someone else's")
    with pytest.raises(FileAlreadyExistsError):
        write_checkpoint(txnlog.Table(writer.uri).snapshot())
    assert Path(writer.uri, path).read_bytes() == b"someone else's"
    sidecars = Path(writer.uri, SIDECAR_DIR)
    assert sorted(p.name for p in sidecars.iterdir()) == ([f"{fixed}.parquet"] if taken == "sidecar" else [])


def test_v2_policy_without_the_feature_writes_a_classic_checkpoint(log_writer: Callable[..., Any]) -> None:
    writer = log_writer()
    writer.create(writer.add("a.parquet"), configuration={"delta.checkpointPolicy": "v2"})
    result = write_checkpoint(txnlog.Table(writer.uri).snapshot())
    assert result.paths == (classic_checkpoint_path(0),)


def test_object_store_path(memory_table_uri: str, log_writer: Callable[..., Any]) -> None:
    """memory:// goes through the generic publish (spooled, then one put-if-absent)."""
    writer = log_writer(memory_table_uri)
    writer.create(partition_columns=("part",))
    writer.commit(1, *(writer.add(f"f{i}.parquet", num_records=i, partition_values={"part": "x"}) for i in range(5)))
    snapshot = txnlog.Table(memory_table_uri).snapshot()

    result = write_checkpoint(snapshot)

    store = open_store(memory_table_uri)
    assert [f.path for f in store.list_from(LOG_DIR) if not f.name[:20].isdigit()] == [LAST_CHECKPOINT]
    for v in (0, 1):
        store.delete(f"{LOG_DIR}/{v:020d}.json")
    assert _txnlog_state(txnlog.Table(memory_table_uri).snapshot()) == _txnlog_state(snapshot)
    assert result.size_in_bytes == store.info(result.paths[0]).size


# --- the conformance corpus --------------------------------------------------------------------


def conformance_cases(root: Path, test_name: str) -> list[Any]:
    """Every table of the corpus, nested ones too (called by tests/conftest.py at collection)."""
    tables = root / "tables"
    names = sorted(str(p.parent.relative_to(tables)) for p in tables.rglob("_delta_log"))
    return [pytest.param(name, id=name) for name in names]


def _writable_copy(src: Path, dst: str) -> None:
    """The corpus is read-only, and copytree keeps modes: make the copy writable."""
    shutil.copytree(src, dst)
    for root, _dirs, files in os.walk(dst):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)


def test_corpus_table_reads_back_from_its_checkpoint(
    tmp_path: Path, conformance_dir: Path, conformance_case: str
) -> None:
    name = conformance_case
    path = str(tmp_path / "t")
    _writable_copy(conformance_dir / "tables" / name, path)
    try:
        snapshot = txnlog.Table(path).snapshot()
    except TxnLogError as e:
        pytest.skip(f"txnlog cannot open {name}: {type(e).__name__}")
    try:
        delta_rs_files: list[str] | None = sorted(DeltaTable(path).file_uris())
    except Exception:  # delta-rs refuses some corpus tables; txnlog's answer is still checked
        delta_rs_files = None

    # now_ms=0: nothing has expired, so every tombstone must come back.
    result = write_checkpoint(snapshot, now_ms=0)

    assert result.version == snapshot.version and result.num_add_files == snapshot.num_files
    _drop_commits(path, snapshot.version)
    reread = txnlog.Table(path).snapshot()
    assert _txnlog_state(reread) == _txnlog_state(snapshot)
    assert _tombstone_paths(reread) == _tombstone_paths(snapshot)
    if delta_rs_files is not None:
        assert sorted(DeltaTable(path).file_uris()) == delta_rs_files


def test_checkpoints_leave_max_row_index_null(log_writer: Callable[..., Any]) -> None:
    """An add whose log entry carries maxRowIndex (an older txnlog wrote it) is checkpointed
    without it, as delta-spark checkpoints: delta-spark asserts it is unset when it writes such
    an add again (RESTORE to a version read from the checkpoint failed)."""
    writer = log_writer()
    features = ("deletionVectors",)
    add = encode_action(writer.add("a.parquet", num_records=10, deletion_vector=DeletionVectorDescriptor("i", "abcde", 4, 1)))["add"]
    writer.create({"add": {**add, "deletionVector": {**add["deletionVector"], "maxRowIndex": 3}}},
                  protocol=Protocol(3, 7, features, features))
    snapshot = txnlog.Table(writer.uri).snapshot()
    assert snapshot.files().column("deletion_vector").to_pylist()[0]["max_row_index"] == 3  # read as written

    result = write_checkpoint(snapshot)

    (vector,) = [a["deletionVector"] for a in _valid(_checkpoint_rows(writer.uri, result), "add")]
    assert vector == {"storageType": "i", "pathOrInlineDv": "abcde", "offset": None, "sizeInBytes": 4, "cardinality": 1, "maxRowIndex": None}
