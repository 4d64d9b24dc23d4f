"""Filters as other libraries write them, translated into the one expression tree: pyarrow
compute expressions (what DuckDB and Polars push into a dataset) and the disjunctive normal form
tuples of pyarrow and deltalake (``[("region", "=", "EU"), ("id", ">", 10)]``).

pyarrow offers no way to walk an expression, but it serializes one (that is how it pickles
them) as an Arrow IPC file: the schema's key-value metadata lists the nodes in pre-order
(``call``/``field_ref``/``literal``/``options``/``end``) and its columns hold the literals and
function options, typed. That form is read here, through the Arrow C data interface for the
metadata's order (pyarrow's own accessor folds it into a dict).

The translation keeps pyarrow's meaning exactly: a row is selected where pyarrow's expression is
true. Where pyarrow and SQL differ (``is_in`` is never null, so ``~isin`` selects the rows where
the column is null), the tree spells pyarrow's behaviour out. A call txnlog does not compute is an
InvalidPredicateError naming it; :func:`approximate_arrow` instead widens it to "may match", for
file skipping only.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from txnlog.errors import InvalidPredicateError
from txnlog.expressions.tree import (
    ALWAYS_FALSE,
    ALWAYS_TRUE,
    ColumnComparison,
    Constant,
    Expression,
    In,
    IsNull,
    Like,
    Opaque,
    Reference,
    and_,
    compare,
    contains,
    ends_with,
    not_,
    or_,
    starts_with,
)
from txnlog.expressions.values import (
    CastValue,
    ColumnValue,
    FunctionCall,
    LiteralValue,
    NullTest,
    Operation,
    ValueExpression,
)

#: A filter in any form txnlog takes: SQL text, a tree, a pyarrow expression, or DNF tuples.
Filter = Any

_COMPARISONS = {"equal": "=", "not_equal": "<>", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ARITHMETIC = {
    "add": "+", "add_checked": "+", "subtract": "-", "subtract_checked": "-",
    "multiply": "*", "multiply_checked": "*",
}
_FUNCTIONS = {
    "abs": "abs", "abs_checked": "abs", "utf8_upper": "upper", "ascii_upper": "upper", "utf8_lower": "lower",
    "ascii_lower": "lower", "utf8_length": "length", "coalesce": "coalesce", "if_else": "if",
}
# pyarrow's SetLookupOptions.null_matching_behavior (and the older skip_nulls flag).
_MATCH, _SKIP, _EMIT_NULL, _INCONCLUSIVE = 0, 1, 2, 3


# --- reading pyarrow's serialized form ---------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    path: tuple[str, ...]


@dataclass(frozen=True)
class _Literal:
    value: pa.Scalar


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple[Any, ...]
    options: pa.StructScalar | None  # the function's options, a field each, typed

    def option(self, name: str) -> Any:
        """The option ``name`` as a Python value (None when absent)."""
        if self.options is None or name not in [f.name for f in self.options.type]:
            return None
        return self.options[name].as_py()


class _ArrowSchema(ctypes.Structure):
    """The C data interface's ArrowSchema (only ``metadata`` is read)."""

    _fields_ = [
        ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p), ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p), ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p), ("private_data", ctypes.c_void_p),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _ordered_metadata(schema: pa.Schema) -> list[tuple[str, str]]:
    """The schema's key-value metadata in order, duplicate keys kept (the C data interface's
    encoding: an int32 count, then each key and value as an int32 length and bytes)."""
    capsule = schema.__arrow_c_schema__()  # released with the capsule
    c_schema = _ArrowSchema.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    if not c_schema.metadata:
        return []
    position = c_schema.metadata
    count = ctypes.c_int32.from_address(position).value
    position += 4
    out = []
    for _ in range(count):
        pair = []
        for _ in range(2):
            length = ctypes.c_int32.from_address(position).value
            pair.append(ctypes.string_at(position + 4, length).decode())
            position += 4 + length
        out.append((pair[0], pair[1]))
    return out


def _parse(expression: pc.Expression) -> Any:
    """``expression`` as nested :class:`_Call`/:class:`_Field`/:class:`_Literal`."""
    _, (buffer,) = expression.__reduce__()
    reader = ipc.open_file(buffer)
    tokens = iter(_ordered_metadata(reader.schema))
    batch = reader.get_batch(0) if reader.num_record_batches else None

    def column(index: str) -> pa.Scalar:
        assert batch is not None
        return batch.column(int(index))[0]

    def node(token: tuple[str, str]) -> Any:
        kind, value = token
        if kind == "literal":
            return _Literal(column(value))
        if kind == "field_ref":
            return _Field((value,))
        if kind == "nested_field_ref":
            return _Field(tuple(next(tokens)[1] for _ in range(int(value))))
        if kind != "call":
            raise ValueError(f"unexpected {kind!r} in a serialized expression")
        args: list[Any] = []
        options: pa.StructScalar | None = None
        for inner in tokens:
            if inner[0] == "end":
                return _Call(value, tuple(args), options)
            if inner[0] == "options":
                options = column(inner[1])
            else:
                args.append(node(inner))
        raise ValueError(f"call {value!r} has no end")

    return node(next(tokens))


