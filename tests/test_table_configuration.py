"""TableConfiguration: the facts derived from a table's protocol and metadata, checked on tables
other engines wrote (the conformance corpus) and on protocol/property combinations that must
not be confused (a feature supported but not enabled, a property set without its feature)."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import txnlog
from txnlog import Table, TableConfiguration, WriteContext
from txnlog.errors import InvalidTablePropertyError, SchemaError
from txnlog.log.actions import Metadata, Protocol
from txnlog.schema import arrow_to_delta_schema

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])


def config(protocol: Protocol, properties: dict[str, str] | None = None, schema: pa.Schema = SCHEMA, partition_by: tuple[str, ...] = ()) -> TableConfiguration:
    metadata = Metadata("id", arrow_to_delta_schema(schema), partition_by, properties or {})
    return TableConfiguration.from_actions(protocol, metadata)


def corpus_table(conformance_dir: Path, name: str) -> txnlog.Snapshot:
    return Table(conformance_dir / "tables" / name).snapshot()


def physical_names_in_schema_string(snapshot: txnlog.Snapshot) -> dict[str, str]:
    fields = json.loads(snapshot.metadata.schema_string)["fields"]
    return {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in fields}


# -- tables other engines wrote ------------------------------------------------------------


def test_a_plain_legacy_table_has_every_default(conformance_dir):
    c = corpus_table(conformance_dir, "simple_table").table_configuration
    assert (c.column_mapping_mode, c.is_column_mapped, c.physical_names) == ("none", False, None)
    assert c.writer_features == {"appendOnly", "invariants"}  # implied by writer version 2
    assert not (c.deletion_vectors_supported or c.deletion_vectors_enabled)
    assert not (c.row_tracking_supported or c.row_tracking_enabled)
    assert not (c.change_data_feed_enabled or c.in_commit_timestamps_enabled or c.append_only)
    assert (c.checkpoint_interval, c.checkpoint_policy, c.isolation_level) == (10, "classic", "Serializable")
    assert c.in_commit_timestamp_enablement is None
    assert c.physical_name("id") == "id"


def test_column_mapping_by_name_gives_the_physical_names_of_the_schema(conformance_dir):
    snap = corpus_table(conformance_dir, "table_with_column_mapping")
    c = snap.table_configuration
    expected = physical_names_in_schema_string(snap)
    assert (c.column_mapping_mode, c.is_column_mapped) == ("name", True)
    assert "columnMapping" in c.reader_features  # reader version 2 is column mapping's
    assert c.physical_names == expected
    assert c.physical_name("Super Name") == expected["Super Name"]
    assert c.physical_name("super name") == expected["Super Name"]  # one case-insensitive match
    assert c.partition_keys() == [(expected["Company Very Short"], snap.schema.field("Company Very Short"))]
    # Data files hold the non-partition column under its physical name, with its id as field id.
    assert c.file_schema.names == [expected["Super Name"]]
    assert c.file_schema.field(0).metadata == {b"PARQUET:field_id": b"2"}
    assert c.physical_schema.names == [expected["Company Very Short"], expected["Super Name"]]
    assert c.target_file_size == 33554432
    with pytest.raises(SchemaError, match="nope"):
        c.physical_name("nope")


def test_column_mapping_with_deletion_vectors_and_partitions(conformance_dir):
    snap = corpus_table(conformance_dir, "table_with_partitioning_mapping")
    c = snap.table_configuration
    assert c.is_column_mapped and c.deletion_vectors_supported and c.deletion_vectors_enabled
    assert [key for key, _ in c.partition_keys()] == [physical_names_in_schema_string(snap)[p] for p in snap.partition_columns]
    # File skipping reads partition values under the physical names: none is taken for null.
    assert snap.files("newid IS NULL", stats=False).num_rows == 0
    assert snap.files("newid = 2", stats=False).num_rows == 1


@pytest.mark.parametrize(
    "name, dvs, cdf, ict, row_tracking",
    [
        ("table-with-dv-small", True, False, False, False),
        ("cdf-table", False, True, False, False),
        ("cdf-table-with-cdc-and-dvs", True, True, False, False),
        ("cdc_ict_table", False, True, True, False),
        ("table-with-domain-metadata", True, False, False, True),
        ("table_with_liquid_clustering", True, False, False, True),
    ],
)
def test_enabled_features_of_corpus_tables(conformance_dir, name, dvs, cdf, ict, row_tracking):
    c = corpus_table(conformance_dir, name).table_configuration
    assert (c.deletion_vectors_enabled, c.change_data_feed_enabled, c.in_commit_timestamps_enabled, c.row_tracking_enabled) == (
        dvs, cdf, ict, row_tracking,
    )


def test_row_tracking_names_its_materialized_columns(conformance_dir):
    c = corpus_table(conformance_dir, "table-with-domain-metadata").table_configuration
    assert c.row_tracking_supported and c.domain_metadata_supported
    assert c.materialized_row_id_column == c.properties["delta.rowTracking.materializedRowIdColumnName"]
    assert c.materialized_row_commit_version_column == c.properties["delta.rowTracking.materializedRowCommitVersionColumnName"]


def test_v2_checkpoint_policy_and_interval(conformance_dir):
    c = corpus_table(conformance_dir, "checkpoint-v2-table").table_configuration
    assert (c.checkpoint_policy, c.checkpoint_interval) == ("v2", 2)
    assert "v2Checkpoint" in c.reader_features and "v2Checkpoint" in c.writer_features


# -- combinations that must not be confused ------------------------------------------------


def test_a_property_without_its_feature_enables_nothing_the_protocol_lacks():
    c = config(Protocol(1, 2), {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"})
    assert not (c.deletion_vectors_supported or c.deletion_vectors_enabled)
    assert not (c.row_tracking_supported or c.row_tracking_enabled)


def test_a_supported_feature_is_enabled_only_by_its_property():
    protocol = Protocol(3, 7, ("deletionVectors",), ("deletionVectors", "rowTracking", "domainMetadata"))
    off = config(protocol)
    assert off.deletion_vectors_supported and not off.deletion_vectors_enabled
    assert off.row_tracking_supported and not off.row_tracking_enabled
    on = config(protocol, {"delta.enableDeletionVectors": "TRUE", "delta.enableRowTracking": "True"})
    assert on.deletion_vectors_enabled and on.row_tracking_enabled


def test_legacy_writer_versions_imply_their_features():
    assert config(Protocol(1, 4)).writer_features == {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}
    assert "columnMapping" in config(Protocol(2, 5)).writer_features
    assert config(Protocol(1, 7, None, ("appendOnly",))).writer_features == {"appendOnly"}


def test_in_commit_timestamp_enablement_is_read_when_both_keys_are_there():
    c = config(Protocol(1, 7, None, ("inCommitTimestamp",)), {
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": "4",
        "delta.inCommitTimestampEnablementTimestamp": "1700000000000",
    })
    assert c.in_commit_timestamps_enabled
    assert c.in_commit_timestamp_enablement == (4, 1700000000000)


def test_an_invalid_property_fails_only_the_fact_that_needs_it():
    # A table another engine wrote with a bad value stays readable; asking for that fact names the key.
    c = config(Protocol(1, 2), {"delta.checkpointInterval": "often", "delta.isolationLevel": "WriteSerializable"})
    assert c.isolation_level == "WriteSerializable"
    with pytest.raises(InvalidTablePropertyError, match="delta.checkpointInterval"):
        _ = c.checkpoint_interval


def test_it_is_immutable():
    c = config(Protocol(1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.protocol = Protocol(3, 7)  # type: ignore[misc]
    assert not hasattr(c, "__dict__")


# -- handed around -------------------------------------------------------------------------


def test_snapshot_transaction_and_write_context_share_it(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"], properties={"delta.columnMapping.mode": "name"})
    snap = t.snapshot()
    c = snap.table_configuration
    assert c.is_column_mapped and c.metadata is snap.metadata and c.protocol is snap.protocol
    txn = t.transaction()
    assert txn.table_configuration is txn.snapshot.table_configuration
    assert txn.write_context().table_configuration is txn.snapshot.table_configuration
    # A transaction that changes the properties sees the change at once.
    txn.update_metadata(configuration={**snap.configuration, "delta.appendOnly": "true"})
    assert txn.table_configuration.append_only and not c.append_only
    txn.abort()


def test_the_write_context_stays_picklable_and_writes_physical_names(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"], properties={"delta.columnMapping.mode": "name"})
    ctx = pickle.loads(pickle.dumps(WriteContext.for_snapshot(t.snapshot())))
    assert ctx.table_configuration == t.snapshot().table_configuration
    physical = ctx.table_configuration.physical_name("id")
    assert physical != "id" and ctx.file_schema.names == [physical]
    written = ctx.write(pa.table({"id": [1, 2], "region": ["EU", "US"]}))
    with t.transaction() as txn:
        txn.add_files(written.files)
    assert t.snapshot().num_files == 2


def test_post_commit_hooks_see_the_committed_configuration(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, properties={"delta.checkpointInterval": "3"})
    seen = []

    class Spy:
        name = "spy"

        def __call__(self, ctx: txnlog.PostCommitContext) -> None:
            seen.append((ctx.version, ctx.table_configuration.checkpoint_interval, ctx.uri))

    t.hooks.register(Spy())
    t.append(pa.table({"id": [1], "region": ["EU"]}))
    assert seen == [(1, 3, t.uri)]
