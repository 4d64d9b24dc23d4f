"""Spark's executor of DELETE and UPDATE plans (:class:`txnlog.dml.RowChangePlan`).

The plan decides (which rows, deletion vectors or copy-on-write, row ids, change data); here
Spark finds and rewrites the rows. Files whose partition values decide a DELETE are removed
whole. With deletion vectors, the changed rows' positions are found (on the driver, with the
Python executor's own row finder, when the plan is portable and its columns small; else by one
Spark job) and marked; an UPDATE writes the new row versions. Copy-on-write rewrites each file
holding a changed row on the executors. The transaction's owner records the metrics returned.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from txnlog import OptimisticTransaction, Snapshot
from txnlog.dml import FileCounts, RowChangeMetrics, RowChangePlan, Timing, files_table, find_rows, live_rows
from txnlog.errors import InvalidArgumentError
from txnlog.log import FILES_SCHEMA
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.change_data import ChangeRows
from txnlog.spark.common import SPARK_FAILURES, column, in_utc, job_error
from txnlog.spark.conform import conformed, either, spark_types
from txnlog.spark.driver import fits_driver
from txnlog.spark.reader import FILE_COLUMN, ROW_INDEX_COLUMN, read_files
from txnlog.spark.tasks import write_files
from txnlog.write import RowKind, WriteContext

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class StagedRows:
    """What a Spark DELETE or UPDATE staged: ``removed`` and ``added`` are the file entries
    staged as removes and adds (with deletion vectors: the same files with their grown vectors;
    copy-on-write: the rewritten copies and new row versions)."""

    removed: pa.Table
    added: pa.Table
    metrics: RowChangeMetrics
    new_files: pa.Table | None = None  # new data files staged besides (an UPDATE's new row versions)


def _ms(start: float, end: float | None = None) -> int:
    return int(((time.monotonic() if end is None else end) - start) * 1000)


def _matches(plan: RowChangePlan) -> Column:
    return F.coalesce(F.expr(plan.predicate), F.lit(False))


def _candidates(txn: OptimisticTransaction, plan: RowChangePlan, files: pa.Table | None) -> pa.Table:
    """The files that may hold a changed row, the read recorded; of ``files`` (the live files
    as the transaction sees them so far) when given."""
    candidates = txn.filter_files(plan.condition)
    return plan.condition.filter(files) if files is not None else candidates


def _snapshot(txn: OptimisticTransaction) -> Snapshot:
    if txn.snapshot is None:
        raise InvalidArgumentError(f"table {txn.uri} does not exist yet")
    return txn.snapshot


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _in_utc(run: Callable[Concatenate[SparkSession, _P], _R]) -> Callable[Concatenate[SparkSession, _P], _R]:
    """``run`` with its session reading timestamps in UTC, as txnlog's own SQL reads them (its
    file skipping first of all): the rows a condition chooses never depend on which files
    skipping kept, nor on the session's zone."""

    @functools.wraps(run)
    def in_utc_session(spark: SparkSession, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with in_utc(spark):
            return run(spark, *args, **kwargs)

    return in_utc_session


@_in_utc
def run_delete(
    spark: SparkSession,
    txn: OptimisticTransaction,
    plan: RowChangePlan,
    *,
    ctx: WriteContext | None = None,
    files: pa.Table | None = None,
    changes: ChangeRows | None = None,
) -> StagedRows:
    """Stage the DELETE ``plan`` in ``txn``, recording the read. ``files``: the live files as the
    transaction sees them so far (the snapshot's, by default). ``changes``: where the commit's
    change rows go (the deleted rows); without it, they are written here."""
    start = time.monotonic()
    snapshot = _snapshot(txn)
    empty = FILES_SCHEMA.empty_table()
    own_changes = changes is None
    changes = changes if changes is not None else ChangeRows(spark, txn)
    candidates = _candidates(txn, plan, files)

    def done(removed: pa.Table, added: pa.Table, counts: FileCounts, deleted: int | None, copied: int | None, scanned: float) -> StagedRows:
        written = changes.stage(ctx) if own_changes else 0
        metrics = RowChangeMetrics("DELETE", counts, deleted, copied, copied, written, Timing(_ms(start, scanned), _ms(scanned), _ms(start)))
        return StagedRows(removed, added, metrics)

    if candidates.num_rows == 0:
        return done(candidates, empty, FileCounts(), 0, 0, time.monotonic())
    if plan.partition_only:
        txn.remove_files(candidates)
        changes.imply_files(candidates, "delete")
        return done(candidates, empty, FileCounts.rewrite(candidates, empty), live_rows(candidates), 0, time.monotonic())
    matches = _matches(plan)
    if plan.deletion_vectors:
        hit, positions = rows_to_mark(spark, snapshot, candidates, plan)
        scanned = time.monotonic()
        deletes = txn.delete_rows(hit, positions)
        # Readers could tell these rows from the grown vectors (delta-spark writes no cdc file
        # here), but a reader that takes the protocol's rule literally would read the re-added
        # file's other rows as deleted and inserted: cdc files are exact for every reader, and
        # the Python DML writes them too.
        changes.require(lambda: read_files(spark, snapshot, hit).filter(matches), "delete")
        return done(deletes.removed, deletes.added, FileCounts.vectors_of(deletes), sum(len(p) for p in positions), 0, scanned)
    hit, deleted = matching_files(spark, snapshot, candidates, matches)
    scanned = time.monotonic()
    if hit.num_rows == 0:
        return done(hit, empty, FileCounts(), 0, 0, scanned)
    spec = plan.conform
    tracking = spec.row_ids is not None
    source = read_files(spark, snapshot, hit, with_row_ids=tracking)
    kept = source.filter(~matches).select(*_rows(spec, RowKind.COPY, source))
    added = files_table(write_files(kept, ctx or txn.write_context(), preserve_row_ids=tracking))
    txn.add_files(added)
    txn.remove_files(hit)
    changes.require(lambda: read_files(spark, snapshot, hit).filter(matches), "delete")
    return done(hit, added, FileCounts.rewrite(hit, added), deleted, live_rows(added), scanned)


@_in_utc
def run_update(spark: SparkSession, txn: OptimisticTransaction, plan: RowChangePlan, *, files: pa.Table | None = None,
               changes: ChangeRows) -> StagedRows:
    """Stage the UPDATE ``plan`` in ``txn``, recording the read: with deletion vectors, the old
    rows are marked deleted and only their new versions are written; copy-on-write rewrites
    each file holding a matching row. The pre- and post-images go to ``changes``."""
    start = time.monotonic()
    snapshot = _snapshot(txn)
    candidates = _candidates(txn, plan, files)
    matches = _matches(plan)
    if plan.deletion_vectors:
        hit, positions = rows_to_mark(spark, snapshot, candidates, plan)
    else:
        hit, matched = matching_files(spark, snapshot, candidates, matches) if candidates.num_rows else (candidates, 0)
    scanned = time.monotonic()
    empty = FILES_SCHEMA.empty_table()
    if hit.num_rows == 0:
        return StagedRows(empty, empty, RowChangeMetrics("UPDATE", copied_rows=0, timing=Timing(_ms(start), 0, _ms(start))))
    spec = plan.conform
    tracking = spec.row_ids is not None
    source = read_files(spark, snapshot, hit, with_row_ids=tracking)
    types = spark_types(spec)
    previous = (column(ROW_ID), column(ROW_COMMIT_VERSION)) if tracking else None
    table_columns = {c.name: column(c.name) for c in spec.columns}
    new_values = {**table_columns, **{c: F.expr(e.sql) for c, e in plan.assignments.items()}}
    updated = conformed(spec, RowKind.UPDATE, new_values, previous=previous, types=types)
    new_rows = source.filter(matches).select(*[c.alias(n) for n, c in updated.items()])
    changes.require(lambda: source.filter(matches), "update_preimage")
    changes.require(lambda: new_rows, "update_postimage")
    ctx = txn.write_context()
    if plan.deletion_vectors:  # only the new versions of the updated rows
        adds = write_files(new_rows, ctx, preserve_row_ids=tracking)
        txn.add_files(adds)
        deletes = txn.delete_rows(hit, positions)
        added = files_table(adds)
        metrics = RowChangeMetrics("UPDATE", FileCounts.vectors_of(deletes, adds), sum(len(p) for p in positions), 0, live_rows(added),
                                   timing=Timing(_ms(start, scanned), _ms(scanned), _ms(start)))
        return StagedRows(deletes.removed, deletes.added, metrics, added)
    copied = conformed(spec, RowKind.COPY, table_columns, previous=previous, types=types)
    rewritten = source.select(*either(matches, updated, copied))
    txn.remove_files(hit)
    adds = write_files(rewritten, ctx, preserve_row_ids=tracking)
    txn.add_files(adds)
    added = files_table(adds)
    written = live_rows(added)  # every live row of a rewritten file is written again
    metrics = RowChangeMetrics("UPDATE", FileCounts.rewrite(hit, adds), matched, written - matched if written is not None else None, written,
                               timing=Timing(_ms(start, scanned), _ms(scanned), _ms(start)))
    return StagedRows(hit, added, metrics)


def _rows(spec: Any, kind: RowKind, source: DataFrame) -> list[Column]:
    """``source``'s rows (the table's columns, and their ids) as rows of ``kind``."""
    tracking = spec.row_ids is not None
    previous = (column(ROW_ID), column(ROW_COMMIT_VERSION)) if tracking else None
    values = {c.name: column(c.name) for c in spec.columns}
    return [c.alias(n) for n, c in conformed(spec, kind, values, previous=previous).items()]


def rows_to_mark(spark: SparkSession, snapshot: Snapshot, candidates: pa.Table, plan: RowChangePlan) -> tuple[pa.Table, list[pa.Array]]:
    """The files of ``candidates`` holding a row ``plan`` changes, and each one's physical
    positions of those rows (int64): what a DELETE or UPDATE marks in deletion vectors. Found on
    the driver by the Python executor's row finder when the plan is portable and the columns it
    reads of the candidates are small (:mod:`txnlog.spark.driver`), else by one Spark job."""
    if candidates.num_rows == 0:
        return candidates, []
    if fits_driver(spark, candidates, len(plan.columns_read), of=len(snapshot.schema)) and plan.portable:
        found = find_rows(snapshot.read_context(), candidates, plan.condition)
        hit = [i for i, positions in enumerate(found) if len(positions)]
        return candidates.take(pa.array(hit, pa.int64())), [found[i] for i in hit]
    return matching_positions(spark, snapshot, candidates, _matches(plan))


def matching_positions(spark: SparkSession, snapshot: Snapshot, candidates: pa.Table, condition: Column) -> tuple[pa.Table, list[pa.Array]]:
    """The files of ``candidates`` holding a row on which ``condition`` is TRUE, and for each of
    them the physical positions of those rows (int64). One Spark job; only the positions, one
    array per file, come back to the driver."""
    rows = read_files(spark, snapshot, candidates, with_file_column=True, with_row_index=True).filter(condition)
    grouped = rows.groupBy(FILE_COLUMN).agg(F.collect_list(ROW_INDEX_COLUMN).alias("rows"))
    try:
        found = grouped.toArrow()
    except SPARK_FAILURES as e:
        raise job_error(e, f"the Spark job finding the rows to change in table {snapshot.uri}") from e
    return positions_of(candidates, found.column(FILE_COLUMN), found.column("rows"))


def positions_of(candidates: pa.Table, paths: pa.ChunkedArray | pa.Array, rows: pa.ChunkedArray | pa.Array) -> tuple[pa.Table, list[pa.Array]]:
    """``candidates`` narrowed to ``paths`` (in that order) and each file's positions out of the
    list column ``rows``."""
    index = {p: i for i, p in enumerate(candidates.column("path").to_pylist())}
    order = pa.array([index[p] for p in paths.to_pylist()], pa.int64())
    lists = rows.combine_chunks() if isinstance(rows, pa.ChunkedArray) else rows
    positions = [lists[i].values for i in range(len(lists))]
    return candidates.take(order), positions


def matching_files(spark: SparkSession, snapshot: Snapshot, candidates: pa.Table, condition: Column) -> tuple[pa.Table, int]:
    """The files of ``candidates`` holding a row on which ``condition`` is TRUE, and how many
    such rows there are. One Spark job; one row per file comes back."""
    rows = read_files(spark, snapshot, candidates, with_file_column=True).filter(condition)
    try:
        counts = rows.groupBy(FILE_COLUMN).count().collect()
    except SPARK_FAILURES as e:
        raise job_error(e, f"the Spark job finding the rows to change in table {snapshot.uri}") from e
    touched = sorted(r[0] for r in counts)
    hit = candidates.filter(pc.is_in(candidates.column("path"), pa.array(touched, pa.string())))
    return hit, sum(int(r[1]) for r in counts)


class SparkRemoval:
    """The write planner's :class:`~txnlog.dml.RowRemoval` on Spark: a replaceWhere's DELETE
    plan run by :func:`run_delete`, the change rows kept as DataFrames until the commit."""

    def __init__(self, spark: SparkSession, txn: OptimisticTransaction, ctx: WriteContext | None = None) -> None:
        self.spark = spark
        self.ctx = ctx
        self.changes = ChangeRows(spark, txn)

    def delete(self, txn: OptimisticTransaction, plan: RowChangePlan) -> RowChangeMetrics:
        return run_delete(self.spark, txn, plan, ctx=self.ctx, changes=self.changes).metrics

    def imply(self, txn: OptimisticTransaction, files: pa.Table, change_type: str) -> None:
        self.changes.imply_files(files, change_type)

    def finish(self, txn: OptimisticTransaction) -> int:
        with in_utc(self.spark):  # Spark Connect analyses the deleted rows' change rows only now
            return self.changes.stage(self.ctx)


__all__ = ["SparkRemoval", "StagedRows", "matching_files", "matching_positions", "positions_of", "rows_to_mark", "run_delete", "run_update"]
