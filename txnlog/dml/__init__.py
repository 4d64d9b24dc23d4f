"""Row-level DML over Arrow: DELETE, UPDATE and MERGE for tables that fit one machine.

Each function stages its changes in an open transaction (the caller commits) and returns a :class:`DmlResult`: the
operation metrics it records in ``commitInfo`` (delta-spark's names). Tables with
``delta.enableDeletionVectors=true`` are changed merge-on-read (deletion vectors), the others
copy-on-write. :class:`txnlog.Table`'s ``delete``, ``update`` and ``merge`` wrap these in a
transaction of their own (OPTIMIZE, which changes no row, is :mod:`txnlog.optimize`). The MERGE clauses (:class:`MergeCondition`, :func:`merge_parameters`,
:func:`assignments`, :func:`key_range_predicate`) are shared with ``txnlog.spark.merge``.
"""

from txnlog.dml.clauses import Assignments, MergeCondition, assignments, key_bounds, key_range_predicate, merge_parameters, quote_name
from txnlog.dml.operations import DmlResult, Metrics, delete, matching_positions, merge, rows_with_keys, update
from txnlog.dml.pruning import merge_candidates

__all__ = [
    "Assignments",
    "DmlResult",
    "MergeCondition",
    "Metrics",
    "assignments",
    "delete",
    "key_bounds",
    "key_range_predicate",
    "matching_positions",
    "merge",
    "merge_candidates",
    "merge_parameters",
    "quote_name",
    "rows_with_keys",
    "update",
]
