"""Log replay: reconcile a checkpoint and the commits after it into one table state.

Rules (PROTOCOL.md, "Action Reconciliation"):
- the latest protocol and metaData win;
- the latest txn wins for each appId;
- domainMetadata: the latest per domain wins, and ``removed`` drops the domain;
- a logical file is keyed by (path, deletion vector unique id); its latest add or remove wins;
- removes are kept as tombstones (for vacuum) unless the file is live again.

The checkpoint's file list stays columnar: commits are applied to it with Arrow compute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import LogCorruptError, TxnLogError
from txnlog.file_facts import file_keys, is_column_mapped, partition_fields, partition_value_keys
from txnlog.log import codec
from txnlog.log.actions import Action, DomainMetadata, Metadata, Protocol, Txn
from txnlog.log.checkpoint_reader import read_checkpoint
from txnlog.log.commits import Commit, read_commits
from txnlog.log.distinct import all_distinct
from txnlog.log.file_actions import (
    FILES_SCHEMA,
    TOMBSTONES_SCHEMA,
    concat,
    table_from_log_dicts,
)
from txnlog.log.segment import LogSegment
from txnlog.log.table_state import PendingStats, TableState
from txnlog.storage.base import LogStore

# Fields the protocol requires that columnar conversion would otherwise turn into nulls.
_REQUIRED_FILE_FIELDS = {"add": ("path", "size"), "remove": ("path",)}
_REQUIRED_DV_FIELDS = ("storageType", "pathOrInlineDv", "sizeInBytes", "cardinality")


_INTEGER_FIELDS = ("size", "modificationTime", "deletionTimestamp")


def _check_file_action(kind: str, body: Any, commit: Commit) -> None:
    if not isinstance(body, dict):
        raise LogCorruptError(
            f"{commit.path}: '{kind}' action is not an object (version {commit.version})",
            path=commit.path,
            version=commit.version,
        )
    for name in _INTEGER_FIELDS:
        if type(body.get(name)) is float:
            # Arrow's conversion would truncate 1.5 to 1 silently. (The column-wise parser
            # refuses such a commit, which then comes here.)
            raise LogCorruptError(
                f"{commit.path}: '{kind}' action for {body.get('path')!r}: field '{name}' must be an integer, "
                f"not {body[name]!r} (version {commit.version})",
                path=commit.path,
                version=commit.version,
            )
    dv = body.get("deletionVector")
    missing = [name for name in _REQUIRED_FILE_FIELDS[kind] if body.get(name) is None]
    if dv is not None:
        # The DV is part of the file's key, so a partial one would silently make a new file.
        missing += [f"deletionVector.{n}" for n in _REQUIRED_DV_FIELDS if not isinstance(dv, dict) or dv.get(n) is None]
    if missing:
        raise LogCorruptError(
            f"{commit.path}: '{kind}' action lacks required field '{missing[0]}' (version {commit.version})",
            path=commit.path,
            version=commit.version,
        )


_MAX_CHUNKS = 16
_SMALL_CHUNK_ROWS = 8192


def _missing(what: str, segment_desc: str, version: int) -> LogCorruptError:
    return LogCorruptError(f"{segment_desc}: no {what} action found at or before version {version}", version=version)


def _corrupt(commit: Commit, what: str) -> LogCorruptError:
    return LogCorruptError(f"{commit.path}: {what} (version {commit.version})", path=commit.path, version=commit.version)


def _partition_keys(metadata_body: Any, metadata: Metadata | None) -> frozenset[str] | None:
    """The keys add.partitionValues may hold under the metaData in force (physical names)."""
    try:
        if metadata_body is not None:
            metadata = codec.decode_action("metaData", metadata_body)  # type: ignore[assignment]
        if metadata is None:
            return None
        mapped = is_column_mapped(metadata.configuration)
        return frozenset(key for key, _ in partition_fields(metadata.schema, metadata.partition_columns, mapped))
    except TxnLogError:
        return None  # a malformed metaData is reported where it is decoded


def _check_file_actions(
    commits: list[Commit],
    adds: pa.Table,
    add_seq: pa.Array,
    removes: pa.Table,
    remove_seq: pa.Array,
    partition_runs: list[tuple[int, frozenset[str] | None]],
    add_keys: pa.Array | pa.ChunkedArray | None = None,
) -> bool:
    """Rules every commit's file actions must keep (PROTOCOL.md), checked for all commits at
    once: a size that is not negative, one action per logical file in a commit, partition values
    only for the partition columns of the metaData in force. ``*_seq`` hold (commit index << 32 |
    line); ``partition_runs`` (first commit index, partition keys) in commit order; ``add_keys``
    the adds' keys if already computed. Returns whether every action has a key of its own."""

    def commit_of(seq: int) -> Commit:
        return commits[seq >> 32]

    for kind, table, seqs in (("add", adds, add_seq), ("remove", removes, remove_seq)):
        negative = pc.fill_null(pc.less(table.column("size"), 0), False) if table.num_rows else None
        if negative is not None and pc.any(negative).as_py():
            first = pc.index(negative, True).as_py()
            raise _corrupt(commit_of(seqs[first].as_py()), f"'{kind}' action for {table.column('path')[first].as_py()} has a negative size")
    if add_keys is None:
        add_keys = _key_column(adds)
    keys: pa.Array | pa.ChunkedArray = add_keys
    if removes.num_rows:
        keys = pa.chunked_array([*_chunks(add_keys), file_keys(removes).cast(pa.string())], pa.string())
    distinct = all_distinct(keys)
    if not distinct:
        keys = _combined(keys)
        seqs = pa.concat_arrays([add_seq, remove_seq])
        commit_index = pc.shift_right(seqs, 32)
        per_commit = pc.binary_join_element_wise(keys, pc.cast(commit_index, pa.string()), "\x01")
        if pc.count_distinct(per_commit).as_py() != len(per_commit):
            counts = pa.table({"k": per_commit}).group_by("k").aggregate([("k", "count")])
            dup = counts.filter(pc.greater(counts.column("k_count"), 1)).column("k")[0].as_py()
            key, index = dup.rsplit("\x01", 1)
            raise _corrupt(commits[int(index)], f"two file actions for {key.split(chr(0))[0]!r} in one commit")
    if not adds.num_rows:
        return distinct
    ends = [start for start, _ in partition_runs[1:]] + [len(commits)]
    in_force = [allowed for (start, allowed), end in zip(partition_runs, ends) if start < end]
    known = [allowed for allowed in in_force if allowed is not None]
    if len(known) == len(in_force) and len(set(known)) == 1:  # one partitioning throughout
        # Chunk by chunk: the keys of a million maps at once are a copy of them all.
        allowed_keys = pa.array(sorted(known[0]), pa.string())
        if all(
            pc.all(pc.is_in(partition_value_keys(chunk)[0], value_set=allowed_keys)).as_py() is not False
            for chunk in adds.column("partition_values").chunks
        ):
            return distinct
    names, counts = partition_value_keys(adds.column("partition_values"))
    if not len(names):
        return distinct
    offsets = pc.cumulative_sum(pa.concat_arrays([pa.array([0], counts.type), counts])).cast(pa.int32())
    rows = pc.list_parent_indices(pa.ListArray.from_arrays(offsets, names))
    name_commit = pc.shift_right(add_seq.take(rows), 32)
    for i, (start, allowed) in enumerate(partition_runs):
        if allowed is None:
            continue
        end = partition_runs[i + 1][0] if i + 1 < len(partition_runs) else len(commits)
        in_run = pc.and_(pc.greater_equal(name_commit, start), pc.less(name_commit, end))
        bad = pc.and_(in_run, pc.invert(pc.is_in(names, value_set=pa.array(sorted(allowed), pa.string()))))
        if pc.any(bad).as_py():
            first = pc.index(bad, True).as_py()
            raise _corrupt(
                commits[name_commit[first].as_py()],
                f"'add' action names partition column {names[first].as_py()!r}, which is not a partition column",
            )
    return distinct


