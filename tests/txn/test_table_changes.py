"""Concurrent protocol and metadata changes, isolation of empty and metadata-changing
transactions: delta-spark 4.4's rules (docs/concurrency.md, "The checks, in order").

Each test starts the loser, lets a winner commit, then commits the loser. The differential test
against delta-spark itself is tests/txn/test_delta_spark_conflicts.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import ConcurrentAppendError, MetadataChangedError, ProtocolChangedError
from txnlog.log.actions import CommitInfo, Metadata, Protocol
from txnlog.log.filenames import commit_path
from txnlog.txn.isolation import IsolationLevel
from txnlog.txn.table_changes import TableView, resolve

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
LEVELS = list(IsolationLevel)


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "v": [0] * len(ids)}, schema=SCHEMA)


def make(tmp_path: Path, **properties: str) -> Table:
    t = Table.create(tmp_path / "t", SCHEMA, properties=properties or None)
    t.append(rows(1, 2, 3))
    t.append(rows(10, 11))
    return t


def set_properties(table: Table, **changes: str) -> int:
    with table.transaction("SET TBLPROPERTIES") as w:
        w.update_metadata(configuration={**table.snapshot().metadata.configuration, **changes})
    assert w.result is not None
    return w.result.version


def deleter(table: Table, level: IsolationLevel | None = None) -> Any:
    """A copy-on-write DELETE of the file holding ids 1..3, with its rows 2 and 3 written back."""
    txn = table.transaction("DELETE", level)
    txn.remove_files(txn.filter_files("id < 5"))
    txn.write(rows(2, 3))
    return txn


def last_commit(table: Table) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in table.store.read(commit_path(table.snapshot().version)).splitlines()]


@pytest.mark.parametrize("level", LEVELS)
def test_enabling_deletion_vectors_does_not_fail_writers(tmp_path, level):
    t = make(tmp_path)
    dml, blind = deleter(t, level), t.transaction("WRITE", level)
    blind.write(rows(20))
    winner = set_properties(t, **{"delta.enableDeletionVectors": "true"})
    assert dml.commit() == winner + 1
    assert blind.commit() == winner + 2
    assert sorted(t.snapshot().to_arrow().column("id").to_pylist()) == [2, 3, 10, 11, 20]
    assert "deletionVectors" in (t.snapshot().protocol.writer_features or ())


def test_enabling_row_tracking_does_not_fail_writers_and_gives_them_ids(tmp_path):
    t = make(tmp_path)
    dml, blind = deleter(t), t.transaction("WRITE")
    blind.write(rows(20, 21))
    winner = set_properties(t, **{"delta.enableRowTracking": "true"})
    backfilled = {f["path"]: f["base_row_id"] for f in t.snapshot().files().to_pylist()}
    assert dml.commit() == winner + 1
    commit = last_commit(t)
    assert commit[0]["commitInfo"]["tags"] == {"delta.rowTracking.preserved": "false"}
    removed = [a["remove"] for a in commit if "remove" in a]
    assert [r["baseRowId"] for r in removed] == [backfilled[r["path"]] for r in removed]
    assert blind.commit() == winner + 2
    files = t.snapshot().files().to_pylist()
    ranges = sorted((f["base_row_id"], f["base_row_id"] + orjson.loads(f["stats"])["numRecords"]) for f in files)
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:], strict=False)), ranges  # no row id twice
    assert sorted(t.snapshot().to_arrow().column("id").to_pylist()) == [2, 3, 10, 11, 20, 21]


def test_enabling_in_commit_timestamps_is_adopted(tmp_path):
    t = make(tmp_path)
    loser = t.transaction("WRITE")
    loser.write(rows(30))
    set_properties(t, **{"delta.enableInCommitTimestamps": "true"})
    winner_ict = last_commit(t)[0]["commitInfo"]["inCommitTimestamp"]
    loser.commit()
    assert last_commit(t)[0]["commitInfo"]["inCommitTimestamp"] > winner_ict


def test_enabling_column_mapping_is_adopted_and_keeps_the_data(tmp_path):
    t = make(tmp_path)
    loser = t.transaction("WRITE")
    loser.write(rows(40))
    set_properties(t, **{"delta.columnMapping.mode": "name"})
    loser.commit()
    assert sorted(t.snapshot().to_arrow().column("id").to_pylist()) == [1, 2, 3, 10, 11, 40]


@pytest.mark.parametrize("level", LEVELS)
def test_a_property_outside_the_allow_list_conflicts(tmp_path, level):
    """Change data feed is a protocol upgrade (adopted) and a property change (not allowed)."""
    t = make(tmp_path)
    loser = deleter(t, level)
    winner = set_properties(t, **{"delta.enableChangeDataFeed": "true"})
    with pytest.raises(MetadataChangedError, match=r"delta\.enableChangeDataFeed") as err:
        loser.commit()
    assert err.value.winning_version == winner


def test_a_protocol_only_upgrade_is_adopted(tmp_path):
    t = make(tmp_path)
    loser = deleter(t)
    set_properties(t, **{"delta.feature.domainMetadata": "supported"})
    version = loser.commit()
    assert version == t.snapshot().version
    assert "domainMetadata" in (t.snapshot().protocol.writer_features or ())


def test_both_changing_the_protocol_conflicts(tmp_path):
    t = make(tmp_path)
    loser = t.transaction("SET TBLPROPERTIES")
    loser.update_metadata(configuration={"delta.feature.domainMetadata": "supported"})
    set_properties(t, **{"delta.feature.deletionVectors": "supported"})
    with pytest.raises(ProtocolChangedError, match="changes the protocol too"):
        loser.commit()


def test_both_changing_metadata_conflicts(tmp_path):
    t = make(tmp_path)
    loser = t.transaction("SET TBLPROPERTIES")
    loser.update_metadata(configuration={"delta.checkpointInterval": "5"})
    set_properties(t, **{"delta.enableDeletionVectors": "true"})
    with pytest.raises(MetadataChangedError, match="changes the metadata too"):
        loser.commit()


def _write_commit(table: Table, *actions: dict[str, Any]) -> None:
    body = b"\n".join(orjson.dumps(a) for a in [{"commitInfo": {"operation": "MANUAL"}}, *actions]) + b"\n"
    table.store.put_if_absent(commit_path(table.snapshot().version + 1), body)


@pytest.mark.parametrize(
    "writer_features, reason",
    [
        (["appendOnly", "invariants"], "dropped features.*domainMetadata"),  # a downgrade
        (["appendOnly", "invariants", "domainMetadata", "materializePartitionColumns"], "materializePartitionColumns"),  # unwritable
    ],
)
def test_a_protocol_that_drops_a_feature_or_txnlog_cannot_write_conflicts(tmp_path, writer_features, reason):
    t = make(tmp_path, **{"delta.feature.domainMetadata": "supported"})
    loser = deleter(t)
    _write_commit(t, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": writer_features}})
    with pytest.raises(ProtocolChangedError, match=reason):
        loser.commit()


IDENTITY_SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {
            "delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": False,
            "delta.identity.highWaterMark": 5,
        }},
        {"name": "v", "type": "long", "nullable": True, "metadata": {}},
    ],
}


def _identity_view(changes_metadata: bool = False) -> TableView:
    protocol = Protocol(1, 6)
    metadata = Metadata(id="t", schema_string=orjson.dumps(IDENTITY_SCHEMA).decode(), created_time=1)
    return TableView(protocol, protocol, metadata, changes_protocol=False, changes_metadata=changes_metadata)


def _bumped(view: TableView, mark: int, **changes: Any) -> Metadata:
    schema = orjson.loads(view.metadata.schema_string)
    schema["fields"][0]["metadata"]["delta.identity.highWaterMark"] = mark
    return Metadata(id="t", schema_string=orjson.dumps(schema).decode(), created_time=1, **changes)


def _resolve(view: TableView, metadata: Metadata, tags: dict[str, str] | None = None) -> Any:
    info = CommitInfo(operation="WRITE", other={"tags": tags} if tags else {})
    return resolve(view, [(7, None, metadata, info)], lambda v: f"version {v}", lambda v: {"winning_version": v})


def test_an_identity_high_water_mark_bump_is_tolerated_unless_the_loser_changes_metadata():
    view = _identity_view()
    after, conflict = _resolve(view, _bumped(view, 9))
    assert conflict is None and after.metadata == view.metadata  # tolerated, not adopted
    _, tagged = _resolve(view, _bumped(view, 9), {"delta.identity.schemaUpdate": "true"})
    assert tagged is None
    _, both = _resolve(_identity_view(changes_metadata=True), _bumped(view, 9))
    assert isinstance(both[2], MetadataChangedError)
    _, more = _resolve(view, _bumped(view, 9, configuration={"delta.appendOnly": "true"}))
    assert isinstance(more[2], MetadataChangedError)


def test_a_metadata_changer_meets_blind_appends_under_write_serializable(tmp_path):
    """A CHECK constraint verified on every row must also hold for a concurrent blind append."""
    t = make(tmp_path, **{"delta.isolationLevel": "WriteSerializable"})
    loser = t.transaction("ADD CONSTRAINT")
    assert all(v >= 0 for v in loser.snapshot.to_arrow().column("v").to_pylist())  # the check
    loser.read_whole_table()
    loser.update_metadata(configuration={**t.snapshot().metadata.configuration, "delta.constraints.v_positive": "v >= 0"})
    t.append(pa.table({"id": [99], "v": [-1]}, schema=SCHEMA))  # a blind append of a violating row
    with pytest.raises(ConcurrentAppendError):
        loser.commit()
    plain = t.transaction("DELETE")  # without a metadata change, WriteSerializable orders blind appends after
    plain.remove_files(plain.read_whole_table())
    winner = t.append(rows(100))
    assert plain.commit() == winner + 1


@pytest.mark.parametrize("level", LEVELS)
def test_a_transaction_with_no_actions_commits_under_snapshot_isolation(tmp_path, level):
    t = make(tmp_path)
    loser = t.transaction("DELETE", level)
    loser.filter_files("id < 5")  # found nothing to delete
    with t.transaction("MERGE") as w:  # a non-blind append where it read
        w.filter_files("id < 0")
        w.write(rows(4))
    assert loser.commit() == w.result + 1
    assert t.history(1)[0].commit_info.isolation_level == "SnapshotIsolation"


def test_turning_column_mapping_on_keeps_the_data_and_refuses_id_mode(tmp_path):
    """Existing files name columns by their logical names: those become the physical names."""
    from txnlog.errors import InvalidTablePropertyError

    t = make(tmp_path)
    with pytest.raises(InvalidTablePropertyError, match="id cannot be turned on for an existing table"):
        set_properties(t, **{"delta.columnMapping.mode": "id"})
    set_properties(t, **{"delta.columnMapping.mode": "name"})
    fields = orjson.loads(t.snapshot().metadata.schema_string)["fields"]
    assert [f["metadata"]["delta.columnMapping.physicalName"] for f in fields] == ["id", "v"]
    assert sorted(t.snapshot().to_arrow().column("id").to_pylist()) == [1, 2, 3, 10, 11]
