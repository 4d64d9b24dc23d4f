"""delta-spark reads what txnlog writes, and continues it: for every kind of table txnlog writes,
delta-spark (in the shared session) returns txnlog's rows at every version, its change feed and
row ids equal txnlog's, DESCRIBE HISTORY/DETAIL report txnlog's commits; then delta-spark's
DELETE, UPDATE, MERGE, OPTIMIZE ZORDER, ALTER, CHECKPOINT, RESTORE and VACUUM run on the table,
and txnlog reads what they did and continues with appends and DML that delta-spark reads back.

By default delta-spark runs a MERGE alone on the richest kind (deletion vectors with the change
feed and row tracking); ``soak`` runs the full sequence on every kind. Constraints, expired logs and txnlog's RESTORE and VACUUM have their own tests."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from txnlog import Table, maintenance
from txnlog.errors import ProtocolViolationError, VersionGapError, VersionNotFoundError
from txnlog.maintenance import tags

from .agree import (
    assert_changes_agree,
    assert_detail_agrees,
    assert_feed_agrees,
    assert_history_agrees,
    assert_row_ids_agree,
    assert_rows_agree,
    quoted,
    readable_versions,
    spark_rows,
    txnlog_rows,
)
from .conftest import TIME_TRAVEL_ANY_AGE, VACUUM_NOW

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("day", pa.date32()), ("amount", pa.float64())])
TYPES = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),
        ("amount", pa.decimal128(10, 2)),
        ("s", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("arr", pa.list_(pa.int64())),
        ("m", pa.map_(pa.string(), pa.int64())),
    ]
)
VARIANT_SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
        {"name": "v", "type": "variant", "nullable": True, "metadata": {}},
    ],
}


def sales(spark: Any, start: int, n: int) -> pa.Table:
    """Partition values with a slash, a space and '=', and NULL."""
    regions = ["EU", "US/West", "a b=c", None]
    ids = range(start, start + n)
    return pa.table(
        {
            "id": list(ids),
            "region": [regions[i % 4] for i in ids],
            "day": [dt.date(2024, 1, 1 + i % 3) for i in ids],
            "amount": [i * 1.5 for i in ids],
        },
        schema=SCHEMA,
    )


def typed(spark: Any, start: int, n: int) -> pa.Table:
    ids = range(start, start + n)
    return pa.table(
        {
            "id": list(ids),
            "ts": [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=i) for i in ids],
            "ntz": [dt.datetime(2024, 1, 1) + dt.timedelta(minutes=i % 3) for i in ids],
            "amount": [decimal.Decimal(i) / 4 for i in ids],
            "s": [{"a": i, "b": str(i)} for i in ids],
            "arr": [[i, i + 1] for i in ids],
            "m": [[("k", i)] for i in ids],
        },
        schema=TYPES,
    )


def variants(spark: Any, start: int, n: int) -> pa.Table:
    """Variant values as Spark encodes them (txnlog stores the binary encoding as it is)."""
    return spark.sql(
        f"SELECT id, CAST(id * 1.5 AS DOUBLE) AS amount, parse_json(CASE WHEN id % 2 = 0 THEN concat('{{\"n\":', id, '}}') "
        f"ELSE concat('[', id, ',\"x\"]') END) AS v FROM range({start}, {start + n})"
    ).toArrow()


@dataclass(frozen=True)
class Kind:
    """A kind of table txnlog writes."""

    properties: dict[str, str]
    partition_by: tuple[str, ...] = ()
    rows: Callable[[Any, int, int], pa.Table] = sales
    schema: Any = SCHEMA
    full: bool = False  # the whole sequence of delta-spark statements by default (else under soak)
    zorder: str = "id"
    extra: dict[str, str] = field(default_factory=dict)  # e.g. column mapping: also rename a column

    @property
    def change_feed(self) -> bool:
        return self.properties.get("delta.enableChangeDataFeed") == "true"

    @property
    def row_tracking(self) -> bool:
        return self.properties.get("delta.enableRowTracking") == "true"


KINDS = {
    "partitioned": Kind({"delta.checkpointInterval": "3"}, ("region", "day")),
    "deletion-vectors-cdf-row-tracking": Kind(
        {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true", "delta.enableRowTracking": "true",
         "delta.checkpointInterval": "3"},
        ("region",),
        full=True,
    ),
    "change-data-copy-on-write": Kind({"delta.enableChangeDataFeed": "true", "delta.checkpointInterval": "4"}, ("day",)),
    "column-mapping-name": Kind({"delta.columnMapping.mode": "name"}, ("region",), extra={"rename": "true"}),
    "column-mapping-id-deletion-vectors": Kind(
        {"delta.columnMapping.mode": "id", "delta.enableDeletionVectors": "true", "delta.checkpointInterval": "4"},
        ("region",),
        extra={"rename": "true"},
    ),
    "v2-checkpoints-sidecars": Kind(
        {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "2", "delta.checkpoint.writeStatsAsStruct": "true"},
        full=True,
    ),
    "in-commit-timestamps": Kind({"delta.enableInCommitTimestamps": "true", "delta.enableChangeDataFeed": "true"}, ("region",)),
    "constraints": Kind({"delta.constraints.positive": "amount >= 0", "delta.constraints.known": "id IS NOT NULL"}),
    "timestamp-ntz-and-nested-types": Kind({"delta.checkpointInterval": "2"}, ("ntz",), typed, TYPES, zorder="ts"),
    "variant": Kind({"delta.checkpointInterval": "3"}, (), variants, VARIANT_SCHEMA),
}


def create(spark: Any, path: Path, kind: Kind) -> Table:
    """The table at version 5: created, two appends, a DELETE, an UPDATE and a MERGE by txnlog."""
    if isinstance(kind.schema, pa.Schema):
        table = Table.create(path, kind.schema, partition_by=list(kind.partition_by), properties=kind.properties)
    else:
        table = Table(path)
        with table.create_transaction() as txn:
            txn.update_metadata(schema=kind.schema, partition_columns=list(kind.partition_by), configuration=kind.properties)
    table.append(kind.rows(spark, 0, 8))
    table.append(kind.rows(spark, 8, 8))
    table.delete("id % 5 = 0")
    table.update("id < 4", set={"id": "id + 100"})
    table.merge(kind.rows(spark, 14, 4), on="id", when_matched_update="*", when_not_matched_insert="*")
    assert table.latest_version() == 5
    return table


def conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` in ``schema``'s column order, with NULL for columns added since (by ALTER)."""
    columns = [rows.column(f.name) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def assert_all_agree(spark: Any, path: Path, kind: Kind, since: int = 0) -> None:
    """Rows at every version from ``since``, the change feed, row ids, history, detail."""
    assert_rows_agree(spark, path, [v for v in readable_versions(Table(path)) if v >= since])
    if kind.change_feed:
        assert_feed_agrees(spark, path, since)
    if kind.row_tracking:
        assert_row_ids_agree(spark, path)
    assert_history_agrees(spark, path)
    assert_detail_agrees(spark, path)


def delta_spark_statements(kind: Kind, path: Path, restore_to: int) -> list[tuple[str, str | None]]:
    q = quoted(path)
    merge_source = f"SELECT * FROM {q} WHERE id IN (4, 6)"
    if kind.rows is sales:  # and a row to insert
        merge_source = f"SELECT id, region, day, amount * 3 AS amount FROM {q} WHERE id IN (4, 6) UNION ALL SELECT 500L, 'EU', DATE'2024-02-01', 1.0"
    merge = ("MERGE", f"MERGE INTO {q} t USING ({merge_source}) s ON t.id = s.id "
                      "WHEN MATCHED AND s.id = 4 THEN DELETE WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    if not kind.full:
        return [merge]
    statements: list[tuple[str, str | None]] = [
        ("DELETE", f"DELETE FROM {q} WHERE id = 7"),
        ("UPDATE", f"UPDATE {q} SET id = id + 1000 WHERE id < 110 AND id > 100"),
        merge,
        ("OPTIMIZE", f"OPTIMIZE {q} ZORDER BY ({kind.zorder})"),
        ("ALTER ADD COLUMNS", f"ALTER TABLE {q} ADD COLUMNS (note STRING)"),
        ("INSERT", f"INSERT INTO {q} (id, amount, note) VALUES (600, 6, 'from delta-spark')"),
        ("ALTER SET TBLPROPERTIES", f"ALTER TABLE {q} SET TBLPROPERTIES ('delta.checkpointInterval' = '3', 'owner.team' = 'sales')"),
    ]
    if kind.extra.get("rename"):
        statements.append(("ALTER RENAME COLUMN", f"ALTER TABLE {q} RENAME COLUMN note TO remark"))
    statements += [("CHECKPOINT", None), ("RESTORE", f"RESTORE TABLE {q} TO VERSION AS OF {restore_to}")]
    return statements


def checkpoint_with_delta_spark(spark: Any, path: Path) -> None:
    """delta-spark's own checkpoint of the latest version (DeltaLog.checkpoint through py4j)."""
    jvm = spark._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path)).checkpoint()


