"""VACUUM: delete data files that nothing keeps, once they are older than the retention horizon
(``delta.deletedFileRetentionDuration``, 7 days).

Two rules say what keeps a file:

- ``"versions"`` (txnlog's default): being live at any version the log can still reconstruct
  (the earliest one's files, plus every file a later commit added), so time travel within the
  retained log never breaks; a change data file (``_change_data/``) while the commit naming it is
  in the log, its changes still readable.
- ``"delta"`` (Delta's, as delta-spark and delta-rs apply it): being live at the latest version.
  A file removed longer ago than the retention goes even if older versions in the log still
  read it: time travel to those versions then fails.

Under both, a file stays while it is live at a tagged version, while it was removed less than
the retention ago, and while it was written less than the retention ago (a write in flight).
Everything else goes: old tombstones, and orphans of aborted writes (files under the table root
the log never named). Only files below the table root are ever considered; hidden paths
(``_delta_log/``, ``_txnlog/``, any ``_``/``.`` name that is not a partition directory,
``_change_data/`` and the ``_temporary/`` of an engine's job directory, at the root or in
``_change_data/``, excepted) and the Iceberg ``metadata/`` directory never are. A log entry naming
a path outside the root makes vacuum refuse before it deletes anything.

Every file considered that is not live at the latest version gets a :class:`VacuumDecision`:
deleted or kept, and why.
"""

from __future__ import annotations

import datetime as _dt
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from txnlog import properties as props
from txnlog.documents import document
from txnlog.errors import (
    CorruptCheckpointError,
    InvalidArgumentError,
    ObjectNotFoundError,
    RetentionCheckError,
    TxnLogError,
    VersionNotFoundError,
)
from txnlog.maintenance import arguments, core, tags
from txnlog.maintenance.deletes import Progress, delete_paths
from txnlog.maintenance.layout import LogLayout
from txnlog.write import CHANGE_DATA_DIR, OUTPUT_DIRECTORY

if TYPE_CHECKING:
    from txnlog import Table

_NEVER_TOP = frozenset({"metadata"})
#: Reads of the referenced files that a concurrent expiry may cut short before vacuum gives up.
_PROTECTED_ATTEMPTS = 5

# Temporary files of writes a crash interrupted: txnlog's local store (".<name>.<hex>.tmp") and
# delta-rs ("_commit_<uuid>.json.tmp"). A temp file lives for milliseconds, so one older than the
# retention is abandoned, wherever it is (``_delta_log/`` included).
_TEMP_FILE = re.compile(r"^(\..+\.[0-9a-f]{32}\.tmp|_commit_[0-9a-f-]{36}\.json\.tmp)$")


#: Which files vacuum keeps: see the module's docstring.
RULES = ("versions", "delta")

# Why a file is kept or deleted (VacuumDecision.reason).
LIVE = "live"  # live at the latest version: not a candidate, only counted
TAGGED = "tagged"
RETAINED_VERSION = "retained-version"
CHANGE_DATA_IN_LOG = "change-data-in-log"
REMOVED_RECENTLY = "removed-recently"
WRITTEN_RECENTLY = "written-recently"
REMOVED_LONG_AGO = "removed-long-ago"
UNREFERENCED = "unreferenced"
TEMPORARY_FILE = "temporary-file"


@dataclass(frozen=True, slots=True)
class VacuumDecision:
    """What vacuum does with one file that is not live at the latest version, and why."""

    #: The file, relative to the table root.
    path: str
    delete: bool
    #: One of the reason constants of this module ("retained-version", "removed-long-ago"...).
    reason: str
    #: The reason in words, with the times and versions behind it.
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "action": "delete" if self.delete else "keep", "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True)
class VacuumResult:
    table_uri: str
    #: Files deleted (or, in a dry run, to delete), relative to the table root.
    files: tuple[str, ...]
    #: Their total size in bytes.
    bytes: int
    retention_ms: int
    dry_run: bool
    #: The VACUUM START and VACUUM END versions (None in a dry run).
    start_version: int | None = None
    end_version: int | None = None
    #: The rule that decided ("versions" or "delta").
    rule: str = "versions"
    #: Files kept because they are live at the latest version (not listed in ``decisions``).
    num_live_files: int = 0
    #: Every other file considered, deleted or kept, and why; sorted by path.
    decisions: tuple[VacuumDecision, ...] = ()

    @property
    def kept(self) -> tuple[VacuumDecision, ...]:
        """The decisions to keep a file that is not live at the latest version."""
        return tuple(d for d in self.decisions if not d.delete)

    def to_dict(self) -> dict[str, Any]:
        keys = {"table_uri": "table", "bytes": "sizeInBytes", "retention_ms": "retentionMillis"}
        return document(self, keys=keys, extra={"numFiles": len(self.files)})


