"""The Delta protocol's actions as small immutable records.

Field names are snake_case here; the camelCase names of the JSON log live only in
:mod:`txnlog.log.codec`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from txnlog.errors import SchemaError
from txnlog.schema import delta_schema_to_arrow


def _frozen_map(m: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return dict(m) if m else {}


@dataclass(frozen=True, slots=True)
class Protocol:
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    def has_reader_feature(self, name: str) -> bool:
        return bool(self.reader_features) and name in self.reader_features  # type: ignore[operator]

    def has_writer_feature(self, name: str) -> bool:
        return bool(self.writer_features) and name in self.writer_features  # type: ignore[operator]


@dataclass(frozen=True, slots=True)
class Format:
    provider: str = "parquet"
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Metadata:
    id: str
    schema_string: str
    partition_columns: tuple[str, ...] = ()
    configuration: Mapping[str, str] = field(default_factory=dict)
    created_time: int | None = None
    name: str | None = None
    description: str | None = None
    format: Format = field(default_factory=Format)

    @property
    def schema(self) -> Any:
        """The table schema as a pyarrow.Schema (logical column names)."""
        try:
            return _arrow_schema(self.schema_string)
        except SchemaError:
            raise
        except Exception as e:  # a malformed schemaString is a table error, not a KeyError
            raise SchemaError(f"metaData.schemaString of table {self.id} is invalid: {e}", field="schemaString") from e


@functools.lru_cache(maxsize=64)
def _arrow_schema(schema_string: str) -> Any:
    # Schemas are immutable and parsed on every predicate and write: parse each text once.
    return delta_schema_to_arrow(schema_string)


@dataclass(frozen=True, slots=True)
class DeletionVectorDescriptor:
    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    max_row_index: int | None = None

    @property
    def unique_id(self) -> str:
        """The protocol's id: storage type + path (and ``@offset`` when present)."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return f"{base}@{self.offset}" if self.offset is not None else base


@dataclass(frozen=True, slots=True)
class AddFile:
    """A data file made live by a commit. ``path`` is the URI-encoded path as written in the log."""

    path: str
    partition_values: Mapping[str, str | None]
    size: int
    modification_time: int
    data_change: bool = True
    stats: str | None = None
    tags: Mapping[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None

    def remove(self, deletion_timestamp: int, data_change: bool = True) -> RemoveFile:
        return RemoveFile(
            path=self.path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=_frozen_map(self.partition_values),
            size=self.size,
            stats=self.stats,
            tags=self.tags,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


@dataclass(frozen=True, slots=True)
class RemoveFile:
    path: str
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: Mapping[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: Mapping[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None



@dataclass(frozen=True, slots=True)
class AddCDCFile:
    path: str
    partition_values: Mapping[str, str | None]
    size: int
    data_change: bool = False
    tags: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Txn:
    """An application transaction id (``txn`` in the log): the last version an app committed."""

    app_id: str
    version: int
    last_updated: int | None = None


@dataclass(frozen=True, slots=True)
class DomainMetadata:
    domain: str
    configuration: str
    removed: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointMetadata:
    version: int
    tags: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Sidecar:
    path: str
    size_in_bytes: int
    modification_time: int
    tags: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """Provenance of a commit. The protocol leaves its content free-form: keys this library does
    not model are kept in ``other`` so they survive a round trip."""

    timestamp: int | None = None
    operation: str | None = None
    operation_parameters: Mapping[str, Any] | None = None
    read_version: int | None = None
    isolation_level: str | None = None
    is_blind_append: bool | None = None
    engine_info: str | None = None
    txn_id: str | None = None
    operation_metrics: Mapping[str, Any] | None = None
    in_commit_timestamp: int | None = None
    user_metadata: str | None = None
    other: Mapping[str, Any] = field(default_factory=dict)


Action = Protocol | Metadata | AddFile | RemoveFile | AddCDCFile | Txn | DomainMetadata | CheckpointMetadata | Sidecar | CommitInfo
FileAction = AddFile | RemoveFile
