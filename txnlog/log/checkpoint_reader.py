"""Reading checkpoints: classic single-file, multi-part, and V2 (UUID-named JSON or Parquet
top-level file, with ``_delta_log/_sidecars/``).

Only the columns a snapshot needs are read: the non-file actions in full (they are few rows),
the add fields a file list shows, and the remove fields only when tombstones are asked for.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from txnlog.errors import CorruptCheckpointError, ObjectNotFoundError, StorageError
from txnlog.file_facts import file_keys
from txnlog.log import codec
from txnlog.log.actions import Action, Sidecar
from txnlog.log.file_actions import (
    ADD_LOG_FIELD_NAMES,
    FILES_SCHEMA,
    REMOVE_LOG_FIELD_NAMES,
    TOMBSTONES_SCHEMA,
    concat,
    struct_to_table,
    table_from_log_dicts,
)
from txnlog.log.filenames import SIDECAR_DIR, CheckpointFile
from txnlog.storage.base import LogStore
from txnlog.storage.paths import locate

NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


@dataclass
class CheckpointData:
    version: int
    non_file_actions: list[Action]
    adds: pa.Table
    load_tombstones: Callable[[], pa.Table] = field(repr=False)
    #: When the adds were read without their stats: where those are.
    stats: CheckpointStats | None = None


def _fail(part: CheckpointFile, what: str, cause: BaseException | None = None) -> CorruptCheckpointError:
    """The error for an unreadable checkpoint file; raise it ``from cause``. A file found gone
    (``cause`` an ObjectNotFoundError, on opening it or on any later read) was deleted after the
    log was listed, by a concurrent log expiry: the error says it ``vanished``, and readers list
    the log again."""
    vanished = isinstance(cause, ObjectNotFoundError)
    if vanished:
        message = f"checkpoint {part.path} (version {part.version}) vanished while it was read: {cause}"
    else:
        message = f"checkpoint {part.path} (version {part.version}) is unreadable: {what}"
    return CorruptCheckpointError(message, path=part.path, version=part.version, vanished=vanished)


# What reading an opened checkpoint file can raise: the store's errors (ObjectNotFoundError when
# it was deleted since it was opened), and pyarrow's for what it holds.
_READ_ERRORS = (StorageError, OSError, pa.ArrowException)


def _open_parquet(store: LogStore, path: str, part: CheckpointFile) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(store.open_input(path))
    except _READ_ERRORS as e:
        raise _fail(part, f"{path}: {e}", e) from e


def _present_children(pf: pq.ParquetFile, column: str, wanted: tuple[str, ...]) -> list[str]:
    schema = pf.schema_arrow
    idx = schema.get_field_index(column)
    if idx < 0:
        return []
    present = {f.name for f in schema.field(idx).type}
    return [name for name in wanted if name in present]


def _read_file_struct(pf: pq.ParquetFile, column: str, children: list[str], part: CheckpointFile) -> pa.Table:
    schema = FILES_SCHEMA if column == "add" else TOMBSTONES_SCHEMA
    return concat(_iter_file_struct(pf, column, children, part), schema)


def _iter_file_struct(pf: pq.ParquetFile, column: str, children: list[str], part: CheckpointFile) -> Iterator[pa.Table]:
    """The ``column`` rows of each row group in turn, in the snake_case layout (nulls dropped)."""
    for _group, table in _iter_groups(pf, column, children, part):
        if table.num_rows:
            yield table


def _iter_groups(
    pf: pq.ParquetFile, column: str, children: list[str], part: CheckpointFile, *, with_stats: bool = True
) -> Iterator[tuple[int, pa.Table]]:
    """(row group, its ``column`` rows in the snake_case layout, nulls dropped) for every row
    group. Without ``with_stats``, the add rows' stats are left out (null)."""
    kind = "add" if column == "add" else "remove"
    if not children:
        return
    has_parsed = with_stats and kind == "add" and "stats_parsed" not in children and bool(_present_children(pf, "add", ("stats_parsed",)))
    try:
        # One row group at a time: only one group's decoded columns exist beside the result.
        for group in range(pf.metadata.num_row_groups):
            null_here = _null_in_group(pf, group, column)
            read = [c for c in children if c not in null_here]
            # One thread: as fast here, and the decoding threads' allocator caches cost 40+ MiB.
            struct = pf.read_row_group(group, columns=[f"{column}.{c}" for c in read], use_threads=False).column(column)
            if has_parsed:
                struct = _with_parsed_stats(pf, group, struct, read)
            table = struct_to_table(struct, kind)
            if kind == "add" and table.column("path").null_count:
                raise _fail(part, "an 'add' row has no path")
            del struct
            # The group's decode buffers are free now; without this the allocator keeps them
            # cached, and over a checkpoint's groups that was ~40 MiB of the peak.
            pa.default_memory_pool().release_unused()
            yield group, table
    except _READ_ERRORS as e:
        raise _fail(part, f"cannot read column '{column}': {e}", e) from e


