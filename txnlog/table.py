"""Table and Snapshot: the public read API.

A Snapshot is a pure function of the log at one version. ``Table`` finds snapshots, walks
history, and (in :mod:`txnlog.txn`) starts transactions.
"""

from __future__ import annotations

import datetime as _dt
import os
from urllib.parse import unquote
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pyarrow as pa

from txnlog import properties as props
from txnlog.errors import TableAlreadyExistsError, TxnLogError, VersionNotFoundError
from txnlog.log.actions import CommitInfo, DomainMetadata, Metadata, Protocol
from txnlog.log.features import check_readable
from txnlog.log.filenames import LOG_DIR
from txnlog.log.replay import Commit, TableState, advance, read_commits, replay
from txnlog.log.segment import LogListing, build_segment, commit_file, list_log
from txnlog.storage import LogStore, open_store

if TYPE_CHECKING:
    from txnlog.predicates import FilePredicate
    from txnlog.txn.isolation import IsolationLevel
    from txnlog.txn.transaction import CommitResult, OptimisticTransaction


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    timestamp: int
    commit_info: CommitInfo | None

    def to_dict(self) -> dict[str, Any]:
        from txnlog.log.codec import encode_action

        body = encode_action(self.commit_info)["commitInfo"] if self.commit_info else {}
        return {**body, "version": self.version, "timestamp": self.timestamp}


class Snapshot:
    """The state of a table at one version."""

    def __init__(self, table: "Table", state: TableState) -> None:
        self.table = table
        self._state = state
        check_readable(state.protocol, f"table {table.uri} at version {state.version}")

    def __repr__(self) -> str:
        return f"Snapshot({self.table.uri!r}, version={self.version}, files={self.num_files})"

    @property
    def version(self) -> int:
        return self._state.version

    @property
    def protocol(self) -> Protocol:
        return self._state.protocol

    @property
    def metadata(self) -> Metadata:
        return self._state.metadata

    @property
    def schema(self) -> pa.Schema:
        return self._state.metadata.schema

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self._state.metadata.partition_columns

    @property
    def configuration(self) -> Mapping[str, str]:
        return self._state.metadata.configuration

    def table_property(self, prop: "props.TableProperty[Any]") -> Any:
        """A typed table property, e.g. ``snap.table_property(txnlog.properties.CHECKPOINT_INTERVAL)``."""
        return prop.get(self._state.metadata.configuration)

    @property
    def num_files(self) -> int:
        return self._state.files.num_rows

    def files(self, predicate: "str | FilePredicate | None" = None) -> pa.Table:
        """One row per live file (the columns of ``txnlog.log.file_actions.FILES_SCHEMA``).

        With a SQL ``predicate``, only files that may hold matching rows, judged by partition
        values and min/max stats.
        """
        files = self._state.files
        if predicate is None:
            return files
        return self.predicate(predicate).filter(files)

    def file_uris(self, predicate: "str | FilePredicate | None" = None) -> list[str]:
        """Absolute URIs of the live data files (``add.path`` is URI-encoded and may be relative)."""
        return [self.table.data_file_uri(p) for p in self.files(predicate).column("path").to_pylist()]

    def predicate(self, predicate: "str | FilePredicate") -> "FilePredicate":
        from txnlog.predicates import FilePredicate, physical_names

        if isinstance(predicate, FilePredicate):
            return predicate
        return FilePredicate(predicate, self.schema, self.partition_columns, physical_names(self.schema, self.configuration))

    def tombstones(self) -> pa.Table:
        """Removed files not live again (the columns of ``TOMBSTONES_SCHEMA``), for vacuum."""
        return self._state.tombstones()

    def app_transaction_version(self, app_id: str) -> int | None:
        txn = self._state.app_transactions.get(app_id)
        return txn.version if txn else None

    @property
    def app_transactions(self) -> Mapping[str, Any]:
        return dict(self._state.app_transactions)

    def domain_metadata(self, domain: str) -> str | None:
        d = self._state.domains.get(domain)
        return d.configuration if d else None

    @property
    def domains(self) -> Mapping[str, DomainMetadata]:
        return dict(self._state.domains)

    def update(self) -> "Snapshot":
        """This snapshot brought up to the latest version, reading only the commits after it."""
        listing = list_log(self.table.store, self.version + 1)
        newer = sorted(v for v in listing.commits if v > self.version)
        if not newer:
            return self
        files = [commit_file(self.table.store, listing, v) for v in range(self.version + 1, newer[-1] + 1)]
        if any(f is None for f in files):
            # The commits we need were cleaned up: rebuild from the log, not via table.snapshot(),
            # whose cache of the latest snapshot would call back into this update.
            return Snapshot(self.table, replay(self.table.store, build_segment(self.table.store)))
        commits = read_commits(self.table.store, files)  # type: ignore[arg-type]
        return Snapshot(self.table, advance(self._state, commits, f"{self.table.uri} version {newer[-1]}"))


