"""Row-level DML over Arrow (DELETE, UPDATE, MERGE) and the write planner: plans, and the Python
executor of each.

A plan (:class:`RowChangePlan`, :class:`MergePlan`, :class:`WritePlan`) is a frozen value holding
everything decided before any row is read; an executor only runs one. This package's executors
run on Arrow in this process (``run_row_change``, ``run_merge``, ``stage_write``);
``txnlog.spark`` runs the same plans on a cluster. Executors stage their changes in an open
transaction and return a metrics value (:class:`RowChangeMetrics`, :class:`MergeMetrics`) that
the transaction's owner records with the plan's parameters: :class:`txnlog.Table`'s ``delete``,
``update`` and ``merge`` do both in a transaction of their own. ``delete``, ``update`` and
``merge`` here plan and run in the caller's transaction. OPTIMIZE, which changes no row, is
:mod:`txnlog.optimize`.
"""

from txnlog.dml.builder import MergeAliases, MergeBuilder
from txnlog.dml.change_data import ChangeData
from txnlog.dml.merging import SOURCE_ROW, KeyMatcher, merge, run_merge
from txnlog.dml.metrics import DmlResult, FileCounts, MergeMetrics, RowChangeMetrics, Timing, live_rows
from txnlog.dml.plans import ClauseSpec, MergeClause, MergePlan, RowChangePlan, SqlExpression, keyword_clauses
from txnlog.dml.pruning import merge_candidates
from txnlog.dml.rows import delete, find_rows, run_row_change, update
from txnlog.dml.writes import (
    MODES,
    ArrowRemoval,
    RowRemoval,
    WriteOptions,
    WritePlan,
    WriteResult,
    evolve_schema,
    evolved_schema,
    files_table,
    open_write,
    plan_write,
    replace_where_violation,
    rows_matching,
    stage_write,
)

__all__ = [
    "MODES",
    "SOURCE_ROW",
    "ArrowRemoval",
    "ChangeData",
    "ClauseSpec",
    "DmlResult",
    "FileCounts",
    "KeyMatcher",
    "MergeAliases",
    "MergeBuilder",
    "MergeClause",
    "MergeMetrics",
    "MergePlan",
    "RowChangeMetrics",
    "RowChangePlan",
    "RowRemoval",
    "SqlExpression",
    "Timing",
    "WriteOptions",
    "WritePlan",
    "WriteResult",
    "delete",
    "evolve_schema",
    "evolved_schema",
    "files_table",
    "find_rows",
    "keyword_clauses",
    "live_rows",
    "merge",
    "merge_candidates",
    "open_write",
    "plan_write",
    "replace_where_violation",
    "rows_matching",
    "run_merge",
    "run_row_change",
    "stage_write",
    "update",
]
