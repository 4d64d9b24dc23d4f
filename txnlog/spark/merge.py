"""MERGE INTO on Spark, copy-on-write.

How it runs (the driver handles file lists and a few aggregates, never rows):

1. the source is persisted for the duration (a streaming micro-batch may not be re-readable),
   and one aggregate gives its row count and the min/max of each key column;
2. the target's files are pruned to those whose stats overlap the source's key range; the
   transaction records that range as its read predicate and exactly those files as read, so a
   concurrent commit that adds matching rows or removes one of them is a conflict;
3. the candidates are joined with the source: one small aggregate names the files that hold a
   matched row, and finds any target row that more than one source row matches (an ambiguous
   MERGE, refused with :class:`~txnlog.errors.DuplicateMatchError` as Delta does);
4. only the files holding a matched row are rewritten (updated rows changed, deleted rows
   dropped, the others kept), unmatched source rows are inserted, and executors write the new
   files; the driver commits the removes and adds in one transaction.

Conditions are Spark SQL over two aliases: ``t`` (the target) and ``s`` (the source), e.g.
``on="t.id = s.id"``, ``when_matched_update={"amount": "t.amount + s.amount"}``,
``when_matched_delete="s.deleted"``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from txnlog import CommitResult, OptimisticTransaction, Snapshot, Table
from txnlog.dml import Assignments, MergeCondition, key_range_predicate, merge_parameters
from txnlog.dml import assignments as _assignments
from txnlog.errors import DuplicateMatchError, InvalidArgumentError
from txnlog.spark.common import quote_column
from txnlog.spark.reader import FILE_COLUMN as READER_FILE_COLUMN
from txnlog.spark.reader import read_files
from txnlog.spark.writer import write_files

log = logging.getLogger(__name__)

FILE_COLUMN = "__txnlog_file"
SOURCE_ROW_COLUMN = "__txnlog_source_row"


@dataclass(frozen=True)
class MergeMetrics:
    """What a MERGE did (also recorded as the commit's operation metrics)."""

    source_rows: int = 0
    target_files_scanned: int = 0
    target_files_removed: int = 0
    target_files_added: int = 0


def _open(uri: str | Table, storage_options: Mapping[str, Any] | None) -> Table:
    return uri if isinstance(uri, Table) else Table(uri, storage_options)


# -- the work -------------------------------------------------------------------------------


def merge_into(
    txn: OptimisticTransaction,
    spark: Any,
    source_df: Any,
    on: str | Sequence[str],
    *,
    when_matched_update: Assignments = None,
    when_matched_delete: bool | str = False,
    when_not_matched_insert: Assignments = None,
) -> MergeMetrics:
    """Stage a copy-on-write MERGE of ``source_df`` into ``txn``'s table (nothing is committed:
    the caller commits, possibly with more actions such as a streaming batch's app transaction)."""
    snapshot = txn.snapshot
    if snapshot is None:
        raise InvalidArgumentError(f"merge into {txn.uri}: the table does not exist yet")
    if when_matched_update is None and not when_matched_delete and when_not_matched_insert is None:
        raise InvalidArgumentError("merge needs at least one of when_matched_update, when_matched_delete, when_not_matched_insert")
    if when_matched_update is not None and when_matched_delete is True:
        raise InvalidArgumentError("when_matched_delete=True deletes every matched row: when_matched_update would never apply")
    condition = MergeCondition.parse(on)
    columns = [f.name for f in snapshot.schema]
    source_columns = list(source_df.columns)
    lowered_source = {c.lower() for c in source_columns}
    for _, source_key in condition.pairs:
        if source_key.lower() not in lowered_source:
            raise InvalidArgumentError(f"merge key {source_key!r} is not a column of the source (columns: {source_columns})")
    updates = _assignments("when_matched_update", when_matched_update, columns, source_columns)
    inserts = _assignments("when_not_matched_insert", when_not_matched_insert, columns, source_columns)
    matched_clause = updates is not None or bool(when_matched_delete)
    spark_types = _spark_types(snapshot)

    source = source_df.withColumn(SOURCE_ROW_COLUMN, F.monotonically_increasing_id()).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [source]
    try:
        key_columns = [F.col(quote_column(source_key)) for _, source_key in condition.pairs]
        all_keys_set = F.lit(True)
        for column in key_columns:
            all_keys_set = all_keys_set & column.isNotNull()
        aggregates = [
            F.count(F.lit(1)).alias("n"),
            # Unique keys in the source mean no target row can match twice: the per-row check
            # (a join and two aggregations) is then skipped.
            F.count(F.when(all_keys_set, F.lit(1))).alias("keyed"),
            F.countDistinct(*key_columns).alias("distinct_keys"),
        ]
        for i, column in enumerate(key_columns):
            aggregates += [F.min(column).alias(f"lo{i}"), F.max(column).alias(f"hi{i}")]
        summary = source.agg(*aggregates).collect()[0]
        source_rows = int(summary["n"])
        unique_keys = int(summary["keyed"]) == int(summary["distinct_keys"])
        if source_rows == 0:
            return MergeMetrics()
        bounds = {s: (summary[f"lo{i}"], summary[f"hi{i}"]) for i, (_, s) in enumerate(condition.pairs)}
        if any(lo is None for lo, _ in bounds.values()):
            # A key column that is null in every source row: nothing can match.
            candidates = snapshot.files().slice(0, 0)
        else:
            predicate = key_range_predicate(condition.pairs, bounds)
            candidates = txn.filter_files(predicate) if predicate is not None else txn.read_whole_table()
        log.info("merge into %s: %d source rows, %d of %d files may match", txn.uri, source_rows, candidates.num_rows, snapshot.num_files)

        s = source.alias("s")
        outputs = []
        touched = candidates.slice(0, 0)
        if candidates.num_rows:
            # Read once, used twice (which files match, then their rewrite): the tagged read
            # costs more than the cache.
            target = _read_tagged(spark, snapshot, candidates).persist(StorageLevel.MEMORY_AND_DISK).alias("t")
            cached.append(target)
            join = F.expr(condition.sql)
            if matched_clause:
                touched_paths = _matched_files(txn.uri, target, s, join, condition, check_duplicates=not unique_keys)
                touched = candidates.filter(pc.is_in(candidates.column("path"), value_set=pa.array(touched_paths, pa.string())))
            if touched.num_rows:
                touched_target = target.where(F.col(f"t.{FILE_COLUMN}").isin(list(touched.column("path").to_pylist()))).alias("t")
                rewritten = touched_target.join(s, join, "left")
                matched = F.col(f"s.{SOURCE_ROW_COLUMN}").isNotNull()
                if when_matched_delete is True:
                    deleted = matched
                elif when_matched_delete:
                    deleted = matched & F.coalesce(F.expr(str(when_matched_delete)), F.lit(False))
                else:
                    deleted = F.lit(False)
                if updates is not None:
                    cells = [
                        F.when(matched & ~deleted, F.expr(updates[c])).otherwise(F.col(f"t.{quote_column(c)}")).cast(spark_types[c]).alias(c)
                        if c in updates
                        else F.col(f"t.{quote_column(c)}").cast(spark_types[c]).alias(c)
                        for c in columns
                    ]
                else:
                    cells = [F.col(f"t.{quote_column(c)}").cast(spark_types[c]).alias(c) for c in columns]
                outputs.append(rewritten.where(~deleted).select(*cells))
            if inserts is not None:
                new_rows = s.join(target, join, "left_anti")
                outputs.append(_insert_rows(new_rows, inserts, columns, spark_types))
        elif inserts is not None:
            outputs.append(_insert_rows(s, inserts, columns, spark_types))

        adds = []
        if outputs:
            out = outputs[0]
            for more in outputs[1:]:
                out = out.unionByName(more)
            adds = write_files(out, txn.write_context())
        if touched.num_rows:
            txn.remove_files(touched)
        if adds:
            txn.add_files(adds)
        metrics = MergeMetrics(
            source_rows=source_rows,
            target_files_scanned=candidates.num_rows,
            target_files_removed=touched.num_rows,
            target_files_added=len(adds),
        )
        txn.set_operation_metrics(
            numSourceRows=metrics.source_rows,
            numTargetFilesScanned=metrics.target_files_scanned,
            numTargetFilesRemoved=metrics.target_files_removed,
            numTargetFilesAdded=metrics.target_files_added,
        )
        return metrics
    finally:
        for frame in cached:
            frame.unpersist()


def _spark_types(snapshot: Snapshot) -> dict[str, Any]:
    # A Delta schemaString is Spark's StructType JSON.
    return {f.name: f.dataType for f in StructType.fromJson(orjson.loads(snapshot.metadata.schema_string)).fields}


def _insert_rows(rows: Any, inserts: Mapping[str, str], columns: Sequence[str], spark_types: Mapping[str, Any]) -> Any:
    return rows.select(
        *[(F.expr(inserts[c]) if c in inserts else F.lit(None)).cast(spark_types[c]).alias(c) for c in columns]
    )


def _matched_files(uri: str, target: Any, source: Any, join: Any, condition: MergeCondition, *, check_duplicates: bool) -> list[str]:
    """The files holding a matched row; with ``check_duplicates``, raises DuplicateMatchError if
    a target row is matched by more than one source row. One Spark job; only file paths (and
    match counts) come back to the driver."""
    if not check_duplicates:
        matched = target.join(source, join, "left_semi").select(F.col(FILE_COLUMN).alias("file")).distinct()
        return [r["file"] for r in matched.collect()]

    keys = [F.col(f"t.{quote_column(t)}").alias(f"k{i}") for i, (t, _) in enumerate(condition.pairs)]
    per_key = (
        target.join(source, join, "inner")
        .select(F.col(f"t.{FILE_COLUMN}").alias("file"), F.col(f"s.{SOURCE_ROW_COLUMN}").alias("sid"), *keys)
        .groupBy("file", *[f"k{i}" for i in range(len(keys))])
        .agg(F.countDistinct("sid").alias("n"))
    )
    rows = (
        per_key.groupBy("file")
        .agg(F.max("n").alias("n"), F.max_by(F.struct(*[f"k{i}" for i in range(len(keys))]), "n").alias("key"))
        .collect()
    )
    worst = max(rows, key=lambda r: r["n"], default=None)
    if worst is not None and worst["n"] > 1:
        key = {t: worst["key"][f"k{i}"] for i, (t, _) in enumerate(condition.pairs)}
        raise DuplicateMatchError(
            f"merge into {uri}: {worst['n']} source rows match the same target row (key {key}, in file {worst['file']}); "
            "a target row may be updated or deleted by one source row only: deduplicate the source",
            uri=uri,
            key=key,
            source_rows=int(worst["n"]),
        )
    return [r["file"] for r in rows]


def _read_tagged(spark: Any, snapshot: Snapshot, files: pa.Table) -> Any:
    """The rows of ``files`` (deletion vectors applied) with the file's log path in FILE_COLUMN."""
    return read_files(spark, snapshot, files, with_file_column=True).withColumnRenamed(READER_FILE_COLUMN, FILE_COLUMN)


def merge(
    spark: Any,
    uri: str | Table,
    source_df: Any,
    on: str | Sequence[str] = "key",
    when_matched_update: Assignments = None,
    when_matched_delete: bool | str = False,
    when_not_matched_insert: Assignments = None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    isolation: str | None = None,
) -> CommitResult | None:
    """MERGE ``source_df`` into the table at ``uri`` (a URI or an open :class:`txnlog.Table`)
    and commit; returns the new version, or None when the source was empty.

    ``on``: a key column, a list of them (same names on both sides), or a Spark SQL condition
    over ``t`` and ``s`` with at least one ``t.x = s.y``. ``when_matched_update``: a dict of
    target column -> expression, or ``"*"`` for every column from the source.
    ``when_matched_delete``: True, or a condition that picks the matched rows to delete.
    ``when_not_matched_insert``: a dict or ``"*"``. Conflicts raise ``txnlog.errors``
    ``CommitConflictError`` subclasses, ambiguous matches ``DuplicateMatchError``.
    """
    table = _open(uri, storage_options)
    params = merge_parameters(on, when_matched_update, when_matched_delete, when_not_matched_insert)
    with table.transaction("MERGE", isolation, operation_parameters=params) as txn:
        metrics = merge_into(
            txn,
            spark,
            source_df,
            on,
            when_matched_update=when_matched_update,
            when_matched_delete=when_matched_delete,
            when_not_matched_insert=when_not_matched_insert,
        )
        if metrics.target_files_removed == 0 and metrics.target_files_added == 0:
            txn.abort()
            return None
    return txn.result


__all__ = ["MergeCondition", "MergeMetrics", "key_range_predicate", "merge", "merge_into", "merge_parameters"]
