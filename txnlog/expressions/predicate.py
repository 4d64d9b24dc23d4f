"""FilePredicate: a predicate parsed (or built) once and bound to one table's schema, answering
the two questions the core asks of it: may a file hold a matching row, which rows match."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidPredicateError
from txnlog.expressions.binding import BoundExpression, BoundOpaque, bind, bound_columns, has_opaque
from txnlog.expressions.foreign import Filter, as_expression
from txnlog.expressions.parser import parse, parse_value
from txnlog.expressions.rows import RowFilter
from txnlog.expressions.stats import may_match
from txnlog.expressions.tree import And, Comparison, Expression, Reference, and_
from txnlog.expressions.values import CastValue, ColumnValue, FunctionCall, ValueExpression
from txnlog.table_configuration import TableConfiguration


class FilePredicate:
    """A boolean expression over a table's columns: SQL text such as ``"region = 'EU' AND id > 10"``
    or a tree built with :mod:`txnlog.expressions`' constructors.

    Column names resolve case-insensitively against ``schema``; struct fields as ``s.a``. With
    column mapping, ``physical_names`` maps each top-level column to the name partition values and
    stats use (nested physical names come from the fields' Delta metadata).

    Any boolean SQL is accepted; conditions on a column against literals (comparisons, IN, IS
    NULL, LIKE, BETWEEN) skip files, others (``key % 10 = 3``, ``upper(name) = 'A'``) are
    computed on rows only (see :meth:`rows`).
    """

    def __init__(
        self,
        predicate: str | Expression,
        schema: pa.Schema,
        partition_columns: Sequence[str],
        physical_names: Mapping[str, str] | None = None,
        *,
        generated: Mapping[str, str] | None = None,
    ) -> None:
        text = predicate if isinstance(predicate, str) else str(predicate)
        self.sql = text
        self.schema = schema
        self._column_mapping = physical_names is not None
        by_lower = {f.name.lower(): f.name for f in schema}
        partitions = []
        for name in partition_columns:
            if name.lower() not in by_lower:
                raise InvalidPredicateError(
                    f"partition column '{name}' is not in the table schema ({', '.join(schema.names)})", predicate=text
                )
            partitions.append(by_lower[name.lower()])
        self.partition_columns = tuple(partitions)
        self.expression: Expression = parse(predicate) if isinstance(predicate, str) else predicate
        self.bound: BoundExpression = bind(self.expression, schema, physical_names=physical_names, text=text)
        self.columns: frozenset[str] = frozenset(c.name for c in bound_columns(self.bound))
        self._check_evaluable()
        # Skipping also uses the conditions a generated partition column's expression implies
        # (``day = CAST(ts AS DATE)``: ``ts > x`` implies ``day >= CAST(x AS DATE)``), as delta-spark does.
        implied = partition_filters(self.expression, generated or {}, self.partition_columns, schema)
        self._skipping = bind(and_(self.expression, *implied), schema, physical_names=physical_names, text=text) if implied else self.bound

    @classmethod
    def of(cls, predicate: Filter, table_configuration: TableConfiguration) -> FilePredicate:
        """``predicate`` (SQL text, a tree, a pyarrow expression or DNF tuples; a FilePredicate
        as it is) bound to the table ``table_configuration`` describes."""
        if isinstance(predicate, FilePredicate):
            return predicate
        config = table_configuration
        return cls(as_expression(predicate), config.schema, config.partition_columns, config.physical_names,
                   generated=config.generated_columns)

    def __repr__(self) -> str:
        return f"FilePredicate({self.sql!r})"

    def matches_partition_only(self) -> bool:
        """True when skipping is exact: every referenced column is a partition column and no
        condition is opaque (those never skip a file, so they cannot decide one)."""
        return self.columns <= set(self.partition_columns) and not has_opaque(self.bound)

    def rows(self, *, physical: bool = False) -> RowFilter:
        """The rows the predicate is TRUE on: ``rows().mask(table)``, ``~rows()`` for the rows
        a DELETE keeps (FALSE or NULL). Works for every predicate; see :meth:`row_filter` for one
        Arrow expression. Field references use the logical names, or the physical ones (as in
        data files under column mapping) when asked."""
        return RowFilter(self.bound, physical=physical, text=self.sql)

    def row_filter(self, *, physical: bool = False) -> pc.Expression:
        """An expression true exactly where the predicate is TRUE, false elsewhere (never null).

        ``~row_filter()`` therefore selects the rows a DELETE keeps. Field references use the
        logical names, or the physical ones (as in data files under column mapping) when asked.
        A predicate with an opaque condition (``key % 10 = 3``) has no such expression
        (InvalidPredicateError): use :meth:`rows`.
        """
        expression = self.rows(physical=physical).expression
        if expression is None:
            opaque = next(leaf.sql for leaf in self.bound.leaves() if isinstance(leaf, BoundOpaque))
            raise InvalidPredicateError(
                f"predicate {self.sql!r} computes {opaque!r} on rows, which no Arrow expression holds: "
                "filter rows with FilePredicate.rows()",
                predicate=self.sql,
            )
        return expression

    def may_match(self, files: pa.Table, *, parsed_stats: MutableMapping[str, pa.StructArray] | None = None) -> pa.BooleanArray:
        """Per file: False only where the file provably has no row on which the predicate is TRUE.
        ``parsed_stats``: a cache of stats parsed from this very file list, kept by the caller."""
        return may_match(
            self._skipping, files, schema=self.schema, partition_columns=self.partition_columns,
            column_mapping=self._column_mapping, text=self.sql, parsed_stats=parsed_stats,
        )

    def filter(self, files: pa.Table, *, parsed_stats: MutableMapping[str, pa.StructArray] | None = None) -> pa.Table:
        """The files that may hold matching rows."""
        return files.filter(self.may_match(files, parsed_stats=parsed_stats))

    def _check_evaluable(self) -> None:
        """Evaluate the row filter on one null row, so type errors (and opaque conditions that are
        not boolean or call functions txnlog does not compute) surface here, not in a scan."""
        empty = pa.table({f.name: pa.nulls(1, f.type) for f in self.schema}, schema=self.schema)
        try:
            self.rows().mask(empty)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise InvalidPredicateError(
                f"predicate {self.sql!r} cannot be evaluated on the table's columns: {e}", predicate=self.sql
            ) from None


def _source_of(node: ValueExpression) -> tuple[str, Reference] | None:
    """The generation expressions partition filters are derived from: ``CAST(col AS DATE)``
    (and ``to_date(col)``) as ("date", col); ``year(col)`` as ("year", col)."""
    if isinstance(node, CastValue) and node.to == pa.date32() and isinstance(node.operand, ColumnValue):
        return "date", node.operand.ref
    if isinstance(node, FunctionCall) and node.name == "year" and len(node.args) == 1:
        inner = node.args[0]
        if isinstance(inner, CastValue) and isinstance(inner.operand, ColumnValue):
            inner = inner.operand
        if isinstance(inner, ColumnValue):
            return "year", inner.ref
    return None


# A comparison on the source column, as the generated column's (coarser) values can say it.
_WIDENED = {"=": "=", "<": "<=", "<=": "<=", ">": ">=", ">=": ">="}


def partition_filters(expression: Expression, generated: Mapping[str, str], partition_columns: Sequence[str],
                      schema: pa.Schema) -> list[Expression]:
    """Conditions on generated partition columns that the top-level comparisons of
    ``expression`` on their source columns imply (delta-spark's optimizable partition
    expressions, for dates and years): every row matching ``expression`` matches them too."""
    sources: dict[str, list[tuple[str, str]]] = {}  # source column (lowercase) -> (kind, partition column)
    for column in partition_columns:
        if column in generated:
            try:
                found = _source_of(parse_value(generated[column]))
            except InvalidPredicateError:
                continue
            if found is not None and len(found[1].path) == 1:
                sources.setdefault(found[1].path[0].lower(), []).append((found[0], column))
    if not sources:
        return []
    by_lower = {f.name.lower(): f for f in schema}
    implied: list[Expression] = []
    for term in expression.children if isinstance(expression, And) else (expression,):
        if not (isinstance(term, Comparison) and term.op in _WIDENED and term.value is not None and len(term.column.path) == 1):
            continue
        source = by_lower.get(term.column.path[0].lower())
        for kind, column in sources.get(term.column.path[0].lower(), []):
            try:
                value = term.value.cast(source.type) if source is not None and term.value.type != source.type else term.value
                day = value.cast(pa.date32()) if not pa.types.is_date32(value.type) else value
                bound = day if kind == "date" else pa.scalar(day.as_py().year if day.is_valid else None, pa.int32())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                continue  # a literal these types cannot carry: no implied condition
            implied.append(Comparison(Reference((column,)), _WIDENED[term.op], bound))
    return implied


__all__ = ["FilePredicate"]
