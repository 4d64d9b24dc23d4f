"""Binding: an expression tree resolved against a table's schema.

:func:`bind` turns column names into :class:`BoundColumn` (the schema's spelling, the Arrow type,
the physical names stats and partition values use under column mapping) and casts each literal to
its column's type, folding what the types decide (``int_column = 1.5`` is never TRUE). The bound
tree is what the visitors evaluate: :mod:`txnlog.expressions.stats` on file stats and
:mod:`txnlog.expressions.rows` on rows.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidPredicateError
from txnlog.expressions.tree import (
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
)
from txnlog.expressions.values import ValueExpression
from txnlog.file_facts import physical_name, string_converter

# Decimals with at most this many digits survive a round trip through a double.
EXACT_DOUBLE_DIGITS = 15
# More conditions than this are refused: Arrow crashes evaluating expressions of ~20,000 terms.
MAX_PREDICATE_TERMS = 4_096


@dataclass(frozen=True, slots=True)
class BoundColumn:
    name: str  # the top-level column, in the schema's case
    path: tuple[str, ...]  # logical names from the top-level column down
    physical: tuple[str, ...]  # the same path as named in stats and partition values
    type: pa.DataType

    def ref(self, physical: bool = False) -> pc.Expression:
        return pc.field(*(self.physical if physical else self.path))

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


class BoundExpression:
    """A bound expression in negation normal form: every node is TRUE exactly where it says."""

    __slots__ = ()

    def leaves(self) -> Iterator[BoundExpression]:
        yield self

    def columns(self) -> Iterator[BoundColumn]:
        return iter(())


@dataclass(frozen=True, slots=True)
class BoundConstant(BoundExpression):
    value: bool


@dataclass(frozen=True, slots=True)
class BoundJunction(BoundExpression):
    """AND or OR of two or more children."""

    children: tuple[BoundExpression, ...]

    def leaves(self) -> Iterator[BoundExpression]:
        for child in self.children:
            yield from child.leaves()


@dataclass(frozen=True, slots=True)
class BoundAnd(BoundJunction):
    pass


@dataclass(frozen=True, slots=True)
class BoundOr(BoundJunction):
    pass


@dataclass(frozen=True, slots=True)
class BoundComparison(BoundExpression):
    """``column op value``, the value of the column's type and never null."""

    column: BoundColumn
    op: str
    value: pa.Scalar

    def columns(self) -> Iterator[BoundColumn]:
        yield self.column


@dataclass(frozen=True, slots=True)
class BoundColumnComparison(BoundExpression):
    left: BoundColumn
    op: str
    right: BoundColumn

    def columns(self) -> Iterator[BoundColumn]:
        yield self.left
        yield self.right


@dataclass(frozen=True, slots=True)
class BoundIn(BoundExpression):
    """``column [NOT] IN (values)``, values all non-null (NULLs in the list are resolved when binding)."""

    column: BoundColumn
    values: pa.Array
    negated: bool

    def columns(self) -> Iterator[BoundColumn]:
        yield self.column


@dataclass(frozen=True, slots=True)
class BoundIsNull(BoundExpression):
    column: BoundColumn
    negated: bool

    def columns(self) -> Iterator[BoundColumn]:
        yield self.column


@dataclass(frozen=True, slots=True)
class BoundLike(BoundExpression):
    column: BoundColumn
    pattern: str
    negated: bool
    ignore_case: bool

    def columns(self) -> Iterator[BoundColumn]:
        yield self.column

    def literal_prefix(self) -> str:
        """The characters every match starts with (up to the first wildcard or escape)."""
        out = []
        for ch in self.pattern:
            if ch in "%_\\":
                break
            out.append(ch)
        return "".join(out)


@dataclass(frozen=True, slots=True)
class BoundOpaque(BoundExpression):
    """A condition only rows can compute (see :class:`~txnlog.expressions.tree.Opaque`), with
    each column reference it makes resolved. ``negated``: TRUE where the condition is FALSE."""

    value: ValueExpression
    sql: str
    negated: bool
    references: tuple[tuple[Reference, BoundColumn], ...]

    def columns(self) -> Iterator[BoundColumn]:
        for _, column in self.references:
            yield column


def has_opaque(node: BoundExpression) -> bool:
    """Does ``node`` hold a condition only rows can compute?"""
    return any(isinstance(leaf, BoundOpaque) for leaf in node.leaves())


def bound_columns(node: BoundExpression) -> list[BoundColumn]:
    """Every column reference under ``node``, in order, with repeats."""
    return [c for leaf in node.leaves() for c in leaf.columns()]