def _hidden(path: str, partition_columns: frozenset[str]) -> bool:
    parts = path.split("/")
    if len(parts) > 1 and parts[0] in _NEVER_TOP:
        return True
    job = 1 if parts[0] == CHANGE_DATA_DIR else 0  # where an engine's job directory would be: the root's or _change_data's
    for i, part in enumerate(parts):
        if i == 0 and part == CHANGE_DATA_DIR and len(parts) > 1:
            continue  # change data files are vacuumed like data files, as Delta does
        if part == "_temporary" and i > job and OUTPUT_DIRECTORY.match(parts[job]):
            continue  # an engine's output committer staged a job's files here: vacuumed as orphans when the job died
        if part.startswith(("_", ".")):
            is_partition_dir = i < len(parts) - 1 and "=" in part and part.split("=", 1)[0] in partition_columns
            if not is_partition_dir:
                return True
    return False


@dataclass
class _Keepers:
    """Why each store path that something keeps is kept (reason, detail), the first reason found
    winning; and when each tombstoned path was removed."""

    reasons: dict[str, tuple[str, str]]
    removed_at: dict[str, int]
    partition_columns: frozenset[str]

    def keep(self, paths: Iterable[str], reason: str, detail: str) -> None:
        why = (reason, detail)  # one tuple shared by every path it keeps
        for path in paths:
            self.reasons.setdefault(path, why)


def _keepers(table: Table, *, rule: str, horizon: int, retention: str, progress: Progress | None) -> _Keepers:
    """What ``rule`` keeps, before file ages are looked at. UnsafePathError if any log path
    leaves the root."""
    uri = table.uri
    snapshot = table.snapshot()
    keepers = _Keepers({}, {}, frozenset(snapshot.partition_columns))
    keepers.keep(core.referenced_paths(uri, snapshot.files(stats=False), version=snapshot.version), LIVE, f"live at version {snapshot.version}")
    for tag in tags.list_tags(table):
        if tag.version != snapshot.version:
            files = table.snapshot(tag.version).files(stats=False)
            keepers.keep(core.referenced_paths(uri, files, version=tag.version), TAGGED, f"live at version {tag.version}, tagged {tag.name!r}")
    if rule == "versions":
        _keep_retained_versions(table, snapshot.version, keepers, progress)
    tombstones = snapshot.tombstones()
    # Every path, even an expired tombstone's: an escaping one makes vacuum refuse.
    tombstoned = core.referenced_path_rows(uri, tombstones)
    if tombstoned:
        deleted_at = pc.fill_null(tombstones.column("deletion_timestamp"), 0).to_pylist()
        for i, path in tombstoned:
            keepers.removed_at[path] = max(deleted_at[i], keepers.removed_at.get(path, 0))
        for path, removed in keepers.removed_at.items():
            if removed >= horizon:
                keepers.keep([path], REMOVED_RECENTLY, f"removed {_iso(removed)}, less than {retention} ago")
    return keepers


def _keep_retained_versions(table: Table, latest: int, keepers: _Keepers, progress: Progress | None) -> None:
    """The "versions" rule: every file live at a version the log can still reconstruct, and the
    change data of every commit still in the log."""
    uri = table.uri
    layout = LogLayout.of(table.store)
    earliest = layout.earliest
    if earliest < latest:
        files = table.snapshot(earliest).files(stats=False)
        keepers.keep(core.referenced_paths(uri, files, version=earliest), RETAINED_VERSION,
                     f"live at version {earliest}, still in the log (time travel reads it)")
    if earliest in layout.listing.commits:  # its change data is still readable
        commits = core.read_commit_files(table.store, [layout.listing.commits[earliest]])
        keepers.keep(core.change_data_paths(uri, commits), CHANGE_DATA_IN_LOG, f"change data of version {earliest}, still in the log")
    versions = range(earliest + 1, latest + 1)
    for start in range(0, len(versions), 1000):  # bounded batches of commit files in memory
        batch = [layout.listing.commits[v] for v in versions[start : start + 1000]]
        for commit in core.read_commit_files(table.store, batch):
            keepers.keep(core.referenced_paths(uri, core.added_files([commit]), version=commit.version), RETAINED_VERSION,
                         f"added at version {commit.version}, still in the log (time travel reads it)")
            keepers.keep(core.change_data_paths(uri, [commit]), CHANGE_DATA_IN_LOG, f"change data of version {commit.version}, still in the log")
        if progress:
            progress("reading the log", min(start + 1000, len(versions)), len(versions))


