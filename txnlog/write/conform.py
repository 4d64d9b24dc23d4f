"""The conform step: what a row written to the table holds in each column, decided once per table.

:class:`ConformSpec` is derived from a :class:`~txnlog.table_configuration.TableConfiguration`:
one :class:`ColumnSpec` per column (its Arrow field, physical name and field id, and how a row
that does not supply it is filled), and the hidden columns that keep stable row ids when the
table preserves them. Every batch is conformed before it is written: an append's rows as
inserts (``WriteContext.write``), a DML's rows by their :class:`RowKind`, with the columns the
DML assigned as the ones supplied. The parquet writer then casts types and names columns as
the files store them.

The same spec is what an engine compiles into its own column expressions (``txnlog.spark``
compiles it to Spark columns), so the rule of which value a column gets is written once.

Columns whose values the table supplies (PROTOCOL.md): a default column (``CURRENT_DEFAULT``)
takes its default where a row lacks it; a generated column (``delta.generationExpression``) is
computed where a row lacks it and checked, ``(value <=> expression) IS TRUE``, where a row gives
it; an identity column (``delta.identity.*``) gets ``next + step * k`` where a row lacks it (or
holds NULL, the placeholder an engine's inserted rows carry), ``k`` handed out by an
:class:`IdentityAllocator` so that no two writers of one transaction overlap. The commit then
moves the high-water mark past the values its files hold (``OptimisticTransaction.commit``).
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txnlog import properties as props
from txnlog.errors import InvalidPredicateError, ProtocolViolationError, SchemaError, TxnLogError
from txnlog.expressions.parser import parse_value
from txnlog.expressions.tree import Reference
from txnlog.expressions.values import ValueExpression, evaluate_value
from txnlog.file_facts import physical_name
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.schema import LONG_MAX, LONG_MIN, Identity, delta_field_metadata
from txnlog.table_configuration import RowIdColumns, TableConfiguration


class RowKind(enum.Enum):
    """Why a row is written, which decides its stable id under row tracking: an inserted row
    gets a new id and this commit's version; an updated row keeps its id and gets this commit's
    version; a copied row (written again unchanged by a rewrite) keeps both."""

    INSERT = "insert"
    UPDATE = "update"
    COPY = "copy"

    @property
    def keeps_row_id(self) -> bool:
        return self is not RowKind.INSERT

    @property
    def keeps_row_commit_version(self) -> bool:
        return self is RowKind.COPY


class Fill(enum.Enum):
    """What a column gets in a row that does not supply it: NULL, its default value, its
    generation expression's value, or the next identity value."""

    NULL = "null"
    DEFAULT = "default"
    GENERATED = "generated"
    IDENTITY = "identity"


#: Identity values one Spark task may generate in one write: the task with partition index
#: ``p`` takes indexes ``region + p * TASK_SPAN + k``, its region reserved on the driver.
TASK_SPAN = 1 << 32
#: Tasks one Spark write may run (the region reserved for it is ``MAX_TASKS * TASK_SPAN``).
MAX_TASKS = 1 << 20


class IdentityAllocator:
    """Hands out indexes of identity values (index ``k``: the value ``next + step * k``) to
    the writers of one transaction, never the same twice: in this process, each batch takes
    the next ones; a Spark write reserves a region on the driver (:meth:`for_tasks`), split
    among its tasks by partition index. Picklable (a copy in another process hands out only
    from a region reserved for it)."""

    def __init__(self, region: int | None = None) -> None:
        self._next = 0
        self._region = region  # set: a Spark task's copy, offsets within TASK_SPAN per task
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"next": self._next, "region": self._region}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._next, self._region, self._lock = state["next"], state["region"], threading.Lock()

    def take(self, n: int) -> int:
        """The first of ``n`` consecutive indexes, reserved for the caller."""
        with self._lock:
            first, self._next = self._next, self._next + n
        if self._region is None:
            return first
        if first + n > TASK_SPAN:
            raise ProtocolViolationError(f"a Spark task generated more than {TASK_SPAN} identity values in one write; repartition the data",
                                         rule="identityColumns")
        return self._region + _task_index() * TASK_SPAN + first

    @property
    def task_region(self) -> int | None:
        """The first index of the region this tasks' allocator hands out from (task ``p`` from
        ``task_region + p * TASK_SPAN``); None for an allocator that is not one."""
        return self._region

    def for_tasks(self) -> IdentityAllocator:
        """An allocator for the tasks of one Spark write: a region of ``MAX_TASKS * TASK_SPAN``
        indexes reserved here, on the driver (itself when it is already one)."""
        if self._region is not None:
            return self
        return IdentityAllocator(region=self.take(MAX_TASKS * TASK_SPAN))


