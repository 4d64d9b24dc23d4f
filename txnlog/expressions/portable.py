"""Portability: whether an expression computes the same in any ANSI SQL engine as in txnlog.

An engine that runs SQL of its own (Spark) may hand a small statement to txnlog's evaluator
instead, reading the rows on one machine, only when both give the same rows and values. This
visitor says when, conservatively: comparisons of values of one kind (integers and decimals,
strings, booleans, dates), ``%`` by a non-zero constant, case-sensitive LIKE, IN, IS NULL, CASE
and a few functions with no overflow and no character tables of their own. Anything else
(floating point, whose NaN engines order their own way; arithmetic that may overflow; casts;
timestamps; nested values) is not portable. ANSI mode is assumed: where an engine would fail on
a row, txnlog's evaluator fails too or the expression is not portable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from txnlog.errors import TxnLogError
from txnlog.expressions import values as v
from txnlog.expressions.parser import parse_value
from txnlog.expressions.tree import And, ColumnComparison, Comparison, Constant, Expression, In, IsNull, Like, Opaque, Or, Reference

# Categories of values whose comparisons engines agree on without a cast.
_NUMBER, _TEXT, _BOOL, _DATE, _NULL = "number", "text", "bool", "date", "null"
# Functions computed alike: no overflow, no whitespace or Unicode case table of their own.
_FUNCTIONS_ALIKE = {"coalesce": None, "nullif": None, "if": None, "concat": _TEXT, "length": _NUMBER}


def _category(t: pa.DataType | None) -> str | None:
    if t is None or pa.types.is_null(t):
        return _NULL
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return _NUMBER
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _TEXT
    if pa.types.is_boolean(t):
        return _BOOL
    if pa.types.is_date(t):
        return _DATE
    return None  # floating point, timestamps, binary, nested: not portable


def _same(*categories: str | None) -> str | None:
    known = {c for c in categories if c != _NULL}
    if None in known or len(known) > 1:
        return None
    return known.pop() if known else _NULL


def _non_zero_literal(node: Any) -> bool:
    return isinstance(node, v.LiteralValue) and node.value is not None and node.value.is_valid and node.value.as_py() != 0


class Portability:
    """The visitor: which expressions over columns of ``sides`` are portable. ``sides`` maps an
    alias (``"t"``, ``"s"``; ``""`` for unqualified names only) to its columns' Arrow types; a
    bare name is whichever side has it, and a name two sides have is not portable (an engine
    refuses it as ambiguous)."""

    def __init__(self, sides: Mapping[str, Mapping[str, pa.DataType]]) -> None:
        self.sides = {alias.lower(): {name.lower(): t for name, t in types.items()} for alias, types in sides.items()}

    @classmethod
    def of_schema(cls, schema: pa.Schema) -> Portability:
        """For expressions over one table's columns, unqualified."""
        return cls({"": {f.name: f.type for f in schema}})

    def type_of(self, ref: Reference) -> pa.DataType | None:
        path = [p.lower() for p in ref.path]
        if len(path) == 2 and path[0] in self.sides and path[0]:
            return self.sides[path[0]].get(path[1])
        if len(path) == 1:
            found = [side[path[0]] for side in self.sides.values() if path[0] in side]
            return found[0] if len(found) == 1 else None
        return None

    def column(self, ref: Reference) -> str | None:
        return _category(self.type_of(ref))

    def literal(self, value: pa.Scalar | None) -> str | None:
        return _NULL if value is None else _category(value.type)

    def condition(self, node: Expression) -> bool:
        """Whether a predicate tree selects the same rows everywhere."""
        if isinstance(node, (And, Or)):
            return all(self.condition(c) for c in node.children)
        if isinstance(node, Constant):
            return True
        if isinstance(node, Comparison):
            return _same(self.column(node.column), self.literal(node.value)) is not None
        if isinstance(node, ColumnComparison):
            return _same(self.column(node.left), self.column(node.right)) is not None
        if isinstance(node, In):
            return _same(self.column(node.column), *(self.literal(v) for v in node.values)) is not None
        if isinstance(node, IsNull):
            return self.column(node.column) is not None
        if isinstance(node, Like):
            return self.column(node.column) == _TEXT and not node.ignore_case
        if isinstance(node, Opaque):
            return self.value(node.value) == _BOOL
        return False

    def value(self, node: v.ValueExpression) -> str | None:
        """The category of a portable value expression, None when it is not portable."""
        if isinstance(node, v.ColumnValue):
            return self.column(node.ref)
        if isinstance(node, v.LiteralValue):
            return self.literal(node.value)
        if isinstance(node, v.NullTest):
            return _BOOL if self.value(node.operand) is not None else None
        if isinstance(node, v.LikeValue):
            return _BOOL if self.value(node.operand) == _TEXT and not node.ignore_case else None
        if isinstance(node, v.InList):
            return _BOOL if _same(self.value(node.operand), *(self.value(i) for i in node.items)) is not None else None
        if isinstance(node, v.CaseValue):
            if not all(self.value(c) == _BOOL for c, _ in node.branches):
                return None
            results = [self.value(v) for _, v in node.branches]
            return _same(*results, *([self.value(node.otherwise)] if node.otherwise is not None else []))
        if isinstance(node, v.Operation):
            kinds = [self.value(o) for o in node.operands]
            if node.op in ("AND", "OR", "NOT"):
                return _BOOL if all(k in (_BOOL, _NULL) for k in kinds) else None
            if node.op in v.COMPARISONS:
                return _BOOL if len(kinds) == 2 and _same(*kinds) is not None else None
            if node.op == "%" and len(kinds) == 2 and _same(*kinds) == _NUMBER and _non_zero_literal(node.operands[1]):
                return _NUMBER
            return None  # + - * may overflow, / gives a double; || and the rest are left out
        if isinstance(node, v.FunctionCall) and node.name in _FUNCTIONS_ALIKE:
            kinds = [self.value(a) for a in node.args]
            result = _FUNCTIONS_ALIKE[node.name]
            if node.name == "if":
                return _same(*kinds[1:]) if len(kinds) == 3 and kinds[0] == _BOOL else None
            if result is None:
                return _same(*kinds)
            return result if kinds and all(k in (_TEXT, _NULL) for k in kinds) else None
        return None

    def is_condition(self, node: v.ValueExpression) -> bool:
        """Whether a boolean value expression (a DML condition) is portable."""
        return self.value(node) == _BOOL

    def assigns(self, text: str, column: pa.DataType) -> bool:
        """Whether the SQL ``text`` gives the same value everywhere once stored in a column of
        type ``column``: a column of an interchangeable type, NULL, or a text, boolean or date
        expression of the column's kind (numbers are left out: engines' casts round and
        overflow their own way)."""
        try:
            node = parse_value(text)
        except TxnLogError:
            return False
        if isinstance(node, v.ColumnValue):
            return interchangeable(self.type_of(node.ref), column)
        if isinstance(node, v.LiteralValue) and node.value is None:
            return True
        kind = self.value(node)
        return kind in (_TEXT, _BOOL, _DATE) and kind == _category(column)


def interchangeable(value: pa.DataType | None, column: pa.DataType) -> bool:
    """Whether a value of type ``value`` stored in a column of type ``column`` is unchanged:
    the same type, or the same kind whose Arrow layout differs."""
    if value is None:
        return False
    if value == column:
        return True
    for kind in (pa.types.is_string, pa.types.is_large_string), (pa.types.is_binary, pa.types.is_large_binary):
        if any(k(value) for k in kind) and any(k(column) for k in kind):
            return True
    return (pa.types.is_timestamp(value) and pa.types.is_timestamp(column) and value.unit == column.unit
            and value.tz is not None and column.tz is not None)  # one instant, shown in another zone


def portable_equality(left: pa.DataType | None, right: pa.DataType | None) -> bool:
    """Whether ``left = right`` (a join key) means the same everywhere: one exact type, not
    floating point (engines' joins make NaN equal to NaN) and not nested."""
    return left is not None and left == right and not pa.types.is_floating(left) and not pa.types.is_nested(left)


__all__ = ["Portability", "interchangeable", "portable_equality"]
