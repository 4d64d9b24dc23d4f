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

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import LogCorruptError
from txnlog.log import codec
from txnlog.log.actions import CommitInfo, DomainMetadata, Metadata, Protocol, Txn
from txnlog.log.checkpoint_reader import read_checkpoint
from txnlog.log.file_actions import (
    FILES_SCHEMA,
    TOMBSTONES_SCHEMA,
    concat,
    ColumnarFileActions,
    file_keys,
    parse_file_actions,
    table_from_log_dicts,
)
from txnlog.log.segment import CommitFile, LogSegment
from txnlog.storage.base import LogStore


@dataclass(frozen=True)
class Commit:
    """One parsed commit file: its raw actions (``{kind: body}``) in file order."""

    version: int
    path: str
    modification_time: int
    actions: list[dict[str, Any]]
    #: For a large commit read for replay: its add and remove actions, parsed column-wise
    #: (and then absent from ``actions``).
    columnar: ColumnarFileActions | None = None

    def commit_info(self) -> CommitInfo | None:
        for obj in self.actions:
            if "commitInfo" in obj:
                info = codec.decode_action("commitInfo", obj["commitInfo"], path=self.path, version=self.version)
                return info  # type: ignore[return-value]
        return None

    @property
    def timestamp(self) -> int:
        """In-commit timestamp when present, else the file's modification time."""
        info = self.commit_info()
        if info is not None and info.in_commit_timestamp is not None:
            return int(info.in_commit_timestamp)
        return self.modification_time


# Above this size a commit's file actions are parsed by pyarrow's JSON reader, not row by row.
COLUMNAR_COMMIT_BYTES = 1 << 20


def read_commits(store: LogStore, files: Iterable[CommitFile], *, columnar: bool = False) -> list[Commit]:
    """Parse commit files. With ``columnar``, large commits keep their file actions as Arrow."""
    files = list(files)
    blobs = store.read_many([f.path for f in files])
    out = []
    for f, data in zip(files, blobs):
        split = parse_file_actions(data, path=f.path, version=f.version) if columnar and len(data) > COLUMNAR_COMMIT_BYTES else None
        if split is None:
            out.append(Commit(f.version, f.path, f.modification_time, codec.parse_lines(data, path=f.path, version=f.version)))
        else:
            rest, file_actions = split
            actions = codec.parse_lines(rest, path=f.path, version=f.version)
            out.append(Commit(f.version, f.path, f.modification_time, actions, file_actions))
    return out


@dataclass(frozen=True)
class TableState:
    """Everything a snapshot knows, derived only from the log."""

    version: int
    protocol: Protocol
    metadata: Metadata
    app_transactions: Mapping[str, Txn]
    domains: Mapping[str, DomainMetadata]
    files: pa.Table
    _tombstone_parts: tuple[Callable[[], pa.Table], ...] = field(repr=False, default=())

    def tombstones(self) -> pa.Table:
        """Latest remove per logical file that is not live again."""
        removes = concat((load() for load in self._tombstone_parts), TOMBSTONES_SCHEMA)
        if removes.num_rows == 0:
            return removes
        keys = file_keys(removes)
        live = pc.is_in(keys, value_set=file_keys(self.files))
        removes = removes.filter(pc.invert(live))
        keys = keys.filter(pc.invert(live))
        # Keep the last occurrence of each key: parts are in log order.
        idx = pa.table({"k": keys, "i": pa.array(range(len(keys)), pa.int64())})
        last = idx.group_by("k", use_threads=False).aggregate([("i", "max")]).column("i_max")
        return removes.take(pc.take(last, pc.sort_indices(last)))  # the row positions, in log order


# Fields the protocol requires that columnar conversion would otherwise turn into nulls.
_REQUIRED_FILE_FIELDS = {"add": ("path", "size"), "remove": ("path",)}
_REQUIRED_DV_FIELDS = ("storageType", "pathOrInlineDv", "sizeInBytes", "cardinality")


