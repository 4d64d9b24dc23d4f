"""MERGE INTO on Spark: merge-on-read where the table enables deletion vectors, else
copy-on-write.

How it runs (the driver handles file lists, row positions and a few aggregates; rows only for a
small statement, within the bound of :mod:`txnlog.spark.driver`: a small source's keys, the
matching target rows, and the other rows of small copy-on-write files):

0. a small source of a portable plan (:meth:`txnlog.dml.MergePlan.portable`: its clauses compute
   as Spark computes them), into files whose columns read are small, is collected, and the
   Python executor (``txnlog.dml.run_merge``, the code of ``Table.merge``) runs the whole plan
   on the driver; otherwise, for clause lists beyond the keyword form's (conditional updates
   and inserts, several clauses of a kind, by-source clauses), :func:`_run_clauses` runs them
   all on the executors (each row takes the first clause of its kind whose condition holds);
   for the keyword form's:
1. the source is persisted for the duration (a streaming micro-batch may not be re-readable);
   a source of few rows sends its key columns to the driver, a larger one gives its row count
   and the min/max of each key column in one aggregate;
2. the target's files are pruned to those whose stats overlap the source's key range; the
   transaction records that range as its read predicate and exactly those files as read, so a
   concurrent commit that adds matching rows or removes one of them is a conflict. With the
   keys on the driver, only the files whose own bounds hold one of them are scanned;
3. when the candidates' key columns are small (:mod:`txnlog.spark.driver`), the driver reads
   them and finds the matching target rows with the core's key matcher
   (:class:`txnlog.dml.KeyMatcher`), and, when the ON condition is key equalities and the
   clauses are unconditional, every pair: Spark then makes the updates and inserts in one
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

The plan (:class:`txnlog.dml.MergePlan`) decides the clauses, the columns read, deletion vectors
or copy-on-write, the row ids (through the conform step, :mod:`txnlog.spark.conform`) and the
commit's parameters; this module only runs it. Conditions are Spark SQL over two aliases: ``t``
(the target) and ``s`` (the source), e.g. ``on="t.id = s.id"``, ``when_matched_update={"amount": "t.amount + s.amount"}``,
``when_matched_delete="s.deleted"``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from txnlog import AddFile, CommitResult, OptimisticTransaction, Snapshot, Table
from txnlog.dml import (
    SOURCE_ROW,
    ClauseSpec,
    FileCounts,
    KeyMatcher,
    MergeAliases,
    MergeBuilder,
    MergeClause,
    MergeMetrics,
    MergePlan,
    Timing,
    evolve_schema,
    files_table,
    live_rows,
    merge_candidates,
)
from txnlog.dml import run_merge as run_on_driver
from txnlog.errors import InvalidArgumentError, SchemaError
from txnlog.read import READ_THREADS, ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.change_data import ChangeRows
from txnlog.spark.common import SPARK_FAILURES, SparkJobError, analysed_lazily, arrow_schema_of_struct, in_utc, job_error, quote_column
from txnlog.spark.conform import conformed, conformed_columns, either, spark_types
from txnlog.spark.driver import MAX_SOURCE_KEYS, collect_keys, driver_scan_cells, fits_driver, matching_target_rows
from txnlog.spark.reader import FILE_COLUMN as READER_FILE_COLUMN
from txnlog.spark.reader import ROW_INDEX_COLUMN, read_files
from txnlog.spark.row_changes import positions_of
from txnlog.spark.tasks import write_files
from txnlog.write import RowKind

log = logging.getLogger(__name__)

FILE_COLUMN = "__txnlog_file"
SOURCE_ROW_COLUMN = SOURCE_ROW  # the key matcher's name for a source row's number
_TOUCHED = "__txnlog_touched"  # a matched target row this MERGE updates or deletes
_CHOSEN = "__txnlog_clause"  # the index of the clause a row takes among those of its kind (-1: none)
_DELETED = "__txnlog_deleted"
_TARGET_ROW_ID = "__txnlog_row_id"
_POSITION = "__txnlog_position"


def _open(uri: str | Table, storage_options: Mapping[str, Any] | None) -> Table:
    return uri if isinstance(uri, Table) else Table(uri, storage_options)


def plan_merge(
    txn: OptimisticTransaction,
    source_df: Any,
    on: str | Sequence[str],
    *,
    when_matched_update: Mapping[str, str] | str | None = None,
    when_matched_delete: bool | str = False,
    when_not_matched_insert: Mapping[str, str] | str | None = None,
    schema_mode: str | None = None,
) -> MergePlan:
    """The plan of a MERGE of ``source_df`` into ``txn``'s table (its clauses are Spark SQL:
    txnlog's parser need not read them). ``schema_mode="merge"``: a ``"*"`` clause adds the
    source's new columns to the table in ``txn`` (see :func:`merge`)."""
    snapshot = txn.snapshot
    if snapshot is None:
        raise InvalidArgumentError(f"merge into {txn.uri}: the table does not exist yet")
    evolving = _evolves(txn, source_df, schema_mode, [when_matched_update, when_not_matched_insert])
    return MergePlan.of(snapshot, list(source_df.columns), on, when_matched_update=when_matched_update, when_matched_delete=when_matched_delete,
                        when_not_matched_insert=when_not_matched_insert, config=txn.table_configuration, strict=False,
                        schema_evolution=evolving)