@arguments.takes_table
@core.named_operation("vacuum")
def vacuum(
    table: Table,
    *,
    retention: int | str | None = None,
    dry_run: bool = False,
    force: bool = False,
    rule: str = "versions",
    now_ms: int | None = None,
    max_workers: int | None = None,
    progress: Progress | None = None,
) -> VacuumResult:
    """Delete the data files nothing keeps that are older than ``retention`` (ms or text like
    ``168h``; default ``delta.deletedFileRetentionDuration``). ``rule``: "versions" keeps every
    file a version still in the log reads, "delta" only what the latest version reads (see the
    module's docstring). A retention below that property is refused (RetentionCheckError) unless
    ``force``. Not a dry run: records VACUUM START and VACUUM END commits around the deletes, as
    Delta does. The result's ``decisions`` say, for every file not live at the latest version,
    whether it goes and why."""
    retention_ms = arguments.duration_ms("retention", retention)
    arguments.optional_integer("max_workers", max_workers, minimum=1)
    if rule not in RULES:
        raise InvalidArgumentError(f"rule must be one of {', '.join(map(repr, RULES))}, got {rule!r}")
    now = int(time.time() * 1000) if now_ms is None else arguments.integer("now_ms", now_ms)
    configuration = table.snapshot().configuration
    minimum = props.DELETED_FILE_RETENTION.get(configuration)
    retention_ms = minimum if retention_ms is None else retention_ms
    if retention_ms < 0:
        raise RetentionCheckError(f"retention must be >= 0, got {retention_ms} ms", retention_ms=retention_ms, minimum_ms=minimum)
    if retention_ms < minimum and not force:
        raise RetentionCheckError(
            f"refusing to vacuum {table.uri} with a retention of {_human(retention_ms)}: below the table's "
            f"{props.DELETED_FILE_RETENTION.key} of {_human(minimum)}, files that readers or writers still "
            "use could be deleted; pass force=True (--force) if nothing reads or writes the table",
            retention_ms=retention_ms,
            minimum_ms=minimum,
        )
    horizon = now - retention_ms
    retention_text = _human(retention_ms)
    for attempt in range(_PROTECTED_ATTEMPTS):
        try:
            keepers = _keepers(table, rule=rule, horizon=horizon, retention=retention_text, progress=progress)
            break
        except (VersionNotFoundError, ObjectNotFoundError, CorruptCheckpointError) as e:
            # A concurrent log expiry removed versions while they were read: what they alone
            # referenced is no longer protected anyway, so read the log as it is now.
            if attempt == _PROTECTED_ATTEMPTS - 1 or (isinstance(e, CorruptCheckpointError) and not e.vanished):
                raise

    doomed: list[str] = []
    decisions: list[VacuumDecision] = []
    live = 0
    size = 0
    for info in table.store.walk_files(""):
        if _TEMP_FILE.match(info.name) and info.modification_time < horizon:
            decisions.append(VacuumDecision(info.path, True, TEMPORARY_FILE, f"an interrupted write's temporary file, written {_iso(info.modification_time)}"))
            doomed.append(info.path)
            size += info.size
            continue
        if _hidden(info.path, keepers.partition_columns):
            continue
        path = core.locate(table.uri, info.path)
        kept = keepers.reasons.get(path)
        if kept is not None and kept[0] == LIVE:
            live += 1
            continue
        if kept is not None:
            decisions.append(VacuumDecision(path, False, *kept))
            continue
        if info.modification_time >= horizon:
            decisions.append(VacuumDecision(path, False, WRITTEN_RECENTLY, f"written {_iso(info.modification_time)}, less than {retention_text} ago"))
            continue
        decisions.append(_deletion(path, keepers, info.modification_time, rule, retention_text))
        doomed.append(path)
        size += info.size
    doomed.sort()
    decisions.sort(key=lambda d: d.path)

    def result(start: int | None, end: int | None) -> VacuumResult:
        return VacuumResult(table.uri, tuple(doomed), size, retention_ms, dry_run, start, end, rule, live, tuple(decisions))

    if dry_run:
        return result(None, None)

    parameters = {"retentionCheckEnabled": not force, "specifiedRetentionMillis": retention_ms, "defaultRetentionMillis": minimum}
    with table.transaction("VACUUM START", operation_parameters=parameters) as txn:
        txn.set_operation_metrics(numFilesToDelete=len(doomed), sizeOfDataToDelete=size)
    start = txn.result
    try:
        deleted = delete_paths(table.store, doomed, stage="deleting files", max_workers=max_workers, progress=progress)
    except TxnLogError:
        with table.transaction("VACUUM END", operation_parameters={"status": "FAILED"}) as end_txn:
            pass
        raise
    with table.transaction("VACUUM END", operation_parameters={"status": "COMPLETED"}) as end_txn:
        end_txn.set_operation_metrics(numDeletedFiles=deleted, numVacuumedDirectories=0)
    return result(int(start) if start is not None else None, int(end_txn.result) if end_txn.result is not None else None)


def _deletion(path: str, keepers: _Keepers, written: int, rule: str, retention: str) -> VacuumDecision:
    """Why ``path``, which nothing keeps and which is older than the retention, goes."""
    removed = keepers.removed_at.get(path)
    if removed is not None:
        detail = f"removed {_iso(removed)}, more than {retention} ago"
        if rule == "delta":
            detail += "; versions before its removal can no longer be read"
        return VacuumDecision(path, True, REMOVED_LONG_AGO, detail)
    if path.startswith(CHANGE_DATA_DIR + "/"):
        named = "no commit still in the log names it" if rule == "versions" else "change data is kept only for the retention"
        return VacuumDecision(path, True, UNREFERENCED, f"change data written {_iso(written)}; {named}")
    return VacuumDecision(
        path, True, UNREFERENCED,
        f"written {_iso(written)} and named by no version {'still in the log' if rule == 'versions' else 'kept'} "
        "(an aborted write's file, or one whose versions expired)",
    )


def _iso(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _human(ms: int) -> str:
    if ms == 0:
        return "0s"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
