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
from txnlog.errors import InvalidArgumentError, InvalidPredicateError
from txnlog.log.actions import AddFile
from txnlog.log.file_actions import FILES_SCHEMA
from txnlog.optimize.bins import partition_bins, plan_bins
from txnlog.optimize.clustering import cube_candidates, mark_cube, new_cube_id
from txnlog.optimize.curve import Curve
from txnlog.optimize.parameters import OptimizeParameters
from txnlog.txn.schema_changes import column_path, logical_clustering_columns

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
    #: The order each bin's rows are rewritten in: along this curve over ``curve_columns``
    #: (logical paths); None: as read (a compaction).
    curve: Curve | None = None
    curve_columns: tuple[tuple[str, ...], ...] = ()
    #: A clustered table's clustering columns (dotted logical names), and the id of the cube
    #: the plan writes; empty on an unclustered table.
    clustering_columns: tuple[str, ...] = ()
    cube_id: str | None = None

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

    def commit_parameters(self) -> dict[str, object]:
        """The commit's ``operationParameters`` (a clustered table's OPTIMIZE records its
        clustering columns)."""
        return self.parameters.commit_parameters(self.clustering_columns)

    def mark(self, added: pa.Table | Sequence[AddFile]) -> pa.Table | Sequence[AddFile]:
        """The executor's new files with what the plan says they are: the members of its cube
        on a clustered table, else as written."""
        if self.cube_id is None:
            return added
        return mark_cube(added, self.cube_id, self.clustering_columns)

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
    clustering = _clustering_columns(snapshot)
    if clustering and parameters.z_order_by:
        raise InvalidArgumentError(
            f"optimize {snapshot.uri}: the table is clustered by {['.'.join(c) for c in clustering]}, which OPTIMIZE "
            f"clusters by; z_order_by={list(parameters.z_order_by)} is refused (as delta-spark refuses ZORDER BY on a clustered table)")
    preserve = config.row_ids_preserved
    if clustering and not parameters.purge_deletion_vectors:
        names = tuple(".".join(c) for c in clustering)
        min_cube = config.table_property(props.OPTIMIZE_CLUSTERING_MIN_CUBE_SIZE)
        chosen = cube_candidates(files, names, min_cube)
        cube = (chosen,) if chosen.num_rows else ()
        return OptimizePlan(snapshot.version, parameters, target, cube, preserve, "hilbert", tuple(clustering), names, new_cube_id())
    if parameters.z_order_by:
        columns = _z_order_columns(snapshot, parameters.z_order_by)
        return OptimizePlan(snapshot.version, parameters, target, tuple(partition_bins(files)), preserve, "zorder", columns)
    bins = plan_bins(files, target, min_files=parameters.min_files, max_deleted_rows_ratio=ratio,
                     purge_deletion_vectors=parameters.purge_deletion_vectors)
    return OptimizePlan(snapshot.version, parameters, target, tuple(bins), preserve)


def _clustering_columns(snapshot: Snapshot) -> list[tuple[str, ...]]:
    """The clustering columns (logical paths) of a clustered table, else none."""
    if not snapshot.protocol.has_writer_feature("clustering"):
        return []
    return logical_clustering_columns(snapshot.metadata, snapshot.domain_metadata(props.CLUSTERING_DOMAIN))


def _z_order_columns(snapshot: Snapshot, names: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """``z_order_by`` as logical paths, each checked as delta-spark checks them: a column of the
    table, not a partition column (files are already split by it), with statistics collected
    (without them Z-ordering cannot skip a file)."""
    config = snapshot.table_configuration
    with_stats = {tuple(p.lower() for p in path) for path in config.stats_columns}
    partitions = {c.lower() for c in snapshot.partition_columns}
    out = []
    for name in names:
        path = column_path(name)
        key = tuple(p.lower() for p in path)
        if len(path) == 1 and key[0] in partitions:
            raise InvalidArgumentError(f"optimize {snapshot.uri}: z_order_by column {name!r} is a partition column; Z-order "
                                       f"by the other columns")
        if not _has_path(snapshot.schema, path):
            raise InvalidArgumentError(f"optimize {snapshot.uri}: z_order_by column {name!r} is not a column of the table "
                                       f"({snapshot.schema.names})")
        if key not in with_stats:
            raise InvalidArgumentError(
                f"optimize {snapshot.uri}: z_order_by column {name!r} has no statistics collected, so Z-ordering by it "
                f"cannot skip files (widen {props.DATA_SKIPPING_NUM_INDEXED_COLS.key} or name it in "
                f"{props.DATA_SKIPPING_STATS_COLUMNS.key})")
        out.append(path)
    return tuple(out)


def _has_path(schema: pa.Schema, path: Sequence[str]) -> bool:
    fields: list[pa.Field] = list(schema)
    for name in path:
        match = next((f for f in fields if f.name.lower() == name.lower()), None)
        if match is None:
            return False
        fields = list(match.type) if pa.types.is_struct(match.type) else []
    return True


__all__ = ["OptimizePlan", "check_predicate", "plan_optimize"]
