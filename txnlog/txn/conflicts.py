"""Conflict checks of a transaction against each commit that won a version it wanted.

The checks run in Delta's order: protocol, metadata, domain metadata, app transaction,
concurrent append, delete-read, delete-delete. Two refinements over delta-spark:

- read predicates are judged against the winner's added files by partition values *and*
  min/max stats, as Iceberg's conflict filters are, so a narrow read does not conflict with an
  append that cannot hold matching rows;
- a winner's ``dataChange=false`` removes (compaction) do not fail a transaction that only read
  those files: the rows are unchanged. Removing the same file twice still conflicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from txnlog.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
    ProtocolChangedError,
)
from txnlog.log.file_actions import key_of, table_from_log_dicts
from txnlog.log.replay import Commit
from txnlog.txn.isolation import IsolationLevel

if TYPE_CHECKING:
    from txnlog.predicates import FilePredicate


@dataclass
class TransactionFootprint:
    """What a transaction read and what it writes: everything conflicts are judged on."""

    read_version: int
    isolation: IsolationLevel
    read_predicates: list["FilePredicate"] = field(default_factory=list)
    read_whole_table: bool = False
    read_file_keys: set[str] = field(default_factory=set)
    app_ids: set[str] = field(default_factory=set)
    domains: set[str] = field(default_factory=set)
    removed_keys: set[str] = field(default_factory=set)


@dataclass
class WinningCommit:
    """The parts of a concurrent commit the checks look at."""

    version: int
    operation: str | None
    is_blind_append: bool
    txn_id: str | None
    changes_protocol: bool
    changes_metadata: bool
    app_ids: set[str]
    domains: set[str]
    data_adds: list[dict[str, Any]]
    removes: list[dict[str, Any]]

    @classmethod
    def of(cls, commit: Commit) -> "WinningCommit":
        info = commit.commit_info()
        data_adds, removes = [], []
        app_ids, domains = set(), set()
        protocol = metadata = False
        for obj in commit.actions:
            for kind, body in obj.items():
                if kind == "add" and body.get("dataChange", True):
                    data_adds.append(body)
                elif kind == "remove":
                    removes.append(body)
                elif kind == "txn":
                    app_ids.add(body.get("appId"))
                elif kind == "domainMetadata":
                    domains.add(body.get("domain"))
                elif kind == "protocol":
                    protocol = True
                elif kind == "metaData":
                    metadata = True
        return cls(
            version=commit.version,
            operation=info.operation if info else None,
            is_blind_append=bool(info and info.is_blind_append),
            txn_id=info.txn_id if info else None,
            changes_protocol=protocol,
            changes_metadata=metadata,
            app_ids=app_ids,
            domains=domains,
            data_adds=data_adds,
            removes=removes,
        )

    def describe(self) -> str:
        return f"version {self.version} ({self.operation or 'unknown operation'})"


def check_conflicts(mine: TransactionFootprint, winner: WinningCommit) -> None:
    """Raise the first conflict between this transaction and one winning commit, or return."""
    facts = {"winning_version": winner.version, "winning_operation": winner.operation}
    who = f"a concurrent commit at {winner.describe()}"

    if winner.changes_protocol:
        raise ProtocolChangedError(f"{who} changed the table protocol", **facts)
    if winner.changes_metadata:
        raise MetadataChangedError(f"{who} changed the table metadata (schema, partitioning or properties)", **facts)
    if clash := sorted(mine.domains & winner.domains):
        raise ConcurrentTransactionError(f"{who} also wrote domain metadata {clash}", detail=clash, **facts)
    if clash := sorted(mine.app_ids & winner.app_ids):
        raise ConcurrentTransactionError(
            f"{who} also committed app transaction {clash}; this batch may already be written", detail=clash, **facts
        )
    _check_appends(mine, winner, who, facts)
    _check_deletes(mine, winner, who, facts)


def _check_appends(mine: TransactionFootprint, winner: WinningCommit, who: str, facts: dict[str, Any]) -> None:
    if not winner.data_adds or mine.isolation is IsolationLevel.SNAPSHOT_ISOLATION:
        return
    if mine.isolation is IsolationLevel.WRITE_SERIALIZABLE and winner.is_blind_append:
        return
    if mine.read_whole_table:
        path = winner.data_adds[0].get("path")
        raise ConcurrentAppendError(
            f"{who} added {len(winner.data_adds)} file(s), e.g. {path}, to a table this transaction read in full",
            conflicting_file=path,
            **facts,
        )
    if not mine.read_predicates:
        return
    added = table_from_log_dicts(winner.data_adds, "add")
    for predicate in mine.read_predicates:
        hits = predicate.may_match(added)
        if pc.any(hits).as_py():
            path = added.column("path").filter(hits)[0].as_py()
            raise ConcurrentAppendError(
                f"{who} added file {path} that matches this transaction's read predicate {predicate.sql!r}",
                conflicting_file=path,
                predicate=predicate.sql,
                **facts,
            )


def _check_deletes(mine: TransactionFootprint, winner: WinningCommit, who: str, facts: dict[str, Any]) -> None:
    for body in winner.removes:
        key = key_of(body)
        path = body.get("path")
        data_change = body.get("dataChange", True)
        if data_change and (key in mine.read_file_keys or mine.read_whole_table):
            what = "a file this transaction read" if key in mine.read_file_keys else "from a table this transaction read in full"
            raise ConcurrentDeleteReadError(f"{who} removed {path}, {what}", conflicting_file=path, **facts)
    for body in winner.removes:
        key = key_of(body)
        if key in mine.removed_keys:
            path = body.get("path")
            raise ConcurrentDeleteDeleteError(
                f"{who} already removed {path}, which this transaction also removes", conflicting_file=path, **facts
            )


__all__ = ["TransactionFootprint", "WinningCommit", "check_conflicts"]
