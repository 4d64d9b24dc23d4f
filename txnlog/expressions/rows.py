"""The row visitor: a bound expression as an Arrow compute expression over a table's rows.

:func:`row_filter` is true exactly on the rows where the expression is TRUE and false elsewhere
(never null), so its negation selects the rows a DELETE keeps.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.expressions.binding import (
    BoundAnd,
    BoundColumnComparison,
    BoundComparison,
    BoundConstant,
    BoundExpression,
    BoundIn,
    BoundIsNull,
    BoundJunction,
    BoundLike,
)

_ARROW_COMPARE: dict[str, Callable[..., pc.Expression]] = {
    "=": pc.equal,
    "<>": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def arrow_expression(node: BoundExpression, physical: bool = False) -> pc.Expression:
    """``node`` as an Arrow expression: TRUE where it is TRUE, FALSE or null elsewhere."""
    if isinstance(node, BoundJunction):
        # Pairwise, so that thousands of terms make a tree of logarithmic depth: Arrow evaluates
        # expressions recursively.
        level = [arrow_expression(child, physical) for child in node.children]
        kleene = pc.and_kleene if isinstance(node, BoundAnd) else pc.or_kleene  # NULL-aware
        while len(level) > 1:
            paired = [kleene(a, b) for a, b in zip(level[::2], level[1::2])]
            level = paired + level[len(paired) * 2 :]
        return level[0]
    if isinstance(node, BoundConstant):
        return pc.scalar(node.value)
    if isinstance(node, BoundComparison):
        return _ARROW_COMPARE[node.op](node.column.ref(physical), node.value)
    if isinstance(node, BoundColumnComparison):
        return _ARROW_COMPARE[node.op](node.left.ref(physical), node.right.ref(physical))
    if isinstance(node, BoundIn):
        ref = node.column.ref(physical)
        found = pc.is_in(ref, value_set=node.values)
        if node.negated:  # is_in says False for a null input: NOT IN must not be TRUE there
            return pc.and_kleene(pc.is_valid(ref), pc.invert(found))
        return found
    if isinstance(node, BoundIsNull):
        ref = node.column.ref(physical)
        return pc.is_valid(ref) if node.negated else pc.is_null(ref)
    if isinstance(node, BoundLike):
        found = pc.match_like(node.column.ref(physical), node.pattern, ignore_case=node.ignore_case)
        return pc.invert(found) if node.negated else found
    raise AssertionError(f"unhandled expression node {node!r}")


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


__all__ = ["arrow_expression", "evaluate", "row_filter"]