def _evolves(txn: OptimisticTransaction, source_df: Any, schema_mode: str | None, assignments: Sequence[object]) -> bool:
    """Whether the MERGE evolves the schema; if so, with a ``"*"`` clause among
    ``assignments``, the source's new columns are staged in ``txn`` (``txnlog.dml.evolve_schema``)."""
    if schema_mode not in (None, "merge"):
        raise InvalidArgumentError(f"merge: schema_mode must be None or 'merge', got {schema_mode!r}")
    if schema_mode is None:
        return False
    if any(isinstance(a, str) for a in assignments):
        evolve_schema(txn, arrow_schema_of_struct(source_df.schema))
    return True


def merge_into(txn: OptimisticTransaction, spark: Any, source_df: Any, on: str | Sequence[str], **clauses: Any) -> MergeMetrics:
    """Plan (``clauses``: those of :func:`plan_merge`) and stage a MERGE of ``source_df`` into
    ``txn``'s table. Nothing is committed nor recorded: the caller commits, possibly with more
    actions such as a streaming batch's app transaction, and records the metrics returned."""
    return run_merge(txn, spark, source_df, plan_merge(txn, source_df, on, **clauses))


def _clause(plan: MergePlan, when: str, action: str) -> MergeClause | None:
    return next((c for c in plan.clauses if c.when == when and c.action == action), None)


def run_merge(txn: OptimisticTransaction, spark: Any, source_df: Any, plan: MergePlan) -> MergeMetrics:
    """Stage ``plan`` with ``source_df`` in ``txn``: on the driver when small and portable,
    else in Spark; what it did. Its conditions and values read timestamps in UTC, as txnlog's
    SQL reads them, where the session analyses a DataFrame when it is made (``source_df``,
    made before, keeps its zone); over Spark Connect, which analyses the source with them,
    they take the session's zone."""
    with contextlib.nullcontext() if analysed_lazily(source_df) else in_utc(spark):
        return _run_merge(txn, spark, source_df, plan)


