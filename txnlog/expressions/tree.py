"""The expression tree: immutable boolean expressions over a table's columns, before binding.

Every tree is in negation normal form: :func:`not_` pushes NOT down to the leaves with SQL's
three-valued rules, so each node means "the rows where this is TRUE" and a NULL never hides under
a NOT. That matters for file skipping: "may hold a row where p is TRUE" cannot be negated into "may
hold a row where NOT p is TRUE" (a file with rows 1 and 9 may match both ``x < 5`` and
``NOT (x < 5)``).

Columns are named here, not resolved: :func:`txnlog.expressions.bind` resolves them against a
schema and casts the literals to the columns' types. The SQL parser builds these nodes; so can any
other translator (Spark's pushed filters) through the constructors below.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError

if TYPE_CHECKING:
    from txnlog.expressions.values import ValueExpression

# The comparison operators, as SQL spells them.
OPERATORS = ("=", "<>", "<", "<=", ">", ">=")
NEGATED_OPERATOR = {"=": "<>", "<>": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
FLIPPED_OPERATOR = {"=": "=", "<>": "<>", "<": ">", ">": "<", "<=": ">=", ">=": "<="}


@dataclass(frozen=True, slots=True)
class Reference:
    """A column by its path of names: ``("s", "a")`` is field ``a`` of struct ``s``; ``("a.b",)``
    is a top-level column whose name holds a dot. Names match the schema case-insensitively."""

    path: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.path or not all(isinstance(p, str) and p for p in self.path):
            raise InvalidArgumentError(f"a column reference needs one or more non-empty names, not {self.path!r}")

    def __str__(self) -> str:
        return ".".join(p if p.isidentifier() else "`" + p.replace("`", "``") + "`" for p in self.path)


class Expression:
    """A boolean expression in negation normal form; see the module's docstring."""

    __slots__ = ()

    def negate(self) -> Expression:  # pragma: no cover - abstract
        """The expression TRUE exactly where this one is FALSE (SQL's NOT)."""
        raise NotImplementedError

    def leaves(self) -> Iterator[Expression]:
        yield self


@dataclass(frozen=True, slots=True)
class Constant(Expression):
    """TRUE, FALSE, or NULL (``value`` None: unknown, never TRUE, and neither is its negation)."""

    value: bool | None

    def negate(self) -> Expression:
        return self if self.value is None else Constant(not self.value)

    def __str__(self) -> str:
        return {True: "TRUE", False: "FALSE", None: "NULL"}[self.value]


ALWAYS_TRUE = Constant(True)
ALWAYS_FALSE = Constant(False)


@dataclass(frozen=True, slots=True)
class Comparison(Expression):
    """``column op value``: TRUE where the column is not null and the comparison holds. A None
    value is SQL's NULL: never TRUE, nor is the negation."""

    column: Reference
    op: str
    value: pa.Scalar | None

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise InvalidArgumentError(f"unknown comparison operator {self.op!r} (one of {', '.join(OPERATORS)})")

    def negate(self) -> Expression:
        return Comparison(self.column, NEGATED_OPERATOR[self.op], self.value)

    def __str__(self) -> str:
        return f"{self.column} {self.op} {_sql_literal(self.value)}"


@dataclass(frozen=True, slots=True)
class ColumnComparison(Expression):
    """``left op right`` between two columns."""

    left: Reference
    op: str
    right: Reference

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise InvalidArgumentError(f"unknown comparison operator {self.op!r} (one of {', '.join(OPERATORS)})")

    def negate(self) -> Expression:
        return ColumnComparison(self.left, NEGATED_OPERATOR[self.op], self.right)

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True, slots=True)
class In(Expression):
    """``column [NOT] IN (values)``; a None value is a NULL in the list."""

    column: Reference
    values: tuple[pa.Scalar | None, ...]
    negated: bool = False

    def negate(self) -> Expression:
        return In(self.column, self.values, not self.negated)

    def __str__(self) -> str:
        items = ", ".join(_sql_literal(v) for v in self.values)
        return f"{self.column} {'NOT IN' if self.negated else 'IN'} ({items})"


@dataclass(frozen=True, slots=True)
class IsNull(Expression):
    """``column IS [NOT] NULL``: never NULL itself."""

    column: Reference
    negated: bool = False

    def negate(self) -> Expression:
        return IsNull(self.column, not self.negated)

    def __str__(self) -> str:
        return f"{self.column} IS {'NOT NULL' if self.negated else 'NULL'}"


