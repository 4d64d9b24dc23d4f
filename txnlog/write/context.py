"""WriteContext: everything a writer needs to produce data files for a table, in one picklable
value.

Built from a snapshot (or, for a new table, from its metadata), it travels to wherever the data
is: a Spark executor holds only the context, opens the table's store itself from the URI and
storage options, writes Arrow data in the table's layout (partitioning, physical names and
field ids, stats columns, target file size, compression), checks the schema and CHECK
constraints before any file is written, and returns the file actions ready for
``txn.add_files(...)``. ``Table.append``, ``OptimisticTransaction.write`` and the Spark writer
all write data files through it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError
from txnlog.file_facts import ColumnPath
from txnlog.log.actions import AddFile, Metadata, Protocol
from txnlog.log.codec import encode_action
from txnlog.log.features import protocol_for
from txnlog.log.file_actions import table_from_log_dicts
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.storage import LogStore, normalize_uri, open_store
from txnlog.table_configuration import TableConfiguration
from txnlog.write.conform import ConformSpec, IdentityAllocator
from txnlog.write.constraints import check_constraints, constraint_predicates
from txnlog.write.parquet import as_reader, check_write_schema, write_data_files

if TYPE_CHECKING:  # annotations only
    from txnlog.expressions import FilePredicate
    from txnlog.snapshot import Snapshot


@dataclass(frozen=True)
class WrittenFiles:
    """The data files one write produced, not yet part of the table: as ``AddFile`` records and
    as an Arrow table in the ``Snapshot.files()`` layout (what ``txn.add_files`` takes)."""

    add_files: list[AddFile]
    files: pa.Table

    @property
    def num_files(self) -> int:
        return len(self.add_files)


@dataclass(frozen=True)
class WriteContext:
    """How to write data files for one table at one version. Picklable (the table's
    configuration is plain records; the store is opened on first use, in whichever process
    uses it)."""

    table_uri: str
    table_configuration: TableConfiguration
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    target_file_size: int | None = None
    compression: str = "snappy"
    #: Where identity values come from: a transaction's (shared by all its writes), or a
    #: Spark write's region; None: each :meth:`write` numbers from the high-water mark.
    identity: IdentityAllocator | None = field(default=None, compare=False, repr=False)

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot, *, storage_options: Mapping[str, Any] | None = None, **overrides: Any) -> WriteContext:
        """The context of the table ``snapshot`` shows. ``storage_options`` default to those the
        snapshot's table was opened with."""
        if storage_options is None:
            storage_options = snapshot.location.storage_options
        return cls.for_configuration(snapshot.uri, snapshot.table_configuration, storage_options=storage_options, **overrides)

    @classmethod
    def for_configuration(
        cls, table_uri: str, table_configuration: TableConfiguration, *, storage_options: Mapping[str, Any] | None = None, **overrides: Any
    ) -> WriteContext:
        """The context of a table with ``table_configuration`` (e.g. a transaction's)."""
        return cls(normalize_uri(table_uri), table_configuration, storage_options=dict(storage_options or {}), **overrides)

    @classmethod
    def for_metadata(
        cls,
        table_uri: str,
        metadata: Metadata,
        *,
        protocol: Protocol | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> WriteContext:
        """The context of a table with ``metadata`` (a new table's, before it is committed); its
        ``protocol`` defaults to the lowest one the metadata needs."""
        if protocol is None:
            protocol = protocol_for(metadata.configuration, metadata.schema_string)
        config = TableConfiguration.from_actions(protocol, metadata)
        return cls.for_configuration(table_uri, config, storage_options=storage_options, **overrides)

    # -- what the table asks of its files ---------------------------------------------------

    @property
    def schema_string(self) -> str:
        return self.table_configuration.metadata.schema_string

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.table_configuration.partition_columns

    @property
    def configuration(self) -> Mapping[str, str]:
        """The table properties."""
        return self.table_configuration.properties

    @property
    def schema(self) -> pa.Schema:
        """The table schema (logical names, Delta field metadata kept)."""
        return self.table_configuration.schema

    @property
    def column_mapped(self) -> bool:
        return self.table_configuration.is_column_mapped

    @property
    def file_schema(self) -> pa.Schema:
        """The schema of the data files: partition columns left out, physical names and field ids
        under column mapping."""
        return self.table_configuration.file_schema

    @property
    def stats_columns(self) -> list[ColumnPath]:
        return self.table_configuration.stats_columns

    @property
    def file_size(self) -> int:
        return self.target_file_size if self.target_file_size is not None else self.table_configuration.target_file_size

    @functools.cached_property
    def conform_spec(self) -> ConformSpec:
        """What each column of a written row holds (:mod:`txnlog.write.conform`)."""
        return ConformSpec.for_configuration(self.table_configuration, self.table_uri)

    def constraints(self) -> list[tuple[str, FilePredicate]]:
        """The CHECK constraints and invariants rows must satisfy, parsed."""
        return constraint_predicates(self.schema, self.partition_columns, self.configuration)

    def open_store(self) -> LogStore:
        return open_store(self.table_uri, self.storage_options)

    # -- writing ----------------------------------------------------------------------------

    def check_schema(self, data_schema: pa.Schema) -> None:
        """Raise the error :meth:`write` would raise for data of ``data_schema`` before its
        first row (a constraint that does not parse, a partition column missing from the table
        schema or nested, a physical name missing under column mapping, a column the table does
        not have or of a type that cannot be cast to the table's), without opening the store or
        writing anything. Errors that depend on the rows (nulls in a non-nullable column, a
        value that does not fit, a violated constraint) need the rows: only :meth:`write` sees
        those."""
        if not isinstance(data_schema, pa.Schema):
            raise InvalidArgumentTypeError(f"check_schema takes a pyarrow Schema, got {type(data_schema).__name__}")
        self.constraints()
        check_write_schema(self.conform_spec.conformed_schema(data_schema), table_configuration=self.table_configuration, target_file_size=self.file_size)

    def write(
        self,
        data: pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch],
        *,
        data_change: bool = True,
        file_prefix: str = "part",
        store: LogStore | None = None,
        preserve_row_ids: bool = False,
    ) -> WrittenFiles:
        """Write ``data`` as Parquet files under the table root, at new collision-free paths.

        The data's columns and types are checked against the table schema before any file is
        written (a SchemaError names the column); constraint violations raise
        ProtocolViolationError, and files already written by this call are deleted. The files
        are invisible until a transaction commits them.

        ``preserve_row_ids`` (a table with row tracking enabled): the data's ``row_id`` and
        ``row_commit_version`` columns, as ``Snapshot.to_arrow(with_row_ids=True)`` gives them,
        are written to the table's hidden materialized columns, so that rewritten rows keep
        their stable ids (UPDATE, MERGE, compaction). Null means "a new one": a new row has
        neither, an updated row keeps its ``row_id`` and has a null ``row_commit_version``.
        """
        hidden = self._materialized_columns() if preserve_row_ids else None
        reader = _conformed(as_reader(data, self.schema), self.conform_spec, self.identity or IdentityAllocator(), data_change)
        constraints = self.constraints()
        if constraints:
            reader = _checked(reader, constraints)
        adds = write_data_files(
            store if store is not None else self.open_store(),
            reader,
            table_configuration=self.table_configuration,
            target_file_size=self.file_size,
            data_change=data_change,
            file_prefix=file_prefix,
            compression=self.compression,
            hidden_columns=hidden,
        )
        return WrittenFiles(adds, table_from_log_dicts([encode_action(a)["add"] for a in adds], "add"))

    def _materialized_columns(self) -> dict[str, str]:
        """Data column -> hidden file column, for a write that preserves row ids."""
        columns = self.table_configuration.row_id_columns(f"table {self.table_uri}")
        for name in (ROW_ID, ROW_COMMIT_VERSION):
            if name.lower() in {f.name.lower() for f in self.schema}:
                raise InvalidArgumentError(f"preserve_row_ids: table {self.table_uri} has a column {name!r} of its own")
        return {ROW_ID: columns.row_id, ROW_COMMIT_VERSION: columns.row_commit_version}


def _conformed(reader: pa.RecordBatchReader, spec: ConformSpec, identity: IdentityAllocator, data_change: bool) -> pa.RecordBatchReader:
    """Each batch through the conform step, as the writer streams."""
    if not spec.missing(reader.schema.names) and not (spec.supplies_values and data_change):
        return reader

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            yield spec.conform_batch(batch, identity, data_change=data_change)

    return pa.RecordBatchReader.from_batches(spec.conformed_schema(reader.schema), batches())


def _checked(reader: pa.RecordBatchReader, constraints: Sequence[tuple[str, FilePredicate]]) -> pa.RecordBatchReader:
    """Enforce constraints batch by batch while the writer streams."""

    def batches() -> Iterable[pa.RecordBatch]:
        for batch in reader:
            check_constraints(pa.Table.from_batches([batch]), constraints)
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


__all__ = ["WriteContext", "WrittenFiles"]