def apply_commits(
    commits: list[Commit],
    *,
    base_files: pa.Table,
    protocol: Protocol | None,
    metadata: Metadata | None,
    app_transactions: Mapping[str, Txn],
    domains: Mapping[str, DomainMetadata],
    tombstone_parts: tuple[Callable[[], pa.Table], ...],
    version: int,
    where: str,
    pending_stats: PendingStats | None = None,
) -> TableState:
    txns = dict(app_transactions)
    doms = dict(domains)
    # Every add and remove gets a sequence number (commit index << 32 | line), so the latest
    # action per logical file can be found column-wise, whichever way its commit was parsed.
    tables: dict[str, list[pa.Table]] = {"add": [], "remove": []}
    table_seqs: dict[str, list[pa.Array]] = {"add": [], "remove": []}
    latest_protocol: tuple[Commit, Any] | None = None
    latest_metadata: tuple[Commit, Any] | None = None
    partition_runs = [(0, _partition_keys(None, metadata))]
    # Every file action of commits read from storage is held to the protocol's rules, at once.
    # Parsed from JSON lines: bodies of every commit, made a table in one conversion.
    # (commits already held to the rules, the others): their bodies, lines and commit indexes.
    bodies: dict[bool, dict[str, list[dict[str, Any]]]] = {c: {"add": [], "remove": []} for c in (True, False)}
    lines: dict[bool, dict[str, list[int]]] = {c: {"add": [], "remove": []} for c in (True, False)}
    owners: dict[bool, dict[str, list[int]]] = {c: {"add": [], "remove": []} for c in (True, False)}
    unchecked: dict[str, list[pa.Table]] = {"add": [], "remove": []}
    unchecked_seqs: dict[str, list[pa.Array]] = {"add": [], "remove": []}
    for index, commit in enumerate(commits):
        base = index << 32
        if commit.columnar is not None:
            if not commit.checked:
                _check_columnar(commit)
            for kind, table, numbers in (
                ("add", commit.columnar.adds, commit.columnar.add_lines),
                ("remove", commit.columnar.removes, commit.columnar.remove_lines),
            ):
                if table.num_rows:
                    tables[kind].append(table)
                    table_seqs[kind].append(pc.add(numbers, base))
                    if not commit.checked:
                        unchecked[kind].append(table)
                        unchecked_seqs[kind].append(table_seqs[kind][-1])
        seen: dict[str, int] = {}
        app_ids: set[str] = set()
        for line, obj in enumerate(commit.actions):
            for kind, body in obj.items():
                try:
                    if kind in _REQUIRED_FILE_FIELDS:
                        _check_file_action(kind, body, commit)
                        bodies[commit.checked][kind].append(body)
                        lines[commit.checked][kind].append(base + line)
                        owners[commit.checked][kind].append(index)
                    elif kind in ("protocol", "metaData"):
                        seen[kind] = seen.get(kind, 0) + 1
                        if seen[kind] > 1:
                            raise _corrupt(commit, f"two '{kind}' actions in one commit")
                        if kind == "protocol":
                            latest_protocol = (commit, body)
                        else:
                            latest_metadata = (commit, body)
                            partition_runs.append((index, _partition_keys(body, None)))
                    elif kind in ("txn", "domainMetadata"):
                        action = codec.decode_action(kind, body, path=commit.path, version=commit.version)
                        if isinstance(action, Txn):
                            if action.app_id in app_ids:
                                raise _corrupt(commit, f"two 'txn' actions for appId {action.app_id!r} in one commit")
                            app_ids.add(action.app_id)
                            txns[action.app_id] = action
                        elif isinstance(action, DomainMetadata):
                            if action.removed:
                                doms.pop(action.domain, None)
                            else:
                                doms[action.domain] = action
                except (KeyError, TypeError, AttributeError) as e:
                    raise _corrupt(commit, f"malformed '{kind}' action: {e!r}") from None
    for checked in (True, False):
        for kind in ("add", "remove"):
            if bodies[checked][kind]:
                tables[kind].append(_file_table(commits, bodies[checked][kind], owners[checked][kind], kind))
                table_seqs[kind].append(pa.array(lines[checked][kind], pa.int64()))
                if not checked:
                    unchecked[kind].append(tables[kind][-1])
                    unchecked_seqs[kind].append(table_seqs[kind][-1])
    adds = concat(tables["add"], FILES_SCHEMA)
    removes = concat(tables["remove"], TOMBSTONES_SCHEMA)
    add_keys = _key_column(adds) if adds.num_rows or removes.num_rows else None
    # Commits read from storage (a replay): the unchecked actions are all of them, in the same
    # order, so their keys and distinctness are computed once for both purposes.
    all_unchecked = not any(c.checked for c in commits)
    distinct = _check_file_actions(
        commits,
        adds if all_unchecked else concat(unchecked["add"], FILES_SCHEMA),
        _concat_arrays(unchecked_seqs["add"]),
        removes if all_unchecked else concat(unchecked["remove"], TOMBSTONES_SCHEMA),
        _concat_arrays(unchecked_seqs["remove"]),
        partition_runs,
        add_keys if all_unchecked else None,
    )
    if latest_protocol is not None:
        protocol = codec.decode_action("protocol", latest_protocol[1], path=latest_protocol[0].path, version=latest_protocol[0].version)  # type: ignore[assignment]
    if latest_metadata is not None:
        metadata = codec.decode_action("metaData", latest_metadata[1], path=latest_metadata[0].path, version=latest_metadata[0].version)  # type: ignore[assignment]
    if protocol is None:
        raise _missing("protocol", where, version)
    if metadata is None:
        raise _missing("metaData", where, version)

    files = base_files
    if add_keys is not None:
        if not all_unchecked:
            distinct = all_distinct(add_keys)
        if not removes.num_rows and distinct:
            # Appends of distinct files (the common case): every add is live, no reconciling.
            touched, live = add_keys, adds  # made one array below only if there are base files
        else:
            add_seq = _concat_arrays(table_seqs["add"])
            keyed = pa.table(
                {
                    "key": pa.concat_arrays([_combined(add_keys), file_keys(removes).cast(pa.string())]),
                    "seq": pa.concat_arrays([add_seq, _concat_arrays(table_seqs["remove"])]),
                }
            )
            latest = keyed.group_by("key").aggregate([("seq", "max")])
            touched = latest.column("key")
            live = adds.filter(pc.is_in(add_seq, value_set=latest.column("seq_max")))
        if files.num_rows:
            replaced = pc.is_in(file_keys(files), value_set=_combined(touched))
            if pc.any(replaced).as_py():  # copying the whole list only when something changed
                files = files.filter(pc.invert(replaced))
                if pending_stats is not None:
                    pending_stats = pending_stats.kept(pc.invert(replaced))
        files = concat([files, live], FILES_SCHEMA)  # the checkpoint's files stay first
    chunks = files.column(0).num_chunks if files.num_rows else 0
    if chunks > _MAX_CHUNKS and files.num_rows < chunks * _SMALL_CHUNK_ROWS:
        # Each incremental update adds a chunk; per-chunk overhead would grow without bound.
        # Large chunks (a commit of thousands of files each) stay: merging them would copy
        # the whole list while it is held.
        files = files.combine_chunks()
    parts = tombstone_parts
    if removes.num_rows:
        parts = parts + (lambda: removes,)
    return TableState(version, protocol, metadata, txns, doms, files, parts, pending_stats)