def _check_file_action(kind: str, body: Any, commit: Commit) -> None:
    if not isinstance(body, dict):
        raise LogCorruptError(
            f"{commit.path}: '{kind}' action is not an object (version {commit.version})",
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


def _missing(what: str, segment_desc: str, version: int) -> LogCorruptError:
    return LogCorruptError(f"{segment_desc}: no {what} action found at or before version {version}", version=version)


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
) -> TableState:
    txns = dict(app_transactions)
    doms = dict(domains)
    # Every add and remove gets a sequence number (commit index << 32 | line), so the latest
    # action per logical file can be found column-wise, whichever way its commit was parsed.
    bodies: dict[str, list[dict[str, Any]]] = {"add": [], "remove": []}
    seqs: dict[str, list[int]] = {"add": [], "remove": []}
    owners: dict[str, list[int]] = {"add": [], "remove": []}
    tables: dict[str, list[pa.Table]] = {"add": [], "remove": []}
    table_seqs: dict[str, list[pa.Array]] = {"add": [], "remove": []}
    latest_protocol: tuple[Commit, Any] | None = None
    latest_metadata: tuple[Commit, Any] | None = None
    for index, commit in enumerate(commits):
        base = index << 32
        if commit.columnar is not None:
            _check_columnar(commit)
            for kind, table, lines in (
                ("add", commit.columnar.adds, commit.columnar.add_lines),
                ("remove", commit.columnar.removes, commit.columnar.remove_lines),
            ):
                if table.num_rows:
                    tables[kind].append(table)
                    table_seqs[kind].append(pc.add(lines, base))
        for line, obj in enumerate(commit.actions):
            for kind, body in obj.items():
                try:
                    if kind in _REQUIRED_FILE_FIELDS:
                        _check_file_action(kind, body, commit)
                        bodies[kind].append(body)
                        seqs[kind].append(base + line)
                        owners[kind].append(index)
                    elif kind == "protocol":
                        latest_protocol = (commit, body)
                    elif kind == "metaData":
                        latest_metadata = (commit, body)
                    elif kind in ("txn", "domainMetadata"):
                        action = codec.decode_action(kind, body, path=commit.path, version=commit.version)
                        if isinstance(action, Txn):
                            txns[action.app_id] = action
                        elif isinstance(action, DomainMetadata):
                            if action.removed:
                                doms.pop(action.domain, None)
                            else:
                                doms[action.domain] = action
                except (KeyError, TypeError, AttributeError) as e:
                    raise LogCorruptError(
                        f"{commit.path}: malformed '{kind}' action (version {commit.version}): {e!r}",
                        path=commit.path,
                        version=commit.version,
                    ) from None
    for kind in ("add", "remove"):
        if bodies[kind]:
            tables[kind].append(_file_table(commits, bodies[kind], owners[kind], kind))
            table_seqs[kind].append(pa.array(seqs[kind], pa.int64()))
    # Only the winning protocol and metaData must be valid: superseded ones are never used.
    if latest_protocol is not None:
        protocol = codec.decode_action("protocol", latest_protocol[1], path=latest_protocol[0].path, version=latest_protocol[0].version)  # type: ignore[assignment]
    if latest_metadata is not None:
        metadata = codec.decode_action("metaData", latest_metadata[1], path=latest_metadata[0].path, version=latest_metadata[0].version)  # type: ignore[assignment]
    if protocol is None:
        raise _missing("protocol", where, version)
    if metadata is None:
        raise _missing("metaData", where, version)

    adds = concat(tables["add"], FILES_SCHEMA)
    removes = concat(tables["remove"], TOMBSTONES_SCHEMA)
    files = base_files
    if adds.num_rows or removes.num_rows:
        add_keys = file_keys(adds).cast(pa.string())
        if not removes.num_rows and pc.count_distinct(add_keys).as_py() == len(add_keys):
            # Appends of distinct files (the common case): every add is live, no reconciling.
            touched, live = add_keys, adds
        else:
            add_seq = _concat_arrays(table_seqs["add"])
            keyed = pa.table(
                {
                    "key": pa.concat_arrays([add_keys, file_keys(removes).cast(pa.string())]),
                    "seq": pa.concat_arrays([add_seq, _concat_arrays(table_seqs["remove"])]),
                }
            )
            latest = keyed.group_by("key").aggregate([("seq", "max")])
            touched = latest.column("key")
            live = adds.filter(pc.is_in(add_seq, value_set=latest.column("seq_max")))
        if files.num_rows:
            replaced = pc.is_in(file_keys(files), value_set=touched)
            if pc.any(replaced).as_py():  # copying the whole list only when something changed
                files = files.filter(pc.invert(replaced))
        files = concat([files, live], FILES_SCHEMA)
    if files.num_rows and files.column(0).num_chunks > _MAX_CHUNKS:
        # Each incremental update adds a chunk; per-chunk overhead would grow without bound.
        files = files.combine_chunks()
    parts = tombstone_parts
    if removes.num_rows:
        parts = parts + (lambda: removes,)
    return TableState(version, protocol, metadata, txns, doms, files, parts)


def _concat_arrays(arrays: list[pa.Array]) -> pa.Array:
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.int64())


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
                commit = commits[index]
                raise LogCorruptError(
                    f"{commit.path}: malformed '{kind}' action (version {commit.version}): {e}",
                    path=commit.path,
                    version=commit.version,
                ) from None
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


def replay(store: LogStore, segment: LogSegment) -> TableState:
    """The table state at ``segment.version``."""
    where = f"{store.root_uri} version {segment.version}"
    protocol = metadata = None
    txns: dict[str, Txn] = {}
    doms: dict[str, DomainMetadata] = {}
    base_files = FILES_SCHEMA.empty_table()
    parts: tuple[Callable[[], pa.Table], ...] = ()
    if segment.checkpoint:
        cp = read_checkpoint(store, segment.checkpoint)
        for action in cp.non_file_actions:
            if isinstance(action, Protocol):
                protocol = action
            elif isinstance(action, Metadata):
                metadata = action
            elif isinstance(action, Txn):
                txns[action.app_id] = action
            elif isinstance(action, DomainMetadata) and not action.removed:
                doms[action.domain] = action
        base_files = cp.adds
        parts = (cp.load_tombstones,)
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
    )


def advance(state: TableState, commits: list[Commit], where: str) -> TableState:
    """``state`` brought forward by the commits that follow it."""
    if not commits:
        return state
    return apply_commits(
        commits,
        base_files=state.files,
        protocol=state.protocol,
        metadata=state.metadata,
        app_transactions=state.app_transactions,
        domains=state.domains,
        tombstone_parts=state._tombstone_parts,
        version=commits[-1].version,
        where=where,
    )