def _run_merge(txn: OptimisticTransaction, spark: Any, source_df: Any, plan: MergePlan) -> MergeMetrics:
    snapshot = txn.snapshot
    if snapshot is None:
        raise InvalidArgumentError(f"merge into {txn.uri}: the table does not exist yet")
    if not plan.keyword_form:
        # Conditional updates and inserts, several clauses of a kind, by-source clauses: the
        # Python executor runs them on the driver when they are small and it may; else every
        # clause list runs here, on the executors.
        small = _merge_on_driver(txn, spark, source_df, plan)
        return small if small is not None else _run_clauses(txn, spark, source_df, plan)
    columns = list(plan.target_columns)
    update_clause = _clause(plan, "matched", "update")
    delete_clause = _clause(plan, "matched", "delete")
    insert_clause = _clause(plan, "not_matched", "insert")
    updates = {c: e.sql for c, e in (update_clause.assignments or {}).items()} if update_clause is not None else None
    inserts = {c: e.sql for c, e in (insert_clause.assignments or {}).items()} if insert_clause is not None else None
    delete_condition = delete_clause.condition.sql if delete_clause is not None and delete_clause.condition is not None else None
    matched_clause = plan.matched_clause
    spec = plan.conform
    types = spark_types(spec)
    row_ids = spec.row_ids is not None
    changes = ChangeRows(spark, txn)
    # Columns this MERGE adds to the table (schema evolution): the snapshot's files lack them.
    existing = {f.name.lower() for f in snapshot.schema}
    added = {c: types[c] for c in columns if c.lower() not in existing}

    started = time.monotonic()
    whole = _merge_on_driver(txn, spark, source_df, plan)
    if whole is not None:
        return whole
    source = source_df.withColumn(SOURCE_ROW_COLUMN, F.monotonically_increasing_id()).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [source]
    try:
        source_keys = [source_key for _, source_key in plan.pairs]
        # A source of few rows: its keys come to the driver (one job instead of an aggregate),
        # where they prune the target file by file and, when small, find the matching rows.
        collected = collect_keys(source, source_keys, [SOURCE_ROW_COLUMN], MAX_SOURCE_KEYS, f"the Spark job reading the merge source's keys for table {txn.uri}")
        keyed = None
        if collected is not None:
            source_rows = collected.num_rows
            keyed = plan.keyed(collected)
            unique_keys = keyed.group_by(list(dict.fromkeys(source_keys))).aggregate([]).num_rows == keyed.num_rows
        else:
            source_rows, unique_keys, bounds = _summary(source, plan)
        if source_rows == 0:
            return MergeMetrics()
        matcher = KeyMatcher(plan, keyed, snapshot.schema) if keyed is not None and plan.keys_compare_exactly(snapshot.schema, keyed.schema) else None
        if matcher is not None:
            # The range is what the transaction records as read (so conflicts are what they
            # were); of its files, only those whose bounds hold one of the source's keys are
            # scanned (a few new keys past the end no longer make every file a candidate).
            candidates = merge_candidates(snapshot, matcher.keyed, plan.pairs, txn=txn)
        else:
            if keyed is not None:
                bounds = plan.key_bounds(keyed)
            candidates = _in_key_range(txn, plan, bounds)
        log.info("merge into %s: %d source rows, %d of %d files may match", txn.uri, source_rows, candidates.num_rows, snapshot.num_files)

        s = source.alias("s")
        merge_on_read = plan.deletion_vectors
        outputs = []
        copy_on_driver: pa.Table | None = None
        driver_pairs: pa.Table | None = None
        hit = candidates.slice(0, 0)
        positions: list[pa.Array] = []
        updated_rows = deleted_rows = 0
        if candidates.num_rows:
            needed = [c for c in plan.columns_changed() if c not in added]
            on_driver = (
                matcher is not None
                and not any(pa.types.is_nested(f.type) for f in snapshot.schema if f.name in needed)
                and fits_driver(spark, candidates, len(needed) + (2 if row_ids else 0), of=len(columns))
            )
            # With the ON condition made of key equalities alone and unconditional clauses, the
            # driver finds every (target row, source row) pair itself; Spark then only computes
            # the new rows, in one pass over the source with the pairs broadcast.
            exact = on_driver and not plan.condition.residual and delete_condition is None
            if on_driver:
                assert matcher is not None
                # The target rows some source key matches, read on the driver (the key columns
                # and what the clauses read): the join below then works on those rows only.
                target_rows = matching_target_rows(
                    snapshot, candidates, needed, matcher, file_column=FILE_COLUMN, row_index_column=ROW_INDEX_COLUMN, with_row_ids=row_ids,
                    pairs=exact, refuse_duplicates=matched_clause and not unique_keys,
                )
                if exact:
                    driver_pairs = target_rows
                target = _with_added(_frame(spark, target_rows, types), added).alias("t")
            else:
                # Not cached: each pass reads only the columns it needs, and the matched pairs
                # (few, and all that both passes need of the join) are cached instead.
                target = _read_tagged(spark, snapshot, candidates, with_row_ids=row_ids, added=added).alias("t")
            if delete_clause is not None and delete_condition is None:
                deleted = F.lit(True)
            elif delete_condition is not None:
                deleted = F.coalesce(F.expr(delete_condition), F.lit(False))
            else:
                deleted = F.lit(False)
            touched = deleted | F.lit(updates is not None)
            cells = []
            if updates is not None:
                cells = [
                    (F.expr(updates[c]) if c in updates else F.col(f"t.{quote_column(c)}")).cast(types[c]).alias(_cell(i))
                    for i, c in enumerate(columns)
                ]
            keys = [F.col(f"t.{quote_column(t)}").alias(_key(i)) for i, (t, _) in enumerate(plan.pairs)]
            if row_ids and updates is not None:
                cells.append(F.col(f"t.{ROW_ID}").alias(_TARGET_ROW_ID))
            old_cells = []
            if changes.enabled and matched_clause:  # the pre-images and deleted rows of the change data
                old_cells = [F.col(f"t.{quote_column(c)}").cast(types[c]).alias(_old(i)) for i, c in enumerate(columns)]
            if driver_pairs is not None:
                joined = s.join(F.broadcast(target), F.col(f"s.{SOURCE_ROW_COLUMN}") == F.col(f"t.{SOURCE_ROW_COLUMN}"), "left")
                paired = joined.where(F.col(f"t.{FILE_COLUMN}").isNotNull())
            else:
                paired = target.join(s, F.expr(plan.condition.sql), "inner")
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
                deleted_rows = driver_pairs.num_rows if delete_clause is not None else 0
                updated_rows = driver_pairs.num_rows - deleted_rows
            elif matched_clause:
                paths, lists, updated_rows, deleted_rows = _touched_rows(plan, matched, check_duplicates=not unique_keys)
                hit, positions = positions_of(candidates, paths, lists)
            # The updated and the inserted rows in one pass over the source joined with the pairs
            # (an insert reading only ``s.`` columns, as "*" does, is unambiguous on that join).
            single_pass = driver_pairs is not None and (insert_clause is None or _source_only(insert_clause))
            if single_pass:
                outputs.append(_new_rows(joined, plan, types, updates, inserts))
            updated = matched.where(F.col(_TOUCHED) & ~F.col(_DELETED))
            if updates is not None and hit.num_rows:
                new_values = {c: F.col(_cell(i)) for i, c in enumerate(columns)}
                if not single_pass:
                    previous = (F.col(_TARGET_ROW_ID), F.lit(None)) if row_ids else None
                    outputs.append(updated.select(*conformed_columns(spec, RowKind.UPDATE, new_values, previous=previous, types=types)))
                changes.require(lambda: updated.select(*[F.col(_old(i)).alias(c) for i, c in enumerate(columns)]), "update_preimage")
                changes.require(lambda: updated.select(*[F.col(_cell(i)).alias(c) for i, c in enumerate(columns)]), "update_postimage")
            if delete_clause is not None and hit.num_rows:
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
                kept = _read_tagged(spark, snapshot, hit, with_row_ids=row_ids, added=added).join(changed, on=[FILE_COLUMN, ROW_INDEX_COLUMN], how="left_anti")
                previous = (F.col(ROW_ID), F.col(ROW_COMMIT_VERSION)) if row_ids else None
                values = {c: F.col(quote_column(c)) for c in columns}
                outputs.append(kept.select(*conformed_columns(spec, RowKind.COPY, values, previous=previous, types=types)))
            if inserts is not None:
                if driver_pairs is not None:
                    new_rows = joined.where(F.col(f"t.{FILE_COLUMN}").isNull()).select("s.*").alias("s")
                else:
                    new_rows = s.join(matched.select(SOURCE_ROW_COLUMN), on=SOURCE_ROW_COLUMN, how="left_anti").alias("s")
                inserted_rows = new_rows.select(*_inserted(plan, inserts, types))
                if not single_pass:
                    outputs.append(inserted_rows)
                changes.imply(lambda: inserted_rows, "insert")
        elif inserts is not None:
            outputs.append(s.select(*_inserted(plan, inserts, types)))
        scanned = time.monotonic()

        copy = None
        if copy_on_driver is not None:
            assert driver_pairs is not None
            copy = partial(_copy_rows, txn, snapshot, spec, copy_on_driver, driver_pairs, row_ids)
        counts = _Counts(source_rows, candidates.num_rows, updated_rows, deleted_rows)
        return _stage(txn, plan, changes, outputs, hit, positions, counts, (started, scanned), copy_on_driver=copy)
    finally:
        for frame in cached:
            frame.unpersist()


