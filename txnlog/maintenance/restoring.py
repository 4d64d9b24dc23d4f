"""RESTORE: bring a table back to an earlier version with a new commit that re-adds the files
that version had and removes the ones it did not (Delta's RESTORE, with its operation metrics).

Every re-added file (and its deletion vector file) must still exist; otherwise nothing is
committed and the error names the missing ones. The metadata (schema, partitioning, properties)
of the target version is restored too; the protocol is never downgraded. On a table with change
data feed it writes no change files (as delta-spark): its removes and adds are its changes.
"""

from __future__ import annotations

import datetime as _dt
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.documents import document
from txnlog.errors import InvalidArgumentError, MissingFilesError, ObjectNotFoundError
from txnlog.maintenance import arguments, core
from txnlog.maintenance.deletes import DEFAULT_WORKERS, Progress

if TYPE_CHECKING:
    from txnlog import Table


@dataclass(frozen=True)
class RestoreResult:
    table_uri: str
    #: The RESTORE commit.
    version: int
    restored_version: int
    num_restored_files: int
    num_removed_files: int
    restored_bytes: int
    removed_bytes: int
    num_files_after: int
    bytes_after: int

    def to_dict(self) -> dict[str, Any]:
        # delta-spark's RESTORE metric names
        keys = {
            "table_uri": "table",
            "restored_bytes": "restoredFilesSize",
            "removed_bytes": "removedFilesSize",
            "num_files_after": "numOfFilesAfterRestore",
            "bytes_after": "tableSizeAfterRestore",
        }
        return document(self, keys=keys)


def _missing(table: Table, paths: list[str], progress: Progress | None) -> list[str]:
    def absent(path: str) -> bool:
        try:
            table.store.info(path)
        except ObjectNotFoundError:
            return True
        return False

    missing: list[str] = []
    with ThreadPoolExecutor(DEFAULT_WORKERS) as pool:
        for i, (path, gone) in enumerate(zip(paths, pool.map(absent, paths)), 1):
            if gone:
                missing.append(path)
            if progress and (i % 1000 == 0 or i == len(paths)):
                progress("checking files", i, len(paths))
    return missing


def _size(files: pa.Table) -> int:
    return int(pc.sum(files.column("size")).as_py() or 0)


@arguments.takes_table
@core.named_operation("restore")
def restore(
    table: Table,
    *,
    version: int | None = None,
    timestamp: int | float | str | _dt.datetime | None = None,
    progress: Progress | None = None,
) -> RestoreResult:
    """Commit a RESTORE of ``table`` to ``version`` or to the version current at ``timestamp``.

    MissingFilesError (nothing committed) if a file to re-add is gone; UnsafePathError if a file
    of either version lies outside the table root; a CommitConflictError if a concurrent commit
    changed the table meanwhile."""
    if (version is None) == (timestamp is None):
        raise InvalidArgumentError("restore needs a version or a timestamp (exactly one)")
    arguments.optional_integer("version", version, minimum=0)
    target = table.snapshot(version, timestamp)
    parameters: dict[str, Any] = {"version": target.version} if timestamp is None else {"timestamp": str(timestamp)}
    with table.transaction("RESTORE", operation_parameters=parameters) as txn:
        current = txn.read_whole_table()
        wanted = target.files()
        current_keys, wanted_keys = core.file_keys(current), core.file_keys(wanted)
        to_add = wanted.filter(pc.invert(pc.is_in(wanted_keys, value_set=current_keys)))
        to_remove = current.filter(pc.invert(pc.is_in(current_keys, value_set=wanted_keys)))
        paths = core.referenced_paths(table.uri, to_add, version=target.version)
        core.referenced_paths(table.uri, to_remove, version=txn.read_version)
        missing = _missing(table, paths, progress)
        if missing:
            shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            raise MissingFilesError(
                f"cannot restore {table.uri} to version {target.version}: {len(missing)} file(s) it needs no longer "
                f"exist (vacuumed?): {shown}",
                paths=tuple(missing),
                version=target.version,
            )
        if target.metadata != txn.metadata:
            meta = target.metadata
            txn.update_metadata(
                schema=meta.schema_string,
                partition_columns=meta.partition_columns,
                configuration=dict(meta.configuration),
                name=meta.name,
                description=meta.description,
                replace_table=True,  # the restored version's files were all written for its metadata
            )
        # Whole files move and no row is rewritten: read without cdc files, the commit's removes
        # are its deleted rows and its adds its inserted ones, which is what RESTORE changed.
        txn.file_actions_are_the_changes()
        txn.remove_files(to_remove)
        txn.add_files(to_add)
        txn.set_operation_metrics(
            tableSizeAfterRestore=_size(wanted),
            numOfFilesAfterRestore=wanted.num_rows,
            numRemovedFiles=to_remove.num_rows,
            numRestoredFiles=to_add.num_rows,
            removedFilesSize=_size(to_remove),
            restoredFilesSize=_size(to_add),
        )
    assert txn.result is not None
    return RestoreResult(
        table.uri,
        int(txn.result),
        target.version,
        to_add.num_rows,
        to_remove.num_rows,
        _size(to_add),
        _size(to_remove),
        wanted.num_rows,
        _size(wanted),
    )
