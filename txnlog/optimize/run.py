"""Carrying out an OPTIMIZE plan: staging it in a transaction (the files it read and removes,
the files it adds, its metrics), the Python executor, and the one retry rule both engines
follow.

A compaction changes no row, so redoing it is always safe: when a concurrent commit wins a
conflict (it deleted or rewrote a file being compacted, or changed the metadata), the plan is
thrown away and made again from the new snapshot, up to ``max_attempts`` times. Files written
by a discarded attempt stay for vacuum. Conflicts the commit resolves itself never reach this
loop: a concurrent append only costs the committer a retry (the commit runs at
SnapshotIsolation), and on a table with row tracking a concurrent deletion-vector DELETE of a
compacted file is carried onto the output by row id (``txnlog.txn.rebase``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from txnlog.errors import CommitConflictError, CommitFailedError, InvalidArgumentError
from txnlog.log.actions import AddFile
from txnlog.log.file_actions import FILES_SCHEMA, concat
from txnlog.optimize.curve import curve_sorted_batches
from txnlog.optimize.parameters import OptimizeParameters
from txnlog.optimize.plan import OptimizePlan, plan_optimize
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.txn import CommitResult, OptimisticTransaction

log = logging.getLogger(__name__)

#: Writes the plan's bins and returns the new files (``Snapshot.files()`` layout, or ``AddFile``
#: records), written for the transaction's table with ``dataChange=false`` and, when the plan
#: says so, row ids kept.
Executor = Callable[[OptimizePlan, OptimisticTransaction], "pa.Table | Sequence[AddFile]"]
#: Opens a transaction on the latest snapshot: (operation, operation parameters) -> transaction.
Begin = Callable[[str, Mapping[str, Any]], OptimisticTransaction]


@dataclass(frozen=True)
class OptimizeResult:
    """What one OPTIMIZE did. ``version`` is None when there was nothing to compact."""

    version: CommitResult | None
    files_removed: int = 0
    files_added: int = 0
    bytes_removed: int = 0
    partitions_optimized: int = 0
    #: plans made (1 + the number of conflicts that made it re-plan)
    attempts: int = 1
    #: the conflicts that made it re-plan, as their messages
    conflicts: tuple[str, ...] = field(default_factory=tuple)
    #: the commit's operationMetrics (empty when nothing was committed)
    metrics: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StagedOptimize:
    """One OPTIMIZE attempt staged in a transaction: its plan, the files it added and the
    metrics it records (empty when the plan had nothing to do and nothing was staged)."""

    plan: OptimizePlan
    added: pa.Table | Sequence[AddFile]
    metrics: Mapping[str, int]

    @property
    def changed(self) -> bool:
        return not self.plan.is_empty


def stage_optimize(
    txn: OptimisticTransaction,
    parameters: OptimizeParameters,
    execute: Executor | None = None,
    *,
    files: pa.Table | None = None,
) -> StagedOptimize:
    """One OPTIMIZE attempt in the open ``txn`` (the caller commits): planned on its snapshot
    (:func:`plan_optimize`; ``files`` as there), executed (by default :func:`rewrite_in_python`),
    and staged: the files it read (a concurrent DELETE of one is a delete/read conflict, as
    delta-spark's ``trackFilesRead``), their removes and the new files, all
    ``dataChange=false``, and the metrics."""
    started = time.monotonic()
    snapshot = txn.snapshot
    if snapshot is None:
        raise InvalidArgumentError(f"optimize {txn.uri}: the table does not exist yet")
    plan = plan_optimize(snapshot, parameters, files=files)
    if plan.is_empty:
        return StagedOptimize(plan, FILES_SCHEMA.empty_table(), {})
    if plan.clustering_columns:
        txn.operation_parameters.update(plan.commit_parameters())
    added = plan.mark((execute or rewrite_in_python)(plan, txn))
    inputs = plan.files
    txn.track_files_read(inputs)
    txn.remove_files(inputs, data_change=False)
    txn.add_files(added, data_change=False)
    sizes = added.column("size").to_pylist() if isinstance(added, pa.Table) else [a.size for a in added]
    metrics = plan.metrics(sizes, int((time.monotonic() - started) * 1000))
    txn.set_operation_metrics(**metrics)
    return StagedOptimize(plan, added, metrics)


def rewrite_in_python(plan: OptimizePlan, txn: OptimisticTransaction) -> pa.Table:
    """The Python executor: each bin read through the snapshot's reader (row ids with it when the
    plan keeps them), sorted along the plan's curve when it has one, and written as files of the
    plan's target size, up to
    ``max_concurrent_tasks`` bins at once (Arrow's reader and writer release the GIL)."""
    snapshot = txn.snapshot
    if snapshot is None:
        raise InvalidArgumentError(f"optimize {txn.uri}: the table does not exist yet")
    # Refused before any data file is written, as every write of a transaction is.
    txn.table_configuration.check_writable(f"table {txn.uri}")
    ctx = snapshot.read_context()
    writer = txn.write_context(target_file_size=plan.target_size)
    store = txn.location.store
    schema = ctx.output_schema(None)
    tracking = plan.preserve_row_ids
    if tracking:
        schema = schema.append(pa.field(ROW_ID, pa.int64(), nullable=False)).append(pa.field(ROW_COMMIT_VERSION, pa.int64(), nullable=False))

    def rewrite(group: pa.Table) -> pa.Table:
        rows = ctx.batches(group, store=store, row_id=ROW_ID if tracking else None, row_commit_version=ROW_COMMIT_VERSION if tracking else None)
        if plan.curve is not None:  # the whole bin in memory, in curve order, so that each file covers a small box
            rows = curve_sorted_batches(rows, plan.curve_columns, plan.curve)
        written = writer.write(pa.RecordBatchReader.from_batches(schema, rows), data_change=False, store=store, preserve_row_ids=tracking)
        return written.files

    tasks = plan.parameters.max_concurrent_tasks or os.cpu_count() or 1
    if tasks == 1 or len(plan.bins) == 1:
        outputs = [rewrite(group) for group in plan.bins]
    else:
        with ThreadPoolExecutor(min(tasks, len(plan.bins))) as pool:
            outputs = list(pool.map(rewrite, plan.bins))
    return concat(outputs, FILES_SCHEMA)


def optimize(
    begin: Begin,
    parameters: OptimizeParameters,
    execute: Executor | None = None,
    *,
    max_attempts: int = 5,
) -> OptimizeResult:
    """Run ``parameters`` to a commit: each attempt opens a transaction on the latest snapshot
    (``begin``), stages the OPTIMIZE (:func:`stage_optimize`, rewritten by ``execute``) and
    commits; on a conflict it re-plans from the new snapshot, up to ``max_attempts`` plans (then
    the last CommitConflictError is raised)."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise InvalidArgumentError(f"max_attempts must be at least 1, got {max_attempts!r}")
    conflicts: list[str] = []
    for attempt in range(1, max_attempts + 1):
        started = time.monotonic()
        txn = begin(parameters.operation, parameters.commit_parameters())
        try:
            staged = stage_optimize(txn, parameters, execute)
            if not staged.changed:
                txn.abort()
                log.info("optimize %s at version %d: nothing to compact", txn.uri, staged.plan.version)
                return OptimizeResult(None, attempts=attempt, conflicts=tuple(conflicts))
            version = txn.commit()
        except CommitConflictError as conflict:
            txn.abort()
            conflicts.append(str(conflict))
            log.warning("optimize %s: attempt %d lost to %s; re-planning from the new snapshot", txn.uri, attempt, conflict)
            if attempt == max_attempts:
                raise
            continue
        except BaseException:
            txn.abort()
            raise
        metrics = staged.metrics
        log.info("optimize %s: version %d, %d files -> %d in %.1fs", txn.uri, version, metrics["numRemovedFiles"],
                 metrics["numAddedFiles"], time.monotonic() - started)
        return OptimizeResult(
            version,
            files_removed=metrics["numRemovedFiles"],
            files_added=metrics["numAddedFiles"],
            bytes_removed=metrics["numRemovedBytes"],
            partitions_optimized=staged.plan.partitions,
            attempts=attempt,
            conflicts=tuple(conflicts),
            metrics=metrics,
        )
    raise CommitFailedError(f"optimize: no attempt left after {max_attempts}", attempts=max_attempts)  # pragma: no cover - the loop returns or raises


__all__ = ["Begin", "Executor", "OptimizeResult", "StagedOptimize", "optimize", "rewrite_in_python", "stage_optimize"]
