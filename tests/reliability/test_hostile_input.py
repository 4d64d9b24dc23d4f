"""Hostile and malformed input (issue 7): every case raises a TxnLogError subclass that names the
file, version or field, and the versions before the damage stay readable.

Cases already covered elsewhere are not repeated here: corrupt/truncated JSON, missing fields and
bad DV descriptors (tests/log/test_malformed.py), hints that are garbage or point at nothing
(tests/log/test_segment.py::test_hint_is_only_a_hint), escaping paths
(tests/storage/test_paths.py), predicates (tests/expressions/test_hostile.py), API arguments and
history() of a missing table (tests/test_api_errors.py), removing a file that is not live
(tests/txn/test_transaction_rules.py), unknown properties (tests/test_properties.py).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog
from txnlog.errors import (
    CorruptCheckpointError,
    InvalidArgumentError,
    LogCorruptError,
    SchemaError,
    TableNotFoundError,
    TxnLogError,
    UnsupportedFeatureError,
)
from txnlog.log.filenames import LOG_DIR, SIDECAR_DIR, classic_checkpoint_path, commit_path

T0 = 1_700_000_000_000
ADD = {"path": "x.parquet", "partitionValues": {}, "size": 10, "modificationTime": T0, "dataChange": True}
REMOVE = {"path": "x.parquet", "deletionTimestamp": T0, "dataChange": True}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def _table(root: Path, versions: int = 2) -> txnlog.Table:
    """A real table: CREATE then one append per version."""
    table = txnlog.Table.create(str(root), SCHEMA)
    for i in range(1, versions + 1):
        table.append(pa.table({"id": pa.array([i], pa.int64()), "name": [f"n{i}"]}, schema=SCHEMA))
    return table


def _paths(uri: str | Path, version: int | None = None) -> set[str]:
    return set(txnlog.Table(str(uri)).snapshot(version).files().column("path").to_pylist())


def _write_commit(root: Path, version: int, data: bytes) -> Path:
    path = root / commit_path(version)
    path.write_bytes(data)
    return path


def _lines(*objs: Any) -> bytes:
    # json, not orjson: some cases hold integers beyond 64 bits, which orjson refuses to write.
    return b"\n".join(json.dumps(o).encode() for o in objs) + b"\n"


def _read_error(uri: str | Path, version: int | None = None) -> TxnLogError:
    """The error of opening the snapshot; any exception that is not a TxnLogError fails the test."""
    try:
        txnlog.Table(str(uri)).snapshot(version)
    except TxnLogError as e:
        return e
    pytest.fail("reading the damaged table succeeded")


# --- commits with wrong field types, absurd values, duplicate actions -----------------------


def _metadata_line(root: Path) -> dict[str, Any]:
    lines = [json.loads(line) for line in (root / commit_path(0)).read_bytes().splitlines()]
    return next(line for line in lines if "metaData" in line)


COMMIT_CASES = [
    pytest.param({"add": {**ADD, "path": 123}}, "'path'", id="add-path-is-a-number"),
    pytest.param({"add": {**ADD, "size": "abc"}}, "'size'", id="add-size-is-a-string"),
    pytest.param({"add": {**ADD, "size": -5}}, "negative size", id="add-negative-size"),
    pytest.param({"add": {**ADD, "size": 2**70}}, "'size'", id="add-size-beyond-int64"),
    pytest.param({"add": {**ADD, "size": 1.5}}, "'size' must be an integer, not 1.5", id="add-size-fractional"),
    pytest.param({"add": {**ADD, "modificationTime": 1e12}}, "'modificationTime' must be an integer", id="add-mtime-exponent"),
    pytest.param({"remove": {**REMOVE, "deletionTimestamp": 7.0}}, "'deletionTimestamp' must be an integer", id="remove-timestamp-float"),
    pytest.param({"add": {**ADD, "modificationTime": "noon"}}, "'modificationTime'", id="add-mtime-is-a-string"),
    pytest.param({"add": {**ADD, "dataChange": "yes"}}, "'dataChange'", id="add-datachange-is-a-string"),
    pytest.param({"add": {**ADD, "stats": 5}}, "'stats'", id="add-stats-is-a-number"),
    pytest.param({"add": {**ADD, "partitionValues": ["a"]}}, "'partitionValues'", id="add-partition-values-a-list"),
    pytest.param({"add": {**ADD, "partitionValues": {"name": 1}}}, "'partitionValues'", id="add-partition-value-a-number"),
    pytest.param({"remove": {**REMOVE, "path": 5}}, "'path'", id="remove-path-is-a-number"),
    pytest.param({"remove": {**REMOVE, "deletionTimestamp": "then"}}, "'deletionTimestamp'", id="remove-timestamp-a-string"),
    pytest.param({"txn": {"appId": "a", "version": "x"}}, "'txn'", id="txn-version-a-string"),
    pytest.param(b'{"commitInfo":{"operation":"\xff\xfe"}}', "UTF-8", id="non-utf8-bytes"),
    pytest.param(b'{"add":{"path":"b.parquet","size":1', "truncated JSON", id="truncated-line"),
    pytest.param(
        [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}] * 2, "two 'protocol'", id="duplicate-protocol"
    ),
    pytest.param("metadata-twice", "two 'metaData'", id="duplicate-metadata"),
]


@pytest.mark.parametrize("content, named", COMMIT_CASES)
def test_malformed_commit_names_file_version_and_field(tmp_path: Path, content: Any, named: str) -> None:
    root = tmp_path / "t"
    _table(root, 1)
    before = _paths(root, 1)
    if content == "metadata-twice":
        data = _lines(_metadata_line(root), _metadata_line(root))
    elif isinstance(content, bytes):
        data = content + b"\n"
    elif isinstance(content, list):
        data = _lines(*content)
    else:
        data = _lines({"commitInfo": {"operation": "WRITE"}}, content)
    _write_commit(root, 2, data)

    err = _read_error(root)
    assert isinstance(err, LogCorruptError), f"{type(err).__name__}: {err}"
    assert err.path == commit_path(2) and err.version == 2
    assert f"{2:020d}.json" in str(err) and "version 2" in str(err)
    assert named in str(err)
    assert _paths(root, 1) == before  # the versions before stay readable


def test_unknown_reader_and_writer_features_are_named(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = _table(root, 1)
    _write_commit(root, 2, _lines({"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["warpDrive"]}}))
    assert txnlog.Table(str(root)).snapshot().version == 2  # a writer feature does not stop readers
    files = sorted(os.listdir(root))
    with pytest.raises(UnsupportedFeatureError, match="warpDrive") as err:
        txnlog.Table(str(root)).append(pa.table({"id": pa.array([9], pa.int64()), "name": ["x"]}, schema=SCHEMA))
    assert err.value.features == ("warpDrive",) or "warpDrive" in err.value.features
    assert sorted(os.listdir(root)) == files, "a refused write left a data file behind"

    _write_commit(
        root, 3, _lines({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                      "readerFeatures": ["timeMachine"], "writerFeatures": ["timeMachine"]}})
    )
    err2 = _read_error(root)
    assert isinstance(err2, UnsupportedFeatureError) and "timeMachine" in err2.features and "timeMachine" in str(err2)
    assert _paths(root, 1) == _paths(table.uri, 1)


# --- version file names, empty logs, a table that is a file ----------------------------------


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("99999999999999999999.json", id="20-digits-beyond-int64"),
        pytest.param(f"{2**63:020d}.json", id="2-to-the-63"),
        pytest.param("000000000000000000003.json", id="21-digits"),
        pytest.param("0003.json", id="4-digits"),
        pytest.param("99999999999999999999.checkpoint.parquet", id="checkpoint-beyond-int64"),
    ],
)
def test_version_file_name_out_of_range(tmp_path: Path, name: str) -> None:
    root = tmp_path / "t"
    _table(root, 2)
    expected = _paths(root, 2)
    (root / LOG_DIR / name).write_bytes(b"{}\n")
    err = _read_error(root)
    assert type(err) is LogCorruptError, f"{type(err).__name__}: {err}"  # not a VersionGapError
    assert err.path == f"{LOG_DIR}/{name}" and name in str(err)
    assert _paths(root, 2) == expected  # an explicit version is still readable


def test_empty_delta_log_is_no_table(tmp_path: Path) -> None:
    (tmp_path / "t" / LOG_DIR).mkdir(parents=True)
    with pytest.raises(TableNotFoundError, match="no commits") as err:
        txnlog.Table(str(tmp_path / "t")).snapshot()
    assert err.value.uri.endswith("/t")
    with pytest.raises(TableNotFoundError):
        txnlog.Table(str(tmp_path / "t")).history()


def test_table_path_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("a,b\n")
    for open_it in (lambda: txnlog.Table(str(path)).snapshot(), lambda: txnlog.Table.create(str(path), SCHEMA)):
        with pytest.raises(InvalidArgumentError, match="is a file") as err:
            open_it()
        assert "data.csv" in str(err.value)
        # Also "no table here", which is what the command's exit code 3 means.
        assert isinstance(err.value, TableNotFoundError) and err.value.uri.endswith("data.csv")
    assert path.read_text() == "a,b\n"


# --- data that does not fit the schema: refused before any file is written ---------------------


@pytest.mark.parametrize(
    "data, field",
    [
        pytest.param(pa.table({"id": ["one"], "name": ["x"]}), "id", id="wrong-type"),
        pytest.param(pa.table({"name": ["x"]}), "id", id="missing-non-nullable"),
        pytest.param(pa.table({"id": pa.array([1], pa.int64()), "name": ["x"], "extra": [1]}), "extra", id="extra-column"),
        pytest.param(pa.table({"id": pa.array([1, None], pa.int64()), "name": ["x", "y"]}), "id", id="null-in-non-nullable"),
    ],
)
def test_schema_mismatch_refused_before_writing(tmp_path: Path, data: pa.Table, field: str) -> None:
    root = tmp_path / "t"
    table = _table(root, 1)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(TxnLogError) as err:
        table.append(data)
    assert isinstance(err.value, (SchemaError, TxnLogError)) and f"'{field}'" in str(err.value), str(err.value)
    assert getattr(err.value, "field", field) in (field, None)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before, "a refused append wrote files"
    assert table.latest_version() == 1


# --- unreadable checkpoints: fall back to what they summarise ----------------------------------


def _corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "not-parquet": b"PAR1 this is not parquet PAR1",
                      "empty": b"", "footer-gone": data[:-8]}[how])


CORRUPTIONS = ["truncated", "not-parquet", "empty", "footer-gone"]


@pytest.fixture
def checkpointed(tmp_path: Path) -> tuple[Path, dict[int, set[str]]]:
    """Versions 0..7 with txnlog checkpoints at 3 and 6 (``_last_checkpoint`` says 6)."""
    root = tmp_path / "t"
    table = _table(root, 3)
    table.snapshot().checkpoint()
    for i in range(4, 7):
        table.append(pa.table({"id": pa.array([i], pa.int64()), "name": [f"n{i}"]}, schema=SCHEMA))
    table.snapshot().checkpoint()
    table.append(pa.table({"id": pa.array([7], pa.int64()), "name": ["n7"]}, schema=SCHEMA))
    assert json.loads((root / LOG_DIR / "_last_checkpoint").read_bytes())["version"] == 6
    return root, {v: _paths(root, v) for v in range(8)}


@pytest.mark.parametrize("how", CORRUPTIONS)
@pytest.mark.parametrize("source", ["commits", "older-checkpoint"])
def test_unreadable_checkpoint_falls_back(
    checkpointed: tuple[Path, dict[int, set[str]]], how: str, source: str, caplog: pytest.LogCaptureFixture
) -> None:
    root, expected = checkpointed
    if source == "older-checkpoint":
        for v in range(0, 3):  # only checkpoint 3 and the commits after it can rebuild 6 and 7
            (root / commit_path(v)).unlink()
    _corrupt(root / classic_checkpoint_path(6), how)
    with caplog.at_level(logging.WARNING, logger="txnlog"):
        for version in (None, 6, 7):
            snap = txnlog.Table(str(root)).snapshot(version)
            assert _paths(root, snap.version) == expected[snap.version]
            assert snap.version == (7 if version is None else version)
    assert any(f"{6:020d}.checkpoint.parquet" in r.getMessage() or "version 6" in r.getMessage() for r in caplog.records)
    assert _paths(root, 5) == expected[5]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_unreadable_checkpoint_with_nothing_to_rebuild_from(
    checkpointed: tuple[Path, dict[int, set[str]]], how: str
) -> None:
    """Commits 0..6 and checkpoint 3 gone: only checkpoint 6 held version 6."""
    root, _ = checkpointed
    for v in range(0, 7):
        (root / commit_path(v)).unlink()
    (root / classic_checkpoint_path(3)).unlink()
    _corrupt(root / classic_checkpoint_path(6), how)
    for version in (None, 6):
        err = _read_error(root, version)
        assert isinstance(err, CorruptCheckpointError), f"{type(err).__name__}: {err}"
        assert err.path == classic_checkpoint_path(6) and err.version == 6
        assert f"{6:020d}.checkpoint.parquet" in str(err)


def test_corrupt_checkpoint_is_not_trusted_by_a_cached_table(checkpointed: tuple[Path, dict[int, set[str]]]) -> None:
    """A Table that already has a state and then finds the commits it needs cleaned up rebuilds
    through the same fallback."""
    root, expected = checkpointed
    table = txnlog.Table(str(root))
    assert table.snapshot(3).version == 3
    _corrupt(root / classic_checkpoint_path(6), "truncated")
    assert _paths(root) == expected[7]
    assert table.snapshot().update().version == 7


def test_v2_checkpoint_with_a_lost_sidecar_falls_back_to_commits(conformance_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "v2"
    shutil.copytree(conformance_dir / "tables" / "checkpoint-v2-table", root)
    latest = txnlog.Table(str(root)).snapshot()
    expected = set(latest.files().column("path").to_pylist())
    sidecars = list((root / SIDECAR_DIR).glob("*.parquet"))
    assert sidecars
    for sidecar in sidecars:
        sidecar.unlink()
    assert _paths(root) == expected
    assert txnlog.Table(str(root)).snapshot().version == latest.version
