"""TableConfiguration: a table's protocol and metadata, and every fact derived from them.

One immutable value per snapshot (``Snapshot.table_configuration``), handed to the transaction,
the writer (:class:`~txnlog.write.context.WriteContext`), the readers and the engines, so that
no other module works out again whether a table uses column mapping, deletion vectors, row
tracking, change data feed or in-commit timestamps. The name is delta-kernel-rs's.

Property values are parsed by :mod:`txnlog.properties` (the one registry), when asked for: a
table written by another engine with an invalid value for a property this process never needs
stays readable. A feature is *supported* when the protocol lists it (or implies it, for legacy
writer versions) and *enabled* when, in addition, its property turns it on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa

from txnlog import properties as props
from txnlog.errors import InvalidArgumentError, LogCorruptError
from txnlog.file_facts import ColumnPath, partition_fields, physical_path, physical_schema, physical_schema_string, stats_columns
from txnlog.file_facts import physical_name as _physical_name
from txnlog.log.actions import Metadata, Protocol
from txnlog.log.features import check_readable, check_writable, writer_features
from txnlog.schema import Identity, default_expression, generation_expression, identity_of

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RowIdColumns:
    """Where a table with row tracking keeps the stable ids of rows written again: the hidden
    data-file columns of each row's id and commit version (``delta.rowTracking.materialized*``).
    A null in them means "the file's default": ``baseRowId`` + position, ``defaultRowCommitVersion``."""

    row_id: str
    row_commit_version: str


@dataclass(frozen=True, slots=True)
class TableConfiguration:
    """What a table's protocol and metadata say, as typed facts.

    Build it with :meth:`from_actions`; ``reader_features`` and ``writer_features`` are the
    features in force (legacy protocol versions imply theirs).
    """

    protocol: Protocol
    metadata: Metadata
    reader_features: frozenset[str]
    writer_features: frozenset[str]

    @classmethod
    def from_actions(cls, protocol: Protocol, metadata: Metadata) -> TableConfiguration:
        readers = set(protocol.reader_features or ())
        if protocol.min_reader_version == 2:
            readers.add("columnMapping")  # reader version 2 is column mapping's
        return cls(protocol, metadata, frozenset(readers), writer_features(protocol))

    def __repr__(self) -> str:
        p = self.protocol
        return f"TableConfiguration(protocol=({p.min_reader_version}, {p.min_writer_version}), column_mapping={self.column_mapping_mode!r})"

    # -- metadata --------------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The table schema (logical names, Delta field metadata kept)."""
        schema: pa.Schema = self.metadata.schema
        return schema

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return tuple(self.metadata.partition_columns)

    @property
    def properties(self) -> Mapping[str, str]:
        """The table properties as stored (``metaData.configuration``)."""
        return self.metadata.configuration

    def table_property(self, prop: props.TableProperty[T]) -> T:
        """A typed table property, e.g. ``config.table_property(txnlog.properties.TARGET_FILE_SIZE)``."""
        return prop.get(self.metadata.configuration)

    def check_readable(self, where: str) -> None:
        """UnsupportedFeatureError unless txnlog can read this table."""
        check_readable(self.protocol, where)

    def check_writable(self, where: str) -> None:
        """UnsupportedFeatureError unless txnlog can commit to this table."""
        check_writable(self.protocol, self.metadata.schema_string, where)

    # -- column mapping --------------------------------------------------------------------

    @property
    def column_mapping_mode(self) -> str:
        """``"none"``, ``"name"`` or ``"id"``."""
        return props.COLUMN_MAPPING_MODE.get(self.metadata.configuration)

    @property
    def is_column_mapped(self) -> bool:
        """Data files, stats and partition values name columns by their physical names."""
        return self.column_mapping_mode != "none"

    def physical_name(self, column: str | Sequence[str]) -> str:
        """The name data files give ``column`` (a top-level name, or a path of nested names)."""
        path: ColumnPath = (column,) if isinstance(column, str) else tuple(column)
        return physical_path(self.schema, path, self.is_column_mapped)[-1]

    @property
    def physical_names(self) -> dict[str, str] | None:
        """Logical -> physical name of each top-level column under column mapping, else None."""
        if not self.is_column_mapped:
            return None
        return {f.name: _physical_name(f, True) for f in self.schema}

    @property
    def physical_schema(self) -> pa.Schema:
        """The whole schema as data files store it (physical names and field ids under column
        mapping, Delta metadata dropped)."""
        return physical_schema(self.schema, self.is_column_mapped)

    @property
    def file_schema(self) -> pa.Schema:
        """The schema of the data files: :attr:`physical_schema` without the partition columns."""
        partitions = {c.lower() for c in self.partition_columns}
        return physical_schema([f for f in self.schema if f.name.lower() not in partitions], self.is_column_mapped)

    @property
    def file_schema_string(self) -> str:
        """:attr:`file_schema` in Delta's JSON form (a ``schemaString``), for engines whose types
        are Delta's: Spark reads data files with it."""
        return physical_schema_string(self.metadata.schema_string, self.partition_columns, self.is_column_mapped)

    def partition_keys(self) -> list[tuple[str, pa.Field]]:
        """(key in ``partitionValues``, logical field) of each partition column."""
        return partition_fields(self.schema, self.partition_columns, self.is_column_mapped)

    # -- what writers must do --------------------------------------------------------------

    @property
    def stats_columns(self) -> list[ColumnPath]:
        """Logical leaf paths to collect file statistics for."""
        return self.stats_columns_of(self.schema)

    def stats_columns_of(self, schema: pa.Schema) -> list[ColumnPath]:
        """:attr:`stats_columns` for files written in ``schema`` (the table's, or the table's
        plus a column of its own, as change data files add ``_change_type``)."""
        chosen = stats_columns(schema, self.metadata.configuration, self.partition_columns)
        # Identity columns always: their high-water marks are read from the stats at commit.
        missing: list[ColumnPath] = [(name,) for name in self.identity_columns if (name,) not in chosen and name in schema.names
                   and name.lower() not in {c.lower() for c in self.partition_columns}]
        return chosen + missing if missing else chosen

    @property
    def target_file_size(self) -> int:
        return props.TARGET_FILE_SIZE.get(self.metadata.configuration)

    @property
    def append_only(self) -> bool:
        """Commits may not remove or change data."""
        return props.APPEND_ONLY.get(self.metadata.configuration)

    @property
    def isolation_level(self) -> str:
        """The default isolation level of transactions (Delta's name, e.g. ``"Serializable"``)."""
        return props.ISOLATION_LEVEL.get(self.metadata.configuration)

    @property
    def domain_metadata_supported(self) -> bool:
        return "domainMetadata" in self.writer_features

    # -- columns whose values writers supply -------------------------------------------------

    @property
    def identity_columns(self) -> dict[str, Identity]:
        """Each identity column (top-level, by name) and its definition: what writers generate
        values for, beyond the high-water mark (feature ``identityColumns``, writer version 6)."""
        return {f.name: identity for f in self.schema if (identity := identity_of(f)) is not None}

    @property
    def generated_columns(self) -> dict[str, str]:
        """Each generated column and its generation expression (SQL), when the protocol supports
        them (writer version 4 or ``generatedColumns``): a metadata key on a table without the
        feature asks nothing of writers, as delta-spark reads it."""
        if "generatedColumns" not in self.writer_features:
            return {}
        return {f.name: expression for f in self.schema if (expression := generation_expression(f)) is not None}

    @property
    def default_columns(self) -> dict[str, str]:
        """Each column with a default value (SQL) for rows that do not give it, when the table
        has the ``allowColumnDefaults`` feature."""
        if "allowColumnDefaults" not in self.writer_features:
            return {}
        return {f.name: expression for f in self.schema if (expression := default_expression(f)) is not None}

    # -- table features --------------------------------------------------------------------

    @property
    def deletion_vectors_supported(self) -> bool:
        """Files of this table may carry deletion vectors, so readers must apply them."""
        return "deletionVectors" in self.reader_features and "deletionVectors" in self.writer_features

    @property
    def deletion_vectors_enabled(self) -> bool:
        """Writers may mark deleted rows in deletion vectors instead of rewriting files."""
        return self.deletion_vectors_supported and props.ENABLE_DELETION_VECTORS.get(self.metadata.configuration)

    @property
    def row_tracking_supported(self) -> bool:
        """Writers must assign base row ids and default row commit versions to new files."""
        return "rowTracking" in self.writer_features

    @property
    def row_tracking_enabled(self) -> bool:
        """Row ids are stable and readable (the feature supported and the property on)."""
        return self.row_tracking_supported and props.ENABLE_ROW_TRACKING.get(self.metadata.configuration)

    @property
    def materialized_row_id_column(self) -> str | None:
        return props.ROW_ID_COLUMN.get(self.metadata.configuration) or None

    @property
    def materialized_row_commit_version_column(self) -> str | None:
        return props.ROW_COMMIT_VERSION_COLUMN.get(self.metadata.configuration) or None

    @property
    def row_ids_preserved(self) -> bool:
        """Rows keep their stable ids when written again (row tracking enabled): a copied row
        keeps its id and commit version, an updated row its id, an inserted row gets new ones.
        Every rewrite (DML, compaction, in Python or Spark) asks this, then :meth:`row_id_columns`."""
        return self.row_tracking_enabled

    def row_id_columns(self, where: str) -> RowIdColumns:
        """The hidden columns stable ids are read from and written to. InvalidArgumentError when
        the table's rows have no stable ids (row tracking not enabled); LogCorruptError when row
        tracking is enabled but the metadata names no materialized column (every writer must
        name them when it enables row tracking; without them an id cannot be kept)."""
        if not self.row_ids_preserved:
            raise InvalidArgumentError(
                f"{where} does not have row tracking enabled ({props.ENABLE_ROW_TRACKING.key}): its rows have no stable ids"
            )
        conf = self.metadata.configuration
        missing = [p.key for p in (props.ROW_ID_COLUMN, props.ROW_COMMIT_VERSION_COLUMN) if not p.get(conf)]
        if missing:
            raise LogCorruptError(
                f"{where} has row tracking enabled but its metadata does not name {' nor '.join(missing)}: "
                "the hidden columns that keep a rewritten row's stable id (the writer that enabled row tracking must set them)"
            )
        return RowIdColumns(props.ROW_ID_COLUMN.get(conf), props.ROW_COMMIT_VERSION_COLUMN.get(conf))

    def preserved_row_id_columns(self, where: str) -> RowIdColumns | None:
        """:meth:`row_id_columns` when the table preserves row ids, else None."""
        return self.row_id_columns(where) if self.row_ids_preserved else None

    @property
    def change_data_feed_enabled(self) -> bool:
        """Writers must record change data for removed or changed rows. Read from the property
        alone, as writers have always honoured it: a table that asks for it gets it."""
        return props.ENABLE_CHANGE_DATA_FEED.get(self.metadata.configuration)

    @property
    def in_commit_timestamps_enabled(self) -> bool:
        """Commits carry a monotonic ``commitInfo.inCommitTimestamp`` (the property decides)."""
        return props.ENABLE_IN_COMMIT_TIMESTAMPS.get(self.metadata.configuration)

    @property
    def in_commit_timestamp_enablement(self) -> tuple[int, int] | None:
        """(version, timestamp) from which commits carry in-commit timestamps, when recorded
        (None for a table that had them from its first version, or has none)."""
        conf = self.metadata.configuration
        version, timestamp = props.ICT_ENABLEMENT_VERSION.get(conf), props.ICT_ENABLEMENT_TIMESTAMP.get(conf)
        if version is None or timestamp is None:
            return None
        return version, timestamp

    @property
    def checkpoint_interval(self) -> int:
        """Write a checkpoint after every this many commits."""
        return props.CHECKPOINT_INTERVAL.get(self.metadata.configuration)

    @property
    def checkpoint_policy(self) -> str:
        """``"classic"`` or ``"v2"``."""
        return props.CHECKPOINT_POLICY.get(self.metadata.configuration)


__all__ = ["RowIdColumns", "TableConfiguration"]