# Optional fields most files lack. A row group whose statistics say one holds only nulls is not
# decoded (delta-rs and Spark write null counts): the field reads as null for every row, as it
# would decoded, except that a tags map that is empty in every row reads as null ("no tags").
SKIPPABLE_WHEN_NULL = ("tags", "deletionVector", "baseRowId", "defaultRowCommitVersion", "clusteringProvider")


def _null_in_group(pf: pq.ParquetFile, group: int, column: str) -> set[str]:
    """The skippable children of ``column`` that every row of ``group`` leaves null."""
    row_group = pf.metadata.row_group(group)
    leaves: dict[str, list[bool]] = {}
    for i in range(row_group.num_columns):
        chunk = row_group.column(i)
        parts = chunk.path_in_schema.split(".")
        if len(parts) < 2 or parts[0] != column or parts[1] not in SKIPPABLE_WHEN_NULL:
            continue
        stats = chunk.statistics
        all_null = stats is not None and stats.has_null_count and stats.null_count == chunk.num_values
        leaves.setdefault(parts[1], []).append(all_null)
    return {name for name, nulls in leaves.items() if all(nulls)}


def _with_parsed_stats(pf: pq.ParquetFile, group: int, struct: pa.ChunkedArray, children: list[str]) -> pa.ChunkedArray:
    """With writeStatsAsJson=false the 'stats' string is null or absent: read stats_parsed too."""
    stats = pc.struct_field(struct, "stats") if "stats" in children else None
    if stats is None or pc.any(pc.and_(pc.is_valid(struct), pc.is_null(stats))).as_py():
        struct = pf.read_row_group(group, columns=[f"add.{c}" for c in [*children, "stats_parsed"]]).column("add")
    return struct


