"""Column invariants and CHECK constraints, enforced on the data a transaction writes.

A row passes only if every expression is TRUE for it: FALSE or NULL is a violation, as in
delta-spark's invariant checker.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog import properties as props
from txnlog.errors import ProtocolViolationError
from txnlog.expressions import FilePredicate
from txnlog.schema import delta_field_metadata


def table_constraints(schema: pa.Schema, configuration: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """(name, SQL expression) for each CHECK constraint and column invariant of the table."""
    yield from props.CONSTRAINTS.items(configuration)
    for field in schema:
        raw = delta_field_metadata(field).get(props.INVARIANTS_KEY)
        if raw:
            expression = orjson.loads(raw) if isinstance(raw, str) else raw
            yield f"invariant on {field.name}", expression["expression"]["expression"]


def constraint_predicates(
    schema: pa.Schema, partition_columns: Sequence[str], configuration: Mapping[str, str]
) -> list[tuple[str, FilePredicate]]:
    """Each constraint parsed once, for checking batch after batch."""
    return [(name, FilePredicate(sql, schema, partition_columns)) for name, sql in table_constraints(schema, configuration)]


def constraint_violation(name: str, sql: str, count: int, example: object | None = None) -> ProtocolViolationError:
    """The error for ``count`` written rows failing CHECK constraint ``name`` (every writer's)."""
    e_g = "" if example is None else f", e.g. {example}"
    return ProtocolViolationError(f"CHECK constraint {name} ({sql}) is violated by {count} row(s){e_g}", rule=f"constraint:{name}")


def check_constraints(data: pa.Table, constraints: Sequence[tuple[str, FilePredicate]]) -> None:
    """Raise ProtocolViolationError naming the constraint and a failing row, if any row fails."""
    for name, predicate in constraints:
        sql = predicate.sql
        failing = (~predicate.rows()).mask(data)
        count = pc.sum(failing).as_py() or 0
        if count:
            raise constraint_violation(name, sql, count, data.filter(failing).slice(0, 1).to_pylist()[0])