def _in_key_range(txn: OptimisticTransaction, plan: MergePlan, bounds: Mapping[str, tuple[Any, Any]]) -> pa.Table:
    """The files of ``txn``'s snapshot whose stats overlap the source's key range (``bounds``:
    each source key's min and max), recorded as what the transaction reads."""
    assert txn.snapshot is not None
    if any(lo is None for lo, _ in bounds.values()):
        # A key column that is null in every source row: nothing can match.
        return txn.snapshot.files().slice(0, 0)
    predicate = plan.key_range(bounds)
    return txn.filter_files(predicate) if predicate is not None else txn.read_whole_table()


def _first_clause(clauses: Sequence[MergeClause]) -> Any:
    """Per row, the index of the first of ``clauses`` whose condition is TRUE (-1: none), as
    Delta applies a MERGE's clauses of one kind."""
    chosen = None
    for k, clause in enumerate(clauses):
        holds = F.lit(True) if clause.condition is None else F.expr(clause.condition.sql)
        chosen = F.when(holds, F.lit(k)) if chosen is None else chosen.when(holds, F.lit(k))
    return F.lit(-1) if chosen is None else chosen.otherwise(F.lit(-1))


def _values_chosen(clauses: Sequence[MergeClause], chosen: Any, columns: Sequence[str], types: Mapping[str, Any]) -> list[Any]:
    """Per target column (cells :func:`_cell`), the value the update clause ``chosen`` assigns,
    else the target row's own."""
    cells = []
    for i, c in enumerate(columns):
        old = F.col(f"t.{quote_column(c)}").cast(types[c])
        value = None
        for k, clause in enumerate(clauses):
            if clause.action != "update" or c not in (clause.assignments or {}):
                continue
            new = F.expr((clause.assignments or {})[c].sql).cast(types[c])
            value = F.when(chosen == k, new) if value is None else value.when(chosen == k, new)
        cells.append((old if value is None else value.otherwise(old)).alias(_cell(i)))
    return cells


def _updates(clauses: Sequence[MergeClause]) -> bool:
    return any(c.action == "update" for c in clauses)


def _collect_positions(found: dict[str, list[pa.Array]], paths: pa.Array, lists: pa.Array) -> None:
    """Add each file's changed positions (``lists[i]`` of file ``paths[i]``) to ``found``."""
    for i, path in enumerate(paths.to_pylist()):
        found.setdefault(path, []).append(lists[i].values.cast(pa.int64()))


def _changed_rows(plan: MergePlan, clauses: Sequence[MergeClause], changes: ChangeRows, rows: Any, types: Mapping[str, Any],
                  outputs: list[Any]) -> None:
    """From target rows one kind of ``clauses`` changes (``rows``: tagged with :data:`_TOUCHED`
    and :data:`_DELETED`, their new values in cells :func:`_cell` when a clause updates, their
    id in :data:`_TARGET_ROW_ID` and old values in :func:`_old` as needed): the updated rows'
    new versions into ``outputs``, and the change data."""
    columns = list(plan.target_columns)
    updated = rows.where(F.col(_TOUCHED) & ~F.col(_DELETED))
    previous = (F.col(_TARGET_ROW_ID), F.lit(None)) if plan.conform.row_ids is not None else None
    new_values = {c: F.col(_cell(i)) for i, c in enumerate(columns)}
    if _updates(clauses):
        outputs.append(updated.select(*conformed_columns(plan.conform, RowKind.UPDATE, new_values, previous=previous, types=types)))
        changes.require(lambda: updated.select(*[F.col(_old(i)).alias(c) for i, c in enumerate(columns)]), "update_preimage")
        changes.require(lambda: updated.select(*[F.col(_cell(i)).alias(c) for i, c in enumerate(columns)]), "update_postimage")
    if any(c.action == "delete" for c in clauses):
        removed = rows.where(F.col(_DELETED))
        changes.require(lambda: removed.select(*[F.col(_old(i)).alias(c) for i, c in enumerate(columns)]), "delete")