def last_identity_index(identity: Identity) -> int:
    """The largest index ``k`` whose value ``next + step * k`` fits a long (negative when not
    even the next one does)."""
    room = LONG_MAX - identity.next_value if identity.step > 0 else identity.next_value - LONG_MIN
    return room // abs(identity.step)


def identity_overflow(column: str, table_uri: str, identity: Identity) -> ProtocolViolationError:
    return ProtocolViolationError(
        f"identity column '{column}' of table {table_uri} overflows: the next values would pass the range of a long "
        f"(start {identity.start}, step {identity.step}, high-water mark {identity.high_water_mark})",
        rule="identityColumns",
    )


def generated_mismatch(column: str, table_uri: str, expression: str, given: object, computed: object) -> ProtocolViolationError:
    """The error for a written row whose value of a generated column is not what its expression
    gives (every writer's)."""
    return ProtocolViolationError(
        f"column '{column}' of table {table_uri} is generated as {expression}: a written row gives "
        f"{_shown(given)} where the expression gives {_shown(computed)}",
        rule="generatedColumns",
    )


def _shown(value: object) -> str:
    """A value as an error shows it: dates and times in ISO 8601, anything else as Python writes it."""
    return value.isoformat() if isinstance(value, dt.date | dt.time) else repr(value)


def _task_index() -> int:
    """The partition index of the Spark task running this (0 outside Spark)."""
    pyspark = sys.modules.get("pyspark")  # a Spark worker has imported it; elsewhere it is not needed
    if pyspark is None:
        return 0
    context = pyspark.TaskContext.get()
    index = context.partitionId() if context is not None else 0
    if index >= MAX_TASKS:
        raise ProtocolViolationError(f"a Spark write with more than {MAX_TASKS} tasks cannot generate identity values", rule="identityColumns")
    return int(index)


_parse_value_cached = functools.lru_cache(maxsize=256)(parse_value)  # value trees are immutable: shared safely


@dataclass(frozen=True)
class ColumnSpec:
    """One column of the table, as a writer fills it."""

    name: str  # logical
    field: pa.Field  # logical name, Arrow type, nullability, Delta metadata
    physical_name: str
    field_id: int | None  # under column mapping
    fill: Fill = Fill.NULL
    expression: str | None = None  # the SQL of a default or generated column
    identity: Identity | None = None

    @property
    def parsed(self) -> ValueExpression:
        """The default or generation expression, parsed (once per process: every write of a
        table parses the same few expressions)."""
        assert self.expression is not None
        try:
            return _parse_value_cached(self.expression)
        except TxnLogError as e:
            what = "generation expression" if self.fill is Fill.GENERATED else "default value"
            raise SchemaError(f"the {what} {self.expression!r} of column '{self.name}' cannot be parsed: {e}", field=self.name) from None


