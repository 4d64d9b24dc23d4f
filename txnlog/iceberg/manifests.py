"""Iceberg manifests and manifest lists: writing them for one export's snapshots, merging small
ones, and the caches that spare reading back what this process wrote."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pyiceberg.manifest import (
    UNASSIGNED_SEQ,
    DataFile,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate, TableUpdate

from txnlog.iceberg.file_io import StoreFileIO
from txnlog.iceberg.lru import LruCache
from txnlog.iceberg.metadata import METADATA_DIR, spec_by_id
from txnlog.iceberg.pyiceberg_adapter import apply_updates, inherit_from_manifest, new_snapshot_id

#: Data files per manifest written; bounds the work of rewriting one to delete a file.
MANIFEST_MAX_ENTRIES = 1000
#: With more manifests than this, small ones are merged (as Iceberg's merge-append does, from 100;
#: fewer here, since this process already holds their entries and a shorter list is cheaper per commit).
MANIFEST_MERGE_MIN_COUNT = 32

# Manifests are immutable, so a manifest's entries never go stale.
MANIFEST_ENTRIES = LruCache(1024)  # manifest path -> live entries
MANIFEST_LISTS = LruCache(64)  # manifest list location -> its ManifestFiles
FILE_INDEXES = LruCache(16)  # f"{root}#{snapshot id}" -> {data file uri: manifest path}


def live_entries(io: StoreFileIO, manifest: ManifestFile) -> list[ManifestEntry]:
    found = MANIFEST_ENTRIES.get_or(manifest.manifest_path)
    if found is None:
        found = manifest.fetch_manifest_entry(io, discard_deleted=True)
        MANIFEST_ENTRIES.put(manifest.manifest_path, found)
    return found  # type: ignore[no-any-return]


def current_manifests(io: StoreFileIO, meta: TableMetadata) -> list[ManifestFile]:
    current = meta.current_snapshot()
    if current is None:
        return []
    cached = MANIFEST_LISTS.get_or(current.manifest_list)
    return list(cached) if cached is not None else list(current.manifests(io))


@dataclass
class ExportWork:
    io: StoreFileIO
    metadata: TableMetadata
    manifests: list[ManifestFile]
    index: dict[str, str] | None = None
    snapshot_ids: list[int] = field(default_factory=list)
    #: Live entries of manifests written by this export, by manifest path.
    written: dict[str, list[ManifestEntry]] = field(default_factory=dict)

    def apply(self, updates: Sequence[TableUpdate]) -> None:
        """pyiceberg's own update rules, without update_table_metadata's deep copy of the whole
        metadata (O(snapshots) per call); the models are never mutated in place."""
        self.metadata = apply_updates(self.metadata, updates)

    def file_index(self) -> dict[str, str]:
        """Data file URI -> the manifest holding it, for the current snapshot."""
        if self.index is None:
            key = f"{self.io.store.root_uri}#{self.metadata.current_snapshot_id}"
            cached = FILE_INDEXES.get_or(key)
            if cached is not None:
                self.index = dict(cached)
            else:
                self.index = {}
                for mf in self.manifests:
                    for e in live_entries(self.io, mf):
                        self.index[e.data_file.file_path] = mf.manifest_path
        return self.index


def new_location(io: StoreFileIO, kind: str, snapshot_id: int) -> str:
    return io.location(f"{METADATA_DIR}/{kind}-{snapshot_id}-{uuid.uuid4().hex}.avro")


def write_entries(work: ExportWork, spec: PartitionSpec, snapshot_id: int, entries: Iterable[tuple[str, ManifestEntry]]) -> ManifestFile:
    """A manifest of (``add`` | ``existing`` | ``delete``, entry) pairs. Its live entries wait in
    ``work.written`` until the manifest list gives them their sequence number."""
    out = work.io.new_output(new_location(work.io, "manifest", snapshot_id))
    writer = write_manifest(2, spec, work.metadata.schema(), out, snapshot_id, "deflate")
    live: list[ManifestEntry] = []
    with writer:
        for how, entry in entries:
            getattr(writer, how)(entry)
            if how == "add":
                live.append(entry)
            elif how == "existing":
                live.append(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.EXISTING,
                        snapshot_id=entry.snapshot_id,
                        sequence_number=entry.sequence_number,
                        file_sequence_number=entry.file_sequence_number,
                        data_file=entry.data_file,
                    )
                )
    manifest = writer.to_manifest_file()
    work.written[manifest.manifest_path] = live
    return manifest


def as_listed(manifest: ManifestFile, sequence_number: int) -> ManifestFile:
    """``manifest`` as the manifest list records it (what ManifestListWriterV2 assigns)."""
    if manifest.sequence_number != UNASSIGNED_SEQ and manifest.min_sequence_number != UNASSIGNED_SEQ:
        return manifest
    assigned = copy.copy(manifest)
    if assigned.sequence_number == UNASSIGNED_SEQ:
        assigned.sequence_number = sequence_number
    if assigned.min_sequence_number == UNASSIGNED_SEQ:
        assigned.min_sequence_number = sequence_number
    return assigned


def added_entry(df: DataFile) -> ManifestEntry:
    return ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=None, sequence_number=None, file_sequence_number=None, data_file=df)


def chunks(items: list[DataFile], size: int) -> Iterable[list[DataFile]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def merge_small_manifests(work: ExportWork, manifests: list[ManifestFile], snapshot_id: int, index: dict[str, str] | None) -> list[ManifestFile]:
    """Merge small manifests once there are many, so a manifest list stays short."""
    if len(manifests) <= MANIFEST_MERGE_MIN_COUNT:
        return manifests
    small = [m for m in manifests if (m.added_files_count or 0) + (m.existing_files_count or 0) < MANIFEST_MAX_ENTRIES // 2]
    if len(small) < 2:
        return manifests
    keep = [m for m in manifests if m not in small]
    by_spec: dict[int, list[ManifestEntry]] = {}
    for m in small:
        by_spec.setdefault(m.partition_spec_id, []).extend(live_entries(work.io, m))
    merged = []
    for spec_id, entries in by_spec.items():
        spec = spec_by_id(work.metadata, spec_id)
        for i in range(0, len(entries), MANIFEST_MAX_ENTRIES):
            part = entries[i : i + MANIFEST_MAX_ENTRIES]
            mf = write_entries(work, spec, snapshot_id, (("existing", e) for e in part))
            merged.append(mf)
            if index is not None:
                for e in part:
                    index[e.data_file.file_path] = mf.manifest_path
    return merged + keep


def commit_snapshot(
    work: ExportWork,
    operation: Operation,
    added: list[DataFile],
    removed: set[str],
    extra: Mapping[str, str],
    timestamp_ms: int,
    *,
    rebuild: bool = False,
) -> None:
    meta = work.metadata
    existing_ids = {s.snapshot_id for s in meta.snapshots}
    snapshot_id = new_snapshot_id(existing_ids)
    schema = meta.schema()
    spec = meta.spec()
    collector = SnapshotSummaryCollector()
    new_manifests: list[ManifestFile] = []
    index: dict[str, str] | None
    if rebuild:
        kept: list[ManifestFile] = []
        index = {}
    else:
        # A manifest with nothing live left was needed only by the snapshot that emptied it.
        kept = [m for m in work.manifests if (m.added_files_count or 0) + (m.existing_files_count or 0) > 0]
        index = work.index
        if removed:
            index = work.file_index()
            by_manifest: dict[str, set[str]] = {}
            for uri in removed:
                where = index.get(uri)
                if where is not None:
                    by_manifest.setdefault(where, set()).add(uri)
            for path, uris in by_manifest.items():
                old = next(m for m in kept if m.manifest_path == path)
                kept.remove(old)
                old_spec = spec_by_id(meta, old.partition_spec_id)
                entries = live_entries(work.io, old)
                pairs = []
                for e in entries:
                    if e.data_file.file_path in uris:
                        pairs.append(("delete", e))
                        collector.remove_file(e.data_file, schema, old_spec)
                    else:
                        pairs.append(("existing", e))
                mf = write_entries(work, old_spec, snapshot_id, pairs)
                new_manifests.append(mf)
                for e in entries:
                    if e.data_file.file_path in uris:
                        index.pop(e.data_file.file_path, None)
                    else:
                        index[e.data_file.file_path] = mf.manifest_path
    for chunk in chunks(added, MANIFEST_MAX_ENTRIES):
        mf = write_entries(work, spec, snapshot_id, (("add", added_entry(df)) for df in chunk))
        new_manifests.append(mf)
        for df in chunk:
            collector.add_file(df, schema, spec)
            if index is not None:
                index[df.file_path] = mf.manifest_path
    manifests = merge_small_manifests(work, new_manifests + kept, snapshot_id, index)

    assert isinstance(meta, TableMetadataV2)  # the export writes format v2 only
    sequence_number = meta.last_sequence_number + 1
    parent = meta.current_snapshot_id
    list_out = work.io.new_output(new_location(work.io, "snap", snapshot_id))
    with write_manifest_list(2, list_out, snapshot_id, parent, sequence_number, "deflate") as writer:
        writer.add_manifests(manifests)
    # The manifest list gave the new manifests their sequence number: keep what readers will see,
    # so the next export in this process reads neither the list nor these manifests back.
    written = [as_listed(m, sequence_number) for m in manifests]
    for m in written:
        live = work.written.pop(m.manifest_path, None)
        if live is not None:
            MANIFEST_ENTRIES.put(m.manifest_path, [inherit_from_manifest(entry, m) for entry in live])
    MANIFEST_LISTS.put(list_out.location, tuple(written))

    previous = meta.current_snapshot()
    counted = Operation.OVERWRITE if operation == Operation.REPLACE else operation
    summary = update_snapshot_summaries(
        Summary(counted, **collector.build(), **extra), None if rebuild or previous is None or previous.summary is None else previous.summary.additional_properties
    )
    if operation != counted:
        summary = Summary(operation, **summary.additional_properties)
    last_ts = max((s.timestamp_ms for s in meta.snapshots), default=0)
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent,
        sequence_number=sequence_number,
        timestamp_ms=max(timestamp_ms, last_ts),
        manifest_list=list_out.location,
        summary=summary,
        schema_id=schema.schema_id,
    )
    work.apply([AddSnapshotUpdate(snapshot=snapshot), SetSnapshotRefUpdate(ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=snapshot_id)])
    work.manifests = list(written)
    work.index = index
    work.snapshot_ids.append(snapshot_id)