@dataclass(frozen=True, slots=True)
class Like(Expression):
    """``column [NOT] [I]LIKE pattern``: ``%`` any run, ``_`` one character, ``\\`` escapes.
    A None pattern is SQL's NULL: never TRUE."""

    column: Reference
    pattern: str | None
    negated: bool = False
    ignore_case: bool = False

    def negate(self) -> Expression:
        return Like(self.column, self.pattern, not self.negated, self.ignore_case)

    def __str__(self) -> str:
        word = ("NOT " if self.negated else "") + ("ILIKE" if self.ignore_case else "LIKE")
        return f"{self.column} {word} {_sql_literal(None if self.pattern is None else pa.scalar(self.pattern))}"


@dataclass(frozen=True, slots=True)
class Opaque(Expression):
    """A condition the tree cannot reason about (``key % 10 = 3``, ``upper(name) = 'A'``, a CASE):
    a boolean :class:`~txnlog.expressions.values.ValueExpression` and its SQL text. Rows compute
    it; file skipping treats it as "may match".

    ``negated`` is SQL's NOT of it: TRUE where the condition is FALSE. A NULL stays NULL either
    way (so NOT never selects the rows where the condition is NULL), which is why NOT flips this
    flag rather than meaning "not TRUE"."""

    value: ValueExpression
    sql: str
    negated: bool = False

    def negate(self) -> Expression:
        return Opaque(self.value, self.sql, not self.negated)

    def references(self) -> tuple[Reference, ...]:
        """The columns the condition reads, each once."""
        return tuple(dict.fromkeys(self.value.references()))

    def __str__(self) -> str:
        return f"NOT ({self.sql})" if self.negated else f"({self.sql})"


@dataclass(frozen=True, slots=True)
class And(Expression):
    """Two or more children, all TRUE. Build with :func:`and_`, which flattens and folds."""

    children: tuple[Expression, ...]

    def negate(self) -> Expression:
        return or_(*(child.negate() for child in self.children))  # De Morgan

    def leaves(self) -> Iterator[Expression]:
        for child in self.children:
            yield from child.leaves()

    def __str__(self) -> str:
        return " AND ".join(f"({child})" if isinstance(child, Or) else str(child) for child in self.children)


@dataclass(frozen=True, slots=True)
class Or(Expression):
    """Two or more children, one TRUE. Build with :func:`or_`, which flattens and folds."""

    children: tuple[Expression, ...]

    def negate(self) -> Expression:
        return and_(*(child.negate() for child in self.children))

    def leaves(self) -> Iterator[Expression]:
        for child in self.children:
            yield from child.leaves()

    def __str__(self) -> str:
        return " OR ".join(f"({child})" if isinstance(child, And) else str(child) for child in self.children)


def _junction(kind: type[And] | type[Or], children: Iterable[Expression]) -> Expression:
    """``kind`` of ``children``, flattened, with TRUE and FALSE folded. A NULL child stays: NULL
    AND x is not a constant once negated (it is TRUE where NOT x is)."""
    absorbing = kind is Or  # TRUE OR x is TRUE; FALSE AND x is FALSE
    flat: list[Expression] = []
    for child in children:
        if not isinstance(child, Expression):
            raise InvalidArgumentTypeError(f"{kind.__name__.upper()} takes expressions, not {type(child).__name__}")
        if isinstance(child, Constant) and child.value is not None:
            if child.value == absorbing:
                return child
            continue
        flat.extend(child.children if isinstance(child, kind) else (child,))
    if not flat:
        return Constant(not absorbing)
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


# --- constructors ---------------------------------------------------------------------------------


def column(*path: str) -> Reference:
    """A column reference: ``column("id")``, ``column("s", "a")`` (field ``a`` of struct ``s``),
    ``column("a.b")`` (a top-level column whose name holds a dot)."""
    return Reference(tuple(path))


