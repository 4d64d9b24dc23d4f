"""SQL predicates over a table's columns: file skipping and exact row filters.

:class:`FilePredicate` parses a boolean SQL expression once into a small tree in negation normal
form: NOT is pushed down to the leaves with SQL's three-valued rules, so every node means "the rows
where this is TRUE". Pushing NOT down matters: "may hold a row where p is TRUE" cannot be negated
into "may hold a row where NOT p is TRUE" (a file with rows 1 and 9 may match both ``x < 5`` and
``NOT (x < 5)``). The tree then answers two questions:

* :meth:`FilePredicate.may_match`: could a file hold a row where the predicate is TRUE? Exact on
  partition values, conservative on min/max/nullCount stats: never False for a file that holds a
  matching row.
* :meth:`FilePredicate.row_filter`: an Arrow expression true exactly on the rows where the
  predicate is TRUE (never null), for copy-on-write rewrites.
"""

from __future__ import annotations

import decimal
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidPredicateError
from txnlog.file_facts import (
    has_min_max,
    parse_partition_column,
    parse_stats,
    physical_name,
    physical_names,
    stats_leaf,
    stats_type,
    string_converter,
)
from txnlog.log.file_actions import FILES_SCHEMA

logger = logging.getLogger(__name__)

# Decimals with at most this many digits survive a round trip through a double.
_EXACT_DOUBLE_DIGITS = 15
# IN lists longer than this are checked against stats as one [min, max] range.
_MAX_IN_VALUES_FOR_STATS = 32
# Delta truncates timestamp stats to milliseconds: they are widened by one (a second for "s").
_MILLISECOND_IN_UNIT = {"s": 1, "ms": 1, "us": 1_000, "ns": 1_000_000}
_US_TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
_US_TIMESTAMP = pa.timestamp("us")
# Deeper nesting (parentheses, NOT chains) is refused: the SQL parser recurses per level.
MAX_PREDICATE_NESTING = 32
# Longer predicates are refused rather than parsed.
MAX_PREDICATE_TOKENS = 200_000
# More conditions than this are refused: Arrow crashes evaluating expressions of ~20,000 terms.
MAX_PREDICATE_TERMS = 4_096


if TYPE_CHECKING:
    import sqlglot
    from sqlglot import exp
    from sqlglot.dialects.dialect import Dialect


class _Parsing:
    """What parsing needs from sqlglot, filled in by :func:`_load_sqlglot`."""

    dialect: type[Dialect]
    comparisons: dict[type[exp.Expression], str]


_SQL = _Parsing()


def _load_sqlglot() -> None:
    """Import sqlglot when the first predicate is parsed, not with txnlog: reading a table
    without a predicate need not hold the parser (12 MiB resident). Binds the module-level
    names the parsing methods use."""
    if hasattr(_SQL, "dialect"):
        return
    import sqlglot  # deferred: the parser
    from sqlglot import exp  # deferred: the parser
    from sqlglot.dialects.spark import Spark  # deferred: the parser

    class _SparkQuotedIdentifiers(Spark):
        """Spark SQL, except that double quotes delimit identifiers (as in ANSI SQL), not strings."""

        class Tokenizer(Spark.Tokenizer):
            QUOTES = ["'"]
            IDENTIFIERS = ["`", '"']

    comparisons: dict[type[exp.Expression], str] = {
        exp.EQ: "=",
        exp.NEQ: "<>",
        exp.LT: "<",
        exp.LTE: "<=",
        exp.GT: ">",
        exp.GTE: ">=",
    }
    globals().update(sqlglot=sqlglot, exp=exp)  # the names the parsing methods use
    _SQL.comparisons = comparisons
    _SQL.dialect = _SparkQuotedIdentifiers  # last: its presence says all is bound


# --- the predicate tree ------------------------------------------------------------------------

