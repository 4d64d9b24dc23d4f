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
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate, TableUpdate

from txnlog.iceberg.deletes import referenced_data_file
from txnlog.iceberg.file_io import StoreFileIO
from txnlog.iceberg.lru import LruCache
from txnlog.iceberg.metadata import METADATA_DIR, spec_by_id
from txnlog.iceberg.pyiceberg_adapter import PositionDeleteManifestWriter, apply_updates, inherit_from_manifest, new_snapshot_id

#: Data files per manifest written; bounds the work of rewriting one to delete a file.
MANIFEST_MAX_ENTRIES = 1000
#: With more manifests than this, small ones are merged (as Iceberg's merge-append does, from 100;
#: fewer here, since this process already holds their entries and a shorter list is cheaper per commit).
MANIFEST_MERGE_MIN_COUNT = 32

# Manifests are immutable, so a manifest's entries never go stale.
MANIFEST_ENTRIES = LruCache(1024)  # manifest path -> live entries
MANIFEST_LISTS = LruCache(64)  # manifest list location -> its ManifestFiles
# f"{root}#{snapshot id}" -> FileIndexes: where the current snapshot lists each data file and its deletes
FILE_INDEXES = LruCache(16)


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


def indexed_path(df: DataFile) -> str:
    """The data file URI an entry is indexed by: its own for a data file, the one it applies to
    for a position delete file."""
    return df.file_path if df.content == DataFileContent.DATA else referenced_data_file(df)


@dataclass(frozen=True)
class FileIndexes:
    """Data file URI -> the manifest listing it, and -> the delete manifest listing its deletes."""

    data: dict[str, str]
    deletes: dict[str, str] | None


@dataclass
class ExportWork:
    io: StoreFileIO
    metadata: TableMetadata
    manifests: list[ManifestFile]
    #: Data file URI -> the data manifest holding it, for the current snapshot.
    index: dict[str, str] | None = None
    #: Data file URI -> the delete manifest holding its position delete file.
    delete_index: dict[str, str] | None = None
    snapshot_ids: list[int] = field(default_factory=list)
    #: Live entries of manifests written by this export, by manifest path.
    written: dict[str, list[ManifestEntry]] = field(default_factory=dict)

    def apply(self, updates: Sequence[TableUpdate]) -> None:
        """pyiceberg's own update rules, without update_table_metadata's deep copy of the whole
        metadata (O(snapshots) per call); the models are never mutated in place."""
        self.metadata = apply_updates(self.metadata, updates)

    def _index_key(self) -> str:
        return f"{self.io.store.root_uri}#{self.metadata.current_snapshot_id}"

    def load_cached_indexes(self) -> None:
        """The indexes this process kept for the current snapshot, if any (copies: they change)."""
        cached = FILE_INDEXES.get_or(self._index_key())
        if isinstance(cached, FileIndexes):
            self.index = dict(cached.data)
            self.delete_index = dict(cached.deletes) if cached.deletes is not None else None

    def cache_indexes(self) -> None:
        if self.index is not None and self.metadata.current_snapshot_id is not None:
            FILE_INDEXES.put(self._index_key(), FileIndexes(self.index, self.delete_index))

    def _build_index(self, content: ManifestContent) -> dict[str, str]:
        index: dict[str, str] = {}
        for mf in self.manifests:
            if mf.content == content:
                for e in live_entries(self.io, mf):
                    index[indexed_path(e.data_file)] = mf.manifest_path
        return index

    def file_index(self) -> dict[str, str]:
        """Data file URI -> the manifest holding it, for the current snapshot."""
        if self.index is None:
            self.load_cached_indexes()
        if self.index is None:
            self.index = self._build_index(ManifestContent.DATA)
        return self.index

    def delete_file_index(self) -> dict[str, str]:
        """Data file URI -> the delete manifest holding its position deletes."""
        if self.delete_index is None:
            self.delete_index = self._build_index(ManifestContent.DELETES)
        return self.delete_index