@dataclass
class CheckpointStats:
    """The stats of a checkpoint's add rows, left in its Parquet files until asked for: a file
    list's stats (JSON text, hundreds of bytes a file) are most of its memory, and only
    predicates need them.

    The files are opened again by path when the stats are asked for, and by then another writer
    may have put its own checkpoint of the same version there, with the rows in another order or
    other row groups (delta-rs writes over a checkpoint that appeared after it listed the log;
    readers cannot tell which engine wrote what). So stats are matched to their files by logical
    file key (path and deletion vector) read from the same rows, never by position alone: any
    complete checkpoint of the version lists each live file once, with the file's own stats. A
    file the checkpoint no longer lists makes the checkpoint count as unreadable (the snapshot is
    then rebuilt from the log). Within one read, every store serves one version of a file
    (see docs/maintenance.md).
    """

    store: LogStore
    #: (file, row group, add rows in it) for every row group, in the order the rows were read.
    groups: list[tuple[CheckpointFile, int, int]]

    def load(self, rows: pa.Array, keys: pa.Array) -> pa.ChunkedArray:
        """The stats of the add rows at ``rows`` (ascending positions among all the add rows
        read), whose logical file keys (:func:`txnlog.file_facts.file_keys`) are ``keys``: one
        chunk per row group while the files hold the rows where they were first read, and
        nothing copied for a group whose rows are all asked for."""
        positions = rows.to_numpy(zero_copy_only=False)
        counts = np.array([n for _, _, n in self.groups], np.int64)
        ends = np.cumsum(counts)
        group_of = np.searchsorted(ends, positions, side="right")
        out: list[pa.Array] = []
        opened: dict[str, pq.ParquetFile] = {}
        for g in np.unique(group_of):
            part, group, count = self.groups[int(g)]
            first, last = np.searchsorted(group_of, [g, g + 1])  # positions are ascending
            local = positions[first:last] - (ends[g] - counts[g])
            if part.path not in opened:
                opened[part.path] = _open_parquet(self.store, part.path, part)
            pf = opened[part.path]
            if group >= pf.metadata.num_row_groups:
                return self._load_by_key(keys)
            found, stats = _group_keys_and_stats(pf, part, group)
            if len(found) != count:
                return self._load_by_key(keys)
            if len(local) != count:
                found, stats = found.take(pa.array(local)), stats.take(pa.array(local))
            if not found.equals(keys.slice(int(first), int(last - first))):
                return self._load_by_key(keys)  # rows moved: another writer's checkpoint is there
            out.append(stats)
        return pa.chunked_array(out, pa.string())

    def _load_by_key(self, keys: pa.Array) -> pa.ChunkedArray:
        """The stats of the files ``keys`` name, looked up by key in every add row of the files
        as they are now."""
        parts = list({part.path: part for part, _, _ in self.groups}.values())
        found: list[pa.Array] = []
        stats: list[pa.Array] = []
        for part in parts:
            pf = _open_parquet(self.store, part.path, part)
            for group in range(pf.metadata.num_row_groups):
                group_keys, group_stats = _group_keys_and_stats(pf, part, group)
                found.append(group_keys)
                stats.append(group_stats)
        all_keys = pa.concat_arrays(found) if found else pa.array([], pa.string())
        where = pc.index_in(keys, value_set=all_keys)
        if where.null_count:
            missing = keys.filter(pc.is_null(where))[0].as_py().split("\x00")[0]
            raise _fail(parts[0], f"it no longer lists file {missing}: another checkpoint was written in its place")
        return pa.chunked_array([pa.concat_arrays(stats).take(where)], pa.string())


def _group_keys_and_stats(pf: pq.ParquetFile, part: CheckpointFile, group: int) -> tuple[pa.Array, pa.Array]:
    """The logical file keys and the stats (JSON text) of the add rows of one row group, in
    the file's order, read together."""
    wanted = _present_children(pf, "add", ("path", "deletionVector", "stats"))
    if "path" not in wanted:
        raise _fail(part, "its 'add' column has no 'path' field")
    children = [c for c in wanted if c not in _null_in_group(pf, group, "add")]
    has_parsed = bool(_present_children(pf, "add", ("stats_parsed",)))
    try:
        struct = pf.read_row_group(group, columns=[f"add.{c}" for c in children], use_threads=False).column("add")
        if has_parsed:
            struct = _with_parsed_stats(pf, group, struct, children)
        table = struct_to_table(struct, "add")
    except _READ_ERRORS as e:
        raise _fail(part, f"cannot read the stats of its 'add' rows: {e}", e) from e
    stats = table.column("stats")
    return file_keys(table), stats.combine_chunks() if stats.num_chunks != 1 else stats.chunk(0)


# A field every action of each kind has: reading it alone says which rows hold that action.
_PROBE_FIELDS = {
    "protocol": "minReaderVersion",
    "metaData": "id",
    "txn": "appId",
    "domainMetadata": "domain",
    "checkpointMetadata": "version",
    "sidecar": "path",
}


def _read_non_file(pf: pq.ParquetFile, part: CheckpointFile) -> list[Action]:
    """The non-file actions of one checkpoint file. They are a few rows among the file actions:
    one leaf per action kind, read group by group, says which row groups hold them, and only
    those are read in full, in small batches of which only the action rows are kept (reading
    every non-file column of every row group took longer than reading the file list)."""
    names = pf.schema_arrow.names
    wanted = [c for c in NON_FILE_COLUMNS if c in names]
    if not wanted:
        return []
    try:
        groups: list[int] = list(range(pf.metadata.num_row_groups))
        probes = [f"{c}.{_PROBE_FIELDS[c]}" for c in wanted if _PROBE_FIELDS[c] in _present_children(pf, c, (_PROBE_FIELDS[c],))]
        if len(groups) > 1 and len(probes) == len(wanted):
            groups = [g for g in groups if _holds_any(pf.read_row_group(g, columns=probes, use_threads=False))]
        kept = []
        for batch in pf.iter_batches(batch_size=_BATCH_ROWS, row_groups=groups, columns=wanted, use_threads=False):
            valid = functools.reduce(pc.or_, (column.is_valid() for column in batch.columns))
            if pc.any(valid).as_py():
                kept.append(batch.filter(valid))
        return _decode_non_file(pa.Table.from_batches(kept), part) if kept else []
    except _READ_ERRORS as e:
        raise _fail(part, str(e), e) from e


