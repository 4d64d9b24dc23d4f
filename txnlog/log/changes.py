"""What each commit did to the table's rows, classified once for every reader of changes: the
change data feed (``txnlog.read.changes``, ``txnlog.spark.changes``), the streaming source and
the rule that diffs deletion vectors.

The protocol's rule, per version: a version with ``cdc`` actions has its changes in those files
exclusively (each row with its ``_change_type``); a version without them has its ``add``
actions (``dataChange`` true) as inserts and its ``remove`` actions as deletes. A file removed
and re-added in the same version with another deletion vector (a DELETE that only marked rows)
changed only in the rows where the two vectors differ: rows the new vector adds were deleted,
rows it no longer has were restored (inserted), as delta-spark reads them.

:func:`classify_commit` sorts one commit's actions by that rule; reading the rows is the
reader's job (``txnlog.read.changes``), this module only reads the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from txnlog import properties as props
from txnlog.errors import (
    ChangeDataNotRecordedError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    TableNotFoundError,
    VersionNotFoundError,
)
from txnlog.log.actions import Metadata
from txnlog.log.codec import decode_action
from txnlog.log.commits import Commit, read_commits
from txnlog.log.file_actions import table_from_log_dicts
from txnlog.log.filenames import LOG_DIR
from txnlog.log.history import commit_timestamps, first_at_or_after, last_at_or_before
from txnlog.log.replay import replay
from txnlog.log.segment import LogListing, list_log, segment_from_listing
from txnlog.storage.base import LogStore


@dataclass(frozen=True)
class VersionChanges:
    """One commit, classified by what it did to the table's rows. Every table is in the
    ``Snapshot.files()`` layout. The file fields describe the commit's data-change file actions
    whether or not it has cdc files; when it has them, they alone hold the change feed's rows
    (:attr:`has_change_files`)."""

    version: int
    #: Commit time, ms since the epoch: the in-commit timestamp when enabled, else the commit
    #: file's modification time (made monotonic, as ``Table.history`` reports it).
    timestamp: int
    #: The version's ``cdc`` files.
    change_files: pa.Table
    #: Added files whose live rows were inserted.
    inserted: pa.Table
    #: Removed files whose rows (live at removal, under the remove's deletion vector) were deleted.
    deleted: pa.Table
    #: A file removed and re-added with another deletion vector: the removes and the adds,
    #: aligned row by row.
    vector_removed: pa.Table
    vector_added: pa.Table
    #: The commit's operation (``commitInfo.operation``), when recorded.
    operation: str | None = None
    #: The commit's ``metaData`` action: a schema, partitioning or property change.
    metadata: Metadata | None = None

    @classmethod
    def inserts(cls, version: int, timestamp: int, files: pa.Table) -> VersionChanges:
        """``files``' live rows as inserts at ``version``: how a stream of changes starts from a
        snapshot, as delta-spark's does."""
        empty = table_from_log_dicts([], "add")
        return cls(version, timestamp, empty, files, empty, empty, empty)

    @property
    def has_change_files(self) -> bool:
        """The version recorded its changes in cdc files: the change feed reads only those."""
        return bool(self.change_files.num_rows)

    @property
    def removes_data(self) -> bool:
        """The version removed or changed existing rows (a stream of appends cannot carry it)."""
        return bool(self.deleted.num_rows or self.vector_removed.num_rows)

    @property
    def removed_files(self) -> int:
        """How many data-change ``remove`` actions the version has."""
        return int(self.deleted.num_rows + self.vector_removed.num_rows)

    def feed_files(self) -> list[pa.Table]:
        """The files the change feed reads for this version."""
        if self.has_change_files:
            return [self.change_files]
        return [self.deleted, self.vector_added, self.inserted]

    @property
    def is_empty(self) -> bool:
        """The change feed has no rows for this version (file actions with ``dataChange=false``
        only, or none)."""
        return not any(t.num_rows for t in self.feed_files())


def classify_commit(commit: Commit, timestamp: int) -> VersionChanges:
    """``commit``'s actions (parsed row by row, as :func:`read_commits` gives them) by what they
    did to the rows; ``timestamp`` is its commit time."""
    if commit.columnar is not None:
        raise InvalidArgumentError(f"version {commit.version}: classify_commit needs the commit's actions row by row, not column-wise")
    metadata = None
    for obj in commit.actions:
        if "metaData" in obj:
            decoded = decode_action("metaData", obj["metaData"], path=commit.path, version=commit.version)
            assert isinstance(decoded, Metadata)
            metadata = decoded
    info = commit.commit_info()
    adds = [b for b in _bodies(commit, "add") if b.get("dataChange", True) is not False]
    removes = [b for b in _bodies(commit, "remove") if b.get("dataChange", True) is not False]
    re_added = {b.get("path"): b for b in adds}
    pairs = [(r, re_added[r.get("path")]) for r in removes if r.get("path") in re_added]
    paired = {r.get("path") for r, _ in pairs}
    return VersionChanges(
        commit.version,
        timestamp,
        table_from_log_dicts(_bodies(commit, "cdc"), "add"),
        table_from_log_dicts([b for b in adds if b.get("path") not in paired], "add"),
        # The remove layout lacks nothing a read needs; the add layout is what readers take.
        table_from_log_dicts([b for b in removes if b.get("path") not in paired], "add"),
        table_from_log_dicts([r for r, _ in pairs], "add"),
        table_from_log_dicts([a for _, a in pairs], "add"),
        operation=info.operation if info is not None else None,
        metadata=metadata,
    )