def _junction(kind: type[BoundJunction], children: Iterable[BoundExpression]) -> BoundExpression:
    """``kind`` of ``children``, flattened, with constants folded."""
    absorbing = kind is BoundOr  # TRUE OR x is TRUE; FALSE AND x is FALSE
    flat: list[BoundExpression] = []
    for child in children:
        if isinstance(child, BoundConstant):
            if child.value == absorbing:
                return child
            continue
        flat.extend(child.children if isinstance(child, kind) else (child,))
    if not flat:
        return BoundConstant(not absorbing)
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


def _without_implied_not_null(children: list[BoundExpression]) -> list[BoundExpression]:
    """The children of an AND without ``c IS NOT NULL`` where a sibling comparison on ``c``
    already requires it (``c <=> 1`` is built as ``c IS NOT NULL AND c = 1``)."""
    implied = {c.path for child in children if isinstance(child, (BoundComparison, BoundIn, BoundLike))
               for c in child.columns()}
    if not implied:
        return children
    return [child for child in children
            if not (isinstance(child, BoundIsNull) and child.negated and child.column.path in implied)]


def is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def cast_literal(
    value: pa.Scalar, target: pa.DataType, what: str, error: Callable[[str], InvalidPredicateError]
) -> pa.Scalar:
    """``value`` cast to ``target`` the way Spark reads a literal for a column of that type."""
    if value.type == target:
        return value
    try:
        if is_string(value.type) and not is_string(target) and not pa.types.is_binary(target):
            out = string_converter(target)(pa.array([value.as_py()], pa.string()))[0]
        elif pa.types.is_decimal(target) and is_number(value.type):
            # Through Python's Decimal: Arrow wants 19 digits for any int64 -> decimal cast.
            out = pa.scalar(decimal.Decimal(str(value.as_py())), target)
        else:
            out = value.cast(target)
        if pa.types.is_date(target) and pa.types.is_timestamp(value.type) and out.cast(value.type) != value:
            raise ValueError("it has a time of day")
        if out.is_valid is False:
            raise ValueError("it is not a value of that type")
        return out
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError, OverflowError,
            decimal.InvalidOperation) as e:
        raise error(f"has {what} = {value.as_py()!r}, which cannot be cast to {target}: {e}") from None