_BATCH_ROWS = 8192


def _holds_any(table: pa.Table) -> bool:
    return any(column.null_count < len(column) for column in table.columns)


def _decode_non_file(rows: pa.Table, part: CheckpointFile) -> list[Action]:
    out: list[Action] = []
    for name in rows.column_names:
        column = rows.column(name)
        valid = column.filter(column.is_valid())
        for body in valid.to_pylist(maps_as_pydicts="lossy"):
            action = codec.decode_action(name, body, path=part.path, version=part.version)
            if action is not None:
                out.append(action)
    return out


def _read_parquet_part(
    store: LogStore, path: str, part: CheckpointFile, stats_groups: list[tuple[CheckpointFile, int, int]] | None = None
) -> tuple[list[Action], pa.Table, Callable[[], pa.Table]]:
    """The non-file actions, add rows and a tombstone loader of one Parquet file. With
    ``stats_groups``, the adds are read without stats and each row group's add count is
    appended there (for :class:`CheckpointStats`)."""
    pf = _open_parquet(store, path, part)
    names = set(pf.schema_arrow.names)
    non_file = _read_non_file(pf, part)
    wanted = ADD_LOG_FIELD_NAMES if stats_groups is None else tuple(n for n in ADD_LOG_FIELD_NAMES if n != "stats")
    add_children = _present_children(pf, "add", wanted)
    if "add" in names and "path" not in add_children:
        raise _fail(part, "its 'add' column has no 'path' field")
    tables = []
    for group, table in _iter_groups(pf, "add", add_children, part, with_stats=stats_groups is None):
        if stats_groups is not None:
            stats_groups.append((part, group, table.num_rows))
        if table.num_rows:
            tables.append(table)
    adds = concat(tables, FILES_SCHEMA)
    remove_children = _present_children(pf, "remove", REMOVE_LOG_FIELD_NAMES)

    def tombstones() -> pa.Table:
        return _read_file_struct(_open_parquet(store, path, part), "remove", remove_children, part)

    return non_file, adds, tombstones


def sidecar_path(store: LogStore, sidecar: Sidecar, version: int) -> str:
    """The store path of a V2 checkpoint's sidecar: relative to ``_delta_log/_sidecars`` unless
    absolute, and never outside the table root (UnsafePathError)."""
    path = sidecar.path if "://" in sidecar.path or sidecar.path.startswith("/") else f"{SIDECAR_DIR}/{sidecar.path}"
    location = locate(store.root_uri, path, version=version)
    assert location.relative is not None  # locate refuses paths outside the root without the opt-in
    return location.relative


def _constant(table: pa.Table) -> Callable[[], pa.Table]:
    return lambda: table