def continue_with_txnlog(spark: Any, path: Path, kind: Kind) -> None:
    """Appends and DML by txnlog on what delta-spark left (read back version by version after)."""
    table = Table(path)
    new = conformed(kind.rows(spark, 700, 4), table.snapshot().schema)
    assert table.append(new) is not None
    assert table.delete("id = 701") is not None
    assert table.update("id = 702", set={"id": "id + 10"}) is not None
    assert table.merge(new.slice(0, 2), on="id", when_matched_update="*", when_not_matched_insert="*") is not None


def run_kind(spark: Any, spark_conf: Any, tmp_path: Path, name: str, full: bool | None = None) -> None:
    kind = KINDS[name] if full is None else dataclasses.replace(KINDS[name], full=full)
    path = tmp_path / name
    create(spark, path, kind)

    # delta-spark's statements on the table, then txnlog's; every version of both is compared
    # below (rows, feed, row ids, history).
    before = Table(path).latest_version()
    statements = delta_spark_statements(kind, path, restore_to=before + 2)
    for _, statement in statements:
        if statement is None:
            checkpoint_with_delta_spark(spark, path)
        else:
            spark.sql(statement).collect()
    operations = [h.commit_info.operation for h in Table(path).history(limit=Table(path).latest_version() - before)]
    assert {label for label, _ in statements if label in ("DELETE", "UPDATE", "MERGE", "OPTIMIZE", "RESTORE")} <= set(operations)
    continue_with_txnlog(spark, path, kind)
    assert_all_agree(spark, path, kind)
    if not kind.full:
        return

    # delta-spark's VACUUM of everything unreferenced (deletion vector files too); both still
    # read the latest version, and txnlog goes on appending.
    with spark_conf(VACUUM_NOW):
        spark.sql(f"VACUUM {quoted(path)} RETAIN 0 HOURS").collect()
    table = Table(path)
    assert spark_rows(spark, path) == txnlog_rows(table)
    table.append(conformed(kind.rows(spark, 800, 2), table.snapshot().schema))
    assert spark_rows(spark, path) == txnlog_rows(table)


