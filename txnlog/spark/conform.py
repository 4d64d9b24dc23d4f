"""The core's conform step compiled to Spark column expressions.

:class:`~txnlog.write.ConformSpec` says what each column of a written row holds; here it becomes
the ``select`` list of a DataFrame whose rows are then written (by txnlog's writer in a task
today; by Spark's own Parquet writer later): each supplied column cast to the table's type,
each other one filled as the spec says, and, where the table preserves row ids, each row's id
and commit version as its :class:`~txnlog.write.RowKind` keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from txnlog.errors import InvalidArgumentError
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import nullable_inside, spark_schema_of
from txnlog.write import ConformSpec, Fill, RowKind

if TYPE_CHECKING:
    from pyspark.sql import Column


def spark_types(spec: ConformSpec) -> dict[str, Any]:
    """Each table column's Spark type (a Delta schemaString is Spark's StructType JSON) as a value
    is cast to it: NOT NULL inside it left to the writer (:func:`nullable_inside`)."""
    return {f.name: nullable_inside(f.dataType) for f in spark_schema_of(spec.schema_string).fields}


def conformed(
    spec: ConformSpec,
    kind: RowKind,
    values: Mapping[str, Column],
    *,
    previous: tuple[Column, Column] | None = None,
    types: Mapping[str, Any] | None = None,
    refuse_always: bool = True,
) -> dict[str, Column]:
    """Output column name -> expression, for rows of ``kind``: each table column from
    ``values`` (the columns the rows supply, by table column name) cast to its type, else
    filled; then, when the table preserves row ids, ``row_id`` and ``row_commit_version`` as
    ``kind`` keeps them from ``previous`` (the rows' earlier id and commit version).
    ``refuse_always``: inserted rows may not give a GENERATED ALWAYS identity column (False for
    rows a statement already conformed, whose kept rows carry their ids)."""
    types = spark_types(spec) if types is None else {name: nullable_inside(kind) for name, kind in types.items()}
    if kind is RowKind.INSERT and refuse_always:
        spec.check_supplied(values, "a MERGE insert")
    out: dict[str, Column] = {}
    for column in spec.columns:
        recompute = column.fill is Fill.GENERATED and kind is RowKind.UPDATE  # as delta-spark's UPDATE does
        if column.name in values and not recompute:
            out[column.name] = values[column.name].cast(types[column.name])
        elif column.fill is Fill.DEFAULT:  # an expression without columns
            assert column.expression is not None
            out[column.name] = F.expr(column.expression).cast(types[column.name])
        else:  # identity and generated: NULL, which the task's conform step numbers or computes
            out[column.name] = F.lit(None).cast(types[column.name])
    if spec.row_ids is not None:
        if kind.keeps_row_id and previous is None:
            raise InvalidArgumentError(f"rows of kind {kind.value} keep their ids: their previous ids are needed")
        null = F.lit(None).cast("long")
        out[ROW_ID] = previous[0].cast("long") if kind.keeps_row_id and previous is not None else null
        out[ROW_COMMIT_VERSION] = previous[1].cast("long") if kind.keeps_row_commit_version and previous is not None else null
    return out


def conformed_columns(spec: ConformSpec, kind: RowKind, values: Mapping[str, Column], **options: Any) -> list[Column]:
    """:func:`conformed` (``options``: its ``previous`` and ``types``) as a ``select`` list."""
    return [c.alias(n) for n, c in conformed(spec, kind, values, **options).items()]


def either(condition: Column, chosen: Mapping[str, Column], otherwise: Mapping[str, Column]) -> list[Column]:
    """A ``select`` list taking, row by row, ``chosen``'s columns where ``condition`` holds and
    ``otherwise``'s elsewhere (rows of two kinds in one pass, e.g. an UPDATE's rewrite)."""
    return [F.when(condition, chosen[n]).otherwise(otherwise[n]).alias(n) for n in chosen]


__all__ = ["conformed", "conformed_columns", "either", "spark_types"]
