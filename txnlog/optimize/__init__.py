"""OPTIMIZE: compaction of small files, and of files whose deletion vectors delete a large share
of their rows, committed with ``dataChange=false`` (rows do not change; under row tracking each
keeps its row id and row commit version).

The core plans and the engines execute: :func:`plan_optimize` makes an :class:`OptimizePlan`
from :class:`OptimizeParameters` on a snapshot (the predicate rule, the bin plan
:func:`plan_bins`, the target size); :func:`optimize` runs plans to a commit with the one retry
rule, each attempt staged by :func:`stage_optimize` (what it read, removed and added) and
executed by :func:`rewrite_in_python` (``Table.optimize``) or Spark's executor
(``txnlog.spark.optimize``).
:func:`bin_batches` is the bin plan as a ``mapInArrow`` function.

Z-order (``z_order_by``) and liquid clustering (a clustered table) rewrite each bin in the order
of a space-filling curve over their columns (:mod:`txnlog.optimize.curve`); a clustered table's
OPTIMIZE is incremental (:mod:`txnlog.optimize.clustering`).
"""

from txnlog.optimize.bins import BIN_COLUMN, bin_batches, plan_bins
from txnlog.optimize.clustering import CLUSTERING_PROVIDER, ZCUBE_ID, ZCUBE_ZORDER_BY
from txnlog.optimize.curve import bits_per_column, curve_key, curve_sorted, curve_sorted_batches
from txnlog.optimize.parameters import OPTIMIZE, REORG, OptimizeParameters
from txnlog.optimize.plan import OptimizePlan, check_predicate, plan_optimize
from txnlog.optimize.run import Begin, Executor, OptimizeResult, StagedOptimize, optimize, rewrite_in_python, stage_optimize

__all__ = [
    "BIN_COLUMN",
    "CLUSTERING_PROVIDER",
    "ZCUBE_ID",
    "ZCUBE_ZORDER_BY",
    "bits_per_column",
    "curve_key",
    "curve_sorted",
    "curve_sorted_batches",
    "OPTIMIZE",
    "REORG",
    "Begin",
    "Executor",
    "OptimizeParameters",
    "OptimizePlan",
    "OptimizeResult",
    "bin_batches",
    "check_predicate",
    "optimize",
    "plan_bins",
    "plan_optimize",
    "StagedOptimize",
    "rewrite_in_python",
    "stage_optimize",
]