def read_checkpoint(store: LogStore, parts: list[CheckpointFile], *, defer_stats: bool = False) -> CheckpointData:
    """Every action of one checkpoint (all parts, and sidecars for V2). With ``defer_stats``,
    the adds of a Parquet checkpoint come without stats, and ``stats`` says where they are."""
    version = parts[0].version
    non_file: list[Action] = []
    adds: list[pa.Table] = []
    tombstone_loaders: list[Callable[[], pa.Table]] = []
    # Stats are left in place only when every add row comes from Parquet (V2 JSON holds them inline).
    stats_groups: list[tuple[CheckpointFile, int, int]] | None = (
        [] if defer_stats and not any(part.v2_format == "json" for part in parts) else None
    )

    for part in parts:
        if part.v2_format == "json":
            try:
                data = store.read(part.path)
            except StorageError as e:
                raise _fail(part, str(e), e) from e
            raw = codec.parse_lines(data, path=part.path, version=version)
            add_bodies = [o["add"] for o in raw if "add" in o]
            remove_bodies = [o["remove"] for o in raw if "remove" in o]
            for kind, bodies in (("add", add_bodies), ("remove", remove_bodies)):
                if not all(isinstance(b, dict) and isinstance(b.get("path"), str) for b in bodies):
                    raise _fail(part, f"one '{kind}' action is not an object with a path")
            for obj in raw:
                for kind, body in obj.items():
                    if kind not in ("add", "remove"):
                        action = codec.decode_action(kind, body, path=part.path, version=version)
                        if action is not None:
                            non_file.append(action)
            try:
                adds.append(table_from_log_dicts(add_bodies, "add"))
                inline_removes = table_from_log_dicts(remove_bodies, "remove")
            except (pa.ArrowException, KeyError, TypeError) as e:
                raise _fail(part, f"malformed add/remove action: {e}") from e
            tombstone_loaders.append(_constant(inline_removes))
        else:
            part_non_file, part_adds, loader = _read_parquet_part(store, part.path, part, stats_groups)
            non_file.extend(part_non_file)
            adds.append(part_adds)
            tombstone_loaders.append(loader)

    sidecars = [a for a in non_file if isinstance(a, Sidecar)]
    for sidecar in sidecars:
        sidecar_part = CheckpointFile(sidecar_path(store, sidecar, version), version)
        try:
            _nf, sidecar_adds, loader = _read_parquet_part(store, sidecar_part.path, sidecar_part, stats_groups)
        except CorruptCheckpointError as e:
            raise CorruptCheckpointError(
                f"sidecar of checkpoint {parts[0].path}: {e}", path=sidecar_part.path, version=version, vanished=e.vanished
            ) from e
        adds.append(sidecar_adds)
        tombstone_loaders.append(loader)

    def load_tombstones() -> pa.Table:
        return concat((load() for load in tombstone_loaders), TOMBSTONES_SCHEMA)

    non_file = [a for a in non_file if not isinstance(a, Sidecar)]
    stats = CheckpointStats(store, stats_groups) if stats_groups is not None else None
    return CheckpointData(version, non_file, concat(adds, FILES_SCHEMA), load_tombstones, stats)


@dataclass
class CheckpointSources:
    """A checkpoint's non-file actions, and the Parquet files holding its file actions (the
    parts themselves, then V2 sidecars), to be streamed row group by row group."""

    version: int
    non_file_actions: list[Action]
    file_parts: list[CheckpointFile]

    def iter_files(self, store: LogStore, kind: str) -> Iterator[pa.Table]:
        """The ``add`` (``FILES_SCHEMA``) or ``remove`` (``TOMBSTONES_SCHEMA``) rows of every
        file, one row group at a time: never the whole list at once."""
        column = "add" if kind == "add" else "remove"
        wanted = ADD_LOG_FIELD_NAMES if kind == "add" else REMOVE_LOG_FIELD_NAMES
        for part in self.file_parts:
            pf = _open_parquet(store, part.path, part)
            children = _present_children(pf, column, wanted)
            if kind == "add" and column in pf.schema_arrow.names and "path" not in children:
                raise _fail(part, "its 'add' column has no 'path' field")
            yield from _iter_file_struct(pf, column, children, part)


def checkpoint_sources(store: LogStore, parts: list[CheckpointFile]) -> CheckpointSources | None:
    """What :class:`CheckpointSources` needs, reading only the non-file columns; None for a V2
    checkpoint whose top-level file is JSON (its file actions are inline: read it whole)."""
    if any(part.v2_format == "json" for part in parts):
        return None
    version = parts[0].version
    non_file: list[Action] = []
    for part in parts:
        non_file += _read_non_file(_open_parquet(store, part.path, part), part)
    files = list(parts)
    for sidecar in (a for a in non_file if isinstance(a, Sidecar)):
        files.append(CheckpointFile(sidecar_path(store, sidecar, version), version))
    return CheckpointSources(version, [a for a in non_file if not isinstance(a, Sidecar)], files)
