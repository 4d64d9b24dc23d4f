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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from txnlog import properties as props
from txnlog.file_facts import ColumnPath, is_column_mapped, physical_schema, stats_columns
from txnlog.log.actions import AddFile, Metadata
from txnlog.log.codec import encode_action
from txnlog.log.file_actions import table_from_log_dicts
from txnlog.schema import delta_schema_to_arrow
from txnlog.storage import LogStore, normalize_uri, open_store
from txnlog.write.constraints import check_constraints, constraint_predicates
from txnlog.write.parquet import as_reader, write_data_files

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
    """How to write data files for one table at one version. Picklable: plain strings and
    numbers only; the store is opened on first use, in whichever process uses it."""

    table_uri: str
    schema_string: str
    partition_columns: tuple[str, ...] = ()
    configuration: Mapping[str, str] = field(default_factory=dict)
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    target_file_size: int | None = None
    compression: str = "snappy"

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot, *, storage_options: Mapping[str, Any] | None = None, **overrides: Any) -> WriteContext:
        """The context of the table ``snapshot`` shows. ``storage_options`` default to those the
        snapshot's table was opened with."""
        if storage_options is None:
            storage_options = snapshot.table.storage_options if snapshot.table is not None else {}
        return cls.for_metadata(snapshot.uri, snapshot.metadata, storage_options=storage_options, **overrides)

    @classmethod
    def for_metadata(
        cls, table_uri: str, metadata: Metadata, *, storage_options: Mapping[str, Any] | None = None, **overrides: Any
    ) -> WriteContext:
        """The context of a table with ``metadata`` (a new table's, before it is committed)."""
        return cls(
            table_uri=normalize_uri(table_uri),
            schema_string=metadata.schema_string,
            partition_columns=tuple(metadata.partition_columns),
            configuration=dict(metadata.configuration),
            storage_options=dict(storage_options or {}),
            **overrides,
        )

    # -- what the table asks of its files ---------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The table schema (logical names, Delta field metadata kept)."""
        return _arrow_schema(self.schema_string)

    @property
    def column_mapped(self) -> bool:
        return is_column_mapped(self.configuration)

    @property
    def file_schema(self) -> pa.Schema:
        """The schema of the data files: partition columns left out, physical names and field ids
        under column mapping."""
        partitions = {c.lower() for c in self.partition_columns}
        return physical_schema([f for f in self.schema if f.name.lower() not in partitions], self.column_mapped)

    @property
    def stats_columns(self) -> list[ColumnPath]:
        return stats_columns(self.schema, self.configuration, self.partition_columns)

    @property
    def file_size(self) -> int:
        return self.target_file_size if self.target_file_size is not None else props.TARGET_FILE_SIZE.get(self.configuration)

    def constraints(self) -> list[tuple[str, FilePredicate]]:
        """The CHECK constraints and invariants rows must satisfy, parsed."""
        return constraint_predicates(self.schema, self.partition_columns, self.configuration)

    def open_store(self) -> LogStore:
        return open_store(self.table_uri, self.storage_options)

    # -- writing ----------------------------------------------------------------------------

    def write(
        self,
        data: pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch],
        *,
        data_change: bool = True,
        file_prefix: str = "part",
        store: LogStore | None = None,
    ) -> WrittenFiles:
        """Write ``data`` as Parquet files under the table root, at new collision-free paths.

        The data's columns and types are checked against the table schema before any file is
        written (a SchemaError names the column); constraint violations raise
        ProtocolViolationError, and files already written by this call are deleted. The files
        are invisible until a transaction commits them.
        """
        reader = as_reader(data, self.schema)
        constraints = self.constraints()
        if constraints:
            reader = _checked(reader, constraints)
        adds = write_data_files(
            store if store is not None else self.open_store(),
            reader,
            table_schema=self.schema,
            partition_columns=self.partition_columns,
            configuration=self.configuration,
            target_file_size=self.file_size,
            data_change=data_change,
            file_prefix=file_prefix,
            compression=self.compression,
        )
        return WrittenFiles(adds, table_from_log_dicts([encode_action(a)["add"] for a in adds], "add"))


@functools.lru_cache(maxsize=64)
def _arrow_schema(schema_string: str) -> pa.Schema:
    return delta_schema_to_arrow(schema_string)


def _checked(reader: pa.RecordBatchReader, constraints: Sequence[tuple[str, FilePredicate]]) -> pa.RecordBatchReader:
    """Enforce constraints batch by batch while the writer streams."""

    def batches() -> Iterable[pa.RecordBatch]:
        for batch in reader:
            check_constraints(pa.Table.from_batches([batch]), constraints)
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


__all__ = ["WriteContext", "WrittenFiles"]
