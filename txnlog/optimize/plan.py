"""An OPTIMIZE planned on one snapshot: every decision taken before a row is read (which files,
in which bins, of what target size, whether row ids are kept), and the metrics its outcome
records. Python's executor (:mod:`txnlog.optimize.run`) and Spark's (``txnlog.spark.optimize``)
only carry it out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txnlog import properties as props
from txnlog.errors import InvalidPredicateError
from txnlog.log.file_actions import FILES_SCHEMA
from txnlog.optimize.bins import plan_bins
from txnlog.optimize.parameters import OptimizeParameters

if TYPE_CHECKING:
    from txnlog.snapshot import Snapshot


@dataclass(frozen=True)
class OptimizePlan:
    """What one OPTIMIZE attempt rewrites, decided on the snapshot at ``version``."""

    version: int
    parameters: OptimizeParameters
    #: Bytes per output file.
    target_size: int
    #: The files rewritten together, one table (``Snapshot.files()`` layout) per bin.
    bins: tuple[pa.Table, ...]
    #: Rewritten rows keep their row ids and commit versions (row tracking is enabled).
    preserve_row_ids: bool

    @property
    def files(self) -> pa.Table:
        """Every file the plan reads and removes."""
        return pa.concat_tables(self.bins) if self.bins else FILES_SCHEMA.empty_table()

    @property
    def is_empty(self) -> bool:
        return not self.bins

    @property
    def partitions(self) -> int:
        """How many partitions the plan compacts in."""
        return len({str(b.column("partition_values")[0].as_py()) for b in self.bins})

    def metrics(self, added_sizes: Sequence[int], execution_ms: int) -> dict[str, int]:
        """The commit's ``operationMetrics`` once files of ``added_sizes`` bytes are written:
        delta-spark's OPTIMIZE metrics (the size distribution is of the added files), plus
        ``numBins`` and ``executionTimeMs``."""
        removed = self.files
        sizes = np.asarray(added_sizes, dtype=np.int64) if len(added_sizes) else np.zeros(1, np.int64)
        quantiles = np.percentile(sizes, [25, 50, 75], method="lower")
        return {
            "numAddedFiles": len(added_sizes),
            "numRemovedFiles": removed.num_rows,
            "numAddedBytes": int(sizes.sum()),
            "numRemovedBytes": int(pc.sum(removed.column("size")).as_py() or 0),
            "minFileSize": int(sizes.min()),
            "p25FileSize": int(quantiles[0]),
            "p50FileSize": int(quantiles[1]),
            "p75FileSize": int(quantiles[2]),
            "maxFileSize": int(sizes.max()),
            "numDeletionVectorsRemoved": removed.num_rows - removed.column("deletion_vector").null_count,
            "numBins": len(self.bins),
            "executionTimeMs": execution_ms,
        }


def check_predicate(snapshot: Snapshot, predicate: str | None) -> None:
    """OPTIMIZE's predicate may name partition columns only (delta-spark's rule):
    InvalidPredicateError otherwise, naming the other columns."""
    if predicate is None:
        return
    parsed = snapshot.predicate(predicate)
    if not parsed.matches_partition_only():
        others = sorted(parsed.columns - set(parsed.partition_columns))
        raise InvalidPredicateError(
            f"optimize predicate {predicate!r} on {snapshot.uri} may name partition columns only "
            f"({list(snapshot.partition_columns) or 'the table is not partitioned'}); it names {others}",
            predicate=predicate,
        )


def plan_optimize(snapshot: Snapshot, parameters: OptimizeParameters, *, files: pa.Table | None = None) -> OptimizePlan:
    """Plan ``parameters`` on ``snapshot``: the live files of the partitions the predicate
    selects (or ``files``, rows of ``snapshot.files()``, when an engine chose them), binned by
    :func:`plan_bins` with the target size and deleted-rows ratio resolved against the table."""
    check_predicate(snapshot, parameters.predicate)
    config = snapshot.table_configuration
    target = parameters.target_size if parameters.target_size is not None else config.target_file_size
    ratio = parameters.max_deleted_rows_ratio
    if ratio is None:
        ratio = config.table_property(props.OPTIMIZE_MAX_DELETED_ROWS_RATIO)
    if files is None:
        files = snapshot.files(parameters.predicate)
    bins = plan_bins(files, target, min_files=parameters.min_files, max_deleted_rows_ratio=ratio,
                     purge_deletion_vectors=parameters.purge_deletion_vectors)
    return OptimizePlan(snapshot.version, parameters, target, tuple(bins), config.row_ids_preserved)


__all__ = ["OptimizePlan", "check_predicate", "plan_optimize"]
