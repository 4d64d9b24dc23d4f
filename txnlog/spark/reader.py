"""Reading a txnlog table into a Spark DataFrame: exactly the snapshot's live files.

The file list comes from the log, never from listing directories. Spark's own Parquet reader
reads those files (so reads cost what ``spark.read.parquet`` costs) with the table's physical
schema; txnlog then adds what Parquet files do not hold:

- partition columns, from each file's ``partitionValues`` typed by the table schema (joined on
  the file's path through Spark's ``_metadata.file_path``), not from directory names;
- logical column names under column mapping (files hold physical names);
- deletion vectors, decoded on the driver and anti-joined on ``_metadata.row_index``: the rows
  they delete never come back.

Every path goes through :meth:`Snapshot.locate`, so nothing outside the table root is opened
because a log entry says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from txnlog import Table, Timestamp
from txnlog.errors import TxnLogError
from txnlog.file_facts import parse_partition_values
from txnlog.log import DeletionVectorError
from txnlog.properties import PHYSICAL_NAME_KEY
from txnlog.spark.common import column, hadoop_path, path_key, spark_path_key, spark_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from txnlog import Snapshot

#: The column :func:`read_files` adds with ``with_file_column=True``: each row's ``add.path``.
FILE_COLUMN = "_txnlog_file"
_KEY = "_txnlog_key"
_ROW = "_txnlog_row"
_MAPPING_NAME = PHYSICAL_NAME_KEY


def read(
    spark: SparkSession,
    uri: str,
    version: int | None = None,
    timestamp: Timestamp | None = None,
    predicate: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    allow_absolute_paths: bool = False,
) -> DataFrame:
    """The table at ``uri`` (at ``version`` or as of ``timestamp``, else the latest) as a DataFrame.

    With a SQL ``predicate``, files that cannot hold a matching row (by partition values and
    min/max stats) are skipped before Spark sees them, and the rows are filtered by it.
    ``storage_options`` open the log; Spark reads the data files with its own filesystem
    configuration for the table's scheme (``s3a``, ``abfss``, ``gs``).
    """
    table = Table(uri, storage_options, allow_absolute_paths=allow_absolute_paths)
    snapshot = table.snapshot(version=version, timestamp=timestamp)
    df = read_files(spark, snapshot, snapshot.files(predicate, stats=False))
    if predicate is not None:
        df = df.filter(F.expr(predicate))
    return df


def _physical_type(t: Any) -> Any:
    """A Delta schema type (JSON) with every nested field under its physical name."""
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return {**t, "fields": [_physical_field(f) for f in t["fields"]]}
        if kind == "array":
            return {**t, "elementType": _physical_type(t["elementType"])}
        if kind == "map":
            return {**t, "keyType": _physical_type(t["keyType"]), "valueType": _physical_type(t["valueType"])}
    return t


def _physical_field(f: dict[str, Any]) -> dict[str, Any]:
    name = (f.get("metadata") or {}).get(_MAPPING_NAME, f["name"])
    return {**f, "name": name, "type": _physical_type(f["type"]), "metadata": {}}


def _file_schema(snapshot: Snapshot) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the table's fields as JSON, the data files' schema as JSON: partition columns left out,
    physical names under column mapping)."""
    fields = orjson.loads(snapshot.metadata.schema_string)["fields"]
    partitions = {c.lower() for c in snapshot.partition_columns}
    data = [f for f in fields if f["name"].lower() not in partitions]
    if snapshot.table_configuration.is_column_mapped:
        data = [_physical_field(f) for f in data]
    else:
        data = [{**f, "metadata": {}} for f in data]
    return fields, {"type": "struct", "fields": data}


def _deleted_rows(snapshot: Snapshot, files: pa.Table, keys: list[str]) -> pa.Table | None:
    """(file key, deleted row index) for every row a deletion vector of ``files`` deletes,
    decoded by the core reader (the one place deletion vectors are read)."""
    key_parts: list[pa.Array] = []
    row_parts: list[pa.Array] = []
    for key, rows in zip(keys, snapshot.read_context().deleted_rows(files, snapshot.store), strict=True):
        if rows is not None and len(rows):
            row_parts.append(rows.cast(pa.int64()))
            key_parts.append(pa.repeat(pa.scalar(key, pa.string()), len(rows)))
    if not row_parts:
        return None
    return pa.table({_KEY: pa.concat_arrays(key_parts), _ROW: pa.concat_arrays(row_parts)})


def read_files(spark: SparkSession, snapshot: Snapshot, files: pa.Table, *, with_file_column: bool = False) -> DataFrame:
    """The rows of ``files`` (rows of ``snapshot.files()``) as a DataFrame with the table's
    logical schema, deletion vectors applied. ``with_file_column`` adds :data:`FILE_COLUMN`, the
    ``add.path`` each row comes from (what copy-on-write rewrites need)."""

    table_fields, file_schema_json = _file_schema(snapshot)
    logical = spark_schema_of(orjson.dumps({"type": "struct", "fields": table_fields}).decode())
    file_schema = spark_schema_of(orjson.dumps(file_schema_json).decode())
    out_schema = StructType([*logical.fields, StructField(FILE_COLUMN, StringType())]) if with_file_column else logical
    if files.num_rows == 0:
        return spark.createDataFrame([], out_schema)

    uris = [snapshot.locate(p).uri for p in files.column("path").to_pylist()]  # UnsafePathError on escapes
    keys = [path_key(u) for u in uris]
    try:
        deleted = _deleted_rows(snapshot, files, keys)
    except DeletionVectorError:
        raise
    except TxnLogError as e:
        raise DeletionVectorError(f"cannot apply the deletion vectors of table {snapshot.uri}: {e}") from e
    partitions = list(snapshot.partition_columns)
    need_join = bool(partitions) or deleted is not None or with_file_column

    df = spark.read.schema(file_schema).parquet(*[hadoop_path(u) for u in sorted(set(uris))])
    physical = {f["name"]: (f.get("metadata") or {}).get(_MAPPING_NAME, f["name"]) for f in table_fields}
    mapped = snapshot.table_configuration.is_column_mapped
    if need_join:
        extra = [spark_path_key(F.col("_metadata.file_path")).alias(_KEY)]
        if deleted is not None:
            extra.append(F.col("_metadata.row_index").alias(_ROW))
        df = df.select("*", *extra)
        if deleted is not None:
            df = df.join(F.broadcast(spark.createDataFrame(deleted)), on=[_KEY, _ROW], how="left_anti")
        file_rows = pa.table({_KEY: pa.array(keys, pa.string()), FILE_COLUMN: files.column("path")})
        if partitions:
            values = parse_partition_values(files, snapshot.schema, partitions, snapshot.configuration)
            for name in values.column_names:
                file_rows = file_rows.append_column(name, values.column(name))
        file_df = spark.createDataFrame(file_rows)
        df = df.join(F.broadcast(file_df), on=_KEY, how="inner")

    by_name = {f.name: f for f in logical.fields}
    columns = []
    partition_set = {c.lower() for c in partitions}
    for field in table_fields:
        name = field["name"]
        target = by_name[name].dataType
        if name.lower() in partition_set:
            source = column(name)
        else:
            source = column(physical[name] if mapped else name)
        columns.append(source.cast(target).alias(name) if (mapped or name.lower() in partition_set) else source.alias(name))
    if with_file_column:
        columns.append(F.col(FILE_COLUMN))
    return df.select(*columns)


__all__ = ["FILE_COLUMN", "read", "read_files"]
