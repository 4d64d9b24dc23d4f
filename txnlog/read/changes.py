"""The change data feed's rows. What :mod:`txnlog.log.changes` classified is planned here as
:class:`ChangeScan` reads (the one rule for cdc files and for deletion vectors that differ,
which Spark's change reader executes too) and read through the one reader
(:class:`ReadContext`: column mapping, partition values, deletion vectors), with the columns
the protocol asks change readers to add."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ChangeScan:
    """One read of a version's change rows, what every change feed reader (Python, Spark)
    executes: ``files`` (``Snapshot.files()`` layout) read live (their deletion vectors
    applied), or, with ``positions``, one file read whole and only those rows kept."""

    version: int
    #: Commit time, ms since the epoch.
    timestamp: int
    #: ``insert`` or ``delete``; None for cdc files, whose rows carry their own.
    change_type: str | None
    files: pa.Table
    positions: np.ndarray | None = None


def deletion_vector_diff(before: pa.Array | None, after: pa.Array | None) -> tuple[np.ndarray, np.ndarray]:
    """Two deletion vectors of one data file (deleted row positions, None for none): the rows
    ``after`` deletes that ``before`` did not (deleted), and those ``before`` deleted that
    ``after`` no longer does (restored), as sorted int64 positions."""
    old, new = _positions(before), _positions(after)
    return np.setdiff1d(new, old), np.setdiff1d(old, new)


def change_scans(context: ReadContext, changes: VersionChanges, store: LogStore | None = None) -> Iterator[ChangeScan]:
    """The reads that give ``changes``' rows: its cdc files when it has them (they alone hold
    its changes); else its removed files as deletes, the rows where a file's old and new
    deletion vectors differ, and its added files as inserts."""
    version, stamp = changes.version, changes.timestamp
    if changes.has_change_files:
        yield ChangeScan(version, stamp, None, changes.change_files)
        return
    if changes.deleted.num_rows:
        yield ChangeScan(version, stamp, "delete", changes.deleted)
    if changes.vector_added.num_rows:
        store = store if store is not None else context.open_store()
        before = context.deleted_rows(changes.vector_removed, store)
        after = context.deleted_rows(changes.vector_added, store)
        files = changes.vector_added
        index = files.schema.get_field_index("deletion_vector")
        whole = files.set_column(index, files.schema.field(index), pa.nulls(files.num_rows, files.schema.field(index).type))
        for i in range(files.num_rows):
            deleted, restored = deletion_vector_diff(before[i], after[i])
            for change_type, positions in (("delete", deleted), ("insert", restored)):
                if len(positions):
                    yield ChangeScan(version, stamp, change_type, whole.slice(i, 1), positions)
    if changes.inserted.num_rows:
        yield ChangeScan(version, stamp, "insert", changes.inserted)


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
        version = pa.scalar(changes.version, pa.int64())
        for scan in change_scans(context, changes, store):
            for batch in _read(context, scan, names, store, batch_rows):
                n = batch.num_rows
                kinds = batch.column(CHANGE_TYPE) if scan.change_type is None else pa.repeat(pa.scalar(scan.change_type), n)
                arrays = [*batch.select(names).columns, kinds, pa.repeat(version, n), pa.repeat(stamp, n)]
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _read(context: ReadContext, scan: ChangeScan, names: list[str], store: LogStore, batch_rows: int) -> Iterator[pa.RecordBatch]:
    if scan.change_type is None:
        yield from context.batches(scan.files, columns=names, file_columns=[_CHANGE_TYPE_FIELD], store=store, batch_rows=batch_rows)
    elif scan.positions is None:
        yield from context.batches(scan.files, columns=names, store=store, batch_rows=batch_rows)
    else:
        wanted = pa.array(scan.positions)
        for batch in context.batches(scan.files, columns=names, store=store, batch_rows=batch_rows, row_index=_POSITION):
            kept = batch.filter(pc.is_in(batch.column(_POSITION), value_set=wanted))
            if kept.num_rows:
                yield kept


def _positions(rows: pa.Array | None) -> np.ndarray:
    if rows is None:
        return np.empty(0, dtype=np.int64)
    return np.asarray(rows.to_numpy(zero_copy_only=False), dtype=np.int64)


__all__ = [
    "CHANGE_TYPE",
    "CHANGE_TYPES",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "ChangeScan",
    "change_batches",
    "change_scans",
    "change_schema",
    "deletion_vector_diff",
]