def _to_millis(ts: int | float | str | _dt.datetime | _dt.date) -> int:
    if isinstance(ts, _dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=_dt.timezone.utc)
        return int(ts.timestamp() * 1000)
    if isinstance(ts, _dt.date):
        return _to_millis(_dt.datetime(ts.year, ts.month, ts.day, tzinfo=_dt.timezone.utc))
    if isinstance(ts, str):
        return _to_millis(_dt.datetime.fromisoformat(ts.replace("Z", "+00:00")))
    return int(ts)


class Table:
    """A Delta table at ``uri`` (a path or a ``file://``, ``memory://``, ``s3://``, ``az://``,
    ``gs://`` URI)."""

    def __init__(self, uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
        from txnlog.txn.hooks import default_hooks

        self.store: LogStore = open_store(uri, storage_options)
        self.storage_options = dict(storage_options or {})
        #: Post-commit hooks of transactions on this table (a copy of ``txnlog.txn.hooks.default_hooks``).
        self.hooks = default_hooks.copy()
        # The latest state seen, not a Snapshot: a Snapshot refers to its Table, and a cycle
        # would keep large file lists alive until the cyclic garbage collector runs.
        self._latest_state: TableState | None = None

    @property
    def uri(self) -> str:
        return self.store.root_uri

    def __repr__(self) -> str:
        return f"Table({self.uri!r})"

    def data_file_uri(self, path: str) -> str:
        """The absolute URI of a data file named by an add or remove action."""
        if "://" in path:
            return path
        return self.store.uri_of(unquote(path))

    def exists(self) -> bool:
        return LogListing.of(self.store.list_from(LOG_DIR)).latest_version() is not None

    def latest_version(self) -> int:
        return build_segment(self.store).version

    def snapshot(
        self, version: int | None = None, timestamp: int | float | str | _dt.datetime | None = None
    ) -> Snapshot:
        """The table at ``version``, or as of ``timestamp`` (ms since the epoch, ISO string or
        datetime; the last commit at or before it), or the latest."""
        if version is not None and timestamp is not None:
            raise TxnLogError("pass version or timestamp, not both")
        if timestamp is not None:
            version = self.version_at(timestamp)
        if version is None and self._latest_state is not None:
            # Same answer as a full replay: only the commits after the cached version are read.
            snapshot = Snapshot(self, self._latest_state).update()
        else:
            snapshot = Snapshot(self, replay(self.store, build_segment(self.store, version)))
        if version is None:
            self._latest_state = snapshot._state
        return snapshot

    # -- writing ----------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        uri: str | os.PathLike[str],
        schema: "pa.Schema | str | Mapping[str, Any]",
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        *,
        mode: str = "error",
        name: str | None = None,
        description: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> "Table":
        """Create a table at ``uri`` with a pyarrow schema or a Delta schema (JSON text or dict).

        ``mode``: "error" (the default) raises TableAlreadyExistsError if a table is there,
        "ignore" returns the existing table, "overwrite" replaces its schema and removes its files.
        Protocol (1, 2) unless a property needs more (see docs/concurrency.md and features).
        """
        from txnlog.txn.transaction import OptimisticTransaction

        table = cls(uri, storage_options)
        params = {"partitionBy": list(partition_by), "properties": dict(properties or {})}
        if mode not in ("error", "ignore", "overwrite"):
            raise TxnLogError(f"mode must be 'error', 'ignore' or 'overwrite', got {mode!r}")
        if table.exists():
            if mode == "error":
                raise TableAlreadyExistsError(f"a Delta table already exists at {table.uri}", uri=table.uri)
            if mode == "ignore":
                return table
            txn = table.transaction("CREATE OR REPLACE TABLE", operation_parameters=params)
            txn.remove_files(txn.read_whole_table())
        else:
            txn = OptimisticTransaction(table, None, operation="CREATE TABLE", operation_parameters=params)
        txn.update_metadata(
            schema=schema,
            partition_columns=tuple(partition_by),
            configuration=dict(properties or {}),
            name=name,
            description=description,
        )
        txn.commit()
        return table

    def transaction(
        self,
        operation: str = "WRITE",
        isolation: "IsolationLevel | str | None" = None,
        *,
        operation_parameters: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> "OptimisticTransaction":
        """A transaction reading the latest snapshot; use it as a context manager."""
        from txnlog.txn.transaction import OptimisticTransaction

        return OptimisticTransaction(
            self, self.snapshot(), operation=operation, isolation=isolation, operation_parameters=operation_parameters, **options
        )

    def append(
        self,
        data: pa.Table | pa.RecordBatchReader,
        *,
        app_id: str | None = None,
        app_version: int | None = None,
    ) -> "CommitResult | None":
        """Write ``data`` as new Parquet files and commit them as a blind append.

        With ``app_id`` and ``app_version`` the append is idempotent: it is skipped (returning
        None) when that app has already committed ``app_version`` or later.
        """
        with self.transaction("WRITE", operation_parameters={"mode": "Append"}) as txn:
            if app_id is not None:
                if app_version is None:
                    raise TxnLogError("app_version is required with app_id")
                done = txn.app_transaction_version(app_id)
                if done is not None and done >= app_version:
                    txn.abort()
                    return None
                txn.set_app_transaction(app_id, app_version)
            txn.write(data)
        return txn.result

    # -- history and time -------------------------------------------------------------------

    def _commit_timestamps(self, listing: LogListing, commits: dict[int, Commit]) -> list[tuple[int, int]]:
        """(version, commit time) for every commit still in the log, oldest first.

        Uses in-commit timestamps from the version they were enabled at; file modification
        times before, made monotonic as Delta does. The commits it had to read are left in
        ``commits`` for the caller.
        """
        versions = sorted(listing.commits)

        def has_ict(v: int) -> bool:
            if v not in commits:
                commits[v] = read_commits(self.store, [listing.commits[v]])[0]
            info = commits[v].commit_info()
            return info is not None and info.in_commit_timestamp is not None

        # In-commit timestamps, once enabled, are on every later commit: find where they start.
        ict_from = len(versions)
        if versions and has_ict(versions[-1]):
            lo, hi = 0, len(versions) - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if has_ict(versions[mid]):
                    hi = mid
                else:
                    lo = mid + 1
            ict_from = lo
            missing = [listing.commits[v] for v in versions[ict_from:] if v not in commits]
            commits.update({c.version: c for c in read_commits(self.store, missing)})
        ict_commits = {v: commits[v] for v in versions[ict_from:]}
        out: list[tuple[int, int]] = []
        previous = None
        for v in versions:
            ts = ict_commits[v].timestamp if v in ict_commits else listing.commits[v].modification_time
            if previous is not None and ts <= previous and v not in ict_commits:
                ts = previous + 1
            out.append((v, ts))
            previous = ts
        return out

    def version_at(self, timestamp: int | float | str | _dt.datetime) -> int:
        """The last version committed at or before ``timestamp``."""
        ts = _to_millis(timestamp)
        listing = list_log(self.store)
        stamps = self._commit_timestamps(listing, {})
        if not stamps:
            raise VersionNotFoundError(f"{self.uri} has no commits")
        candidates = [v for v, t in stamps if t <= ts]
        if not candidates:
            raise VersionNotFoundError(
                f"{self.uri}: timestamp {ts} is before the earliest commit still in the log "
                f"(version {stamps[0][0]} at {stamps[0][1]})"
            )
        return candidates[-1]

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """The commitInfo of each version still in the log, newest first."""
        listing = list_log(self.store)
        commits: dict[int, Commit] = {}
        stamps = self._commit_timestamps(listing, commits)
        if limit is not None:
            stamps = stamps[-limit:] if limit > 0 else []
        stamps.reverse()
        missing = [listing.commits[v] for v, _ in stamps if v not in commits]
        commits.update({c.version: c for c in read_commits(self.store, missing)})
        return [HistoryEntry(v, t, commits[v].commit_info()) for v, t in stamps]


__all__ = ["HistoryEntry", "Snapshot", "Table"]
