"""The export: Delta commits since the last export become Iceberg snapshots, one per commit.

Layout (a Hadoop-style Iceberg table beside ``_delta_log``): ``metadata/v<N>.metadata.json``
written put-if-absent (the loser of a race re-reads and carries on), Avro manifests and manifest
lists with unique names, and ``metadata/version-hint.text`` written last. A crash at any point
leaves the newest complete ``v<N>`` readable; files of an export that never reached its
metadata file are unreferenced and harmless. The table property ``txnlog.delta.version`` says
which Delta version the metadata shows, so the next export resumes right after it and never
writes a second snapshot for one Delta version.
"""

from __future__ import annotations

import copy
import logging
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.manifest import (
    UNASSIGNED_SEQ,
    DataFile,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    _inherit_from_manifest,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2, _generate_snapshot_id
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import MetadataLogEntry, Operation, Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
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
    _apply_table_update,
    _TableMetadataUpdateContext,
)

from txnlog import Snapshot as DeltaSnapshot
from txnlog import Table
from txnlog import properties as props
from txnlog.errors import FileAlreadyExistsError, ObjectNotFoundError, TxnLogError
from txnlog.iceberg.datafiles import data_files, refuse_deletion_vectors
from txnlog.iceberg.errors import IcebergExportError
from txnlog.iceberg.file_io import StoreFileIO
from txnlog.iceberg.schema import FIRST_PARTITION_FIELD_ID, iceberg_schema, name_mapping, partition_spec, same_schema
from txnlog.log import Commit, Metadata, commit_file, decode_action, list_log, read_commits, table_from_log_dicts
from txnlog.storage import locate

log = logging.getLogger(__name__)

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

#: Data files per manifest written; bounds the work of rewriting one to delete a file.
MANIFEST_MAX_ENTRIES = 1000
#: With more manifests than this, small ones are merged (as Iceberg's merge-append does, from 100;
#: fewer here, since this process already holds their entries and a shorter list is cheaper per commit).
MANIFEST_MERGE_MIN_COUNT = 32
_MAX_ATTEMPTS = 8
_METADATA_FILE = re.compile(r"^v(\d+)\.metadata\.json$")


@dataclass(frozen=True)
class ExportResult:
    """What an export did."""

    table_uri: str
    #: The Delta version the Iceberg metadata now shows.
    delta_version: int
    #: The Delta version it showed before (None: there was no Iceberg metadata).
    previous_delta_version: int | None
    #: Iceberg snapshot ids written, oldest first (empty when already up to date).
    snapshot_ids: tuple[int, ...]
    #: The newest metadata file (``.../metadata/v<N>.metadata.json``).
    metadata_location: str | None
    #: Whether the snapshot was rebuilt from the full file list instead of commit by commit.
    rebuilt: bool = False
    rebuild_reason: str | None = None
    #: The catalog identifier the metadata was committed to, if a catalog was given.
    catalog_identifier: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "table_uri": self.table_uri,
            "delta_version": self.delta_version,
            "previous_delta_version": self.previous_delta_version,
            "snapshot_ids": list(self.snapshot_ids),
            "metadata_location": self.metadata_location,
            "rebuilt": self.rebuilt,
            "rebuild_reason": self.rebuild_reason,
            "catalog_identifier": self.catalog_identifier,
        }


# --- caches (manifests are immutable, so a manifest's entries never go stale) -------------------