# --- to the tree ---------------------------------------------------------------------------------


class _Translator:
    """pyarrow nodes to tree nodes. ``approximate``: an untranslatable condition becomes TRUE
    where it is selected positively and FALSE under an odd number of negations, so the tree
    selects every row pyarrow's would (and perhaps more): enough to skip files, not to filter."""

    def __init__(self, text: str, approximate: bool) -> None:
        self.text = text
        self.approximate = approximate

    def error(self, what: str) -> InvalidPredicateError:
        return InvalidPredicateError(f"pyarrow filter {self.text} {what}", predicate=self.text)

    def condition(self, node: Any, positive: bool = True) -> Expression:
        try:
            return self._condition(node, positive)
        except InvalidPredicateError:
            if not self.approximate:
                raise
            return ALWAYS_TRUE if positive else ALWAYS_FALSE

    def _condition(self, node: Any, positive: bool) -> Expression:
        if isinstance(node, _Literal):
            value = node.value.as_py()
            if value is None or isinstance(value, bool):
                return Constant(value)
            raise self.error(f"uses {value!r} where a condition is expected")
        if isinstance(node, _Field):
            return compare(Reference(node.path), "=", True)  # a boolean column
        name, args = node.name, node.args
        if name == "and_kleene":
            return and_(*(self.condition(a, positive) for a in args))
        if name == "or_kleene":
            return or_(*(self.condition(a, positive) for a in args))
        if name == "and_not_kleene":
            return and_(self.condition(args[0], positive), not_(self.condition(args[1], not positive)))
        if name == "invert":
            return not_(self.condition(args[0], not positive))
        if name in ("and", "or", "xor", "and_not"):
            # Unlike & and |, these are null whenever an operand is: FALSE and NULL is NULL.
            raise self.error(f"calls {name}(), which txnlog does not translate: combine conditions with & and | (and_kleene, or_kleene)")
        if name in _COMPARISONS:
            return self.comparison(node, _COMPARISONS[name])
        if name in ("is_null", "is_valid") and isinstance(args[0], _Field):
            if name == "is_null" and node.option("nan_is_null"):
                raise self.error("calls is_null(nan_is_null=True), which txnlog does not translate")
            return IsNull(Reference(args[0].path), negated=name == "is_valid")
        if name == "is_in" and isinstance(args[0], _Field):
            return self.is_in(Reference(args[0].path), node)
        if name in ("starts_with", "ends_with", "match_substring", "match_like") and isinstance(args[0], _Field):
            return self.like(name, Reference(args[0].path), node)
        value = self.value(node)
        return Opaque(value, _sql(value))

    def comparison(self, node: _Call, op: str) -> Expression:
        left, right = node.args
        if isinstance(left, _Field) and isinstance(right, _Literal):
            return compare(Reference(left.path), op, right.value)
        if isinstance(left, _Literal) and isinstance(right, _Field):
            return compare(Reference(right.path), _FLIPPED[op], left.value)
        if isinstance(left, _Field) and isinstance(right, _Field):
            return ColumnComparison(Reference(left.path), op, Reference(right.path))
        value = self.value(node)
        return Opaque(value, _sql(value))

    def is_in(self, column: Reference, node: _Call) -> Expression:
        assert node.options is not None
        values = list(node.options["value_set"].values or [])  # typed scalars
        behavior = node.option("null_matching_behavior")
        if behavior is None:
            behavior = _SKIP if node.option("skip_nulls") else _MATCH
        present = tuple(v for v in values if v.is_valid)
        found = In(column, present) if present else ALWAYS_FALSE
        has_null = len(present) < len(values)
        if behavior == _INCONCLUSIVE:  # SQL's IN
            return In(column, tuple(v if v.is_valid else None for v in values)) if values else ALWAYS_FALSE
        if behavior == _EMIT_NULL:  # null in, null out; nulls in the set ignored
            return found
        if behavior == _MATCH and has_null:  # a null matches the set's null: never null
            return or_(IsNull(column), found)
        # Never null: a null input is simply not in the set.
        return and_(IsNull(column, negated=True), found)

    def like(self, name: str, column: Reference, node: _Call) -> Expression:
        pattern, ignore_case = node.option("pattern"), bool(node.option("ignore_case"))
        if not isinstance(pattern, str):
            raise self.error(f"calls {name}() without a pattern")
        if name == "match_like":
            return Like(column, pattern, ignore_case=ignore_case)
        build: Callable[[Reference, str], Expression] = {"starts_with": starts_with, "ends_with": ends_with, "match_substring": contains}[name]
        made = build(column, pattern)
        assert isinstance(made, Like)
        return Like(made.column, made.pattern, ignore_case=ignore_case)

    def value(self, node: Any) -> ValueExpression:
        if isinstance(node, _Field):
            return ColumnValue(Reference(node.path))
        if isinstance(node, _Literal):
            return LiteralValue(node.value if node.value.is_valid else None)
        name, args = node.name, [self.value(a) for a in node.args]
        if name in _COMPARISONS:
            return Operation(_COMPARISONS[name], tuple(args))
        if name in _ARITHMETIC:
            return Operation(_ARITHMETIC[name], tuple(args))
        if name in ("negate", "negate_checked"):
            return Operation("NEG", tuple(args))
        if name in ("and_kleene", "or_kleene"):
            return Operation("AND" if name == "and_kleene" else "OR", tuple(args))
        if name == "invert":
            return Operation("NOT", tuple(args))
        if name in ("is_null", "is_valid") and not node.option("nan_is_null"):
            return NullTest(args[0], negated=name == "is_valid")
        if name == "cast" and node.options is not None:
            return CastValue(args[0], node.options["to_type"].type)  # the option's type is the target
        if name in _FUNCTIONS:
            return FunctionCall(_FUNCTIONS[name], tuple(args))
        known = sorted({*_COMPARISONS, *_ARITHMETIC, *_FUNCTIONS, "and_kleene", "or_kleene", "invert", "is_null", "is_valid",
                        "is_in", "starts_with", "ends_with", "match_substring", "match_like", "cast", "negate"})
        raise self.error(f"calls {name}(), which txnlog does not compute (it translates {', '.join(known)})")


