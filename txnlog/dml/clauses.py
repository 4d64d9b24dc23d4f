"""The pieces of a MERGE's clauses that :class:`~txnlog.dml.plans.MergePlan` is built from: the
ON condition, the update and insert assignments, and the source's key range as a predicate on
the target.

Conditions and expressions are SQL over two aliases: ``t`` (the target) and ``s`` (the source).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidPredicateError
from txnlog.expressions.parser import parse_value
from txnlog.expressions.values import ColumnValue, Operation, ValueExpression, conjuncts

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: An update or insert clause: {target column: SQL expression}, ``"*"`` (every column from the
#: source, by name), or None (no such clause).
Assignments = Mapping[str, str] | str | None


def quote_name(name: str) -> str:
    """``name`` as one SQL identifier (backticks, its own doubled), so a dot or a space is part
    of the name rather than a path into a struct."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class MergeCondition:
    """The ON clause: its SQL text, its tree, and the ``t.x = s.y`` equalities in its top-level
    AND (the keys the source is joined on; the other terms are checked on the joined rows)."""

    sql: str
    pairs: tuple[tuple[str, str], ...]  # (target column, source column)
    tree: ValueExpression
    residual: tuple[ValueExpression, ...]  # the terms of the top-level AND that are not pairs

    @classmethod
    def parse(cls, on: str | Sequence[str]) -> MergeCondition:
        """``on``: a key column, a list of them (the same name on both sides), or a condition over
        ``t`` and ``s`` holding at least one ``t.x = s.y``."""
        if isinstance(on, str) and _IDENTIFIER.match(on.strip()):
            on = [on.strip()]
        if not isinstance(on, str):
            names = list(on)
            if not names or not all(isinstance(n, str) and n for n in names):
                raise InvalidArgumentError(f"merge on= must name at least one key column, got {on!r}")
            on = " AND ".join(f"t.{quote_name(n)} = s.{quote_name(n)}" for n in names)
        try:
            tree = parse_value(on)
        except InvalidPredicateError as e:
            raise InvalidArgumentError(f"merge condition: {e}") from None
        found: list[tuple[str, str]] = []
        residual: list[ValueExpression] = []
        for term in conjuncts(tree):
            pair = _key_pair(term)
            if pair is None:
                residual.append(term)
            else:
                found.append(pair)
        if not found:
            raise InvalidArgumentError(
                f"merge condition {on!r} needs at least one equality between a target and a source column "
                "(e.g. 't.id = s.id'; the aliases are t and s)"
            )
        return cls(on, tuple(found), tree, tuple(residual))


def _key_pair(term: ValueExpression) -> tuple[str, str] | None:
    """(target column, source column) when ``term`` is ``t.x = s.y`` (either way round)."""
    if not (isinstance(term, Operation) and term.op == "=" and all(isinstance(o, ColumnValue) for o in term.operands)):
        return None
    sides: dict[str, str] = {}
    for operand in term.operands:
        assert isinstance(operand, ColumnValue)
        path = operand.ref.path
        if len(path) == 2 and path[0].lower() in ("t", "s"):
            sides[path[0].lower()] = path[1]
    return (sides["t"], sides["s"]) if len(sides) == 2 else None


# -- the source's key range as a predicate on the target -------------------------------------


def _sql_literal(value: Any) -> str | None:
    """``value`` as a SQL literal txnlog.expressions reads exactly, or None (no pruning on it)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return str(value) if value.is_finite() else None
    if isinstance(value, str):
        return None if ("'" in value or "\\" in value) else f"'{value}'"
    if isinstance(value, _dt.datetime):
        return None  # the session time zone decides what a naive datetime means: do not guess
    if isinstance(value, _dt.date):
        return f"DATE '{value.isoformat()}'"
    return None


def key_bounds(keyed: pa.Table, names: Sequence[str]) -> dict[str, tuple[Any, Any]]:
    """Each of ``names``' (min, max) over ``keyed`` (rows whose keys are all non-null), as
    :func:`key_range_predicate` takes them."""
    bounds = {}
    for name in names:
        low_high = pc.min_max(keyed.column(name))
        bounds[name] = (low_high["min"].as_py(), low_high["max"].as_py())
    return bounds


def key_range_predicate(pairs: Sequence[tuple[str, str]], bounds: Mapping[str, tuple[Any, Any]]) -> str | None:
    """``t >= min AND t <= max`` for each key pair whose source bounds are known, or None."""
    terms = []
    for target, source in pairs:
        low, high = bounds.get(source, (None, None))
        lo, hi = _sql_literal(low), _sql_literal(high)
        if lo is not None and hi is not None:
            terms.append(f"{quote_name(target)} >= {lo} AND {quote_name(target)} <= {hi}")
    return " AND ".join(terms) if terms else None


# -- assignments ----------------------------------------------------------------------------


def assignments(what: str, value: Assignments, columns: Sequence[str], source_columns: Sequence[str], *,
                keep_missing: bool = False) -> dict[str, str] | None:
    """Normalise an update/insert clause to {target column: SQL expression}. ``"*"`` takes each
    target column from the source column of the same name (case-insensitively); an update with
    ``"*"`` needs them all (with ``keep_missing``, under schema evolution as delta-spark's
    autoMerge, it leaves the others as they were), an insert leaves the missing ones NULL."""
    if value is None:
        return None
    if isinstance(value, str):
        if value != "*":
            raise InvalidArgumentError(f"{what} must be a dict of column -> expression or '*', got {value!r}")
        lowered = {c.lower(): c for c in source_columns}
        missing = [c for c in columns if c.lower() not in lowered]
        if missing and what == "when_matched_update" and not keep_missing:
            raise InvalidArgumentError(f"{what}='*' needs every target column in the source; missing {missing}")
        return {c: f"s.{quote_name(lowered[c.lower()])}" for c in columns if c.lower() in lowered}
    if not isinstance(value, Mapping):
        raise InvalidArgumentTypeError(f"{what} must be a dict of column -> expression or '*', got {type(value).__name__}")
    by_lower = {c.lower(): c for c in columns}
    out: dict[str, str] = {}
    for name, expression in value.items():
        if not isinstance(name, str) or name.lower() not in by_lower:
            raise InvalidArgumentError(f"{what} sets {name!r}, which is not a column of the target table (columns: {list(columns)})")
        if not isinstance(expression, str):
            raise InvalidArgumentTypeError(f"{what}[{name!r}] must be a SQL expression string, got {type(expression).__name__}")
        out[by_lower[name.lower()]] = expression
    return out


__all__ = ["Assignments", "MergeCondition", "assignments", "key_bounds", "key_range_predicate", "quote_name"]
