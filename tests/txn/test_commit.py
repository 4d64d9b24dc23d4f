"""Commit behaviour: table creation, the context manager, commitInfo, retries, protocol rules,
idempotent app transactions, in-commit timestamps and post-commit hooks."""

from __future__ import annotations

import os

import orjson
import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import (
    AmbiguousWriteError,
    CommitFailedError,
    ProtocolViolationError,
    SchemaError,
    TableAlreadyExistsError,
    TransactionError,
    UnsupportedFeatureError,
)
from txnlog.log.filenames import commit_path
from txnlog.txn.retry import RetryPolicy

from .conftest import SCHEMA, make_file


def log_actions(table: Table, version: int) -> list[dict]:
    return [orjson.loads(line) for line in table.store.read(commit_path(version)).splitlines() if line.strip()]


def test_create_writes_protocol_1_2_and_metadata(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"], properties={"delta.appendOnly": "true"})
    actions = log_actions(t, 0)
    assert list(actions[0]) == ["commitInfo"]
    protocol = next(a["protocol"] for a in actions if "protocol" in a)
    assert protocol == {"minReaderVersion": 1, "minWriterVersion": 2}
    snap = t.snapshot()
    assert snap.partition_columns == ("region",)
    assert snap.schema.names == ["id", "region", "amount"]
    assert snap.configuration == {"delta.appendOnly": "true"}


def test_create_modes(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"])
    with t.transaction() as txn:
        txn.add_files([make_file("EU", 1, 2)])
    with pytest.raises(TableAlreadyExistsError):
        Table.create(tmp_path / "t", SCHEMA)
    assert Table.create(tmp_path / "t", SCHEMA, mode="ignore").latest_version() == 1
    other = pa.schema([("x", pa.string())])
    Table.create(tmp_path / "t", other, mode="overwrite")
    snap = Table(tmp_path / "t").snapshot()
    assert snap.version == 2 and snap.num_files == 0 and snap.schema.names == ["x"]


@pytest.mark.parametrize(
    "properties, expected",
    [
        ({"delta.enableChangeDataFeed": "true"}, (1, 4, None, None)),
        ({"delta.columnMapping.mode": "name"}, (2, 5, None, None)),
        ({"delta.enableDeletionVectors": "true"}, (3, 7, ["deletionVectors"], ["appendOnly", "deletionVectors", "invariants"])),
        ({"delta.enableInCommitTimestamps": "true"}, (1, 7, None, ["appendOnly", "inCommitTimestamp", "invariants"])),
    ],
)
def test_protocol_follows_properties(tmp_path, properties, expected):
    p = Table.create(tmp_path / "t", SCHEMA, properties=properties).snapshot().protocol
    assert (p.min_reader_version, p.min_writer_version, p.reader_features and sorted(p.reader_features),
            p.writer_features and sorted(p.writer_features)) == expected


def test_column_mapping_assigns_ids_and_physical_names(tmp_path):
    snap = Table.create(tmp_path / "t", SCHEMA, properties={"delta.columnMapping.mode": "name"}).snapshot()
    fields = orjson.loads(snap.metadata.schema_string)["fields"]
    assert [f["metadata"]["delta.columnMapping.id"] for f in fields] == [1, 2, 3]
    assert all(f["metadata"]["delta.columnMapping.physicalName"].startswith("col-") for f in fields)
    assert snap.configuration["delta.columnMapping.maxColumnId"] == "3"


def test_commit_info_fields(table):
    with table.transaction("DELETE", operation_parameters={"predicate": ["region = 'EU'"]}) as txn:
        txn.remove_files(txn.filter_files("region = 'EU'"))
    info = log_actions(table, txn.result)[0]["commitInfo"]
    assert info["operation"] == "DELETE"
    assert info["operationParameters"] == {"predicate": '["region = \'EU\'"]'}
    assert info["readVersion"] == 1
    assert info["isolationLevel"] == "Serializable"
    assert info["isBlindAppend"] is False
    assert info["engineInfo"].startswith("txnlog/")
    assert len(info["txnId"]) == 36
    assert info["operationMetrics"]["numRemovedFiles"] == "1"
    assert "inCommitTimestamp" not in info


def test_exception_in_block_aborts_and_names_orphans(table):
    before = table.latest_version()
    with pytest.raises(RuntimeError) as err:
        with table.transaction() as txn:
            txn.add_files([make_file("EU", 1, 2)])
            raise RuntimeError("boom")
    assert table.latest_version() == before
    assert txn.orphan_files and any(txn.orphan_files[0] in note for note in err.value.__notes__)
    with pytest.raises(TransactionError, match="aborted"):
        txn.commit()


def test_transaction_cannot_commit_twice_or_update_metadata_twice(table):
    txn = table.transaction()
    txn.update_metadata(configuration={"delta.checkpointInterval": "3"})
    with pytest.raises(TransactionError, match="at most once"):
        txn.update_metadata(configuration={})
    txn.commit()
    with pytest.raises(TransactionError, match="committed"):
        txn.commit()


def test_retries_exhausted_raise_commit_failed_with_orphans(table):
    txn = table.transaction(retry_policy=RetryPolicy(num_retries=0))
    txn.add_files([make_file("EU", 1, 2)])
    with table.transaction() as winner:
        winner.add_files([make_file("US", 11, 12)])
    with pytest.raises(CommitFailedError) as err:
        txn.commit()
    assert err.value.attempts == 1
    assert err.value.orphan_files == txn.orphan_files


def test_ambiguous_write_that_landed_is_not_committed_twice(table, monkeypatch):
    """Fault injection: the PUT lands but the client sees a timeout."""
    store = table.store
    real_put = store.put_if_absent
    calls = []

    def put_then_timeout(path, data):
        calls.append(path)
        real_put(path, data)
        if len(calls) == 1:
            raise AmbiguousWriteError("timed out after sending", path=path)

    monkeypatch.setattr(store, "put_if_absent", put_then_timeout)
    with table.transaction() as txn:
        txn.add_files([make_file("EU", 30, 31)])
    assert txn.result == 2
    assert table.latest_version() == 2  # not also at 3
    assert len(calls) == 1  # found in the log: no second PUT


def test_ambiguous_write_that_did_not_land_is_retried(table, monkeypatch):
    store = table.store
    real_put = store.put_if_absent
    calls = []

    def lost_then_ok(path, data):
        calls.append(path)
        if len(calls) == 1:
            raise AmbiguousWriteError("connection reset", path=path)
        real_put(path, data)

    monkeypatch.setattr(store, "put_if_absent", lost_then_ok)
    with table.transaction() as txn:
        txn.add_files([make_file("EU", 30, 31)])
    assert txn.result == 2 and calls == [commit_path(2), commit_path(2)]


def test_append_only_refuses_data_removes_but_allows_compaction(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"], properties={"delta.appendOnly": "true"})
    with t.transaction() as txn:
        txn.add_files([make_file("EU", 1, 2)])
    txn = t.transaction("DELETE")
    txn.remove_files(txn.read_whole_table())
    with pytest.raises(ProtocolViolationError, match="append-only") as err:
        txn.commit()
    assert err.value.rule == "appendOnly"
    with t.transaction("OPTIMIZE") as opt:
        opt.remove_files(opt.read_whole_table(), data_change=False)
        opt.add_files([make_file("EU", 1, 2, data_change=False)], data_change=False)
    assert opt.result == 2


def test_unsupported_writer_feature_is_refused(tmp_path):
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1"):
        Table.create(tmp_path / "new", SCHEMA, properties={"delta.feature.icebergCompatV1": "supported"})
    assert not Table(tmp_path / "new").exists()
    # A table another engine upgraded to icebergCompatV1: reading is fine, committing is refused.
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"])
    (tmp_path / "t" / "_delta_log" / "00000000000000000001.json").write_bytes(
        b'{"protocol":{"minReaderVersion":1,"minWriterVersion":7,"writerFeatures":["appendOnly","invariants","icebergCompatV1"]}}\n'
    )
    txn = t.transaction()
    txn.add_files([make_file("EU", 1, 2)])
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1") as err:
        txn.commit()
    assert err.value.features == ("icebergCompatV1",)


def test_table_with_unknown_writer_version_is_refused(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"])
    path = tmp_path / "t" / "_delta_log" / "00000000000000000001.json"
    path.write_bytes(b'{"protocol":{"minReaderVersion":1,"minWriterVersion":8}}\n')
    txn = t.transaction()
    txn.add_files([make_file("EU", 1, 2)])
    with pytest.raises(UnsupportedFeatureError, match="writer version 8"):
        txn.commit()


def test_idempotent_app_transactions(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"])
    batch = pa.table({"id": [1, 2], "region": ["EU", "US"], "amount": [1.0, 2.0]})
    assert t.append(batch, app_id="stream", app_version=0) == 1
    assert t.append(batch, app_id="stream", app_version=0) is None  # replay of batch 0: no-op
    assert t.append(batch, app_id="stream", app_version=1) == 2
    snap = t.snapshot()
    assert snap.app_transaction_version("stream") == 1
    assert sum(orjson.loads(s)["numRecords"] for s in snap.files().column("stats").to_pylist()) == 4


def test_check_constraints_are_enforced_on_written_data(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, properties={"delta.constraints.positive": "amount > 0"})
    assert t.snapshot().protocol.min_writer_version == 3
    t.append(pa.table({"id": [1], "region": ["EU"], "amount": [5.0]}))
    with pytest.raises(ProtocolViolationError, match="positive") as err:
        t.append(pa.table({"id": [2, 3], "region": ["EU", "EU"], "amount": [1.0, -1.0]}))
    assert err.value.rule == "constraint:positive"
    assert t.latest_version() == 1


def test_write_rejects_data_that_does_not_fit_the_schema(table):
    with pytest.raises(SchemaError):
        with table.transaction() as txn:
            txn.write(pa.table({"id": [1], "region": ["EU"], "unknown_column": [1]}))


def test_in_commit_timestamps_are_monotonic(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"], properties={"delta.enableInCommitTimestamps": "true"})
    for i in range(3):
        with t.transaction() as txn:
            txn.add_files([make_file("EU", i, i)])
    stamps = [log_actions(t, v)[0]["commitInfo"]["inCommitTimestamp"] for v in range(4)]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4
    # Time travel uses them, not the file modification times.
    for v in range(4):
        os.utime(tmp_path / "t" / commit_path(v), (1, 1))
    assert t.version_at(stamps[2]) == 2


def test_failing_hook_does_not_fail_the_commit(table):
    def broken(ctx):
        raise OSError("disk full")

    broken.name = "broken"  # type: ignore[attr-defined]
    table.hooks.register(broken)
    with table.transaction() as txn:
        txn.add_files([make_file("EU", 1, 2)])
    assert txn.result == 2 and table.latest_version() == 2
    assert [f.hook for f in txn.result.hook_failures] == ["broken"]
    assert isinstance(txn.result.hook_failures[0].error, OSError)


def test_checkpoint_hook_runs_every_interval(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"], properties={"delta.checkpointInterval": "3"})
    for i in range(7):
        with t.transaction() as txn:
            txn.add_files([make_file("EU", i, i)])
        assert not txn.result.hook_failures
    names = sorted(os.listdir(tmp_path / "t" / "_delta_log"))
    assert [n for n in names if "checkpoint.parquet" in n] == [
        "00000000000000000003.checkpoint.parquet",
        "00000000000000000006.checkpoint.parquet",
    ]
    assert orjson.loads((tmp_path / "t" / "_delta_log" / "_last_checkpoint").read_bytes())["version"] == 6
    assert Table(tmp_path / "t").snapshot().num_files == 7


def test_domain_metadata_needs_the_feature(table):
    txn = table.transaction()
    txn.set_domain_metadata("app.x", "{}")
    with pytest.raises(UnsupportedFeatureError, match="domainMetadata"):
        txn.commit()
    with pytest.raises(TransactionError, match="reserved"):
        table.transaction().set_domain_metadata("delta.clustering", "{}")


def test_create_accepts_a_delta_schema(tmp_path):
    delta_schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": False, "metadata": {}},
            {"name": "price", "type": "decimal(10,2)", "nullable": True, "metadata": {}},
        ],
    }
    t = Table.create(tmp_path / "t", delta_schema)
    schema = t.snapshot().schema
    assert schema.field("id").type == pa.int64() and not schema.field("id").nullable
    assert schema.field("price").type == pa.decimal128(10, 2)
    assert Table.create(tmp_path / "u", orjson.dumps(delta_schema).decode()).snapshot().schema == schema


def test_removing_a_file_with_a_deletion_vector_carries_the_vector(log_writer):
    from txnlog.log.actions import DeletionVectorDescriptor

    w = log_writer()
    dv = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 34, 2, offset=1)
    w.create(w.add("a.parquet", num_records=5, deletion_vector=dv), w.add("b.parquet", num_records=3))
    t = Table(w.uri)
    with t.transaction("DELETE") as txn:
        txn.remove_files(txn.filter_files("id > 0"))
    removes = [a["remove"] for a in log_actions(t, txn.result) if "remove" in a]
    by_path = {r["path"]: r for r in removes}
    assert by_path["a.parquet"]["deletionVector"] == {
        "storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "sizeInBytes": 34, "cardinality": 2, "offset": 1,
    }
    assert "deletionVector" not in by_path["b.parquet"]
    assert t.snapshot().num_files == 0 and t.snapshot().tombstones().num_rows == 2