_NEGATED = {"=": "<>", "<>": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", ">": "<", "<=": ">=", ">=": "<="}
_ARROW_COMPARE: dict[str, Callable[..., pc.Expression]] = {
    "=": pc.equal,
    "<>": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


@dataclass(frozen=True, slots=True)
class _Column:
    name: str  # the top-level column, in the schema's case
    path: tuple[str, ...]  # logical names from the top-level column down
    physical: tuple[str, ...]  # the same path as named in stats and partition values
    type: pa.DataType

    def ref(self, physical: bool = False) -> pc.Expression:
        return pc.field(*(self.physical if physical else self.path))

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


class _Node:
    """A predicate in negation normal form: every node is TRUE exactly where it says."""

    __slots__ = ()

    def leaves(self) -> Iterator[_Node]:
        yield self

    def expr(self, physical: bool) -> pc.Expression:  # pragma: no cover - abstract
        raise NotImplementedError

    def columns(self) -> Iterator[_Column]:
        return iter(())


@dataclass(frozen=True, slots=True)
class _Const(_Node):
    value: bool

    def expr(self, physical: bool) -> pc.Expression:
        return pc.scalar(self.value)


@dataclass(frozen=True, slots=True)
class _Junction(_Node):
    """AND or OR of two or more children; subclasses name the Arrow kernels."""

    children: tuple[_Node, ...]

    def leaves(self) -> Iterator[_Node]:
        for child in self.children:
            yield from child.leaves()

    def expr(self, physical: bool) -> pc.Expression:
        # Pairwise, so that thousands of terms make a tree of logarithmic depth: Arrow evaluates
        # expressions recursively.
        level = [child.expr(physical) for child in self.children]
        kleene = type(self).kleene  # type: ignore[attr-defined]
        while len(level) > 1:
            paired = [kleene(a, b) for a, b in zip(level[::2], level[1::2])]
            level = paired + level[len(paired) * 2 :]
        return level[0]


@dataclass(frozen=True, slots=True)
class _And(_Junction):
    kleene = staticmethod(pc.and_kleene)  # on expressions: NULL-aware
    combine = staticmethod(pc.and_)  # on may-match masks, which are never null
    absorbing = False  # FALSE AND x is FALSE


@dataclass(frozen=True, slots=True)
class _Or(_Junction):
    kleene = staticmethod(pc.or_kleene)
    combine = staticmethod(pc.or_)
    absorbing = True  # TRUE OR x is TRUE


@dataclass(frozen=True, slots=True)
class _Compare(_Node):
    """``column op value``: TRUE when the column is not null and the comparison holds."""

    column: _Column
    op: str
    value: pa.Scalar

    def expr(self, physical: bool) -> pc.Expression:
        return _ARROW_COMPARE[self.op](self.column.ref(physical), self.value)

    def columns(self) -> Iterator[_Column]:
        yield self.column


@dataclass(frozen=True, slots=True)
class _CompareColumns(_Node):
    left: _Column
    op: str
    right: _Column

    def expr(self, physical: bool) -> pc.Expression:
        return _ARROW_COMPARE[self.op](self.left.ref(physical), self.right.ref(physical))

    def columns(self) -> Iterator[_Column]:
        yield self.left
        yield self.right


@dataclass(frozen=True, slots=True)
class _In(_Node):
    """``column [NOT] IN (values)``, values all non-null (NULLs in the list are resolved when building)."""

    column: _Column
    values: pa.Array
    negated: bool

    def expr(self, physical: bool) -> pc.Expression:
        ref = self.column.ref(physical)
        found = pc.is_in(ref, value_set=self.values)
        if self.negated:  # is_in says False for a null input: NOT IN must not be TRUE there
            return pc.and_kleene(pc.is_valid(ref), pc.invert(found))
        return found

    def columns(self) -> Iterator[_Column]:
        yield self.column


@dataclass(frozen=True, slots=True)
class _IsNull(_Node):
    column: _Column
    negated: bool

    def expr(self, physical: bool) -> pc.Expression:
        ref = self.column.ref(physical)
        return pc.is_valid(ref) if self.negated else pc.is_null(ref)

    def columns(self) -> Iterator[_Column]:
        yield self.column


@dataclass(frozen=True, slots=True)
class _Like(_Node):
    column: _Column
    pattern: str
    negated: bool
    ignore_case: bool

    def expr(self, physical: bool) -> pc.Expression:
        found = pc.match_like(self.column.ref(physical), self.pattern, ignore_case=self.ignore_case)
        return pc.invert(found) if self.negated else found

    def columns(self) -> Iterator[_Column]:
        yield self.column

    def literal_prefix(self) -> str:
        """The characters every match starts with (up to the first wildcard or escape)."""
        out = []
        for ch in self.pattern:
            if ch in "%_\\":
                break
            out.append(ch)
        return "".join(out)


def _junction(kind: type[_Junction], children: Sequence[_Node]) -> _Node:
    """``kind`` of ``children``, flattened, with constants folded."""
    flat: list[_Node] = []
    for child in children:
        if isinstance(child, _Const):
            if child.value == kind.absorbing:  # type: ignore[attr-defined]
                return child
            continue
        flat.extend(child.children if isinstance(child, kind) else (child,))
    if not flat:
        return _Const(not kind.absorbing)  # type: ignore[attr-defined]
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


def _and(children: Sequence[_Node]) -> _Node:
    return _junction(_And, children)


def _or(children: Sequence[_Node]) -> _Node:
    return _junction(_Or, children)


def _node_columns(node: _Node) -> list[_Column]:
    return [c for leaf in node.leaves() for c in leaf.columns()]


# --- values: literals, partition values and stats ----------------------------------------------


def _falses(n: int) -> pa.Array:
    return pa.repeat(pa.scalar(False), n)


def _trues(n: int) -> pa.Array:
    return pa.repeat(pa.scalar(True), n)


def _is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _has_stats(column: _Column) -> bool:
    """Columns with a nullCount number in stats: primitive leaves (structs hold nested counts)."""
    t = column.type
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t))


def _widen_float(values: pa.Array, direction: int) -> pa.Array:
    """Values moved outwards by a few ulps: covers a decimal's rounding to the nearest double."""
    return pc.add(values, pc.multiply(pc.abs(values), pa.scalar(direction * 2.0**-50)))


