"""OPTIMIZE over Arrow: compact the small files of each partition, and files whose deletion
vectors delete a large share of their rows, into files of the target size. Rows do not change
(a ``dataChange=false`` commit); on a table with row tracking every row keeps its row id and row
commit version, which is what lets a concurrent merge-on-read DML be rebased over the compaction
(txnlog.txn.rebase). :func:`plan_bins` is the plan Spark's OPTIMIZE follows too."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog import properties as props
from txnlog.dml.metrics import DmlResult, Metrics
from txnlog.errors import InvalidArgumentError
from txnlog.file_facts import parse_stats
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.txn import OptimisticTransaction


def compact(txn: OptimisticTransaction, predicate: str | None = None, *, min_files: int = 2) -> DmlResult:
    """Stage an OPTIMIZE in ``txn`` of the live files that may hold rows matching ``predicate``
    (all when None), planned by :func:`plan_bins` with the table's ``delta.targetFileSize`` and
    ``txnlog.optimize.maxDeletedRowsRatio``; the metrics it records (delta-spark's names)."""
    start = time.monotonic()
    snapshot = txn.snapshot
    if snapshot is None:
        return DmlResult({"numAddedFiles": 0, "numRemovedFiles": 0}, False)
    txn.operation_parameters.setdefault("predicate", orjson.dumps([predicate] if predicate else []).decode())
    txn.operation_parameters.setdefault("zOrderBy", "[]")
    # No read is recorded: the rows do not change, so only a concurrent remove of the files it
    # rewrites matters, which the remove of each one guards (as Spark's OPTIMIZE).
    files = snapshot.files(snapshot.predicate(predicate) if predicate else None)
    config = txn.table_configuration
    bins = plan_bins(files, config.target_file_size, min_files=min_files,
                     max_deleted_rows_ratio=config.table_property(props.OPTIMIZE_MAX_DELETED_ROWS_RATIO))
    if not bins:
        return DmlResult({"numAddedFiles": 0, "numRemovedFiles": 0}, False)
    tracking = config.row_tracking_enabled
    ctx = snapshot.read_context()
    schema = ctx.output_schema(None)
    if tracking:
        schema = schema.append(pa.field(ROW_ID, pa.int64(), nullable=False)).append(pa.field(ROW_COMMIT_VERSION, pa.int64(), nullable=False))
    added = []
    for group in bins:
        rows = ctx.batches(group, row_id=ROW_ID if tracking else None, row_commit_version=ROW_COMMIT_VERSION if tracking else None)
        added += txn.write(pa.RecordBatchReader.from_batches(schema, rows), data_change=False, preserve_row_ids=tracking)
    chosen = pa.concat_tables(bins)
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


def plan_bins(
    files: pa.Table,
    target_file_size: int,
    *,
    min_files: int = 2,
    max_deleted_rows_ratio: float = 0.05,
    purge_deletion_vectors: bool = False,
) -> list[pa.Table]:
    """Group ``files`` (rows of ``Snapshot.files()``) into bins worth compacting.

    Candidates are the files smaller than ``target_file_size`` and, whatever their size, those
    whose deletion vector deletes more than ``max_deleted_rows_ratio`` of their rows (its
    cardinality over ``numRecords``; a vector on a file without ``numRecords`` counts as more).
    With ``purge_deletion_vectors`` the candidates are exactly the files that have a vector.
    Within each partition, candidates are taken in size order and packed into bins whose total
    stays within the target; a bin is kept if it holds at least ``min_files`` files, or a file
    with a deletion vector (rewriting it drops the deleted rows).
    """
    if target_file_size <= 0:
        raise InvalidArgumentError(f"target_file_size must be positive, got {target_file_size}")
    if not 0.0 <= max_deleted_rows_ratio <= 1.0:
        raise InvalidArgumentError(f"max_deleted_rows_ratio must be between 0 and 1, got {max_deleted_rows_ratio}")
    if not files.num_rows:
        return []
    has_dv = _has_vector(files)
    if purge_deletion_vectors:
        chosen = has_dv
    else:
        small = pc.less(files.column("size"), target_file_size)
        chosen = pc.or_(small, pc.and_(has_dv, _deleted_ratio_over(files, max_deleted_rows_ratio)))
    candidates = files.filter(chosen)
    if not candidates.num_rows:
        return []
    sizes = candidates.column("size").to_pylist()
    with_dv = has_dv.filter(chosen).to_pylist()
    by_partition: dict[tuple[tuple[str, Any], ...], list[int]] = {}
    for i, key in enumerate(_partition_keys(candidates)):
        by_partition.setdefault(key, []).append(i)
    bins: list[list[int]] = []
    for key in sorted(by_partition, key=lambda k: [(n, "" if v is None else str(v)) for n, v in k]):
        current: list[int] = []
        total = 0
        for i in sorted(by_partition[key], key=lambda j: (sizes[j], j)):
            if current and total + sizes[i] > target_file_size:
                bins.append(current)
                current, total = [], 0
            current.append(i)
            total += sizes[i]
        if current:
            bins.append(current)
    kept = [b for b in bins if len(b) >= min_files or any(with_dv[i] for i in b)]
    return [candidates.take(pa.array(b, pa.int64())) for b in kept]


def _has_vector(files: pa.Table) -> pa.Array:
    if "deletion_vector" not in files.column_names:
        return pa.array([False] * files.num_rows, pa.bool_())
    return pc.is_valid(files.column("deletion_vector")).combine_chunks()


def _deleted_ratio_over(files: pa.Table, threshold: float) -> pa.Array:
    """Per file: does its deletion vector delete more than ``threshold`` of its rows? (True for
    a vector on a file whose ``numRecords`` is unknown; False without a vector.)"""
    if "deletion_vector" not in files.column_names:
        return pa.array([False] * files.num_rows, pa.bool_())
    deleted = pc.struct_field(files.column("deletion_vector").combine_chunks(), "cardinality")
    if "stats" in files.column_names:
        records = pc.struct_field(parse_stats(files, pa.struct([("numRecords", pa.int64())])), "numRecords")
    else:
        records = pa.nulls(files.num_rows, pa.int64())
    over = pc.greater(pc.divide(pc.cast(deleted, pa.float64()), pc.cast(records, pa.float64())), threshold)
    unknown = pc.or_kleene(pc.is_null(records), pc.less_equal(records, 0))
    return pc.fill_null(pc.and_(pc.is_valid(deleted), pc.or_(pc.fill_null(over, False), unknown)), False)


def _partition_keys(files: pa.Table) -> list[tuple[tuple[str, Any], ...]]:
    return [tuple(sorted((pv or {}).items())) for pv in files.column("partition_values").to_pylist(maps_as_pydicts="strict")]


__all__ = ["compact", "plan_bins"]
