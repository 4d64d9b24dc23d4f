"""What a DML did: one value per statement, in delta-spark's operation metrics.

Python and Spark executors build the same values from what they staged; the transaction's
owner (``Table``, ``txnlog.spark``'s statements, a streaming sink) records
:meth:`~RowChangeMetrics.operation_metrics` in the commit. A file whose deletion vector grew
is neither removed nor added here (its remove+add in the log only swaps the vector): only
dropped data files are removed and only new data files added, as delta-spark counts them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.file_facts import num_records
from txnlog.log import AddFile
from txnlog.write import RowDeletes


def total_size(files: pa.Table) -> int:
    """The bytes of ``files`` (a file table)."""
    return int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0


def with_vector(files: pa.Table) -> int:
    """How many of ``files`` have a deletion vector (dropped with them when they are rewritten)."""
    return int(files.num_rows - files.column("deletion_vector").null_count) if files.num_rows else 0


def live_rows(files: pa.Table) -> int | None:
    """The rows of ``files`` that no deletion vector deletes, by their stats; None when a file
    has no stats (then nobody knows without reading it)."""
    if not files.num_rows:
        return 0
    if files.column("stats").null_count:
        return None
    cardinalities = pc.struct_field(files.column("deletion_vector"), "cardinality")
    return num_records(files) - int(pc.sum(cardinalities).as_py() or 0)


@dataclass(frozen=True, slots=True)
class VectorCounts:
    """Deletion vectors a statement added, replaced (a file's grew) and dropped."""

    added: int = 0
    updated: int = 0
    removed: int = 0


@dataclass(frozen=True, slots=True)
class FileCounts:
    """The data files a statement staged, counted as delta-spark counts them."""

    removed_files: int = 0
    added_files: int = 0
    removed_bytes: int = 0
    added_bytes: int = 0
    vectors: VectorCounts = VectorCounts()

    @classmethod
    def rewrite(cls, removed: pa.Table, added: Sequence[AddFile] | pa.Table) -> FileCounts:
        """Copy-on-write: ``removed`` files replaced by ``added`` ones (a removed file's vector
        goes with it)."""
        if isinstance(added, pa.Table):
            count, size = added.num_rows, total_size(added)
        else:
            count, size = len(added), sum(a.size for a in added)
        return cls(removed.num_rows, count, total_size(removed), size, VectorCounts(removed=with_vector(removed)))

    @classmethod
    def vectors_of(cls, deletes: RowDeletes, added: Sequence[AddFile] = ()) -> FileCounts:
        """Merge-on-read: rows marked in vectors (a file all of whose rows are deleted is
        removed), and ``added`` new data files."""
        kept = deletes.added.column("path") if deletes.added.num_rows else pa.array([], pa.string())
        dropped = deletes.removed.filter(pc.invert(pc.is_in(deletes.removed.column("path"), kept))) if deletes.removed.num_rows else deletes.removed
        vectors = VectorCounts(deletes.vectors_added, deletes.vectors_updated, deletes.vectors_removed)
        return cls(dropped.num_rows, len(added), total_size(dropped), sum(a.size for a in added), vectors)

    @property
    def changed(self) -> bool:
        """Whether any file action was staged: a new file, a dropped file, a new vector."""
        return bool(self.added_files or self.removed_files or self.vectors.added or self.vectors.updated)

    def operation_metrics(self, target: str = "") -> dict[str, int]:
        """In delta-spark's names: ``numAddedFiles``, ``numDeletionVectorsAdded``..., or with
        ``target="Target"`` a MERGE's ``numTargetFilesAdded``, ``numTargetDeletionVectorsAdded``...
        (``numFiles`` and ``numOutputBytes``, the commit's, count the new data files either way)."""
        # (a DELETE's name, a MERGE's name after "numTarget"), the count
        counts = ((("AddedFiles", "FilesAdded"), self.added_files), (("RemovedFiles", "FilesRemoved"), self.removed_files),
                  (("AddedBytes", "BytesAdded"), self.added_bytes), (("RemovedBytes", "BytesRemoved"), self.removed_bytes))
        named = {f"num{target}{merge}" if target else f"num{plain}": v for (plain, merge), v in counts}
        vectors = {f"num{target}DeletionVectors{k}": v for k, v in
                   (("Added", self.vectors.added), ("Updated", self.vectors.updated), ("Removed", self.vectors.removed))}
        return {"numFiles": self.added_files, "numOutputBytes": self.added_bytes, "numAddedFiles": self.added_files,
                "numRemovedFiles": self.removed_files, **named, **vectors}


@dataclass(frozen=True)
class Timing:
    scan_ms: int = 0
    rewrite_ms: int = 0
    execution_ms: int = 0

    def operation_metrics(self) -> dict[str, int]:
        return {"scanTimeMs": self.scan_ms, "rewriteTimeMs": self.rewrite_ms, "executionTimeMs": self.execution_ms}


def _known(metrics: Mapping[str, int | None]) -> dict[str, int]:
    """The metrics whose value is known (None: not without reading files that have no stats)."""
    return {k: v for k, v in metrics.items() if v is not None}


@dataclass(frozen=True)
class RowChangeMetrics:
    """What a DELETE or UPDATE did. ``rows`` are the rows deleted or updated; ``copied_rows``
    those a copy-on-write rewrite wrote again unchanged and ``output_rows`` every row written
    (None: unknown without reading the files, when one has no stats)."""

    operation: str  # "DELETE" or "UPDATE"
    files: FileCounts = FileCounts()
    rows: int | None = 0
    copied_rows: int | None = 0
    output_rows: int | None = 0
    change_files: int = 0
    timing: Timing = Timing()

    @property
    def changed(self) -> bool:
        return self.files.changed

    def operation_metrics(self) -> dict[str, int]:
        """delta-spark's ``operationMetrics`` of a DELETE or UPDATE."""
        rows = "numDeletedRows" if self.operation == "DELETE" else "numUpdatedRows"
        known = _known({rows: self.rows, "numCopiedRows": self.copied_rows, "numOutputRows": self.output_rows})
        return {**self.files.operation_metrics(), "numAddedChangeFiles": self.change_files, **self.timing.operation_metrics(), **known}


@dataclass(frozen=True)
class MergeMetrics:
    """What a MERGE did (``None``: unknown without reading files that have no stats)."""

    source_rows: int = 0
    target_files_scanned: int = 0
    files: FileCounts = FileCounts()
    change_files: int = 0
    rows_inserted: int | None = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    rows_copied: int | None = 0
    rows_not_matched_by_source_updated: int = 0
    rows_not_matched_by_source_deleted: int = 0
    timing: Timing = Timing()

    @property
    def changed(self) -> bool:
        """Whether the MERGE staged any file action."""
        return self.files.changed

    @property
    def output_rows(self) -> int | None:
        """Every row written: inserted, updated and copied."""
        if self.rows_inserted is None or self.rows_copied is None:
            return None
        return self.rows_inserted + self.rows_updated + self.rows_not_matched_by_source_updated + self.rows_copied

    def operation_metrics(self) -> dict[str, int]:
        """delta-spark's ``operationMetrics`` of a MERGE."""
        by_source_updated, by_source_deleted = self.rows_not_matched_by_source_updated, self.rows_not_matched_by_source_deleted
        rows = {
            "numSourceRows": self.source_rows, "numTargetFilesScanned": self.target_files_scanned,
            "numTargetChangeFilesAdded": self.change_files,
            "numTargetRowsUpdated": self.rows_updated + by_source_updated, "numTargetRowsMatchedUpdated": self.rows_updated,
            "numTargetRowsNotMatchedBySourceUpdated": by_source_updated,
            "numTargetRowsDeleted": self.rows_deleted + by_source_deleted, "numTargetRowsMatchedDeleted": self.rows_deleted,
            "numTargetRowsNotMatchedBySourceDeleted": by_source_deleted,
        }
        known = _known({"numTargetRowsInserted": self.rows_inserted, "numTargetRowsCopied": self.rows_copied, "numOutputRows": self.output_rows})
        return {**self.files.operation_metrics("Target"), **rows, **self.timing.operation_metrics(), **known}


#: Operation metrics by delta-spark's names.
Metrics = dict[str, int]


@dataclass(frozen=True)
class DmlResult:
    """What a statement without a metrics value of its own (OPTIMIZE) staged: its operation
    metrics, and whether it staged any file action (False: nothing to commit)."""

    metrics: Mapping[str, int]
    changed: bool

    def operation_metrics(self) -> dict[str, int]:
        return dict(self.metrics)


__all__ = ["DmlResult", "FileCounts", "Metrics", "VectorCounts", "MergeMetrics", "RowChangeMetrics", "Timing", "live_rows", "total_size", "with_vector"]
