"""Conflict checks of a transaction against the commits that won versions it wanted.

All winners are checked at once, column-wise: their added and removed files become one Arrow
table each, so a hundred winning blind appends cost about what one does. The first conflict in
winner order is raised, and within a winner the checks keep Delta's order: protocol, metadata,
domain metadata, app transaction, concurrent append, delete-read, delete-delete. A winner's
protocol or metadata is adopted where delta-spark adopts it (:mod:`txnlog.txn.table_changes`).

Two refinements over delta-spark:

- read predicates are judged against the winners' added files by partition values *and*
  min/max stats, as Iceberg's conflict filters are, so a narrow read does not conflict with an
  append that cannot hold matching rows;
- a winner's ``dataChange=false`` removes (compaction) do not fail a transaction that only read
  those files: the rows are unchanged. Removing the same file twice still conflicts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import (
    CommitConflictError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
)
from txnlog.expressions import FilePredicate
from txnlog.file_facts import file_keys
from txnlog.log import codec
from txnlog.log.actions import CommitInfo, Metadata, Protocol
from txnlog.log.commits import Commit
from txnlog.log.file_actions import FILES_SCHEMA, TOMBSTONES_SCHEMA, concat, table_from_log_dicts
from txnlog.txn.isolation import IsolationLevel
from txnlog.txn.table_changes import TableView, resolve


@dataclass
class TransactionFootprint:
    """What a transaction read and what it writes: everything conflicts are judged on."""

    read_version: int
    isolation: IsolationLevel
    read_predicates: list[FilePredicate] = field(default_factory=list)
    read_whole_table: bool = False
    read_file_keys: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    app_ids: set[str] = field(default_factory=set)
    domains: set[str] = field(default_factory=set)
    removed_keys: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    #: The protocol and metadata it commits under (None: it creates the table).
    view: TableView | None = None

    @property
    def changes_metadata(self) -> bool:
        return self.view is not None and self.view.changes_metadata


@dataclass
class Resolved:
    """Winner file actions that a row-level rebase accounted for (txnlog.txn.rebase): the
    checks skip them. ``removes``: (version, file key); ``adds``: (version, path)."""

    removes: set[tuple[int, str]] = field(default_factory=set)
    adds: set[tuple[int, str]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.removes or self.adds)


@dataclass
class Winners:
    """The parts of a run of winning commits the checks look at, file actions as Arrow."""

    versions: list[int]
    infos: dict[int, CommitInfo | None]
    protocols: dict[int, Protocol]  # the winners' protocol actions
    metadatas: dict[int, Metadata]  # and metaData actions
    app_ids: dict[str, int]  # app id -> first winning version that set it
    domains: dict[str, int]
    adds: pa.Table  # dataChange adds: FILES_SCHEMA + "version" + "blind"
    removes: pa.Table  # TOMBSTONES_SCHEMA + "version" + "key"
    files_added: pa.Table  # every add, dataChange or not: FILES_SCHEMA + "version"

    @classmethod
    def of(cls, commits: list[Commit]) -> Winners:
        infos: dict[int, CommitInfo | None] = {}
        protocol: dict[int, Protocol] = {}
        metadata: dict[int, Metadata] = {}
        app_ids: dict[str, int] = {}
        domains: dict[str, int] = {}
        # File actions of every winner together: one conversion to Arrow per kind, not per commit.
        bodies: dict[str, list[dict[str, Any]]] = {"add": [], "remove": []}
        versions: dict[str, list[int]] = {"add": [], "remove": []}
        tables: dict[str, list[pa.Table]] = {"add": [], "remove": []}
        blind_versions: list[int] = []
        for commit in commits:
            info = commit.commit_info()
            infos[commit.version] = info
            if info and info.is_blind_append:
                blind_versions.append(commit.version)
            for obj in commit.actions:
                for kind, body in obj.items():
                    if kind in bodies:
                        bodies[kind].append(body)
                        versions[kind].append(commit.version)
                    elif kind == "txn":
                        app_ids.setdefault(str(body.get("appId")), commit.version)
                    elif kind == "domainMetadata":
                        domains.setdefault(str(body.get("domain")), commit.version)
                    elif kind == "protocol":
                        protocol[commit.version] = codec.decode_action(kind, body, path=commit.path, version=commit.version)  # type: ignore[assignment]
                    elif kind == "metaData":
                        metadata[commit.version] = codec.decode_action(kind, body, path=commit.path, version=commit.version)  # type: ignore[assignment]
            if commit.columnar is not None:
                for kind, table in (("add", commit.columnar.adds), ("remove", commit.columnar.removes)):
                    if table.num_rows:
                        tables[kind].append(_tag(table, pa.repeat(pa.scalar(commit.version, pa.int64()), table.num_rows)))
        for kind in ("add", "remove"):
            if bodies[kind]:
                tables[kind].append(_tag(table_from_log_dicts(bodies[kind], kind), pa.array(versions[kind], pa.int64())))
        every_add = concat(tables["add"], _tag(FILES_SCHEMA.empty_table(), pa.array([], pa.int64())).schema)
        adds = every_add.filter(pc.fill_null(every_add.column("data_change"), True))
        adds = adds.append_column("blind", pc.is_in(adds.column("version"), value_set=pa.array(blind_versions, pa.int64())))
        removes = concat(tables["remove"], _tag(TOMBSTONES_SCHEMA.empty_table(), pa.array([], pa.int64())).schema)
        removes = removes.append_column("key", file_keys(removes))
        return cls(
            versions=[c.version for c in commits],
            infos=infos,
            protocols=protocol,
            metadatas=metadata,
            app_ids=app_ids,
            domains=domains,
            adds=adds.sort_by("version"),
            removes=removes.sort_by("version"),
            files_added=every_add.sort_by("version"),
        )

    def txn_ids(self) -> dict[int, str | None]:
        return {v: (info.txn_id if info else None) for v, info in self.infos.items()}

    def operation(self, version: int) -> str | None:
        info = self.infos.get(version)
        return info.operation if info else None

    def without(self, resolved: Resolved) -> Winners:
        """These winners minus the file actions a rebase accounted for."""
        if not resolved:
            return self
        return dataclasses.replace(
            self,
            adds=self.adds.filter(pc.invert(_among(self.adds, "path", resolved.adds))),
            removes=self.removes.filter(pc.invert(_among(self.removes, "key", resolved.removes))),
        )

    def describe(self, version: int) -> str:
        info = self.infos.get(version)
        operation = info.operation if info and info.operation else "unknown operation"
        return f"version {version} ({operation})"


def _among(table: pa.Table, column: str, pairs: set[tuple[int, str]]) -> pa.Array:
    if not pairs or not table.num_rows:
        return pa.repeat(pa.scalar(False), table.num_rows)
    rows = zip(table.column("version").to_pylist(), table.column(column).to_pylist(), strict=True)
    return pa.array([row in pairs for row in rows], pa.bool_())


def _tag(table: pa.Table, versions: pa.Array) -> pa.Table:
    """``table`` with the winning version of each row."""
    return table.append_column("version", versions)


# (winning version, Delta's check order, the error): the smallest pair is raised.
_Candidate = tuple[int, int, CommitConflictError]


def _facts(winners: Winners) -> tuple[Any, Any]:
    def facts(version: int) -> dict[str, Any]:
        info = winners.infos.get(version)
        return {"winning_version": version, "winning_operation": info.operation if info else None}

    def who(version: int) -> str:
        return f"a concurrent commit at {winners.describe(version)}"

    return who, facts


def adopt_table_changes(mine: TransactionFootprint, winners: Winners) -> CommitConflictError | None:
    """Checks 1 and 2: adopt the winners' protocol and metadata changes into ``mine.view`` where
    delta-spark does; the first that conflicts instead (not raised: the file checks of earlier
    winners come first)."""
    if not winners.protocols and not winners.metadatas:
        return None
    if mine.view is None:  # creating the table: any winner is TableAlreadyExists, raised before
        v = min([*winners.protocols, *winners.metadatas])
        who, facts = _facts(winners)
        return MetadataChangedError(f"{who(v)} changed the table metadata", **facts(v))
    changes = [
        (v, winners.protocols.get(v), winners.metadatas.get(v), winners.infos.get(v))
        for v in sorted({*winners.protocols, *winners.metadatas})
    ]
    mine.view, conflict = resolve(mine.view, changes, *_facts(winners))
    return conflict[2] if conflict is not None else None


def check_conflicts(mine: TransactionFootprint, winners: Winners) -> None:
    """Raise the first conflict of checks 3 to 7 between this transaction and the winners, or
    return (checks 1 and 2 are :func:`adopt_table_changes`)."""
    candidates: list[_Candidate] = []
    who, facts = _facts(winners)
    domains = sorted(mine.domains & set(winners.domains), key=lambda name: (winners.domains[name], name))
    if domains:
        v3 = winners.domains[domains[0]]
        clash = [d for d in domains if winners.domains[d] == v3]
        candidates.append(
            (v3, 3, ConcurrentTransactionError(f"{who(v3)} also wrote domain metadata {clash}", detail=clash, **facts(v3)))
        )
    app_ids = sorted(mine.app_ids & set(winners.app_ids), key=lambda name: (winners.app_ids[name], name))
    if app_ids:
        v4 = winners.app_ids[app_ids[0]]
        apps = [a for a in app_ids if winners.app_ids[a] == v4]
        candidates.append(
            (
                v4,
                4,
                ConcurrentTransactionError(
                    f"{who(v4)} also committed app transaction {apps}; this batch may already be written", detail=apps, **facts(v4)
                ),
            )
        )
    candidates += _appends(mine, winners, who, facts)
    candidates += _deletes(mine, winners, who, facts)
    if candidates:
        raise min(candidates, key=lambda c: (c[0], c[1]))[2]


def _first(table: pa.Table, mask: pa.Array) -> dict[str, Any] | None:
    """The first row of ``table`` (in winner order) where ``mask`` holds."""
    hits = table.filter(pc.fill_null(mask, False))
    return hits.slice(0, 1).select(["path", "version"]).to_pylist()[0] if hits.num_rows else None


def _appends(mine: TransactionFootprint, winners: Winners, who: Any, facts: Any) -> list[_Candidate]:
    adds = winners.adds
    if not adds.num_rows or mine.isolation is IsolationLevel.SNAPSHOT_ISOLATION:
        return []
    if mine.isolation is IsolationLevel.WRITE_SERIALIZABLE and not mine.changes_metadata:
        # delta-spark ignores blind appends only for a transaction that changes no metadata:
        # rows appended under the old schema or constraints are not what it checked.
        adds = adds.filter(pc.invert(adds.column("blind")))
    if not adds.num_rows:
        return []
    out: list[_Candidate] = []
    if mine.read_whole_table:
        row = adds.slice(0, 1).select(["path", "version"]).to_pylist()[0]
        v, path = row["version"], row["path"]
        count = pc.sum(pc.equal(adds.column("version"), v)).as_py()
        out.append(
            (
                v,
                5,
                ConcurrentAppendError(
                    f"{who(v)} added {count} file(s), e.g. {path}, to a table this transaction read in full",
                    conflicting_file=path,
                    **facts(v),
                ),
            )
        )
        return out
    files = adds.drop_columns(["version", "blind"])
    for predicate in mine.read_predicates:
        row = _first(adds, predicate.may_match(files))
        if row is not None:
            v, path, sql = row["version"], row["path"], predicate.sql
            out.append(
                (
                    v,
                    5,
                    ConcurrentAppendError(
                        f"{who(v)} added file {path} that matches this transaction's read predicate {sql!r}",
                        conflicting_file=path,
                        predicate=sql,
                        **facts(v),
                    ),
                )
            )
    return out


def _deletes(mine: TransactionFootprint, winners: Winners, who: Any, facts: Any) -> list[_Candidate]:
    removes = winners.removes
    if not removes.num_rows:
        return []
    out: list[_Candidate] = []
    data_change = pc.fill_null(removes.column("data_change"), True)
    read = pc.is_in(removes.column("key"), value_set=mine.read_file_keys)
    hit = pc.and_(data_change, pc.or_(read, pa.scalar(mine.read_whole_table)))
    row = _first(removes, hit)
    if row is not None:
        v, path = row["version"], row["path"]
        in_read = _first(removes, pc.and_(hit, read)) is not None
        what = "a file this transaction read" if in_read else "from a table this transaction read in full"
        out.append((v, 6, ConcurrentDeleteReadError(f"{who(v)} removed {path}, {what}", conflicting_file=path, **facts(v))))
    row2 = _first(removes, pc.is_in(removes.column("key"), value_set=mine.removed_keys))
    if row2 is not None:
        v2, path2 = row2["version"], row2["path"]
        out.append(
            (
                v2,
                7,
                ConcurrentDeleteDeleteError(
                    f"{who(v2)} already removed {path2}, which this transaction also removes", conflicting_file=path2, **facts(v2)
                ),
            )
        )
    return out


__all__ = ["Resolved", "TransactionFootprint", "Winners", "adopt_table_changes", "check_conflicts"]
