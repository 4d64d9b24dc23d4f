"""MERGE INTO on Spark: merge-on-read where the table enables deletion vectors, else
copy-on-write.

How it runs (the driver handles file lists, row positions and a few aggregates, never rows):

1. the source is persisted for the duration (a streaming micro-batch may not be re-readable),
   and one aggregate gives its row count and the min/max of each key column;
2. the target's files are pruned to those whose stats overlap the source's key range; the
   transaction records that range as its read predicate and exactly those files as read, so a
   concurrent commit that adds matching rows or removes one of them is a conflict;
3. the candidates (each row tagged with its file, through a per-file broadcast join, and its
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

import logging
import time
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
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import SPARK_FAILURES, job_error, quote_column
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
        merge_on_read = txn.table_configuration.deletion_vectors_enabled
        outputs = []
        hit = candidates.slice(0, 0)
        positions: list[pa.Array] = []
        every_match_changes = True
        updated_rows = deleted_rows = 0
        if candidates.num_rows:
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
            pairs = target.join(s, F.expr(condition.sql), "inner").select(
                F.col(f"t.{FILE_COLUMN}").alias(FILE_COLUMN),
                F.col(f"t.{ROW_INDEX_COLUMN}").alias(ROW_INDEX_COLUMN),
                F.col(f"s.{SOURCE_ROW_COLUMN}").alias(SOURCE_ROW_COLUMN),
                touched.alias(_TOUCHED),
                deleted.alias(_DELETED),
                *keys,
                *cells,
                *old_cells,
            )
            matched = pairs.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(matched)
            if matched_clause:
                paths, lists, updated_rows, deleted_rows = _touched_rows(txn.uri, matched, condition, check_duplicates=not unique_keys)
                hit, positions = positions_of(candidates, paths, lists)
            updated = matched.where(F.col(_TOUCHED) & ~F.col(_DELETED))
            if updates is not None and hit.num_rows:
                ids = [F.col(_TARGET_ROW_ID).alias(ROW_ID), new_ids[1]] if row_ids else []
                outputs.append(updated.select(*[F.col(_cell(i)).alias(c) for i, c in enumerate(columns)], *ids))
                changes.require(lambda: updated.select(*[F.col(_old(i)).alias(c) for i, c in enumerate(columns)]), "update_preimage")
                changes.require(lambda: updated.select(*[F.col(_cell(i)).alias(c) for i, c in enumerate(columns)]), "update_postimage")
            if when_matched_delete and hit.num_rows:
                removed_rows = matched.where(F.col(_DELETED))
                changes.require(lambda: removed_rows.select(*[F.col(_old(i)).alias(c) for i, c in enumerate(columns)]), "delete")
            if hit.num_rows and not merge_on_read:
                # Copy-on-write: every other live row of a changed file is written again.
                changed = matched.where(F.col(_TOUCHED)).select(FILE_COLUMN, ROW_INDEX_COLUMN)
                kept = _read_tagged(spark, snapshot, hit, with_row_ids=row_ids).join(changed, on=[FILE_COLUMN, ROW_INDEX_COLUMN], how="left_anti")
                ids = [F.col(ROW_ID), F.col(ROW_COMMIT_VERSION)] if row_ids else []
                outputs.append(kept.select(*[F.col(quote_column(c)).cast(spark_types[c]).alias(c) for c in columns], *ids))
            if inserts is not None:
                new_rows = s.join(matched.select(SOURCE_ROW_COLUMN), on=SOURCE_ROW_COLUMN, how="left_anti").alias("s")
                inserted_rows = _insert_rows(new_rows, inserts, columns, spark_types)
                outputs.append(inserted_rows.select("*", *new_ids))
                changes.imply(lambda: inserted_rows, "insert")
        elif inserts is not None:
            outputs.append(_insert_rows(s, inserts, columns, spark_types).select("*", *new_ids))
        scanned = time.monotonic()

        adds = []
        if outputs:
            out = outputs[0]
            for more in outputs[1:]:
                out = out.unionByName(more)
            adds = write_files(out, txn.write_context(), preserve_row_ids=row_ids)
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


def _spark_types(snapshot: Snapshot) -> dict[str, Any]:
    # A Delta schemaString is Spark's StructType JSON.
    return {f.name: f.dataType for f in StructType.fromJson(orjson.loads(snapshot.metadata.schema_string)).fields}


def _insert_rows(rows: Any, inserts: Mapping[str, str], columns: Sequence[str], spark_types: Mapping[str, Any]) -> Any:
    return rows.select(
        *[(F.expr(inserts[c]) if c in inserts else F.lit(None)).cast(spark_types[c]).alias(c) for c in columns]
    )


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
