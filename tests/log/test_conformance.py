"""Snapshots of the conformance corpus against delta-rs's answers (../shared/conformance).

``expected/<table>.json`` was written by ``make_expected.py`` with deltalake 1.6.6: for each
version, the live file paths, protocol, partition columns and configuration, plus the row count
at the latest version. Where delta-rs answered, txnlog must give the same answer. Where delta-rs
refused, the right behaviour is decided from PROTOCOL.md, one documented case at a time; a new
refusal without a decision fails :func:`test_version`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txnlog
from txnlog.errors import LogCorruptError, TableNotFoundError, UnsupportedFeatureError, VersionNotFoundError
from txnlog.log.filenames import commit_path, parse_commit_version
from txnlog.log.segment import build_segment


def _expected(root: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted((root / "expected").glob("*.json")):
        record = json.loads(path.read_text())
        yield record["table"], record


def _table_dirs(tables: Path) -> Iterator[str]:
    """Every table of the corpus, found the way make_expected.py finds them (nested ones too)."""
    for top in sorted(p for p in tables.iterdir() if p.is_dir()):
        nested = sorted(d.parent for d in top.glob("*/**/_delta_log"))
        if (top / "_delta_log").exists() or not nested:
            yield top.name
        yield from (str(d.relative_to(tables)) for d in nested)


def conformance_cases(root: Path, test_name: str) -> list[Any]:
    """Parameters for each test of this module (called by tests/conftest.py at collection)."""
    records = list(_expected(root))
    if test_name == "test_version":
        return [
            pytest.param((name, int(v), entry), id=f"{name}@v{v}")
            for name, record in records
            for v, entry in sorted(record.get("versions", {}).items(), key=lambda kv: int(kv[0]))
        ]
    if test_name == "test_refused_table":
        return [pytest.param((name, record), id=name) for name, record in records if "error" in record]
    if test_name in ("test_row_count", "test_plain_json_replay_agrees"):
        return [pytest.param((name, record), id=name) for name, record in records if "error" not in record]
    raise AssertionError(f"no conformance cases for {test_name}")


def _protocol_dict(snap: txnlog.Snapshot) -> dict[str, Any]:
    p = snap.protocol
    return {
        "minReaderVersion": p.min_reader_version,
        "minWriterVersion": p.min_writer_version,
        "readerFeatures": sorted(p.reader_features or []),
        "writerFeatures": sorted(p.writer_features or []),
    }


# --- where delta-rs refused: decisions taken from PROTOCOL.md -----------------------------------


def _log_without_its_start(table: txnlog.Table, version: int, error: str) -> None:
    """checkpoint_with_partitions@v1: the log holds 1.json, 2.json and 2.checkpoint.parquet, but no
    0.json. PROTOCOL.md: a snapshot is rebuilt from the newest checkpoint not newer than the
    version ("for time travel, the checkpoint used must not be newer than the time travel
    version") plus the commits after it, or from version 0. Neither exists for v1, so the version
    is not reconstructible: VersionNotFoundError naming version 1 (v2 reads from the checkpoint)."""
    with pytest.raises(VersionNotFoundError, match=rf"\b{version}\b") as info:
        table.snapshot(version=version)
    assert info.value.version == version


def _metadata_without_schema(table: txnlog.Table, version: int, error: str) -> None:
    """delta-live-table@v0: its metaData has no schemaString, which PROTOCOL.md lists as
    *required* in "Change Metadata". The winning metaData of v0 is malformed, so reading v0 is a
    LogCorruptError naming the commit file, the version and the field. At v1 a complete metaData
    supersedes it, and delta-rs and txnlog agree (the superseded action is never used)."""
    with pytest.raises(LogCorruptError, match="schemaString") as info:
        table.snapshot(version=version)
    assert info.value.version == version
    assert info.value.path == commit_path(version)
    assert commit_path(version) in str(info.value)


REFUSED_VERSIONS: dict[tuple[str, int], Callable[[txnlog.Table, int, str], None]] = {
    ("checkpoint_with_partitions", 1): _log_without_its_start,
    ("delta-live-table", 0): _metadata_without_schema,
}


def _no_delta_log(table: txnlog.Table, root: Path) -> None:
    """checkpoints_tombstones: the folder holds only a .gitignore, no ``_delta_log``. PROTOCOL.md
    defines a table by its ``_delta_log`` commits and checkpoints, so this is not a table:
    TableNotFoundError naming the URI, and ``exists()`` is False."""
    assert not table.exists()
    with pytest.raises(TableNotFoundError) as info:
        table.snapshot()
    assert info.value.uri == table.uri
    assert table.uri in str(info.value)


def _reader_version_5(table: txnlog.Table, root: Path) -> None:
    """simple_table_features: protocol minReaderVersion 5 with readerFeatures including the
    unknown 'blahabl'. PROTOCOL.md: readerFeatures "exist only when minReaderVersion is set to 3";
    no reader version above 3 is defined, and "in the case where a client is running an invalid
    protocol version, an error should be thrown". So every version is refused with
    UnsupportedFeatureError naming reader version 5 and the unknown feature."""
    versions = sorted(
        v for p in (root / "_delta_log").iterdir() if (v := parse_commit_version(p.name)) is not None
    )
    assert versions
    for version in versions:
        with pytest.raises(UnsupportedFeatureError, match="reader version 5") as info:
            table.snapshot(version=version)
        assert info.value.version == 5
        assert "blahabl" in info.value.features
        assert "blahabl" in str(info.value)


REFUSED_TABLES: dict[str, Callable[[txnlog.Table, Path], None]] = {
    "checkpoints_tombstones": _no_delta_log,
    "simple_table_features": _reader_version_5,
}


# --- tests ---------------------------------------------------------------------------------------


def test_corpus_is_complete(conformance_dir: Path) -> None:
    """Every table has an expected file and the other way round, so none is silently skipped."""
    tables = set(_table_dirs(conformance_dir / "tables"))
    expected = {name for name, _ in _expected(conformance_dir)}
    assert tables == expected
    assert any("/" in name for name in tables), "nested tables (golden/...) must be found too"


def test_version(conformance_case: Any, conformance_dir: Path) -> None:
    name, version, expected = conformance_case
    table = txnlog.Table(conformance_dir / "tables" / name)
    if "error" in expected:
        check = REFUSED_VERSIONS.get((name, version))
        assert check is not None, f"delta-rs refused {name}@v{version} ({expected['error']!r}); decide from the protocol"
        check(table, version, expected["error"])
        return
    snap = table.snapshot(version=version)
    assert snap.version == version
    assert sorted(snap.files().column("path").to_pylist()) == expected["files"]
    assert _protocol_dict(snap) == expected["protocol"]
    assert list(snap.partition_columns) == expected["partition_columns"]
    assert dict(snap.configuration) == expected["configuration"]


def test_refused_table(conformance_case: Any, conformance_dir: Path) -> None:
    name, record = conformance_case
    check = REFUSED_TABLES.get(name)
    assert check is not None, f"delta-rs refused table {name} ({record['error']!r}); decide from the protocol"
    root = conformance_dir / "tables" / name
    check(txnlog.Table(root), root)


def _num_records(snap: txnlog.Snapshot) -> list[int | None]:
    return [json.loads(s).get("numRecords") if s else None for s in snap.files().column("stats").to_pylist()]


def test_row_count(conformance_case: Any, conformance_dir: Path) -> None:
    """The sum of ``numRecords`` over the live files is delta-rs's row count."""
    name, record = conformance_case
    if "num_rows" not in record:
        pytest.skip(f"delta-rs could not count rows of {name}: {record['num_rows_error'].splitlines()[0]}")
    snap = txnlog.Table(conformance_dir / "tables" / name).snapshot()
    assert snap.version == record["latest_version"]
    if snap.files().column("deletion_vector").null_count != snap.num_files:
        pytest.skip(f"{name} has deletion vectors: numRecords counts deleted rows")
    counts = _num_records(snap)
    if None in counts:
        pytest.skip(f"{counts.count(None)} of {len(counts)} files of {name} have no numRecords stats")
    assert sum(counts) == record["num_rows"]  # type: ignore[arg-type]


# --- an independent replay, with plain json, for what delta-rs does not report -------------------


def _dv_id(dv: dict[str, Any] | None) -> str | None:
    if not dv:
        return None
    base = f"{dv['storageType']}{dv['pathOrInlineDv']}"
    return f"{base}@{dv['offset']}" if dv.get("offset") is not None else base


def _plain_replay(log: Path, version: int) -> tuple[dict[tuple[str, str | None], dict[str, Any]], dict[tuple[str, str | None], dict[str, Any]]]:
    """Live adds and tombstones by (path, DV unique id), replaying 0.json..version.json."""
    live: dict[tuple[str, str | None], dict[str, Any]] = {}
    removed: dict[tuple[str, str | None], dict[str, Any]] = {}
    for v in range(version + 1):
        for line in (log / f"{v:020d}.json").read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                key = (action["add"]["path"], _dv_id(action["add"].get("deletionVector")))
                live[key] = action["add"]
                removed.pop(key, None)
            elif "remove" in action:
                key = (action["remove"]["path"], _dv_id(action["remove"].get("deletionVector")))
                live.pop(key, None)
                removed[key] = action["remove"]
    return live, removed


def _keys(table: Any) -> set[tuple[str, str | None]]:
    """(path, DV unique id) of each row of a files() or tombstones() table."""
    dvs = [
        None if dv is None else {"storageType": dv["storage_type"], "pathOrInlineDv": dv["path_or_inline_dv"], "offset": dv["offset"]}
        for dv in table.column("deletion_vector").to_pylist()
    ]
    return set(zip(table.column("path").to_pylist(), map(_dv_id, dvs)))


def test_plain_json_replay_agrees(conformance_case: Any, conformance_dir: Path) -> None:
    """Logical files keyed by (path, DV unique id) and tombstones match a plain-json replay of
    every commit; deletion vectors are carried, and live rows (file footers minus DV cardinality)
    match numRecords minus cardinality. delta-rs 1.6.6 cannot count rows of tables with the
    deletionVectors reader feature, so this is the check for them."""
    name, record = conformance_case
    root = conformance_dir / "tables" / name
    latest = record["latest_version"]
    log = root / "_delta_log"
    if not all((log / f"{v:020d}.json").exists() for v in range(latest + 1)):
        pytest.skip(f"{name}: commits before the newest checkpoint were cleaned up")
    live, removed = _plain_replay(log, latest)
    table = txnlog.Table(root)
    snap = table.snapshot()
    files = snap.files()
    assert _keys(files) == set(live)
    tombstones = _keys(snap.tombstones())
    if build_segment(table.store).checkpoint:
        assert tombstones <= set(removed)  # a checkpoint may have dropped expired tombstones
    else:
        assert tombstones == set(removed)

    dvs = files.column("deletion_vector")
    if dvs.null_count == len(dvs):
        return
    deleted = sum(pc.struct_field(dvs, "cardinality").fill_null(0).to_pylist())
    assert deleted == sum(a["deletionVector"]["cardinality"] for a in live.values() if a.get("deletionVector"))
    data_files = [root / unquote(path) for path, _ in live]
    if not all(p.exists() for p in data_files):
        pytest.skip(f"{name}: data files are not in the corpus")
    footer_rows = sum(pq.ParquetFile(p).metadata.num_rows for p in data_files)
    counts = _num_records(snap)
    assert None not in counts
    # Live rows = rows in the files minus rows the DVs delete; txnlog's stats agree with footers.
    assert sum(counts) == footer_rows  # type: ignore[arg-type]
    assert 0 < deleted < footer_rows