def _insert_rows(fresh: Any, plan: MergePlan, inserts: Sequence[MergeClause], types: Mapping[str, Any], changes: ChangeRows,
                 outputs: list[Any]) -> None:
    """Source rows no target row matched (``fresh``, aliased ``s``), each inserted by the first
    insert clause that holds: the rows into ``outputs``, and the change data."""
    chosen = F.col(f"s.{_CHOSEN}")
    rows = fresh.withColumn(_CHOSEN, _first_clause(inserts)).alias("s").where(chosen >= 0)
    each = [conformed(plan.conform, RowKind.INSERT, {c: F.expr(e.sql) for c, e in (clause.assignments or {}).items()}, types=types)
            for clause in inserts]
    values = []
    for name in each[0]:
        value = F.when(chosen == 0, each[0][name])
        for k, more in enumerate(each[1:], start=1):
            value = value.when(chosen == k, more[name])
        values.append(value.alias(name))
    inserted = rows.select(*values)
    outputs.append(inserted)
    changes.imply(lambda: inserted, "insert")


def _run_clauses(txn: OptimisticTransaction, spark: Any, source_df: Any, plan: MergePlan) -> MergeMetrics:
    """Any clause list, run by the executors: the matched pairs (the target's candidate files
    joined with the source on ON) take the first matched clause that holds, the source rows
    no pair holds the first insert clause, and the target rows no pair holds (every file is
    read) the first by-source clause. The driver gets, per changed file, the positions of its
    changed rows, and the row counts; no row."""
    snapshot = txn.snapshot
    assert snapshot is not None
    columns = list(plan.target_columns)
    spec = plan.conform
    types = spark_types(spec)
    row_ids = spec.row_ids is not None
    changes = ChangeRows(spark, txn)
    matched_clauses = plan.clauses_when("matched")
    inserts = plan.clauses_when("not_matched")
    by_source = plan.clauses_when("not_matched_by_source")
    started = time.monotonic()
    source = source_df.withColumn(SOURCE_ROW_COLUMN, F.monotonically_increasing_id()).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [source]
    try:
        source_rows, unique_keys, bounds = _summary(source, plan)
        if source_rows == 0 and not by_source:
            return MergeMetrics()
        # A target row no source row matches may change: then every file is read.
        candidates = txn.read_whole_table() if by_source else _in_key_range(txn, plan, bounds)
        log.info("merge into %s in Spark: %d source rows, %d of %d files read", txn.uri, source_rows, candidates.num_rows, snapshot.num_files)
        s = source.alias("s")
        outputs: list[Any] = []
        found: dict[str, list[pa.Array]] = {}
        updated = deleted = by_source_updated = by_source_deleted = 0
        hit = candidates.slice(0, 0)
        positions: list[pa.Array] = []
        if not candidates.num_rows:
            if inserts:
                _insert_rows(s, plan, inserts, types, changes, outputs)
        else:
            target = _read_tagged(spark, snapshot, candidates, with_row_ids=row_ids).alias("t")
            # 1. The matched pairs, each with the matched clause it takes and its new values.
            chosen = F.col(_CHOSEN)  # computed once per row, then read by every cell
            deletes = [k for k, c in enumerate(matched_clauses) if c.action == "delete"]
            keys = [F.col(f"t.{quote_column(t)}").alias(_key(i)) for i, (t, _) in enumerate(plan.pairs)]
            extra = []
            if row_ids:
                extra.append(F.col(f"t.{ROW_ID}").alias(_TARGET_ROW_ID))
            if changes.enabled and matched_clauses:
                extra += [F.col(f"t.{quote_column(c)}").cast(types[c]).alias(_old(i)) for i, c in enumerate(columns)]
            pairs = target.join(s, F.expr(plan.condition.sql), "inner").withColumn(_CHOSEN, _first_clause(matched_clauses))
            matched = pairs.select(
                F.col(f"t.{FILE_COLUMN}").alias(FILE_COLUMN),
                F.col(f"t.{ROW_INDEX_COLUMN}").alias(ROW_INDEX_COLUMN),
                F.col(f"s.{SOURCE_ROW_COLUMN}").alias(SOURCE_ROW_COLUMN),
                chosen,
                (chosen >= 0).alias(_TOUCHED),
                chosen.isin(deletes).alias(_DELETED) if deletes else F.lit(False).alias(_DELETED),
                *keys,
                *(_values_chosen(matched_clauses, chosen, columns, types) if _updates(matched_clauses) else []),
                *extra,
            ).persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(matched)
            if matched_clauses:
                paths, lists, updated, deleted = _touched_rows(plan, matched, check_duplicates=not unique_keys)
                _collect_positions(found, paths, lists)
                _changed_rows(plan, matched_clauses, changes, matched, types, outputs)
            # 2. The target rows no source row matched, each with the by-source clause it takes.
            if by_source:
                alone = target.join(matched.select(FILE_COLUMN, ROW_INDEX_COLUMN), on=[FILE_COLUMN, ROW_INDEX_COLUMN], how="left_anti").alias("t")
                alone = alone.withColumn(_CHOSEN, _first_clause(by_source)).alias("t")
                deletes = [k for k, c in enumerate(by_source) if c.action == "delete"]
                extra = [F.col(f"t.{ROW_ID}").alias(_TARGET_ROW_ID)] if row_ids else []
                if changes.enabled:
                    extra += [F.col(f"t.{quote_column(c)}").cast(types[c]).alias(_old(i)) for i, c in enumerate(columns)]
                lonely = alone.select(
                    F.col(FILE_COLUMN), F.col(ROW_INDEX_COLUMN), chosen, F.lit(True).alias(_TOUCHED),
                    chosen.isin(deletes).alias(_DELETED) if deletes else F.lit(False).alias(_DELETED),
                    *(_values_chosen(by_source, chosen, columns, types) if _updates(by_source) else []), *extra,
                ).where(F.col(_CHOSEN) >= 0).persist(StorageLevel.MEMORY_AND_DISK)
                cached.append(lonely)
                paths, lists, by_source_updated, by_source_deleted = _touched_rows(plan, lonely, check_duplicates=False)
                _collect_positions(found, paths, lists)
                _changed_rows(plan, by_source, changes, lonely, types, outputs)
            # 3. The source rows no target row matched, each with the insert clause it takes.
            if inserts:
                fresh = s.join(matched.select(SOURCE_ROW_COLUMN), on=SOURCE_ROW_COLUMN, how="left_anti").alias("s")
                _insert_rows(fresh, plan, inserts, types, changes, outputs)
            if found:
                at = {p: i for i, p in enumerate(candidates.column("path").to_pylist())}
                hit = candidates.take(pa.array([at[p] for p in found], pa.int64()))
                positions = [pa.concat_arrays(parts) for parts in found.values()]
                if not plan.deletion_vectors:  # copy-on-write: every other live row of a changed file is written again
                    changed = matched.where(F.col(_TOUCHED)).select(FILE_COLUMN, ROW_INDEX_COLUMN)
                    if by_source:
                        changed = changed.unionByName(lonely.select(FILE_COLUMN, ROW_INDEX_COLUMN))
                    kept = _read_tagged(spark, snapshot, hit, with_row_ids=row_ids).join(changed, on=[FILE_COLUMN, ROW_INDEX_COLUMN], how="left_anti")
                    previous = (F.col(ROW_ID), F.col(ROW_COMMIT_VERSION)) if row_ids else None
                    outputs.append(kept.select(*conformed_columns(spec, RowKind.COPY, {c: F.col(quote_column(c)) for c in columns},
                                                                  previous=previous, types=types)))
        counts = _Counts(source_rows, candidates.num_rows, updated, deleted, by_source_updated, by_source_deleted)
        return _stage(txn, plan, changes, outputs, hit, positions, counts, (started, time.monotonic()))
    finally:
        for frame in cached:
            frame.unpersist()


