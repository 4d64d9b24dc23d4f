"""Value expressions: SQL that computes a value per row (``amount * 1.1``, ``upper(s.name)``,
``CASE WHEN ... END``), as the SET clauses and MERGE conditions of row-level DML need.

The boolean tree of :mod:`txnlog.expressions.tree` is what file skipping reasons about; a value
expression is only evaluated, row by row, on Arrow data. :func:`parse_value` (in
:mod:`txnlog.expressions.parser`, the same SQL parser) builds the tree below; :func:`evaluate_value`
computes it with ``pyarrow.compute``, with SQL's NULL semantics: NULL in, NULL out, a NULL
condition is not TRUE. Columns are resolved by the caller, who knows what ``t.`` and ``s.`` mean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidPredicateError
from txnlog.expressions.tree import Reference

ARITHMETIC = ("+", "-", "*", "/", "%")
COMPARISONS = ("=", "<>", "<", "<=", ">", ">=", "<=>")
CONNECTIVES = ("AND", "OR")
#: Functions :func:`evaluate_value` computes, by their SQL name (lowercase).
FUNCTIONS = ("abs", "coalesce", "concat", "date_format", "date_trunc", "day", "hour", "if", "length", "lower", "ltrim", "minute",
             "month", "nullif", "rtrim", "second", "substring", "trim", "trunc", "upper", "year")


class ValueExpression:
    """A node of a value expression."""

    __slots__ = ()

    def children(self) -> tuple[ValueExpression, ...]:
        return ()

    def references(self) -> Iterator[Reference]:
        """Every column this expression reads."""
        pending: list[ValueExpression] = [self]
        while pending:
            node = pending.pop()
            if isinstance(node, ColumnValue):
                yield node.ref
            pending.extend(node.children())


@dataclass(frozen=True, slots=True)
class ColumnValue(ValueExpression):
    ref: Reference


@dataclass(frozen=True, slots=True)
class LiteralValue(ValueExpression):
    value: pa.Scalar | None  # None: an untyped NULL


@dataclass(frozen=True, slots=True)
class Operation(ValueExpression):
    """A unary (``-``, ``NOT``) or binary operator: arithmetic, ``||``, a comparison, AND, OR."""

    op: str
    operands: tuple[ValueExpression, ...]

    def children(self) -> tuple[ValueExpression, ...]:
        return self.operands


@dataclass(frozen=True, slots=True)
class NullTest(ValueExpression):
    operand: ValueExpression
    negated: bool = False

    def children(self) -> tuple[ValueExpression, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class InList(ValueExpression):
    operand: ValueExpression
    items: tuple[ValueExpression, ...]
    negated: bool = False

    def children(self) -> tuple[ValueExpression, ...]:
        return (self.operand, *self.items)


@dataclass(frozen=True, slots=True)
class LikeValue(ValueExpression):
    operand: ValueExpression
    pattern: str | None
    negated: bool = False
    ignore_case: bool = False

    def children(self) -> tuple[ValueExpression, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class CaseValue(ValueExpression):
    """``CASE WHEN c1 THEN v1 ... ELSE d END``: the first branch whose condition is TRUE."""

    branches: tuple[tuple[ValueExpression, ValueExpression], ...]
    otherwise: ValueExpression | None

    def children(self) -> tuple[ValueExpression, ...]:
        flat = [part for branch in self.branches for part in branch]
        return (*flat, self.otherwise) if self.otherwise is not None else tuple(flat)


@dataclass(frozen=True, slots=True)
class CastValue(ValueExpression):
    operand: ValueExpression
    to: pa.DataType

    def children(self) -> tuple[ValueExpression, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class FunctionCall(ValueExpression):
    """A function by its lowercase SQL name. Any name parses (so conditions meant for another
    engine still name their columns); :func:`evaluate_value` computes those in :data:`FUNCTIONS`."""

    name: str
    args: tuple[ValueExpression, ...]

    def children(self) -> tuple[ValueExpression, ...]:
        return self.args


def conjuncts(node: ValueExpression) -> list[ValueExpression]:
    """The terms of ``node``'s top-level AND (``[node]`` when it is not an AND)."""
    if isinstance(node, Operation) and node.op == "AND":
        return [term for operand in node.operands for term in conjuncts(operand)]
    return [node]


