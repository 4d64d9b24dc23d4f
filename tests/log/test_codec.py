"""The JSON boundary: protocol field names, round trips, unknown content, and commits written
with the codec that delta-rs reads back."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import deltalake
import hypothesis.strategies as st
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given

from txnlog.errors import LogCorruptError
from txnlog.file_facts import file_keys
from txnlog.log import codec
from txnlog.log.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Format,
    Metadata,
    Protocol,
    RemoveFile,
    Sidecar,
    Txn,
)
from txnlog.log.file_actions import table_from_log_dicts
from txnlog.log.filenames import commit_path

T0 = 1_700_000_000_000
DV = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 34, 3, offset=4)

EXAMPLES: list[Action] = [
    Protocol(1, 2),
    Protocol(3, 7, ("deletionVectors",), ("deletionVectors", "appendOnly")),
    Protocol(1, 7, None, ("appendOnly",)),
    Protocol(3, 7, (), ()),
    Metadata("id-1", '{"type":"struct","fields":[]}', ("p",), {"delta.appendOnly": "true"}, T0, "name", "desc",
             Format("parquet", {"k": "v"})),
    AddFile("p=1/a b.parquet", {"p": "1", "q": None}, 10, T0, True, '{"numRecords":3}', {"t": "v"}, DV, 7, 2, "liquid"),
    AddFile("a.parquet", {}, 10, T0, data_change=False),
    RemoveFile("a.parquet", T0, True, True, {"p": "1"}, 10, None, None, DV, 7, 2),
    RemoveFile("a.parquet"),
    AddCDCFile("_change_data/c.parquet", {"p": "1"}, 5, False, {"t": "v"}),
    Txn("app", 3, T0),
    Txn("app", 0),
    DomainMetadata("delta.clustering", '{"clusteringColumns":[]}', False),
    DomainMetadata("d", "", True),
    CheckpointMetadata(5, {"t": "v"}),
    Sidecar("abc.parquet", 100, T0, None),
    CommitInfo(T0, "WRITE", {"mode": "Append"}, 4, "Serializable", True, "txnlog", "id", {"numFiles": "1"}, T0 + 1,
               "meta", {"clientVersion": "x", "nested": {"a": [1, 2]}}),
]


@pytest.mark.parametrize("action", EXAMPLES, ids=lambda a: type(a).__name__)
def test_round_trip(action: Action) -> None:
    (obj,) = codec.parse_lines(codec.encode_commit([action]), path="x.json")
    (kind, body), = obj.items()
    assert codec.decode_action(kind, body) == action


def test_protocol_field_names() -> None:
    """The camelCase names of PROTOCOL.md, and nothing written for absent optional fields."""
    add = codec.encode_action(EXAMPLES[5])["add"]
    assert set(add) == {"path", "partitionValues", "size", "modificationTime", "dataChange", "stats", "tags",
                        "deletionVector", "baseRowId", "defaultRowCommitVersion", "clusteringProvider"}
    assert set(add["deletionVector"]) == {"storageType", "pathOrInlineDv", "sizeInBytes", "cardinality", "offset"}
    # maxRowIndex is delta-spark's in-memory field, not the protocol's: never written (delta-spark
    # fails an assertion when it re-serializes an add that has one, as RESTORE does).
    with_max = dataclasses.replace(EXAMPLES[5], deletion_vector=dataclasses.replace(DV, max_row_index=20))
    assert codec.encode_action(with_max) == codec.encode_action(EXAMPLES[5])
    assert add["partitionValues"] == {"p": "1", "q": None}  # a null partition value is kept as null
    assert set(codec.encode_action(AddFile("a", {}, 1, T0))["add"]) == {"path", "partitionValues", "size",
                                                                         "modificationTime", "dataChange"}
    remove = codec.encode_action(EXAMPLES[7])["remove"]
    assert {"deletionTimestamp", "extendedFileMetadata", "partitionValues"} <= set(remove)
    meta = codec.encode_action(EXAMPLES[4])["metaData"]
    assert set(meta) == {"id", "name", "description", "format", "schemaString", "partitionColumns", "configuration",
                         "createdTime"}
    assert meta["format"] == {"provider": "parquet", "options": {"k": "v"}}
    assert codec.encode_action(Txn("a", 1, T0)) == {"txn": {"appId": "a", "version": 1, "lastUpdated": T0}}
    assert codec.encode_action(Protocol(1, 2)) == {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    info = codec.encode_action(EXAMPLES[-1])["commitInfo"]
    assert info["inCommitTimestamp"] == T0 + 1 and info["isBlindAppend"] is True and info["clientVersion"] == "x"
    assert codec.encode_action(DomainMetadata("d", "{}"))["domainMetadata"] == {"domain": "d", "configuration": "{}",
                                                                                "removed": False}


def test_commit_info_keeps_unknown_keys_first_as_written() -> None:
    raw = {"timestamp": 1, "operation": "MERGE", "engineInfo": "spark", "future": {"x": 1}, "clientVersion": "y"}
    info = codec.decode_action("commitInfo", raw)
    assert isinstance(info, CommitInfo) and info.other == {"future": {"x": 1}, "clientVersion": "y"}
    assert codec.encode_action(info)["commitInfo"] == raw


def test_unknown_actions_and_fields() -> None:
    data = b"\n".join(
        [
            b'{"commitInfo":{"operation":"WRITE"}}',
            b"",
            b'{"somethingNew":{"a":1}}',
            b'{"add":{"path":"a","partitionValues":{},"size":1,"modificationTime":0,"dataChange":true,"zzz":[1]}}',
            b"   ",
        ]
    )
    actions = codec.decode_commit(data, path="p", version=3)
    assert [type(a) for a in actions] == [CommitInfo, AddFile]
    assert codec.decode_action("somethingNew", {"a": 1}) is None


@pytest.mark.parametrize(
    "kind, body, field",
    [
        ("add", {"size": 1}, "path"),
        ("add", {"path": "a"}, "size"),
        ("metaData", {"id": "x"}, "schemaString"),
        ("protocol", {"minReaderVersion": 1}, "minWriterVersion"),
        ("txn", {"appId": "a"}, "version"),
        ("sidecar", {"path": "a"}, "sizeInBytes"),
        ("add", {"path": "a", "size": 1, "deletionVector": {"storageType": "u"}}, "pathOrInlineDv"),
    ],
)
def test_missing_required_field(kind: str, body: dict[str, object], field: str) -> None:
    with pytest.raises(LogCorruptError, match=f"'{field}'") as info:
        codec.decode_action(kind, body, path="_delta_log/x.json", version=9)
    assert info.value.path == "_delta_log/x.json" and info.value.version == 9
    assert "_delta_log/x.json" in str(info.value) and "9" in str(info.value)


def test_parse_lines_errors_name_the_line() -> None:
    with pytest.raises(LogCorruptError, match="line 2") as info:
        codec.parse_lines(b'{"a":1}\n{"b":', path="f.json", version=4)
    assert (info.value.path, info.value.version) == ("f.json", 4)
    with pytest.raises(LogCorruptError, match="line 1 is not a JSON object"):
        codec.parse_lines(b'"text"\n', path="f.json", version=4)


def test_crlf_lines() -> None:
    assert len(codec.parse_lines(b'{"a":1}\r\n{"b":2}\r\n', path="f")) == 2


# --- the logical-file key, three ways ----------------------------------------------------------

_dvs = st.one_of(
    st.none(),
    st.builds(
        DeletionVectorDescriptor,
        storage_type=st.sampled_from(["u", "i", "p"]),
        path_or_inline_dv=st.text(min_size=1, max_size=30).filter(lambda s: "\x00" not in s),
        size_in_bytes=st.integers(1, 1000),
        cardinality=st.integers(1, 1000),
        offset=st.one_of(st.none(), st.integers(0, 2**31 - 1)),
    ),
)


@given(st.lists(st.tuples(st.text(min_size=1, max_size=20).filter(lambda s: "\x00" not in s), _dvs), max_size=6))
def test_file_key_agrees_across_representations(files: list[tuple[str, DeletionVectorDescriptor | None]]) -> None:
    """file_keys names each file as PROTOCOL.md's (path, deletionVector.uniqueId): the path, and
    the DV's unique id after a NUL when there is one."""
    adds = [AddFile(path, {}, 1, T0, deletion_vector=dv) for path, dv in files]
    bodies = [codec.encode_action(a)["add"] for a in adds]
    arrow_keys = file_keys(table_from_log_dicts(bodies, "add")).to_pylist()
    for add, arrow_key in zip(adds, arrow_keys):
        dv = add.deletion_vector
        uid = None if dv is None else f"{dv.storage_type}{dv.path_or_inline_dv}" + (f"@{dv.offset}" if dv.offset is not None else "")
        assert uid == (dv.unique_id if dv else None)
        assert arrow_key == (add.path if uid is None else f"{add.path}\x00{uid}")