@dataclass
class _ColumnStats:
    """One column's stats for every file; null entries mean unknown.

    ``low``/``high`` are bounds on every non-null value of the file, already widened for stats that
    are rounded (timestamps to the millisecond, decimals through a double). For strings ``high`` is
    an inclusive *prefix* bound (the max may be truncated), see :meth:`all_below`.
    """

    kind: str  # "exact", "float", "decimal" (through doubles), "timestamp", "string", or "none"
    low: pa.Array | None
    high: pa.Array | None
    null_count: pa.Array
    num_records: pa.Array

    def all_null(self) -> pa.Array:
        return pc.fill_null(pc.greater_equal(self.null_count, self.num_records), False)

    def no_null(self) -> pa.Array:
        return pc.fill_null(pc.equal(self.null_count, 0), False)

    def _bounds(self, value: pa.Scalar) -> tuple[pa.Scalar, pa.Scalar]:
        """The literal as an interval of the stats' type (a point unless compared through doubles)."""
        if self.kind == "decimal":
            v = float(value.as_py())
            return pa.scalar(math.nextafter(v, -math.inf)), pa.scalar(math.nextafter(v, math.inf))
        return value, value

    def all_above(self, value: pa.Scalar, strict: bool) -> pa.Array:
        """Proven: every non-null value is > value (strict) or >= value."""
        if self.low is None:
            return _falses(len(self.null_count))
        _, hi = self._bounds(value)
        cmp = pc.greater if strict else pc.greater_equal
        return pc.fill_null(cmp(self.low, hi), False)

    def all_below(self, value: pa.Scalar, strict: bool) -> pa.Array:
        """Proven: every non-null value is < value (strict) or <= value."""
        if self.high is None:
            return _falses(len(self.null_count))
        lo, _ = self._bounds(value)
        if self.kind == "string":
            # Values are <= high + anything. That is < value only if high < value and value
            # does not extend high (then some extension of high could equal or pass it).
            text = value.as_py()
            prefixes = pa.array([text[:i] for i in range(len(text) + 1)], pa.string())
            below = pc.fill_null(pc.less(self.high, lo), False)
            return pc.and_(below, pc.invert(pc.is_in(self.high, value_set=prefixes)))
        cmp = pc.less if strict else pc.less_equal
        return pc.fill_null(cmp(self.high, lo), False)

    def all_equal_any(self, values: pa.Array) -> pa.Array:
        """Proven: every non-null value equals one same element of ``values`` (exact stats only)."""
        if self.kind != "exact" or self.low is None or self.high is None:
            return _falses(len(self.null_count))
        same = pc.fill_null(pc.equal(self.low, self.high), False)
        return pc.and_(same, pc.fill_null(pc.is_in(self.low, value_set=values), False))

    def all_without_prefix(self, prefix: str) -> pa.Array:
        """Proven: no non-null value starts with ``prefix``."""
        if self.kind != "string" or not prefix or self.low is None:
            return _falses(len(self.null_count))
        # low > prefix and low does not start with it: then every value sorts after all of them.
        above = pc.fill_null(pc.greater(self.low, pa.scalar(prefix)), False)
        starts = pc.fill_null(pc.starts_with(self.low, pattern=prefix), False)
        return pc.or_(pc.and_(above, pc.invert(starts)), self.all_below(pa.scalar(prefix), strict=True))


def _column_stats(column: _Column, minimum: pa.Array | None, maximum: pa.Array | None,
                  null_count: pa.Array, num_records: pa.Array) -> _ColumnStats:
    """Widened bounds from the typed min/max of one column (see :func:`parse_stats`)."""
    t = column.type
    if minimum is None or maximum is None:
        return _ColumnStats("none", None, None, null_count, num_records)
    if pa.types.is_timestamp(t):
        slack = pa.scalar(_MILLISECOND_IN_UNIT[t.unit], pa.duration(t.unit))
        # Truncated to milliseconds (and rounded towards zero by some writers before 1970).
        return _ColumnStats("timestamp", pc.subtract(minimum, slack), pc.add(maximum, slack), null_count, num_records)
    if pa.types.is_decimal(t) and t.precision > _EXACT_DOUBLE_DIGITS:
        # Written through a double by some writers: only a widened double interval is a bound.
        low, high = (pc.cast(a, pa.float64()) for a in (minimum, maximum))
        return _ColumnStats("decimal", _widen_float(low, -1), _widen_float(high, 1), null_count, num_records)
    if pa.types.is_floating(t):
        return _ColumnStats("float", minimum, maximum, null_count, num_records)
    if _is_string(t):
        # A truncated max is a prefix bound. Drop tie-breaker characters some writers append
        # (U+FFFF sorts below supplementary characters in UTF-8 order, so it is no bound).
        high = pc.utf8_rtrim(maximum, characters="\uffff\ufffd")
        return _ColumnStats("string", minimum, high, null_count, num_records)
    # Integers, booleans, dates, and decimals whose nearest double rounds back to them: exact.
    return _ColumnStats("exact", minimum, maximum, null_count, num_records)


# --- the public class --------------------------------------------------------------------------


