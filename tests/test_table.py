"""The public read API: Table and Snapshot, on ``memory://`` and local tables."""

from __future__ import annotations

import decimal
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

import txnlog
from txnlog import properties as props
from txnlog.errors import TableNotFoundError, VersionNotFoundError
from txnlog.log.actions import CommitInfo, DomainMetadata, Metadata, Protocol, RemoveFile, Txn
from txnlog.schema import FIELD_METADATA_KEY

T0 = 1_700_000_000_000


@pytest.fixture
def mem(log_writer: Callable[..., Any], memory_table_uri: str) -> Any:
    """A memory:// table: v0 create, v1 two appends with a txn, v2 a remove, v3 a domain."""
    w = log_writer(memory_table_uri)
    w.create(
        CommitInfo(T0, "CREATE TABLE", {"partitionBy": "[\"part\"]"}, engine_info="tests"),
        partition_columns=("part",),
        configuration={"delta.checkpointInterval": "5", "delta.appendOnly": "false"},
    )
    w.commit(1, CommitInfo(T0 + 1, "WRITE", read_version=0, is_blind_append=True),
             w.add("part=a/1.parquet", partition_values={"part": "a"}, num_records=3),
             w.add("part=b/2.parquet", partition_values={"part": "b"}, num_records=4),
             Txn("stream-1", 7, T0))
    w.commit(2, CommitInfo(T0 + 2, "DELETE", read_version=1, other={"custom": [1, 2]}),
             RemoveFile("part=a/1.parquet", T0 + 2, partition_values={"part": "a"}, size=100))
    w.commit(3, CommitInfo(T0 + 3, "CLUSTER"), DomainMetadata("my.domain", '{"k":1}'))
    return w


def test_memory_table_basics(mem: Any) -> None:
    table = txnlog.Table(mem.uri)
    assert table.uri == mem.uri
    assert table.exists()
    assert table.latest_version() == 3
    snap = table.snapshot()
    assert snap.version == 3
    assert snap.files().column("path").to_pylist() == ["part=b/2.parquet"]
    assert snap.files().column("partition_values").to_pylist() == [[("part", "b")]]
    assert snap.num_files == 1
    assert snap.tombstones().column("path").to_pylist() == ["part=a/1.parquet"]
    assert snap.tombstones().column("deletion_timestamp").to_pylist() == [T0 + 2]
    assert snap.app_transaction_version("stream-1") == 7
    assert snap.app_transaction_version("other") is None
    assert snap.domain_metadata("my.domain") == '{"k":1}'
    assert set(snap.domains) == {"my.domain"}
    assert snap.table_property(props.CHECKPOINT_INTERVAL) == 5
    assert table.snapshot(version=1).num_files == 2
    assert "version=3" in repr(snap)


def test_snapshot_metadata_and_protocol(mem: Any) -> None:
    snap = txnlog.Table(mem.uri).snapshot()
    assert snap.protocol == Protocol(1, 2)
    assert snap.protocol.reader_features is None
    md = snap.metadata
    assert isinstance(md, Metadata)
    assert md.id == "00000000-0000-0000-0000-000000000001"
    assert md.created_time == T0
    assert md.format.provider == "parquet"
    assert snap.partition_columns == ("part",)
    assert snap.configuration == {"delta.checkpointInterval": "5", "delta.appendOnly": "false"}
    assert snap.schema.names == ["id", "part"]
    assert snap.schema.field("id").type == pa.int64()


def test_history(mem: Any) -> None:
    table = txnlog.Table(mem.uri)
    history = table.history()
    assert [h.version for h in history] == [3, 2, 1, 0]
    assert [h.commit_info.operation for h in history] == ["CLUSTER", "DELETE", "WRITE", "CREATE TABLE"]
    timestamps = [h.timestamp for h in history]
    assert timestamps == sorted(timestamps, reverse=True) and len(set(timestamps)) == 4
    assert [h.version for h in table.history(limit=2)] == [3, 2]
    assert table.history(limit=0) == []
    entry = table.history(limit=3)[1].to_dict()
    assert entry["version"] == 2
    assert entry["operation"] == "DELETE"
    assert entry["readVersion"] == 1
    assert entry["custom"] == [1, 2]
    assert entry["timestamp"] == table.history()[1].timestamp  # the commit time, not commitInfo's
    json.dumps(entry)  # plain JSON types


def test_history_without_commit_info(log_writer: Callable[..., Any], memory_table_uri: str) -> None:
    w = log_writer(memory_table_uri)
    w.create()
    (entry,) = txnlog.Table(w.uri).history()
    assert entry.commit_info is None
    assert entry.to_dict() == {"version": 0, "timestamp": entry.timestamp}


def test_no_table(memory_table_uri: str, tmp_path: Path) -> None:
    for uri in (memory_table_uri, str(tmp_path / "nothing")):
        table = txnlog.Table(uri)
        assert not table.exists()
        with pytest.raises(TableNotFoundError) as info:
            table.snapshot()
        assert info.value.uri == table.uri
        with pytest.raises(TableNotFoundError):
            table.latest_version()


def test_version_errors(mem: Any) -> None:
    table = txnlog.Table(mem.uri)
    with pytest.raises(VersionNotFoundError) as info:
        table.snapshot(version=4)
    assert info.value.version == 4
    with pytest.raises(VersionNotFoundError):
        table.snapshot(version=-1)


def test_local_path_and_file_uri_are_the_same_table(tmp_path: Path) -> None:
    deltalake.write_deltalake(str(tmp_path / "t"), pa.table({"x": [1]}))
    a = txnlog.Table(tmp_path / "t")
    b = txnlog.Table(f"file://{tmp_path / 't'}/")
    assert a.uri == b.uri
    assert a.snapshot().files().equals(b.snapshot().files())