# --- evaluation ----------------------------------------------------------------------------------

# An array, chunked array or scalar (pyarrow has no type hints to say so).
Datum: TypeAlias = Any
#: A column reference's values (an array or chunked array); raises for a column it does not know.
Resolver: TypeAlias = Callable[[Reference], Any]

_COMPARE = {"=": pc.equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
_DATE_PARTS = {"year": pc.year, "month": pc.month, "day": pc.day, "hour": pc.hour, "minute": pc.minute, "second": pc.second}
# Spark's datetime pattern letters, as strftime spells them (the ones generation expressions use).
_SPARK_PATTERN = (("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S"))
# date_trunc / trunc units -> pyarrow's floor_temporal units.
_TRUNC_UNITS = {"YEAR": "year", "YYYY": "year", "YY": "year", "QUARTER": "quarter", "MONTH": "month", "MON": "month", "MM": "month",
                "WEEK": "week", "DAY": "day", "DD": "day", "HOUR": "hour", "MINUTE": "minute", "SECOND": "second"}
_STRING_FUNCTIONS = {
    "upper": pc.utf8_upper,
    "lower": pc.utf8_lower,
    "length": pc.utf8_length,
    "trim": pc.utf8_trim_whitespace,
    "ltrim": pc.utf8_ltrim_whitespace,
    "rtrim": pc.utf8_rtrim_whitespace,
}


def target_columns_read(nodes: Iterable[ValueExpression], columns: Sequence[str], *, target: str = "t", source: str = "s") -> list[str]:
    """Of ``columns`` (a MERGE target's), those ``nodes`` may read: ``t.x``, an unqualified
    ``x``, or a struct ``x`` whose field is read; never ``s.x``, the source's. In the order of
    ``columns``; names match case-insensitively."""
    by_lower = {c.lower(): c for c in columns}
    found: set[str] = set()
    for node in nodes:
        for ref in node.references():
            path = ref.path
            if len(path) > 1 and path[0].lower() == source.lower():
                continue
            name = path[1] if len(path) > 1 and path[0].lower() == target.lower() else path[0]
            if name.lower() in by_lower:
                found.add(by_lower[name.lower()])
    return [c for c in columns if c in found]


def evaluate_value(node: ValueExpression, resolve: Resolver, num_rows: int, *, text: str) -> pa.ChunkedArray:
    """``node`` computed on ``num_rows`` rows whose columns ``resolve`` gives (it raises for a
    column it does not know). ``text`` is the expression as the user wrote it, for errors."""
    try:
        result = _Evaluator(resolve, text).value(node)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError) as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InvalidPredicateError(f"expression {text!r} cannot be computed: {message}", predicate=text) from None
    if isinstance(result, pa.Scalar):
        result = pa.repeat(result, num_rows) if result.type != pa.null() else pa.nulls(num_rows)
    return result if isinstance(result, pa.ChunkedArray) else pa.chunked_array([result], result.type)


def condition_mask(node: ValueExpression, resolve: Resolver, num_rows: int, *, text: str) -> pa.ChunkedArray:
    """Per row: TRUE where ``node`` is TRUE, FALSE where it is FALSE or NULL."""
    values = evaluate_value(node, resolve, num_rows, text=text)
    if values.type == pa.null():
        return pa.chunked_array([pa.repeat(False, num_rows)], pa.bool_())
    if not pa.types.is_boolean(values.type):
        raise InvalidPredicateError(f"condition {text!r} is of type {values.type}, not boolean", predicate=text)
    return pc.fill_null(values, False)


def _zoned_from_text(text: Datum, to: pa.TimestampType) -> Datum:
    """Text cast to the zoned ``to``: a text without an offset is a wall clock in UTC (as
    ``TIMESTAMP'2024-05-02 00:00:00'`` is in txnlog's SQL), one with an offset is that instant."""
    try:
        return pc.cast(text, to)
    except pa.ArrowInvalid:  # no offset in some text: read as UTC wall clocks
        return pc.cast(pc.cast(text, pa.timestamp(to.unit)), to)


