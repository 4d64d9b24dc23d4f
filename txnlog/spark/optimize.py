"""OPTIMIZE on Spark: the core's plan (:mod:`txnlog.optimize`), executed by Spark.

The plan, the parameters recorded in ``commitInfo``, the predicate rule and the retry rule are
the core's, the same as ``Table.optimize``'s: small files of one partition are packed into bins
of about the target file size, and a conflicting commit makes it re-plan from the new snapshot,
up to ``max_attempts`` times. Here Spark executors read each bin and write it back as fewer,
larger files; the driver commits the removes and adds in one transaction whose file actions all
say ``dataChange=false``, so it runs at SnapshotIsolation and concurrent appends never fail it.

``predicate`` may name partition columns only (as Delta's ``OPTIMIZE ... WHERE``): keep
compaction on old partitions, away from the ones a stream is still writing.

Deletion vectors: a file whose vector deletes more than ``max_deleted_rows_ratio`` of its rows
(``txnlog.optimize.maxDeletedRowsRatio``, 0.05, as delta-spark's
``spark.databricks.delta.optimize.maxDeletedRowsRatio``) is rewritten without its deleted rows
whatever its size. ``purge_deletion_vectors=True`` (delta-spark's ``REORG TABLE ... APPLY
(PURGE)``, recorded as a ``REORG`` commit) rewrites every file that has a vector and nothing
else, leaving no vector in the table; the protocol keeps the ``deletionVectors`` feature.

Row tracking: compacted rows are written with their stable row ids and commit versions in the
table's materialized columns, so that ids survive the new files' new ``baseRowId``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from txnlog import AddFile, OptimisticTransaction, Table
from txnlog.optimize import OptimizeParameters, OptimizePlan, OptimizeResult, curve_sorted_batches
from txnlog.optimize import optimize as run_optimize
from txnlog.spark.common import column
from txnlog.spark.reader import read_files
from txnlog.spark.tasks import write_files


def _open(uri: str | Table, storage_options: Mapping[str, Any] | None) -> Table:
    if isinstance(uri, Table):
        return uri
    return Table(uri, storage_options)


def spark_executor(spark: Any) -> Any:
    """The executor of an :class:`OptimizePlan` on ``spark``: the plan's files read by Spark's
    reader (row ids with them when the plan keeps them), all rows of a partition in one task so
    that each comes back as files of about the target size, written by the tasks."""

    def execute(plan: OptimizePlan, txn: OptimisticTransaction) -> list[AddFile]:
        snapshot = txn.snapshot
        assert snapshot is not None  # the core plans only on a snapshot
        ctx = txn.write_context(target_file_size=plan.target_size)
        df = read_files(spark, snapshot, plan.files, with_row_ids=plan.preserve_row_ids)
        partition_columns = list(snapshot.partition_columns)
        bins = len(plan.bins)
        df = df.repartition(bins, *[column(c) for c in partition_columns]) if partition_columns else df.coalesce(bins)
        if plan.curve is not None:
            # Each task sorts its rows (its bin: a whole partition) along the plan's curve, in memory.
            # An explicit target size keeps the write on the Python tasks, which keep that order
            # (Spark's writer sorts a task's rows by the partition columns again).
            df = df.mapInArrow(functools.partial(curve_sorted_batches, columns=plan.curve_columns, curve=plan.curve), df.schema)
            return write_files(df, ctx, target_file_size=plan.target_size, data_change=False, preserve_row_ids=plan.preserve_row_ids)
        # Each task writes one bin, which the plan sized; ctx carries the target for the Python tasks.
        return write_files(df, ctx, data_change=False, preserve_row_ids=plan.preserve_row_ids)

    return execute


def optimize(
    spark: Any,
    uri: str | Table,
    predicate: str | None = None,
    target_file_size: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    min_files: int = 2,
    max_attempts: int = 5,
    max_deleted_rows_ratio: float | None = None,
    purge_deletion_vectors: bool = False,
    z_order_by: Sequence[str] = (),
) -> OptimizeResult:
    """Compact the small files of the partitions ``predicate`` selects (all when None), and
    rewrite the files whose deletion vector deletes more than ``max_deleted_rows_ratio`` of their
    rows (default: the table's ``txnlog.optimize.maxDeletedRowsRatio``, 0.05).

    ``purge_deletion_vectors=True`` rewrites every file with a deletion vector (and only those)
    so that none is left, as delta-spark's ``REORG TABLE ... APPLY (PURGE)``; the commit's
    operation is ``REORG``. ``z_order_by`` (an unclustered table): every file of each selected
    partition is rewritten in Z-order over these columns (delta-spark's ``OPTIMIZE ... ZORDER
    BY``). On a clustered table OPTIMIZE clusters incrementally along a Hilbert curve over its
    clustering columns (docs/maintenance.md). ``uri`` is a table URI or an open :class:`txnlog.Table`.
    ``target_file_size`` defaults to the table's ``delta.targetFileSize``. Returns an
    :class:`~txnlog.optimize.OptimizeResult`; raises the last ``CommitConflictError`` if every
    one of ``max_attempts`` plans lost to a conflicting commit.
    """
    table = _open(uri, storage_options)
    parameters = OptimizeParameters(
        predicate=predicate,
        target_size=target_file_size,
        min_files=min_files,
        max_deleted_rows_ratio=max_deleted_rows_ratio,
        purge_deletion_vectors=purge_deletion_vectors,
        z_order_by=tuple(z_order_by),
    )

    def begin(operation: str, params: Mapping[str, Any]) -> OptimisticTransaction:
        return table.transaction(operation, operation_parameters=params)

    return run_optimize(begin, parameters, spark_executor(spark), max_attempts=max_attempts)


__all__ = ["OptimizeResult", "optimize", "spark_executor"]
