"""Boolean expressions over a table's columns: the tree, SQL parsing, and their evaluation on file
stats (skipping) and on rows (filtering).

- :mod:`~txnlog.expressions.tree`: immutable nodes in negation normal form (conditions it cannot
  reason about, ``key % 10 = 3``, are :class:`Opaque` leaves, computed on rows only) and the constructors
  another translator (Spark's pushed filters) builds them with: ``and_(equal("region", "EU"),
  greater_than(column("s", "a"), 10))``.
- :mod:`~txnlog.expressions.parser`: SQL text to a tree (sqlglot, loaded on first use).
- :mod:`~txnlog.expressions.binding`: a tree resolved against a schema (types, physical names).
- :mod:`~txnlog.expressions.stats`: may a file hold a matching row (partition values, min/max/nullCount).
- :mod:`~txnlog.expressions.rows`: the rows a bound expression is TRUE on (:class:`RowFilter`).
- :mod:`~txnlog.expressions.values`: value expressions (``amount * 2``, ``CASE``, ``upper(x)``)
  for DML's SET clauses and MERGE conditions, parsed by :func:`parse_value`, computed on Arrow.
- :mod:`~txnlog.expressions.foreign`: filters in other libraries' forms (pyarrow expressions, DNF
  tuples) translated into the tree.
- :mod:`~txnlog.expressions.portable`: whether an expression computes the same in any ANSI SQL
  engine as here (an engine may then hand a small statement to txnlog's evaluator).
- :class:`FilePredicate`: all of it for one table, parsed and bound once.
"""

from txnlog.expressions.binding import MAX_PREDICATE_TERMS, BoundExpression, bind
from txnlog.expressions.foreign import Filter, approximate_arrow, arrow_columns, as_expression, from_arrow, from_dnf
from txnlog.expressions.parser import MAX_PREDICATE_NESTING, MAX_PREDICATE_TOKENS, parse, parse_value, requalify
from txnlog.expressions.portable import Portability, portable_equality
from txnlog.expressions.predicate import FilePredicate
from txnlog.expressions.rows import RowFilter, row_filter
from txnlog.expressions.stats import may_match
from txnlog.expressions.tree import (
    ALWAYS_FALSE,
    ALWAYS_TRUE,
    And,
    ColumnComparison,
    Comparison,
    Constant,
    Expression,
    In,
    IsNull,
    Like,
    Opaque,
    Or,
    Reference,
    and_,
    column,
    compare,
    conjunction,
    contains,
    ends_with,
    equal,
    equal_null_safe,
    greater_than,
    greater_than_or_equal,
    is_in,
    is_not_null,
    is_null,
    less_than,
    less_than_or_equal,
    like,
    literal,
    not_,
    not_equal,
    not_in,
    or_,
    starts_with,
)
from txnlog.expressions.values import (
    COMPARISONS,
    CaseValue,
    CastValue,
    ColumnValue,
    FunctionCall,
    InList,
    LikeValue,
    LiteralValue,
    NullTest,
    Operation,
    ValueExpression,
    condition_mask,
    evaluate_value,
    target_columns_read,
)

__all__ = [
    "ALWAYS_FALSE",
    "ALWAYS_TRUE",
    "COMPARISONS",
    "MAX_PREDICATE_NESTING",
    "MAX_PREDICATE_TERMS",
    "MAX_PREDICATE_TOKENS",
    "And",
    "BoundExpression",
    "CaseValue",
    "CastValue",
    "ColumnComparison",
    "ColumnValue",
    "Comparison",
    "Constant",
    "Expression",
    "FilePredicate",
    "Filter",
    "FunctionCall",
    "In",
    "InList",
    "IsNull",
    "Like",
    "LikeValue",
    "LiteralValue",
    "NullTest",
    "Opaque",
    "Operation",
    "Or",
    "Portability",
    "Reference",
    "RowFilter",
    "ValueExpression",
    "and_",
    "approximate_arrow",
    "arrow_columns",
    "as_expression",
    "bind",
    "column",
    "compare",
    "condition_mask",
    "conjunction",
    "contains",
    "ends_with",
    "equal",
    "equal_null_safe",
    "evaluate_value",
    "from_arrow",
    "from_dnf",
    "greater_than",
    "greater_than_or_equal",
    "is_in",
    "is_not_null",
    "is_null",
    "less_than",
    "less_than_or_equal",
    "like",
    "literal",
    "may_match",
    "not_",
    "not_equal",
    "not_in",
    "or_",
    "parse",
    "parse_value",
    "requalify",
    "portable_equality",
    "row_filter",
    "starts_with",
    "target_columns_read",
]