def new_location(io: StoreFileIO, kind: str, snapshot_id: int) -> str:
    return io.location(f"{METADATA_DIR}/{kind}-{snapshot_id}-{uuid.uuid4().hex}.avro")


def write_entries(
    work: ExportWork, spec: PartitionSpec, snapshot_id: int, entries: Iterable[tuple[str, ManifestEntry]], content: ManifestContent = ManifestContent.DATA
) -> ManifestFile:
    """A manifest (of data or of delete files) of (``add`` | ``existing`` | ``delete``, entry)
    pairs. Its live entries wait in ``work.written`` until the manifest list gives them their
    sequence number."""
    out = work.io.new_output(new_location(work.io, "manifest", snapshot_id))
    schema = work.metadata.schema()
    writer: ManifestWriter
    if content == ManifestContent.DELETES:
        writer = PositionDeleteManifestWriter(spec, schema, out, snapshot_id, "deflate")
    else:
        writer = write_manifest(2, spec, schema, out, snapshot_id, "deflate")
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


def chunks(items: Sequence[DataFile], size: int) -> Iterable[Sequence[DataFile]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def merge_small_manifests(work: ExportWork, manifests: list[ManifestFile], snapshot_id: int, indexes: Mapping[ManifestContent, dict[str, str] | None]) -> list[ManifestFile]:
    """Merge small manifests once there are many, so a manifest list stays short (data and
    delete manifests apart: a manifest holds one kind)."""
    if len(manifests) <= MANIFEST_MERGE_MIN_COUNT:
        return manifests
    small = [m for m in manifests if (m.added_files_count or 0) + (m.existing_files_count or 0) < MANIFEST_MAX_ENTRIES // 2]
    if len(small) < 2:
        return manifests
    keep = [m for m in manifests if m not in small]
    groups: dict[tuple[ManifestContent, int], list[tuple[str, ManifestEntry]]] = {}
    for m in small:
        groups.setdefault((m.content, m.partition_spec_id), []).extend(_merged_entries(work, m))
    merged = []
    for (content, spec_id), pairs in groups.items():
        spec = spec_by_id(work.metadata, spec_id)
        index = indexes.get(content)
        for i in range(0, len(pairs), MANIFEST_MAX_ENTRIES):
            part = pairs[i : i + MANIFEST_MAX_ENTRIES]
            mf = write_entries(work, spec, snapshot_id, part, content)
            merged.append(mf)
            if index is not None:
                for _, e in part:
                    index[indexed_path(e.data_file)] = mf.manifest_path
    return merged + keep


def _merged_entries(work: ExportWork, manifest: ManifestFile) -> list[tuple[str, ManifestEntry]]:
    """A small manifest's live entries as a merged manifest lists them. One this snapshot wrote
    is not listed yet, so its added entries have no sequence number: they stay ``add`` and take
    the snapshot's. (Read back, they would inherit the unassigned -1; the merged manifest's
    minimum sequence number, -1, would then be taken for unassigned and set to the snapshot's,
    and readers would skip every older delete manifest as older than all data.)"""
    pending = work.written.pop(manifest.manifest_path, None)
    if pending is None:
        return [("existing", e) for e in live_entries(work.io, manifest)]
    return [("add" if e.status == ManifestEntryStatus.ADDED else "existing", e) for e in pending]


def _rewrite_without(
    work: ExportWork,
    kept: list[ManifestFile],
    removed: set[str],
    index: dict[str, str],
    snapshot_id: int,
    collector: SnapshotSummaryCollector,
    schema: Schema,
) -> list[ManifestFile]:
    """Each manifest listing a file indexed under a ``removed`` URI, written again with those
    entries marked deleted (taken out of ``kept``; the rewritten ones returned)."""
    by_manifest: dict[str, set[str]] = {}
    for uri in removed:
        where = index.get(uri)
        if where is not None:
            by_manifest.setdefault(where, set()).add(uri)
    rewritten = []
    for path, uris in by_manifest.items():
        old = next(m for m in kept if m.manifest_path == path)
        kept.remove(old)
        old_spec = spec_by_id(work.metadata, old.partition_spec_id)
        entries = live_entries(work.io, old)
        pairs = []
        for e in entries:
            if indexed_path(e.data_file) in uris:
                pairs.append(("delete", e))
                collector.remove_file(e.data_file, schema, old_spec)
            else:
                pairs.append(("existing", e))
        mf = write_entries(work, old_spec, snapshot_id, pairs, old.content)
        rewritten.append(mf)
        for e in entries:
            key = indexed_path(e.data_file)
            if key in uris:
                index.pop(key, None)
            else:
                index[key] = mf.manifest_path
    return rewritten


def _write_added(
    work: ExportWork,
    spec: PartitionSpec,
    snapshot_id: int,
    files: Sequence[DataFile],
    content: ManifestContent,
    index: dict[str, str] | None,
    collector: SnapshotSummaryCollector,
    schema: Schema,
) -> list[ManifestFile]:
    out = []
    for chunk in chunks(files, MANIFEST_MAX_ENTRIES):
        mf = write_entries(work, spec, snapshot_id, (("add", added_entry(df)) for df in chunk), content)
        out.append(mf)
        for df in chunk:
            collector.add_file(df, schema, spec)
            if index is not None:
                index[indexed_path(df)] = mf.manifest_path
    return out


def commit_snapshot(
    work: ExportWork,
    operation: Operation,
    added: list[DataFile],
    removed: set[str],
    extra: Mapping[str, str],
    timestamp_ms: int,
    *,
    added_deletes: Sequence[DataFile] = (),
    rebuild: bool = False,
) -> None:
    """One snapshot: ``added`` data files and ``added_deletes`` (their position delete files)
    get this snapshot's sequence number, so the deletes apply to them (a position delete applies
    to data files of a sequence number up to its own). The files under a ``removed`` URI go, and
    so do the delete files that applied to them: a data file added again with a new vector never
    sees its old deletes (their sequence number is lower), and these are dropped all the same."""
    meta = work.metadata
    existing_ids = {s.snapshot_id for s in meta.snapshots}
    snapshot_id = new_snapshot_id(existing_ids)
    schema = meta.schema()
    spec = meta.spec()
    collector = SnapshotSummaryCollector()
    new_manifests: list[ManifestFile] = []
    index: dict[str, str] | None
    delete_index: dict[str, str] | None
    if rebuild:
        kept: list[ManifestFile] = []
        index, delete_index = {}, {}
    else:
        # A manifest with nothing live left was needed only by the snapshot that emptied it.
        kept = [m for m in work.manifests if (m.added_files_count or 0) + (m.existing_files_count or 0) > 0]
        index, delete_index = work.index, work.delete_index
        if removed:
            index = work.file_index()
            delete_index = work.delete_file_index()
            new_manifests += _rewrite_without(work, kept, removed, index, snapshot_id, collector, schema)
            new_manifests += _rewrite_without(work, kept, removed, delete_index, snapshot_id, collector, schema)
    if added_deletes and operation == Operation.APPEND:
        operation = Operation.OVERWRITE  # Iceberg's row-delta operation: files and deletes added
    new_manifests += _write_added(work, spec, snapshot_id, added, ManifestContent.DATA, index, collector, schema)
    new_manifests += _write_added(work, spec, snapshot_id, added_deletes, ManifestContent.DELETES, delete_index, collector, schema)
    indexes = {ManifestContent.DATA: index, ManifestContent.DELETES: delete_index}
    manifests = merge_small_manifests(work, new_manifests + kept, snapshot_id, indexes)

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
    work.delete_index = delete_index
    work.snapshot_ids.append(snapshot_id)
