"""OPTIMIZE on Spark: bin-packing compaction committed with ``dataChange=false``.

Small files of one partition are packed into bins of about the target file size; Spark
executors read each bin and write it back as fewer, larger files; the driver commits the
removes and adds in one transaction whose file actions all say ``dataChange=false``, so it runs
at SnapshotIsolation and concurrent appends never fail it.

Compaction changes no row, so redoing it is always safe: when a concurrent commit wins a
conflict (it deleted or rewrote a file being compacted, or changed the metadata), the plan is
thrown away and made again from the new snapshot, up to ``max_attempts`` times. Files written by
a discarded attempt stay for vacuum.

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

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from txnlog import CommitResult, OptimisticTransaction, Snapshot, Table, WriteContext
from txnlog import properties as props
from txnlog.dml import plan_bins
from txnlog.errors import CommitConflictError, CommitFailedError, InvalidArgumentError, InvalidPredicateError
from txnlog.spark.common import column
from txnlog.spark.reader import read_files
from txnlog.spark.tasks import write_files

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OptimizeResult:
    """What one ``optimize`` call did. ``version`` is None when there was nothing to compact."""

    version: CommitResult | None
    files_removed: int = 0
    files_added: int = 0
    bytes_removed: int = 0
    partitions_optimized: int = 0
    #: plans made (1 + the number of conflicts that made it re-plan)
    attempts: int = 1
    #: the conflicts that made it re-plan, as their messages
    conflicts: tuple[str, ...] = field(default_factory=tuple)


def _check_predicate(snapshot: Snapshot, predicate: str | None) -> None:
    if predicate is None:
        return
    parsed = snapshot.predicate(predicate)
    if not parsed.matches_partition_only():
        others = sorted(parsed.columns - set(parsed.partition_columns))
        raise InvalidPredicateError(
            f"optimize predicate {predicate!r} on {snapshot.uri} may name partition columns only "
            f"({list(snapshot.partition_columns) or 'the table is not partitioned'}); it names {others}",
            predicate=predicate,
        )


def _open(uri: str | Table, storage_options: Mapping[str, Any] | None) -> Table:
    if isinstance(uri, Table):
        return uri
    return Table(uri, storage_options)


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
) -> OptimizeResult:
    """Compact the small files of the partitions ``predicate`` selects (all when None), and
    rewrite the files whose deletion vector deletes more than ``max_deleted_rows_ratio`` of their
    rows (default: the table's ``txnlog.optimize.maxDeletedRowsRatio``, 0.05).

    ``purge_deletion_vectors=True`` rewrites every file with a deletion vector (and only those)
    so that none is left, as delta-spark's ``REORG TABLE ... APPLY (PURGE)``; the commit's
    operation is ``REORG``. ``uri`` is a table URI or an open :class:`txnlog.Table`.
    ``target_file_size`` defaults to the table's ``delta.targetFileSize``. Returns an
    :class:`OptimizeResult`; raises the last ``CommitConflictError`` if every one of
    ``max_attempts`` plans lost to a conflicting commit.
    """
    if max_attempts < 1:
        raise InvalidArgumentError(f"max_attempts must be at least 1, got {max_attempts}")
    table = _open(uri, storage_options)
    conflicts: list[str] = []
    for attempt in range(1, max_attempts + 1):
        snapshot = table.snapshot()
        _check_predicate(snapshot, predicate)
        target = target_file_size if target_file_size is not None else snapshot.table_configuration.target_file_size
        ratio = max_deleted_rows_ratio if max_deleted_rows_ratio is not None else props.OPTIMIZE_MAX_DELETED_ROWS_RATIO.get(snapshot.configuration)
        bins = plan_bins(
            snapshot.files(predicate),
            target,
            min_files=min_files,
            max_deleted_rows_ratio=ratio,
            purge_deletion_vectors=purge_deletion_vectors,
        )
        if not bins:
            log.info("optimize %s at version %d: nothing to compact", table.uri, snapshot.version)
            return OptimizeResult(None, attempts=attempt, conflicts=tuple(conflicts))
        inputs = pa.concat_tables(bins)
        started = time.monotonic()
        txn = OptimisticTransaction(
            table.location,
            snapshot,
            operation="REORG" if purge_deletion_vectors else "OPTIMIZE",
            operation_parameters=(
                {"predicate": [predicate] if predicate else [], "applyPurge": True}
                if purge_deletion_vectors
                else {"predicate": [predicate] if predicate else [], "targetFileSize": target}
            ),
            hooks=table.hooks,
            on_commit=None,
        )
        try:
            ctx = WriteContext.for_snapshot(snapshot, storage_options=table.storage_options, target_file_size=target)
            # Under row tracking, every row keeps its stable id and commit version.
            row_ids = snapshot.table_configuration.row_ids_preserved
            df = read_files(spark, snapshot, inputs, with_row_ids=row_ids)
            # All rows of a partition in one task, so each comes back as files of about the
            # target size (not one file per input task).
            partition_columns = list(snapshot.partition_columns)
            df = df.repartition(len(bins), *[column(c) for c in partition_columns]) if partition_columns else df.coalesce(len(bins))
            adds = write_files(df, ctx, target_file_size=target, data_change=False, preserve_row_ids=row_ids)
            txn.remove_files(inputs, data_change=False)
            txn.add_files(adds, data_change=False)
            txn.set_operation_metrics(
                numRemovedFiles=inputs.num_rows,
                numAddedFiles=len(adds),
                numRemovedBytes=int(pc.sum(inputs.column("size")).as_py() or 0),
                numAddedBytes=sum(a.size for a in adds),
                numBins=len(bins),
                numDeletionVectorsRemoved=inputs.num_rows - inputs.column("deletion_vector").null_count,
            )
            version = txn.commit()
        except CommitConflictError as conflict:
            txn.abort()
            conflicts.append(str(conflict))
            log.warning(
                "optimize %s: attempt %d lost to %s; re-planning from the new snapshot",
                table.uri,
                attempt,
                conflict,
            )
            if attempt == max_attempts:
                raise
            continue
        except BaseException:
            txn.abort()
            raise
        partitions = {str(b.column("partition_values")[0].as_py()) for b in bins}
        log.info(
            "optimize %s: version %d, %d files -> %d in %.1fs",
            table.uri,
            version,
            inputs.num_rows,
            len(adds),
            time.monotonic() - started,
        )
        return OptimizeResult(
            version,
            files_removed=inputs.num_rows,
            files_added=len(adds),
            bytes_removed=int(pc.sum(inputs.column("size")).as_py() or 0),
            partitions_optimized=len(partitions),
            attempts=attempt,
            conflicts=tuple(conflicts),
        )
    raise CommitFailedError(f"optimize {table.uri}: no attempt left", attempts=max_attempts)  # pragma: no cover - loop returns or raises


__all__ = ["OptimizeResult", "optimize", "plan_bins"]

