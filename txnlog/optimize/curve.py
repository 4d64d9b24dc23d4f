"""Space-filling curves for OPTIMIZE: the order rows are rewritten in so that each output file
covers a small box of the clustering (or Z-order) columns, and min/max statistics skip files for
a filter on any one of them.

As delta-spark does, each column's values are first replaced by a range id (its rank among the
rows, scaled to ``2**bits`` equal-frequency ranges; nulls last), so that skewed or non-numeric
columns fill the grid evenly. The ids are then combined into one sortable ``uint64`` key:

- ``"zorder"``: the ids' bits interleaved (delta-spark's ``OPTIMIZE ... ZORDER BY``);
- ``"hilbert"``: the position on a Hilbert curve over the ids (delta-spark's liquid clustering
  for two or more columns; one column is plain order either way). Neighbouring keys are
  neighbouring cells, so a file's box is tighter than along a Z-order curve.

Pure numpy and Arrow, so the Python executor and Spark's tasks (``mapInArrow``) sort alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidArgumentError

Curve = Literal["zorder", "hilbert"]
#: Bits of range id per column (1024 ranges, about delta-spark's 1000), fewer when many columns
#: share the 64-bit key.
MAX_BITS = 10


def bits_per_column(columns: int) -> int:
    """Bits of range id each of ``columns`` columns gets in a 64-bit key."""
    if not 1 <= columns <= 64:
        raise InvalidArgumentError(f"a curve needs between 1 and 64 columns, got {columns}")
    return min(MAX_BITS, 64 // columns)


def range_ids(values: pa.Array | pa.ChunkedArray, bits: int, *, column: str = "?") -> np.ndarray:
    """Each value's range id in ``[0, 2**bits)``: its rank (ties share the lowest) scaled to
    equal-frequency ranges, nulls ranked last."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n = len(values)
    if n == 0:
        return np.zeros(0, np.uint64)
    try:
        ranks = pc.rank(values, sort_keys="ascending", tiebreaker="min")  # nulls rank last
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InvalidArgumentError(f"column {column!r} of type {values.type} cannot order a curve: {e}") from e
    scaled: np.ndarray = (ranks.to_numpy().astype(np.uint64) - np.uint64(1)) * np.uint64(1 << bits) // np.uint64(n)
    return scaled


def interleave(ids: Sequence[np.ndarray], bits: int) -> np.ndarray:
    """The bits of ``ids`` interleaved, most significant first, the first column's bit leading
    each group: the Z-order key of the ids (and the Hilbert key of their transposed form)."""
    key = np.zeros(len(ids[0]), np.uint64)
    for bit in range(bits - 1, -1, -1):
        for column in ids:
            key = (key << np.uint64(1)) | ((column >> np.uint64(bit)) & np.uint64(1))
    return key


def hilbert_key(ids: Sequence[np.ndarray], bits: int) -> np.ndarray:
    """The position of each point ``ids`` (coordinates of ``bits`` bits) on a Hilbert curve:
    Skilling's transform to the transposed index ("Programming the Hilbert curve", AIP Conf.
    Proc. 707, 2004), whose bits interleaved are the index."""
    if len(ids) == 1:
        return ids[0].astype(np.uint64)
    x = [a.astype(np.uint64, copy=True) for a in ids]
    n = len(x)
    q = 1 << (bits - 1)
    while q > 1:  # undo the excess work of the inverse transform
        p = np.uint64(q - 1)
        bit = np.uint64(q)
        for i in range(n):
            set_ = (x[i] & bit) != 0
            swap = (x[0] ^ x[i]) & p
            x[0] = np.where(set_, x[0] ^ p, x[0] ^ swap)
            if i:
                x[i] = np.where(set_, x[i], x[i] ^ swap)
        q >>= 1
    for i in range(1, n):  # Gray encode
        x[i] ^= x[i - 1]
    t = np.zeros(len(x[0]), np.uint64)
    q = 1 << (bits - 1)
    while q > 1:
        t = np.where((x[n - 1] & np.uint64(q)) != 0, t ^ np.uint64(q - 1), t)
        q >>= 1
    return interleave([a ^ t for a in x], bits)


def curve_key(columns: Sequence[pa.Array | pa.ChunkedArray], curve: Curve, *, names: Sequence[str] = ()) -> np.ndarray:
    """The ``uint64`` sort key of each row over ``columns`` along ``curve``."""
    bits = bits_per_column(len(columns))
    ids = [range_ids(c, bits, column=names[i] if i < len(names) else "?") for i, c in enumerate(columns)]
    if curve == "hilbert":
        return hilbert_key(ids, bits)
    if curve == "zorder":
        return interleave(ids, bits)
    raise InvalidArgumentError(f"unknown curve {curve!r}: zorder or hilbert")


def column_at(data: pa.Table, path: Sequence[str]) -> pa.ChunkedArray:
    """The column at ``path`` (a nested field by its struct path), matched case-insensitively as
    Delta names are."""
    current: pa.Table | pa.StructArray = data
    out: pa.ChunkedArray | pa.Array | None = None
    for depth, name in enumerate(path):
        names = current.schema.names if isinstance(current, pa.Table) else [f.name for f in current.type]
        match = next((n for n in names if n == name), None) or next((n for n in names if n.lower() == name.lower()), None)
        if match is None:
            raise InvalidArgumentError(f"curve column {'.'.join(path)!r} is not a column of the rows ({names})")
        out = current.column(match) if isinstance(current, pa.Table) else current.field(match)
        if depth < len(path) - 1:
            chunk = out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out
            if not pa.types.is_struct(chunk.type):
                raise InvalidArgumentError(f"curve column {'.'.join(path)!r}: {name!r} is not a struct")
            current = chunk
    assert out is not None
    return out if isinstance(out, pa.ChunkedArray) else pa.chunked_array([out])


def curve_sorted(data: pa.Table, columns: Sequence[Sequence[str]], curve: Curve) -> pa.Table:
    """``data``'s rows in ``curve`` order over ``columns`` (paths); rows of one cell of the
    curve's grid in the order of the columns' values."""
    if data.num_rows < 2:
        return data
    values = [column_at(data, p) for p in columns]
    key = curve_key(values, curve, names=[".".join(p) for p in columns])
    keys = pa.table([pa.array(key), *values], names=[f"k{i}" for i in range(len(values) + 1)])
    order = pc.sort_indices(keys, sort_keys=[(name, "ascending") for name in keys.column_names])
    return data.take(order)


def curve_sorted_batches(batches: Iterable[pa.RecordBatch], columns: Sequence[Sequence[str]], curve: Curve) -> Iterator[pa.RecordBatch]:
    """:func:`curve_sorted` over every row of ``batches`` (one task's share, in memory), as a
    ``mapInArrow`` function."""
    batches = list(batches)
    if not batches:
        return
    yield from curve_sorted(pa.Table.from_batches(batches), columns, curve).to_batches()


__all__ = ["MAX_BITS", "Curve", "bits_per_column", "curve_key", "curve_sorted", "curve_sorted_batches", "hilbert_key", "interleave", "range_ids"]
