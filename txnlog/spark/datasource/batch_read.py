"""``spark.read.format("txnlog").load(uri)``: the reader half of the data source.

Planning (a Python process on the driver) opens the snapshot, turns Spark's pushed filters into
one :class:`~txnlog.expressions.FilePredicate`, lists the files it may match (partition values,
min/max stats) and packs them into read tasks by size. Each task (an executor) decodes its files
with the snapshot's picklable :class:`~txnlog.read.ReadContext`, the one place rows are decoded
(column mapping, partition values, deletion vectors), and yields Arrow batches cast to the
schema Spark was told.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)
from pyspark.sql.types import StructType

from txnlog import Snapshot, Table
from txnlog.errors import SchemaError, TxnLogError
from txnlog.expressions import (
    Expression,
    FilePredicate,
    column,
    conjunction,
    contains,
    ends_with,
    equal,
    equal_null_safe,
    greater_than,
    greater_than_or_equal,
    is_in,
    is_not_null,
    is_null,
    less_than,
    less_than_or_equal,
    not_,
    starts_with,
)
from txnlog.properties import FIELD_METADATA_PREFIX
from txnlog.read import ReadContext
from txnlog.schema import map_fields
from txnlog.spark.common import arrow_schema_of_struct, spark_schema_of
from txnlog.spark.datasource.options import SourceOptions

#: The columns of ``Snapshot.files()`` a read task needs.
TASK_COLUMNS = ("path", "partition_values", "deletion_vector", "size")

_COMPARISONS: dict[type[Filter], Any] = {
    EqualTo: equal,
    EqualNullSafe: equal_null_safe,
    GreaterThan: greater_than,
    GreaterThanOrEqual: greater_than_or_equal,
    LessThan: less_than,
    LessThanOrEqual: less_than_or_equal,
}
_STRING_MATCHES: dict[type[Filter], Any] = {StringStartsWith: starts_with, StringEndsWith: ends_with, StringContains: contains}


def open_snapshot(options: SourceOptions, version: int | None = None) -> Snapshot:
    """The snapshot a read sees: ``version`` when pinned, else ``versionAsOf``/``timestampAsOf``, else the latest."""
    table = Table(options.uri, options.storage_options)
    if version is not None:
        return table.snapshot(version=version)
    return table.snapshot(version=options.version, timestamp=options.timestamp)


def table_schema(snapshot: Snapshot) -> StructType:
    """The table's logical schema as Spark types, without Delta's own field metadata (column
    mapping ids and physical names mean nothing to a reader of logical columns)."""

    def clean_field(f: dict[str, Any]) -> dict[str, Any]:
        return {**f, "metadata": {k: v for k, v in (f.get("metadata") or {}).items() if not k.startswith(FIELD_METADATA_PREFIX)}}

    raw = orjson.loads(snapshot.metadata.schema_string)
    return spark_schema_of(orjson.dumps(map_fields(raw, clean_field)).decode())


def check_given_schema(given: StructType, expected: StructType, uri: str, reader: str) -> None:
    """A schema passed to ``reader`` (``spark.read`` or ``spark.readStream``) must be the one the
    source reads the table with (names and types): SchemaError otherwise."""
    if [(f.name, f.dataType) for f in given.fields] != [(f.name, f.dataType) for f in expected.fields]:
        raise SchemaError(
            f"{reader}.format('txnlog') reads table {uri} with its own schema {expected.simpleString()}; "
            f"a schema given to {reader} ({given.simpleString()}) must be that one"
        )


def chosen_columns(given: StructType, table: StructType, uri: str) -> list[str] | None:
    """The table columns a schema given to ``spark.read`` names, in its order (None: the whole
    table, in the table's order). The API hands a reader no column pruning, so a schema naming
    some of the table's columns is how a query reads only those. Each field must be a column of
    the table (names matched case-insensitively) with the table's type, and may not declare
    non-null a column the table lets hold nulls: SchemaError otherwise, naming the field."""
    if [(f.name, f.dataType) for f in given.fields] == [(f.name, f.dataType) for f in table.fields]:
        return None
    by_lower = {f.name.lower(): f for f in table.fields}
    names: list[str] = []
    for f in given.fields:
        column = by_lower.get(f.name.lower())
        problem = None
        if column is None:
            problem = "is not a column of the table"
        elif column.name in names:
            problem = "is named twice"
        elif f.dataType != column.dataType:
            problem = f"has type {f.dataType.simpleString()}, the table's column {column.dataType.simpleString()}"
        elif column.nullable and not f.nullable:
            problem = "is declared NOT NULL but the table's column allows nulls"
        if problem is not None:
            raise SchemaError(
                f"spark.read.format('txnlog') reads table {uri} ({table.simpleString()}): field {f.name!r} of the given schema "
                f"{problem}; give the table's columns (all, or those to read) with their types",
                field=f.name,
            )
        names.append(column.name)  # type: ignore[union-attr]
    return names


def spark_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (the same columns, in order) as Spark declared its schema: Spark checks a
    source's batches exactly, names, nested field names and nullability flags included. Only a
    column whose type differs in those is cast; the others are passed as they are."""
    if batch.schema.equals(schema):
        return batch
    arrays = [a if a.type == f.type else a.cast(f.type) for a, f in zip(batch.columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def filter_expression(spark_filter: Filter) -> Expression | None:
    """Spark's pushed filter as a txnlog expression tree, or None for one it has no node for
    (a comparison with an array literal, a filter kind added by a later Spark)."""
    if isinstance(spark_filter, Not):
        child = filter_expression(spark_filter.child)
        return not_(child) if child is not None else None
    attribute = getattr(spark_filter, "attribute", None)
    if not isinstance(attribute, tuple) or not attribute:
        return None
    target = column(*attribute)
    kind = type(spark_filter)
    try:
        if isinstance(spark_filter, IsNull):
            return is_null(target)
        if isinstance(spark_filter, IsNotNull):
            return is_not_null(target)
        if isinstance(spark_filter, In):
            return is_in(target, spark_filter.value)
        value = getattr(spark_filter, "value", None)
        if kind in _COMPARISONS:
            return _COMPARISONS[kind](target, value)  # type: ignore[no-any-return]
        if kind in _STRING_MATCHES:
            return _STRING_MATCHES[kind](target, value)  # type: ignore[no-any-return]
    except TxnLogError:  # a literal the tree has no type for (an array, a struct)
        return None
    return None


def pack_files(files: pa.Table, max_bytes: int, open_cost: int, min_partitions: int) -> list[pa.Table]:
    """``files`` in groups, one per read task, as Spark packs a file source: a file counts its
    size plus ``open_cost``; groups are filled up to a split size, largest files first; the split
    size is ``max_bytes``, or smaller so that there are at least ``min_partitions`` groups."""
    if files.num_rows == 0:
        return []
    sizes = files.column("size").to_pylist()
    total = sum(s + open_cost for s in sizes)
    split = min(max_bytes, max(open_cost, total // min_partitions))
    groups: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        cost = sizes[i] + open_cost
        if current and current_bytes + cost > split:
            groups.append(current)
            current, current_bytes = [], 0
        current.append(i)
        current_bytes += cost
    groups.append(current)
    return [files.take(pa.array(sorted(g), pa.int64())) for g in groups]


class FilesPartition(InputPartition):
    """One read task: rows of ``Snapshot.files()`` (path, partition values, deletion vector)."""

    def __init__(self, files: pa.Table) -> None:
        super().__init__(files.num_rows)
        self.files = files


def file_partitions(files: pa.Table | Sequence[pa.Table], options: SourceOptions) -> list[FilesPartition]:
    """``files`` (rows of ``Snapshot.files()``, in one table or several, with or without stats)
    as read tasks: their :data:`TASK_COLUMNS`, packed by :func:`pack_files` with the read's
    options. The batch and the streaming readers' one way to hand files to executors."""
    tables = [files] if isinstance(files, pa.Table) else list(files)
    if not tables:
        return []
    tasks = pa.concat_tables([t.select(list(TASK_COLUMNS)) for t in tables])
    groups = pack_files(tasks, options.max_partition_bytes, options.open_cost_bytes, options.min_partitions)
    return [FilesPartition(g) for g in groups]


class TableReader(DataSourceReader):
    """Reads one snapshot of a txnlog table, every live file. Picklable: the snapshot itself
    stays in the planning process; tasks get the :class:`ReadContext` and their files."""

    def __init__(self, options: SourceOptions, snapshot: Snapshot, schema: StructType) -> None:
        self.columns = chosen_columns(schema, table_schema(snapshot), snapshot.uri)
        self.options = options
        self.version = snapshot.version
        self.context: ReadContext = snapshot.read_context()
        self.arrow_schema = arrow_schema_of_struct(schema)
        self.predicate: Expression | None = None
        self._snapshot: Snapshot | None = snapshot

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_snapshot"] = None  # the file list and log state stay on the driver
        return state

    def _planning_snapshot(self) -> Snapshot:
        if self._snapshot is None:
            self._snapshot = open_snapshot(self.options, self.version)
        return self._snapshot

    def files(self) -> pa.Table:
        """The files the read covers: the snapshot's live files, less those the pushed filters skip."""
        snapshot = self._planning_snapshot()
        if self.predicate is None:
            return snapshot.files(stats=False)
        config = snapshot.table_configuration
        predicate = FilePredicate(self.predicate, config.schema, config.partition_columns, config.physical_names)
        return snapshot.files(predicate, stats=False)

    def partitions(self) -> Sequence[InputPartition]:
        return file_partitions(self.files(), self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FilesPartition):  # Spark's placeholder when there are no files
            return
        for batch in self.context.batches(partition.files, columns=self.columns):
            yield spark_batch(batch, self.arrow_schema)


class FilteringTableReader(TableReader):
    """A :class:`TableReader` that also skips files by the filters Spark pushes
    (``option("filterPushdown", "true")``).

    Opt-in because PySpark 4.3 keeps the read planned for one query's pushed filters on the
    DataFrame's relation and reuses it for a later query of the same DataFrame that pushes no
    filter (``df.where(...).count()`` then ``df.count()`` counts only the first query's files).
    """

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:  # noqa: N802 - Spark's name
        """Keep for file skipping every filter txnlog can bind to the table; give back to Spark
        each one that skipping does not decide exactly (all but those on partition columns only)."""
        config = self._planning_snapshot().table_configuration
        kept: list[Expression] = []
        for_spark: list[Filter] = []
        for spark_filter in filters:
            expression = filter_expression(spark_filter)
            predicate = None
            if expression is not None:
                try:
                    predicate = FilePredicate(expression, config.schema, config.partition_columns, config.physical_names)
                except TxnLogError:  # a column or a literal type txnlog cannot evaluate: Spark filters it
                    predicate = None
            if predicate is not None:
                kept.append(expression)  # type: ignore[arg-type]
            if predicate is None or not predicate.matches_partition_only():
                for_spark.append(spark_filter)
        self.predicate = conjunction(kept) if kept else None
        return for_spark


__all__ = [
    "TASK_COLUMNS",
    "FilesPartition",
    "FilteringTableReader",
    "TableReader",
    "chosen_columns",
    "file_partitions",
    "filter_expression",
    "open_snapshot",
    "pack_files",
    "spark_batch",
    "table_schema",
]
