"""Log segments: finding the newest usable checkpoint, the ``_last_checkpoint`` hint, multi-part
and V2 checkpoints, time travel by version and timestamp, and ``Snapshot.update``."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import deltalake
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txnlog
from txnlog.errors import VersionNotFoundError
from txnlog.log.actions import CommitInfo, Protocol, RemoveFile
from txnlog.log.filenames import LAST_CHECKPOINT, LOG_DIR, classic_checkpoint_path, commit_path
from txnlog.log.segment import build_segment

# The template table: eight appends by delta-rs with checkpoints at versions 2 and 5.
CHECKPOINTS = (2, 5)
LATEST = 7


def _append(path: Path, i: int) -> None:
    deltalake.write_deltalake(str(path), pa.table({"id": pa.array([i, i + 100], pa.int64())}), mode="append")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list[str]]]:
    """The template table and delta-rs's live file paths at each version."""
    path = tmp_path_factory.mktemp("segment") / "table"
    expected: dict[int, list[str]] = {}
    for v in range(LATEST + 1):
        _append(path, v)
        if v in CHECKPOINTS:
            deltalake.DeltaTable(str(path)).create_checkpoint()
    for v in range(LATEST + 1):
        expected[v] = sorted(deltalake.DeltaTable(str(path), version=v).file_uris())
    return path, expected


