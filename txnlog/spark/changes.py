"""The change data feed as a Spark DataFrame: the files ``Table.change_files`` names for each
version, read by Spark's own Parquet reader, with the rows ``Table.changes`` returns.

Every file a version's changes come from is an *entry* (a file can be one in several versions,
under other deletion vectors). Entries keep a file's rows either except some positions (a file
read whole: its deletion vector's rows are not part of it) or only some positions (a file
re-added with another deletion vector: the rows where the two differ). The positions are
decoded on the driver by the core reader and joined on ``_metadata.row_index``. Change data
files (``_change_data/``) carry their ``_change_type`` and are read as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from txnlog import Table, Timestamp
from txnlog.file_facts import parse_partition_values
from txnlog.log import VersionChanges
from txnlog.read import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from txnlog.spark.common import column, hadoop_path, path_key, spark_path_key, spark_schema_of
from txnlog.spark.reader import _file_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from txnlog import Snapshot

_KEY = "_txnlog_key"
_ROW = "_txnlog_row"
_ENTRY = "_txnlog_entry"
_KEEP_MARKED = "_txnlog_keep_marked"  # true: only the marked rows; false: all but them
_MARKED = "_txnlog_marked"


def read_changes(
    spark: SparkSession,
    uri: str,
    starting_version: int | None = None,
    ending_version: int | None = None,
    *,
    starting_timestamp: Timestamp | None = None,
    ending_timestamp: Timestamp | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_absolute_paths: bool = False,
) -> DataFrame:
    """What ``Table(uri).changes(...)`` returns, as a DataFrame: the table's columns plus
    ``_change_type``, ``_commit_version`` and ``_commit_timestamp``, with the same errors."""
    table = Table(uri, storage_options, allow_absolute_paths=allow_absolute_paths)
    versions = table.change_files(starting_version, ending_version, starting_timestamp=starting_timestamp, ending_timestamp=ending_timestamp)
    snapshot = table.snapshot(versions[-1].version if versions else None)
    table_fields, file_schema_json = _file_schema(snapshot)
    logical = spark_schema_of(orjson.dumps({"type": "struct", "fields": table_fields}).decode())
    out_schema = StructType(
        [
            *logical.fields,
            StructField(CHANGE_TYPE, StringType()),
            StructField(COMMIT_VERSION, LongType(), False),
            StructField(COMMIT_TIMESTAMP, TimestampType(), False),
        ]
    )
    entries = _Entries(snapshot)
    for changes in versions:
        entries.add_version(changes)
    parts = []
    data_schema = spark_schema_of(orjson.dumps(file_schema_json).decode())
    if entries.change_files:
        cdc_schema = StructType([*data_schema.fields, StructField(CHANGE_TYPE, StringType())])
        parts.append(_select(entries.read(spark, cdc_schema, change_files=True), table_fields, logical, snapshot, own_type=True))
    if entries.data_files:
        parts.append(_select(entries.read(spark, data_schema, change_files=False), table_fields, logical, snapshot, own_type=False))
    if not parts:
        return spark.createDataFrame([], out_schema)
    df = parts[0]
    for part in parts[1:]:
        df = df.unionByName(part)
    return df


class _Entries:
    """The files of a range's changes, numbered, with what each contributes."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.context = snapshot.read_context()
        self.rows: list[dict[str, Any]] = []  # per entry: key, version, change type, timestamp
        self.files: list[pa.Table] = []  # per entry: its file row (for partition values)
        self.marks: list[tuple[int, np.ndarray]] = []
        self.change_files: list[int] = []
        self.data_files: list[int] = []

    def _entry(self, file: pa.Table, changes: VersionChanges, change_type: str | None, keep_marked: bool, marked: np.ndarray | None) -> None:
        n = len(self.rows)
        uri = self.snapshot.locate(file.column("path")[0].as_py()).uri  # UnsafePathError on escapes
        self.rows.append({
            _ENTRY: n, _KEY: path_key(uri), "uri": uri, COMMIT_VERSION: changes.version,
            COMMIT_TIMESTAMP: changes.timestamp * 1000, "change_type": change_type, _KEEP_MARKED: keep_marked,
        })
        self.files.append(file)
        (self.data_files if change_type is not None else self.change_files).append(n)
        if marked is not None and len(marked):
            self.marks.append((n, marked))

    def add_version(self, changes: VersionChanges) -> None:
        store = self.snapshot.store
        for i in range(changes.change_files.num_rows):
            self._entry(changes.change_files.slice(i, 1), changes, None, False, None)
        for files, change_type in ((changes.deleted, "delete"), (changes.inserted, "insert")):
            for i, deleted in enumerate(self.context.deleted_rows(files, store)):
                self._entry(files.slice(i, 1), changes, change_type, False, _positions(deleted))
        before = self.context.deleted_rows(changes.vector_removed, store)
        after = self.context.deleted_rows(changes.vector_added, store)
        for i in range(changes.vector_added.num_rows):
            old, new = _positions(before[i]), _positions(after[i])
            file = changes.vector_added.slice(i, 1)
            for change_type, rows in (("delete", np.setdiff1d(new, old)), ("insert", np.setdiff1d(old, new))):
                if len(rows):
                    self._entry(file, changes, change_type, True, rows)

    def read(self, spark: SparkSession, schema: StructType, *, change_files: bool) -> DataFrame:
        ids = self.change_files if change_files else self.data_files
        rows = [self.rows[i] for i in ids]
        entries = pa.table({
            _KEY: pa.array([r[_KEY] for r in rows], pa.string()),
            _ENTRY: pa.array([r[_ENTRY] for r in rows], pa.int64()),
            COMMIT_VERSION: pa.array([r[COMMIT_VERSION] for r in rows], pa.int64()),
            COMMIT_TIMESTAMP: pa.array([r[COMMIT_TIMESTAMP] for r in rows], pa.timestamp("us", tz="UTC")),
            _KEEP_MARKED: pa.array([r[_KEEP_MARKED] for r in rows], pa.bool_()),
        })
        if not change_files:
            entries = entries.append_column(CHANGE_TYPE, pa.array([r["change_type"] for r in rows], pa.string()))
        partitions = list(self.snapshot.partition_columns)
        if partitions:
            files = pa.concat_tables([self.files[i] for i in ids])
            values = parse_partition_values(files, self.snapshot.schema, partitions, self.snapshot.configuration)
            for name in values.column_names:
                entries = entries.append_column(name, values.column(name))
        df = spark.read.schema(schema).parquet(*[hadoop_path(u) for u in sorted({r["uri"] for r in rows})])
        df = df.select("*", spark_path_key(F.col("_metadata.file_path")).alias(_KEY), F.col("_metadata.row_index").alias(_ROW))
        df = df.join(F.broadcast(spark.createDataFrame(entries)), on=_KEY, how="inner")
        wanted = set(ids)
        marks = [(n, rows_) for n, rows_ in self.marks if n in wanted]
        if marks:
            marked = pa.table({
                _ENTRY: pa.concat_arrays([pa.array(np.full(len(r), n, dtype=np.int64)) for n, r in marks]),
                _ROW: pa.concat_arrays([pa.array(r.astype(np.int64)) for _, r in marks]),
                _MARKED: pa.array(np.ones(sum(len(r) for _, r in marks), dtype=bool)),
            })
            df = df.join(F.broadcast(spark.createDataFrame(marked)), on=[_ENTRY, _ROW], how="left")
            is_marked = F.col(_MARKED).isNotNull()
        else:
            is_marked = F.lit(False)
        return df.filter(F.col(_KEEP_MARKED) == is_marked)


def _positions(rows: pa.Array | None) -> np.ndarray:
    if rows is None:
        return np.empty(0, dtype=np.int64)
    return np.asarray(rows.to_numpy(zero_copy_only=False), dtype=np.int64)


def _select(df: DataFrame, table_fields: list[dict[str, Any]], logical: StructType, snapshot: Snapshot, *, own_type: bool) -> DataFrame:
    """The table's logical columns, then the change columns."""
    mapped = snapshot.table_configuration.is_column_mapped
    partition_set = {c.lower() for c in snapshot.partition_columns}
    by_name = {f.name: f for f in logical.fields}
    columns = []
    for field in table_fields:
        name = field["name"]
        if name.lower() in partition_set:
            columns.append(column(name).cast(by_name[name].dataType).alias(name))
        elif mapped:
            physical = snapshot.table_configuration.physical_name(name)
            columns.append(column(physical).cast(by_name[name].dataType).alias(name))
        else:
            columns.append(column(name).alias(name))
    return df.select(*columns, F.col(CHANGE_TYPE), F.col(COMMIT_VERSION), F.col(COMMIT_TIMESTAMP))


__all__ = ["read_changes"]
