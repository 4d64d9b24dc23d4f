"""What txnlog.maintenance takes from the core, in one module.

Everything maintenance needs from the log, snapshot and checkpoint modules goes through here
(and through the core's declared surfaces), so a change in the core means editing this file.
That includes the one place a path from the log becomes a location (:func:`locate`): nothing is
opened, checked or deleted outside the table root because a log entry says so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from txnlog import storage
from txnlog.errors import operation_context
from txnlog.file_facts import file_keys
from txnlog.log import (
    FILES_SCHEMA,
    LOG_DIR,
    SIDECAR_DIR,
    CheckpointFile,
    CheckpointResult,
    Commit,
    CommitFile,
    DeletionVectorDescriptor,
    LastCheckpointHint,
    LogListing,
    LogSegment,
    TableState,
    advance,
    advance_last_checkpoint,
    commit_file,
    dv_file_path,
    existing_checkpoint,
    list_log,
    parse_lines,
    read_commits,
    read_deletion_vector,
    read_hint,
    replay,
    table_from_log_dicts,
)
from txnlog.storage import LogStore

if TYPE_CHECKING:
    from txnlog import Snapshot, Table

__all__ = [
    "CheckpointFile",
    "CheckpointResult",
    "Commit",
    "CommitFile",
    "LOG_DIR",
    "LastCheckpointHint",
    "LogListing",
    "SIDECAR_DIR",
    "TableState",
    "added_files",
    "checkpoint_state",
    "commit_file",
    "deleted_rows",
    "dv_file_path",
    "file_keys",
    "json_state",
    "list_log",
    "locate",
    "point_hint_at",
    "read_commits",
    "read_hint",
    "state_of",
    "write_checkpoint",
]

def locate(table_uri: str, path: str, *, version: int | None = None) -> str:
    """The store path (relative to the table root, not URI-encoded) of a file the log names, or
    UnsafePathError if it lies outside the root. Maintenance never follows a path out of the
    table, even for tables opened with ``allow_absolute_paths``: it deletes and re-adds files."""
    location = storage.locate(table_uri, path, version=version)
    assert location.relative is not None  # without the opt-in, locate only answers inside the root
    return location.relative


_P = ParamSpec("_P")
_R = TypeVar("_R")


def named_operation(name: str) -> Callable[[Callable[Concatenate[Table, _P], _R]], Callable[Concatenate[Table, _P], _R]]:
    """Errors of the decorated maintenance call name ``name`` and the table (see
    :func:`txnlog.errors.operation_context`)."""

    def decorate(fn: Callable[Concatenate[Table, _P], _R]) -> Callable[Concatenate[Table, _P], _R]:
        @functools.wraps(fn)
        def run(table: Table, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            with operation_context(name, table.uri):
                return fn(table, *args, **kwargs)

        return run

    return decorate


def referenced_paths(table_uri: str, files: pa.Table, *, version: int | None = None) -> list[str]:
    """Store paths of the data files and deletion-vector files that rows of ``files``
    (``Snapshot.files()`` or ``tombstones()`` layout) name; UnsafePathError for any escape."""
    return [path for _, path in referenced_path_rows(table_uri, files, version=version)]


def referenced_path_rows(table_uri: str, files: pa.Table, *, version: int | None = None) -> list[tuple[int, str]]:
    """(row of ``files``, store path) of each data file and deletion-vector file the rows name."""
    out = [(i, locate(table_uri, p, version=version)) for i, p in enumerate(files.column("path").to_pylist())]
    dv = files.column("deletion_vector").combine_chunks()
    if dv.null_count < len(dv):
        rows = pc.indices_nonzero(dv.is_valid()).to_pylist()
        valid = dv.filter(dv.is_valid())
        for i, storage, inline in zip(rows, valid.field("storage_type").to_pylist(), valid.field("path_or_inline_dv").to_pylist()):
            dv_path = dv_file_path(storage, inline)
            if dv_path is not None:
                out.append((i, locate(table_uri, dv_path, version=version)))
    return out


def change_data_paths(table_uri: str, commits: Iterable[Commit]) -> list[str]:
    """Store paths of the change data files (``cdc`` actions) ``commits`` name; UnsafePathError
    for any escape."""
    return [
        locate(table_uri, obj["cdc"]["path"], version=commit.version)
        for commit in commits
        for obj in commit.actions
        if isinstance(obj.get("cdc"), Mapping) and isinstance(obj["cdc"].get("path"), str)
    ]


def deleted_rows(store: LogStore, table_uri: str, data_file: str, vector: Mapping[str, Any], *, version: int | None = None) -> pa.Array:
    """The row positions (uint64, ascending) a deletion vector deletes; ``vector`` is a
    ``deletion_vector`` row of ``Snapshot.files()``. DeletionVectorError (naming the table and the
    data file) for a vector file that is missing, too short, fails its CRC or disagrees with the
    descriptor's size or cardinality; never follows a path out of the table root."""
    descriptor = DeletionVectorDescriptor(
        vector["storage_type"],
        vector["path_or_inline_dv"],
        vector["size_in_bytes"],
        vector["cardinality"],
        offset=vector["offset"],
        max_row_index=vector["max_row_index"],
    )
    return read_deletion_vector(store, descriptor, table_uri=table_uri, data_file=data_file, version=version)


