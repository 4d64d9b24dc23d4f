"""Schema, partitioning and property changes (txnlog.txn.schema_changes, Table.alter, schema
evolution on write): each hazard of issue 25 refused with a SchemaChangeError naming the column
and the rule, leaving the log as it was, or done so that every old value still reads back."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog
from txnlog import Table
from txnlog.errors import ConcurrentAppendError, InvalidArgumentError, SchemaChangeError

from .duckdb_delta import duckdb_delta

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.int32())])
ROWS = pa.table({"id": [1, 2, 3], "x": pa.array([10, None, 30], pa.int32())})
MAPPED = {"delta.columnMapping.mode": "name"}


def _table(path: Path, properties: dict[str, str] | None = None, rows: pa.Table | None = ROWS, **kw: Any) -> Table:
    t = Table.create(path, rows.schema if rows is not None else SCHEMA, properties=properties, **kw)
    if rows is not None:
        t.append(rows)
    return t


def _refused(t: Table, rule: str, field: str | None, **update: Any) -> SchemaChangeError:
    """``update_metadata(**update)`` is refused naming ``field`` and ``rule``; the log is unchanged."""
    before = t.latest_version()
    with pytest.raises(SchemaChangeError) as info:
        with t.transaction("CHANGE") as txn:
            txn.update_metadata(**update)
    assert (info.value.rule, info.value.field) == (rule, field)
    assert t.latest_version() == before
    return info.value


def _rows(t: Table) -> list[dict[str, Any]]:
    return sorted(t.snapshot().to_arrow().to_pylist(), key=lambda r: r["id"])


# -- the hazards through update_metadata ---------------------------------------------------------


def test_dropping_a_column_without_column_mapping_is_refused_so_a_re_add_cannot_bring_old_values_back(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    e = _refused(t, "column mapping", "x", schema=pa.schema([("id", pa.int64())]))
    assert "column mapping" in str(e)
    # Done through ALTER, the drop turns column mapping on: a re-added x is a new column.
    t.alter.drop_columns("x")
    t.alter.add_columns(pa.field("x", pa.int32()))
    assert [r["x"] for r in _rows(t)] == [None, None, None]
    assert t.snapshot().configuration["delta.columnMapping.mode"] == "name"


def test_changing_the_partition_columns_of_a_table_with_rows_is_refused(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    _refused(t, "partitioning", "x", partition_columns=["x"])
    empty = _table(tmp_path / "empty", rows=None)
    with empty.transaction("CHANGE") as txn:  # no rows: nothing to mislay
        txn.update_metadata(partition_columns=["x"])
    assert empty.snapshot().metadata.partition_columns == ("x",)


@pytest.mark.parametrize(("column", "narrower"), [("id", pa.int32()), ("x", pa.int16()), ("x", pa.string())])
def test_narrowing_or_changing_a_type_is_refused(tmp_path: Path, column: str, narrower: pa.DataType) -> None:
    t = _table(tmp_path / "t")
    schema = SCHEMA.set(SCHEMA.get_field_index(column), pa.field(column, narrower))
    _refused(t, "type widening", column, schema=schema)
    assert _rows(t) == ROWS.to_pylist()


def test_string_to_long_is_refused(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", rows=pa.table({"id": [1], "s": ["a"]}))
    _refused(t, "type widening", "s", schema=pa.schema([("id", pa.int64()), ("s", pa.int64())]))


def test_a_new_check_constraint_is_checked_against_the_live_rows(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    e = _refused(t, "CHECK constraint", "positive", configuration={"delta.constraints.positive": "x > 10"})
    assert "2 row(s)" in str(e) and "'x': 10" in str(e)  # 10 fails, and NULL does not pass a CHECK
    t.alter.add_constraint({"positive": "x > 0 OR x IS NULL"})
    with pytest.raises(txnlog.errors.ProtocolViolationError):
        t.append(pa.table({"id": [9], "x": pa.array([-1], pa.int32())}))


def test_rows_deleted_by_a_deletion_vector_do_not_count_against_a_new_constraint(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", properties={"delta.enableDeletionVectors": "true"})
    t.delete("x = 10")
    assert any(f is not None for f in t.snapshot().files().column("deletion_vector").to_pylist())  # a DV, not a rewrite
    t.alter.add_constraint({"big": "x > 10 OR x IS NULL"})
    assert t.snapshot().configuration["delta.constraints.big"] == "x > 10 OR x IS NULL"


def test_a_concurrent_append_of_a_violating_row_conflicts_with_adding_the_constraint(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    with pytest.raises(ConcurrentAppendError):
        with t.transaction("ADD CONSTRAINT") as txn:
            txn.update_metadata(configuration={"delta.constraints.small": "id < 100"})  # checked: every row passes
            Table(t.uri).append(pa.table({"id": [500], "x": pa.array([1], pa.int32())}))  # lands first
    assert "delta.constraints.small" not in t.snapshot().configuration
    assert max(r["id"] for r in _rows(t)) == 500


def test_not_null_over_existing_nulls_is_refused_and_allowed_without_them(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    not_null = SCHEMA.set(1, pa.field("x", pa.int32(), nullable=False))
    _refused(t, "NOT NULL", "x", schema=not_null)
    t.delete("x IS NULL")
    t.alter.set_not_null("x")
    assert not t.snapshot().schema.field("x").nullable
    with pytest.raises(txnlog.TxnLogError):
        t.append(pa.table({"id": [7], "x": pa.array([None], pa.int32())}))
    t.alter.drop_not_null("x")
    t.append(pa.table({"id": [7], "x": pa.array([None], pa.int32())}))


def test_a_new_not_null_column_is_refused_on_a_table_with_rows(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    _refused(t, "NOT NULL", "y", schema=SCHEMA.append(pa.field("y", pa.int64(), nullable=False)))


def test_a_schema_built_anew_in_pyarrow_keeps_every_columns_data_under_column_mapping(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", properties=MAPPED)
    physical = {f.name: txnlog.schema.delta_field_metadata(f)["delta.columnMapping.physicalName"] for f in t.snapshot().schema}
    with t.transaction("CHANGE") as txn:  # no Delta metadata on these fields: matched by name
        txn.update_metadata(schema=pa.schema([("id", pa.int64()), ("x", pa.int32()), ("y", pa.string())]))
    assert [{k: r[k] for k in ("id", "x")} for r in _rows(t)] == ROWS.to_pylist()
    after = {f.name: txnlog.schema.delta_field_metadata(f)["delta.columnMapping.physicalName"] for f in t.snapshot().schema}
    assert {k: after[k] for k in physical} == physical
    # A rename of the snapshot's schema keeps the field's metadata: the values follow the name.
    schema = t.snapshot().schema
    with t.transaction("CHANGE") as txn:
        txn.update_metadata(schema=schema.set(1, schema.field(1).with_name("renamed")))
    assert [r["renamed"] for r in _rows(t)] == [10, None, 30]
    con = duckdb_delta()
    assert [r[1] for r in sorted(con.sql(f"select id, renamed from delta_scan('{t.uri}')").fetchall())] == [10, None, 30]


def test_turning_column_mapping_on_keeps_the_data_of_existing_columns(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    t.alter.set_table_properties(MAPPED)
    assert _rows(t) == ROWS.to_pylist()
    schema = t.snapshot().schema
    assert [txnlog.schema.delta_field_metadata(f)["delta.columnMapping.physicalName"] for f in schema] == ["id", "x"]


def test_a_physical_name_or_id_of_another_column_is_never_reused(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", properties=MAPPED)
    old_x = t.snapshot().schema.field("x")
    t.alter.drop_columns("x")
    with pytest.raises(SchemaChangeError, match="column mapping id 2 was already used") as info:
        with t.transaction("CHANGE") as txn:
            txn.update_metadata(schema=t.snapshot().schema.append(old_x.with_name("x2")))
    assert (info.value.field, info.value.rule) == ("x2", "column mapping")


def test_update_metadata_configuration_merges_so_a_constraint_survives_turning_on_the_change_feed(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    t.alter.add_constraint({"positive": "id > 0"})
    with t.transaction("SET TBLPROPERTIES") as txn:
        txn.update_metadata(configuration={"delta.enableChangeDataFeed": "true"})
    conf = t.snapshot().configuration
    assert conf["delta.constraints.positive"] == "id > 0" and conf["delta.enableChangeDataFeed"] == "true"
    with pytest.raises(txnlog.errors.ProtocolViolationError):
        t.append(pa.table({"id": [-1], "x": pa.array([1], pa.int32())}))


def test_schema_level_features_join_the_protocol_when_a_change_brings_them(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    assert t.snapshot().protocol.min_writer_version == 2
    t.alter.add_columns(pa.field("at", pa.timestamp("us")))
    protocol = t.snapshot().protocol
    assert protocol.has_reader_feature("timestampNtz") and "timestampNtz" in (protocol.writer_features or ())
    t.alter.set_column_type("x", pa.int64())
    protocol = t.snapshot().protocol
    assert protocol.has_reader_feature("typeWidening") and "typeWidening" in (protocol.writer_features or ())
    t.append(pa.table({"id": [4], "x": [2**40], "at": [datetime.datetime(2024, 1, 1)]}))
    assert [r["x"] for r in _rows(t)] == [10, None, 30, 2**40]


# -- ALTER ------------------------------------------------------------------------------------


def test_each_alter_is_one_commit_named_and_parametrized_as_delta_spark_records_it(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", rows=pa.table({"id": [1], "x": pa.array([1], pa.int32()), "s": [{"a": 1}]}))
    a = t.alter
    a.add_columns([pa.field("y", pa.string()), pa.field("s.b", pa.int64())])
    a.rename_column("x", "xx")
    a.drop_columns(["y"])
    a.set_column_type("xx", "long")
    a.set_column_comment("id", "the key")
    a.set_table_properties({"delta.appendOnly": "false"})
    a.unset_table_properties(["delta.appendOnly"])
    a.add_constraint({"positive": "id > 0"})
    a.drop_constraint("positive")
    history = [(h.commit_info.operation, h.commit_info.operation_parameters) for h in reversed(t.history())][2:]
    operations = [op for op, _ in history]
    assert operations == ["ADD COLUMNS", "RENAME COLUMN", "DROP COLUMNS", "CHANGE COLUMN", "CHANGE COLUMN", "SET TBLPROPERTIES",
                          "UNSET TBLPROPERTIES", "ADD CONSTRAINT", "DROP CONSTRAINT"]
    assert history[1][1] == {"oldColumnPath": "x", "newColumnPath": "xx"}
    assert history[2][1] == {"columns": '["y"]'}
    assert history[7][1] == {"name": "positive", "expr": "id > 0"}
    schema = t.snapshot().schema
    assert schema.names == ["id", "xx", "s"] and schema.field("s").type == pa.struct([("a", pa.int64()), ("b", pa.int64())])
    assert schema.field("xx").type == pa.int64()
    assert txnlog.schema.delta_field_metadata(schema.field("id"))["comment"] == "the key"
    assert txnlog.schema.delta_field_metadata(schema.field("xx"))["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    assert t.snapshot().to_arrow().to_pylist() == [{"id": 1, "xx": 1, "s": {"a": 1, "b": None}}]


def test_alter_refusals_name_the_column_and_leave_the_log_alone(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    before = t.latest_version()
    for call, rule in [
        (lambda: t.alter.set_column_type("id", pa.int32()), "type widening"),
        (lambda: t.alter.set_column_type("x", pa.float32()), "type widening"),
        (lambda: t.alter.rename_column("nope", "other"), "column exists"),
        (lambda: t.alter.add_columns(pa.field("x", pa.int64())), "column exists"),
        (lambda: t.alter.drop_constraint("nope"), "CHECK constraint"),
    ]:
        with pytest.raises(SchemaChangeError) as info:
            call()
        assert info.value.rule == rule
    with pytest.raises(InvalidArgumentError):
        t.alter.unset_table_properties("delta.nope")
    assert t.latest_version() == before


def test_a_column_a_constraint_uses_cannot_be_dropped(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    t.alter.add_constraint({"small": "x < 100 OR x IS NULL"})
    with pytest.raises(SchemaChangeError) as info:
        t.alter.drop_columns("x")
    assert (info.value.field, info.value.rule) == ("small", "CHECK constraint")


def test_set_column_type_allows_the_protocols_widenings_only() -> None:
    from txnlog.txn.schema_changes import widening

    assert widening("byte", "long") == widening("float", "double") == widening("date", "timestamp_ntz") == "automatic"
    assert widening("decimal(10,2)", "decimal(12,3)") == "automatic"
    assert widening("integer", "double") == widening("long", "decimal(20,0)") == "manual"
    for narrowing in [("long", "integer"), ("double", "float"), ("long", "double"), ("decimal(10,2)", "decimal(11,4)"),
                      ("long", "decimal(19,0)"), ("string", "long"), ("timestamp", "date")]:
        assert widening(*narrowing) is None


# -- schema evolution on write ---------------------------------------------------------------


def test_schema_mode_merge_adds_new_and_nested_columns(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", rows=pa.table({"id": [1], "s": [{"a": 1}]}))
    with pytest.raises(txnlog.errors.SchemaError):
        t.append(pa.table({"id": [2], "s": [{"a": 2, "b": "n"}], "y": [1.5]}))
    t.append(pa.table({"id": [2], "s": [{"a": 2, "b": "n"}], "y": [1.5]}), schema_mode="merge")
    assert _rows(t) == [{"id": 1, "s": {"a": 1, "b": None}, "y": None}, {"id": 2, "s": {"a": 2, "b": "n"}, "y": 1.5}]


def test_schema_mode_merge_widens_on_a_type_widening_table_only(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    wide = pa.table({"id": [4], "x": [2**40]})
    with pytest.raises(txnlog.TxnLogError):  # the table's int cannot hold it, and nothing widens it
        t.write(wide, schema_mode="merge")
    t.alter.set_table_properties({"delta.enableTypeWidening": "true"})
    t.write(wide, schema_mode="merge")
    assert t.snapshot().schema.field("x").type == pa.int64()
    assert [r["x"] for r in _rows(t)] == [10, None, 30, 2**40]
    con = duckdb_delta()
    assert sorted(r[0] for r in con.sql(f"select x from delta_scan('{t.uri}') where x is not null").fetchall()) == [10, 30, 2**40]


def test_schema_mode_overwrite_replaces_schema_and_partitioning_with_an_overwrite(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    new = pa.table({"k": ["a", "b"], "v": [1.5, 2.5]})
    with pytest.raises(InvalidArgumentError, match="schema_mode='overwrite' goes with mode='overwrite'"):
        t.write(new, schema_mode="overwrite")
    t.write(new, mode="overwrite", schema_mode="overwrite", partition_by=["k"])
    snap = t.snapshot()
    assert snap.schema.names == ["k", "v"] and snap.metadata.partition_columns == ("k",)
    assert sorted(snap.to_arrow().to_pylist(), key=lambda r: r["k"]) == new.to_pylist()


def test_replaces_rows_is_checked_at_commit(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    with pytest.raises(txnlog.errors.TransactionError, match="keeps 1 live file"):
        with t.transaction("WRITE") as txn:
            txn.update_metadata(schema=pa.schema([("id", pa.int64())]), replaces_rows=True)
    assert _rows(t) == ROWS.to_pylist()


# -- liquid clustering: the table's side ---------------------------------------------------------


def test_a_clustered_table_keeps_its_columns_in_the_clustering_domain_with_its_features(tmp_path: Path) -> None:
    t = Table.create(tmp_path / "t", pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.float64())]), cluster_by=["id", "k"])
    snap = t.snapshot()
    assert {"clustering", "domainMetadata"} <= set(snap.protocol.writer_features or ())
    assert json.loads(snap.domain_metadata("delta.clustering"))["clusteringColumns"] == [["id"], ["k"]]
    t.append(pa.table({"id": [1], "k": ["a"], "v": [1.0]}))
    t.alter.rename_column("k", "kk")  # the domain names physical columns: a rename keeps it
    assert json.loads(t.snapshot().domain_metadata("delta.clustering"))["clusteringColumns"] == [["id"], ["k"]]
    t.alter.cluster_by(["kk"])
    assert t.history(1)[0].commit_info.operation_parameters == {"oldClusteringColumns": "id,kk", "newClusteringColumns": "kk"}
    before = t.latest_version()
    for change, field in [(lambda: t.alter.drop_columns("kk"), "k"),
                          (lambda: t.alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "1"}), "kk"),
                          (lambda: t.alter.cluster_by(["v", "nope"]), "nope")]:
        with pytest.raises(SchemaChangeError) as info:
            change()
        assert (info.value.rule, info.value.field) == ("clustering", field)
    assert t.latest_version() == before


def test_a_clustering_column_needs_statistics_and_no_partitioning(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("k", pa.string())])
    with pytest.raises(SchemaChangeError, match="no statistics"):
        Table.create(tmp_path / "a", schema, properties={"delta.dataSkippingNumIndexedCols": "1"}, cluster_by=["k"])
    with pytest.raises(SchemaChangeError, match="partitioned table"):
        Table.create(tmp_path / "b", schema, partition_by=["k"], cluster_by=["id"])
    assert not Table(tmp_path / "a").exists() and not Table(tmp_path / "b").exists()
