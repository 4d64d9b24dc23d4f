"""Malformed logs fail with a TxnLogError that names the file and version, never with a bare
KeyError, IndexError or ArrowInvalid; unsupported protocols are refused by name; the reader
features txnlog handles are read."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txnlog
from txnlog.errors import (
    CorruptCheckpointError,
    LogCorruptError,
    TxnLogError,
    UnsupportedFeatureError,
    VersionGapError,
)
from txnlog.log.actions import DeletionVectorDescriptor, Metadata, Protocol
from txnlog.log.codec import encode_action
from txnlog.log.filenames import LOG_DIR, SIDECAR_DIR, classic_checkpoint_path, commit_path
from txnlog.schema import FIELD_METADATA_KEY

T0 = 1_700_000_000_000
ADD = {"path": "a.parquet", "partitionValues": {}, "size": 10, "modificationTime": T0, "dataChange": True}


def _fails(uri: str, error: type[TxnLogError], version: int | None = None) -> TxnLogError:
    """The error of reading the latest (or ``version``) snapshot; any other exception fails the test."""
    with pytest.raises(TxnLogError) as info:
        txnlog.Table(uri).snapshot(version=version)
    assert isinstance(info.value, error), f"{type(info.value).__name__}: {info.value}"
    return info.value


def _names(err: TxnLogError, path: str, version: int) -> None:
    assert getattr(err, "path", None) == path
    assert getattr(err, "version", None) == version
    assert path.rsplit("/", 1)[-1] in str(err) and str(version) in str(err)


# --- commits ---------------------------------------------------------------------------------


def test_version_gap(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create()
    w.commit(1, w.add("a.parquet"))
    w.commit(3, w.add("c.parquet"))
    err = _fails(w.uri, VersionGapError)
    _names(err, commit_path(2), 2)
    assert txnlog.Table(w.uri).snapshot(version=1).num_files == 1  # before the gap is fine


def test_missing_protocol(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    metadata = Metadata(id="m", schema_string='{"type":"struct","fields":[]}')
    w.commit(0, metadata, w.add("a.parquet"))
    err = _fails(w.uri, LogCorruptError)
    assert err.version == 0 and "protocol" in str(err) and "version 0" in str(err)


def test_missing_metadata(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.commit(0, Protocol(1, 2))
    w.commit(1, w.add("a.parquet"))
    err = _fails(w.uri, LogCorruptError)
    assert err.version == 1 and "metaData" in str(err) and "version 1" in str(err)


@pytest.mark.parametrize(
    "line, field",
    [
        pytest.param(b'{"add":{"path":"b.parquet","size":1', "corrupt or truncated JSON", id="truncated-last-line"),
        pytest.param(b"this is not json", "corrupt or truncated JSON", id="garbage"),
        pytest.param(b"[1, 2]", "not a JSON object", id="line-not-an-object"),
        pytest.param(b'{"add": 5}', "not an object", id="add-not-an-object"),
        pytest.param(b'{"remove": "x"}', "not an object", id="remove-not-an-object"),
        pytest.param(b'{"txn": []}', "not an object", id="txn-not-an-object"),
        pytest.param(b'{"metaData": 7}', "not an object", id="metadata-not-an-object"),
        pytest.param(orjson.dumps({"add": {k: v for k, v in ADD.items() if k != "path"}}), "'path'", id="add-without-path"),
        pytest.param(orjson.dumps({"add": {**ADD, "path": None}}), "'path'", id="add-null-path"),
        pytest.param(orjson.dumps({"add": {k: v for k, v in ADD.items() if k != "size"}}), "'size'", id="add-without-size"),
        pytest.param(orjson.dumps({"remove": {"deletionTimestamp": T0}}), "'path'", id="remove-without-path"),
        pytest.param(orjson.dumps({"add": {**ADD, "size": "big"}}), "malformed 'add'", id="add-size-not-a-number"),
        pytest.param(orjson.dumps({"add": {**ADD, "partitionValues": [1]}}), "malformed 'add'", id="add-bad-partition-values"),
        pytest.param(orjson.dumps({"add": {**ADD, "deletionVector": 7}}), "deletionVector.storageType", id="add-bad-dv"),
        pytest.param(orjson.dumps({"add": {**ADD, "deletionVector": {"storageType": "u"}}}), "deletionVector.pathOrInlineDv", id="add-dv-lacking-fields"),
        pytest.param(orjson.dumps({"txn": {"version": 3}}), "'appId'", id="txn-without-app-id"),
        pytest.param(orjson.dumps({"protocol": {"minReaderVersion": "x", "minWriterVersion": 2}}), "malformed 'protocol'", id="protocol-bad-version"),
        pytest.param(orjson.dumps({"domainMetadata": {"configuration": "{}"}}), "'domain'", id="domain-without-name"),
    ],
)
def test_malformed_commit(line: bytes, field: str, log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create(w.add("a.parquet"))
    w.commit(1, {"commitInfo": {"operation": "WRITE"}}, line)
    err = _fails(w.uri, LogCorruptError)
    _names(err, commit_path(1), 1)
    assert field in str(err)
    assert txnlog.Table(w.uri).snapshot(version=0).num_files == 1


def test_malformed_winning_metadata(log_writer: Callable[..., Any]) -> None:
    """The latest metaData lacks schemaString (required)."""
    w = log_writer()
    w.create()
    w.commit(1, {"metaData": {"id": "x", "format": {"provider": "parquet"}, "partitionColumns": []}})
    err = _fails(w.uri, LogCorruptError)
    _names(err, commit_path(1), 1)
    assert "schemaString" in str(err)


def test_schema_string_that_is_not_a_schema(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.commit(0, Protocol(1, 2), Metadata(id="m", schema_string='{"type":"struct","fields":[{"name":"x"}]}'))
    with pytest.raises(TxnLogError, match="lacks 'type'"):
        _ = txnlog.Table(w.uri).snapshot().schema


# --- checkpoints -----------------------------------------------------------------------------


@pytest.fixture
def checkpointed(log_writer: Callable[..., Any]) -> Any:
    """A table whose version 1 is a classic checkpoint written by delta-rs, and commits 0 and 1
    deleted, so the checkpoint is the only source of version 1."""
    import deltalake

    w = log_writer()
    w.create(w.add("a.parquet"))
    w.commit(1, w.add("b.parquet"))
    deltalake.DeltaTable(w.uri).create_checkpoint()
    w.commit(2, w.add("c.parquet"))
    for v in (0, 1):
        Path(w.uri, commit_path(v)).unlink()
    assert txnlog.Table(w.uri).snapshot().num_files == 3
    return w


def test_truncated_checkpoint(checkpointed: Any) -> None:
    path = Path(checkpointed.uri, classic_checkpoint_path(1))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    err = _fails(checkpointed.uri, CorruptCheckpointError)
    _names(err, classic_checkpoint_path(1), 1)


def test_checkpoint_that_is_not_parquet(checkpointed: Any) -> None:
    Path(checkpointed.uri, classic_checkpoint_path(1)).write_bytes(b"PAR1 but not really")
    _names(_fails(checkpointed.uri, CorruptCheckpointError), classic_checkpoint_path(1), 1)


def _rewrite_checkpoint(w: Any, change: Callable[[pa.Table], pa.Table]) -> None:
    path = Path(w.uri, classic_checkpoint_path(1))
    pq.write_table(change(pq.read_table(path)), path)


def _without_add_child(table: pa.Table, child: str) -> pa.Table:
    add = table.column("add").combine_chunks()
    fields = [f for f in add.type if f.name != child]
    pruned = pa.StructArray.from_arrays([add.field(f.name) for f in fields], fields=fields, mask=add.is_null())
    return table.set_column(table.schema.get_field_index("add"), "add", pruned)


def test_checkpoint_add_column_without_path(checkpointed: Any) -> None:
    _rewrite_checkpoint(checkpointed, lambda t: _without_add_child(t, "path"))
    err = _fails(checkpointed.uri, CorruptCheckpointError)
    _names(err, classic_checkpoint_path(1), 1)
    assert "'path'" in str(err)


def test_checkpoint_add_row_with_null_path(checkpointed: Any) -> None:
    def null_path(table: pa.Table) -> pa.Table:
        add = table.column("add").combine_chunks()
        fields = [f.with_nullable(True) for f in add.type]
        arrays = [pa.nulls(len(add), pa.string()) if f.name == "path" else add.field(f.name) for f in fields]
        rebuilt = pa.StructArray.from_arrays(arrays, fields=fields, mask=add.is_null())
        return table.set_column(table.schema.get_field_index("add"), "add", rebuilt)

    _rewrite_checkpoint(checkpointed, null_path)
    _names(_fails(checkpointed.uri, CorruptCheckpointError), classic_checkpoint_path(1), 1)


def test_checkpoint_without_protocol(checkpointed: Any) -> None:
    """Missing columns are null (PROTOCOL.md), but then no protocol is known at version 2."""
    _rewrite_checkpoint(checkpointed, lambda t: t.drop_columns(["protocol"]))
    err = _fails(checkpointed.uri, LogCorruptError)
    assert err.version == 2 and "protocol" in str(err)


def test_missing_tombstone_column_is_no_error(checkpointed: Any) -> None:
    _rewrite_checkpoint(checkpointed, lambda t: t.drop_columns(["remove"]))
    snap = txnlog.Table(checkpointed.uri).snapshot()
    assert snap.num_files == 3
    assert snap.tombstones().num_rows == 0


@pytest.fixture
def v2_table(conformance_dir: Path, tmp_path: Path) -> Path:
    root = tmp_path / "v2"
    shutil.copytree(conformance_dir / "tables" / "checkpoint-v2-table", root)
    for v in range(9):
        (root / commit_path(v)).unlink()  # checkpoint 8 is the only source of version 8
    return root


def _sidecar(root: Path) -> Path:
    (sidecar,) = (root / SIDECAR_DIR).glob(f"{8:020d}.*.parquet")
    return sidecar


def test_missing_sidecar(v2_table: Path) -> None:
    sidecar = _sidecar(v2_table)
    sidecar.unlink()
    err = _fails(str(v2_table), CorruptCheckpointError)
    _names(err, f"{SIDECAR_DIR}/{sidecar.name}", 8)
    assert ".checkpoint.e5ac4dc4" in str(err)  # the V2 checkpoint that references it


def test_unreadable_sidecar(v2_table: Path) -> None:
    sidecar = _sidecar(v2_table)
    sidecar.write_bytes(sidecar.read_bytes()[:100])
    _names(_fails(str(v2_table), CorruptCheckpointError), f"{SIDECAR_DIR}/{sidecar.name}", 8)


def test_v2_json_checkpoint_with_a_bad_line(v2_table: Path) -> None:
    (top,) = (v2_table / LOG_DIR).glob(f"{8:020d}.checkpoint.*.json")
    top.write_bytes(top.read_bytes() + b'{"add": 3}\n')
    err = _fails(str(v2_table), CorruptCheckpointError)
    _names(err, f"{LOG_DIR}/{top.name}", 8)


# --- protocol versions and features ------------------------------------------------------------


def test_reader_version_4_is_refused(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create(protocol=Protocol(4, 7, ("deletionVectors",), ("deletionVectors",)))
    err = _fails(w.uri, UnsupportedFeatureError)
    assert err.version == 4
    assert "reader version 4" in str(err)


def test_unknown_reader_feature_is_refused(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create(protocol=Protocol(3, 7, ("deletionVectors", "quantumEntanglement"), ("deletionVectors", "quantumEntanglement")))
    err = _fails(w.uri, UnsupportedFeatureError)
    assert err.features == ("quantumEntanglement",)
    assert "quantumEntanglement" in str(err)


def test_protocol_upgrade_to_unsupported_is_refused_on_update(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create()
    snap = txnlog.Table(w.uri).snapshot()
    w.commit(1, Protocol(3, 7, ("somethingNew",), ("somethingNew",)))
    with pytest.raises(UnsupportedFeatureError, match="somethingNew"):
        snap.update()


def test_deletion_vectors_and_column_mapping_are_readable(log_writer: Callable[..., Any]) -> None:
    """Both only change how data files are decoded: replay carries the DV descriptor in files()
    and the physical column names in the schema's field metadata."""
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True,
             "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-5f1c"}},
            {"name": "s", "type": {"type": "struct", "fields": [
                {"name": "x", "type": "string", "nullable": True,
                 "metadata": {"delta.columnMapping.id": 3, "delta.columnMapping.physicalName": "col-9a2b"}}]},
             "nullable": True, "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-77aa"}},
        ],
    }
    features = ("columnMapping", "deletionVectors")
    w = log_writer()
    dv = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 34, 3, offset=1, max_row_index=9)
    # Another writer's add may carry maxRowIndex (txnlog never writes it): it is read.
    add = encode_action(w.add("a.parquet", deletion_vector=dv))["add"]
    add = {"add": {**add, "deletionVector": {**add["deletionVector"], "maxRowIndex": 9}}}
    w.commit(
        0,
        Protocol(3, 7, features, features),
        Metadata(id="m", schema_string=json.dumps(schema),
                 configuration={"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3"}),
        add,
    )
    snap = txnlog.Table(w.uri).snapshot()
    row = snap.files().to_pylist()[0]
    assert row["deletion_vector"] == {
        "storage_type": "u", "path_or_inline_dv": dv.path_or_inline_dv, "offset": 1,
        "size_in_bytes": 34, "cardinality": 3, "max_row_index": 9,
    }
    field_id = snap.schema.field("id")
    assert json.loads(field_id.metadata[FIELD_METADATA_KEY])["delta.columnMapping.physicalName"] == "col-5f1c"
    nested = snap.schema.field("s").type.field("x")
    assert json.loads(nested.metadata[FIELD_METADATA_KEY])["delta.columnMapping.physicalName"] == "col-9a2b"


def test_corpus_column_mapping_and_dv_table(conformance_dir: Path) -> None:
    """table_with_partitioning_mapping (columnMapping + deletionVectors, which delta-rs 1.6.6
    refuses to scan): physical names are in the schema; partition values are keyed by them."""
    snap = txnlog.Table(conformance_dir / "tables" / "table_with_partitioning_mapping").snapshot()
    physical = {
        f.name: json.loads(f.metadata[FIELD_METADATA_KEY]).get("delta.columnMapping.physicalName") for f in snap.schema
    }
    assert all(physical.values())
    assert snap.configuration["delta.columnMapping.mode"] in ("name", "id")
    keys = {k for pv in snap.files().column("partition_values").to_pylist() for k, _ in pv}
    part_physical = {physical[c] for c in snap.partition_columns}
    assert keys and keys <= part_physical | set(snap.partition_columns)
