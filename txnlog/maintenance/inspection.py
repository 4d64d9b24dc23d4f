"""Reading a table for people: describe, history, files; and writing a checkpoint on demand."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.log import checkpoint_from_log
from txnlog.maintenance import arguments, consumers, core, tags
from txnlog.maintenance.layout import LogLayout

if TYPE_CHECKING:
    from txnlog import HistoryEntry, Table


@arguments.takes_table
@core.named_operation("checkpoint")
def checkpoint(table: Table, version: int | None = None) -> core.CheckpointResult:
    """Write a checkpoint of ``version`` (default: the latest), classic or V2 as the table's
    protocol says, and point ``_last_checkpoint`` at it unless it names a newer one.

    Streamed from the log (the previous checkpoint a row group at a time, then the commits
    after it), so memory does not grow with the table's file count."""
    return checkpoint_from_log(table.store, arguments.optional_integer("version", version, minimum=0))


@arguments.takes_table
def history(table: Table, limit: int | None = None) -> list[HistoryEntry]:
    """The commitInfo of each version still in the log, newest first."""
    table.latest_version()  # TableNotFoundError rather than an empty history
    return table.history(limit)


@arguments.takes_table
def list_files(
    table: Table,
    *,
    version: int | None = None,
    timestamp: int | float | str | _dt.datetime | None = None,
    where: str | None = None,
) -> pa.Table:
    """The live files at ``version`` (or ``timestamp``; default the latest), pruned by the SQL
    predicate ``where`` on partition values and min/max stats."""
    return table.snapshot(arguments.optional_integer("version", version, minimum=0), timestamp).files(where)


def _rows(files: pa.Table) -> tuple[int, int]:
    """(rows from numRecords stats, files without that stat)."""
    stats = files.column("stats")
    if stats.null_count == len(stats) or files.num_rows == 0:
        return 0, files.num_rows
    total = unknown = 0
    for text in stats.to_pylist():
        try:
            n = orjson.loads(text).get("numRecords") if text else None
        except (orjson.JSONDecodeError, AttributeError):
            n = None
        if isinstance(n, int):
            total += n
        else:
            unknown += 1
    return total, unknown


@dataclass(frozen=True)
class TableDescription:
    uri: str
    version: int
    earliest_version: int
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...]
    writer_features: tuple[str, ...]
    table_id: str
    name: str | None
    description: str | None
    partition_columns: tuple[str, ...]
    schema: dict[str, Any]
    num_files: int
    size_in_bytes: int
    num_rows: int
    files_without_row_count: int
    num_partitions: int
    last_checkpoint: dict[str, Any] | None
    checkpoint_versions: tuple[int, ...]
    properties: dict[str, str]
    tags: list[dict[str, Any]] = field(default_factory=list)
    consumers: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "version": self.version,
            "earliestVersion": self.earliest_version,
            "protocol": {
                "minReaderVersion": self.min_reader_version,
                "minWriterVersion": self.min_writer_version,
                "readerFeatures": list(self.reader_features),
                "writerFeatures": list(self.writer_features),
            },
            "id": self.table_id,
            "name": self.name,
            "description": self.description,
            "partitionColumns": list(self.partition_columns),
            "schema": self.schema,
            "numFiles": self.num_files,
            "sizeInBytes": self.size_in_bytes,
            "numRows": self.num_rows,
            "filesWithoutRowCount": self.files_without_row_count,
            "numPartitions": self.num_partitions,
            "lastCheckpoint": self.last_checkpoint,
            "checkpointVersions": list(self.checkpoint_versions),
            "properties": self.properties,
            "tags": self.tags,
            "consumers": self.consumers,
        }


@arguments.takes_table
def describe(table: Table, version: int | None = None) -> TableDescription:
    """Version, protocol and features, files, bytes, rows (from stats), partitions, the last
    checkpoint, properties, tags and consumers."""
    snapshot = table.snapshot(arguments.optional_integer("version", version, minimum=0))
    files = snapshot.files()
    rows, unknown = _rows(files)
    partitions = 0
    if files.num_rows and snapshot.partition_columns:
        keys = pc.cast(files.column("partition_values"), pa.map_(pa.string(), pa.string())).to_pylist()
        partitions = len({tuple(sorted((k, v) for k, v in m)) for m in keys})
    layout = LogLayout.of(table.store)
    hint = core.read_hint(table.store)
    protocol, metadata = snapshot.protocol, snapshot.metadata
    return TableDescription(
        uri=table.uri,
        version=snapshot.version,
        earliest_version=layout.earliest,
        min_reader_version=protocol.min_reader_version,
        min_writer_version=protocol.min_writer_version,
        reader_features=tuple(protocol.reader_features or ()),
        writer_features=tuple(protocol.writer_features or ()),
        table_id=metadata.id,
        name=metadata.name,
        description=metadata.description,
        partition_columns=tuple(metadata.partition_columns),
        schema=orjson.loads(metadata.schema_string),
        num_files=files.num_rows,
        size_in_bytes=int(pc.sum(files.column("size")).as_py() or 0),
        num_rows=rows,
        files_without_row_count=unknown,
        num_partitions=partitions,
        last_checkpoint=None if hint is None else {"version": hint.version, "size": hint.size, "numOfAddFiles": hint.num_of_add_files, "sizeInBytes": hint.size_in_bytes},
        checkpoint_versions=tuple(layout.checkpoint_versions),
        properties=dict(metadata.configuration),
        tags=[t.to_dict() for t in tags.list_tags(table)],
        consumers=[c.to_dict() for c in consumers.list_consumers(table)],
    )
