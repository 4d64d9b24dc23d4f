"""The stats visitor: may a file hold a row on which a bound expression is TRUE?

Columnar over the whole file list: one boolean per file, computed with Arrow kernels. Exact on
partition values (parsed from their serialization), conservative on min/max/nullCount stats:
never False for a file that holds a matching row. Only the stats of the columns the expression
reads are parsed, and only when a node needs them.

An opaque condition (``key % 10 = 3``) may match any file: it skips nothing by itself, an AND
skips on its other terms, an OR with it skips nothing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.expressions.binding import (
    EXACT_DOUBLE_DIGITS,
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
    is_string,
)
from txnlog.expressions.rows import arrow_expression, evaluate
from txnlog.file_facts import has_min_max, parse_partition_column, parse_stats, stats_leaf, stats_type
from txnlog.log.file_actions import FILES_SCHEMA

logger = logging.getLogger(__name__)

# IN lists longer than this are checked against stats as one [min, max] range.
_MAX_IN_VALUES_FOR_STATS = 32
# Delta truncates timestamp stats to milliseconds: they are widened by one (a second for "s").
_MILLISECOND_IN_UNIT = {"s": 1, "ms": 1, "us": 1_000, "ns": 1_000_000}


def _skipping_columns(node: BoundExpression) -> list[BoundColumn]:
    """The columns whose partition values or stats may refute ``node`` (not those only opaque
    conditions read)."""
    return [c for leaf in node.leaves() if not isinstance(leaf, BoundOpaque) for c in leaf.columns()]


def _falses(n: int) -> pa.Array:
    return pa.repeat(pa.scalar(False), n)


def _trues(n: int) -> pa.Array:
    return pa.repeat(pa.scalar(True), n)


def _has_stats(column: BoundColumn) -> bool:
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


def _column_stats(column: BoundColumn, minimum: pa.Array | None, maximum: pa.Array | None,
                  null_count: pa.Array, num_records: pa.Array) -> _ColumnStats:
    """Widened bounds from the typed min/max of one column (see :func:`parse_stats`)."""
    t = column.type
    if minimum is None or maximum is None:
        return _ColumnStats("none", None, None, null_count, num_records)
    if pa.types.is_timestamp(t):
        slack = pa.scalar(_MILLISECOND_IN_UNIT[t.unit], pa.duration(t.unit))
        # Truncated to milliseconds (and rounded towards zero by some writers before 1970).
        return _ColumnStats("timestamp", pc.subtract(minimum, slack), pc.add(maximum, slack), null_count, num_records)
    if pa.types.is_decimal(t) and t.precision > EXACT_DOUBLE_DIGITS:
        # Written through a double by some writers: only a widened double interval is a bound.
        low, high = (pc.cast(a, pa.float64()) for a in (minimum, maximum))
        return _ColumnStats("decimal", _widen_float(low, -1), _widen_float(high, 1), null_count, num_records)
    if pa.types.is_floating(t):
        return _ColumnStats("float", minimum, maximum, null_count, num_records)
    if is_string(t):
        # A truncated max is a prefix bound. Drop tie-breaker characters some writers append
        # (U+FFFF sorts below supplementary characters in UTF-8 order, so it is no bound).
        high = pc.utf8_rtrim(maximum, characters="\uffff\ufffd")
        return _ColumnStats("string", minimum, high, null_count, num_records)
    # Integers, booleans, dates, and decimals whose nearest double rounds back to them: exact.
    return _ColumnStats("exact", minimum, maximum, null_count, num_records)



class _FileEvaluator:
    """Lazily parses what an expression needs from a file list: partition values and stats."""

    def __init__(self, tree: BoundExpression, files: pa.Table, schema: pa.Schema, partition_columns: Sequence[str],
                 column_mapping: bool, text: str, parsed_stats: MutableMapping[str, pa.StructArray] | None = None) -> None:
        self.tree = tree
        self.parsed_stats = parsed_stats
        self.files = files
        self.schema = schema
        self.column_mapping = column_mapping
        self.text = text
        self.n = files.num_rows
        self._partition: set[str] = set(partition_columns)
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
            referenced = {c.name: c for c in _skipping_columns(self.tree) if c.name in self._partition}
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
                        self.text, pc.sum(unknown).as_py(), name, column.type,
                    )
            self._partition_table = pa.table(arrays) if arrays else pa.table({"_": pa.nulls(self.n)})
        return self._partition_table

    def _exact_on_partitions(self, node: BoundExpression) -> pa.Array:
        mask = pc.fill_null(evaluate(arrow_expression(node, physical=False), self._partitions()), False)
        for name in {c.name for c in _skipping_columns(node)}:
            mask = pc.or_(mask, self._partition_unknown[name])
        return mask

    # -- stats ------------------------------------------------------------------------------

    def _load_stats(self) -> dict[tuple[str, ...], _ColumnStats]:
        if self._stats is not None:
            return self._stats
        columns = {
            c.path: c for c in _skipping_columns(self.tree) if c.name not in self._partition and _has_stats(c)
        }
        target = stats_type(self.schema, list(columns), mapped=self.column_mapping)
        cache = self.parsed_stats if self.parsed_stats is not None else {}
        parsed = cache.get(str(target))
        if parsed is None:
            parsed = cache[str(target)] = parse_stats(self._column_of("stats"), target)
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

    def _stats_of(self, column: BoundColumn) -> _ColumnStats | None:
        if not _has_stats(column):
            return None
        return self._load_stats()[column.path]

    def empty(self) -> pa.Array:
        """Files whose stats say they hold no rows (only known once stats were needed anyway)."""
        if self._num_records is None:
            return _falses(self.n)
        return pc.fill_null(pc.equal(self._num_records, 0), False)

    # -- the tree ---------------------------------------------------------------------------

    def may(self, node: BoundExpression) -> pa.Array:
        if isinstance(node, BoundConstant):
            return _trues(self.n) if node.value else _falses(self.n)
        if isinstance(node, BoundOpaque):
            return _trues(self.n)
        if {c.name for c in _skipping_columns(node)} <= self._partition and not has_opaque(node):
            return self._exact_on_partitions(node)
        if isinstance(node, BoundJunction):
            combine = pc.and_ if isinstance(node, BoundAnd) else pc.or_  # masks are never null
            out = self.may(node.children[0])
            for child in node.children[1:]:
                out = combine(out, self.may(child))
            return out
        if isinstance(node, BoundColumnComparison):
            return self._may_columns(node)
        column = next(node.columns())
        stats = self._stats_of(column)
        if stats is None:
            return _trues(self.n)
        if isinstance(node, BoundIsNull):
            return pc.invert(stats.all_null() if node.negated else stats.no_null())
        has_value = pc.invert(stats.all_null())
        if isinstance(node, BoundComparison):
            return pc.and_(has_value, pc.invert(self._refuted(stats, node.op, node.value)))
        if isinstance(node, BoundIn):
            return pc.and_(has_value, pc.invert(self._refuted_in(stats, node)))
        if isinstance(node, BoundLike):
            if node.negated or node.ignore_case:
                return has_value
            return pc.and_(has_value, pc.invert(stats.all_without_prefix(node.literal_prefix())))
        raise AssertionError(f"unhandled predicate node {node!r}")

    def _may_columns(self, node: BoundColumnComparison) -> pa.Array:
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

    def _refuted_in(self, stats: _ColumnStats, node: BoundIn) -> pa.Array:
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


def may_match(
    tree: BoundExpression,
    files: pa.Table,
    *,
    schema: pa.Schema,
    partition_columns: Sequence[str],
    column_mapping: bool = False,
    text: str = "",
    parsed_stats: MutableMapping[str, pa.StructArray] | None = None,
) -> pa.BooleanArray:
    """Per file of ``files`` (rows of FILES_SCHEMA): False only where the file provably holds no
    row on which ``tree`` is TRUE. ``partition_columns`` as the schema spells them;
    ``column_mapping`` says stats and partition values use the columns' physical names; ``text``
    names the expression in warnings. ``parsed_stats``: a cache of the stats parsed from this
    very file list (by the stats' type), for a caller that asks of the same files many times."""
    evaluator = _FileEvaluator(tree, files, schema, partition_columns, column_mapping, text, parsed_stats)
    result = evaluator.may(tree)
    return pc.and_(result, pc.invert(evaluator.empty()))


__all__ = ["may_match"]