class _Lru(OrderedDict[str, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size
        self.lock = threading.Lock()

    def get_or(self, key: str) -> Any:
        with self.lock:
            value = self.get(key)
            if value is not None:
                self.move_to_end(key)
            return value

    def put(self, key: str, value: Any) -> None:
        with self.lock:
            self[key] = value
            self.move_to_end(key)
            while len(self) > self._size:
                self.popitem(last=False)


_ENTRIES = _Lru(1024)  # manifest path -> live entries
_LISTS = _Lru(64)  # manifest list location -> its ManifestFiles
_INDEXES = _Lru(16)  # f"{root}#{snapshot id}" -> {data file uri: manifest path}


def _live_entries(io: StoreFileIO, manifest: ManifestFile) -> list[ManifestEntry]:
    found = _ENTRIES.get_or(manifest.manifest_path)
    if found is None:
        found = manifest.fetch_manifest_entry(io, discard_deleted=True)
        _ENTRIES.put(manifest.manifest_path, found)
    return found  # type: ignore[no-any-return]


# --- the working state of one export --------------------------------------------------------


@dataclass
class _Work:
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
        context = _TableMetadataUpdateContext()
        for update in updates:
            self.metadata = _apply_table_update(update, self.metadata, context)

    def file_index(self) -> dict[str, str]:
        """Data file URI -> the manifest holding it, for the current snapshot."""
        if self.index is None:
            key = f"{self.io.store.root_uri}#{self.metadata.current_snapshot_id}"
            cached = _INDEXES.get_or(key)
            if cached is not None:
                self.index = dict(cached)
            else:
                self.index = {}
                for mf in self.manifests:
                    for e in _live_entries(self.io, mf):
                        self.index[e.data_file.file_path] = mf.manifest_path
        return self.index


def _new_location(io: StoreFileIO, kind: str, snapshot_id: int) -> str:
    return io.location(f"{METADATA_DIR}/{kind}-{snapshot_id}-{uuid.uuid4().hex}.avro")


def _spec_by_id(metadata: TableMetadata, spec_id: int) -> PartitionSpec:
    return metadata.specs()[spec_id]


def _sync_schema(work: _Work, delta: Metadata) -> None:
    """Bring the current Iceberg schema, partition spec and name mapping to ``delta``'s."""
    meta = work.metadata
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
    work.apply(updates)


def _initial_metadata(io: StoreFileIO, delta: Metadata) -> TableMetadata:
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


def _write_manifest(work: _Work, spec: PartitionSpec, snapshot_id: int, entries: Iterable[tuple[str, ManifestEntry]]) -> ManifestFile:
    """A manifest of (``add`` | ``existing`` | ``delete``, entry) pairs. Its live entries wait in
    ``work.written`` until the manifest list gives them their sequence number."""
    out = work.io.new_output(_new_location(work.io, "manifest", snapshot_id))
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


def _assigned(manifest: ManifestFile, sequence_number: int) -> ManifestFile:
    """``manifest`` as the manifest list records it (what ManifestListWriterV2 assigns)."""
    if manifest.sequence_number != UNASSIGNED_SEQ and manifest.min_sequence_number != UNASSIGNED_SEQ:
        return manifest
    assigned = copy.copy(manifest)
    if assigned.sequence_number == UNASSIGNED_SEQ:
        assigned.sequence_number = sequence_number
    if assigned.min_sequence_number == UNASSIGNED_SEQ:
        assigned.min_sequence_number = sequence_number
    return assigned


def _data_entry(df: DataFile) -> ManifestEntry:
    return ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=None, sequence_number=None, file_sequence_number=None, data_file=df)


def _chunks(items: list[DataFile], size: int) -> Iterable[list[DataFile]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _merge_small_manifests(work: _Work, manifests: list[ManifestFile], snapshot_id: int, index: dict[str, str] | None) -> list[ManifestFile]:
    """Merge small manifests once there are many, so a manifest list stays short."""
    if len(manifests) <= MANIFEST_MERGE_MIN_COUNT:
        return manifests
    small = [m for m in manifests if (m.added_files_count or 0) + (m.existing_files_count or 0) < MANIFEST_MAX_ENTRIES // 2]
    if len(small) < 2:
        return manifests
    keep = [m for m in manifests if m not in small]
    by_spec: dict[int, list[ManifestEntry]] = {}
    for m in small:
        by_spec.setdefault(m.partition_spec_id, []).extend(_live_entries(work.io, m))
    merged = []
    for spec_id, entries in by_spec.items():
        spec = _spec_by_id(work.metadata, spec_id)
        for i in range(0, len(entries), MANIFEST_MAX_ENTRIES):
            part = entries[i : i + MANIFEST_MAX_ENTRIES]
            mf = _write_manifest(work, spec, snapshot_id, (("existing", e) for e in part))
            merged.append(mf)
            if index is not None:
                for e in part:
                    index[e.data_file.file_path] = mf.manifest_path
    return merged + keep


def _commit_snapshot(
    work: _Work,
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
    snapshot_id = _generate_snapshot_id()
    while snapshot_id in existing_ids:
        snapshot_id = _generate_snapshot_id()
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
                old_spec = _spec_by_id(meta, old.partition_spec_id)
                entries = _live_entries(work.io, old)
                pairs = []
                for e in entries:
                    if e.data_file.file_path in uris:
                        pairs.append(("delete", e))
                        collector.remove_file(e.data_file, schema, old_spec)
                    else:
                        pairs.append(("existing", e))
                mf = _write_manifest(work, old_spec, snapshot_id, pairs)
                new_manifests.append(mf)
                for e in entries:
                    if e.data_file.file_path in uris:
                        index.pop(e.data_file.file_path, None)
                    else:
                        index[e.data_file.file_path] = mf.manifest_path
    for chunk in _chunks(added, MANIFEST_MAX_ENTRIES):
        mf = _write_manifest(work, spec, snapshot_id, (("add", _data_entry(df)) for df in chunk))
        new_manifests.append(mf)
        for df in chunk:
            collector.add_file(df, schema, spec)
            if index is not None:
                index[df.file_path] = mf.manifest_path
    manifests = _merge_small_manifests(work, new_manifests + kept, snapshot_id, index)

    assert isinstance(meta, TableMetadataV2)  # the export writes format v2 only
    sequence_number = meta.last_sequence_number + 1
    parent = meta.current_snapshot_id
    list_out = work.io.new_output(_new_location(work.io, "snap", snapshot_id))
    with write_manifest_list(2, list_out, snapshot_id, parent, sequence_number, "deflate") as writer:
        writer.add_manifests(manifests)
    # The manifest list gave the new manifests their sequence number: keep what readers will see,
    # so the next export in this process reads neither the list nor these manifests back.
    written = [_assigned(m, sequence_number) for m in manifests]
    for m in written:
        live = work.written.pop(m.manifest_path, None)
        if live is not None:
            _ENTRIES.put(m.manifest_path, [_inherit_from_manifest(entry, m) for entry in live])
    _LISTS.put(list_out.location, tuple(written))

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


# --- reading the Iceberg side ---------------------------------------------------------------


_METADATA = _Lru(16)  # metadata file location -> parsed TableMetadata (the files are immutable)


def _read_metadata(io: StoreFileIO, number: int) -> TableMetadata:
    location = io.location(f"{METADATA_DIR}/v{number}.metadata.json")
    cached = _METADATA.get_or(location)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    try:
        found = FromInputFile.table_metadata(io.new_input(location))
        _METADATA.put(location, found)
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


def _current_manifests(io: StoreFileIO, meta: TableMetadata) -> list[ManifestFile]:
    current = meta.current_snapshot()
    if current is None:
        return []
    cached = _LISTS.get_or(current.manifest_list)
    return list(cached) if cached is not None else list(current.manifests(io))


# --- reading the Delta side -----------------------------------------------------------------


def _commit_files(commit: Commit) -> tuple[pa.Table, pa.Table, Metadata | None]:
    if commit.columnar is not None:
        adds, removes = commit.columnar.adds, commit.columnar.removes
    else:
        adds = table_from_log_dicts([a["add"] for a in commit.actions if "add" in a], "add")
        removes = table_from_log_dicts([a["remove"] for a in commit.actions if "remove" in a], "remove")
    new_meta = None
    for a in commit.actions:
        if "metaData" in a:
            new_meta = decode_action("metaData", a["metaData"], path=commit.path, version=commit.version)
    return adds, removes, new_meta  # type: ignore[return-value]


def _all_true(values: pa.ChunkedArray | pa.Array) -> bool:
    return len(values) == 0 or bool(pc.all(pc.fill_null(values, True)).as_py())


def _all_false(values: pa.ChunkedArray | pa.Array) -> bool:
    return len(values) > 0 and not bool(pc.any(pc.fill_null(values, True)).as_py())


# --- the export -----------------------------------------------------------------------------


def _open(table_or_uri: Table | str | Any, storage_options: Mapping[str, Any] | None) -> Table:
    if isinstance(table_or_uri, Table):
        return table_or_uri
    return Table(table_or_uri, storage_options)


def export(
    table_or_uri: Table | str | Any,
    *,
    catalog: Catalog | None = None,
    full: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    identifier: str | tuple[str, ...] | None = None,
) -> ExportResult:
    """Write Iceberg metadata for the table's latest version under ``<table>/metadata/``.

    One Iceberg snapshot per Delta commit since the last export; a rebuild from the full file
    list (one snapshot) when ``full``, on the first export, when the commits since the last
    export were expired, or when more than ``txnlog.iceberg.export.maxIncrementalCommits``
    commits are missing. With a pyiceberg ``catalog``, the new metadata is also committed there
    under ``identifier`` (default ``default.<table directory name>``) with the catalog's own
    compare-and-swap. Raises a TxnLogError naming the file or operation on failure; whatever
    failed is caught up by the next export.
    """
    table = _open(table_or_uri, storage_options)
    return export_snapshot(table.snapshot(), catalog=catalog, full=full, identifier=identifier)


def export_snapshot(
    delta: DeltaSnapshot,
    *,
    catalog: Catalog | None = None,
    full: bool = False,
    identifier: str | tuple[str, ...] | None = None,
) -> ExportResult:
    """:func:`export` up to the version of ``delta`` (what the post-commit hook calls)."""
    io = StoreFileIO(delta.store)
    try:
        result = _export(io, delta, full)
        if catalog is not None:
            ident = _catalog_commit(io, catalog, identifier, result)
            result = ExportResult(**{**result.__dict__, "catalog_identifier": ident})
        return result
    except TxnLogError:
        raise
    except Exception as e:  # pyiceberg, pyarrow, Avro: name the table and what failed
        raise IcebergExportError(f"Iceberg export of {delta.uri} at version {delta.version} failed: {type(e).__name__}: {e}") from e


def _plan(io: StoreFileIO, delta: DeltaSnapshot, base: TableMetadata | None, last: int | None, full: bool) -> str | None:
    """Why the export must rebuild, or None to go commit by commit."""
    if full:
        return "a full export was requested"
    if base is None or last is None:
        return "first export: no Iceberg metadata yet"
    if base.properties.get(DELTA_TABLE_ID_KEY) not in (None, delta.metadata.id):
        return f"the Delta table id changed from {base.properties.get(DELTA_TABLE_ID_KEY)} to {delta.metadata.id}"
    gap = delta.version - last
    limit = props.ICEBERG_EXPORT_MAX_COMMITS.get(delta.configuration)
    if gap > limit:
        return f"{gap} Delta commits since the last export (more than txnlog.iceberg.export.maxIncrementalCommits={limit})"
    listing = list_log(io.store, last + 1)
    missing = [v for v in range(last + 1, delta.version + 1) if commit_file(io.store, listing, v) is None]
    if missing:
        return f"Delta commits {missing[0]}..{missing[-1]} since the last export (version {last}) were expired"
    return None


def _export(io: StoreFileIO, delta: DeltaSnapshot, full: bool) -> ExportResult:
    target = delta.version
    for _attempt in range(_MAX_ATTEMPTS):
        number, hint = latest_metadata_number(io)
        if number is not None and hint != number:  # an exporter stopped before the hint
            io.store.put(VERSION_HINT, str(number).encode())
        base = _read_metadata(io, number) if number is not None else None
        base_location = io.location(f"{METADATA_DIR}/v{number}.metadata.json") if number is not None else None
        last = int(base.properties[DELTA_VERSION_KEY]) if base is not None and DELTA_VERSION_KEY in base.properties else None
        same_table = base is not None and base.properties.get(DELTA_TABLE_ID_KEY) in (None, delta.metadata.id)
        if not full and last is not None and last >= target and same_table:
            return ExportResult(delta.uri, last, last, (), base_location)
        reason = _plan(io, delta, base, last, full)
        if reason is None:
            assert base is not None and last is not None
            work = _Work(io, base, _current_manifests(io, base))
            work.index = _INDEXES.get_or(f"{io.store.root_uri}#{base.current_snapshot_id}")
            if work.index is not None:
                work.index = dict(work.index)
            _export_commits(work, delta, last)
        else:
            log.info("Iceberg export of %s rebuilds at version %d: %s", delta.uri, target, reason)
            work = _Work(io, base if base is not None else _initial_metadata(io, delta.metadata), [])
            _rebuild(work, delta, reason)
        work.apply([SetPropertiesUpdate(updates={DELTA_VERSION_KEY: str(target), DELTA_TABLE_ID_KEY: delta.metadata.id})])
        final = work.metadata if base_location is None else _with_metadata_log(work.metadata, base, base_location)
        new_number = (number or 0) + 1
        location = io.location(f"{METADATA_DIR}/v{new_number}.metadata.json")
        try:
            # pyiceberg's own serialization (ToOutputFile.table_metadata minus re-reading its
            # config files and environment on every call); put-if-absent on close.
            with io.new_output(location).create(overwrite=False) as out:
                out.write(final.model_dump_json(exclude_none=True).encode())
        except FileAlreadyExistsError:
            log.info("another exporter wrote %s first; re-reading", location)
            continue
        _METADATA.put(location, final)
        io.store.put(VERSION_HINT, str(new_number).encode())
        if work.index is not None and final.current_snapshot_id is not None:
            _INDEXES.put(f"{io.store.root_uri}#{final.current_snapshot_id}", work.index)
        return ExportResult(delta.uri, target, last, tuple(work.snapshot_ids), location, reason is not None, reason)
    raise IcebergExportError(f"Iceberg export of {delta.uri}: lost the race for the next metadata file {_MAX_ATTEMPTS} times")


def _with_metadata_log(final: TableMetadata, base: TableMetadata | None, base_location: str) -> TableMetadata:
    """Make sure the previous metadata file is in the metadata log (update_table_metadata adds
    it only when the last update changed something)."""
    if any(e.metadata_file == base_location for e in final.metadata_log) or base is None:
        return final
    entry = MetadataLogEntry(metadata_file=base_location, timestamp_ms=base.last_updated_ms)
    return final.model_copy(update={"metadata_log": [*final.metadata_log, entry][-100:]})


def _rebuild(work: _Work, delta: DeltaSnapshot, reason: str) -> None:
    files = delta.files()
    refuse_deletion_vectors(files, f"table {delta.uri} version {delta.version}")
    _sync_schema(work, delta.metadata)
    if files.num_rows == 0 and work.metadata.current_snapshot_id is None:
        # Nothing to read, nothing to replace (the create commit, or a table emptied before its
        # first export): no snapshot, as for any metadata-only commit. pyiceberg and Spark read a
        # table without a current snapshot as empty.
        return
    dfs = data_files(
        files, delta.metadata, work.metadata.schema(), work.metadata.spec(), delta.store, allow_absolute_paths=delta.allow_absolute_paths, version=delta.version
    )
    operation = Operation.APPEND if work.metadata.current_snapshot_id is None else Operation.OVERWRITE
    timestamp = _version_timestamp(delta)
    extra = {DELTA_VERSION_KEY: str(delta.version), DELTA_TIMESTAMP_KEY: str(timestamp), REBUILD_KEY: reason}
    _commit_snapshot(work, operation, dfs, set(), extra, timestamp, rebuild=True)


def _version_timestamp(delta: DeltaSnapshot) -> int:
    listing = list_log(delta.store, delta.version)
    found = commit_file(delta.store, listing, delta.version)
    if found is None:
        return int(time.time() * 1000)
    return read_commits(delta.store, [found])[0].timestamp


def _export_commits(work: _Work, delta: DeltaSnapshot, last: int) -> None:
    store = delta.store
    listing = list_log(store, last + 1)
    files = [commit_file(store, listing, v) for v in range(last + 1, delta.version + 1)]
    commits = read_commits(store, [f for f in files if f is not None], columnar=True)
    parsed = [_commit_files(c) for c in commits]
    # The metadata in force before the first commit: the latest one unless a commit changes it.
    if any(m is not None for _, _, m in parsed):
        current: Metadata = delta.table.snapshot(last).metadata if delta.table is not None else _snapshot_at(delta, last).metadata
    else:
        current = delta.metadata
    _sync_schema(work, current)
    for commit, (adds, removes, new_meta) in zip(commits, parsed):
        if new_meta is not None:
            current = new_meta
            _sync_schema(work, current)
        _export_commit(work, delta, commit, adds, removes, current)


def _snapshot_at(delta: DeltaSnapshot, version: int) -> DeltaSnapshot:
    return Table(delta.uri, store=delta.store, allow_absolute_paths=delta.allow_absolute_paths).snapshot(version)


def _export_commit(work: _Work, delta: DeltaSnapshot, commit: Commit, adds: pa.Table, removes: pa.Table, metadata: Metadata) -> None:
    if adds.num_rows == 0 and removes.num_rows == 0:
        return
    where = f"table {delta.uri} version {commit.version}"
    if adds.num_rows:
        refuse_deletion_vectors(adds, where)
    if removes.num_rows and removes.column("deletion_vector").null_count != removes.num_rows:
        refuse_deletion_vectors(removes.select(["path", "deletion_vector"]), where)
    removed = {
        locate(delta.uri, p, allow_absolute=delta.allow_absolute_paths, version=commit.version).uri for p in removes.column("path").to_pylist()
    }
    added = adds
    if removes.num_rows == 0 and _all_false(adds.column("data_change")):
        # A rewrite that changes no data (new stats for live files): nothing for Iceberg
        # readers, unless it brings files Iceberg does not have yet.
        index = work.file_index()
        uris = [locate(delta.uri, p, allow_absolute=delta.allow_absolute_paths, version=commit.version).uri for p in adds.column("path").to_pylist()]
        fresh = [i for i, u in enumerate(uris) if u not in index]
        if not fresh:
            return
        added = adds.take(pa.array(fresh, pa.int64()))
    meta = work.metadata
    dfs = data_files(added, metadata, meta.schema(), meta.spec(), delta.store, allow_absolute_paths=delta.allow_absolute_paths, version=commit.version)
    if not removed:
        operation = Operation.APPEND
    elif added.num_rows == 0:
        operation = Operation.DELETE
    elif _all_false(added.column("data_change")) and _all_false(removes.column("data_change")):
        operation = Operation.REPLACE
    else:
        operation = Operation.OVERWRITE
    timestamp = commit.timestamp
    extra = {DELTA_VERSION_KEY: str(commit.version), DELTA_TIMESTAMP_KEY: str(timestamp)}
    info = commit.commit_info()
    if info is not None and getattr(info, "operation", None):
        extra[props.ICEBERG_DELTA_OPERATION_KEY] = str(info.operation)
    _commit_snapshot(work, operation, dfs, removed, extra, timestamp)


# --- catalogs -------------------------------------------------------------------------------


def _identifier(io: StoreFileIO, identifier: str | tuple[str, ...] | None) -> tuple[str, ...]:
    if identifier is None:
        name = re.sub(r"[^A-Za-z0-9_]", "_", io.store.root_uri.rstrip("/").rsplit("/", 1)[-1]) or "table"
        return ("default", name)
    return tuple(identifier.split(".")) if isinstance(identifier, str) else tuple(identifier)


def _catalog_updates(have: TableMetadata, want: TableMetadata) -> list[TableUpdate]:
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


def _catalog_commit(io: StoreFileIO, catalog: Catalog, identifier: str | tuple[str, ...] | None, result: ExportResult) -> str:
    ident = _identifier(io, identifier)
    name = ".".join(ident)
    if result.metadata_location is None:
        return name
    ours = FromInputFile.table_metadata(io.new_input(result.metadata_location))
    for _attempt in range(_MAX_ATTEMPTS):
        try:
            current = catalog.load_table(ident)
        except NoSuchTableError:
            if len(ident) > 1:
                catalog.create_namespace_if_not_exists(ident[:-1])
            catalog.register_table(ident, result.metadata_location)
            return name
        have = current.metadata
        if str(have.table_uuid) != str(ours.table_uuid):
            raise IcebergExportError(
                f"catalog table {name} has uuid {have.table_uuid}, not the exported table's {ours.table_uuid} "
                f"({result.metadata_location}); refusing to overwrite another table"
            )
        updates = _catalog_updates(have, ours)
        if not updates:
            return name
        requirements = (AssertTableUUID(uuid=have.table_uuid), AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=have.current_snapshot_id))
        try:
            catalog.commit_table(current, requirements, tuple(updates))
            return name
        except CommitFailedException:
            log.info("catalog commit of %s lost a race; retrying", name)
    raise IcebergExportError(f"could not commit {result.metadata_location} to catalog table {name}: lost {_MAX_ATTEMPTS} races")
