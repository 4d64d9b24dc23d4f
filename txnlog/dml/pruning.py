"""The files a MERGE can match: those the source's key range selects, less those whose own bounds
hold none of the source's keys (a few new keys past the end of the table's range would otherwise
make every file a candidate). Shared by ``Table.merge`` and ``txnlog.spark.merge``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.dml.clauses import key_bounds, key_range_predicate
from txnlog.file_facts import parse_stats, physical_names, stats_leaf, stats_type
from txnlog.snapshot import Snapshot
from txnlog.txn.transaction import OptimisticTransaction


def ordered_as_int(kind: pa.DataType) -> pa.DataType | None:
    """The integer type whose order is ``kind``'s, for keys compared as numpy numbers (a file's
    [min, max] against sorted keys): int64 for integers, int32 for dates, None for the rest."""
    if pa.types.is_integer(kind):
        return pa.int64()
    if pa.types.is_date(kind):
        return pa.int32()
    return None


def prune_by_keys(snapshot: Snapshot, files: pa.Table, keys: Sequence[tuple[str, pa.Array]]) -> pa.Table:
    """``files`` (of ``snapshot``) less those whose min/max stats of a key column hold none of
    the source's values of it. ``keys``: (target column, the source's non-null values of it).
    Only integer and date keys of the column's exact type prune (their order is the stats'
    order); a partition column, or a file without bounds for a key, keeps the file."""
    if files.num_rows == 0:
        return files
    by_lower = {f.name.lower(): f for f in snapshot.schema}
    partitions = {c.lower() for c in snapshot.partition_columns}
    usable = []
    for column, values in keys:
        field = by_lower.get(column.lower())
        if (field is None or column.lower() in partitions or len(values) == 0 or values.type != field.type
                or ordered_as_int(field.type) is None):
            continue
        usable.append((field.name, values))
    if not usable:
        return files
    mapped = physical_names(snapshot.schema, snapshot.configuration)
    bounds_type = stats_type(snapshot.schema, [(name,) for name, _ in usable], mapped=mapped is not None)
    stats = parse_stats(files, bounds_type)
    keep = np.ones(files.num_rows, dtype=bool)
    for column, values in usable:
        name = mapped.get(column, column) if mapped else column
        low = stats_leaf(stats, ("minValues", name))
        high = stats_leaf(stats, ("maxValues", name))
        if low.type != values.type or high.type != values.type:
            continue
        known = pc.and_(pc.is_valid(low), pc.is_valid(high)).to_numpy(zero_copy_only=False)
        as_int = ordered_as_int(values.type)
        sorted_keys = np.sort(values.cast(as_int).to_numpy(zero_copy_only=False))
        lows = pc.fill_null(low, values[0]).cast(as_int).to_numpy(zero_copy_only=False)
        highs = pc.fill_null(high, values[0]).cast(as_int).to_numpy(zero_copy_only=False)
        # Some key in [low, high]: the first key >= low comes before the first key > high.
        holds = np.searchsorted(sorted_keys, lows, side="left") < np.searchsorted(sorted_keys, highs, side="right")
        keep &= holds | ~known
    return files.filter(pa.array(keep)) if not keep.all() else files


def merge_candidates(snapshot: Snapshot, keyed: pa.Table, pairs: Sequence[tuple[str, str]], *, txn: OptimisticTransaction | None = None) -> pa.Table:
    """The files of ``snapshot`` a MERGE can match, given ``keyed``, the source's rows whose
    keys are all set, and the ON condition's (target, source) key ``pairs``: the key range's
    files, less those :func:`prune_by_keys` drops. With ``txn``, the range is read through it,
    so the transaction records the range as its read predicate and its files as read."""
    if keyed.num_rows == 0:
        return snapshot.files().slice(0, 0)
    predicate = key_range_predicate(pairs, key_bounds(keyed, [s for _, s in pairs]))
    if txn is None:
        in_range = snapshot.files(predicate)
    else:
        in_range = txn.filter_files(predicate) if predicate is not None else txn.read_whole_table()
    return prune_by_keys(snapshot, in_range, [(t, keyed.column(s).combine_chunks()) for t, s in pairs])


__all__ = ["merge_candidates", "ordered_as_int", "prune_by_keys"]
