"""Committing exported metadata to a pyiceberg catalog, with the catalog's own compare-and-swap."""

from __future__ import annotations

import logging
import re

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetCurrentSchemaUpdate,
    SetDefaultSpecUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    TableUpdate,
)

from txnlog.iceberg.errors import IcebergExportError
from txnlog.iceberg.file_io import StoreFileIO
from txnlog.iceberg.metadata import MAX_ATTEMPTS

log = logging.getLogger(__name__)


def catalog_identifier(io: StoreFileIO, identifier: str | tuple[str, ...] | None) -> tuple[str, ...]:
    if identifier is None:
        name = re.sub(r"[^A-Za-z0-9_]", "_", io.store.root_uri.rstrip("/").rsplit("/", 1)[-1]) or "table"
        return ("default", name)
    return tuple(identifier.split(".")) if isinstance(identifier, str) else tuple(identifier)


def catalog_updates(have: TableMetadata, want: TableMetadata) -> list[TableUpdate]:
    """What turns the catalog's metadata ``have`` into ours, ``want``."""
    updates: list[TableUpdate] = []
    have_schemas = {s.schema_id for s in have.schemas}
    updates += [AddSchemaUpdate(schema_=s) for s in want.schemas if s.schema_id not in have_schemas]
    if have.current_schema_id != want.current_schema_id:
        updates.append(SetCurrentSchemaUpdate(schema_id=want.current_schema_id))
    have_specs = {s.spec_id for s in have.partition_specs}
    updates += [AddPartitionSpecUpdate(spec=s) for s in want.partition_specs if s.spec_id not in have_specs]
    if have.default_spec_id != want.default_spec_id:
        updates.append(SetDefaultSpecUpdate(spec_id=want.default_spec_id))
    have_snapshots = {s.snapshot_id for s in have.snapshots}
    updates += [AddSnapshotUpdate(snapshot=s) for s in want.snapshots if s.snapshot_id not in have_snapshots]
    if want.current_snapshot_id is not None and have.current_snapshot_id != want.current_snapshot_id:
        updates.append(SetSnapshotRefUpdate(ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=want.current_snapshot_id))
    changed = {k: v for k, v in want.properties.items() if have.properties.get(k) != v}
    if changed:
        updates.append(SetPropertiesUpdate(updates=changed))
    return updates


def commit_to_catalog(io: StoreFileIO, catalog: Catalog, identifier: str | tuple[str, ...] | None, metadata_location: str | None) -> str:
    """Register or update the catalog table ``identifier`` (default ``default.<directory>``) to
    the metadata at ``metadata_location``; the catalog name committed to."""
    ident = catalog_identifier(io, identifier)
    name = ".".join(ident)
    if metadata_location is None:
        return name
    ours = FromInputFile.table_metadata(io.new_input(metadata_location))
    for _attempt in range(MAX_ATTEMPTS):
        try:
            current = catalog.load_table(ident)
        except NoSuchTableError:
            if len(ident) > 1:
                catalog.create_namespace_if_not_exists(ident[:-1])
            catalog.register_table(ident, metadata_location)
            return name
        have = current.metadata
        if str(have.table_uuid) != str(ours.table_uuid):
            raise IcebergExportError(
                f"catalog table {name} has uuid {have.table_uuid}, not the exported table's {ours.table_uuid} "
                f"({metadata_location}); refusing to overwrite another table"
            )
        updates = catalog_updates(have, ours)
        if not updates:
            return name
        requirements = (AssertTableUUID(uuid=have.table_uuid), AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=have.current_snapshot_id))
        try:
            catalog.commit_table(current, requirements, tuple(updates))
            return name
        except CommitFailedException:
            log.info("catalog commit of %s lost a race; retrying", name)
    raise IcebergExportError(f"could not commit {metadata_location} to catalog table {name}: lost {MAX_ATTEMPTS} races")