@dataclass(frozen=True)
class ConformSpec:
    """How rows are made to fit one table before they are written. Picklable."""

    table_uri: str
    columns: tuple[ColumnSpec, ...]
    configuration: TableConfiguration

    @classmethod
    def for_configuration(cls, config: TableConfiguration, table_uri: str) -> ConformSpec:
        mapped = config.is_column_mapped
        identities, generated, defaults = config.identity_columns, config.generated_columns, config.default_columns
        columns = []
        for f in config.schema:
            field_id = delta_field_metadata(f).get(props.COLUMN_MAPPING_ID_KEY) if mapped else None
            fill, expression, identity = Fill.NULL, None, identities.get(f.name)
            if identity is not None:
                fill = Fill.IDENTITY
            elif f.name in generated:
                fill, expression = Fill.GENERATED, generated[f.name]
            elif f.name in defaults:
                fill, expression = Fill.DEFAULT, defaults[f.name]
            columns.append(ColumnSpec(f.name, f, physical_name(f, mapped), int(field_id) if field_id is not None else None,
                                      fill, expression, identity))
        return cls(table_uri, tuple(columns), config)

    @property
    def supplies_values(self) -> bool:
        """Whether some column's values come from the table (default, generated, identity)."""
        return any(c.fill is not Fill.NULL for c in self.columns)

    def check_supplied(self, names: Iterable[str], where: str = "a write") -> None:
        """SchemaError naming the column when ``names`` (the columns rows give) include a
        GENERATED ALWAYS identity column: its values are the table's to give (delta-spark's rule)."""
        for column in self.supplied(names):
            if column is not None and column.identity is not None and column.identity.always:
                raise SchemaError(f"{where} gives values for column '{column.name}' of table {self.table_uri}, a GENERATED ALWAYS "
                                  "identity column: its values are generated", field=column.name)

    @property
    def schema_string(self) -> str:
        """The table schema as Delta JSON (an engine builds its own types from it)."""
        return self.configuration.metadata.schema_string

    @property
    def row_ids(self) -> RowIdColumns | None:
        """The hidden columns stable ids go to, when the table preserves row ids (None when it
        does not; the table configuration's error when it should but names none)."""
        return self.configuration.preserved_row_id_columns(f"table {self.table_uri}")

    @property
    def schema(self) -> pa.Schema:
        """The table's logical columns."""
        return pa.schema([c.field for c in self.columns])

    @property
    def output_schema(self) -> pa.Schema:
        """What :meth:`conform` gives: the table's columns, then the stable id and commit version
        of each row (``row_id``, ``row_commit_version``, null meaning "a new one") when the
        table preserves row ids."""
        schema = self.schema
        if self.row_ids is not None:
            schema = schema.append(pa.field(ROW_ID, pa.int64())).append(pa.field(ROW_COMMIT_VERSION, pa.int64()))
        return schema

    def supplied(self, names: Iterable[str]) -> list[ColumnSpec | None]:
        """For each of ``names`` (a batch's columns), the table column it supplies, matched as
        the writer matches them (exactly, else the one case-insensitive match); None for a name
        that is no table column (the writer refuses it, naming it)."""
        exact = {c.name: c for c in self.columns}
        folded: dict[str, list[ColumnSpec]] = {}
        for c in self.columns:
            folded.setdefault(c.name.lower(), []).append(c)
        out: list[ColumnSpec | None] = []
        for name in names:
            found = exact.get(name)
            if found is None:
                candidates = folded.get(name.lower(), [])
                found = candidates[0] if len(candidates) == 1 else None
            out.append(found)
        return out

    def missing(self, names: Iterable[str]) -> list[ColumnSpec]:
        """The table columns a batch of columns ``names`` does not supply."""
        given = {c.name for c in self.supplied(names) if c is not None}
        return [c for c in self.columns if c.name not in given]

    def conform(
        self,
        rows: pa.Table,
        kind: RowKind = RowKind.INSERT,
        *,
        supplied: Sequence[str] | None = None,
        previous: pa.Table | None = None,
        with_row_ids: bool = True,
    ) -> pa.Table:
        """``rows`` as the table's columns: each column the row supplies (``supplied``, default
        every table column ``rows`` has) as given, each other one filled (:class:`Fill`); then,
        when the table preserves row ids (and ``with_row_ids``), each row's id and commit version
        as ``kind`` keeps them from ``previous`` (the rows' earlier versions, read with their ids;
        default ``rows`` itself). Types are left to the writer, which casts them."""
        chosen = set(supplied) if supplied is not None else None
        sources: dict[str, str] = {}  # table column -> the column of ``rows`` supplying it
        for name, column in zip(rows.column_names, self.supplied(rows.column_names)):
            if column is not None and (chosen is None or name in chosen):
                sources.setdefault(column.name, name)
        if kind is RowKind.INSERT:
            self.check_supplied(sources, "an insert")
        arrays: list[pa.ChunkedArray | pa.Array] = []
        fields: list[pa.Field] = []
        for column in self.columns:
            source = sources.get(column.name)
            if source is not None:
                values = rows.column(source)
                arrays.append(values)
                fields.append(column.field if values.type == column.field.type else column.field.with_type(values.type))
            else:
                # An inserted row's identity stays NULL here: the writer numbers it (conform_batch).
                arrays.append(pa.nulls(rows.num_rows, column.field.type) if column.fill is Fill.IDENTITY else self._fill(column, rows.num_rows))
                fields.append(column.field)
        if kind is not RowKind.COPY and self.supplies_values:
            table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
            given = set(sources)
            if kind is RowKind.UPDATE and supplied is None:  # an update recomputes its generated columns, as delta-spark's
                given -= {c.name for c in self.columns if c.fill is Fill.GENERATED}
            computed = self._computed(table, supplied=given)
            arrays = [computed.column(i) for i in range(len(self.columns))] + arrays[len(self.columns):]
            fields = list(computed.schema) + fields[len(self.columns):]
        if with_row_ids and self.row_ids is not None:
            old = previous if previous is not None else rows
            nulls = pa.nulls(rows.num_rows, pa.int64())
            arrays.append(old.column(ROW_ID) if kind.keeps_row_id else nulls)
            arrays.append(old.column(ROW_COMMIT_VERSION) if kind.keeps_row_commit_version else nulls)
            fields += [pa.field(ROW_ID, pa.int64()), pa.field(ROW_COMMIT_VERSION, pa.int64())]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def conform_batch(self, batch: pa.RecordBatch, identity: IdentityAllocator | None = None, *, data_change: bool = True) -> pa.RecordBatch:
        """A written batch with the columns it does not supply filled (unchanged when it
        supplies them all and no column's values come from the table): what every data file's
        batch goes through. Identity values (for the rows lacking one) come from ``identity``;
        generated columns are checked where given. ``data_change=False`` (a compaction) only
        copies rows: nothing is generated or checked."""
        missing = self.missing(batch.schema.names)
        computes = self.supplies_values and data_change
        if not missing and not computes:
            return batch
        for column in missing:
            if column.fill in (Fill.IDENTITY, Fill.GENERATED):
                # A placeholder _computed replaces: untyped NULLs hold no buffers to allocate (an
                # empty batch numbers nothing, so its placeholder keeps the column's type).
                field, values = (column.field.with_type(pa.null()), pa.nulls(batch.num_rows)) if computes and batch.num_rows else (
                    column.field, pa.nulls(batch.num_rows, column.field.type))
            else:
                field, values = column.field, self._fill(column, batch.num_rows)
            batch = batch.append_column(field, values)
        if not computes:
            return batch
        given = {c.name for c in self.supplied(batch.schema.names) if c is not None} - {c.name for c in missing}
        table = self._computed(pa.Table.from_batches([batch]), supplied=given, identity=identity or IdentityAllocator())
        return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_arrays(
            [pa.array([], f.type) for f in table.schema], schema=table.schema)

    def _computed(self, rows: pa.Table, *, supplied: set[str], identity: IdentityAllocator | None = None) -> pa.Table:
        """``rows`` (every table column present, by name) with identity values where NULL (when
        ``identity`` is given), then each generated column computed where not ``supplied`` and
        checked where it is."""
        names = {c.name: name for c, name in zip(self.supplied(rows.column_names), rows.column_names) if c is not None}
        if identity is not None:
            for column in self.columns:
                if column.identity is not None:
                    rows = self._numbered(rows, names[column.name], column, identity)
        for column in self.columns:
            if column.fill is not Fill.GENERATED:
                continue
            index = rows.column_names.index(names[column.name])
            computed = self._evaluate(column, rows, names)
            if column.name in supplied:
                # (given <=> computed) IS TRUE, except that a NULL given is a missing value: an
                # engine's placeholder for the value computed here.
                given = rows.column(index)
                same = pc.or_(pc.fill_null(pc.equal(given, computed), False), pc.is_null(given))
                if given.null_count:
                    rows = rows.set_column(index, rows.field(index), pc.coalesce(given, computed.cast(given.type)))
                if not pc.all(same).as_py():
                    row = pc.index(same, False).as_py()
                    raise generated_mismatch(column.name, self.table_uri, column.expression or "", given[row].as_py(), computed[row].as_py())
            else:
                rows = rows.set_column(index, rows.field(index).with_type(column.field.type), computed)
        return rows

    def _evaluate(self, column: ColumnSpec, rows: pa.Table, names: dict[str, str]) -> pa.ChunkedArray:
        """A default or generated column's values on ``rows``, of the column's type."""
        by_lower = {k.lower(): v for k, v in names.items()}

        def resolve(ref: Reference) -> Any:
            source = by_lower.get(ref.path[0].lower()) if len(ref.path) == 1 else None
            if source is None or source == names[column.name]:
                raise SchemaError(f"the expression {column.expression!r} of column '{column.name}' reads {ref}, which is no other "
                                  "top-level column of the table", field=column.name)
            return rows.column(source)

        try:
            values = evaluate_value(column.parsed, resolve, rows.num_rows, text=column.expression or "")
            return values.cast(column.field.type) if values.type != column.field.type else values
        except (InvalidPredicateError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaError(f"column '{column.name}' of table {self.table_uri}: {e}", field=column.name) from None

    def _numbered(self, rows: pa.Table, name: str, column: ColumnSpec, identity: IdentityAllocator) -> pa.Table:
        """``rows`` with an identity value in each row whose column ``name`` is NULL."""
        assert column.identity is not None
        index = rows.column_names.index(name)
        values = rows.column(index)
        missing = values.null_count
        if not missing:
            return rows
        first = identity.take(missing)
        spec = column.identity
        low, high = spec.next_value + spec.step * first, spec.next_value + spec.step * (first + missing - 1)
        if not (LONG_MIN <= low <= LONG_MAX and LONG_MIN <= high <= LONG_MAX):
            raise identity_overflow(column.name, self.table_uri, spec)
        # low, low + step, ...: numpy in place (the bounds were checked above, so no step overflows;
        # Arrow's running sum over a repeated step was most of an identity append's extra cost)
        steps = np.arange(missing, dtype=np.int64)
        if spec.step != 1:
            steps *= spec.step
        steps += low
        generated = pa.array(steps, pa.int64())
        if missing == len(values):
            filled: Any = generated
        else:  # only the NULLs, in row order
            positions = pc.cumulative_sum(pc.cast(pc.is_null(values), pa.int64()))
            at = pc.max_element_wise(pc.subtract(positions, 1), 0)  # rows before the first NULL take nothing from it
            filled = pc.if_else(pc.is_null(values), pc.take(generated, at), values.cast(pa.int64()))
        return rows.set_column(index, rows.field(index).with_type(pa.int64()), filled)

    def conformed_schema(self, schema: pa.Schema) -> pa.Schema:
        """The schema :meth:`conform_batch` makes of batches of ``schema`` (the same errors,
        before any row)."""
        for column in self.missing(schema.names):
            self._fill(column, 0)
            schema = schema.append(column.field)
        for name, given in zip(schema.names, self.supplied(schema.names)):
            if given is not None and given.identity is not None and schema.field(name).type != pa.int64():
                index = schema.get_field_index(name)  # numbered values are longs, whatever type the rows gave
                schema = schema.set(index, schema.field(index).with_type(pa.int64()))
        return schema

    def _fill(self, column: ColumnSpec, n: int) -> pa.Array | pa.ChunkedArray:
        if column.fill is Fill.NULL:
            if not column.field.nullable:
                raise SchemaError(f"non-nullable column '{column.name}' is missing from the data", field=column.name)
            return pa.nulls(n, column.field.type)
        if column.fill is Fill.DEFAULT:  # the expression reads no column: n copies of its value
            return self._evaluate(column, pa.table({"": pa.nulls(n)}), {column.name: ""}).combine_chunks()
        return pa.nulls(n, column.field.type)  # identity, generated: computed once every column is there


__all__ = ["MAX_TASKS", "TASK_SPAN", "ColumnSpec", "ConformSpec", "Fill", "IdentityAllocator", "RowKind", "generated_mismatch"]