def _without_zone(values: Datum) -> Datum:
    """UTC timestamps as zone-free ones of the same unit, sharing their buffers."""
    naive = pa.timestamp(values.type.unit)
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([chunk.view(naive) for chunk in values.chunks], naive)
    if isinstance(values, pa.Array):
        return values.view(naive)
    return values.cast(naive)


def _is_integer(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t))


class _Evaluator:
    def __init__(self, resolve: Resolver, text: str) -> None:
        self.resolve = resolve
        self.text = text

    def error(self, what: str) -> InvalidPredicateError:
        return InvalidPredicateError(f"expression {self.text!r} {what}", predicate=self.text)

    def value(self, node: ValueExpression) -> Datum:
        if isinstance(node, ColumnValue):
            values = self.resolve(node.ref)
            if pa.types.is_timestamp(values.type) and values.type.tz not in (None, "UTC"):
                # The same instants, computed in UTC whatever zone the data carries (a Spark
                # session's, a pandas frame's): Arrow takes a zoned value's date in its zone.
                values = values.cast(pa.timestamp(values.type.unit, tz="UTC"))
            return values
        if isinstance(node, LiteralValue):
            return node.value if node.value is not None else pa.scalar(None)
        if isinstance(node, Operation):
            return self.operation(node)
        if isinstance(node, NullTest):
            operand = self.value(node.operand)
            return pc.is_valid(operand) if node.negated else pc.is_null(operand)
        if isinstance(node, InList):
            return self.in_list(node)
        if isinstance(node, LikeValue):
            operand = self.value(node.operand)
            if node.pattern is None or operand.type == pa.null():
                return pa.scalar(None, pa.bool_())
            found = pc.match_like(operand, node.pattern, ignore_case=node.ignore_case)
            return pc.invert(found) if node.negated else found
        if isinstance(node, CaseValue):
            return self.case(node)
        if isinstance(node, CastValue):
            operand = self.value(node.operand)
            if operand.type == pa.null():
                return pa.scalar(None, node.to)
            if pa.types.is_timestamp(operand.type) and operand.type.tz in ("UTC", "+00:00", "Etc/UTC") and not pa.types.is_string(node.to):
                # UTC instants are their wall-clock times: the zone-free cast gives the same values,
                # faster (and dropping the zone is a view of the same buffers)
                operand = _without_zone(operand)
            if pa.types.is_timestamp(node.to) and node.to.tz is not None and pa.types.is_string(operand.type):
                return _zoned_from_text(operand, node.to)
            return pc.cast(operand, node.to)
        if isinstance(node, FunctionCall):
            return self.function(node)
        raise AssertionError(f"unhandled value node {node!r}")

    def aligned(self, left: Datum, right: Datum) -> tuple[Datum, Datum]:
        """Operands of one type family: an untyped NULL takes the other side's type, a decimal
        meeting a float becomes a double, a string literal meeting a column of another type is
        cast to it (``day = '2024-05-01'``)."""
        lt, rt = left.type, right.type
        if lt == pa.null() and rt != pa.null():
            return pa.scalar(None, rt), right
        if rt == pa.null() and lt != pa.null():
            return left, pa.scalar(None, lt)
        if pa.types.is_decimal(lt) and pa.types.is_floating(rt):
            return pc.cast(left, pa.float64()), right
        if pa.types.is_floating(lt) and pa.types.is_decimal(rt):
            return left, pc.cast(right, pa.float64())
        if pa.types.is_string(lt) != pa.types.is_string(rt):
            if isinstance(right, pa.Scalar) and pa.types.is_string(rt):
                return left, pc.cast(right, lt)
            if isinstance(left, pa.Scalar) and pa.types.is_string(lt):
                return pc.cast(left, rt), right
        return left, right

    def operation(self, node: Operation) -> Datum:
        op = node.op
        if op == "NOT":
            operand = self.value(node.operands[0])
            return pc.invert(operand) if operand.type != pa.null() else pa.scalar(None, pa.bool_())
        if op == "NEG":
            operand = self.value(node.operands[0])
            return pc.negate_checked(operand) if operand.type != pa.null() else operand
        if op in CONNECTIVES:
            left, right = (self.boolean(o) for o in node.operands)
            return pc.and_kleene(left, right) if op == "AND" else pc.or_kleene(left, right)
        left, right = self.aligned(self.value(node.operands[0]), self.value(node.operands[1]))
        if op == "||":
            parts = [p if pa.types.is_string(p.type) or p.type == pa.null() else pc.cast(p, pa.string()) for p in (left, right)]
            parts = [pa.scalar(None, pa.string()) if p.type == pa.null() else p for p in parts]
            return pc.binary_join_element_wise(*parts, "")
        if op == "<=>":
            equal = pc.fill_null(pc.equal(left, right), False) if left.type != pa.null() else pa.scalar(False)
            both_null = pc.and_(pc.is_null(left), pc.is_null(right))
            return pc.or_(equal, both_null)
        if op in _COMPARE:
            if left.type == pa.null():
                return pa.scalar(None, pa.bool_())
            return _COMPARE[op](left, right)
        if left.type == pa.null():
            return left
        if op == "+":
            return pc.add_checked(left, right)
        if op == "-":
            return pc.subtract_checked(left, right)
        if op == "*":
            return pc.multiply_checked(left, right)
        # Division by zero is NULL, as in Spark SQL (outside ANSI mode).
        right = pc.if_else(pc.equal(right, pa.scalar(0).cast(right.type) if _is_integer(right.type) else 0), pa.scalar(None, right.type), right)
        if op == "/":
            if _is_integer(left.type) and _is_integer(right.type):  # SQL's / is not integer division
                left, right = pc.cast(left, pa.float64()), pc.cast(right, pa.float64())
            return pc.divide(left, right)
        if op == "%":  # the remainder takes the dividend's sign, as in Spark and C
            quotient = pc.divide(left, right)
            if not (_is_integer(left.type) and _is_integer(right.type)):
                quotient = pc.trunc(quotient)
            return pc.subtract_checked(left, pc.multiply_checked(quotient, right))
        raise self.error(f"uses an unknown operator {op!r}")

    def boolean(self, node: ValueExpression) -> Datum:
        value = self.value(node)
        if value.type == pa.null():
            return pa.scalar(None, pa.bool_())
        if not pa.types.is_boolean(value.type):
            raise self.error(f"uses a {value.type} value where a condition (boolean) is expected")
        return value

    def in_list(self, node: InList) -> Datum:
        operand = self.value(node.operand)
        # SQL's IN is the OR of equalities: NULL when no item is equal and one is NULL.
        found: Datum = pa.scalar(False)
        for item in node.items:
            left, right = self.aligned(operand, self.value(item))
            equal = _COMPARE["="](left, right) if left.type != pa.null() else pa.scalar(None, pa.bool_())
            found = pc.or_kleene(found, equal)
        return pc.invert(found) if node.negated else found

    def case(self, node: CaseValue) -> Datum:
        values = [self.value(v) for _, v in node.branches]
        otherwise = self.value(node.otherwise) if node.otherwise is not None else pa.scalar(None)
        typed = [v.type for v in [*values, otherwise] if v.type != pa.null()]
        target = typed[0] if typed else pa.null()
        for t in typed[1:]:
            if t != target:
                target = _common_type(target, t, self)
        result: Datum = pc.cast(otherwise, target) if otherwise.type != target else otherwise
        for (condition, _), value in reversed(list(zip(node.branches, values, strict=True))):
            chosen = pc.fill_null(self.boolean(condition), False)
            result = pc.if_else(chosen, pc.cast(value, target) if value.type != target else value, result)
        return result

    def function(self, node: FunctionCall) -> Datum:
        name, args = node.name, [self.value(a) for a in node.args]
        if name not in FUNCTIONS:
            raise self.error(f"calls function {name}(), which txnlog does not compute (it computes {', '.join(FUNCTIONS)})")
        if name == "coalesce":
            typed = [a.type for a in args if a.type != pa.null()]
            if not typed:
                return pa.scalar(None)
            target = typed[0]
            for t in typed[1:]:
                if t != target:
                    target = _common_type(target, t, self)
            return pc.coalesce(*[pc.cast(a, target) for a in args])
        if name == "concat":
            parts = [a if pa.types.is_string(a.type) else pc.cast(a, pa.string()) for a in args]
            return pc.binary_join_element_wise(*parts, "")
        if name in ("date_format", "date_trunc", "trunc", "substring"):
            return self.temporal_or_text(name, args)
        expected = {"if": 3, "nullif": 2}.get(name, 1)
        if len(args) != expected:
            raise self.error(f"calls {name}() with {len(args)} argument(s); it takes {expected}")
        if name == "if":
            return self.case(CaseValue(((node.args[0], node.args[1]),), node.args[2]))
        if name == "nullif":
            left, right = self.aligned(args[0], args[1])
            return pc.if_else(pc.fill_null(pc.equal(left, right), False), pa.scalar(None, left.type), left)
        (arg,) = args
        if arg.type == pa.null():
            return arg
        if name == "abs":
            return pc.abs_checked(arg)
        if name in _DATE_PARTS:  # an int, as Spark's year(), month(), ... give
            return pc.cast(_DATE_PARTS[name](arg), pa.int32())
        return _STRING_FUNCTIONS[name](arg)

    def temporal_or_text(self, name: str, args: list[Datum]) -> Datum:
        """``date_format(x, pattern)``, ``date_trunc(unit, x)``, ``trunc(x, unit)`` and
        ``substring(x, pos[, len])`` (1-based, as in Spark): the functions generated columns use."""
        expected = (2, 3) if name == "substring" else (2,)
        if len(args) not in expected:
            raise self.error(f"calls {name}() with {len(args)} argument(s)")
        if name == "substring":
            value, start, length = args[0], args[1].as_py(), args[2].as_py() if len(args) == 3 else None
            if value.type == pa.null():
                return value
            begin = start - 1 if start > 0 else start  # Spark: position 0 is 1; negative counts from the end
            stop = begin + max(length, 0) if length is not None and (begin >= 0 or begin + length < 0) else None
            return pc.utf8_slice_codeunits(value, begin, stop)
        value, text = (args[1], args[0]) if name == "date_trunc" else (args[0], args[1])
        if not isinstance(text, pa.Scalar) or not pa.types.is_string(text.type):
            raise self.error(f"calls {name}() with a {'pattern' if name == 'date_format' else 'unit'} that is not a string literal")
        if value.type == pa.null():
            return pa.scalar(None, pa.string() if name == "date_format" else pa.timestamp("us"))
        if name == "date_format":
            pattern = text.as_py()
            for spark, strftime in _SPARK_PATTERN:
                pattern = pattern.replace(spark, strftime)
            return pc.strftime(value, format=pattern)
        unit = _TRUNC_UNITS.get(text.as_py().strip().upper())
        if unit is None:
            raise self.error(f"calls {name}() with unknown unit {text.as_py()!r}")
        if name == "trunc":  # a date, to its year/month/week/quarter
            return pc.cast(pc.floor_temporal(pc.cast(value, pa.date32()), unit=unit), pa.date32())
        return pc.floor_temporal(value, unit=unit)


