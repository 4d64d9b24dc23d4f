"""Key pruning for MERGE: of the files a source's key range selects, those whose own bounds can
hold one of the source's keys. A few new keys past the end of the table's range would otherwise
make every file a candidate. Shared by ``Table.merge`` and ``txnlog.spark.merge``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.file_facts import parse_stats, physical_names, stats_leaf, stats_type
from txnlog.snapshot import Snapshot

# Key types whose order numpy and the stats agree on, so a file's [min, max] can prune it.
_ORDERED = (pa.types.is_integer, pa.types.is_date)


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
                or not any(test(field.type) for test in _ORDERED)):
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
        as_int = pa.int64() if not pa.types.is_date(values.type) else pa.int32()
        sorted_keys = np.sort(values.cast(as_int).to_numpy(zero_copy_only=False))
        lows = pc.fill_null(low, values[0]).cast(as_int).to_numpy(zero_copy_only=False)
        highs = pc.fill_null(high, values[0]).cast(as_int).to_numpy(zero_copy_only=False)
        # Some key in [low, high]: the first key >= low comes before the first key > high.
        holds = np.searchsorted(sorted_keys, lows, side="left") < np.searchsorted(sorted_keys, highs, side="right")
        keep &= holds | ~known
    return files.filter(pa.array(keep)) if not keep.all() else files


__all__ = ["prune_by_keys"]