def _sql(node: ValueExpression) -> str:
    """``node`` as SQL, for messages and the predicate's text."""
    if isinstance(node, ColumnValue):
        return str(node.ref)
    if isinstance(node, LiteralValue):
        return str(compare("x", "=", node.value)).removeprefix("x = ") if node.value is not None else "NULL"
    if isinstance(node, Operation):
        if node.op == "NEG":
            return f"-({_sql(node.operands[0])})"
        if node.op == "NOT":
            return f"NOT ({_sql(node.operands[0])})"
        return "(" + f" {node.op} ".join(_sql(o) for o in node.operands) + ")"
    if isinstance(node, NullTest):
        return f"{_sql(node.operand)} IS {'NOT ' if node.negated else ''}NULL"
    if isinstance(node, CastValue):
        return f"CAST({_sql(node.operand)} AS {node.to})"
    if isinstance(node, FunctionCall):
        return f"{node.name}({', '.join(_sql(a) for a in node.args)})"
    raise AssertionError(f"unhandled value node {node!r}")


def from_arrow(expression: pc.Expression) -> Expression:
    """The tree selecting exactly the rows ``expression`` (a pyarrow compute expression over
    column names) is true on. InvalidPredicateError for a function txnlog does not compute."""
    return _Translator(_text(expression), approximate=False).condition(_nodes(expression))


def approximate_arrow(expression: pc.Expression) -> Expression:
    """A tree true on every row ``expression`` is true on, and perhaps more: what it cannot
    translate may match anything. For skipping files, never for filtering rows."""
    return _Translator(_text(expression), approximate=True).condition(_nodes(expression))


def arrow_columns(expression: pc.Expression) -> list[str]:
    """The top-level columns ``expression`` reads, each once, in order."""
    def fields(node: Any) -> Iterator[str]:
        if isinstance(node, _Field):
            yield node.path[0]
        elif isinstance(node, _Call):
            for arg in node.args:
                yield from fields(arg)

    return list(dict.fromkeys(fields(_nodes(expression))))


def from_dnf(filters: Sequence[Any]) -> Expression:
    """deltalake's and pyarrow's DNF filters: a list of ``(column, op, value)`` tuples (all must
    hold), or a list of such lists (any list must hold). ``op`` is one of ``=``, ``==``, ``!=``,
    ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``; values are cast to the column's type, as
    partition values given as text (``("year", "=", "2024")``). Same rows as pyarrow's
    ``filters_to_expression``: ``not in`` selects the nulls too."""
    import pyarrow.parquet as pq  # deferred: the Parquet module, for its DNF reader only

    try:
        expression = pq.filters_to_expression(filters)
    except (TypeError, ValueError, IndexError, pa.ArrowException) as e:
        raise InvalidPredicateError(f"filters {filters!r} are not DNF tuples (column, op, value): {e}", predicate=repr(filters)) from None
    return from_arrow(expression)


def as_expression(predicate: Filter) -> str | Expression:
    """``predicate`` as SQL text or a tree: SQL and trees as they are, a pyarrow expression and
    DNF tuples translated."""
    if isinstance(predicate, (str, Expression)):
        return predicate
    if isinstance(predicate, pc.Expression):
        return from_arrow(predicate)
    if isinstance(predicate, (list, tuple)):
        return from_dnf(predicate)
    raise InvalidPredicateError(
        f"a predicate is SQL text, a txnlog expression, a pyarrow expression or DNF tuples, not {type(predicate).__name__}",
        predicate=repr(predicate),
    )


def _text(expression: pc.Expression) -> str:
    return " ".join(str(expression).split())


def _nodes(expression: pc.Expression) -> Any:
    try:
        return _parse(expression)
    except (pa.ArrowException, ValueError, StopIteration, OSError) as e:
        text = _text(expression)
        raise InvalidPredicateError(f"pyarrow filter {text} cannot be read: {e}", predicate=text) from None


__all__ = ["Filter", "approximate_arrow", "arrow_columns", "as_expression", "from_arrow", "from_dnf"]