@dataclass(frozen=True)
class _Counts:
    """What a MERGE counted while it ran in Spark, for its metrics."""

    source_rows: int
    files_scanned: int
    updated: int = 0
    deleted: int = 0
    by_source_updated: int = 0
    by_source_deleted: int = 0


def _stage(
    txn: OptimisticTransaction, plan: MergePlan, changes: ChangeRows, outputs: list[Any], hit: pa.Table, positions: list[pa.Array],
    counts: _Counts, times: tuple[float, float], *, copy_on_driver: Callable[[], list[AddFile]] | None = None,
) -> MergeMetrics:
    """Write ``outputs`` (DataFrames of conformed rows) on the executors, and stage them with
    the changed rows (``positions`` of ``hit``'s files: marked in deletion vectors, or their
    files rewritten with ``outputs`` holding the other rows) and the change data; the metrics.
    ``copy_on_driver`` writes more files on the driver meanwhile."""
    row_ids = plan.conform.row_ids is not None
    adds: list[AddFile] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        copied_files = pool.submit(copy_on_driver) if copy_on_driver is not None else None
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
    changed = counts.updated + counts.deleted + counts.by_source_updated + counts.by_source_deleted
    if plan.deletion_vectors:
        # Exactly the rows the ON condition matched are marked only when every matched row
        # changes and no row is changed for lacking a match; else a concurrent deletion in these
        # files conflicts.
        exact = plan.every_match_changes and not plan.by_source
        deletes = txn.delete_rows(hit, positions, exact=exact) if hit.num_rows else None
        files = FileCounts.vectors_of(deletes, adds) if deletes is not None else FileCounts.rewrite(added.slice(0, 0), adds)
        copied: int | None = 0
    else:
        if hit.num_rows:
            txn.remove_files(hit)
        files = FileCounts.rewrite(hit, adds)
        before = live_rows(hit)
        copied = before - changed if before is not None else None
    updated = counts.updated + counts.by_source_updated
    inserted = written - updated - copied if written is not None and copied is not None else None
    started, scanned = times
    timing = Timing(int((scanned - started) * 1000), int((time.monotonic() - scanned) * 1000), int((time.monotonic() - started) * 1000))
    return MergeMetrics(counts.source_rows, counts.files_scanned, files, change_files, inserted, counts.updated, counts.deleted, copied,
                        counts.by_source_updated, counts.by_source_deleted, timing=timing)