# --- schemas -------------------------------------------------------------------------------------

ALL_TYPES = pa.schema(
    [
        ("byte", pa.int8()),
        ("short", pa.int16()),
        ("int", pa.int32()),
        ("long", pa.int64()),
        ("float", pa.float32()),
        ("double", pa.float64()),
        ("bool", pa.bool_()),
        ("string", pa.string()),
        ("binary", pa.binary()),
        ("date", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ts_ntz", pa.timestamp("us")),
        ("dec", pa.decimal128(10, 2)),
        ("dec38", pa.decimal128(38, 10)),
        ("list", pa.list_(pa.field("element", pa.int32()))),
        ("map", pa.map_(pa.string(), pa.int64())),
        ("struct", pa.struct([("a", pa.int32()), ("b", pa.list_(pa.field("element", pa.string())))])),
        ("deep", pa.list_(pa.field("element", pa.struct([("m", pa.map_(pa.string(), pa.float64()))])))),
    ]
)


def test_schema_of_a_delta_rs_table_with_every_type(tmp_path: Path) -> None:
    """delta-rs maps Arrow types to Delta types on write; txnlog maps them back to the same ones."""
    row = {
        "byte": 1, "short": 2, "int": 3, "long": 4, "float": 1.5, "double": 2.5, "bool": True, "string": "s",
        "binary": b"b", "date": 19000, "ts": 1, "ts_ntz": 2, "dec": decimal.Decimal("1.25"),
        "dec38": decimal.Decimal("1.0000000001"), "list": [1], "map": [("k", 1)], "struct": {"a": 1, "b": ["x"]},
        "deep": [{"m": [("k", 1.0)]}],
    }
    deltalake.write_deltalake(str(tmp_path / "t"), pa.Table.from_pylist([row], schema=ALL_TYPES))
    snap = txnlog.Table(tmp_path / "t").snapshot()
    schema_string = json.loads(snap.metadata.schema_string)
    types = {f["name"]: f["type"] for f in schema_string["fields"]}
    assert types["ts_ntz"] == "timestamp_ntz" and types["dec"] == "decimal(10,2)"
    assert snap.protocol.has_reader_feature("timestampNtz")
    for field in ALL_TYPES:
        assert snap.schema.field(field.name).type.equals(field.type), field.name


def test_a_type_that_needs_a_feature_adds_it_wherever_it_is_and_only_then(tmp_path: Path) -> None:
    """variant (like timestamp_ntz) needs its reader and writer feature, also nested; a column
    merely *named* after such a type needs nothing (delta-spark refuses to write a variant
    table whose protocol lacks variantType)."""

    def create(name: str, fields: list[dict[str, Any]]) -> Protocol:
        with txnlog.Table(tmp_path / name).create_transaction() as txn:
            txn.update_metadata(schema={"type": "struct", "fields": fields})
        return txnlog.Table(tmp_path / name).snapshot().protocol

    nested = {"type": "array", "elementType": {"type": "struct", "fields": [{"name": "x", "type": "variant", "nullable": True, "metadata": {}}]},
              "containsNull": True}
    protocol = create("nested", [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                 {"name": "a", "type": nested, "nullable": True, "metadata": {}}])
    assert protocol.has_reader_feature("variantType") and "variantType" in (protocol.writer_features or ())
    named = create("named", [{"name": "variant", "type": "string", "nullable": True, "metadata": {}},
                             {"name": "timestamp_ntz", "type": "long", "nullable": True, "metadata": {}}])
    assert (named.min_reader_version, named.min_writer_version) == (1, 2)


def test_schema_from_a_hand_written_schema_string(log_writer: Callable[..., Any], memory_table_uri: str) -> None:
    schema = {
        "type": "struct",
        "fields": [
            {"name": "v", "type": "decimal(5, 0)", "nullable": False, "metadata": {"comment": "c"}},
            {"name": "big", "type": "decimal(38,38)", "nullable": True, "metadata": {}},
            {"name": "ntz", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
            {"name": "arr", "type": {"type": "array", "elementType": {"type": "map", "keyType": "string",
                                                                        "valueType": "long", "valueContainsNull": False},
                                     "containsNull": False}, "nullable": True, "metadata": {}},
        ],
    }
    w = log_writer(memory_table_uri)
    w.commit(0, Protocol(3, 7, ("timestampNtz",), ("timestampNtz",)), Metadata("m", json.dumps(schema)))
    s = txnlog.Table(w.uri).snapshot().schema
    assert s.field("v").type == pa.decimal128(5, 0) and not s.field("v").nullable
    assert json.loads(s.field("v").metadata[FIELD_METADATA_KEY]) == {"comment": "c"}
    assert s.field("big").type == pa.decimal128(38, 38)
    assert s.field("ntz").type == pa.timestamp("us")
    arr = s.field("arr").type
    assert not arr.value_field.nullable
    assert arr.value_type.item_type == pa.int64() and not arr.value_type.item_field.nullable


def test_metadata_change_is_visible_at_its_version(mem: Any) -> None:
    table = txnlog.Table(mem.uri)
    base = table.snapshot().metadata
    mem.commit(4, replace(base, configuration={"delta.checkpointInterval": "20"}, name="renamed"))
    assert table.snapshot().table_property(props.CHECKPOINT_INTERVAL) == 20
    assert table.snapshot().metadata.name == "renamed"
    assert table.snapshot(version=3).table_property(props.CHECKPOINT_INTERVAL) == 5
