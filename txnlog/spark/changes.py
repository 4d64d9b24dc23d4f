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
import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from txnlog import Table, Timestamp
from txnlog.file_facts import parse_partition_values
from txnlog.log import VersionChanges
from txnlog.read import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION, ChangeScan, change_scans
from txnlog.spark.common import path_key, read_parquet_files, spark_path_key
from txnlog.spark.reader import logical_columns, table_schemas

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
    logical, data_schema = table_schemas(snapshot)
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
    if entries.change_files:
        cdc_schema = StructType([*data_schema.fields, StructField(CHANGE_TYPE, StringType())])
        parts.append(_select(entries.read(spark, cdc_schema, change_files=True), logical, snapshot))
    if entries.data_files:
        parts.append(_select(entries.read(spark, data_schema, change_files=False), logical, snapshot))
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

    def _entry(self, file: pa.Table, scan: ChangeScan, keep_marked: bool, marked: np.ndarray | None) -> None:
        n = len(self.rows)
        uri = self.snapshot.locate(file.column("path")[0].as_py()).uri  # UnsafePathError on escapes
        self.rows.append({
            _ENTRY: n, _KEY: path_key(uri), "uri": uri, COMMIT_VERSION: scan.version,
            COMMIT_TIMESTAMP: scan.timestamp * 1000, "change_type": scan.change_type, _KEEP_MARKED: keep_marked,
        })
        self.files.append(file)
        (self.data_files if scan.change_type is not None else self.change_files).append(n)
        if marked is not None and len(marked):
            self.marks.append((n, marked))

    def add_version(self, changes: VersionChanges) -> None:
        """The version's reads (the core's plan): Spark's Parquet reader applies no deletion
        vector, so a live read marks the rows a file's vector deletes, to drop them."""
        store = self.snapshot.store
        for scan in change_scans(self.context, changes, store):
            if scan.positions is not None:
                self._entry(scan.files, scan, True, scan.positions)
                continue
            for i, deleted in enumerate(self.context.deleted_rows(scan.files, store)):
                marked = None if deleted is None else np.asarray(deleted.to_numpy(zero_copy_only=False), dtype=np.int64)
                self._entry(scan.files.slice(i, 1), scan, False, marked)

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
        df = read_parquet_files(spark, schema, sorted({r["uri"] for r in rows}))
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


def _select(df: DataFrame, logical: StructType, snapshot: Snapshot) -> DataFrame:
    """The table's logical columns, then the change columns."""
    return df.select(*logical_columns(logical, snapshot), F.col(CHANGE_TYPE), F.col(COMMIT_VERSION), F.col(COMMIT_TIMESTAMP))


__all__ = ["read_changes"]
