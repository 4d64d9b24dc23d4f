"""Reading a txnlog table into a Spark DataFrame: exactly the snapshot's live files.

The file list comes from the log, never from listing directories. Spark's own Parquet reader
reads those files (so reads cost what ``spark.read.parquet`` costs) with the table's physical
schema; txnlog then adds what Parquet files do not hold:

- partition columns, from each file's ``partitionValues`` typed by the table schema, not from
  directory names: a small broadcast table, one row per file, joined on ``xxhash64`` of
  Spark's own ``_metadata.file_path`` text (the texts worked out once per file on the driver
  from ``DataFrame.inputFiles``, so no row pays for a path conversion; a long key costs far
  less per row than the text);
- logical column names under column mapping (files hold physical names);
- deletion vectors, decoded on the driver into one bitset per file that travels in the same
  broadcast row as the file's partition values; each row's bit, found by
  ``_metadata.row_index`` (the physical position of a row in its file, what a deletion vector
  names), is tested by a native expression, so no row is joined twice and nothing is shuffled;
  when nothing else needs a row's file, rows of files without a vector skip the join.

Every path goes through :meth:`Snapshot.locate`, so nothing outside the table root is opened
because a log entry says so.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from txnlog import Table, Timestamp
from txnlog.errors import InvalidArgumentError, LogCorruptError, TxnLogError
from txnlog.file_facts import parse_partition_values
from txnlog.log import DeletionVectorError
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import (
    SPARK_FAILURES,
    column,
    hadoop_table_path,
    nullable_inside,
    path_key,
    quote_column,
    read_parquet_files,
    spark_path_key,
    spark_schema_of,
    sql_string,
)
from txnlog.spark.delta import delta_in_session

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from txnlog import Snapshot

#: The column :func:`read_files` adds with ``with_file_column=True``: each row's ``add.path``.
FILE_COLUMN = "_txnlog_file"
#: The column :func:`read_files` adds with ``with_row_index=True``: each row's physical position
#: in its data file (counting rows a deletion vector deletes), what a deletion vector names.
ROW_INDEX_COLUMN = "_txnlog_row_index"
_KEY = "_txnlog_key"
_ROW = "_txnlog_row"
_SPARK_PATH = "_txnlog_spark_path"
_RAW_PATH = "_txnlog_raw_path"
_BASE_ROW_ID = "_txnlog_base_row_id"
_DEFAULT_VERSION = "_txnlog_default_row_commit_version"
_DELETED_FIRST = "_txnlog_deleted_first"
_DELETED_BLOCKS = "_txnlog_deleted_blocks"
_DELETED_WORDS = "_txnlog_deleted_words"
_PATH_HASH = "_txnlog_path_hash"
_SPARK_PATH_HASH = "_txnlog_spark_path_hash"
# A deletion bitset's blocks: 4096 rows, 64 words of 64 bits.
_BLOCK_BITS = 12
_BLOCK_WORDS = 1 << (_BLOCK_BITS - 6)
# Rows a data file may hold, as far as deletion vectors go: bounds a bitset's block list.
_MAX_ROWS = 1 << 36
# ``scheme:///path`` and ``scheme:/path`` name the same file (an empty authority); Spark prints
# a local file one way in ``inputFiles`` and the other in ``_metadata.file_path``.
_EMPTY_AUTHORITY = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):///")


def read(
    spark: SparkSession,
    uri: str,
    version: int | None = None,
    timestamp: Timestamp | None = None,
    predicate: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    allow_absolute_paths: bool = False,
    with_row_ids: bool = False,
) -> DataFrame:
    """The table at ``uri`` (at ``version`` or as of ``timestamp``, else the latest) as a DataFrame.

    With a SQL ``predicate``, files that cannot hold a matching row (by partition values and
    min/max stats) are skipped before Spark sees them, and the rows are filtered by it.
    ``storage_options`` open the log; Spark reads the data files with its own filesystem
    configuration for the table's scheme (``s3a``, ``abfss``, ``gs``). ``with_row_ids`` (a
    table with row tracking enabled) adds each row's stable ``row_id`` and its
    ``row_commit_version``, as ``Snapshot.to_arrow(with_row_ids=True)`` gives them.
    """
    table = Table(uri, storage_options, allow_absolute_paths=allow_absolute_paths)
    snapshot = table.snapshot(version=version, timestamp=timestamp)
    return read_snapshot(spark, snapshot, snapshot.files(predicate, stats=False), predicate, with_row_ids=with_row_ids)


def read_snapshot(
    spark: SparkSession, snapshot: Snapshot, files: pa.Table, predicate: str | None, *, with_row_ids: bool = False
) -> DataFrame:
    """The rows of ``snapshot`` matching ``predicate``, where ``files`` is
    ``snapshot.files(predicate)``: the list txnlog checked (every path inside the table root) and
    records as read. With delta-spark in the session and its reader turned on
    (:func:`~txnlog.spark.delta.delta_in_session`) the scan is delta-spark's reader pinned to the snapshot's version, which applies column
    mapping, deletion vectors and row ids in the JVM and skips files by the same predicate;
    else :func:`read_files` reads ``files``."""
    df = _delta_scan(spark, snapshot, files, with_row_ids) if delta_in_session(spark) else None
    if df is None:
        df = read_files(spark, snapshot, files, with_row_ids=with_row_ids)
    if predicate is not None:
        df = df.filter(F.expr(predicate))
    return df


def _delta_scan(spark: SparkSession, snapshot: Snapshot, files: pa.Table, with_row_ids: bool) -> DataFrame | None:
    """delta-spark's scan of ``snapshot`` (``versionAsOf``), in the table's logical columns, after
    txnlog's own checks of ``files``; None when delta-spark cannot plan it (then txnlog's reader,
    whose errors name what is wrong, reads the files)."""
    for path in files.column("path").to_pylist():
        snapshot.locate(path)  # UnsafePathError on escapes, before anything is handed over
    logical, _ = table_schemas(snapshot)
    # A cast drops delta-spark's field metadata (column mapping ids, physical names): the
    # DataFrame has the schema txnlog's own reader gives.
    columns = [column(f.name).cast(nullable_inside(f.dataType)).alias(f.name) for f in logical.fields]
    if with_row_ids:
        _row_tracking_columns(snapshot, files)
        columns += [F.col("_metadata.row_id").alias(ROW_ID), F.col("_metadata.row_commit_version").alias(ROW_COMMIT_VERSION)]
    try:
        df = spark.read.format("delta").option("versionAsOf", snapshot.version).load(hadoop_table_path(snapshot.uri))
        return df.select(*columns)
    except TxnLogError:
        return None
    except SPARK_FAILURES:
        return None


def table_schemas(snapshot: Snapshot) -> tuple[StructType, StructType]:
    """(the table's logical schema, the schema Spark reads its data files with) as Spark types;
    the second is the snapshot's :attr:`TableConfiguration.file_schema_string` (partition
    columns left out, physical names under column mapping)."""
    return spark_schema_of(snapshot.metadata.schema_string), spark_schema_of(snapshot.table_configuration.file_schema_string)


def logical_columns(logical: StructType, snapshot: Snapshot) -> list[Column | str]:
    """Each logical column of the table from a DataFrame read with :func:`table_schemas`' file
    schema plus the partition columns: physical names under column mapping, partition values
    cast to their type. A column that needs neither is its quoted name (what ``select`` takes
    without building a Column: a py4j round trip instead of several)."""
    config = snapshot.table_configuration
    mapped = config.is_column_mapped
    partition_set = {c.lower() for c in snapshot.partition_columns}
    columns: list[Column | str] = []
    for field in logical.fields:
        name = field.name
        if name.lower() in partition_set:  # partition types are primitive: their SQL names parse back
            columns.append(F.expr(f"CAST({quote_column(name)} AS {field.dataType.simpleString()}) AS {quote_column(name)}"))
        elif mapped:
            columns.append(column(config.physical_name(name)).cast(nullable_inside(field.dataType)).alias(name))
        else:
            columns.append(quote_column(name))
    return columns


def _deleted_bitsets(snapshot: Snapshot, files: pa.Table) -> pa.Table | None:
    """Per row of ``files``, the rows its deletion vector deletes as a bitset (all null for a
    file without one), or None when no file has one. Two layouts, one per table:

    - flat (:data:`_DELETED_WORDS` only): bit ``i`` of word ``i >> 6`` for row ``i``, up to the
      last deleted row. One array lookup per row; chosen when it takes at most twice the bytes
      of the two-level layout (deletes spread over most blocks);
    - two-level: rows go in blocks of 4096; :data:`_DELETED_BLOCKS` gives, per block from
      :data:`_DELETED_FIRST` on, where its 64 words start in :data:`_DELETED_WORDS` (null for a
      block with no deleted row, which takes no words). A block costs 4 bytes, a block with
      deletions 512 more: never more than 64 bytes per deleted row, however sparse the deletes.

    The core reader decodes the vectors (the one place they are read)."""
    deleted: list[np.ndarray | None] = []
    flat_bytes = two_level_bytes = 0
    for index, rows in enumerate(snapshot.read_context().deleted_rows(files, snapshot.store)):
        if rows is None or not len(rows):
            deleted.append(None)
            continue
        positions = rows.to_numpy(zero_copy_only=False).astype(np.int64)
        if positions[-1] >= _MAX_ROWS:
            raise DeletionVectorError(f"the deletion vector of {files.column('path')[index]} in table {snapshot.uri} names row {positions[-1]}, past what a data file holds")
        deleted.append(positions)
        blocks = positions >> _BLOCK_BITS
        flat_bytes += ((int(positions[-1]) >> 6) + 1) * 8
        distinct_blocks = 1 + int(np.count_nonzero(np.diff(blocks)))  # positions ascend
        two_level_bytes += (int(blocks[-1] - blocks[0]) + 1) * 4 + distinct_blocks * _BLOCK_WORDS * 8
    if all(d is None for d in deleted):
        return None
    if flat_bytes <= 2 * two_level_bytes:
        flat: list[np.ndarray | None] = []
        for positions in deleted:
            if positions is None:
                flat.append(None)
                continue
            flags = np.zeros(((int(positions[-1]) >> 6) + 1) << 6, dtype=bool)
            flags[positions] = True
            flat.append(np.packbits(flags, bitorder="little").view("<i8"))
        return pa.table({_DELETED_WORDS: pa.array(flat, pa.list_(pa.int64()))})
    firsts: list[int | None] = []
    starts_of: list[pa.Array | None] = []
    words: list[np.ndarray | None] = []
    for positions in deleted:
        if positions is None:
            firsts.append(None)
            starts_of.append(None)
            words.append(None)
            continue
        blocks = positions >> _BLOCK_BITS  # ascending, so runs of one block are adjacent
        block_of = np.concatenate(([0], np.cumsum(np.diff(blocks) != 0)))
        present = blocks[np.concatenate(([True], np.diff(blocks) != 0))]
        starts = np.zeros(present[-1] - present[0] + 1, dtype=np.int32)
        starts[present - present[0]] = np.arange(len(present), dtype=np.int32) * _BLOCK_WORDS
        empty = np.ones(len(starts), dtype=bool)
        empty[present - present[0]] = False
        flags = np.zeros(len(present) << _BLOCK_BITS, dtype=bool)
        flags[(block_of << _BLOCK_BITS) + (positions & ((1 << _BLOCK_BITS) - 1))] = True
        firsts.append(int(present[0]))
        starts_of.append(pa.array(starts, mask=empty))
        words.append(np.packbits(flags, bitorder="little").view("<i8"))
    return pa.table({
        _DELETED_FIRST: pa.array(firsts, pa.int64()),
        _DELETED_BLOCKS: pa.array(starts_of, pa.list_(pa.int32())),
        _DELETED_WORDS: pa.array(words, pa.list_(pa.int64())),
    })


def _not_deleted(row_index: str, two_level: bool) -> str:
    """SQL that is true for a row whose bit is clear in its file's bitset (or whose file has
    none); ``row_index`` names the row's position. A shift and a mask, not ``bit_get``: no
    bounds check per row. SQL text, not Column calls: one parse instead of a py4j round trip
    per node."""
    if two_level:
        block = f"cast(shiftright({row_index}, {_BLOCK_BITS}) - {_DELETED_FIRST} AS int)"
        word_index = f"get({_DELETED_BLOCKS}, {block}) + cast(shiftright({row_index}, 6) & {_BLOCK_WORDS - 1} AS int)"
    else:
        word_index = f"cast(shiftright({row_index}, 6) AS int)"
    bit = f"shiftright(get({_DELETED_WORDS}, {word_index}), cast({row_index} & 63 AS int)) & 1"
    return f"coalesce({bit}, 0) = 0"


def _spark_paths(df: DataFrame, keys: list[str]) -> list[list[str]] | None:
    """For each file key, the texts Spark's ``_metadata.file_path`` may give its rows (from the
    listing Spark already made for ``df``), or None when some file is not found there."""
    by_key: dict[str, list[str]] = {}
    for listed in df.inputFiles():
        spellings = by_key.setdefault(path_key(urllib.parse.unquote(listed)), [])
        for text in (listed, _EMPTY_AUTHORITY.sub(r"\1:/", listed)):
            if text not in spellings:
                spellings.append(text)
    found = [by_key.get(k) for k in keys]
    return None if any(f is None for f in found) else [f for f in found if f is not None]


def read_files(
    spark: SparkSession,
    snapshot: Snapshot,
    files: pa.Table,
    *,
    with_file_column: bool = False,
    with_row_index: bool = False,
    with_row_ids: bool = False,
) -> DataFrame:
    """The rows of ``files`` (rows of ``snapshot.files()``) as a DataFrame with the table's
    logical schema, deletion vectors applied. ``with_file_column`` adds :data:`FILE_COLUMN`, the
    ``add.path`` each row comes from (what copy-on-write rewrites need); ``with_row_index``
    adds :data:`ROW_INDEX_COLUMN`, its physical position in that file (what a deletion vector
    names); ``with_row_ids`` (row tracking enabled) adds ``row_id`` and ``row_commit_version``:
    the materialized values where a file holds them, else the file's ``baseRowId`` + position
    and its ``defaultRowCommitVersion`` (what a rewrite passes to ``preserve_row_ids``)."""

    logical, file_schema = table_schemas(snapshot)
    tracking = _row_tracking_columns(snapshot, files) if with_row_ids else None
    if tracking is not None:  # the hidden columns, null in files that lack them
        file_schema = StructType([*file_schema.fields, *(StructField(c, LongType(), True) for c in tracking)])
    extra_fields = [StructField(FILE_COLUMN, StringType())] if with_file_column else []
    if with_row_index:
        extra_fields.append(StructField(ROW_INDEX_COLUMN, LongType()))
    if with_row_ids:
        extra_fields += [StructField(ROW_ID, LongType()), StructField(ROW_COMMIT_VERSION, LongType())]
    out_schema = StructType([*logical.fields, *extra_fields])
    if files.num_rows == 0:
        return spark.createDataFrame([], out_schema)

    if not (snapshot.partition_columns or with_file_column or with_row_index or with_row_ids):
        # Only vectors need a row's file here: rows of files without one skip the join.
        has_vector = files.column("deletion_vector").is_valid()
        with_vectors = pc.sum(has_vector).as_py() or 0
        if 0 < with_vectors < files.num_rows:
            plain = read_files(spark, snapshot, files.filter(pc.invert(has_vector)))
            return plain.unionAll(read_files(spark, snapshot, files.filter(has_vector)))

    uris = [snapshot.locate(p).uri for p in files.column("path").to_pylist()]  # UnsafePathError on escapes
    keys = [path_key(u) for u in uris]
    try:
        deleted = _deleted_bitsets(snapshot, files)
    except DeletionVectorError:
        raise
    except TxnLogError as e:
        raise DeletionVectorError(f"cannot apply the deletion vectors of table {snapshot.uri}: {e}") from e
    partitions = list(snapshot.partition_columns)
    need_join = bool(partitions) or deleted is not None or with_file_column or with_row_index or with_row_ids

    df = read_parquet_files(spark, file_schema, sorted(set(uris)))
    if need_join:
        file_rows = pa.table({_KEY: pa.array(keys, pa.string()), FILE_COLUMN: files.column("path")})
        if deleted is not None:
            for name in deleted.column_names:
                file_rows = file_rows.append_column(name, deleted.column(name))
        if with_row_ids:
            file_rows = file_rows.append_column(_BASE_ROW_ID, files.column("base_row_id").cast(pa.int64()))
            file_rows = file_rows.append_column(_DEFAULT_VERSION, files.column("default_row_commit_version").cast(pa.int64()))
        if partitions:
            values = parse_partition_values(files, snapshot.schema, partitions, snapshot.configuration)
            for name in values.column_names:
                file_rows = file_rows.append_column(name, values.column(name))
        spark_paths = _spark_paths(df, keys)
        # SQL text below, not Column calls: building a plan from Columns costs a py4j round trip
        # per node (several with pyspark's call-site capture), a third of planning a read.
        extra = [f"_metadata.row_index AS {_ROW}"] if (deleted is not None or with_row_index or with_row_ids) else []
        if spark_paths is None:  # never seen: Spark lists a file under a name txnlog cannot map
            df = df.select("*", *map(F.expr, extra), spark_path_key(F.col("_metadata.file_path")).alias(_KEY))
            df = df.join(F.broadcast(spark.createDataFrame(file_rows)), on=_KEY, how="inner")
        else:
            # One row per spelling of each file: rows are matched on Spark's text as it is.
            repeat = pa.array([i for i, names in enumerate(spark_paths) for _ in names], pa.int64())
            file_rows = file_rows.take(repeat).append_column(_SPARK_PATH, pa.array([n for names in spark_paths for n in names], pa.string()))
            spellings = spark.createDataFrame(file_rows).selectExpr("*", f"xxhash64({_SPARK_PATH}) AS {_PATH_HASH}")
            hashes = [row[0] for row in spellings.select(_PATH_HASH).collect()]  # a local relation: no job
            if len(set(hashes)) == len(hashes):
                # A long per row costs far less to join on than the text (copied, hashed, compared).
                df = df.selectExpr("*", *extra, f"_metadata.file_path AS {_RAW_PATH}", f"xxhash64(_metadata.file_path) AS {_SPARK_PATH_HASH}")
                joined = df.join(F.broadcast(spellings), F.expr(f"{_SPARK_PATH_HASH} = {_PATH_HASH}"), "left")
            else:  # two of the files' texts hash alike
                df = df.selectExpr("*", *extra, f"_metadata.file_path AS {_RAW_PATH}")
                joined = df.join(F.broadcast(spellings), F.expr(f"{_RAW_PATH} = {_SPARK_PATH}"), "left")
            unmatched = f"raise_error(concat({sql_string(f'txnlog: a row of table {snapshot.uri} comes from a file not in its file list: ')}, {_RAW_PATH}))"
            df = joined.filter(F.expr(f"CASE WHEN {_KEY} IS NULL THEN {unmatched} ELSE true END"))
        if deleted is not None:
            df = df.filter(F.expr(_not_deleted(_ROW, _DELETED_BLOCKS in deleted.column_names)))

    columns = logical_columns(logical, snapshot)
    if with_file_column:
        columns.append(F.col(FILE_COLUMN))
    if with_row_index:
        columns.append(F.col(_ROW).alias(ROW_INDEX_COLUMN))
    if tracking is not None:
        id_column, version_column = (column(c) for c in tracking)
        columns.append(F.coalesce(id_column, F.col(_BASE_ROW_ID) + F.col(_ROW)).alias(ROW_ID))
        columns.append(F.coalesce(version_column, F.col(_DEFAULT_VERSION)).alias(ROW_COMMIT_VERSION))
    return df.select(*columns)


def _row_tracking_columns(snapshot: Snapshot, files: pa.Table) -> tuple[str, str]:
    """The materialized row-id and row-commit-version columns of the table, after checking that
    its rows have stable ids: row tracking enabled, every file with its ``baseRowId`` and
    ``defaultRowCommitVersion``."""
    columns = snapshot.table_configuration.row_id_columns(f"table {snapshot.uri}")
    taken = {f.name.lower() for f in snapshot.schema}
    for name in (ROW_ID, ROW_COMMIT_VERSION):
        if name in taken:
            raise InvalidArgumentError(f"with_row_ids: table {snapshot.uri} has a column {name!r} of its own")
    for name, field in (("baseRowId", "base_row_id"), ("defaultRowCommitVersion", "default_row_commit_version")):
        missing = files.filter(files.column(field).is_null()) if files.num_rows else files
        if missing.num_rows:
            path = missing.column("path")[0].as_py()
            raise LogCorruptError(f"data file {path} of table {snapshot.uri} has no {name}, yet the table has row tracking enabled")
    return columns.row_id, columns.row_commit_version


__all__ = ["FILE_COLUMN", "ROW_INDEX_COLUMN", "logical_columns", "read", "read_files", "read_snapshot", "table_schemas"]
