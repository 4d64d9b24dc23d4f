"""What an OPTIMIZE is asked to do: one set of parameters for Python and Spark, recorded in
``commitInfo`` under delta-spark's names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from txnlog.errors import InvalidArgumentError

#: The operation names delta-spark records.
OPTIMIZE = "OPTIMIZE"
REORG = "REORG"


@dataclass(frozen=True)
class OptimizeParameters:
    """An OPTIMIZE (or, with ``purge_deletion_vectors``, a ``REORG ... APPLY (PURGE)``).

    - ``predicate``: SQL over partition columns only (delta-spark's ``OPTIMIZE ... WHERE``):
      the partitions to compact. None: every partition.
    - ``z_order_by``: columns (dotted paths) of an unclustered table to Z-order by
      (delta-spark's ``OPTIMIZE ... ZORDER BY``): every file of each selected partition is
      rewritten in Z-order. A clustered table is always clustered by its own columns, and
      refuses ``z_order_by`` as delta-spark does.
    - ``auto``: an auto compaction (recorded only).
    - ``target_size``: bytes per output file; None: the table's ``delta.targetFileSize``.
    - ``min_files``: a bin of small files is rewritten only with at least this many.
    - ``max_deleted_rows_ratio``: a file whose deletion vector deletes more than this share of
      its rows is rewritten whatever its size; None: the table's
      ``txnlog.optimize.maxDeletedRowsRatio``.
    - ``purge_deletion_vectors``: rewrite exactly the files that have a deletion vector.
    - ``max_concurrent_tasks``: bins rewritten at once by the Python executor (None: one per
      core, as deltalake does); Spark runs one task per bin.
    """

    predicate: str | None = None
    z_order_by: tuple[str, ...] = ()
    auto: bool = False
    target_size: int | None = None
    min_files: int = 2
    max_deleted_rows_ratio: float | None = None
    purge_deletion_vectors: bool = False
    max_concurrent_tasks: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.z_order_by, str) or not all(isinstance(c, str) and c for c in self.z_order_by):
            raise InvalidArgumentError(f"optimize: z_order_by is a list of column names, got {self.z_order_by!r}")
        object.__setattr__(self, "z_order_by", tuple(self.z_order_by))
        if len({c.lower() for c in self.z_order_by}) != len(self.z_order_by):
            raise InvalidArgumentError(f"optimize: z_order_by names a column twice: {list(self.z_order_by)}")
        if self.z_order_by and self.purge_deletion_vectors:
            raise InvalidArgumentError("optimize: z_order_by does not go with purge_deletion_vectors (a REORG rewrites in place)")
        if self.target_size is not None and (isinstance(self.target_size, bool) or not isinstance(self.target_size, int) or self.target_size <= 0):
            raise InvalidArgumentError(f"optimize: target_size must be a positive number of bytes, got {self.target_size!r}")
        if isinstance(self.min_files, bool) or not isinstance(self.min_files, int) or self.min_files < 1:
            raise InvalidArgumentError(f"optimize: min_files must be at least 1, got {self.min_files!r}")
        ratio = self.max_deleted_rows_ratio
        if ratio is not None and not 0.0 <= ratio <= 1.0:
            raise InvalidArgumentError(f"optimize: max_deleted_rows_ratio must be between 0 and 1, got {ratio}")
        tasks = self.max_concurrent_tasks
        if tasks is not None and (isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1):
            raise InvalidArgumentError(f"optimize: max_concurrent_tasks must be at least 1, got {tasks!r}")

    @property
    def operation(self) -> str:
        """The commit's operation: ``REORG`` for a purge, else ``OPTIMIZE``."""
        return REORG if self.purge_deletion_vectors else OPTIMIZE

    def commit_parameters(self, clustering_columns: Sequence[str] = ()) -> dict[str, Any]:
        """``commitInfo.operationParameters``, as delta-spark records them; ``clustering_columns``:
        those of a clustered table, which its OPTIMIZE records instead of a Z-order."""
        predicate = [self.predicate] if self.predicate else []
        if self.purge_deletion_vectors:
            return {"predicate": predicate, "applyPurge": True}
        if clustering_columns:
            return {"predicate": predicate, "zOrderBy": [], "clusterBy": list(clustering_columns), "auto": self.auto, "isFull": False}
        return {"predicate": predicate, "zOrderBy": list(self.z_order_by), "clusterBy": [], "auto": self.auto}


__all__ = ["OPTIMIZE", "REORG", "OptimizeParameters"]