def expired_error(store: LogStore, version: int, earliest: int | None) -> VersionNotFoundError:
    kept = f"the earliest commit still in the log is version {earliest}" if earliest is not None else "the log holds no commits"
    return VersionNotFoundError(
        f"cannot read the changes of version {version} of {store.root_uri}: its commit file is gone (expired; "
        f"{kept}); keep commits longer by raising the table property {props.LOG_RETENTION.key}",
        version=version,
    )


def changes_in_range(
    store: LogStore,
    starting_version: int | None = None,
    ending_version: int | None = None,
    *,
    starting_timestamp: int | None = None,
    ending_timestamp: int | None = None,
) -> list[VersionChanges]:
    """The changes of the versions from ``starting_version`` (or the first commit at or after
    ``starting_timestamp``, ms) to ``ending_version`` (or the last commit at or before
    ``ending_timestamp``; else the latest), as delta-spark bounds them: an ending version past the
    latest reads to the latest; a starting version past it is an error; timestamps that enclose
    no commit give no changes."""
    if (starting_version is None) == (starting_timestamp is None):
        raise InvalidArgumentError("changes need a starting_version or a starting_timestamp (exactly one)")
    if ending_version is not None and ending_timestamp is not None:
        raise InvalidArgumentError("pass ending_version or ending_timestamp, not both")
    for name, value in (("starting_version", starting_version), ("ending_version", ending_version)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidArgumentTypeError(f"{name} must be an int, got {type(value).__name__}")
        if value is not None and value < 0:
            raise InvalidArgumentError(f"{name} must be >= 0, got {value}")
    listing = list_log(store)
    latest = listing.latest_version()
    if latest is None:
        raise TableNotFoundError(f"no Delta table at {store.root_uri}: {LOG_DIR}/ has no commits", uri=store.root_uri)
    stamps: list[tuple[int, int]] | None = None
    if starting_timestamp is not None or ending_timestamp is not None:
        stamps = commit_timestamps(store, listing, {})
        if not stamps:
            raise expired_error(store, latest, None)
    if starting_timestamp is not None:
        assert stamps is not None
        if ending_timestamp is not None and ending_timestamp < starting_timestamp:
            raise InvalidArgumentError(f"ending_timestamp {ending_timestamp} is before starting_timestamp {starting_timestamp}")
        starting_version = first_at_or_after(stamps, starting_timestamp, where=store.root_uri, what="starting_timestamp")
        if starting_version == stamps[0][0] and starting_version > 0 and starting_timestamp < stamps[0][1]:
            raise expired_error(store, starting_version - 1, starting_version)  # changes before it are gone
    assert starting_version is not None
    if starting_version > latest:
        raise VersionNotFoundError(
            f"starting_version {starting_version} of {store.root_uri} is after the latest version {latest}", version=starting_version
        )
    if ending_timestamp is not None:
        assert stamps is not None
        ending_version = last_at_or_before(stamps, ending_timestamp, where=store.root_uri, what="ending_timestamp")
        if ending_version < starting_version:
            return []  # no commit between the two times
    end = latest if ending_version is None else min(ending_version, latest)
    if end < starting_version:
        raise InvalidArgumentError(f"ending_version {ending_version} is before starting_version {starting_version}")
    if starting_version not in listing.commits:
        raise expired_error(store, starting_version, min(listing.commits) if listing.commits else None)
    metadata = replay(store, segment_from_listing(store, listing, starting_version)).metadata
    return version_changes(store, listing, starting_version, end, metadata)


def commit_changes(store: LogStore, listing: LogListing, start: int, end: int) -> list[VersionChanges]:
    """Each commit in ``[start, end]`` (versions of ``listing``), classified. Raises
    VersionNotFoundError naming the first version whose commit file is gone."""
    for v in range(start, end + 1):
        if v not in listing.commits:
            raise expired_error(store, v, min(listing.commits) if listing.commits else None)
    commits: dict[int, Commit] = {}
    stamps = dict(commit_timestamps(store, listing, commits, first=start, last=end))
    missing = [listing.commits[v] for v in range(start, end + 1) if v not in commits]
    commits.update({c.version: c for c in read_commits(store, missing)})
    return [classify_commit(commits[v], stamps[v]) for v in range(start, end + 1)]


def version_changes(
    store: LogStore,
    listing: LogListing,
    start: int,
    end: int,
    metadata: Metadata,
) -> list[VersionChanges]:
    """The changes of each version in ``[start, end]`` (both in ``listing``). ``metadata`` is the
    table's metadata at ``start``. Raises VersionNotFoundError naming the first version whose
    commit file is gone, and ChangeDataNotRecordedError naming the first version at which change
    data was not recorded (delta-spark refuses such ranges too)."""
    out = commit_changes(store, listing, start, end)
    for changes in out:
        metadata = changes.metadata or metadata
        if not props.ENABLE_CHANGE_DATA_FEED.get(metadata.configuration):
            raise ChangeDataNotRecordedError(
                f"change data of {store.root_uri} was not recorded at version {changes.version} ({props.ENABLE_CHANGE_DATA_FEED.key} "
                f"is not true there); the range [{start}, {end}] includes it",
                version=changes.version,
            )
    return out


def _bodies(commit: Commit, kind: str) -> list[Mapping[str, Any]]:
    return [obj[kind] for obj in commit.actions if isinstance(obj.get(kind), Mapping)]


__all__ = ["VersionChanges", "changes_in_range", "classify_commit", "commit_changes", "expired_error", "version_changes"]