def _common_type(a: pa.DataType, b: pa.DataType, evaluator: _Evaluator) -> pa.DataType:
    """The type two branches (of CASE, COALESCE) are both cast to."""
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return pa.int64()
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
    if any(f(a) for f in numeric) and any(f(b) for f in numeric):
        if pa.types.is_decimal(a) and pa.types.is_decimal(b):
            scale = max(a.scale, b.scale)
            digits = max(a.precision - a.scale, b.precision - b.scale)
            return pa.decimal128(min(38, digits + scale), scale)
        if pa.types.is_decimal(a) and pa.types.is_integer(b):
            return a if a.precision - a.scale >= 19 else pa.decimal128(min(38, 19 + a.scale), a.scale)
        if pa.types.is_decimal(b) and pa.types.is_integer(a):
            return _common_type(b, a, evaluator)
        return pa.float64()
    if pa.types.is_string(a) or pa.types.is_string(b):
        return pa.string()
    raise evaluator.error(f"mixes values of types {a} and {b}")


__all__ = [
    "ARITHMETIC",
    "COMPARISONS",
    "FUNCTIONS",
    "CaseValue",
    "CastValue",
    "ColumnValue",
    "FunctionCall",
    "InList",
    "LikeValue",
    "LiteralValue",
    "NullTest",
    "Operation",
    "Resolver",
    "ValueExpression",
    "condition_mask",
    "conjuncts",
    "evaluate_value",
    "target_columns_read",
]
