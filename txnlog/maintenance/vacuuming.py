"""VACUUM: delete data files that no retained version and no tagged version references, and
that are older than the retention horizon (``delta.deletedFileRetentionDuration``, 7 days).

Two kinds go: tombstones past the horizon, and orphans of aborted writes (files under the table
root the log never named). A file counts as referenced if it is live at any version the log can
still reconstruct (the earliest one's files, plus every file a later commit added) or at a tagged
version, or if it was removed less than the retention ago. A change data file (``_change_data/``)
counts as referenced while the commit naming it is in the log, its changes still readable. Only
files below the table root are ever considered; hidden paths (``_delta_log/``, ``_txnlog/``, any
``_``/``.`` name that is not a partition directory, ``_change_data/`` excepted) and the Iceberg
``metadata/`` directory never are. A log entry naming a path outside the root makes vacuum
refuse before it deletes anything.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from txnlog import properties as props
from txnlog.errors import CorruptCheckpointError, ObjectNotFoundError, RetentionCheckError, TxnLogError, VersionNotFoundError
from txnlog.maintenance import arguments, core, tags
from txnlog.maintenance.deletes import Progress, delete_paths
from txnlog.maintenance.layout import LogLayout
from txnlog.write import CHANGE_DATA_DIR

if TYPE_CHECKING:
    from txnlog import Table

_NEVER_TOP = frozenset({"metadata"})
#: Reads of the referenced files that a concurrent expiry may cut short before vacuum gives up.
_PROTECTED_ATTEMPTS = 5

# Temporary files of writes a crash interrupted: txnlog's local store (".<name>.<hex>.tmp") and
# delta-rs ("_commit_<uuid>.json.tmp"). A temp file lives for milliseconds, so one older than the
# retention is abandoned, wherever it is (``_delta_log/`` included).
_TEMP_FILE = re.compile(r"^(\..+\.[0-9a-f]{32}\.tmp|_commit_[0-9a-f-]{36}\.json\.tmp)$")


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table_uri,
            "dryRun": self.dry_run,
            "retentionMillis": self.retention_ms,
            "numFiles": len(self.files),
            "sizeInBytes": self.bytes,
            "files": list(self.files),
            "startVersion": self.start_version,
            "endVersion": self.end_version,
        }


def _hidden(path: str, partition_columns: frozenset[str]) -> bool:
    parts = path.split("/")
    if len(parts) > 1 and parts[0] in _NEVER_TOP:
        return True
    for i, part in enumerate(parts):
        if i == 0 and part == CHANGE_DATA_DIR and len(parts) > 1:
            continue  # change data files are vacuumed like data files, as Delta does
        if part.startswith(("_", ".")):
            is_partition_dir = i < len(parts) - 1 and "=" in part and part.split("=", 1)[0] in partition_columns
            if not is_partition_dir:
                return True
    return False


def _protected(table: Table, *, horizon: int, progress: Progress | None) -> tuple[set[str], frozenset[str]]:
    """Every store path some retained or tagged version references, plus tombstones younger than
    ``horizon``; and the partition columns. UnsafePathError if any log path leaves the root."""
    uri = table.uri
    snapshot = table.snapshot()
    layout = LogLayout.of(table.store)
    earliest = layout.earliest
    protected = set(core.referenced_paths(uri, snapshot.files(stats=False), version=snapshot.version))
    if earliest in layout.listing.commits:  # its change data is still readable
        protected.update(core.change_data_paths(uri, core.read_commit_files(table.store, [layout.listing.commits[earliest]])))
    if earliest < snapshot.version:
        protected.update(core.referenced_paths(uri, table.snapshot(earliest).files(stats=False), version=earliest))
        versions = range(earliest + 1, snapshot.version + 1)
        for start in range(0, len(versions), 1000):  # bounded batches of commit files in memory
            batch = [layout.listing.commits[v] for v in versions[start : start + 1000]]
            for commit in core.read_commit_files(table.store, batch):
                protected.update(core.referenced_paths(uri, core.added_files([commit]), version=commit.version))
                protected.update(core.change_data_paths(uri, [commit]))
            if progress:
                progress("reading the log", min(start + 1000, len(versions)), len(versions))
    for tag in tags.list_tags(table):
        if tag.version not in (snapshot.version, earliest):
            protected.update(core.referenced_paths(uri, table.snapshot(tag.version).files(stats=False), version=tag.version))
    tombstones = snapshot.tombstones()
    core.referenced_paths(uri, tombstones)  # refuse on any escaping path, even an expired one
    if tombstones.num_rows:
        deleted_at = pc.fill_null(tombstones.column("deletion_timestamp"), 0)
        protected.update(core.referenced_paths(uri, tombstones.filter(pc.greater_equal(deleted_at, horizon))))
    return protected, frozenset(snapshot.partition_columns)


@arguments.takes_table
@core.named_operation("vacuum")
def vacuum(
    table: Table,
    *,
    retention: int | str | None = None,
    dry_run: bool = False,
    force: bool = False,
    now_ms: int | None = None,
    max_workers: int | None = None,
    progress: Progress | None = None,
) -> VacuumResult:
    """Delete unreferenced data files older than ``retention`` (ms or text like ``168h``; default
    ``delta.deletedFileRetentionDuration``). A retention below that property is refused
    (RetentionCheckError) unless ``force``. Not a dry run: records VACUUM START and VACUUM END
    commits around the deletes, as Delta does."""
    retention_ms = arguments.duration_ms("retention", retention)
    arguments.optional_integer("max_workers", max_workers, minimum=1)
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
    for attempt in range(_PROTECTED_ATTEMPTS):
        try:
            protected, partition_columns = _protected(table, horizon=horizon, progress=progress)
            break
        except (VersionNotFoundError, ObjectNotFoundError, CorruptCheckpointError) as e:
            # A concurrent log expiry removed versions while they were read: what they alone
            # referenced is no longer protected anyway, so read the log as it is now.
            if attempt == _PROTECTED_ATTEMPTS - 1 or (isinstance(e, CorruptCheckpointError) and not e.vanished):
                raise

    doomed: list[str] = []
    size = 0
    for info in table.store.walk_files(""):
        if _TEMP_FILE.match(info.name) and info.modification_time < horizon:
            doomed.append(info.path)
            size += info.size
            continue
        if _hidden(info.path, partition_columns):
            continue
        path = core.locate(table.uri, info.path)
        if path in protected or info.modification_time >= horizon:
            continue
        doomed.append(path)
        size += info.size
    doomed.sort()
    if dry_run:
        return VacuumResult(table.uri, tuple(doomed), size, retention_ms, True)

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
    return VacuumResult(table.uri, tuple(doomed), size, retention_ms, False, int(start) if start is not None else None, int(end_txn.result) if end_txn.result is not None else None)


def _human(ms: int) -> str:
    if ms == 0:
        return "0s"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
