"""Table: the entry point. It opens snapshots, starts transactions, walks history.

A :class:`~txnlog.snapshot.Snapshot` is the read view below it; an
:class:`~txnlog.txn.transaction.OptimisticTransaction` the write path. Neither holds the Table:
both get its :class:`~txnlog.storage.TableLocation`, and a transaction hands its post-commit state
back through the ``on_commit`` callback (so the next snapshot need not re-read that commit).
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, overload

import pyarrow as pa

from txnlog import dml
from txnlog.dml import (
    ClauseSpec,
    DmlResult,
    MergeAliases,
    MergeBuilder,
    MergeMetrics,
    MergePlan,
    RowChangeMetrics,
    RowChangePlan,
)
from txnlog.dml.merging import source_table
from txnlog.dml.rows import open_snapshot as dml_snapshot
from txnlog.dml.writes import ArrowRemoval, WriteOptions, WritePlan, evolve_schema, open_write, plan_write, stage_write
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, TableNotFoundError
from txnlog.log import history as _history
from txnlog.log.changes import VersionChanges, changes_in_range
from txnlog.log.filenames import LOG_DIR
from txnlog.log.history import HistoryEntry
from txnlog.log.segment import LogListing, build_segment
from txnlog.log.table_state import TableState
from txnlog.optimize import OptimizeParameters
from txnlog.optimize import optimize as run_optimize
from txnlog.read import change_batches, change_schema
from txnlog.snapshot import Snapshot, load_state
from txnlog.storage import LogStore, TableLocation, normalize_uri, open_store
from txnlog.storage.location import Located
from txnlog.txn.alter import TableAlterer
from txnlog.txn.create import create_table
from txnlog.txn.hooks import HookRegistry, default_hooks
from txnlog.txn.isolation import IsolationLevel
from txnlog.txn.transaction import CommitResult, OptimisticTransaction
from txnlog.write import ArrowData, arrow_schema_of, as_reader

Timestamp = int | float | str | _dt.datetime | _dt.date


def to_millis(ts: Timestamp) -> int:
    """Milliseconds since the epoch of a timestamp given as ms, an ISO-8601 string, a datetime
    (naive means UTC) or a date."""
    if isinstance(ts, bool):
        raise InvalidArgumentTypeError(f"timestamp must be ms since the epoch, an ISO-8601 string or a datetime, got {ts!r}")
    if isinstance(ts, _dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=_dt.timezone.utc)
        return int(ts.timestamp() * 1000)
    if isinstance(ts, _dt.date):
        return to_millis(_dt.datetime(ts.year, ts.month, ts.day, tzinfo=_dt.timezone.utc))
    if isinstance(ts, str):
        try:
            parsed = _dt.datetime.fromisoformat(ts.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidArgumentError(f"timestamp {ts!r} is not ISO-8601 (e.g. '2024-05-01T12:00:00Z')") from None
        return to_millis(parsed)
    if isinstance(ts, (int, float)):
        return int(ts)
    raise InvalidArgumentTypeError(f"timestamp must be ms since the epoch, an ISO-8601 string or a datetime, got {type(ts).__name__}")


class Table(Located):
    """A Delta table at ``uri`` (a path or a ``file://``, ``memory://``, ``s3://``, ``az://``,
    ``gs://`` URI).

    ``store``: a :class:`~txnlog.storage.LogStore` to use instead of opening one for ``uri``
    (for example a wrapper that injects faults). ``allow_absolute_paths``: resolve data file
    paths outside the table root, as shallow clones use, instead of refusing them.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        storage_options: Mapping[str, Any] | None = None,
        *,
        store: LogStore | None = None,
        allow_absolute_paths: bool = False,
    ) -> None:
        if store is not None:
            if normalize_uri(uri) != store.root_uri:
                raise InvalidArgumentError(f"store is rooted at {store.root_uri}, not at the table URI {uri}")
        else:
            store = open_store(uri, storage_options)
        #: What snapshots and transactions of this table hold instead of the Table.
        self.location = TableLocation(store, dict(storage_options or {}), allow_absolute_paths)
        #: Post-commit hooks of transactions on this table (a copy of the default registry).
        self.hooks: HookRegistry = default_hooks.copy()
        # The latest state seen, not a Snapshot: a Snapshot refers to its Table, and a cycle
        # would keep large file lists alive until the cyclic garbage collector runs.
        self._latest_state: TableState | None = None

    @classmethod
    def from_location(cls, location: TableLocation) -> Table:
        """The table at ``location`` (sharing its store), e.g. for a post-commit hook."""
        return cls(location.uri, location.storage_options, store=location.store, allow_absolute_paths=location.allow_absolute_paths)


    def __repr__(self) -> str:
        return f"Table({self.uri!r})"

    def data_file_uri(self, path: str) -> str:
        """The absolute URI of a data file named by an add or remove action (refusing escapes)."""
        return self.location.locate(path).uri

    def exists(self) -> bool:
        return LogListing.of(self.store.list_from(LOG_DIR)).latest_version() is not None

    def latest_version(self) -> int:
        return build_segment(self.store).version

    def _snapshot(self, state: TableState) -> Snapshot:
        return Snapshot(self.location, state)

    def snapshot(self, version: int | None = None, timestamp: Timestamp | None = None) -> Snapshot:
        """The table at ``version``, or as of ``timestamp`` (ms since the epoch, ISO string or
        datetime; the last commit at or before it), or the latest."""
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("pass version or timestamp, not both")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise InvalidArgumentTypeError(f"version must be an int, got {type(version).__name__}")
        if timestamp is not None:
            version = self.version_at(timestamp)
        if version is None and self._latest_state is not None:
            # Same answer as a full replay: only the commits after the cached version are read.
            snapshot = self._snapshot(self._latest_state).update()
        elif version is not None and self._latest_state is not None and self._latest_state.version == version:
            snapshot = self._snapshot(self._latest_state)  # a version's state never changes
        else:
            snapshot = self._snapshot(load_state(self.store, version))
        if version is None:
            self._remember(snapshot.state)
        return snapshot

    def _remember(self, state: TableState) -> None:
        """Keep ``state`` as the latest known, unless a newer one is already known."""
        if self._latest_state is None or self._latest_state.version < state.version:
            self._latest_state = state

    # -- writing ----------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        uri: str | os.PathLike[str],
        schema: pa.Schema | str | Mapping[str, Any] | ArrowData,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        *,
        mode: str = "error",
        name: str | None = None,
        description: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        store: LogStore | None = None,
        cluster_by: Sequence[str | Sequence[str]] = (),
    ) -> Table:
        """Create a table at ``uri`` with a pyarrow schema, a Delta schema (JSON text or dict),
        an object exporting ``__arrow_c_schema__``, or the schema of Arrow-compatible data (as
        :meth:`append` takes; no row is written: :func:`txnlog.write_table` creates and writes in
        one commit).

        ``mode``: "error" (the default) raises TableAlreadyExistsError if a table is there,
        "ignore" returns the existing table, "overwrite" replaces its schema and removes its files.
        Protocol (1, 2) unless a property needs more (see docs/properties.md). ``cluster_by``:
        the clustering columns of a clustered table (see docs/schema.md).
        """
        table = cls(uri, storage_options, store=store)
        if not isinstance(schema, (str, Mapping)):
            arrow = arrow_schema_of(schema)
            if arrow is None:
                raise InvalidArgumentTypeError(
                    f"schema must be a pyarrow Schema, a Delta schema (JSON text or dict) or Arrow-compatible data, got {type(schema).__name__}")
            schema = arrow
        create_table(
            table.location,
            schema,
            partition_by=partition_by,
            properties=properties,
            mode=mode,
            name=name,
            description=description,
            hooks=table.hooks,
            on_commit=table._remember,
            cluster_by=cluster_by,
        )
        return table

    def transaction(
        self,
        operation: str = "WRITE",
        isolation: IsolationLevel | str | None = None,
        *,
        operation_parameters: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> OptimisticTransaction:
        """A transaction reading the latest snapshot; use it as a context manager."""
        options.setdefault("on_commit", self._remember)
        options.setdefault("hooks", self.hooks)
        return OptimisticTransaction(
            self.location, self.snapshot(), operation=operation, isolation=isolation, operation_parameters=operation_parameters, **options
        )

    @property
    def alter(self) -> TableAlterer:
        """ALTER TABLE (deltalake's names): ``add_columns``, ``drop_columns``,
        ``rename_column``, ``set_column_type``, ``set_not_null``, ``drop_not_null``,
        ``set_column_comment``, ``set_table_properties``, ``unset_table_properties``,
        ``add_constraint``, ``drop_constraint``, ``cluster_by``; each one commit (see docs/schema.md)."""
        return TableAlterer(lambda operation, params: self.transaction(operation, operation_parameters=params))

    def create_transaction(
        self, operation: str = "CREATE TABLE", *, operation_parameters: Mapping[str, Any] | None = None, **options: Any
    ) -> OptimisticTransaction:
        """A transaction that creates this table: it reads no snapshot, and its first call must be
        ``update_metadata`` (the schema)."""
        options.setdefault("hooks", self.hooks)
        return OptimisticTransaction(self.location, None, operation=operation, operation_parameters=operation_parameters, **options)

    def append(
        self,
        data: ArrowData,
        *,
        app_id: str | None = None,
        app_version: int | None = None,
        schema_mode: str | None = None,
    ) -> CommitResult | None:
        """Write ``data`` (any Arrow-compatible data: a pyarrow Table, RecordBatch,
        RecordBatchReader or Dataset, a pandas or polars DataFrame, an object exporting
        ``__arrow_c_stream__``; streamed inputs are written as they are read) as new Parquet files
        and commit them as a blind append; None when nothing was committed (no rows).

        With ``app_id`` and ``app_version`` the append is idempotent: it is skipped (returning
        None) when that app has already committed ``app_version`` or later.
        ``schema_mode="merge"``: evolve the schema as :meth:`write` does.
        """
        if app_id is not None and app_version is None:
            raise InvalidArgumentError("app_version is required with app_id")
        return self._write_arrow(data, WriteOptions("append", app_id=app_id, app_version=app_version, schema_mode=schema_mode), self.snapshot())

    def write(
        self,
        data: ArrowData,
        *,
        mode: str = "append",
        partition_by: Sequence[str] | None = None,
        replace_where: str | None = None,
        properties: Mapping[str, str] | None = None,
        app_id: str | None = None,
        app_version: int | None = None,
        merge_schema: bool = False,
        partition_overwrite_mode: str = "static",
        schema_mode: str | None = None,
        target_file_size: int | None = None,
    ) -> CommitResult | None:
        """Write ``data`` in one commit, in any mode of the core write planner
        (:func:`txnlog.dml.plan_write`, which ``txnlog.spark.write`` and the Spark data source
        use too); the committed version, or None when nothing was committed.

        ``mode``: "append"; "overwrite" replaces every row, or with ``replace_where`` only the
        rows matching it (every written row must match it too); "error" refuses an existing
        table; "ignore" leaves one alone. A table that does not exist yet is created with the
        data's schema, ``partition_by`` and ``properties``. ``partition_overwrite_mode="dynamic"``:
        an overwrite replaces only the partitions the data has rows in. ``app_id``/``app_version``
        make the write idempotent. ``schema_mode="merge"`` (``merge_schema=True``) adds the data's
        new columns (nested too) and, on a table with ``delta.enableTypeWidening``, widens
        columns to the data's wider types; ``schema_mode="overwrite"`` with ``mode="overwrite"``
        replaces the schema, and with ``partition_by`` the partitioning (see docs/schema.md).
        data's schema. ``data``: any Arrow-compatible data, as for :meth:`append`.
        """
        options = WriteOptions(mode, tuple(partition_by) if partition_by is not None else None, replace_where, dict(properties or {}),
                               app_id, app_version, merge_schema, target_file_size, partition_overwrite_mode=partition_overwrite_mode,
                               schema_mode=schema_mode)
        return self._write_arrow(data, options, self._snapshot_if_any())

    def _snapshot_if_any(self) -> Snapshot | None:
        try:
            return self.snapshot()
        except TableNotFoundError:
            return None

    def _write_arrow(self, data: Any, options: WriteOptions, snapshot: Snapshot | None) -> CommitResult | None:
        """A whole write in this process: plan, open, write ``data`` with txnlog's writer (each
        batch conformed, and checked against a replaceWhere), stage, record, commit."""
        reader = as_reader(data, snapshot.schema if snapshot is not None else None)
        plan = plan_write(self.location, snapshot, reader.schema, options)
        if plan.context is None:
            return None
        txn = open_write(plan, self.location, snapshot, hooks=self.hooks, on_commit=self._remember)
        if txn is None:
            return None
        with txn:
            written = plan.context.write(pa.RecordBatchReader.from_batches(reader.schema, plan.check_rows(reader)), store=self.store)
            result = stage_write(txn, plan, written.files, ArrowRemoval(txn))
            if result is None:
                return None
            txn.set_operation_metrics(**result.metrics)
        return txn.result

    def plan_write(self, data_schema: pa.Schema, options: WriteOptions, *, table_schema: pa.Schema | str | None = None) -> WritePlan:
        """The core write planner's plan (:func:`txnlog.dml.plan_write`) for rows of
        ``data_schema`` written to this table as it is now (or to a new table, with
        ``table_schema``, default the data's). Engines write the files the plan says, then
        commit through :meth:`open_write` and :func:`txnlog.dml.stage_write`."""
        return plan_write(self.location, self._snapshot_if_any(), data_schema, options, table_schema=table_schema)

    def open_write(self, plan: WritePlan, *, latest: bool = False) -> OptimisticTransaction | None:
        """The transaction committing ``plan`` (:func:`txnlog.dml.open_write`): reading the
        version it was planned on, or with ``latest`` the table as it is now (a stream's later
        batch, whose files were written for the planned schema); None when its app version is
        already committed."""
        if latest:
            snapshot = self._snapshot_if_any()
        else:
            snapshot = self.snapshot(version=plan.read_version) if plan.read_version >= 0 else None
        return open_write(plan, self.location, snapshot, hooks=self.hooks, on_commit=self._remember)

    # -- row-level changes ------------------------------------------------------------------
    #
    # Each opens a transaction, plans the change and runs it with txnlog.dml, records the plan's
    # parameters and the metrics in the commit, and commits. A change that touches no row
    # commits nothing and returns None (as append() does when skipped); the metrics are in the
    # commit's operationMetrics (``history(1)[0]``), not returned.

    def delete(self, predicate: str, *, isolation: IsolationLevel | str | None = None) -> CommitResult | None:
        """``DELETE WHERE predicate`` (SQL over the table's columns); the committed version, or
        None when no row matched. Deletion vectors where the table enables them, else the files
        holding a matching row are rewritten."""
        with self.transaction("DELETE", isolation) as txn:
            plan = RowChangePlan.delete(dml_snapshot(txn, "delete"), predicate, config=txn.table_configuration)
            return self._commit_if_changed(txn, plan.parameters, dml.run_row_change(txn, plan))

    def update(
        self, predicate: str | None = None, set: Mapping[str, str] | None = None, *, isolation: IsolationLevel | str | None = None  # noqa: A002
    ) -> CommitResult | None:
        """``UPDATE SET column = expression ... WHERE predicate`` (every row when ``predicate`` is
        None); ``set`` maps columns to SQL expressions over the row. The committed version, or
        None when no row matched."""
        with self.transaction("UPDATE", isolation) as txn:
            plan = RowChangePlan.update(dml_snapshot(txn, "update"), predicate, set or {}, config=txn.table_configuration)
            return self._commit_if_changed(txn, plan.parameters, dml.run_row_change(txn, plan))

    def optimize(
        self,
        predicate: str | None = None,
        *,
        target_size: int | None = None,
        max_concurrent_tasks: int | None = None,
        min_files: int = 2,
        max_attempts: int = 5,
        z_order_by: Sequence[str] = (),
    ) -> CommitResult | None:
        """``OPTIMIZE`` (compaction): rewrite the small files of each partition ``predicate``
        selects (SQL over partition columns only; every partition when None), and files whose
        deletion vector deletes more than ``txnlog.optimize.maxDeletedRowsRatio`` of their rows,
        into files of ``target_size`` bytes (default: ``delta.targetFileSize``), as a
        ``dataChange=false`` commit; up to ``max_concurrent_tasks`` bins are rewritten at once
        (default: one per core). The plan is :func:`txnlog.optimize.plan_optimize`, the same as
        Spark's OPTIMIZE; a conflicting commit makes it re-plan, up to ``max_attempts`` times.
        On a table with row tracking every row keeps its row id, so concurrent merge-on-read DML
        commits through it (see docs/concurrency.md). The committed version, or None when there
        was nothing to compact.

        ``z_order_by`` (an unclustered table; delta-spark's ``OPTIMIZE ... ZORDER BY``): every
        file of each selected partition is rewritten in Z-order over these columns, so that a
        filter on any of them skips most files. On a clustered table (``cluster_by``) OPTIMIZE
        clusters instead: the files no earlier OPTIMIZE clustered are rewritten along a Hilbert
        curve over the clustering columns (see docs/maintenance.md)."""
        parameters = OptimizeParameters(
            predicate=predicate, target_size=target_size, max_concurrent_tasks=max_concurrent_tasks, min_files=min_files,
            z_order_by=tuple(z_order_by),
        )
        result = run_optimize(lambda operation, params: self.transaction(operation, operation_parameters=params), parameters,
                              max_attempts=max_attempts)
        return result.version

    @overload
    def merge(  # no clause keyword: the builder
        self,
        source: ArrowData,
        on: str | Sequence[str] | None = None,
        *,
        predicate: str | None = None,
        source_alias: str = "s",
        target_alias: str = "t",
        when_matched_update: None = None,
        when_matched_delete: Literal[False] = False,
        when_not_matched_insert: None = None,
        isolation: IsolationLevel | str | None = None,
        schema_mode: str | None = None,
    ) -> MergeBuilder[CommitResult | None]: ...

    @overload
    def merge(
        self,
        source: ArrowData,
        on: str | Sequence[str] | None = None,
        *,
        predicate: str | None = None,
        source_alias: str = "s",
        target_alias: str = "t",
        when_matched_update: Mapping[str, str] | str | None = None,
        when_matched_delete: bool | str = False,
        when_not_matched_insert: Mapping[str, str] | str | None = None,
        isolation: IsolationLevel | str | None = None,
        schema_mode: str | None = None,
    ) -> CommitResult | None: ...

    def merge(
        self,
        source: ArrowData,
        on: str | Sequence[str] | None = None,
        *,
        predicate: str | None = None,
        source_alias: str = "s",
        target_alias: str = "t",
        when_matched_update: Mapping[str, str] | str | None = None,
        when_matched_delete: bool | str = False,
        when_not_matched_insert: Mapping[str, str] | str | None = None,
        isolation: IsolationLevel | str | None = None,
        schema_mode: str | None = None,
    ) -> MergeBuilder[CommitResult | None] | CommitResult | None:
        """``MERGE INTO`` this table (alias ``target_alias``, default ``t``) ``USING source``
        (alias ``source_alias``, default ``s``; any Arrow-compatible data, held in memory).

        ``on`` (or deltalake's name, ``predicate``): a key column, a list of them, or a SQL
        condition with at least one ``t.x = s.y``. Without clause keywords it returns a
        :class:`~txnlog.dml.MergeBuilder`: add clauses (``when_matched_update``,
        ``when_matched_update_all``, ``when_matched_delete``, ``when_not_matched_insert``,
        ``when_not_matched_insert_all``, ``when_not_matched_by_source_update``,
        ``when_not_matched_by_source_delete``, each with an optional predicate; a row takes the
        first clause of its kind whose predicate holds) and ``execute()``, which commits and
        returns the :class:`CommitResult`, or None when nothing changed.

        The keyword form runs at once: ``when_matched_update``: {column: expression} or ``"*"``;
        ``when_matched_delete``: True or a condition, checked before the update;
        ``when_not_matched_insert``: {column: expression over ``s``} or ``"*"``. A target row
        that two source rows match raises DuplicateMatchError before anything is written.

        ``schema_mode="merge"`` (delta-spark's ``schema.autoMerge.enabled``): when a clause
        takes ``"*"``, the source's columns the table lacks are added to it (and, on a table
        with ``delta.enableTypeWidening``, its columns widened to the source's types) in the
        MERGE's commit; ``UPDATE SET *`` then leaves target columns the source lacks as they
        were, ``INSERT *`` leaves them NULL."""
        if (on is None) == (predicate is None):
            raise InvalidArgumentError("merge takes its condition as on= or predicate=, exactly one of them")
        if schema_mode not in (None, "merge"):
            raise InvalidArgumentError(f"merge: schema_mode must be None or 'merge', got {schema_mode!r}")
        aliases = MergeAliases(target_alias, source_alias)
        condition = aliases.on(on if on is not None else predicate)  # type: ignore[arg-type]

        def run(specs: list[ClauseSpec]) -> CommitResult | None:
            with self.transaction("MERGE", isolation) as txn:
                rows = source_table(source)
                snapshot = dml_snapshot(txn, "merge")
                evolving = schema_mode == "merge"
                if evolving and any(isinstance(spec.assignments, str) for spec in specs):  # only "*" takes new columns
                    evolve_schema(txn, rows.schema)
                plan = MergePlan.build(snapshot, rows.column_names, condition, specs, config=txn.table_configuration, schema_evolution=evolving)
                return self._commit_if_changed(txn, plan.parameters, dml.run_merge(txn, plan, rows))

        builder: MergeBuilder[CommitResult | None] = MergeBuilder(run, aliases)
        if not builder.add_keyword_clauses(when_matched_update, when_matched_delete, when_not_matched_insert):
            return builder
        return builder.execute()

    @staticmethod
    def _commit_if_changed(txn: OptimisticTransaction, parameters: Mapping[str, Any],
                           result: RowChangeMetrics | MergeMetrics | DmlResult) -> CommitResult | None:
        """Record what the plan and its run say in the commit, and commit; None (and no commit)
        when nothing changed."""
        if not result.changed:
            txn.abort()
            return None
        txn.operation_parameters.update(parameters)
        txn.set_operation_metrics(**result.operation_metrics())
        return txn.commit()

    # -- history and time -------------------------------------------------------------------

    def version_at(self, timestamp: Timestamp) -> int:
        """The last version committed at or before ``timestamp``."""
        return _history.version_at(self.store, to_millis(timestamp))

    def first_version_at_or_after(self, timestamp: Timestamp) -> int:
        """The first version committed at or after ``timestamp`` (the earliest still in the log
        for an earlier time), where a stream or a change feed starting at ``timestamp`` begins."""
        return _history.first_version_at_or_after(self.store, to_millis(timestamp))

    def commit_timestamp(self, version: int) -> int:
        """When ``version`` was committed (ms since the epoch), as :meth:`history` reports it."""
        return _history.commit_timestamp(self.store, version)

    # -- the change data feed ----------------------------------------------------------------

    def changes(
        self,
        starting_version: int | None = None,
        ending_version: int | None = None,
        *,
        starting_timestamp: Timestamp | None = None,
        ending_timestamp: Timestamp | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The rows changed from ``starting_version`` (or the first commit at or after
        ``starting_timestamp``) to ``ending_version`` (or the last commit at or before
        ``ending_timestamp``; else the latest), both included: the table's columns (or
        ``columns``) plus ``_change_type`` (insert, delete, update_preimage,
        update_postimage), ``_commit_version`` and ``_commit_timestamp`` (the in-commit
        timestamp, else the commit file's time, as ``history`` reports it).

        Needs ``delta.enableChangeDataFeed=true`` at every version of the range
        (ChangeDataNotRecordedError names the first without it); a version whose commit file
        expired raises VersionNotFoundError naming it. Rows come in the end version's schema."""
        schema, batches = self._changes(starting_version, ending_version, starting_timestamp, ending_timestamp, columns)
        return pa.Table.from_batches(list(batches), schema=schema)

    def change_batches(
        self,
        starting_version: int | None = None,
        ending_version: int | None = None,
        *,
        starting_timestamp: Timestamp | None = None,
        ending_timestamp: Timestamp | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.RecordBatchReader:
        """:meth:`changes` as a stream of batches, read as they are consumed."""
        schema, batches = self._changes(starting_version, ending_version, starting_timestamp, ending_timestamp, columns)
        return pa.RecordBatchReader.from_batches(schema, batches)

    def _changes(
        self,
        starting_version: int | None,
        ending_version: int | None,
        starting_timestamp: Timestamp | None,
        ending_timestamp: Timestamp | None,
        columns: Sequence[str] | None,
    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        versions = self.change_files(
            starting_version, ending_version, starting_timestamp=starting_timestamp, ending_timestamp=ending_timestamp
        )
        # The end version's schema, as delta-spark reads a range.
        context = self.snapshot(versions[-1].version if versions else None).read_context()
        schema = change_schema(context, columns)
        return schema, change_batches(context, versions, columns=columns, store=self.store)

    def change_files(
        self,
        starting_version: int | None = None,
        ending_version: int | None = None,
        *,
        starting_timestamp: Timestamp | None = None,
        ending_timestamp: Timestamp | None = None,
    ) -> list[VersionChanges]:
        """Where the changes of each version of the range are (what :meth:`changes` reads):
        per version its cdc files, or the files read as inserts and deletes."""
        return changes_in_range(
            self.store,
            starting_version,
            ending_version,
            starting_timestamp=None if starting_timestamp is None else to_millis(starting_timestamp),
            ending_timestamp=None if ending_timestamp is None else to_millis(ending_timestamp),
        )

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """The commitInfo of each version still in the log, newest first (the newest ``limit``)."""
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise InvalidArgumentTypeError(f"limit must be an int, got {type(limit).__name__} {limit!r}")
            if limit < 0:
                raise InvalidArgumentError(f"limit must be >= 0, got {limit}")
        return _history.history(self.store, limit)


def write_table(
    table_or_uri: str | os.PathLike[str] | Table,
    data: ArrowData,
    *,
    mode: str = "error",
    partition_by: Sequence[str] | str | None = None,
    predicate: str | None = None,
    schema_mode: str | None = None,
    configuration: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    target_file_size: int | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
) -> CommitResult | None:
    """Write ``data`` to the Delta table at ``table_or_uri`` in one commit, as deltalake's
    ``write_deltalake`` does; the committed version, or None when nothing was committed.

    ``data``: anything Arrow-compatible (a pyarrow Table, RecordBatch, RecordBatchReader or
    Dataset, a pandas or polars DataFrame, any object exporting ``__arrow_c_stream__``); a
    stream is written as it is read. ``mode``: "error" (the default: refuse an existing table),
    "append", "overwrite" (every row, or with ``predicate`` only the rows matching it: the rest
    of each file it touches is rewritten, and every new row must match it or nothing is
    committed), "ignore" (leave an existing table alone). A table that does not exist is
    created with the data's schema, ``partition_by`` and ``configuration`` (table properties)
    in the same commit as its rows. ``schema_mode``: "merge" adds the data's new columns,
    "overwrite" (with ``mode="overwrite"``) replaces the schema. The plan is the core write
    planner's (:func:`txnlog.dml.plan_write`), the one ``Table.write`` and Spark use.
    """
    table = table_or_uri if isinstance(table_or_uri, Table) else Table(table_or_uri, storage_options)
    if isinstance(table_or_uri, Table) and storage_options is not None:
        raise InvalidArgumentError("storage_options go with a URI; an open Table has its own")
    return table.write(data, mode=mode, partition_by=[partition_by] if isinstance(partition_by, str) else partition_by,
                       replace_where=predicate, properties=configuration, app_id=app_id, app_version=app_version,
                       schema_mode=schema_mode, target_file_size=target_file_size)


__all__ = ["HistoryEntry", "Snapshot", "Table", "to_millis", "write_table"]
