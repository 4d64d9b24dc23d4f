"""The bin plan: which files an OPTIMIZE rewrites together. Pure Arrow, over rows of
``Snapshot.files()``, so that the driver runs it on a file list and Spark can run it on a
DataFrame of one through ``mapInArrow`` (:func:`bin_batches`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidArgumentError
from txnlog.file_facts import parse_stats

#: The column :func:`bin_batches` adds: the bin a file is rewritten in, unique across partitions.
BIN_COLUMN = "bin"


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


def partition_bins(files: pa.Table) -> list[pa.Table]:
    """Every file of each partition in one bin (a Z-order rewrites whole partitions, as
    delta-spark's ``OPTIMIZE ... ZORDER BY`` does), partitions in order."""
    by_partition: dict[tuple[tuple[str, Any], ...], list[int]] = {}
    for i, key in enumerate(_partition_keys(files)):
        by_partition.setdefault(key, []).append(i)
    ordered = sorted(by_partition, key=lambda k: [(n, "" if v is None else str(v)) for n, v in k])
    return [files.take(pa.array(by_partition[k], pa.int64())) for k in ordered]


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


def bin_batches(
    batches: Iterable[pa.RecordBatch],
    target_file_size: int,
    *,
    min_files: int = 2,
    max_deleted_rows_ratio: float = 0.05,
    purge_deletion_vectors: bool = False,
) -> Iterator[pa.RecordBatch]:
    """:func:`plan_bins` as a ``mapInArrow`` function: the files of ``batches`` that are
    rewritten, each with its :data:`BIN_COLUMN` (the partition's values and the bin's number
    within it, as text). The files of one partition must reach one call (repartition the file
    list by ``partition_values`` first); a file in no bin is left out."""
    batches = list(batches)
    if not batches:
        return
    files = pa.Table.from_batches(batches)
    bins = plan_bins(files, target_file_size, min_files=min_files, max_deleted_rows_ratio=max_deleted_rows_ratio,
                     purge_deletion_vectors=purge_deletion_vectors)
    numbers: dict[str, int] = {}
    for group in bins:
        key = orjson.dumps(_partition_keys(group.slice(0, 1))[0]).decode()
        number = numbers[key] = numbers.get(key, -1) + 1
        label = pa.array([f"{key}#{number}"] * group.num_rows, pa.string())
        yield from group.append_column(BIN_COLUMN, label).to_batches()


__all__ = ["BIN_COLUMN", "bin_batches", "partition_bins", "plan_bins"]
