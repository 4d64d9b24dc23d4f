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
Default, generated and identity columns (not yet supported) become new :class:`Fill` kinds.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from txnlog import properties as props
from txnlog.errors import SchemaError
from txnlog.file_facts import physical_name
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.schema import delta_field_metadata
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
    """What a column gets in a row that does not supply it. Only NULL exists today; default,
    generated and identity columns add their kinds here and their values in :meth:`ConformSpec.conform`."""

    NULL = "null"


@dataclass(frozen=True)
class ColumnSpec:
    """One column of the table, as a writer fills it."""

    name: str  # logical
    field: pa.Field  # logical name, Arrow type, nullability, Delta metadata
    physical_name: str
    field_id: int | None  # under column mapping
    fill: Fill = Fill.NULL


@dataclass(frozen=True)
class ConformSpec:
    """How rows are made to fit one table before they are written. Picklable."""

    table_uri: str
    columns: tuple[ColumnSpec, ...]
    configuration: TableConfiguration

    @classmethod
    def for_configuration(cls, config: TableConfiguration, table_uri: str) -> ConformSpec:
        mapped = config.is_column_mapped
        columns = []
        for f in config.schema:
            field_id = delta_field_metadata(f).get(props.COLUMN_MAPPING_ID_KEY) if mapped else None
            columns.append(ColumnSpec(f.name, f, physical_name(f, mapped), int(field_id) if field_id is not None else None))
        return cls(table_uri, tuple(columns), config)

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
        arrays: list[pa.ChunkedArray | pa.Array] = []
        fields: list[pa.Field] = []
        for column in self.columns:
            source = sources.get(column.name)
            if source is not None:
                values = rows.column(source)
                arrays.append(values)
                fields.append(column.field if values.type == column.field.type else column.field.with_type(values.type))
            else:
                arrays.append(self._fill(column, rows.num_rows))
                fields.append(column.field)
        if with_row_ids and self.row_ids is not None:
            old = previous if previous is not None else rows
            nulls = pa.nulls(rows.num_rows, pa.int64())
            arrays.append(old.column(ROW_ID) if kind.keeps_row_id else nulls)
            arrays.append(old.column(ROW_COMMIT_VERSION) if kind.keeps_row_commit_version else nulls)
            fields += [pa.field(ROW_ID, pa.int64()), pa.field(ROW_COMMIT_VERSION, pa.int64())]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def conform_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """An inserted batch with the columns it does not supply filled (unchanged when it
        supplies them all): what every append's batch goes through."""
        missing = self.missing(batch.schema.names)
        if not missing:
            return batch
        for column in missing:
            batch = batch.append_column(column.field, self._fill(column, batch.num_rows))
        return batch

    def conformed_schema(self, schema: pa.Schema) -> pa.Schema:
        """The schema :meth:`conform_batch` makes of batches of ``schema`` (the same errors,
        before any row)."""
        for column in self.missing(schema.names):
            self._fill(column, 0)
            schema = schema.append(column.field)
        return schema

    def _fill(self, column: ColumnSpec, n: int) -> pa.Array:
        if column.fill is Fill.NULL:
            if not column.field.nullable:
                raise SchemaError(f"non-nullable column '{column.name}' is missing from the data", field=column.name)
            return pa.nulls(n, column.field.type)
        raise AssertionError(column.fill)  # pragma: no cover - every kind is handled above


__all__ = ["ColumnSpec", "ConformSpec", "Fill", "RowKind"]
