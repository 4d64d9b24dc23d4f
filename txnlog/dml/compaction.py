"""OPTIMIZE over Arrow: compact the small files of each partition, and files with deletion
vectors, into files of the target size. Rows do not change (a ``dataChange=false`` commit); on a
table with row tracking every row keeps its row id and row commit version, which is what lets a
concurrent merge-on-read DML be rebased over the compaction (txnlog.txn.rebase)."""

from __future__ import annotations

import time

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.dml.operations import DmlResult, Metrics
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.txn import OptimisticTransaction


def compact(txn: OptimisticTransaction, predicate: str | None = None, *, min_files: int = 2) -> DmlResult:
    """Stage an OPTIMIZE in ``txn``: the live files matching ``predicate`` (all when None) are
    rewritten, partition by partition, where a partition has at least ``min_files`` files or a
    file has a deletion vector; the metrics it records (delta-spark's names)."""
    start = time.monotonic()
    snapshot = txn.snapshot
    if snapshot is None:
        return DmlResult({"numAddedFiles": 0, "numRemovedFiles": 0}, False)
    # No read is recorded: the rows do not change, so only a concurrent remove of the files it
    # rewrites matters, which the remove of each one guards (as Spark's OPTIMIZE).
    files = snapshot.files(snapshot.predicate(predicate) if predicate else None)
    txn.operation_parameters.setdefault("predicate", orjson.dumps([predicate] if predicate else []).decode())
    txn.operation_parameters.setdefault("zOrderBy", "[]")
    chosen = _worth_compacting(files, min_files)
    if not chosen.num_rows:
        return DmlResult({"numAddedFiles": 0, "numRemovedFiles": 0}, False)
    tracking = txn.table_configuration.row_tracking_enabled
    ctx = snapshot.read_context()
    added = []
    for group in _partitions(chosen):
        rows = ctx.batches(group, row_id=ROW_ID if tracking else None, row_commit_version=ROW_COMMIT_VERSION if tracking else None)
        schema = ctx.output_schema(None)
        if tracking:
            schema = schema.append(pa.field(ROW_ID, pa.int64(), nullable=False)).append(pa.field(ROW_COMMIT_VERSION, pa.int64(), nullable=False))
        added += txn.write(pa.RecordBatchReader.from_batches(schema, rows), data_change=False, preserve_row_ids=tracking)
    txn.remove_files(chosen, data_change=False)
    metrics: Metrics = {
        "numAddedFiles": len(added),
        "numRemovedFiles": chosen.num_rows,
        "numAddedBytes": sum(a.size for a in added),
        "numRemovedBytes": int(pc.sum(chosen.column("size")).as_py() or 0),
        "numDeletionVectorsRemoved": chosen.num_rows - chosen.column("deletion_vector").null_count,
        "executionTimeMs": int((time.monotonic() - start) * 1000),
    }
    txn.set_operation_metrics(**metrics)
    return DmlResult(metrics, True)


def _partition_keys(files: pa.Table) -> list[str]:
    return [orjson.dumps(sorted(v or [])).decode() for v in files.column("partition_values").to_pylist()]


def _worth_compacting(files: pa.Table, min_files: int) -> pa.Table:
    keys = _partition_keys(files)
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    with_vector = files.column("deletion_vector").is_valid().to_pylist()
    partitions = {key for key, n in counts.items() if n >= min_files} | {key for key, dv in zip(keys, with_vector, strict=True) if dv}
    return files.filter(pa.array([key in partitions for key in keys], pa.bool_()))


def _partitions(files: pa.Table) -> list[pa.Table]:
    keys = _partition_keys(files)
    order: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        order.setdefault(key, []).append(i)
    return [files.take(pa.array(indexes, pa.int64())) for indexes in order.values()]


__all__ = ["compact"]