#: Run by default, with delta-spark's MERGE only: the richest kind txnlog had to be fixed for
#: (deletion vectors with the change feed and row tracking; column mapping by id with vectors is
#: read by delta-spark's reader in tests/spark/test_read_delta_reader.py). ``soak`` runs the full
#: sequence of delta-spark's statements (VACUUM and RESTORE included) on every kind: 98 s for the
#: richest one.
DEFAULT_KINDS = ["deletion-vectors-cdf-row-tracking"]


@pytest.mark.parametrize("name", DEFAULT_KINDS)
def test_delta_spark_reads_and_continues_txnlog_tables(delta_spark: Any, spark_conf: Any, tmp_path: Path, name: str) -> None:
    run_kind(delta_spark, spark_conf, tmp_path, name, full=False)


#: ``soak`` runs the full sequence on these (the richest kind, and column mapping by id with
#: vectors: about two minutes each here); ``exhaustive`` on the others.
SOAK_KINDS = ["deletion-vectors-cdf-row-tracking", "column-mapping-id-deletion-vectors"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.soak if n in SOAK_KINDS else pytest.mark.exhaustive) for n in KINDS])
def test_every_delta_spark_statement_on_every_kind(delta_spark: Any, spark_conf: Any, tmp_path: Path, name: str) -> None:
    run_kind(delta_spark, spark_conf, tmp_path, name, full=True)


