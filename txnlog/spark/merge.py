"""MERGE INTO on Spark: merge-on-read where the table enables deletion vectors, else
copy-on-write.

How it runs (the driver handles file lists, row positions and a few aggregates; rows only for a
small statement, within the bound of :mod:`txnlog.spark.driver`: a small source's keys, the
matching target rows, and the other rows of small copy-on-write files):

0. a small source whose clauses txnlog computes as Spark does (:func:`~txnlog.spark.driver.merge_agrees`),
   into files whose columns read are small, is collected, and ``txnlog.dml.merge`` (the code of
   ``Table.merge``) does the whole MERGE on the driver; otherwise:
1. the source is persisted for the duration (a streaming micro-batch may not be re-readable);
   a source of few rows sends its key columns to the driver, a larger one gives its row count
   and the min/max of each key column in one aggregate;
2. the target's files are pruned to those whose stats overlap the source's key range; the
   transaction records that range as its read predicate and exactly those files as read, so a
   concurrent commit that adds matching rows or removes one of them is a conflict. With the
   keys on the driver, only the files whose own bounds hold one of them are scanned;
3. when the candidates' key columns are small (:mod:`txnlog.spark.driver`), the driver reads
   them and finds the matching target rows, and, when the ON condition is key equalities and
   the clauses are unconditional, every pair: Spark then makes the updates and inserts in one
   pass over the source joined with the broadcast pairs, and copy-on-write copies a changed
   file's other rows on the driver. Otherwise, the candidates (each row tagged with its file, through a per-file broadcast join, and its
   physical position in it) are joined with the source; the matched pairs are cached, and one
   aggregate over them gives, per file, the positions of the rows the MERGE updates or deletes,
   and finds any target row that more than one source row matches (an ambiguous MERGE, refused
   with :class:`~txnlog.errors.DuplicateMatchError` as Delta does, before anything is written);
4. executors write the new row versions (updated rows, from the cached pairs) and the inserts
   (source rows with no pair). With deletion vectors, the changed rows' positions are then
   marked in their files' vectors (one vector file, written on the driver); copy-on-write
   instead rewrites each changed file with its other rows. The driver stages it all in one
   transaction.

Conditions are Spark SQL over two aliases: ``t`` (the target) and ``s`` (the source), e.g.
``on="t.id = s.id"``, ``when_matched_update={"amount": "t.amount + s.amount"}``,
``when_matched_delete="s.deleted"``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from txnlog import AddFile, CommitResult, OptimisticTransaction, Snapshot, Table
from txnlog.dml import Assignments, MergeCondition, key_bounds, key_range_predicate, merge_candidates, merge_parameters, rows_with_keys
from txnlog.dml import assignments as _assignments
from txnlog.dml import merge as dml_merge
from txnlog.errors import DuplicateMatchError, InvalidArgumentError
from txnlog.read import READ_THREADS, ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import SPARK_FAILURES, SparkJobError, job_error, quote_column
from txnlog.spark.driver import (
    MAX_SOURCE_KEYS,
    collect_keys,
    driver_scan_cells,
    fits_driver,
    keys_compare_alike,
    matching_target_rows,
    merge_agrees,
    referenced_columns,
)
from txnlog.spark.reader import FILE_COLUMN as READER_FILE_COLUMN
from txnlog.spark.reader import ROW_INDEX_COLUMN, read_files
from txnlog.spark.writer import (
    ChangeRows,
    dropped_vectors,
    files_table,
    live_rows,
    positions_of,
    row_delete_metrics,
    tracks_row_ids,
    write_files,
)

log = logging.getLogger(__name__)

FILE_COLUMN = "__txnlog_file"
SOURCE_ROW_COLUMN = "__txnlog_source_row"
_TOUCHED = "__txnlog_touched"  # a matched target row this MERGE updates or deletes
_DELETED = "__txnlog_deleted"
_TARGET_ROW_ID = "__txnlog_row_id"
_POSITION = "__txnlog_position"


@dataclass(frozen=True)
class MergeMetrics:
    """What a MERGE did (also recorded as the commit's operation metrics)."""

    source_rows: int = 0
    target_files_scanned: int = 0
    target_files_removed: int = 0
    target_files_added: int = 0
    target_rows_inserted: int = 0
    target_rows_updated: int = 0
    target_rows_deleted: int = 0
    target_rows_copied: int = 0
    deletion_vectors_added: int = 0
    deletion_vectors_updated: int = 0
    deletion_vectors_removed: int = 0

    @property
    def changed(self) -> bool:
        """Whether the MERGE staged any file action."""
        return bool(self.target_files_removed or self.target_files_added or self.deletion_vectors_added or self.deletion_vectors_updated)


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
    row_ids = tracks_row_ids(txn.table_configuration)
    changes = ChangeRows(spark, txn)
    # Rewritten rows carry their stable ids: copied rows both, updated rows the id alone (their
    # commit version becomes this commit's), inserted rows neither.
    new_ids = [F.lit(None).cast("long").alias(ROW_ID), F.lit(None).cast("long").alias(ROW_COMMIT_VERSION)] if row_ids else []

    started = time.monotonic()
    whole = _merge_on_driver(
        txn, spark, source_df, on, condition, updates, inserts,
        when_matched_update=when_matched_update, when_matched_delete=when_matched_delete, when_not_matched_insert=when_not_matched_insert,
    )
    if whole is not None:
        return whole
    source = source_df.withColumn(SOURCE_ROW_COLUMN, F.monotonically_increasing_id()).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [source]
    try:
        source_keys = [source_key for _, source_key in condition.pairs]
        # A source of few rows: its keys come to the driver (one job instead of an aggregate),
        # where they prune the target file by file and, when small, find the matching rows.
        collected = collect_keys(source, source_keys, [SOURCE_ROW_COLUMN], MAX_SOURCE_KEYS, f"the Spark job reading the merge source's keys for table {txn.uri}")
        keyed = None
        if collected is not None:
            source_rows = collected.num_rows
            keyed = rows_with_keys(collected, source_keys)
            unique_keys = keyed.group_by(list(dict.fromkeys(source_keys))).aggregate([]).num_rows == keyed.num_rows
        else:
            source_rows, unique_keys, bounds = _summary(source, condition)
        if source_rows == 0:
            return MergeMetrics()
        same_types = keyed is not None and keys_compare_alike(snapshot.schema, keyed.schema, condition)
        if keyed is not None and same_types:
            # The range is what the transaction records as read (so conflicts are what they
            # were); of its files, only those whose bounds hold one of the source's keys are
            # scanned (a few new keys past the end no longer make every file a candidate).
            candidates = merge_candidates(snapshot, keyed, condition.pairs, txn=txn)
        else:
            if keyed is not None:
                bounds = key_bounds(keyed, source_keys)
            if any(lo is None for lo, _ in bounds.values()):
                # A key column that is null in every source row: nothing can match.
                candidates = snapshot.files().slice(0, 0)
            else:
                predicate = key_range_predicate(condition.pairs, bounds)
                candidates = txn.filter_files(predicate) if predicate is not None else txn.read_whole_table()
        log.info("merge into %s: %d source rows, %d of %d files may match", txn.uri, source_rows, candidates.num_rows, snapshot.num_files)

        s = source.alias("s")
        merge_on_read = txn.table_configuration.deletion_vectors_enabled
        outputs = []
        copy_on_driver: pa.Table | None = None
        driver_pairs: pa.Table | None = None
        hit = candidates.slice(0, 0)
        positions: list[pa.Array] = []
        every_match_changes = True
        updated_rows = deleted_rows = 0
        if candidates.num_rows:
            needed = _target_columns(condition, columns, updates, when_matched_delete, changes.enabled and matched_clause)
            on_driver = (
                keyed is not None and same_types
                and not any(pa.types.is_nested(f.type) for f in snapshot.schema if f.name in needed)
                and fits_driver(spark, candidates, len(needed) + (2 if row_ids else 0), of=len(columns))
            )
            # With the ON condition made of key equalities alone and unconditional clauses, the
            # driver finds every (target row, source row) pair itself; Spark then only computes
            # the new rows, in one pass over the source with the pairs broadcast.
            exact = on_driver and not condition.residual and isinstance(when_matched_delete, bool)
            if on_driver:
                assert keyed is not None
                # The target rows some source key matches, read on the driver (the key columns
                # and what the clauses read): the join below then works on those rows only.
                target_rows = matching_target_rows(
                    snapshot, candidates, needed, _distinct_keys(keyed, condition), condition.pairs,
                    file_column=FILE_COLUMN, row_index_column=ROW_INDEX_COLUMN, with_row_ids=row_ids,
                )
                if exact:
                    driver_pairs = _pairs_on_driver(txn.uri, target_rows, keyed, condition, check_duplicates=matched_clause and not unique_keys)
                    target_rows = driver_pairs
                target = _frame(spark, target_rows, spark_types).alias("t")
            else:
                # Not cached: each pass reads only the columns it needs, and the matched pairs
                # (few, and all that both passes need of the join) are cached instead.
                target = _read_tagged(spark, snapshot, candidates, with_row_ids=row_ids).alias("t")
            if when_matched_delete is True:
                deleted = F.lit(True)
            elif when_matched_delete:
                deleted = F.coalesce(F.expr(str(when_matched_delete)), F.lit(False))
            else:
                deleted = F.lit(False)
            touched = deleted | F.lit(updates is not None)
            # Every matched row is changed (so the rows it marks are all it matched) unless only a
            # conditional delete clause applies: what row-level concurrency needs to know.
            every_match_changes = updates is not None or when_matched_delete is True
            cells = []
            if updates is not None:
                cells = [
                    (F.expr(updates[c]) if c in updates else F.col(f"t.{quote_column(c)}")).cast(spark_types[c]).alias(_cell(i))
                    for i, c in enumerate(columns)
                ]
            keys = [F.col(f"t.{quote_column(t)}").alias(_key(i)) for i, (t, _) in enumerate(condition.pairs)]
            if row_ids and updates is not None:
                cells.append(F.col(f"t.{ROW_ID}").alias(_TARGET_ROW_ID))
            old_cells = []
            if changes.enabled and matched_clause:  # the pre-images and deleted rows of the change data
                old_cells = [F.col(f"t.{quote_column(c)}").cast(spark_types[c]).alias(_old(i)) for i, c in enumerate(columns)]
            if driver_pairs is not None:
                joined = s.join(F.broadcast(target), F.col(f"s.{SOURCE_ROW_COLUMN}") == F.col(f"t.{SOURCE_ROW_COLUMN}"), "left")
                paired = joined.where(F.col(f"t.{FILE_COLUMN}").isNotNull())
            else:
                paired = target.join(s, F.expr(condition.sql), "inner")
            pairs = paired.select(
                F.col(f"t.{FILE_COLUMN}").alias(FILE_COLUMN),
                F.col(f"t.{ROW_INDEX_COLUMN}").alias(ROW_INDEX_COLUMN),
                F.col(f"s.{SOURCE_ROW_COLUMN}").alias(SOURCE_ROW_COLUMN),
                touched.alias(_TOUCHED),
                deleted.alias(_DELETED),
                *keys,
                *cells,
                *old_cells,
            )
            if driver_pairs is not None:
                matched = pairs  # a broadcast join over the cached source: recomputed, not cached
            else:
                matched = pairs.persist(StorageLevel.MEMORY_AND_DISK)
                cached.append(matched)
            if matched_clause and driver_pairs is not None:
                grouped = driver_pairs.group_by(FILE_COLUMN, use_threads=False).aggregate([(ROW_INDEX_COLUMN, "list")])
                hit, positions = positions_of(candidates, grouped.column(FILE_COLUMN), grouped.column(f"{ROW_INDEX_COLUMN}_list"))
                deleted_rows = driver_pairs.num_rows if when_matched_delete else 0
                updated_rows = driver_pairs.num_rows - deleted_rows
            elif matched_clause:
                paths, lists, updated_rows, deleted_rows = _touched_rows(txn.uri, matched, condition, check_duplicates=not unique_keys)
                hit, positions = positions_of(candidates, paths, lists)
            # The updated and the inserted rows in one pass over the source joined with the pairs
            # (an insert of "*" reads only ``s.`` columns, which that join leaves unambiguous).
            single_pass = driver_pairs is not None and (inserts is None or when_not_matched_insert == "*")
            if single_pass:
                outputs.append(_new_rows(joined, columns, spark_types, updates if not when_matched_delete else None, inserts, row_ids))
            updated = matched.where(F.col(_TOUCHED) & ~F.col(_DELETED))
            if updates is not None and hit.num_rows:
                ids = [F.col(_TARGET_ROW_ID).alias(ROW_ID), new_ids[1]] if row_ids else []
                if not single_pass:
                    outputs.append(updated.select(*[F.col(_cell(i)).alias(c) for i, c in enumerate(columns)], *ids))
                changes.require(lambda: updated.select(*[F.col(_old(i)).alias(c) for i, c in enumerate(columns)]), "update_preimage")
                changes.require(lambda: updated.select(*[F.col(_cell(i)).alias(c) for i, c in enumerate(columns)]), "update_postimage")
            if when_matched_delete and hit.num_rows:
                removed_rows = matched.where(F.col(_DELETED))
                changes.require(lambda: removed_rows.select(*[F.col(_old(i)).alias(c) for i, c in enumerate(columns)]), "delete")
            if hit.num_rows and not merge_on_read and driver_pairs is not None and fits_driver(spark, hit, len(columns) + (2 if row_ids else 0), of=len(columns)):
                # Copy-on-write of small files, with the changed positions known: the driver
                # copies their other rows (as txnlog.dml does) while Spark writes the new rows.
                copy_on_driver = hit
            elif hit.num_rows and not merge_on_read:
                # Copy-on-write: every other live row of a changed file is written again.
                if driver_pairs is not None:  # every pair is changed; broadcast, as the driver made them
                    changed = F.broadcast(target.select(FILE_COLUMN, ROW_INDEX_COLUMN))
                else:
                    changed = matched.where(F.col(_TOUCHED)).select(FILE_COLUMN, ROW_INDEX_COLUMN)
                kept = _read_tagged(spark, snapshot, hit, with_row_ids=row_ids).join(changed, on=[FILE_COLUMN, ROW_INDEX_COLUMN], how="left_anti")
                ids = [F.col(ROW_ID), F.col(ROW_COMMIT_VERSION)] if row_ids else []
                outputs.append(kept.select(*[F.col(quote_column(c)).cast(spark_types[c]).alias(c) for c in columns], *ids))
            if inserts is not None:
                if driver_pairs is not None:
                    new_rows = joined.where(F.col(f"t.{FILE_COLUMN}").isNull()).select("s.*").alias("s")
                else:
                    new_rows = s.join(matched.select(SOURCE_ROW_COLUMN), on=SOURCE_ROW_COLUMN, how="left_anti").alias("s")
                inserted_rows = _insert_rows(new_rows, inserts, columns, spark_types)
                if not single_pass:
                    outputs.append(inserted_rows.select("*", *new_ids))
                changes.imply(lambda: inserted_rows, "insert")
        elif inserts is not None:
            outputs.append(_insert_rows(s, inserts, columns, spark_types).select("*", *new_ids))
        scanned = time.monotonic()

        adds: list[AddFile] = []
        with ThreadPoolExecutor(max_workers=1) as pool:
            copied_files = None
            if copy_on_driver is not None:
                assert driver_pairs is not None
                copied_files = pool.submit(_copy_rows, txn, snapshot, copy_on_driver, driver_pairs, row_ids)
            if outputs:
                out = outputs[0]
                for more in outputs[1:]:
                    out = out.unionByName(more)
                adds = write_files(out, txn.write_context(), preserve_row_ids=row_ids)
            if copied_files is not None:
                adds = [*copied_files.result(), *adds]
        if adds:
            txn.add_files(adds)
        change_files = changes.stage()
        added = files_table(adds)
        written = live_rows(added)
        vectors = {"numDeletionVectorsAdded": 0, "numDeletionVectorsUpdated": 0, "numDeletionVectorsRemoved": 0}
        if merge_on_read:
            deletes = txn.delete_rows(hit, positions, exact=every_match_changes) if hit.num_rows else None
            removed = added.slice(0, 0)
            if deletes is not None:
                metrics_of_deletes = row_delete_metrics(deletes)
                vectors = {k: metrics_of_deletes[k] for k in vectors}
                removed = deletes.removed.filter(pc.invert(pc.is_in(deletes.removed.column("path"), deletes.added.column("path"))))
            copied: int | None = 0
        else:
            if hit.num_rows:
                txn.remove_files(hit)
            removed = hit
            vectors["numDeletionVectorsRemoved"] = dropped_vectors(hit)
            before = live_rows(hit)
            copied = before - updated_rows - deleted_rows if before is not None else None
        inserted = written - updated_rows - copied if written is not None and copied is not None else None
        metrics = MergeMetrics(
            source_rows=source_rows,
            target_files_scanned=candidates.num_rows,
            target_files_removed=removed.num_rows,
            target_files_added=len(adds),
            target_rows_inserted=inserted or 0,
            target_rows_updated=updated_rows,
            target_rows_deleted=deleted_rows,
            target_rows_copied=copied or 0,
            deletion_vectors_added=vectors["numDeletionVectorsAdded"],
            deletion_vectors_updated=vectors["numDeletionVectorsUpdated"],
            deletion_vectors_removed=vectors["numDeletionVectorsRemoved"],
        )
        recorded = {
            "numSourceRows": metrics.source_rows,
            "numTargetFilesScanned": metrics.target_files_scanned,
            "numTargetFilesRemoved": metrics.target_files_removed,
            "numTargetFilesAdded": metrics.target_files_added,
            "numTargetChangeFilesAdded": change_files,
            "numTargetBytesAdded": sum(a.size for a in adds),
            "numTargetBytesRemoved": int(pc.sum(removed.column("size")).as_py() or 0) if removed.num_rows else 0,
            "numTargetRowsUpdated": updated_rows,
            "numTargetRowsMatchedUpdated": updated_rows,
            "numTargetRowsDeleted": deleted_rows,
            "numTargetRowsMatchedDeleted": deleted_rows,
            "numTargetDeletionVectorsAdded": metrics.deletion_vectors_added,
            "numTargetDeletionVectorsUpdated": metrics.deletion_vectors_updated,
            "numTargetDeletionVectorsRemoved": metrics.deletion_vectors_removed,
            "scanTimeMs": int((scanned - started) * 1000),
            "rewriteTimeMs": int((time.monotonic() - scanned) * 1000),
            "executionTimeMs": int((time.monotonic() - started) * 1000),
        }
        if written is not None:
            recorded["numOutputRows"] = written
        if inserted is not None:
            recorded["numTargetRowsInserted"] = inserted
        if copied is not None:
            recorded["numTargetRowsCopied"] = copied
        txn.set_operation_metrics(**recorded)
        return metrics
    finally:
        for frame in cached:
            frame.unpersist()


def _merge_on_driver(
    txn: OptimisticTransaction,
    spark: Any,
    source_df: Any,
    on: str | Sequence[str],
    condition: MergeCondition,
    updates: Mapping[str, str] | None,
    inserts: Mapping[str, str] | None,
    *,
    when_matched_update: Assignments,
    when_matched_delete: bool | str,
    when_not_matched_insert: Assignments,
) -> MergeMetrics | None:
    """The whole MERGE done by ``txnlog.dml.merge`` on the driver, as ``Table.merge`` does it:
    when the source and the columns read of the files its keys may match fit the driver's bound,
    and that code computes what Spark would (:func:`merge_agrees`). None, with nothing staged,
    when not: then Spark does the work (the source, read here, is read again)."""
    snapshot = txn.snapshot
    assert snapshot is not None
    source_columns = list(source_df.columns)
    limit = min(MAX_SOURCE_KEYS, driver_scan_cells(spark) // max(len(source_columns), 1))
    if limit <= 0:
        return None
    try:
        declared = to_arrow_schema(source_df.schema)
    except (TypeError, ValueError, pa.ArrowException):  # a type Arrow cannot hold: Spark merges
        return None
    agrees = functools.partial(merge_agrees, snapshot.schema, condition=condition, updates=updates, inserts=inserts,
                               when_matched_delete=when_matched_delete)
    if not agrees(declared):
        return None
    try:
        rows = collect_keys(source_df, source_columns, [], limit, f"the Spark job reading the merge source for table {txn.uri}")
    except SparkJobError as e:
        # The bound counts values, not bytes: wide rows can pass it and still exceed what Spark
        # lets a job return to the driver. Then Spark merges, as it would without this path.
        if _RESULT_TOO_LARGE not in str(e):
            raise
        log.info("merge into %s: the source is too large to collect (%s); Spark merges it", txn.uri, e)
        return None
    if rows is None or not agrees(rows.schema):
        return None
    candidates = merge_candidates(snapshot, rows_with_keys(rows, [s for _, s in condition.pairs]), condition.pairs)
    columns = [f.name for f in snapshot.schema]
    if txn.table_configuration.deletion_vectors_enabled:
        matched_clause = updates is not None or bool(when_matched_delete)
        read = len(_target_columns(condition, columns, updates, when_matched_delete, txn.table_configuration.change_data_feed_enabled and matched_clause))
    else:
        read = len(columns)  # a changed file is rewritten whole
    if not fits_driver(spark, candidates, read + (2 if tracks_row_ids(txn.table_configuration) else 0), of=len(columns)):
        return None
    log.info("merge into %s on the driver: %d source rows, %d of %d files may match", txn.uri, rows.num_rows, candidates.num_rows, snapshot.num_files)
    # dml.merge records MERGE's operation parameters; a streaming batch's commit keeps its own.
    parameters = dict(txn.operation_parameters)
    result = dml_merge(txn, rows, on, when_matched_update=when_matched_update, when_matched_delete=when_matched_delete,
                       when_not_matched_insert=when_not_matched_insert)
    if parameters:
        txn.operation_parameters.clear()
        txn.operation_parameters.update(parameters)
    txn.set_operation_metrics(numTargetFilesScanned=candidates.num_rows)
    m = result.metrics
    return MergeMetrics(
        source_rows=m["numSourceRows"],
        target_files_scanned=candidates.num_rows,
        **{field: m.get(name, 0) for field, name in _DML_METRICS.items()},
    )


#: In Spark's error when a job's results exceed ``spark.driver.maxResultSize``.
_RESULT_TOO_LARGE = "spark.driver.maxResultSize"
#: MergeMetrics' fields by the name txnlog.dml.merge records each under.
_DML_METRICS = {
    "target_files_removed": "numTargetFilesRemoved",
    "target_files_added": "numTargetFilesAdded",
    "target_rows_inserted": "numTargetRowsInserted",
    "target_rows_updated": "numTargetRowsUpdated",
    "target_rows_deleted": "numTargetRowsDeleted",
    "target_rows_copied": "numTargetRowsCopied",
    "deletion_vectors_added": "numTargetDeletionVectorsAdded",
    "deletion_vectors_updated": "numTargetDeletionVectorsUpdated",
    "deletion_vectors_removed": "numTargetDeletionVectorsRemoved",
}


def _summary(source: Any, condition: MergeCondition) -> tuple[int, bool, dict[str, tuple[Any, Any]]]:
    """For a source too large to collect: its row count, whether its non-null keys are unique,
    and each key column's min and max; one aggregate."""
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
    bounds = {s: (summary[f"lo{i}"], summary[f"hi{i}"]) for i, (_, s) in enumerate(condition.pairs)}
    return int(summary["n"]), int(summary["keyed"]) == int(summary["distinct_keys"]), bounds


def _distinct_keys(keyed: pa.Table, condition: MergeCondition) -> pa.Table:
    names = list(dict.fromkeys(s for _, s in condition.pairs))
    return keyed.group_by(names).aggregate([]).select(names)


def _target_columns(condition: MergeCondition, columns: Sequence[str], updates: Mapping[str, str] | None, when_matched_delete: bool | str,
                    every_column: bool) -> list[str]:
    """The target columns the join and the matched clauses may read."""
    if every_column:
        return list(columns)
    texts = [condition.sql, *(updates or {}).values()]
    if isinstance(when_matched_delete, str):
        texts.append(when_matched_delete)
    needed = set(referenced_columns(texts, columns))
    if updates is not None:
        needed |= {c for c in columns if c not in updates}  # copied from the target row
    by_lower = {c.lower(): c for c in columns}
    needed |= {by_lower[t.lower()] for t, _ in condition.pairs if t.lower() in by_lower}
    return [c for c in columns if c in needed]


def _frame(spark: Any, rows: pa.Table, spark_types: Mapping[str, Any]) -> Any:
    """``rows`` (table columns and the tags) as a DataFrame with the types a scan would give."""
    fields = []
    for f in rows.schema:
        if f.name in spark_types:
            fields.append(StructField(f.name, spark_types[f.name], True))
        else:
            fields.append(StructField(f.name, StringType() if f.name == FILE_COLUMN else LongType(), True))
    return spark.createDataFrame(rows, schema=StructType(fields))


def _pairs_on_driver(uri: str, target_rows: pa.Table, keyed: pa.Table, condition: MergeCondition, *, check_duplicates: bool) -> pa.Table:
    """Each (target row, source row) pair whose keys are equal: ``target_rows`` (as the driver
    read them) with the source row's SOURCE_ROW_COLUMN. With ``check_duplicates``, raises
    DuplicateMatchError when a target row has more than one, as Spark's aggregate would."""
    targets = [t for t, _ in condition.pairs]
    sources = [s for _, s in condition.pairs]
    right = keyed.select(list(dict.fromkeys([*sources, SOURCE_ROW_COLUMN])))
    pairs = target_rows.join(right, keys=targets, right_keys=sources, join_type="inner", use_threads=False)
    if check_duplicates and pairs.num_rows > target_rows.num_rows:
        counts = pairs.group_by([FILE_COLUMN, ROW_INDEX_COLUMN], use_threads=False).aggregate([([], "count_all")])
        worst = int(pc.index(counts.column("count_all"), pc.max(counts.column("count_all"))).as_py())
        found = counts.slice(worst, 1).to_pylist()[0]
        where = pc.and_(pc.equal(target_rows.column(FILE_COLUMN), found[FILE_COLUMN]), pc.equal(target_rows.column(ROW_INDEX_COLUMN), found[ROW_INDEX_COLUMN]))
        row = target_rows.filter(where).slice(0, 1).to_pylist()[0]
        key = {t: row[t] for t in targets}
        n = int(found["count_all"])
        raise DuplicateMatchError(
            f"merge into {uri}: {n} source rows match the same target row (key {key}, in file {found[FILE_COLUMN]}); "
            "a target row may be updated or deleted by one source row only: deduplicate the source",
            uri=uri,
            key=key,
            source_rows=n,
        )
    return pairs.select([*target_rows.column_names, SOURCE_ROW_COLUMN])


def _spark_types(snapshot: Snapshot) -> dict[str, Any]:
    # A Delta schemaString is Spark's StructType JSON.
    return {f.name: f.dataType for f in StructType.fromJson(orjson.loads(snapshot.metadata.schema_string)).fields}


def _insert_rows(rows: Any, inserts: Mapping[str, str], columns: Sequence[str], spark_types: Mapping[str, Any]) -> Any:
    return rows.select(
        *[(F.expr(inserts[c]) if c in inserts else F.lit(None)).cast(spark_types[c]).alias(c) for c in columns]
    )


def _copy_rows(txn: OptimisticTransaction, snapshot: Snapshot, files: pa.Table, pairs: pa.Table, row_ids: bool) -> list[AddFile]:
    """Write, on the driver, the live rows of ``files`` other than the changed ones (``pairs``'
    file paths and positions), keeping their stable ids under row tracking."""
    changed: dict[str, pa.Array] = {}
    grouped = pairs.group_by(FILE_COLUMN, use_threads=False).aggregate([(ROW_INDEX_COLUMN, "list")])
    for path, rows in zip(grouped.column(FILE_COLUMN).to_pylist(), grouped.column(f"{ROW_INDEX_COLUMN}_list").combine_chunks()):
        changed[path] = rows.values
    ctx = snapshot.read_context()
    paths = files.column("path").to_pylist()

    def kept() -> Iterator[pa.RecordBatch]:
        found = ctx.read_each(files, parallel=READ_THREADS, row_index=_POSITION, row_id=ROW_ID if row_ids else None,
                              row_commit_version=ROW_COMMIT_VERSION if row_ids else None)
        for i, rows in found:
            drop = changed.get(paths[i])
            if drop is not None:
                rows = rows.filter(pc.invert(pc.is_in(rows.column(_POSITION), value_set=drop)))
            yield from rows.drop_columns([_POSITION]).to_batches()

    return list(txn.write_context().write(kept(), preserve_row_ids=row_ids).add_files)


def _new_rows(joined: Any, columns: Sequence[str], spark_types: Mapping[str, Any], updates: Mapping[str, str] | None,
              inserts: Mapping[str, str] | None, row_ids: bool) -> Any:
    """From the source left-joined with the driver's pairs (``t``): each matched row's new
    version (when ``updates``) and each unmatched source row's insert (when ``inserts``)."""
    is_matched = F.col(f"t.{FILE_COLUMN}").isNotNull()
    keep = F.lit(False)
    if updates is not None:
        keep = keep | is_matched
    if inserts is not None:
        keep = keep | ~is_matched
    values = []
    for c in columns:
        updated = (F.expr(updates[c]) if c in updates else F.col(f"t.{quote_column(c)}")) if updates is not None else F.lit(None)
        inserted = F.expr(inserts[c]) if inserts is not None and c in inserts else F.lit(None)
        values.append(F.when(is_matched, updated.cast(spark_types[c])).otherwise(inserted.cast(spark_types[c])).alias(c))
    if row_ids:  # an updated row keeps its id (its commit version becomes this commit's); an insert gets new ones
        values += [F.when(is_matched, F.col(f"t.{ROW_ID}")).cast("long").alias(ROW_ID), F.lit(None).cast("long").alias(ROW_COMMIT_VERSION)]
    return joined.where(keep).select(*values)


def _cell(i: int) -> str:
    return f"__txnlog_c{i}"


def _old(i: int) -> str:
    return f"__txnlog_o{i}"


def _key(i: int) -> str:
    return f"__txnlog_k{i}"


def _touched_rows(uri: str, matched: Any, condition: MergeCondition, *, check_duplicates: bool) -> tuple[pa.Array, pa.Array, int, int]:
    """From the matched (target row, source row) pairs: the files holding a row the MERGE
    changes, the physical positions of those rows (a list per file), and how many rows are
    updated and deleted. With ``check_duplicates``, raises DuplicateMatchError if a target row
    is matched by more than one source row. One Spark job; one row per file comes back."""
    names = [_key(i) for i in range(len(condition.pairs))]
    rows = matched
    if check_duplicates:
        rows = matched.groupBy(FILE_COLUMN, ROW_INDEX_COLUMN).agg(
            F.count(F.lit(1)).alias("n"),
            F.max(_TOUCHED).alias(_TOUCHED),
            F.max(_DELETED).alias(_DELETED),
            F.first(F.struct(*names)).alias("key"),
        )
    changed = F.col(_TOUCHED)
    aggregates = [
        F.collect_list(F.when(changed, F.col(ROW_INDEX_COLUMN))).alias("rows"),
        F.sum(F.when(changed & ~F.col(_DELETED), 1).otherwise(0)).alias("updated"),
        F.sum(F.when(F.col(_DELETED), 1).otherwise(0)).alias("deleted"),
    ]
    if check_duplicates:
        aggregates += [F.max("n").alias("n"), F.max_by("key", "n").alias("key")]
    try:
        per_file = rows.groupBy(FILE_COLUMN).agg(*aggregates).toArrow()
    except SPARK_FAILURES as e:
        raise job_error(e, f"the Spark job matching the merge source with table {uri}") from e
    if check_duplicates and per_file.num_rows:
        worst = int(pc.index(per_file.column("n"), pc.max(per_file.column("n"))).as_py())
        n = int(per_file.column("n")[worst].as_py())
        if n > 1:
            found = per_file.column("key")[worst].as_py()
            key = {t: found[_key(i)] for i, (t, _) in enumerate(condition.pairs)}
            path = per_file.column(FILE_COLUMN)[worst].as_py()
            raise DuplicateMatchError(
                f"merge into {uri}: {n} source rows match the same target row (key {key}, in file {path}); "
                "a target row may be updated or deleted by one source row only: deduplicate the source",
                uri=uri,
                key=key,
                source_rows=n,
            )
    changed_files = pc.greater(pc.list_value_length(per_file.column("rows")), 0)
    kept = per_file.filter(changed_files)
    return (
        kept.column(FILE_COLUMN).combine_chunks(),
        kept.column("rows").combine_chunks(),
        int(pc.sum(per_file.column("updated")).as_py() or 0),
        int(pc.sum(per_file.column("deleted")).as_py() or 0),
    )


def _read_tagged(spark: Any, snapshot: Snapshot, files: pa.Table, *, with_row_ids: bool = False) -> Any:
    """The rows of ``files`` (deletion vectors applied) with the file's log path in FILE_COLUMN
    and each row's physical position in ROW_INDEX_COLUMN (and, ``with_row_ids``, its stable id
    and commit version)."""
    rows = read_files(spark, snapshot, files, with_file_column=True, with_row_index=True, with_row_ids=with_row_ids)
    return rows.withColumnRenamed(READER_FILE_COLUMN, FILE_COLUMN)


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
        if not metrics.changed:
            txn.abort()
            return None
    return txn.result


__all__ = ["MergeCondition", "MergeMetrics", "key_range_predicate", "merge", "merge_into", "merge_parameters"]