def literal(value: Any) -> pa.Scalar | None:
    """``value`` as the typed literal the tree holds (None stays None: SQL's NULL). Integers are
    int64 (decimal beyond it), floats double, text string, bytes binary; Arrow scalars are kept."""
    if value is None or isinstance(value, pa.Scalar):
        return value
    if isinstance(value, bool):
        return pa.scalar(value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return pa.scalar(value)
    if isinstance(value, int):
        value = decimal.Decimal(value)
    if isinstance(value, (float, str, bytes, decimal.Decimal, datetime.date, datetime.datetime)):
        try:
            if isinstance(value, datetime.datetime):
                return pa.scalar(value, pa.timestamp("us", tz="UTC" if value.tzinfo else None))
            return pa.scalar(value)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            raise InvalidArgumentError(f"no literal for {type(value).__name__} value {value!r}: {e}") from None
    raise InvalidArgumentTypeError(f"no literal for {type(value).__name__} value {value!r}")


def _ref(target: Reference | str) -> Reference:
    return target if isinstance(target, Reference) else Reference((target,))


def compare(target: Reference | str, op: str, value: Any) -> Expression:
    """``target op value``; ``target`` a :class:`Reference` or a top-level column's name."""
    return Comparison(_ref(target), op, literal(value))


def equal(target: Reference | str, value: Any) -> Expression:
    return compare(target, "=", value)


def not_equal(target: Reference | str, value: Any) -> Expression:
    return compare(target, "<>", value)


def less_than(target: Reference | str, value: Any) -> Expression:
    return compare(target, "<", value)


def less_than_or_equal(target: Reference | str, value: Any) -> Expression:
    return compare(target, "<=", value)


def greater_than(target: Reference | str, value: Any) -> Expression:
    return compare(target, ">", value)


def greater_than_or_equal(target: Reference | str, value: Any) -> Expression:
    return compare(target, ">=", value)


def equal_null_safe(target: Reference | str, value: Any) -> Expression:
    """``target <=> value``: never NULL; NULL <=> NULL is TRUE."""
    ref = _ref(target)
    if value is None:
        return IsNull(ref)
    # Not the bare comparison: its negation must hold on the NULL rows too.
    return and_(IsNull(ref, negated=True), Comparison(ref, "=", literal(value)))


def is_in(target: Reference | str, values: Iterable[Any]) -> Expression:
    return In(_ref(target), tuple(literal(v) for v in values))


def not_in(target: Reference | str, values: Iterable[Any]) -> Expression:
    return In(_ref(target), tuple(literal(v) for v in values), negated=True)


def is_null(target: Reference | str) -> Expression:
    return IsNull(_ref(target))


def is_not_null(target: Reference | str) -> Expression:
    return IsNull(_ref(target), negated=True)


def like(target: Reference | str, pattern: str | None, *, ignore_case: bool = False) -> Expression:
    return Like(_ref(target), pattern, ignore_case=ignore_case)


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def starts_with(target: Reference | str, prefix: str) -> Expression:
    return Like(_ref(target), _escaped(prefix) + "%")


def ends_with(target: Reference | str, suffix: str) -> Expression:
    return Like(_ref(target), "%" + _escaped(suffix))


def contains(target: Reference | str, text: str) -> Expression:
    return Like(_ref(target), "%" + _escaped(text) + "%")


def and_(*children: Expression) -> Expression:
    return _junction(And, children)


def or_(*children: Expression) -> Expression:
    return _junction(Or, children)


def not_(child: Expression) -> Expression:
    if not isinstance(child, Expression):
        raise InvalidArgumentTypeError(f"NOT takes an expression, not {type(child).__name__}")
    return child.negate()


def conjunction(expressions: Sequence[Expression]) -> Expression:
    """All of ``expressions`` (TRUE for none): the AND of filters built one by one, as an engine's
    pushed filters are."""
    return _junction(And, expressions)


def _sql_literal(value: pa.Scalar | None) -> str:
    if value is None or not value.is_valid:
        return "NULL"
    v = value.as_py()
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, bytes):
        return "X'" + v.hex().upper() + "'"
    if isinstance(v, datetime.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, datetime.date):
        return f"DATE '{v.isoformat()}'"
    return str(v)


__all__ = [
    "ALWAYS_FALSE",
    "ALWAYS_TRUE",
    "And",
    "ColumnComparison",
    "Comparison",
    "Constant",
    "Expression",
    "In",
    "IsNull",
    "Like",
    "Opaque",
    "Or",
    "Reference",
    "and_",
    "column",
    "compare",
    "conjunction",
    "contains",
    "ends_with",
    "equal",
    "equal_null_safe",
    "greater_than",
    "greater_than_or_equal",
    "is_in",
    "is_not_null",
    "is_null",
    "less_than",
    "less_than_or_equal",
    "like",
    "literal",
    "not_",
    "not_equal",
    "not_in",
    "or_",
    "starts_with",
]
