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

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import SetPropertiesUpdate

from txnlog import Snapshot as DeltaSnapshot
from txnlog import Table
from txnlog import properties as props
from txnlog.documents import document
from txnlog.errors import FileAlreadyExistsError, TxnLogError
from txnlog.iceberg.catalog import commit_to_catalog
from txnlog.iceberg.datafiles import data_files
from txnlog.iceberg.deletes import position_delete_files
from txnlog.iceberg.errors import IcebergExportError
from txnlog.iceberg.file_io import StoreFileIO
from txnlog.iceberg.manifests import ExportWork, commit_snapshot, current_manifests
from txnlog.iceberg.metadata import (
    DELTA_TABLE_ID_KEY,
    DELTA_TIMESTAMP_KEY,
    DELTA_VERSION_KEY,
    MAX_ATTEMPTS,
    METADATA_DIR,
    METADATA_FILES,
    REBUILD_KEY,
    VERSION_HINT,
    initial_metadata,
    latest_metadata_number,
    read_metadata,
    schema_updates,
    with_metadata_log,
)
from txnlog.log import Commit, Metadata, commit_file, decode_action, list_log, read_commits, table_from_log_dicts
from txnlog.storage import locate

log = logging.getLogger(__name__)

__all__ = ["DELTA_VERSION_KEY", "ExportResult", "export", "export_snapshot"]


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
        return document(self)


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
            ident = commit_to_catalog(io, catalog, identifier, result.metadata_location)
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
    for _attempt in range(MAX_ATTEMPTS):
        number, hint = latest_metadata_number(io)
        if number is not None and hint != number:  # an exporter stopped before the hint
            io.store.put(VERSION_HINT, str(number).encode())
        base = read_metadata(io, number) if number is not None else None
        base_location = io.location(f"{METADATA_DIR}/v{number}.metadata.json") if number is not None else None
        last = int(base.properties[DELTA_VERSION_KEY]) if base is not None and DELTA_VERSION_KEY in base.properties else None
        same_table = base is not None and base.properties.get(DELTA_TABLE_ID_KEY) in (None, delta.metadata.id)
        if not full and last is not None and last >= target and same_table:
            return ExportResult(delta.uri, last, last, (), base_location)
        reason = _plan(io, delta, base, last, full)
        if reason is None:
            assert base is not None and last is not None
            work = ExportWork(io, base, current_manifests(io, base))
            work.load_cached_indexes()
            _export_commits(work, delta, last)
        else:
            log.info("Iceberg export of %s rebuilds at version %d: %s", delta.uri, target, reason)
            work = ExportWork(io, base if base is not None else initial_metadata(io, delta.metadata), [])
            _rebuild(work, delta, reason)
        work.apply([SetPropertiesUpdate(updates={DELTA_VERSION_KEY: str(target), DELTA_TABLE_ID_KEY: delta.metadata.id})])
        final = work.metadata if base_location is None else with_metadata_log(work.metadata, base, base_location)
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
        METADATA_FILES.put(location, final)
        io.store.put(VERSION_HINT, str(new_number).encode())
        work.cache_indexes()
        return ExportResult(delta.uri, target, last, tuple(work.snapshot_ids), location, reason is not None, reason)
    raise IcebergExportError(f"Iceberg export of {delta.uri}: lost the race for the next metadata file {MAX_ATTEMPTS} times")


def _rebuild(work: ExportWork, delta: DeltaSnapshot, reason: str) -> None:
    files = delta.files()
    _sync_schema(work, delta.metadata)
    if files.num_rows == 0 and work.metadata.current_snapshot_id is None:
        # Nothing to read, nothing to replace (the create commit, or a table emptied before its
        # first export): no snapshot, as for any metadata-only commit. pyiceberg and Spark read a
        # table without a current snapshot as empty.
        return
    dfs = data_files(
        files, delta.metadata, work.metadata.schema(), work.metadata.spec(), delta.store, allow_absolute_paths=delta.allow_absolute_paths, version=delta.version
    )
    deletes = _position_deletes(work, delta, files, dfs)
    operation = Operation.APPEND if work.metadata.current_snapshot_id is None else Operation.OVERWRITE
    timestamp = _version_timestamp(delta)
    extra = {DELTA_VERSION_KEY: str(delta.version), DELTA_TIMESTAMP_KEY: str(timestamp), REBUILD_KEY: reason}
    commit_snapshot(work, operation, dfs, set(), extra, timestamp, added_deletes=deletes, rebuild=True)


def _position_deletes(work: ExportWork, delta: DeltaSnapshot, adds: pa.Table, dfs: list[DataFile]) -> list[DataFile]:
    """The position delete files of the ``adds`` (as Iceberg data files ``dfs``) with a deletion vector."""
    if adds.num_rows == 0 or adds.column("deletion_vector").null_count == adds.num_rows:
        return []
    vectors = delta.read_context().deleted_rows(adds, store=delta.store)
    return position_delete_files(work.io, adds, dfs, vectors)


def _version_timestamp(delta: DeltaSnapshot) -> int:
    listing = list_log(delta.store, delta.version)
    found = commit_file(delta.store, listing, delta.version)
    if found is None:
        return int(time.time() * 1000)
    return read_commits(delta.store, [found])[0].timestamp


def _export_commits(work: ExportWork, delta: DeltaSnapshot, last: int) -> None:
    store = delta.store
    listing = list_log(store, last + 1)
    files = [commit_file(store, listing, v) for v in range(last + 1, delta.version + 1)]
    commits = read_commits(store, [f for f in files if f is not None], columnar=True)
    parsed = [_commit_files(c) for c in commits]
    # The metadata in force before the first commit: the latest one unless a commit changes it.
    if any(m is not None for _, _, m in parsed):
        current: Metadata = _snapshot_at(delta, last).metadata
    else:
        current = delta.metadata
    _sync_schema(work, current)
    for commit, (adds, removes, new_meta) in zip(commits, parsed):
        if new_meta is not None:
            current = new_meta
            _sync_schema(work, current)
        _export_commit(work, delta, commit, adds, removes, current)


def _snapshot_at(delta: DeltaSnapshot, version: int) -> DeltaSnapshot:
    return Table.from_location(delta.location).snapshot(version)


def _export_commit(work: ExportWork, delta: DeltaSnapshot, commit: Commit, adds: pa.Table, removes: pa.Table, metadata: Metadata) -> None:
    if adds.num_rows == 0 and removes.num_rows == 0:
        return
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
    deletes = _position_deletes(work, delta, added, dfs)
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
    commit_snapshot(work, operation, dfs, removed, extra, timestamp, added_deletes=deletes)


def _sync_schema(work: ExportWork, delta: Metadata) -> None:
    work.apply(schema_updates(work.metadata, delta))
