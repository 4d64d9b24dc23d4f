"""The Iceberg metadata files beside ``_delta_log``: their layout and keys, reading the newest
one, the first one for a table, and the schema updates that follow the Delta schema."""

from __future__ import annotations

import re
import time
import uuid

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2
from pyiceberg.table.snapshots import MetadataLogEntry
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSpecUpdate,
    SetPropertiesUpdate,
    TableUpdate,
)

from txnlog import properties as props
from txnlog.errors import ObjectNotFoundError, TxnLogError
from txnlog.iceberg.errors import IcebergExportError
from txnlog.iceberg.file_io import StoreFileIO
from txnlog.iceberg.lru import LruCache
from txnlog.iceberg.schema import FIRST_PARTITION_FIELD_ID, iceberg_schema, name_mapping, partition_spec, same_schema
from txnlog.log import Metadata

METADATA_DIR = "metadata"
VERSION_HINT = f"{METADATA_DIR}/version-hint.text"
#: Iceberg table property and snapshot-summary key: the Delta version the metadata shows.
DELTA_VERSION_KEY = props.ICEBERG_DELTA_VERSION_KEY
#: Snapshot-summary key: the Delta commit's timestamp (ms).
DELTA_TIMESTAMP_KEY = props.ICEBERG_DELTA_TIMESTAMP_KEY
#: Iceberg table property: the Delta table id (metaData.id) exported; another id means a new table.
DELTA_TABLE_ID_KEY = props.ICEBERG_DELTA_TABLE_ID_KEY
#: Snapshot-summary key on a rebuild snapshot: why it was rebuilt.
REBUILD_KEY = props.ICEBERG_REBUILD_KEY

#: Attempts at a put-if-absent (of a metadata file, or a catalog commit) before giving up.
MAX_ATTEMPTS = 8
_METADATA_FILE = re.compile(r"^v(\d+)\.metadata\.json$")


def spec_by_id(metadata: TableMetadata, spec_id: int) -> PartitionSpec:
    return metadata.specs()[spec_id]


def schema_updates(meta: TableMetadata, delta: Metadata) -> list[TableUpdate]:
    """What brings ``meta``'s current schema, partition spec and name mapping to ``delta``'s."""
    current = meta.schema()
    new = iceberg_schema(delta.schema, delta.configuration, current, meta.last_column_id)
    updates: list[TableUpdate] = []
    schema_after = current
    if not same_schema(new, current):
        match = next((s for s in meta.schemas if same_schema(s, new)), None)
        if match is not None:
            updates.append(SetCurrentSchemaUpdate(schema_id=match.schema_id))
            schema_after = match
        else:
            next_id = max(s.schema_id for s in meta.schemas) + 1
            schema_after = Schema(*new.fields, schema_id=next_id)
            updates += [AddSchemaUpdate(schema_=schema_after), SetCurrentSchemaUpdate(schema_id=next_id)]
    columns = tuple(schema_after.find_field(c, case_sensitive=False).name for c in delta.partition_columns)
    spec = partition_spec(schema_after, columns, meta.partition_specs, meta.last_partition_id or FIRST_PARTITION_FIELD_ID - 1)
    if spec.spec_id != meta.default_spec_id:
        if all(s.spec_id != spec.spec_id for s in meta.partition_specs):
            updates.append(AddPartitionSpecUpdate(spec=spec))
        updates.append(SetDefaultSpecUpdate(spec_id=spec.spec_id))
    mapping = name_mapping(delta.schema, schema_after, delta.configuration).model_dump_json()
    if meta.properties.get(TableProperties.DEFAULT_NAME_MAPPING) != mapping:
        updates.append(SetPropertiesUpdate(updates={TableProperties.DEFAULT_NAME_MAPPING: mapping}))
    return updates


def initial_metadata(io: StoreFileIO, delta: Metadata) -> TableMetadata:
    schema = iceberg_schema(delta.schema, delta.configuration, None, 0)
    columns = tuple(schema.find_field(c, case_sensitive=False).name for c in delta.partition_columns)
    spec = partition_spec(schema, columns, [], FIRST_PARTITION_FIELD_ID - 1)
    now = int(time.time() * 1000)
    return TableMetadataV2(
        location=io.store.root_uri,
        table_uuid=uuid.uuid4(),
        last_updated_ms=now,
        last_column_id=schema.highest_field_id,
        schemas=[schema],
        current_schema_id=schema.schema_id,
        partition_specs=[spec],
        default_spec_id=spec.spec_id,
        last_partition_id=max([FIRST_PARTITION_FIELD_ID - 1, *(f.field_id for f in spec.fields)]),
        properties={
            TableProperties.DEFAULT_NAME_MAPPING: name_mapping(delta.schema, schema, delta.configuration).model_dump_json(),
            DELTA_TABLE_ID_KEY: delta.id,
        },
        sort_orders=[UNSORTED_SORT_ORDER],
        default_sort_order_id=UNSORTED_SORT_ORDER.order_id,
        last_sequence_number=0,
    )


METADATA_FILES = LruCache(16)  # metadata file location -> parsed TableMetadata (the files are immutable)


def read_metadata(io: StoreFileIO, number: int) -> TableMetadata:
    location = io.location(f"{METADATA_DIR}/v{number}.metadata.json")
    cached = METADATA_FILES.get_or(location)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    try:
        found = FromInputFile.table_metadata(io.new_input(location))
        METADATA_FILES.put(location, found)
        return found
    except TxnLogError:
        raise
    except Exception as e:
        raise IcebergExportError(f"cannot read Iceberg metadata {location}: {e}") from e


def latest_metadata_number(io: StoreFileIO) -> tuple[int | None, int | None]:
    """The newest ``v<N>.metadata.json`` and what the version hint says: the hint, then probing
    past it (the hint is written last, so it may lag), else a listing of the metadata directory."""
    store = io.store
    hint: int | None = None
    try:
        text = store.read(VERSION_HINT).decode("utf-8", "replace").strip()
        hint = int(text) if text.isdigit() else None
    except ObjectNotFoundError:
        hint = None
    if hint is None or not store.exists(f"{METADATA_DIR}/v{hint}.metadata.json"):
        numbers = [int(m.group(1)) for f in store.list_from(METADATA_DIR, "v") if (m := _METADATA_FILE.match(f.name))]
        return (max(numbers) if numbers else None), hint
    latest = hint
    while store.exists(f"{METADATA_DIR}/v{latest + 1}.metadata.json"):
        latest += 1
    return latest, hint


def with_metadata_log(final: TableMetadata, base: TableMetadata | None, base_location: str) -> TableMetadata:
    """Make sure the previous metadata file is in the metadata log (update_table_metadata adds
    it only when the last update changed something)."""
    if any(e.metadata_file == base_location for e in final.metadata_log) or base is None:
        return final
    entry = MetadataLogEntry(metadata_file=base_location, timestamp_ms=base.last_updated_ms)
    return final.model_copy(update={"metadata_log": [*final.metadata_log, entry][-100:]})