# --- delta-rs reads what the codec writes ------------------------------------------------------


def test_delta_rs_reads_a_log_written_with_the_codec(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "_delta_log").mkdir(parents=True)
    (root / "p=x").mkdir()
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    pq.write_table(data, root / "p=x" / "part-0.parquet")
    schema = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},' \
             '{"name":"p","type":"string","nullable":true,"metadata":{}}]}'
    stats = orjson.dumps({"numRecords": 3, "minValues": {"id": 1}, "maxValues": {"id": 3}, "nullCount": {"id": 0}})
    size = (root / "p=x" / "part-0.parquet").stat().st_size
    actions: list[Action] = [
        CommitInfo(T0, "CREATE TABLE", other={"engine": "test"}),
        Protocol(1, 2),
        Metadata("4a1e5b0c-0000-4000-8000-000000000000", schema, ("p",), {"delta.appendOnly": "false"}, T0),
        AddFile("p=x/part-0.parquet", {"p": "x"}, size, T0, True, stats.decode()),
        Txn("app", 5, T0),
    ]
    (root / commit_path(0)).write_bytes(codec.encode_commit(actions))
    dt = deltalake.DeltaTable(str(root))
    assert dt.version() == 0
    assert dt.metadata().partition_columns == ["p"]
    assert dt.transaction_version("app") == 5
    rows = pa.table(dt.to_pyarrow_table()).sort_by("id")
    assert rows.column("id").to_pylist() == [1, 2, 3]
    assert rows.column("p").to_pylist() == ["x", "x", "x"]
