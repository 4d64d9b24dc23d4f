"""The change data feed's rows: what :mod:`txnlog.log.changes` located, read through the one
reader (:class:`ReadContext`: column mapping, partition values, deletion vectors), with the
columns the protocol asks change readers to add."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.log.changes import VersionChanges
from txnlog.read.files import BATCH_ROWS, ReadContext
from txnlog.storage import LogStore

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
#: The values of ``_change_type``.
CHANGE_TYPES = ("insert", "delete", "update_preimage", "update_postimage")

_CHANGE_TYPE_FIELD = pa.field(CHANGE_TYPE, pa.string())
_POSITION = "__txnlog_change_position"


def change_schema(context: ReadContext, columns: Sequence[str] | None = None) -> pa.Schema:
    """The table's columns (or ``columns``), then ``_change_type``, ``_commit_version`` and
    ``_commit_timestamp``."""
    return (
        context.output_schema(columns)
        .append(_CHANGE_TYPE_FIELD)
        .append(pa.field(COMMIT_VERSION, pa.int64(), nullable=False))
        .append(pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"), nullable=False))
    )


def change_batches(
    context: ReadContext,
    versions: Iterable[VersionChanges],
    *,
    columns: Sequence[str] | None = None,
    store: LogStore | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The changed rows of ``versions``, version by version, as batches of :func:`change_schema`."""
    schema = change_schema(context, columns)
    names = context.output_schema(columns).names
    store = store if store is not None else context.open_store()
    for changes in versions:
        stamp = pa.scalar(changes.timestamp * 1000, pa.timestamp("us", tz="UTC"))
        for change_type, batch in _rows(context, changes, names, store, batch_rows):
            n = batch.num_rows
            kinds = batch.column(CHANGE_TYPE) if change_type is None else pa.repeat(pa.scalar(change_type), n)
            arrays = [*batch.select(names).columns, kinds, pa.repeat(pa.scalar(changes.version, pa.int64()), n), pa.repeat(stamp, n)]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _rows(
    context: ReadContext, changes: VersionChanges, names: list[str], store: LogStore, batch_rows: int
) -> Iterator[tuple[str | None, pa.RecordBatch]]:
    """(change type, or None when the batch holds its own; rows) of one version."""
    if changes.change_files.num_rows:
        for batch in context.batches(changes.change_files, columns=names, file_columns=[_CHANGE_TYPE_FIELD], store=store, batch_rows=batch_rows):
            yield None, batch
        return
    for batch in context.batches(changes.deleted, columns=names, store=store, batch_rows=batch_rows):
        yield "delete", batch
    if changes.vector_added.num_rows:
        yield from _vector_changes(context, changes, names, store, batch_rows)
    for batch in context.batches(changes.inserted, columns=names, store=store, batch_rows=batch_rows):
        yield "insert", batch


def _vector_changes(
    context: ReadContext, changes: VersionChanges, names: list[str], store: LogStore, batch_rows: int
) -> Iterator[tuple[str | None, pa.RecordBatch]]:
    """Rows of files re-added with another deletion vector: those the new vector deletes and the
    old did not were deleted; those the old deleted and the new does not were restored."""
    before = context.deleted_rows(changes.vector_removed, store)
    after = context.deleted_rows(changes.vector_added, store)
    files = changes.vector_added
    index = files.schema.get_field_index("deletion_vector")
    whole = files.set_column(index, files.schema.field(index), pa.nulls(files.num_rows, files.schema.field(index).type))
    for i in range(files.num_rows):
        old = _positions(before[i])
        new = _positions(after[i])
        for change_type, positions in (("delete", np.setdiff1d(new, old)), ("insert", np.setdiff1d(old, new))):
            if not len(positions):
                continue
            wanted = pa.array(positions)
            for batch in context.batches(whole.slice(i, 1), columns=names, store=store, batch_rows=batch_rows, row_index=_POSITION):
                kept = batch.filter(pc.is_in(batch.column(_POSITION), value_set=wanted))
                if kept.num_rows:
                    yield change_type, kept


def _positions(rows: pa.Array | None) -> np.ndarray:
    if rows is None:
        return np.empty(0, dtype=np.int64)
    return np.asarray(rows.to_numpy(zero_copy_only=False), dtype=np.int64)


__all__ = ["CHANGE_TYPE", "CHANGE_TYPES", "COMMIT_TIMESTAMP", "COMMIT_VERSION", "change_batches", "change_schema"]