@pytest.fixture
def table_dir(template: tuple[Path, dict[int, list[str]]], tmp_path: Path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(template[0], dest)
    return dest


def _paths(snap: txnlog.Snapshot, root: Path) -> list[str]:
    return sorted(str(root / p) for p in snap.files().column("path").to_pylist())


def _expected(template: tuple[Path, dict[int, list[str]]], root: Path, version: int) -> list[str]:
    return sorted(p.replace(str(template[0]), str(root)) for p in template[1][version])


def _drop_commits(root: Path, upto: int) -> None:
    """Log cleanup: delete the JSON commits 0..upto, leaving the checkpoints."""
    for v in range(upto + 1):
        (root / commit_path(v)).unlink()


def _hint(root: Path, body: bytes | None) -> None:
    hint = root / LAST_CHECKPOINT
    if body is None:
        hint.unlink()
    else:
        hint.write_bytes(body)


# --- the _last_checkpoint hint -----------------------------------------------------------------


@pytest.mark.parametrize(
    "hint",
    [
        pytest.param(None, id="missing"),
        pytest.param(b'{"version":2,"size":3}', id="stale"),
        pytest.param(b'{"version":6,"size":9}', id="no-checkpoint-at-6"),
        pytest.param(b'{"version":40,"size":9}', id="beyond-latest"),
        pytest.param(b'{"version":5,"si', id="truncated-json"),
        pytest.param(b"[5]", id="not-an-object"),
        pytest.param(b'{"size":3}', id="no-version"),
        pytest.param(b'{"version":"five"}', id="version-not-a-number"),
    ],
)
def test_hint_is_only_a_hint(
    hint: bytes | None, table_dir: Path, template: tuple[Path, dict[int, list[str]]]
) -> None:
    """Whatever the hint says, the newest checkpoint (5) is found. Commits 0..5 are deleted, so
    only checkpoint 5 plus commits 6 and 7 can give the right answer."""
    _hint(table_dir, hint)
    _drop_commits(table_dir, 5)
    table = txnlog.Table(table_dir)
    segment = build_segment(table.store)
    assert segment.checkpoint_version == 5
    assert [c.version for c in segment.commits] == [6, 7]
    assert _paths(table.snapshot(), table_dir) == _expected(template, table_dir, LATEST)


def test_hint_at_an_incomplete_checkpoint_falls_back_to_an_older_one(
    table_dir: Path, template: tuple[Path, dict[int, list[str]]]
) -> None:
    """The hint names checkpoint 5, but only part 1 of 2 of it is left: checkpoint 2 is used."""
    cp5 = table_dir / classic_checkpoint_path(5)
    pq.write_table(pq.read_table(cp5), table_dir / LOG_DIR / f"{5:020d}.checkpoint.0000000001.0000000002.parquet")
    cp5.unlink()
    _hint(table_dir, b'{"version":5,"size":12,"parts":2}')
    _drop_commits(table_dir, 2)
    table = txnlog.Table(table_dir)
    assert build_segment(table.store).checkpoint_version == 2
    assert _paths(table.snapshot(), table_dir) == _expected(template, table_dir, LATEST)


def test_time_travel_uses_no_checkpoint_newer_than_the_version(
    table_dir: Path, template: tuple[Path, dict[int, list[str]]]
) -> None:
    table = txnlog.Table(table_dir)
    for v in range(LATEST + 1):
        segment = build_segment(table.store, v)
        older = [c for c in CHECKPOINTS if c <= v]
        assert segment.checkpoint_version == (max(older) if older else None)
        assert _paths(table.snapshot(version=v), table_dir) == _expected(template, table_dir, v)


def test_versions_before_a_cleaned_up_log_are_not_found(table_dir: Path) -> None:
    _drop_commits(table_dir, 3)
    table = txnlog.Table(table_dir)
    for v in (0, 1):
        with pytest.raises(VersionNotFoundError) as info:
            table.snapshot(version=v)
        assert info.value.version == v
    assert table.snapshot(version=2).version == 2  # checkpoint 2 still stands for version 2
    with pytest.raises(VersionNotFoundError, match="latest is 7"):
        table.snapshot(version=8)


# --- multi-part checkpoints --------------------------------------------------------------------


def _split_checkpoint(root: Path, version: int, parts: int) -> list[Path]:
    """Rewrite the classic checkpoint at ``version`` as ``parts`` parquet files."""
    classic = root / classic_checkpoint_path(version)
    rows = pq.read_table(classic)
    assert rows.num_rows >= parts
    bounds = [rows.num_rows * i // parts for i in range(parts + 1)]
    out = []
    for i in range(parts):
        path = root / LOG_DIR / f"{version:020d}.checkpoint.{i + 1:010d}.{parts:010d}.parquet"
        pq.write_table(rows.slice(bounds[i], bounds[i + 1] - bounds[i]), path)
        out.append(path)
    classic.unlink()
    return out


@pytest.mark.parametrize("parts", [2, 3])
def test_multi_part_checkpoint(parts: int, table_dir: Path, template: tuple[Path, dict[int, list[str]]]) -> None:
    _split_checkpoint(table_dir, 5, parts)
    _hint(table_dir, orjson.dumps({"version": 5, "parts": parts}))
    _drop_commits(table_dir, 5)
    table = txnlog.Table(table_dir)
    segment = build_segment(table.store)
    assert segment.checkpoint_version == 5
    assert [(f.part, f.num_parts) for f in segment.checkpoint] == [(i, parts) for i in range(1, parts + 1)]
    assert _paths(table.snapshot(), table_dir) == _expected(template, table_dir, LATEST)
    assert _paths(table.snapshot(version=5), table_dir) == _expected(template, table_dir, 5)


def test_incomplete_multi_part_checkpoint_is_ignored(
    table_dir: Path, template: tuple[Path, dict[int, list[str]]]
) -> None:
    """Part 2 of 3 at version 5 is missing: reading only parts 1 and 3 would lose files, so the
    set is skipped and version 5 comes from checkpoint 2 plus commits 3..5."""
    parts = _split_checkpoint(table_dir, 5, 3)
    parts[1].unlink()
    table = txnlog.Table(table_dir)
    assert build_segment(table.store, 5).checkpoint_version == 2
    assert _paths(table.snapshot(version=5), table_dir) == _expected(template, table_dir, 5)
    assert _paths(table.snapshot(), table_dir) == _expected(template, table_dir, LATEST)


def test_complete_set_wins_over_an_incomplete_one_at_the_same_version(
    table_dir: Path, template: tuple[Path, dict[int, list[str]]]
) -> None:
    shutil.copy(table_dir / classic_checkpoint_path(5), table_dir / "cp5.parquet")
    incomplete = _split_checkpoint(table_dir, 5, 3)
    incomplete[2].unlink()
    shutil.move(table_dir / "cp5.parquet", table_dir / classic_checkpoint_path(5))
    _split_checkpoint(table_dir, 5, 2)
    _drop_commits(table_dir, 5)
    table = txnlog.Table(table_dir)
    assert [(f.part, f.num_parts) for f in build_segment(table.store).checkpoint] == [(1, 2), (2, 2)]
    assert _paths(table.snapshot(), table_dir) == _expected(template, table_dir, LATEST)


# --- V2 checkpoints ----------------------------------------------------------------------------


def _v2_expected(conformance_dir: Path) -> dict[int, list[str]]:
    record = json.loads((conformance_dir / "expected" / "checkpoint-v2-table.json").read_text())
    return {int(v): e["files"] for v, e in record["versions"].items()}


def test_v2_checkpoint_table_at_every_version(conformance_dir: Path) -> None:
    """checkpoint-v2-table has UUID-named JSON checkpoints at 6 and 8 whose adds are in sidecars."""
    table = txnlog.Table(conformance_dir / "tables" / "checkpoint-v2-table")
    expected = _v2_expected(conformance_dir)
    assert sorted(expected) == list(range(10))
    for version, files in expected.items():
        segment = build_segment(table.store, version)
        cp = 8 if version >= 8 else 6 if version >= 6 else None
        assert segment.checkpoint_version == cp
        if cp is not None:
            assert [f.v2_format for f in segment.checkpoint] == ["json"]
        assert sorted(table.snapshot(version=version).files().column("path").to_pylist()) == files


_STRING_MAP = pa.map_(pa.string(), pa.string())
_V2_PARQUET_SCHEMA = pa.schema(
    [
        ("checkpointMetadata", pa.struct([("version", pa.int64()), ("tags", _STRING_MAP)])),
        (
            "sidecar",
            pa.struct([("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64()), ("tags", _STRING_MAP)]),
        ),
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("format", pa.struct([("provider", pa.string()), ("options", _STRING_MAP)])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("configuration", _STRING_MAP),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
    ]
)


def _as_maps(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """Arrow builds a map column from a list of pairs."""
    body = dict(body)
    for key in ("tags", "configuration"):
        if isinstance(body.get(key), dict):
            body[key] = list(body[key].items())
    if kind == "metaData":
        body["format"] = {**body["format"], "options": list(body["format"].get("options", {}).items())}
    return body


def test_v2_checkpoint_in_parquet(conformance_dir: Path, tmp_path: Path) -> None:
    """The same V2 checkpoints rewritten as ``N.checkpoint.<uuid>.parquet`` top-level files."""
    root = tmp_path / "v2"
    shutil.copytree(conformance_dir / "tables" / "checkpoint-v2-table", root)
    for top in sorted((root / LOG_DIR).glob("*.checkpoint.*.json")):
        rows = [json.loads(line) for line in top.read_text().splitlines() if line.strip()]
        columns = {
            name: [_as_maps(name, r[name]) if name in r else None for r in rows] for name in _V2_PARQUET_SCHEMA.names
        }
        assert {k for r in rows for k in r} <= set(columns)
        version = top.name.split(".")[0]
        pq.write_table(
            pa.table(columns, schema=_V2_PARQUET_SCHEMA),
            root / LOG_DIR / f"{version}.checkpoint.{uuid.uuid4()}.parquet",
        )
        top.unlink()
    _drop_commits(root, 7)
    table = txnlog.Table(root)
    expected = _v2_expected(conformance_dir)
    for version in (8, 9):
        segment = build_segment(table.store, version)
        assert segment.checkpoint_version == 8
        assert [f.v2_format for f in segment.checkpoint] == ["parquet"]
        snap = table.snapshot(version=version)
        assert sorted(snap.files().column("path").to_pylist()) == expected[version]
        assert snap.protocol.has_reader_feature("v2Checkpoint")
        assert snap.configuration["delta.checkpointPolicy"] == "v2"


# --- time travel by timestamp ------------------------------------------------------------------

T0 = 1_700_000_000_000  # ms


def _set_mtime(root: str, version: int, millis: int) -> None:
    os.utime(Path(root) / commit_path(version), ns=(millis * 1_000_000, millis * 1_000_000))


def test_timestamp_uses_file_modification_times(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create(w.add("a.parquet"))
    for v in (1, 2, 3):
        w.commit(v, w.add(f"f{v}.parquet"))
    for v in range(4):
        _set_mtime(w.uri, v, T0 + v * 60_000)
    table = txnlog.Table(w.uri)
    for v in range(4):
        assert table.snapshot(timestamp=T0 + v * 60_000).version == v
        assert table.snapshot(timestamp=T0 + v * 60_000 + 30_000).version == v
    assert table.snapshot(timestamp=dt.datetime.fromtimestamp((T0 + 90_000) / 1000, dt.timezone.utc)).version == 1
    iso = dt.datetime.fromtimestamp((T0 + 120_000) / 1000, dt.timezone.utc).isoformat()
    assert table.snapshot(timestamp=iso).version == 2
    assert table.snapshot(timestamp=T0 + 10**9).version == 3  # after the last commit: the latest
    with pytest.raises(VersionNotFoundError, match=str(T0 - 1)):
        table.snapshot(timestamp=T0 - 1)
    assert [h.timestamp for h in table.history()] == [T0 + v * 60_000 for v in (3, 2, 1, 0)]


def test_out_of_order_modification_times_are_made_monotonic(log_writer: Callable[..., Any]) -> None:
    """Delta adjusts a commit time that is not after its predecessor's to predecessor + 1 ms."""
    w = log_writer()
    w.create()
    w.commit(1, w.add("a.parquet"))
    w.commit(2, w.add("b.parquet"))
    _set_mtime(w.uri, 0, T0)
    _set_mtime(w.uri, 1, T0 + 60_000)
    _set_mtime(w.uri, 2, T0 + 30_000)  # clock skew: earlier than version 1
    table = txnlog.Table(w.uri)
    assert table.snapshot(timestamp=T0 + 59_999).version == 0
    assert table.snapshot(timestamp=T0 + 60_000).version == 1
    assert table.snapshot(timestamp=T0 + 60_001).version == 2
    assert table.history(limit=1)[0].timestamp == T0 + 60_001


def _ict_protocol() -> Protocol:
    return Protocol(1, 7, writer_features=("inCommitTimestamp",))


def test_in_commit_timestamps_win_over_file_times(log_writer: Callable[..., Any]) -> None:
    """With delta.enableInCommitTimestamps, commitInfo.inCommitTimestamp (the first action of each
    commit) is the commit time; file modification times are ignored."""
    w = log_writer()
    ict = [T0 + v * 1_000 for v in range(4)]
    w.create(protocol=_ict_protocol(), configuration={"delta.enableInCommitTimestamps": "true"})
    # Version 0 was written without commitInfo: put the ICT first in it.
    _rewrite_with_ict(w, 0, ict[0])
    for v in (1, 2, 3):
        w.commit(v, CommitInfo(in_commit_timestamp=ict[v], operation="WRITE"), w.add(f"f{v}.parquet"))
    for v in range(4):
        _set_mtime(w.uri, v, T0 + 10_000_000 - v * 60_000)  # file times run backwards
    table = txnlog.Table(w.uri)
    for v in range(4):
        assert table.snapshot(timestamp=ict[v]).version == v
        assert table.snapshot(timestamp=ict[v] + 999).version == v
    with pytest.raises(VersionNotFoundError):
        table.snapshot(timestamp=ict[0] - 1)
    assert [h.timestamp for h in table.history()] == ict[::-1]


def _rewrite_with_ict(w: Any, version: int, ict: int) -> None:
    """Put a commitInfo with ``ict`` first in an existing commit file (a test-only rewrite)."""
    path = Path(w.uri, commit_path(version))
    body = path.read_bytes()
    path.write_bytes(orjson.dumps({"commitInfo": {"inCommitTimestamp": ict, "operation": "CREATE TABLE"}}) + b"\n" + body)


def test_in_commit_timestamps_enabled_later(log_writer: Callable[..., Any]) -> None:
    """Versions before ICT was enabled keep their file times; from the enablement version on,
    the in-commit timestamps count."""
    w = log_writer()
    w.create()
    w.commit(1, w.add("a.parquet"))
    _set_mtime(w.uri, 0, T0)
    _set_mtime(w.uri, 1, T0 + 1_000)
    table = txnlog.Table(w.uri)
    metadata = table.snapshot().metadata
    config = {
        **metadata.configuration,
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": "2",
        "delta.inCommitTimestampEnablementTimestamp": str(T0 + 5_000),
    }
    w.commit(
        2,
        CommitInfo(in_commit_timestamp=T0 + 5_000, operation="SET TBLPROPERTIES"),
        _ict_protocol(),
        replace(metadata, configuration=config),
    )
    w.commit(3, CommitInfo(in_commit_timestamp=T0 + 9_000, operation="WRITE"), w.add("b.parquet"))
    for v in (2, 3):
        _set_mtime(w.uri, v, T0 - 1_000_000)  # would sort before version 0 if it were used
    assert table.snapshot(timestamp=T0 + 500).version == 0
    assert table.snapshot(timestamp=T0 + 4_999).version == 1
    assert table.snapshot(timestamp=T0 + 5_000).version == 2
    assert table.snapshot(timestamp=T0 + 9_000).version == 3
    assert [h.timestamp for h in table.history()] == [T0 + 9_000, T0 + 5_000, T0 + 1_000, T0]


def test_version_and_timestamp_together_is_an_error(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create()
    with pytest.raises(txnlog.TxnLogError):
        txnlog.Table(w.uri).snapshot(version=0, timestamp=T0)


# --- Snapshot.update ---------------------------------------------------------------------------


def _fresh(root: Path | str) -> txnlog.Snapshot:
    """The latest snapshot from a new Table, so no cached state is involved."""
    return txnlog.Table(root).snapshot()


def _same_state(a: txnlog.Snapshot, b: txnlog.Snapshot) -> None:
    assert a.version == b.version
    assert a.files().sort_by("path").equals(b.files().sort_by("path"))
    assert a.tombstones().sort_by("path").equals(b.tombstones().sort_by("path"))
    assert a.protocol == b.protocol
    assert a.metadata == b.metadata
    assert a.app_transactions == b.app_transactions
    assert a.domains == b.domains


def test_update_after_delta_rs_appends(table_dir: Path) -> None:
    table = txnlog.Table(table_dir)
    old = table.snapshot()
    assert old.update() is old  # nothing new
    for i in range(3):
        _append(table_dir, 100 + i)
    deltalake.DeltaTable(str(table_dir)).delete("id = 101")  # a remove too
    new = old.update()
    assert old.version == LATEST  # the old snapshot is unchanged
    _same_state(new, _fresh(table_dir))
    assert new.version == LATEST + 4
    assert sorted(str(table_dir / p) for p in new.files().column("path").to_pylist()) == sorted(
        deltalake.DeltaTable(str(table_dir)).file_uris()
    )


def test_update_reads_only_new_commits(table_dir: Path, tmp_path: Path) -> None:
    """Old commits are overwritten with garbage after the snapshot: a rebuild would fail on them,
    so a successful update proves it read only the new ones."""
    table = txnlog.Table(table_dir)
    old = table.snapshot()
    _append(table_dir, 200)
    _append(table_dir, 201)
    pristine = tmp_path / "pristine"
    shutil.copytree(table_dir, pristine)
    for v in range(6, LATEST + 1):
        (table_dir / commit_path(v)).write_bytes(b"garbage, not json\n")
    new = old.update()
    assert new.version == LATEST + 2
    fresh = txnlog.Table(pristine).snapshot()
    assert new.files().sort_by("path").equals(fresh.files().sort_by("path"))
    with pytest.raises(txnlog.TxnLogError):
        txnlog.Table(table_dir).snapshot()


def test_update_rebuilds_when_commits_were_cleaned(table_dir: Path) -> None:
    table = txnlog.Table(table_dir)
    old = table.snapshot(version=3)
    for i in range(3):
        _append(table_dir, 300 + i)
    deltalake.DeltaTable(str(table_dir)).create_checkpoint()  # at LATEST + 3
    _drop_commits(table_dir, LATEST + 2)
    new = old.update()
    assert new.version == LATEST + 3
    _same_state(new, _fresh(table_dir))


def test_latest_snapshot_after_cleanup(table_dir: Path) -> None:
    """The same Table asked for its latest snapshot again after the commits since its last one
    were cleaned up: the rebuild must not loop through any cache of the latest snapshot."""
    table = txnlog.Table(table_dir)
    first = table.snapshot()
    for i in range(2):
        _append(table_dir, 400 + i)
    deltalake.DeltaTable(str(table_dir)).create_checkpoint()
    _drop_commits(table_dir, LATEST + 1)
    again = table.snapshot()
    assert again.version == LATEST + 2 != first.version
    _same_state(again, _fresh(table_dir))
    _same_state(first.update(), again)


def test_update_of_a_time_travel_snapshot(table_dir: Path) -> None:
    table = txnlog.Table(table_dir)
    _same_state(table.snapshot(version=1).update(), _fresh(table_dir))


def test_update_applies_removes_to_checkpoint_files(log_writer: Callable[..., Any]) -> None:
    """A file from a checkpoint removed by a later commit is gone after update, and becomes a
    tombstone."""
    w = log_writer()
    w.create(w.add("a.parquet"), w.add("b.parquet"))
    table = txnlog.Table(w.uri)
    old = table.snapshot()
    w.commit(1, RemoveFile("a.parquet", deletion_timestamp=T0, data_change=True))
    new = old.update()
    assert new.files().column("path").to_pylist() == ["b.parquet"]
    assert new.tombstones().column("path").to_pylist() == ["a.parquet"]
    _same_state(new, _fresh(w.uri))
