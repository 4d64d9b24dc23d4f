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
import logging
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
from pyspark.sql import Window
from pyspark.sql import functions as F

from txnlog import AddFile, OptimisticTransaction, Table
from txnlog.file_facts import num_records
from txnlog.optimize import OptimizeParameters, OptimizePlan, OptimizeResult, bits_per_column, curve_sorted_batches
from txnlog.optimize import optimize as run_optimize
from txnlog.spark.common import column, session_confs
from txnlog.spark.native import unsupported
from txnlog.spark.reader import read_files
from txnlog.spark.tasks import write_files

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

logger = logging.getLogger(__name__)

# The hidden columns of the curve's order (never a table column's name).
_KEY, _ID = "_txnlog_curve_key", "_txnlog_curve_id"
_SIGN = -(1 << 63)  # flips a key's top bit: the unsigned order of keys as Spark's signed one


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
        if plan.curve is not None:
            rows_per_file = _rows_per_file(plan)
            fallback = "no numRecords in the files' stats" if rows_per_file is None else unsupported(df, ctx, data_change=False)
            if fallback is None:
                assert rows_per_file is not None
                ordered = curve_ordered(df, plan.curve_columns, plan.curve, partition_columns)
                # The key's steps fused into one generated method are too large for the JVM to
                # compile (2x slower at 2M rows, measured): each operator is compiled apart instead.
                with session_confs(spark, {"spark.sql.codegen.wholeStage": "false"}):
                    return write_files(ordered, ctx, data_change=False, preserve_row_ids=plan.preserve_row_ids, rows_per_file=rows_per_file)
            logger.debug("OPTIMIZE of table %s sorts along its curve in Python tasks: %s", ctx.table_uri, fallback)
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


def _rows_per_file(plan: OptimizePlan) -> int | None:
    """Rows per output file of about the plan's target size, from the rewritten files' bytes per
    row (None when their stats do not count rows)."""
    files = plan.files
    rows, size = num_records(files), int(pc.sum(files.column("size")).as_py() or 0)
    if rows <= 0 or size <= 0:
        return None
    return max(1, math.ceil(rows * plan.target_size / size))


def curve_ordered(df: DataFrame, columns: Sequence[Sequence[str]], curve: str, partition_columns: Sequence[str]) -> DataFrame:
    """``df``'s rows, each table partition in one task, sorted there along ``curve`` over
    ``columns`` (logical paths) by Spark, as :func:`txnlog.optimize.curve_sorted` sorts them:
    each value's range id (its rank among the partition's rows, ties sharing the lowest, nulls
    last, scaled to ``2**bits`` equal-frequency ranges), combined into one key, rows of a cell in
    the order of the values. Windows and sorts spill, so a partition need not fit in memory."""
    bits = bits_per_column(len(columns))
    values = [_path(p) for p in columns]
    partitions = [column(c) for c in partition_columns]
    whole = Window.partitionBy(*partitions)
    rows = F.count(F.lit(1)).over(whole)
    ids = [F.floor(((F.rank().over(whole.orderBy(v.asc_nulls_last())).cast("long") - 1) * (1 << bits)) / rows).cast("long")
           for v in values]
    names = [f"{_ID}{i}" for i in range(len(ids))]
    table_columns = df.columns
    df = df.select("*", *[i.alias(n) for i, n in zip(ids, names)])
    if curve == "hilbert" and len(names) > 1:
        df, key = _hilbert(df, [*table_columns, *names], names, bits)
    else:  # Z-order; one column is plain order on either curve
        key = _interleaved([column(n) for n in names], bits)
    df = df.select(*[column(c) for c in table_columns], key.bitwiseXOR(F.lit(_SIGN)).alias(_KEY))
    return df.sortWithinPartitions(*partitions, column(_KEY), *values).drop(_KEY)


def _path(path: Sequence[str]) -> Column:
    value: Column = column(path[0])
    for name in path[1:]:
        value = value.getField(name)
    return value


def _interleaved(ids: Sequence[Column], bits: int) -> Column:
    """:func:`txnlog.optimize.curve.interleave` as a Spark expression."""
    key: Column = F.lit(0).cast("long")
    for bit in range(bits - 1, -1, -1):
        for value in ids:
            key = F.shiftleft(key, 1).bitwiseOR(F.shiftright(value, bit).bitwiseAND(F.lit(1)))
    return key


def _hilbert(df: DataFrame, columns: Sequence[str], names: Sequence[str], bits: int) -> tuple[DataFrame, Column]:
    """:func:`txnlog.optimize.curve.hilbert_key` as Spark expressions over the id columns
    ``names`` of ``df`` (whose columns are ``columns``: asking a Connect server is a round trip):
    each step a projection of its own (Spark keeps a projection whose non-trivial values are read
    twice), so the expressions stay linear in size."""
    n = len(names)

    def step(frame: DataFrame, updates: Mapping[str, Column]) -> DataFrame:
        return frame.select(*[updates[c].alias(c) if c in updates else column(c) for c in columns])

    q = 1 << (bits - 1)
    while q > 1:  # undo the excess work of the inverse transform
        p = F.lit(q - 1)
        shift = q.bit_length() - 1
        for i in range(n):
            x0, xi = column(names[0]), column(names[i])
            # Branch-free: is_set is all ones where bit q of xi is set, else zero.
            is_set = -F.shiftright(xi, shift).bitwiseAND(F.lit(1))
            swap = x0.bitwiseXOR(xi).bitwiseAND(p).bitwiseAND(is_set.bitwiseXOR(F.lit(-1)))
            updates = {names[0]: x0.bitwiseXOR(p.bitwiseAND(is_set).bitwiseOR(swap))}
            if i:
                updates[names[i]] = xi.bitwiseXOR(swap)
            df = step(df, updates)
        q >>= 1
    for i in range(1, n):  # Gray encode
        df = step(df, {names[i]: column(names[i]).bitwiseXOR(column(names[i - 1]))})
    t: Column = F.lit(0).cast("long")
    q = 1 << (bits - 1)
    last = column(names[n - 1])
    while q > 1:
        t = t.bitwiseXOR(F.lit(q - 1).bitwiseAND(-F.shiftright(last, q.bit_length() - 1).bitwiseAND(F.lit(1))))
        q >>= 1
    df = df.select("*", t.alias(f"{_ID}t"))
    return df, _interleaved([column(c).bitwiseXOR(column(f"{_ID}t")) for c in names], bits)


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