def test_delta_spark_honours_txnlog_constraints_and_txnlog_honours_delta_sparks(delta_spark: Any, tmp_path: Path) -> None:
    table = create(delta_spark, tmp_path / "t", KINDS["constraints"])
    with pytest.raises(Exception, match="DELTA_VIOLATE_CONSTRAINT_WITH_VALUES|CHECK constraint"):
        delta_spark.sql(f"INSERT INTO {quoted(tmp_path / 't')} VALUES (1, 'EU', DATE'2024-01-01', -1.0)").collect()
    delta_spark.sql(f"ALTER TABLE {quoted(tmp_path / 't')} ADD CONSTRAINT small CHECK (amount < 1000)").collect()
    assert table.snapshot().configuration["delta.constraints.small"] == "amount < 1000"
    with pytest.raises(ProtocolViolationError, match="small"):
        table.append(pa.table({"id": [1], "region": ["EU"], "day": [dt.date(2024, 1, 1)], "amount": [5000.0]}, schema=SCHEMA))
    assert spark_rows(delta_spark, tmp_path / "t") == txnlog_rows(table)


def test_tagged_versions_of_an_expired_log(delta_spark: Any, spark_conf: Any, tmp_path: Path) -> None:
    """After txnlog's log expiry, delta-spark time travels exactly to the versions txnlog can
    still read: the tagged one (a checkpoint and its commit kept) and the retained ones."""
    path = tmp_path / "t"
    table = Table.create(path, SCHEMA, properties={"delta.checkpointInterval": "5", "delta.enableChangeDataFeed": "true"})
    for i in range(12):
        table.append(sales(delta_spark, 2 * i, 2))
    tags.create(table, "audit", version=3)
    old = time.time() - 60 * 86_400
    for v in range(10):
        os.utime(path / "_delta_log" / f"{v:020d}.json", (old, old))
    result = maintenance.expire(table, retain_min=2)
    assert result.expired_versions > 0 and result.kept_tags == ("audit",)

    readable = readable_versions(table)
    assert readable == [3, 10, 11, 12]
    with spark_conf(TIME_TRAVEL_ANY_AGE):  # version 3 is 60 days old: its files are kept by the tag
        assert_rows_agree(delta_spark, path, readable)
        for version in sorted(set(range(13)) - set(readable)):
            # Expired (a commit between the kept ones is gone): txnlog names the version.
            with pytest.raises((VersionNotFoundError, VersionGapError), match=str(version)):
                table.snapshot(version)
        # delta-spark refuses them too: those at the edges of the kept ones (each refusal is a
        # few seconds of its log listing).
        for version in (0, 2, 4, 9):
            with pytest.raises(Exception, match="DELTA_VERSION_NOT_FOUND|non-existent version"):
                spark_rows(delta_spark, path, version)
    assert_changes_agree(delta_spark, path, 10)
    assert_history_agrees(delta_spark, path)


