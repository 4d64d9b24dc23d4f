"""What txnlog and delta-spark must agree on when both read one table: the rows at every
version, the change data feed, the row ids and row commit versions, and what DESCRIBE HISTORY
and DESCRIBE DETAIL say. Both sides are read as Arrow (delta-spark through ``toArrow``), so
values compare exactly: timestamps as UTC instants, variants as their binary encoding."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog import Table

CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
ROW_ID_COLUMNS = ("row_id", "row_commit_version")


def quoted(path: Any) -> str:
    """``delta.`path``` for Delta SQL."""
    return "delta.`" + str(path).replace("`", "``") + "`"


def _key(value: Any) -> Any:
    """A total order over the values a row can hold (None first, then by type name)."""
    if value is None:
        return (0, "", "")
    if isinstance(value, dict):
        return (1, "dict", tuple((k, _key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (1, "list", tuple(_key(v) for v in value))
    if isinstance(value, (bytes, bytearray)):
        return (1, "bytes", bytes(value))
    if isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
        return (1, "number", value)
    if isinstance(value, (dt.datetime, dt.date)):
        return (1, type(value).__name__, value.isoformat())
    return (1, type(value).__name__, value)


def canonical(rows: pa.Table, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``rows`` (or its ``columns``) as sorted dicts."""
    if columns is not None:
        rows = rows.select(list(columns))
    return sorted(rows.to_pylist(), key=lambda r: tuple(_key(v) for v in r.values()))


def spark_arrow(frame: Any) -> pa.Table:
    """A delta-spark DataFrame as Arrow, its variant columns as their JSON."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import VariantType

    variants = {f.name for f in frame.schema.fields if isinstance(f.dataType, VariantType)}
    if variants:
        frame = frame.select(*[F.to_json(F.col(c)).alias(c) if c in variants else F.col(c) for c in frame.columns])
    return frame.toArrow()


def txnlog_arrow(table: Table, version: int | None = None) -> pa.Table:
    """txnlog's rows at ``version``, variant columns decoded to JSON as ``spark_arrow`` gives them."""
    from pyspark.sql.types import VariantVal

    snapshot = table.snapshot(version)
    rows = snapshot.to_arrow()
    for field in orjson.loads(snapshot.metadata.schema_string)["fields"]:
        if field["type"] == "variant":
            encoded = rows.column(field["name"]).to_pylist()
            decoded = [None if v is None else VariantVal(v["value"], v["metadata"]).toJson() for v in encoded]
            rows = rows.set_column(rows.schema.get_field_index(field["name"]), field["name"], pa.array(decoded, pa.string()))
    return rows


def spark_rows(spark: Any, path: Any, version: int | None = None) -> list[dict[str, Any]]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return canonical(spark_arrow(reader.load(str(path))))


def txnlog_rows(table: Table, version: int | None = None) -> list[dict[str, Any]]:
    return canonical(txnlog_arrow(table, version))


def assert_rows_agree(spark: Any, path: Any, versions: Iterable[int] | None = None) -> None:
    """delta-spark (time travel with ``versionAsOf``) and txnlog return the same rows at each
    of ``versions`` (default: every version txnlog can read). delta-spark reads the versions of
    one schema in one job: their union, each tagged with its number (a union across schemas
    would cast a column that changed type or name)."""
    from pyspark.sql import functions as F

    table = Table(str(path))
    wanted = list(versions) if versions is not None else readable_versions(table)
    snapshots = {v: table.snapshot(v) for v in wanted}
    groups: list[list[int]] = []
    for version in wanted:
        if groups and snapshots[groups[-1][0]].schema.equals(snapshots[version].schema):
            groups[-1].append(version)
        else:
            groups.append([version])
    for group in groups:
        frames = [spark.read.format("delta").option("versionAsOf", v).load(str(path)).withColumn(_VERSION, F.lit(v)) for v in group]
        union = spark_arrow(functools.reduce(lambda a, b: a.unionByName(b), frames))
        tags = union.column(_VERSION)
        for version in group:
            ours = txnlog_arrow(table, version)
            theirs = union.filter(pc.equal(tags, version)).select(ours.column_names)
            assert canonical(theirs) == canonical(ours), f"{path} at version {version}: delta-spark {canonical(theirs)} != txnlog {canonical(ours)}"


_VERSION = "__txnlog_test_version"


def readable_versions(table: Table) -> list[int]:
    """The versions txnlog can time travel to, oldest first."""
    out = []
    for entry in reversed(table.history()):
        try:
            table.snapshot(entry.version)
        except Exception:  # noqa: BLE001 - not reconstructable (before the earliest checkpoint)
            continue
        out.append(entry.version)
    return out


def spark_changes(spark: Any, path: Any, start: int, end: int | None = None) -> pa.Table:
    reader = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start)
    if end is not None:
        reader = reader.option("endingVersion", end)
    return reader.load(str(path)).toArrow()