class FilePredicate:
    """A SQL boolean expression over a table's columns, e.g. ``"region = 'EU' AND id > 10"``.

    Column names resolve case-insensitively against ``schema``; struct fields as ``s.a``. With
    column mapping, ``physical_names`` maps each top-level column to the name partition values and
    stats use (nested physical names come from the fields' Delta metadata).
    """

    def __init__(
        self,
        sql: str,
        schema: pa.Schema,
        partition_columns: Sequence[str],
        physical_names: Mapping[str, str] | None = None,
    ) -> None:
        _load_sqlglot()
        self.sql = sql
        self.schema = schema
        self._by_lower = {f.name.lower(): f for f in schema}
        self._column_mapping = physical_names is not None
        self._physical_names = dict(physical_names or {})
        self.partition_columns = tuple(self._resolve_top(p, where="partition column").name for p in partition_columns)
        self._check_shape()
        try:
            parsed = sqlglot.parse_one(sql, read=_SQL.dialect)
            if not isinstance(parsed, exp.Expression):
                raise self._error("is empty")
            self._tree = self._build(parsed, negated=False)
        except sqlglot.errors.SqlglotError as e:
            raise self._error(f"cannot parse: {str(e).splitlines()[0]}") from None
        except RecursionError:
            raise self._error(f"nests too deeply (at most {MAX_PREDICATE_NESTING} levels are accepted)") from None
        terms = sum(1 for _ in self._tree.leaves())
        if terms > MAX_PREDICATE_TERMS:
            raise self._error(f"has too many conditions ({terms}; at most {MAX_PREDICATE_TERMS} are accepted)")
        self.columns: frozenset[str] = frozenset(c.name for c in _node_columns(self._tree))
        self._check_evaluable()

    def __repr__(self) -> str:
        return f"FilePredicate({self.sql!r})"

    # -- public API -------------------------------------------------------------------------

    def matches_partition_only(self) -> bool:
        """True when every referenced column is a partition column (so skipping is exact)."""
        return self.columns <= set(self.partition_columns)

    def row_filter(self, *, physical: bool = False) -> pc.Expression:
        """An expression true exactly where the predicate is TRUE, false elsewhere (never null).

        ``~row_filter()`` therefore selects the rows a DELETE keeps. Field references use the
        logical names, or the physical ones (as in data files under column mapping) when asked.
        """
        return pc.coalesce(self._tree.expr(physical), pc.scalar(False))

    def may_match(self, files: pa.Table) -> pa.BooleanArray:
        """Per file: False only where the file provably has no row on which the predicate is TRUE."""
        evaluator = _FileEvaluator(self, files)
        result = evaluator.may(self._tree)
        return pc.and_(result, pc.invert(evaluator.empty()))

    def filter(self, files: pa.Table) -> pa.Table:
        """The files that may hold matching rows."""
        return files.filter(self.may_match(files))

    # -- building the tree ------------------------------------------------------------------

    def _error(self, what: str) -> InvalidPredicateError:
        return InvalidPredicateError(f"predicate {self.sql!r} {what}", predicate=self.sql)

    def _check_shape(self) -> None:
        """Refuse predicates too deep or too long to parse, before the (recursive) parser sees them."""
        try:
            tokens = _SQL.dialect().tokenize(self.sql)
        except sqlglot.errors.SqlglotError as e:
            raise self._error(f"cannot parse: {str(e).splitlines()[0]}") from None
        if len(tokens) > MAX_PREDICATE_TOKENS:
            raise self._error(f"is too long ({len(tokens)} tokens; at most {MAX_PREDICATE_TOKENS} are accepted)")
        depth = deepest = nots = 0
        for token in tokens:
            kind = token.token_type
            if kind == sqlglot.TokenType.L_PAREN:
                depth += 1
            elif kind == sqlglot.TokenType.R_PAREN:
                depth -= 1
            nots = nots + 1 if kind == sqlglot.TokenType.NOT else 0
            deepest = max(deepest, depth + nots)
        if deepest > MAX_PREDICATE_NESTING:
            raise self._error(f"nests too deeply ({deepest} levels; at most {MAX_PREDICATE_NESTING} are accepted)")

    def _resolve_top(self, name: str, where: str = "column") -> pa.Field:
        field = self._by_lower.get(name.lower())
        if field is None:
            if where != "column":
                raise InvalidPredicateError(
                    f"{where} '{name}' is not in the table schema ({', '.join(self.schema.names)})", predicate=self.sql
                )
            raise self._error(f"refers to unknown column '{name}' (columns: {', '.join(self.schema.names)})")
        return field

    def _column(self, e: exp.Expression) -> _Column:
        names: list[str] = []
        while isinstance(e, exp.Dot):
            names.insert(0, e.expression.name)
            e = e.this
        if not isinstance(e, exp.Column):
            raise self._unsupported(e)
        names = [p.name for p in e.parts] + names
        field = self._resolve_top(names[0])
        path, physical = [field.name], [self._physical_names.get(field.name, field.name)]
        for name in names[1:]:
            if not pa.types.is_struct(field.type):
                raise self._error(f"refers to field '{name}' of '{'.'.join(path)}', which is not a struct")
            children = {field.type.field(i).name.lower(): field.type.field(i) for i in range(field.type.num_fields)}
            child = children.get(name.lower())
            if child is None:
                raise self._error(f"refers to unknown field '{name}' of struct column '{'.'.join(path)}'")
            field = child
            path.append(field.name)
            physical.append(physical_name(field, self._column_mapping) if self._column_mapping else field.name)
        return _Column(path[0], tuple(path), tuple(physical), field.type)

    def _build(self, e: exp.Expression, negated: bool) -> _Node:
        """``e`` (or NOT ``e``) in negation normal form, under SQL's three-valued logic."""
        if isinstance(e, exp.Paren):
            return self._build(e.this, negated)
        if isinstance(e, exp.Not):
            return self._build(e.this, not negated)
        if isinstance(e, (exp.And, exp.Or)):
            # A chain of one connective is flattened without recursion: the parser makes
            # ``a AND b AND c ...`` a left-deep tree as deep as it is long.
            kind = type(e)
            operands: list[exp.Expression] = []
            pending: list[exp.Expression] = [e]
            while pending:
                item = pending.pop()
                while isinstance(item, exp.Paren):
                    item = item.this
                if type(item) is kind:
                    pending.extend((item.expression, item.this))
                else:
                    operands.append(item)
            parts = [self._build(operand, negated) for operand in operands]
            # De Morgan: NOT (a AND b) is TRUE exactly where NOT a or NOT b is TRUE.
            return _and(parts) if (kind is exp.And) != negated else _or(parts)
        if isinstance(e, exp.Boolean):
            return _Const(bool(e.this) != negated)
        if isinstance(e, exp.Null):
            return _Const(False)  # NULL, and NOT NULL, are never TRUE
        if isinstance(e, (exp.Column, exp.Dot)):
            column = self._column(e)
            if not pa.types.is_boolean(column.type):
                raise self._error(f"uses column '{column.dotted}' of type {column.type} as a condition")
            return _Compare(column, "=", pa.scalar(not negated))
        if type(e) in _SQL.comparisons:
            return self._build_comparison(e.this, _SQL.comparisons[type(e)], e.expression, negated)
        if isinstance(e, (exp.NullSafeEQ, exp.NullSafeNEQ)):
            return self._build_null_safe(e, negated)
        if isinstance(e, exp.Between):
            low = self._build_comparison(e.this, ">=", e.args["low"], negated)
            high = self._build_comparison(e.this, "<=", e.args["high"], negated)
            return _or([low, high]) if negated else _and([low, high])
        if isinstance(e, exp.In):
            return self._build_in(e, negated)
        if isinstance(e, exp.Is):
            return self._build_is(e, negated)
        if isinstance(e, (exp.Like, exp.ILike)):
            return self._build_like(e, negated)
        raise self._unsupported(e)

    def _unsupported(self, e: exp.Expression) -> InvalidPredicateError:
        text = e.sql(dialect=_SQL.dialect)
        return self._error(f"uses an unsupported construct: {type(e).__name__} ({text})")

    def _is_column(self, e: exp.Expression) -> bool:
        while isinstance(e, exp.Paren):
            e = e.this
        return isinstance(e, (exp.Column, exp.Dot))

    def _unparen(self, e: exp.Expression) -> exp.Expression:
        while isinstance(e, exp.Paren):
            e = e.this
        return e

    def _build_comparison(self, left: exp.Expression, op: str, right: exp.Expression, negated: bool) -> _Node:
        left, right = self._unparen(left), self._unparen(right)
        if negated:
            # NOT (a < b) is TRUE exactly where a >= b is TRUE: both need two non-null values.
            op = _NEGATED[op]
        if self._is_column(left) and self._is_column(right):
            lc, rc = self._column(left), self._column(right)
            self._check_comparable(lc, rc)
            return _CompareColumns(lc, op, rc)
        if not self._is_column(left):
            if not self._is_column(right):
                return self._fold(self._literal(left), op, self._literal(right))
            left, right, op = right, left, _FLIPPED[op]
        column = self._column(left)
        value = self._literal(right)
        if value is None:
            return _Const(False)  # a comparison with NULL is never TRUE, nor is its negation
        return self._compare(column, op, value)

    def _compare(self, column: _Column, op: str, value: pa.Scalar) -> _Node:
        if pa.types.is_integer(column.type) and _is_number(value.type) and not pa.types.is_integer(value.type):
            v = value.as_py()
            if isinstance(v, float) and not math.isfinite(v):
                raise self._error(f"compares integer column '{column.dotted}' with {v}")
            if v != int(v):  # a fraction: no integer equals it, and the bound rounds inwards
                if op == "=":
                    return _Const(False)
                if op == "<>":
                    return _IsNull(column, negated=True)
                op, v = ("<=", math.floor(v)) if op in ("<", "<=") else (">=", math.ceil(v))
            value = pa.scalar(decimal.Decimal(int(v))) if abs(v) >= 2**63 else pa.scalar(int(v))
        return _Compare(column, op, self._coerce(value, column))

    def _fold(self, left: pa.Scalar | None, op: str, right: pa.Scalar | None) -> _Node:
        if left is None or right is None:
            return _Const(False)
        a, b = left.as_py(), right.as_py()
        ops: dict[str, Callable[[object, object], bool]] = {
            "=": lambda x, y: x == y,
            "<>": lambda x, y: x != y,
            "<": lambda x, y: x < y,  # type: ignore[operator]
            "<=": lambda x, y: x <= y,  # type: ignore[operator]
            ">": lambda x, y: x > y,  # type: ignore[operator]
            ">=": lambda x, y: x >= y,  # type: ignore[operator]
        }
        try:
            return _Const(bool(ops[op](a, b)))
        except TypeError:
            raise self._error(f"compares incompatible literals {a!r} and {b!r}") from None

    def _build_null_safe(self, e: exp.Expression, negated: bool) -> _Node:
        """``a <=> b`` / ``a IS DISTINCT FROM b``: never NULL, NULL equals NULL."""
        equal = isinstance(e, exp.NullSafeEQ) != negated
        left, right = self._unparen(e.this), self._unparen(e.expression)
        if not self._is_column(left):
            left, right = right, left
        if not self._is_column(left) or self._is_column(right):
            raise self._unsupported(e)
        column = self._column(left)
        value = self._literal(right)
        if value is None:
            return _IsNull(column, negated=not equal)
        if equal:
            return self._compare(column, "=", value)
        return _or([_IsNull(column, negated=False), self._compare(column, "<>", value)])

    def _build_in(self, e: exp.In, negated: bool) -> _Node:
        if e.args.get("query") is not None or e.args.get("unnest") is not None or e.args.get("field") is not None:
            raise self._unsupported(e)
        target = self._unparen(e.this)
        if not self._is_column(target):
            raise self._unsupported(e)
        column = self._column(target)
        items = e.expressions
        if not items:
            raise self._error("has an empty IN list")
        literals = [self._literal(item) for item in items]
        has_null = any(v is None for v in literals)
        if negated and has_null:
            return _Const(False)  # x NOT IN (.., NULL) is never TRUE
        leaves = [self._compare(column, "=", v) for v in literals if v is not None]
        values = [leaf.value for leaf in leaves if isinstance(leaf, _Compare)]  # fractions vs ints drop out
        if not values:
            return _IsNull(column, negated=True) if negated else _Const(False)
        return _In(column, pa.array([v.as_py() for v in values], column.type), negated)

    def _build_is(self, e: exp.Is, negated: bool) -> _Node:
        target, what = self._unparen(e.this), self._unparen(e.expression)
        if not self._is_column(target):
            raise self._unsupported(e)
        column = self._column(target)
        if isinstance(what, exp.Null):
            return _IsNull(column, negated)
        if isinstance(what, exp.Boolean):
            if not pa.types.is_boolean(column.type):
                raise self._error(f"tests non-boolean column '{column.dotted}' with IS {e.expression.sql()}")
            truth = bool(what.this)
            if not negated:
                return _Compare(column, "=", pa.scalar(truth))
            # x IS NOT TRUE: x is FALSE or NULL
            return _or([_Compare(column, "=", pa.scalar(not truth)), _IsNull(column, negated=False)])
        raise self._unsupported(e)

    def _build_like(self, e: exp.Expression, negated: bool) -> _Node:
        target, pattern = self._unparen(e.this), self._literal(e.expression)
        if not self._is_column(target):
            raise self._unsupported(e)
        column = self._column(target)
        if not _is_string(column.type):
            raise self._error(f"uses LIKE on non-string column '{column.dotted}' ({column.type})")
        if pattern is None:
            return _Const(False)
        if not _is_string(pattern.type):
            raise self._error(f"uses a non-string LIKE pattern {pattern.as_py()!r}")
        if e.args.get("negate"):
            negated = not negated
        return _Like(column, pattern.as_py(), negated, ignore_case=isinstance(e, exp.ILike))

    # -- literals ---------------------------------------------------------------------------

    def _literal(self, e: exp.Expression) -> pa.Scalar | None:
        """A literal as an Arrow scalar of its own type; None for NULL."""
        e = self._unparen(e)
        if isinstance(e, exp.Null):
            return None
        if isinstance(e, exp.Boolean):
            return pa.scalar(bool(e.this))
        if isinstance(e, exp.Literal):
            return pa.scalar(e.this, pa.string()) if e.is_string else self._number(e.this)
        if isinstance(e, exp.Neg):
            inner = self._literal(e.this)
            if inner is None:
                return None
            if not _is_number(inner.type):
                raise self._unsupported(e)
            return pc.negate_checked(inner)
        if isinstance(e, exp.HexString):
            return pa.scalar(bytes.fromhex(e.this), pa.binary())
        if isinstance(e, exp.Concat) and all(isinstance(p, exp.Literal) and p.is_string for p in e.expressions):
            return pa.scalar("".join(p.this for p in e.expressions), pa.string())  # Spark joins 'a' 'b'
        if isinstance(e, (exp.Cast, exp.TryCast)):
            inner = self._literal(e.this)
            if inner is None:
                return None
            target = self._sql_type(e.to)
            return self._cast(inner, target, f"{e.sql(dialect=_SQL.dialect)}")
        if self._is_column(e):
            text = e.sql(dialect=_SQL.dialect)
            raise self._error(f"compares column '{text}' where a literal was expected")
        raise self._unsupported(e)

    def _number(self, text: str) -> pa.Scalar:
        if text.isdigit():
            value = int(text)
            return pa.scalar(value) if value < 2**63 else pa.scalar(decimal.Decimal(text))
        if "e" in text.lower():
            return pa.scalar(float(text))
        try:
            return pa.scalar(decimal.Decimal(text))
        except (decimal.InvalidOperation, pa.ArrowInvalid):
            raise self._error(f"has a malformed number {text!r}") from None

    def _sql_type(self, dt: exp.DataType) -> pa.DataType:
        name = dt.this.name
        simple = {
            "DATE": pa.date32(),
            "TIMESTAMP": _US_TIMESTAMP_UTC,
            "TIMESTAMPTZ": _US_TIMESTAMP_UTC,
            "TIMESTAMPLTZ": _US_TIMESTAMP_UTC,
            "TIMESTAMPNTZ": _US_TIMESTAMP,
            "DATETIME": _US_TIMESTAMP,
            "TINYINT": pa.int8(),
            "SMALLINT": pa.int16(),
            "INT": pa.int32(),
            "BIGINT": pa.int64(),
            "FLOAT": pa.float32(),
            "DOUBLE": pa.float64(),
            "BOOLEAN": pa.bool_(),
            "VARCHAR": pa.string(),
            "CHAR": pa.string(),
            "TEXT": pa.string(),
            "BINARY": pa.binary(),
            "VARBINARY": pa.binary(),
        }
        if name in simple:
            return simple[name]
        if name == "DECIMAL":
            params = [int(p.this.this) for p in dt.expressions] if dt.expressions else [10, 0]
            precision, scale = (params + [0])[:2]
            return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
        raise self._error(f"casts to unsupported type {dt.sql(dialect=_SQL.dialect)}")

    def _cast(self, value: pa.Scalar, target: pa.DataType, what: str) -> pa.Scalar:
        if value.type == target:
            return value
        try:
            if _is_string(value.type) and not _is_string(target) and not pa.types.is_binary(target):
                out = string_converter(target)(pa.array([value.as_py()], pa.string()))[0]
            elif pa.types.is_decimal(target) and _is_number(value.type):
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
            raise self._error(f"has {what} = {value.as_py()!r}, which cannot be cast to {target}: {e}") from None

    def _coerce(self, value: pa.Scalar, column: _Column) -> pa.Scalar:
        return self._cast(value, column.type, f"a literal for column '{column.dotted}'")

    def _check_comparable(self, left: _Column, right: _Column) -> None:
        try:
            pc.equal(pa.nulls(1, left.type), pa.nulls(1, right.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raise self._error(
                f"compares column '{left.dotted}' ({left.type}) with column '{right.dotted}' ({right.type})"
            ) from None

    def _check_evaluable(self) -> None:
        """Evaluate the row filter on one null row, so type errors surface here, not in a scan."""
        empty = pa.table({f.name: pa.nulls(1, f.type) for f in self.schema}, schema=self.schema)
        try:
            _evaluate(self.row_filter(), empty)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise self._error(f"cannot be evaluated on the table's columns: {e}") from None


def _evaluate(expr: pc.Expression, table: pa.Table) -> pa.Array:
    """``expr`` computed on each row of ``table``, in row order."""
    import pyarrow.acero as acero  # deferred: Acero's engine (7 MiB resident) for predicates only

    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
            acero.Declaration("project", acero.ProjectNodeOptions([expr], ["value"])),
        ]
    )
    out = plan.to_table(use_threads=False).column("value")
    return out.combine_chunks() if out.num_chunks != 1 else out.chunk(0)