# --- checkpoints -------------------------------------------------------------------------------


def write_checkpoint(snapshot: Snapshot) -> CheckpointResult:
    """Checkpoint ``snapshot``'s version (kept if one is there) and advance ``_last_checkpoint``."""
    return snapshot.checkpoint()


def point_hint_at(store: LogStore, version: int) -> None:
    """Make ``_last_checkpoint`` name the complete checkpoint at ``version`` unless it already
    names that one or a newer one (before older checkpoints are deleted)."""
    hint = read_hint(store)
    if hint is not None and hint.version >= version:
        return
    existing = existing_checkpoint(store, version)
    if existing is not None:
        advance_last_checkpoint(store, existing)


# --- states for validation, and files added by commits ----------------------------------------


def state_of(snapshot: Snapshot) -> TableState:
    return snapshot.state


def json_state(store: LogStore, commits: list[CommitFile], version: int) -> TableState:
    """The state at ``version`` replayed from JSON commits only (``commits`` from version 0)."""
    return replay(store, LogSegment(version, [], commits))


def advance_state(state: TableState, commits: list[Commit], where: str) -> TableState:
    return advance(state, commits, where)


def checkpoint_state(store: LogStore, files: list[CheckpointFile]) -> TableState:
    """The state a checkpoint alone describes (CorruptCheckpointError if unreadable)."""
    return replay(store, LogSegment(files[0].version, files, []))


def added_files(commits: Iterable[Commit]) -> pa.Table:
    """Every add action of ``commits`` (``Snapshot.files()`` layout)."""
    tables = []
    for commit in commits:
        if commit.columnar is not None:
            tables.append(commit.columnar.adds)
        bodies = [obj["add"] for obj in commit.actions if isinstance(obj.get("add"), Mapping)]
        if bodies:
            tables.append(table_from_log_dicts(bodies, "add"))
    return pa.concat_tables(tables) if tables else FILES_SCHEMA.empty_table()


def sidecar_names(store: LogStore, files: list[CheckpointFile]) -> set[str]:
    """Names (under ``_delta_log/_sidecars``) of the sidecars a V2 checkpoint references."""
    names: set[str] = set()
    for part in files:
        if part.v2_format == "json":
            for obj in parse_lines(store.read(part.path), path=part.path, version=part.version):
                body: Any = obj.get("sidecar")
                if isinstance(body, Mapping) and isinstance(body.get("path"), str):
                    names.add(body["path"])
        elif part.v2_format == "parquet":
            pf = pq.ParquetFile(store.open_input(part.path))
            if "sidecar" in pf.schema_arrow.names:
                column = pf.read(columns=["sidecar.path"]).column("sidecar").combine_chunks()
                names.update(p for p in pc.struct_field(column, "path").to_pylist() if p)
    return {n.rsplit("/", 1)[-1] for n in names}


def open_snapshot(table: Table, version: int | None = None) -> Snapshot:
    return table.snapshot(version)


def read_commit_files(store: LogStore, files: list[CommitFile]) -> list[Commit]:
    return read_commits(store, files, columnar=True)


def keys(files: pa.Table) -> pa.Array:
    return file_keys(files)