class _ErrorFactory:
    """Errors that name the predicate as the user wrote it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __call__(self, what: str) -> InvalidPredicateError:
        return InvalidPredicateError(f"predicate {self.text!r} {what}", predicate=self.text)


class _Binder:
    def __init__(self, schema: pa.Schema, physical_names: Mapping[str, str] | None, text: str) -> None:
        self.schema = schema
        self.error = _ErrorFactory(text)
        self.by_lower = {f.name.lower(): f for f in schema}
        self.column_mapping = physical_names is not None
        self.physical_names = dict(physical_names or {})

    def resolve_top(self, name: str) -> pa.Field:
        field = self.by_lower.get(name.lower())
        if field is None:
            raise self.error(f"refers to unknown column '{name}' (columns: {', '.join(self.schema.names)})")
        return field

    def column(self, ref: Reference) -> BoundColumn:
        if not isinstance(ref, Reference):
            raise self.error(f"has {ref!r} where a column reference was expected")
        field = self.resolve_top(ref.path[0])
        path, physical = [field.name], [self.physical_names.get(field.name, field.name)]
        for name in ref.path[1:]:
            if not pa.types.is_struct(field.type):
                raise self.error(f"refers to field '{name}' of '{'.'.join(path)}', which is not a struct")
            children = {field.type.field(i).name.lower(): field.type.field(i) for i in range(field.type.num_fields)}
            child = children.get(name.lower())
            if child is None:
                raise self.error(f"refers to unknown field '{name}' of struct column '{'.'.join(path)}'")
            field = child
            path.append(field.name)
            physical.append(physical_name(field, self.column_mapping) if self.column_mapping else field.name)
        return BoundColumn(path[0], tuple(path), tuple(physical), field.type)

    def bind(self, node: Expression) -> BoundExpression:
        if isinstance(node, And):
            return _junction(BoundAnd, _without_implied_not_null([self.bind(child) for child in node.children]))
        if isinstance(node, Or):
            return _junction(BoundOr, [self.bind(child) for child in node.children])
        if isinstance(node, Constant):
            return BoundConstant(node.value is True)  # NULL is never TRUE
        if isinstance(node, Comparison):
            column = self.column(node.column)
            if node.value is None or not node.value.is_valid:
                return BoundConstant(False)  # a comparison with NULL is never TRUE, nor is its negation
            return self.compare(column, node.op, node.value)
        if isinstance(node, ColumnComparison):
            left, right = self.column(node.left), self.column(node.right)
            self.check_comparable(left, right)
            return BoundColumnComparison(left, node.op, right)
        if isinstance(node, In):
            return self.bind_in(node)
        if isinstance(node, IsNull):
            return BoundIsNull(self.column(node.column), node.negated)
        if isinstance(node, Like):
            return self.bind_like(node)
        if isinstance(node, Opaque):
            references = tuple((ref, self.column(ref)) for ref in node.references())
            return BoundOpaque(node.value, node.sql, node.negated, references)
        raise self.error(f"holds {type(node).__name__}, which is not an expression node")

    def compare(self, column: BoundColumn, op: str, value: pa.Scalar) -> BoundExpression:
        if pa.types.is_boolean(value.type) and not pa.types.is_boolean(column.type):
            raise self.error(f"uses column '{column.dotted}' of type {column.type} where a boolean is needed")
        if pa.types.is_boolean(column.type) and pa.types.is_boolean(value.type) and op == "<>":
            op, value = "=", pa.scalar(not value.as_py())  # on booleans, x <> TRUE is x = FALSE
        if pa.types.is_integer(column.type) and is_number(value.type) and not pa.types.is_integer(value.type):
            v = value.as_py()
            if isinstance(v, float) and not math.isfinite(v):
                raise self.error(f"compares integer column '{column.dotted}' with {v}")
            if v != int(v):  # a fraction: no integer equals it, and the bound rounds inwards
                if op == "=":
                    return BoundConstant(False)
                if op == "<>":
                    return BoundIsNull(column, negated=True)
                op, v = ("<=", math.floor(v)) if op in ("<", "<=") else (">=", math.ceil(v))
            value = pa.scalar(decimal.Decimal(int(v))) if abs(v) >= 2**63 else pa.scalar(int(v))
        coerced = cast_literal(value, column.type, f"a literal for column '{column.dotted}'", self.error)
        return BoundComparison(column, op, coerced)

    def check_comparable(self, left: BoundColumn, right: BoundColumn) -> None:
        try:
            pc.equal(pa.nulls(1, left.type), pa.nulls(1, right.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raise self.error(
                f"compares column '{left.dotted}' ({left.type}) with column '{right.dotted}' ({right.type})"
            ) from None

    def bind_in(self, node: In) -> BoundExpression:
        column = self.column(node.column)
        if not node.values:
            raise self.error("has an empty IN list")
        literals = [v if v is not None and v.is_valid else None for v in node.values]
        if node.negated and None in literals:
            return BoundConstant(False)  # x NOT IN (.., NULL) is never TRUE
        leaves = [self.compare(column, "=", v) for v in literals if v is not None]
        values = [leaf.value for leaf in leaves if isinstance(leaf, BoundComparison)]  # fractions vs ints drop out
        if not values:
            return BoundIsNull(column, negated=True) if node.negated else BoundConstant(False)
        return BoundIn(column, pa.array([v.as_py() for v in values], column.type), node.negated)

    def bind_like(self, node: Like) -> BoundExpression:
        column = self.column(node.column)
        if not is_string(column.type):
            raise self.error(f"uses LIKE on non-string column '{column.dotted}' ({column.type})")
        if node.pattern is None:
            return BoundConstant(False)
        if not isinstance(node.pattern, str):
            raise self.error(f"uses a non-string LIKE pattern {node.pattern!r}")
        return BoundLike(column, node.pattern, node.negated, node.ignore_case)


def bind(
    expression: Expression,
    schema: pa.Schema,
    *,
    physical_names: Mapping[str, str] | None = None,
    text: str | None = None,
) -> BoundExpression:
    """``expression`` resolved against ``schema``: columns case-insensitively, struct fields by
    path, literals cast to their column's type. With column mapping, ``physical_names`` maps each
    top-level column to the name stats and partition values use (None: no column mapping).
    Errors are :class:`InvalidPredicateError` naming ``text`` (the expression as SQL by default)."""
    if not isinstance(expression, Expression):
        raise InvalidPredicateError(
            f"a predicate must be an expression tree, not {type(expression).__name__}", predicate=repr(expression)
        )
    binder = _Binder(schema, physical_names, str(expression) if text is None else text)
    try:
        bound = binder.bind(expression)
    except RecursionError:
        raise binder.error("nests too deeply") from None
    terms = sum(1 for _ in bound.leaves())
    if terms > MAX_PREDICATE_TERMS:
        raise binder.error(f"has too many conditions ({terms}; at most {MAX_PREDICATE_TERMS} are accepted)")
    return bound


__all__ = [
    "MAX_PREDICATE_TERMS",
    "BoundAnd",
    "BoundColumn",
    "BoundColumnComparison",
    "BoundComparison",
    "BoundConstant",
    "BoundExpression",
    "BoundIn",
    "BoundIsNull",
    "BoundJunction",
    "BoundLike",
    "BoundOpaque",
    "BoundOr",
    "bind",
    "bound_columns",
    "cast_literal",
    "has_opaque",
    "is_number",
    "is_string",
]