# --- evaluation over a file list ---------------------------------------------------------------


class _FileEvaluator:
    """Lazily parses what a predicate needs from a file list: partition values and stats."""

    def __init__(self, predicate: FilePredicate, files: pa.Table) -> None:
        self.predicate = predicate
        self.files = files
        self.n = files.num_rows
        self._partition: set[str] = set(predicate.partition_columns)
        self._partition_table: pa.Table | None = None
        self._partition_unknown: dict[str, pa.Array] = {}
        self._stats: dict[tuple[str, ...], _ColumnStats] | None = None
        self._num_records: pa.Array | None = None

    def _column_of(self, name: str) -> pa.Array:
        if name not in self.files.column_names:
            return pa.nulls(self.n, FILES_SCHEMA.field(name).type)
        col = self.files.column(name)
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)

    # -- partition values -------------------------------------------------------------------

    def _partitions(self) -> pa.Table:
        """The referenced partition columns, parsed: one row per file, evaluated on exactly."""
        if self._partition_table is None:
            referenced = {c.name: c for c in _node_columns(self.predicate._tree) if c.name in self._partition}
            values = self._column_of("partition_values")
            arrays: dict[str, pa.Array] = {}
            for name, column in sorted(referenced.items()):
                key = pa.scalar(column.physical[0], pa.string())
                raw = pc.map_lookup(values, key, "first") if self.n else pa.array([], pa.string())
                arrays[name], unknown = parse_partition_column(raw, column.type)
                self._partition_unknown[name] = unknown
                if pc.any(unknown).as_py():
                    logger.warning(
                        "predicate %r: %d partition values of column '%s' do not parse as %s; those files are kept",
                        self.predicate.sql, pc.sum(unknown).as_py(), name, column.type,
                    )
            self._partition_table = pa.table(arrays) if arrays else pa.table({"_": pa.nulls(self.n)})
        return self._partition_table

    def _exact_on_partitions(self, node: _Node) -> pa.Array:
        mask = pc.fill_null(_evaluate(node.expr(physical=False), self._partitions()), False)
        for name in {c.name for c in _node_columns(node)}:
            mask = pc.or_(mask, self._partition_unknown[name])
        return mask

    # -- stats ------------------------------------------------------------------------------

    def _load_stats(self) -> dict[tuple[str, ...], _ColumnStats]:
        if self._stats is not None:
            return self._stats
        columns = {
            c.path: c for c in _node_columns(self.predicate._tree) if c.name not in self._partition and _has_stats(c)
        }
        target = stats_type(
            self.predicate.schema, list(columns), mapped=self.predicate._column_mapping
        )
        parsed = parse_stats(self._column_of("stats"), target)
        self._num_records = stats_leaf(parsed, ("numRecords",))
        stats: dict[tuple[str, ...], _ColumnStats] = {}
        for path, column in columns.items():
            null_count = stats_leaf(parsed, ("nullCount", *column.physical))
            minimum = maximum = None
            if has_min_max(column.type):
                minimum = stats_leaf(parsed, ("minValues", *column.physical))
                maximum = stats_leaf(parsed, ("maxValues", *column.physical))
            stats[path] = _column_stats(column, minimum, maximum, null_count.cast(pa.int64()), self._num_records)
        self._stats = stats
        return stats

    def _stats_of(self, column: _Column) -> _ColumnStats | None:
        if not _has_stats(column):
            return None
        return self._load_stats()[column.path]

    def empty(self) -> pa.Array:
        """Files whose stats say they hold no rows (only known once stats were needed anyway)."""
        if self._num_records is None:
            return _falses(self.n)
        return pc.fill_null(pc.equal(self._num_records, 0), False)

    # -- the tree ---------------------------------------------------------------------------

    def may(self, node: _Node) -> pa.Array:
        if isinstance(node, _Const):
            return _trues(self.n) if node.value else _falses(self.n)
        if {c.name for c in _node_columns(node)} <= self._partition:
            return self._exact_on_partitions(node)
        if isinstance(node, _Junction):
            out = self.may(node.children[0])
            for child in node.children[1:]:
                out = type(node).combine(out, self.may(child))  # type: ignore[attr-defined]
            return out
        if isinstance(node, _CompareColumns):
            return self._may_columns(node)
        column = next(node.columns())
        stats = self._stats_of(column)
        if stats is None:
            return _trues(self.n)
        if isinstance(node, _IsNull):
            return pc.invert(stats.all_null() if node.negated else stats.no_null())
        has_value = pc.invert(stats.all_null())
        if isinstance(node, _Compare):
            return pc.and_(has_value, pc.invert(self._refuted(stats, node.op, node.value)))
        if isinstance(node, _In):
            return pc.and_(has_value, pc.invert(self._refuted_in(stats, node)))
        if isinstance(node, _Like):
            if node.negated or node.ignore_case:
                return has_value
            return pc.and_(has_value, pc.invert(stats.all_without_prefix(node.literal_prefix())))
        raise AssertionError(f"unhandled predicate node {node!r}")

    def _may_columns(self, node: _CompareColumns) -> pa.Array:
        """Column against column: only "one side is all NULL" refutes it."""
        out = _trues(self.n)
        for column in (node.left, node.right):
            if column.name in self._partition:
                values = self._partitions().column(column.name).combine_chunks()
                known_null = pc.and_(pc.is_null(values), pc.invert(self._partition_unknown[column.name]))
                out = pc.and_(out, pc.invert(known_null))
            else:
                stats = self._stats_of(column)
                if stats is not None:
                    out = pc.and_(out, pc.invert(stats.all_null()))
        return out

    def _refuted(self, stats: _ColumnStats, op: str, value: pa.Scalar) -> pa.Array:
        """Files where stats prove ``column op value`` is TRUE on no row."""
        if op == "=":
            return pc.or_(stats.all_above(value, strict=True), stats.all_below(value, strict=True))
        if op == "<":
            return stats.all_above(value, strict=False)
        if op == "<=":
            return stats.all_above(value, strict=True)
        if op == ">":
            return stats.all_below(value, strict=False)
        if op == ">=":
            return stats.all_below(value, strict=True)
        # "<>": only when every non-null value is that value (never for strings, floats (NaN <> x
        # is true yet NaN is left out of stats), or widened bounds).
        return stats.all_equal_any(pa.array([value.as_py()], value.type))

    def _refuted_in(self, stats: _ColumnStats, node: _In) -> pa.Array:
        if node.negated:
            return stats.all_equal_any(node.values)
        values = node.values
        if len(values) > _MAX_IN_VALUES_FOR_STATS:
            low, high = pc.min_max(values).values()
            return pc.or_(stats.all_above(high, strict=True), stats.all_below(low, strict=True))
        out = _trues(self.n)
        for v in values:
            out = pc.and_(out, self._refuted(stats, "=", v))
        return out


__all__ = ["FilePredicate", "physical_names"]
