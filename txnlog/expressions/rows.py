"""The row visitor: which rows of a table a bound expression is TRUE on.

:class:`RowFilter` gives a mask true exactly on the rows where the expression is TRUE and false
elsewhere (never null), and ``~`` the rows a DELETE keeps. A tree of comparisons is one Arrow
expression (:func:`row_filter`), evaluated by Acero or usable by a dataset. A tree holding
:class:`~txnlog.expressions.binding.BoundOpaque` conditions (``key % 10 = 3``) has no Arrow
expression: it is computed eagerly on each table, the same visitor on arrays, its opaque leaves by
:mod:`txnlog.expressions.values`' evaluator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidPredicateError
from txnlog.expressions.binding import (
    BoundAnd,
    BoundColumn,
    BoundColumnComparison,
    BoundComparison,
    BoundConstant,
    BoundExpression,
    BoundIn,
    BoundIsNull,
    BoundJunction,
    BoundLike,
    BoundOpaque,
    has_opaque,
)
from txnlog.expressions.tree import Reference
from txnlog.expressions.values import evaluate_value

_ARROW_COMPARE: dict[str, Callable[..., Any]] = {
    "=": pc.equal,
    "<>": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _visit(
    node: BoundExpression,
    column: Callable[[BoundColumn], Any],
    constant: Callable[[bool], Any],
    opaque: Callable[[BoundOpaque], Any],
) -> Any:
    """``node`` built from compute functions over ``column(c)`` values: an Arrow expression when
    those are field references, arrays when they are a table's columns. TRUE where ``node`` is
    TRUE, FALSE or null elsewhere."""
    if isinstance(node, BoundJunction):
        # Pairwise, so that thousands of terms make a tree of logarithmic depth: Arrow evaluates
        # expressions recursively.
        level = [_visit(child, column, constant, opaque) for child in node.children]
        kleene = pc.and_kleene if isinstance(node, BoundAnd) else pc.or_kleene  # NULL-aware
        while len(level) > 1:
            paired = [kleene(a, b) for a, b in zip(level[::2], level[1::2])]
            level = paired + level[len(paired) * 2 :]
        return level[0]
    if isinstance(node, BoundConstant):
        return constant(node.value)
    if isinstance(node, BoundComparison):
        return _ARROW_COMPARE[node.op](column(node.column), node.value)
    if isinstance(node, BoundColumnComparison):
        return _ARROW_COMPARE[node.op](column(node.left), column(node.right))
    if isinstance(node, BoundIn):
        ref = column(node.column)
        found = pc.is_in(ref, value_set=node.values)
        if node.negated:  # is_in says False for a null input: NOT IN must not be TRUE there
            return pc.and_kleene(pc.is_valid(ref), pc.invert(found))
        return found
    if isinstance(node, BoundIsNull):
        ref = column(node.column)
        return pc.is_valid(ref) if node.negated else pc.is_null(ref)
    if isinstance(node, BoundLike):
        found = pc.match_like(column(node.column), node.pattern, ignore_case=node.ignore_case)
        return pc.invert(found) if node.negated else found
    if isinstance(node, BoundOpaque):
        return opaque(node)
    raise AssertionError(f"unhandled expression node {node!r}")


def arrow_expression(node: BoundExpression, physical: bool = False) -> pc.Expression:
    """``node`` as an Arrow expression: TRUE where it is TRUE, FALSE or null elsewhere. A tree
    holding an opaque condition has none (InvalidPredicateError)."""

    def refuse(leaf: BoundOpaque) -> pc.Expression:
        raise InvalidPredicateError(
            f"condition {leaf.sql!r} has no Arrow expression: it is computed on rows only (FilePredicate.rows())",
            predicate=leaf.sql,
        )

    expression: pc.Expression = _visit(node, lambda c: c.ref(physical), pc.scalar, refuse)
    return expression


def row_filter(node: BoundExpression, *, physical: bool = False) -> pc.Expression:
    """An expression true exactly where ``node`` is TRUE, false elsewhere (never null).

    Field references use the logical names, or the physical ones (as in data files under column
    mapping) when asked.
    """
    return pc.coalesce(arrow_expression(node, physical), pc.scalar(False))


def evaluate(expression: pc.Expression, table: pa.Table) -> pa.Array:
    """``expression`` computed on each row of ``table``, in row order."""
    import pyarrow.acero as acero  # deferred: Acero's engine (7 MiB resident) for predicates only

    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
            acero.Declaration("project", acero.ProjectNodeOptions([expression], ["value"])),
        ]
    )
    out = plan.to_table(use_threads=False).column("value")
    return out.combine_chunks() if out.num_chunks != 1 else out.chunk(0)


class RowFilter:
    """The rows of a table on which a bound expression is TRUE (or, after ``~``, the rows where
    it is not: FALSE or NULL, the rows a DELETE keeps). ``text`` names the predicate in errors."""

    __slots__ = ("_expression", "_opaque_leaves", "inverted", "physical", "text", "tree")

    def __init__(self, tree: BoundExpression, *, physical: bool = False, inverted: bool = False, text: str = "") -> None:
        self.tree = tree
        self.physical = physical
        self.inverted = inverted
        self.text = text
        self._expression: pc.Expression | None = None
        self._opaque_leaves = has_opaque(tree)

    @property
    def expression(self) -> pc.Expression | None:
        """The mask as one Arrow expression; None when the tree holds an opaque condition."""
        if self._expression is None and not self._opaque_leaves:
            expression = row_filter(self.tree, physical=self.physical)
            self._expression = pc.invert(expression) if self.inverted else expression
        return self._expression

    def __invert__(self) -> RowFilter:
        return RowFilter(self.tree, physical=self.physical, inverted=not self.inverted, text=self.text)

    def __repr__(self) -> str:
        return f"RowFilter({self.text!r}{', inverted' if self.inverted else ''})"

    def mask(self, table: pa.Table) -> pa.Array:
        """Per row of ``table`` (holding the columns the expression reads): whether it is selected."""
        expression = self.expression
        if expression is not None:
            return evaluate(expression, table)
        values = _visit(self.tree, lambda c: self._column(table, c), pa.scalar, lambda leaf: self._opaque(table, leaf))
        if isinstance(values, pa.Scalar):
            values = pa.repeat(values.cast(pa.bool_()), table.num_rows)
        elif isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
        selected = pc.fill_null(values, False)
        return pc.invert(selected) if self.inverted else selected

    def _column(self, table: pa.Table, column: BoundColumn) -> Any:
        path = column.physical if self.physical else column.path
        if path[0] not in table.column_names:
            raise InvalidPredicateError(
                f"predicate {self.text!r} reads column '{path[0]}', which the rows do not hold ({', '.join(table.column_names)})",
                predicate=self.text,
            )
        values = table.column(path[0])
        for name in path[1:]:
            values = pc.struct_field(values, [name])
        return values

    def _opaque(self, table: pa.Table, leaf: BoundOpaque) -> Any:
        """The condition's value per row (TRUE, FALSE or NULL), negated as the leaf says."""
        columns = dict(leaf.references)

        def resolve(ref: Reference) -> Any:
            return self._column(table, columns[ref])

        try:
            values = evaluate_value(leaf.value, resolve, table.num_rows, text=leaf.sql)
        except InvalidPredicateError as e:
            raise InvalidPredicateError(f"predicate {self.text!r}: {e}", predicate=self.text) from None
        if values.type == pa.null():
            return pa.scalar(None, pa.bool_())
        if not pa.types.is_boolean(values.type):
            raise InvalidPredicateError(
                f"predicate {self.text!r} uses {leaf.sql!r}, a value of type {values.type}, where a condition (true or false) is expected",
                predicate=self.text,
            )
        # NOT of NULL is NULL: the row is selected neither way.
        return pc.invert(values) if leaf.negated else values


__all__ = ["RowFilter", "arrow_expression", "evaluate", "row_filter"]