def _merge_on_driver(txn: OptimisticTransaction, spark: Any, source_df: Any, plan: MergePlan) -> MergeMetrics | None:
    """The whole MERGE run by the Python executor on the driver, as ``Table.merge`` runs it:
    when the source and the columns read of the files its keys may match fit the driver's bound,
    and the plan is portable (:meth:`~txnlog.dml.MergePlan.portable`: txnlog computes what Spark
    would). None, with nothing staged, when not: then Spark does the work (the source, read
    here, is read again)."""
    snapshot = txn.snapshot
    assert snapshot is not None
    source_columns = list(source_df.columns)
    limit = min(MAX_SOURCE_KEYS, driver_scan_cells(spark) // max(len(source_columns), 1))
    if limit <= 0:
        return None
    try:
        declared = arrow_schema_of_struct(source_df.schema)
    except SchemaError:  # a type Arrow cannot hold: Spark merges
        return None
    if not plan.portable(declared):
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
    if rows is None or not plan.portable(rows.schema):
        return None
    # A by-source clause may change any row: every file is read.
    candidates = snapshot.files() if plan.by_source else merge_candidates(snapshot, plan.keyed(rows), plan.pairs)
    columns = list(plan.target_columns)
    read = len(plan.columns_changed()) if plan.deletion_vectors else len(columns)  # copy-on-write rewrites a changed file whole
    if not fits_driver(spark, candidates, read + (2 if plan.conform.row_ids is not None else 0), of=len(columns)):
        return None
    log.info("merge into %s on the driver: %d source rows, %d of %d files may match", txn.uri, rows.num_rows, candidates.num_rows, snapshot.num_files)
    return run_on_driver(txn, plan, rows)


#: In Spark's error when a job's results exceed ``spark.driver.maxResultSize``.
_RESULT_TOO_LARGE = "spark.driver.maxResultSize"


def _summary(source: Any, plan: MergePlan) -> tuple[int, bool, dict[str, tuple[Any, Any]]]:
    """For a source too large to collect: its row count, whether its non-null keys are unique,
    and each key column's min and max; one aggregate."""
    key_columns = [F.col(quote_column(source_key)) for _, source_key in plan.pairs]
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
    bounds = {s: (summary[f"lo{i}"], summary[f"hi{i}"]) for i, (_, s) in enumerate(plan.pairs)}
    return int(summary["n"]), int(summary["keyed"]) == int(summary["distinct_keys"]), bounds


def _frame(spark: Any, rows: pa.Table, types: Mapping[str, Any]) -> Any:
    """``rows`` (table columns and the tags) as a DataFrame with the types a scan would give."""
    fields = []
    for f in rows.schema:
        if f.name in types:
            fields.append(StructField(f.name, types[f.name], True))
        else:
            fields.append(StructField(f.name, StringType() if f.name == FILE_COLUMN else LongType(), True))
    return spark.createDataFrame(rows, schema=StructType(fields))


def _source_only(clause: MergeClause) -> bool:
    """Whether every value of ``clause`` reads ``s.``-qualified columns only (as ``"*"`` does)."""
    for expression in (clause.assignments or {}).values():
        if expression.tree is None or any(len(r.path) < 2 or r.path[0].lower() != "s" for r in expression.tree.references()):
            return False
    return True


def _inserted(plan: MergePlan, inserts: Mapping[str, str], types: Mapping[str, Any]) -> list[Any]:
    """An insert clause's rows: the columns it assigns supplied, the others filled."""
    return conformed_columns(plan.conform, RowKind.INSERT, {c: F.expr(e) for c, e in inserts.items()}, types=types)


def _copy_rows(txn: OptimisticTransaction, snapshot: Snapshot, spec: Any, files: pa.Table, pairs: pa.Table, row_ids: bool) -> list[AddFile]:
    """Write, on the driver, the live rows of ``files`` other than the changed ones (``pairs``'
    file paths and positions), as copied rows (keeping their stable ids under row tracking)."""
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
            yield from spec.conform(rows, RowKind.COPY).to_batches()

    return list(txn.write_context().write(pa.RecordBatchReader.from_batches(spec.output_schema, kept()), preserve_row_ids=row_ids).add_files)


def _new_rows(joined: Any, plan: MergePlan, types: Mapping[str, Any], updates: Mapping[str, str] | None, inserts: Mapping[str, str] | None) -> Any:
    """From the source left-joined with the driver's pairs (``t``): each matched row's new
    version (when ``updates``) and each unmatched source row's insert (when ``inserts``)."""
    is_matched = F.col(f"t.{FILE_COLUMN}").isNotNull()
    keep = F.lit(False)
    if updates is not None:
        keep = keep | is_matched
    if inserts is not None:
        keep = keep | ~is_matched
    spec = plan.conform
    previous = (F.col(f"t.{ROW_ID}"), F.lit(None)) if spec.row_ids is not None else None
    new_values = {c: F.expr(updates[c]) if c in updates else F.col(f"t.{quote_column(c)}") for c in plan.target_columns} if updates is not None else {}
    updated = conformed(spec, RowKind.UPDATE, new_values, previous=previous if previous is not None else None, types=types)
    inserted = conformed(spec, RowKind.INSERT, {c: F.expr(e) for c, e in (inserts or {}).items()}, types=types)
    return joined.where(keep).select(*either(is_matched, updated, inserted))


def _cell(i: int) -> str:
    """The column of a matched row's new value of target column ``i`` (``_old``: its old value,
    ``_key``: key ``i``)."""
    return f"__txnlog_c{i}"


def _old(i: int) -> str:
    return _cell(i).replace("_c", "_o")


def _key(i: int) -> str:
    return _cell(i).replace("_c", "_k")


def _touched_rows(plan: MergePlan, matched: Any, *, check_duplicates: bool) -> tuple[pa.Array, pa.Array, int, int]:
    """From the matched (target row, source row) pairs: the files holding a row the MERGE
    changes, the physical positions of those rows (a list per file), and how many rows are
    updated and deleted. With ``check_duplicates``, raises the plan's DuplicateMatchError if a
    target row is matched by more than one source row. One Spark job; one row per file comes back."""
    names = [_key(i) for i in range(len(plan.pairs))]
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
        raise job_error(e, f"the Spark job matching the merge source with table {plan.table_uri}") from e
    if check_duplicates and per_file.num_rows:
        worst = int(pc.index(per_file.column("n"), pc.max(per_file.column("n"))).as_py())
        n = int(per_file.column("n")[worst].as_py())
        if n > 1:
            found = per_file.column("key")[worst].as_py()
            key = {t: found[_key(i)] for i, (t, _) in enumerate(plan.pairs)}
            raise plan.duplicate_match(key, n, per_file.column(FILE_COLUMN)[worst].as_py())
    changed_files = pc.greater(pc.list_value_length(per_file.column("rows")), 0)
    kept = per_file.filter(changed_files)
    return (
        kept.column(FILE_COLUMN).combine_chunks(),
        kept.column("rows").combine_chunks(),
        int(pc.sum(per_file.column("updated")).as_py() or 0),
        int(pc.sum(per_file.column("deleted")).as_py() or 0),
    )


def _read_tagged(spark: Any, snapshot: Snapshot, files: pa.Table, *, with_row_ids: bool = False, added: Mapping[str, Any] | None = None) -> Any:
    """The rows of ``files`` (deletion vectors applied) with the file's log path in FILE_COLUMN
    and each row's physical position in ROW_INDEX_COLUMN (and, ``with_row_ids``, its stable id
    and commit version); ``added``: columns the MERGE adds to the table (name -> Spark type),
    NULL in every existing row."""
    rows = read_files(spark, snapshot, files, with_file_column=True, with_row_index=True, with_row_ids=with_row_ids)
    return _with_added(rows.withColumnRenamed(READER_FILE_COLUMN, FILE_COLUMN), added or {})


def _with_added(rows: Any, added: Mapping[str, Any]) -> Any:
    """``rows`` of the target with each column a schema-evolving MERGE adds, as NULL."""
    for name, kind in added.items():
        rows = rows.withColumn(name, F.lit(None).cast(kind))
    return rows


def merge(
    spark: Any,
    uri: str | Table,
    source_df: Any,
    on: str | Sequence[str] = "key",
    when_matched_update: Mapping[str, str] | str | None = None,
    when_matched_delete: bool | str = False,
    when_not_matched_insert: Mapping[str, str] | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    source_alias: str = "s",
    target_alias: str = "t",
    isolation: str | None = None,
    schema_mode: str | None = None,
) -> Any:
    """MERGE ``source_df`` into the table at ``uri`` (a URI or an open :class:`txnlog.Table`).

    ``on``: a key column, a list of them (same names on both sides), or a Spark SQL condition
    over ``t`` and ``s`` (or ``target_alias`` and ``source_alias``) with at least one
    ``t.x = s.y``. Without clause keywords it returns a :class:`txnlog.dml.MergeBuilder` with
    ``Table.merge``'s clauses (``when_matched_update(updates, predicate=None)``, ...,
    ``when_not_matched_by_source_delete(predicate=None)``) and ``execute()``, which commits and
    returns the new version, or None when nothing changed. Any clause list runs on Spark's
    executors, or on the driver when the source and the files read fit its bound. The keyword
    form: ``when_matched_update``: a dict of
    target column -> expression, or ``"*"`` for every column from the source;
    ``when_matched_delete``: True, or a condition that picks the matched rows to delete;
    ``when_not_matched_insert``: a dict or ``"*"``. Conflicts raise ``txnlog.errors``
    ``CommitConflictError`` subclasses, ambiguous matches ``DuplicateMatchError``.
    ``schema_mode="merge"`` evolves the schema as ``Table.merge`` does (delta-spark's
    ``schema.autoMerge.enabled``): a ``"*"`` clause adds the source's new columns.
    """
    table = _open(uri, storage_options)
    aliases = MergeAliases(target_alias, source_alias)
    condition = aliases.on(on)

    def run(specs: list[ClauseSpec]) -> CommitResult | None:
        with table.transaction("MERGE", isolation) as txn:
            snapshot = txn.snapshot
            if snapshot is None:
                raise InvalidArgumentError(f"merge into {txn.uri}: the table does not exist yet")
            evolving = _evolves(txn, source_df, schema_mode, [spec.assignments for spec in specs])
            plan = MergePlan.build(snapshot, list(source_df.columns), condition, specs, config=txn.table_configuration, strict=False,
                                   schema_evolution=evolving)
            metrics = run_merge(txn, spark, source_df, plan)
            if not metrics.changed:
                txn.abort()
                return None
            txn.operation_parameters.update(plan.parameters)
            txn.set_operation_metrics(**metrics.operation_metrics())
        return txn.result

    builder: MergeBuilder[CommitResult | None] = MergeBuilder(run, aliases)
    if not builder.add_keyword_clauses(when_matched_update, when_matched_delete, when_not_matched_insert):
        return builder
    return builder.execute()


__all__ = ["MergeMetrics", "MergePlan", "merge", "merge_into", "plan_merge", "run_merge"]
