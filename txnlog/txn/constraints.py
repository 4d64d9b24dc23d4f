"""Column invariants and CHECK constraints, enforced on the data a transaction writes.

A row passes only if every expression is TRUE for it: FALSE or NULL is a violation, as in
delta-spark's invariant checker.
"""

from __future__ import annotations

from typing import Iterator

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from txnlog.errors import ProtocolViolationError
from txnlog.log.actions import Metadata
from txnlog.schema import delta_field_metadata


def table_constraints(metadata: Metadata) -> Iterator[tuple[str, str]]:
    """(name, SQL expression) for each CHECK constraint and column invariant of the table."""
    for key, value in metadata.configuration.items():
        if key.startswith("delta.constraints."):
            yield key[len("delta.constraints.") :], value
    for field in metadata.schema:
        raw = delta_field_metadata(field).get("delta.invariants")
        if raw:
            expression = orjson.loads(raw) if isinstance(raw, str) else raw
            yield f"invariant on {field.name}", expression["expression"]["expression"]


def check_constraints(data: pa.Table, metadata: Metadata) -> None:
    """Raise ProtocolViolationError naming the constraint and a failing row, if any row fails."""
    from txnlog.predicates import FilePredicate

    for name, sql in table_constraints(metadata):
        predicate = FilePredicate(sql, metadata.schema, metadata.partition_columns)
        ok = ds.dataset(data).to_table(columns={"ok": predicate.row_filter()}).column("ok")
        failing = pc.invert(pc.fill_null(ok, False))
        count = pc.sum(failing).as_py() or 0
        if count:
            example = data.filter(failing).slice(0, 1).to_pylist()[0]
            raise ProtocolViolationError(
                f"CHECK constraint {name} ({sql}) is violated by {count} row(s), e.g. {example}",
                rule=f"constraint:{name}",
            )