def test_restored_and_vacuumed_by_txnlog(delta_spark: Any, spark_conf: Any, tmp_path: Path) -> None:
    """txnlog's RESTORE (change feed read as its removes and adds) and VACUUM after the log
    before the restore expired: delta-spark reads every version txnlog reads, and the feed."""
    path = tmp_path / "t"
    props = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true", "delta.checkpointInterval": "3"}
    table = Table.create(path, SCHEMA, partition_by=["region"], properties=props)
    table.append(sales(delta_spark, 0, 8))
    table.append(sales(delta_spark, 8, 8))
    table.delete("id % 3 = 0")
    table.update("region = 'EU'", set={"amount": "amount + 1"})
    restored = maintenance.restore(table, version=1)
    assert restored.version == 5
    assert_all_agree(delta_spark, path, Kind(props))
    assert_changes_agree(delta_spark, path, 5, 5)

    old = time.time() - 60 * 86_400
    for v in range(5):
        os.utime(path / "_delta_log" / f"{v:020d}.json", (old, old))
    maintenance.expire(table, retain_min=1)
    vacuumed = maintenance.vacuum(table, retention="0 hours", force=True)
    assert vacuumed.files  # the files only the expired versions held
    # The restore's version and after it VACUUM's own START and END commits; nothing before.
    assert readable_versions(table) == [5, 6, 7]
    assert [h.commit_info.operation for h in table.history(limit=2)] == ["VACUUM END", "VACUUM START"]
    assert_rows_agree(delta_spark, path)
    table.append(sales(delta_spark, 100, 3))
    assert spark_rows(delta_spark, path) == txnlog_rows(table)


#: Binary partition values: NUL and control bytes, characters a directory name escapes, UTF-8 past
#: ASCII, the empty value (NULL, as every Delta writer records it) and NULL.
BINARY_PARTITIONS = [b"\x00", b"a\x00b\x01", b"", None, b"a/b=c%25d", "é€".encode(), b"\x7f \xc2\x80{[]^?*"]


def test_binary_partition_values_mean_the_same_bytes_to_txnlog_delta_spark_and_deltalake(delta_spark: Any, tmp_path: Path) -> None:
    """A binary partition value is stored as the text its bytes are in UTF-8, which delta-spark
    and deltalake read back as those bytes (both take a binary partition value's text as UTF-8);
    txnlog reads delta-spark's the same way. Bytes that are no UTF-8 text are refused, naming the
    column and the value, and nothing is committed."""
    import txnlog

    deltalake = pytest.importorskip("deltalake")
    uri = str(tmp_path / "binary")
    rows = pa.table({"id": pa.array(range(len(BINARY_PARTITIONS)), pa.int64()), "b": pa.array(BINARY_PARTITIONS, pa.binary())})
    txnlog.write_table(uri, rows, partition_by=["b"])
    expected = [(i, None if v == b"" else v) for i, v in enumerate(BINARY_PARTITIONS)]
    assert sorted((r["id"], r["b"]) for r in Table(uri).snapshot().to_arrow().to_pylist()) == expected
    assert sorted((r.id, None if r.b is None else bytes(r.b)) for r in delta_spark.read.format("delta").load(uri).collect()) == expected
    assert sorted((r["id"], r["b"]) for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()) == expected

    # (delta-spark's writer cannot write a NUL byte: Hadoop refuses the directory name.)
    delta_spark.createDataFrame([(100, bytearray("ü%".encode()))], "id long, b binary").write.format("delta").mode("append").save(uri)
    assert (100, "ü%".encode()) in [(r["id"], r["b"]) for r in Table(uri).snapshot().to_arrow().to_pylist()]

    version = Table(uri).snapshot().version
    with pytest.raises(txnlog.errors.SchemaError, match=r"binary partition value b'\\xff' of column 'b' is not UTF-8"):
        txnlog.write_table(uri, pa.table({"id": pa.array([7], pa.int64()), "b": pa.array([b"\xff"], pa.binary())}), mode="append")
    assert Table(uri).snapshot().version == version