def assert_changes_agree(spark: Any, path: Any, start: int, end: int | None = None, *, via_sql: bool = True) -> pa.Table:
    """``readChangeFeed`` (and with ``via_sql`` SQL's ``table_changes``) equals ``Table.changes``
    over the range, row for row (commit timestamps included); returns txnlog's rows."""
    ours = Table(str(path)).changes(start, end)
    theirs = spark_changes(spark, path, start, end)
    assert theirs.column_names == ours.column_names
    # delta-spark types _commit_timestamp as a Spark TIMESTAMP: microseconds in UTC, as txnlog.
    assert canonical(theirs) == canonical(ours), f"{path} changes {start}..{end}"
    if not via_sql:
        return ours
    # The same feed through SQL's table_changes.
    sql_end = "" if end is None else f", {end}"
    via_sql = spark.sql(f"SELECT * FROM table_changes_by_path('{path}', {start}{sql_end})").toArrow()
    assert canonical(via_sql) == canonical(ours)
    return ours


def assert_feed_agrees(spark: Any, path: Any, start: int = 0) -> None:
    """The change feed from ``start`` to the latest version, compared in ranges of one schema.

    The two differ in the schema of a range whose schema is not the latest: txnlog returns it
    in the range's end version's schema, as delta-spark does on column-mapped tables; on other
    tables delta-spark reads it in the latest schema (a column added since reads as NULL) and
    refuses it when a column went since (DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE).
    Such ranges are compared on txnlog's columns, or skipped when delta-spark refuses them."""
    table = Table(str(path))
    versions = [v for v in readable_versions(table) if v >= start]
    schemas = {v: table.snapshot(v).schema for v in versions}
    latest = schemas[versions[-1]]
    mapped = table.snapshot().table_configuration.is_column_mapped
    bounds = [versions[0]] + [v for prev, v in zip(versions, versions[1:]) if not schemas[v].equals(schemas[prev])]
    for i, (low, high) in enumerate(zip(bounds, bounds[1:] + [versions[-1] + 1])):
        schema = schemas[low]
        if mapped or schema.equals(latest):
            assert_changes_agree(spark, path, low, high - 1, via_sql=i == 0)
        elif set(schema.names) <= set(latest.names):
            ours = table.changes(low, high - 1)
            theirs = spark_changes(spark, path, low, high - 1).select(ours.column_names)
            assert canonical(theirs) == canonical(ours), f"{path} changes {low}..{high - 1}"


def assert_row_ids_agree(spark: Any, path: Any) -> pa.Table:
    """delta-spark's ``_metadata.row_id`` and ``row_commit_version`` equal txnlog's
    (``to_arrow(with_row_ids=True)``) for every live row; returns txnlog's rows."""
    ours = Table(str(path)).snapshot().to_arrow(with_row_ids=True)
    theirs = (
        spark.read.format("delta").load(str(path))
        .selectExpr("*", "_metadata.row_id AS row_id", "_metadata.row_commit_version AS row_commit_version")
        .toArrow()
    )
    assert canonical(theirs) == canonical(ours)
    ids = ours.column("row_id").to_pylist()
    assert len(set(ids)) == len(ids), "row ids are unique"
    return ours


def assert_history_agrees(spark: Any, path: Any) -> list[dict[str, Any]]:
    """DESCRIBE HISTORY lists txnlog's versions with their operations, read versions,
    isolation levels and metrics; returns delta-spark's rows, newest first."""
    theirs = spark.sql(f"DESCRIBE HISTORY {quoted(path)}").toArrow().to_pylist()
    ours = Table(str(path)).history()
    assert [h["version"] for h in theirs] == [h.version for h in ours]
    for row, entry in zip(theirs, ours):
        info = entry.commit_info
        assert info is not None
        assert row["operation"] == info.operation, row
        assert row["readVersion"] == info.read_version
        assert row["isBlindAppend"] == info.is_blind_append
        assert dict(row["operationMetrics"] or {}) == dict(info.operation_metrics or {})
        assert int(row["timestamp"].timestamp() * 1000) == entry.timestamp
    return theirs


def assert_detail_agrees(spark: Any, path: Any) -> dict[str, Any]:
    """DESCRIBE DETAIL reports txnlog's latest snapshot: file count and size, partition
    columns, properties, protocol; returns delta-spark's row."""
    (detail,) = spark.sql(f"DESCRIBE DETAIL {quoted(path)}").toArrow().to_pylist()
    snap = Table(str(path)).snapshot()
    files = snap.files(stats=False)
    assert detail["format"] == "delta"
    assert detail["numFiles"] == snap.num_files
    assert detail["sizeInBytes"] == sum(files.column("size").to_pylist())
    assert list(detail["partitionColumns"]) == list(snap.partition_columns)
    assert dict(detail["properties"]) == dict(snap.configuration)
    assert (detail["minReaderVersion"], detail["minWriterVersion"]) == (snap.protocol.min_reader_version, snap.protocol.min_writer_version)
    if snap.protocol.min_writer_version >= 7:
        features = set(snap.protocol.writer_features or ()) | set(snap.protocol.reader_features or ())
        assert set(detail["tableFeatures"]) == features
    return detail
