"""Every private name of pyiceberg the export uses, in one module, each with why.

Checked against pyiceberg 0.12.0 (pyproject pins ``>=0.12,<0.13``): a new pyiceberg version
may rename or change any of them, so upgrading it means re-reading each one here first.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pyiceberg.manifest import (
    ManifestContent,
    ManifestEntry,
    ManifestFile,
    ManifestWriterV2,
    _inherit_from_manifest,
)
from pyiceberg.table.metadata import (
    TableMetadata,
    _generate_snapshot_id,
)
from pyiceberg.table.update import TableUpdate, _apply_table_update, _TableMetadataUpdateContext

__all__ = ["PositionDeleteManifestWriter", "apply_updates", "inherit_from_manifest", "new_snapshot_id"]


def new_snapshot_id(taken: Collection[int]) -> int:
    """A snapshot id no snapshot in ``taken`` has.

    ``_generate_snapshot_id``: pyiceberg's own id scheme (a positive 63-bit value from a UUID),
    so ids look like those other Iceberg writers make; the public route to it needs a Table.
    """
    snapshot_id = _generate_snapshot_id()
    while snapshot_id in taken:
        snapshot_id = _generate_snapshot_id()
    return snapshot_id


def apply_updates(metadata: TableMetadata, updates: Sequence[TableUpdate]) -> TableMetadata:
    """``metadata`` with ``updates`` applied by pyiceberg's own rules.

    ``_apply_table_update`` and ``_TableMetadataUpdateContext``: the public
    ``update_table_metadata`` deep-copies the whole metadata on every call (O(snapshots) per
    commit exported); these apply the same rules without the copy (the models are never mutated
    in place, so nothing is shared unsafely).
    """
    context = _TableMetadataUpdateContext()
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    return metadata


def inherit_from_manifest(entry: ManifestEntry, manifest: ManifestFile) -> ManifestEntry:
    """``entry`` with the snapshot id and sequence numbers it inherits from ``manifest``.

    ``_inherit_from_manifest``: what pyiceberg applies when it reads a manifest back; applying it
    to the entries just written lets the cache hold them as a reader would see them, without
    reading the manifest back.
    """
    return _inherit_from_manifest(entry, manifest)


class PositionDeleteManifestWriter(ManifestWriterV2):
    """A format v2 manifest of position delete files (manifest content ``deletes``).

    pyiceberg 0.12 writes data manifests only; its v2 writer already writes any entry's content
    and the v2 entry schema, and says "data" in two places, overridden here: ``content()`` (what
    ``to_manifest_file`` puts in the manifest list) and ``_meta``'s ``content`` key (the Avro
    file's metadata, which Iceberg Java reads).
    """

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}