def _key_column(table: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The logical-file keys of ``table``: its path column as it is (chunks and all, no copy)
    when no row has a deletion vector, else :func:`file_keys`."""
    dv = table.column("deletion_vector")
    if dv.null_count == table.num_rows:
        paths = table.column("path")
        return paths if paths.type == pa.string() else paths.cast(pa.string())
    return file_keys(table).cast(pa.string())


def _chunks(keys: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(keys.chunks) if isinstance(keys, pa.ChunkedArray) else [keys]


def _combined(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        return keys.chunk(0) if keys.num_chunks == 1 else keys.combine_chunks()
    return keys


def _concat_arrays(arrays: list[pa.Array]) -> pa.Array:
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.int64())


# The JSON types of the file-action fields (the protocol's), to name the field a conversion
# error came from: pyarrow's message names only the value.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "path": (str,),
    "size": (int,),
    "modificationTime": (int,),
    "deletionTimestamp": (int,),
    "dataChange": (bool,),
    "stats": (str,),
    "partitionValues": (dict,),
    "tags": (dict,),
    "deletionVector": (dict,),
    "baseRowId": (int,),
    "defaultRowCommitVersion": (int,),
    "clusteringProvider": (str,),
    "extendedFileMetadata": (bool,),
}


def _bad_field(bodies: Iterable[dict[str, Any]]) -> str:
    """The name of the first field whose value has the wrong JSON type, as ``" (field 'x')"``."""
    for body in bodies:
        for name, value in body.items():
            expected = _FIELD_TYPES.get(name)
            if value is None or expected is None:
                continue
            wrong = not isinstance(value, expected) or (expected == (int,) and isinstance(value, bool))
            if expected == (dict,) and not wrong and name in ("partitionValues", "tags"):
                wrong = any(not isinstance(k, str) or not (v is None or isinstance(v, str)) for k, v in value.items())
            if wrong:
                return f" (field '{name}': {value!r:.40})"
    return ""


def _file_table(commits: list[Commit], bodies: list[dict[str, Any]], owners: list[int], kind: str) -> pa.Table:
    try:
        return table_from_log_dicts(bodies, kind)
    except (pa.ArrowException, TypeError, ValueError) as e:
        # Find the commit holding the bad action, so the error names the file.
        for index in sorted(set(owners)):
            own = [b for b, o in zip(bodies, owners) if o == index]
            try:
                table_from_log_dicts(own, kind)
            except (pa.ArrowException, TypeError, ValueError):
                raise _corrupt(commits[index], f"malformed '{kind}' action{_bad_field(own)}: {e}") from None
        raise LogCorruptError(f"malformed '{kind}' action: {e}") from None


def _check_columnar(commit: Commit) -> None:
    """The required-field checks of :func:`_check_file_action`, column-wise."""
    assert commit.columnar is not None
    for kind, table, lines in (
        ("add", commit.columnar.adds, commit.columnar.add_lines),
        ("remove", commit.columnar.removes, commit.columnar.remove_lines),
    ):
        for name in _REQUIRED_FILE_FIELDS[kind]:
            column = table.column(name)
            if column.null_count:
                line = lines.filter(pc.is_null(column.combine_chunks()))[0].as_py() + 1
                raise LogCorruptError(
                    f"{commit.path}: '{kind}' action at line {line} lacks required field '{name}' (version {commit.version})",
                    path=commit.path,
                    version=commit.version,
                )
        dv = table.column("deletion_vector").combine_chunks()
        if dv.null_count < len(dv):
            for field_name in ("storage_type", "path_or_inline_dv", "size_in_bytes", "cardinality"):
                partial = pc.and_(dv.is_valid(), pc.is_null(dv.field(field_name)))
                if pc.any(partial).as_py():
                    line = lines.filter(partial)[0].as_py() + 1
                    raise LogCorruptError(
                        f"{commit.path}: '{kind}' action at line {line} has a deletionVector without "
                        f"'{field_name}' (version {commit.version})",
                        path=commit.path,
                        version=commit.version,
                    )


def checkpoint_table_actions(
    actions: Iterable[Action],
) -> tuple[Protocol | None, Metadata | None, dict[str, Txn], dict[str, DomainMetadata]]:
    """The protocol, metadata, app transactions and live domains a checkpoint's non-file
    actions record (a checkpoint holds each at most once, so the last one read stands)."""
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: dict[str, Txn] = {}
    domains: dict[str, DomainMetadata] = {}
    for action in actions:
        if isinstance(action, Protocol):
            protocol = action
        elif isinstance(action, Metadata):
            metadata = action
        elif isinstance(action, Txn):
            txns[action.app_id] = action
        elif isinstance(action, DomainMetadata) and not action.removed:
            domains[action.domain] = action
    return protocol, metadata, txns, domains


def replay(store: LogStore, segment: LogSegment) -> TableState:
    """The table state at ``segment.version``."""
    where = f"{store.root_uri} version {segment.version}"
    protocol = metadata = None
    txns: dict[str, Txn] = {}
    doms: dict[str, DomainMetadata] = {}
    base_files = FILES_SCHEMA.empty_table()
    parts: tuple[Callable[[], pa.Table], ...] = ()
    pending = None
    if segment.checkpoint:
        cp = read_checkpoint(store, segment.checkpoint, defer_stats=True)
        protocol, metadata, txns, doms = checkpoint_table_actions(cp.non_file_actions)
        base_files = cp.adds
        parts = (cp.load_tombstones,)
        if cp.stats is not None and cp.adds.num_rows:
            pending = PendingStats(cp.stats, pa.array(np.arange(cp.adds.num_rows, dtype=np.int64)))
    commits = read_commits(store, segment.commits, columnar=True)
    return apply_commits(
        commits,
        base_files=base_files,
        protocol=protocol,
        metadata=metadata,
        app_transactions=txns,
        domains=doms,
        tombstone_parts=parts,
        version=segment.version,
        where=where,
        pending_stats=pending,
    )


def advance(state: TableState, commits: list[Commit], where: str) -> TableState:
    """``state`` brought forward by the commits that follow it."""
    if not commits:
        return state
    return apply_commits(
        commits,
        base_files=state.file_list,
        protocol=state.protocol,
        metadata=state.metadata,
        app_transactions=state.app_transactions,
        domains=state.domains,
        tombstone_parts=state._tombstone_parts,
        version=commits[-1].version,
        where=where,
        pending_stats=state.pending_stats,
    )

