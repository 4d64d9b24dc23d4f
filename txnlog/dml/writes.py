"""The write planner: one owner for every write mode, whichever engine writes the rows.

:func:`plan_write` decides, before any row is written, everything a write of rows of one schema
means for the table: whether it creates the table (and its metadata: schema, partitioning,
properties, column mapping's physical names, drawn once), whether it is skipped (``ignore`` on a
table that exists, an app version already committed), whether a schema is evolved
(``merge_schema``: the one call site of the schema rules), what it removes (every row for an
overwrite, the rows matching ``replace_where`` through a DELETE plan), the rows it may write
(every written row must match ``replace_where``), the commit's operation and parameters, and
the :class:`~txnlog.write.WriteContext` the data files are written with. The
:class:`WritePlan` is picklable: a Spark data source plans on the driver, ships the plan to the
tasks, and commits from another process.

Executing a plan: :func:`open_write` opens the commit's transaction (claiming the app version,
recorded as read), the engine writes the files (``WriteContext.write`` in Python, tasks in
Spark, each batch checked with :meth:`WritePlan.check_rows`), and :func:`stage_write` stages the
removal, the files and their change data, with an engine's :class:`RowRemoval` executing the
row-level part. The change data of each mode: an append needs none; an overwrite, or a
replaceWhere decided by partition values, moves whole files, whose actions are the changes (no
cdc file); a replaceWhere that rewrites rows writes cdc files holding the deleted rows and the
inserted ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog import properties as props
from txnlog.dml.change_data import ChangeData, ChangeRowsOf
from txnlog.dml.metrics import RowChangeMetrics, live_rows
from txnlog.dml.plans import RowChangePlan
from txnlog.dml.rows import run_row_change
from txnlog.errors import (
    InvalidArgumentError,
    ProtocolViolationError,
    SchemaError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from txnlog.expressions import FilePredicate
from txnlog.log import FILES_SCHEMA, AddFile, Metadata
from txnlog.log.codec import encode_action
from txnlog.log.file_actions import table_from_log_dicts
from txnlog.read import ReadContext
from txnlog.schema import arrow_to_delta_schema
from txnlog.snapshot import Snapshot
from txnlog.storage import TableLocation
from txnlog.txn.schema_changes import widening
from txnlog.txn.transaction import OptimisticTransaction
from txnlog.write import IdentityAllocator, WriteContext, write_change_files
from txnlog.write.changes import CHANGE_TYPE_COLUMN

MODES = ("append", "overwrite", "error", "ignore")
#: How a write may change the table's schema: None (not at all), "merge" (add the data's new
#: columns), "overwrite" (the data's schema replaces the table's; with mode="overwrite").
SCHEMA_MODES = (None, "merge", "overwrite")
Mode = Literal["append", "overwrite", "error", "ignore"]


@dataclass(frozen=True)
class WriteOptions:
    """What a write asks for. ``mode``: "append"; "overwrite" replaces every row (or, with
    ``replace_where``, only the rows matching it, and then every written row must match it
    too); "error" refuses an existing table; "ignore" leaves one alone. A table that does not
    exist is created with the data's schema, ``partition_by`` and ``properties``.
    ``partition_overwrite_mode="dynamic"``: an overwrite replaces only the partitions it writes
    rows to. ``app_id``/``app_version`` make the write idempotent. ``schema_mode="merge"`` (or
    ``merge_schema=True``) adds the data's new columns, nested ones too, and applies the type
    widenings delta-spark applies on write (on a table with ``delta.enableTypeWidening``);
    ``schema_mode="overwrite"``, with ``mode="overwrite"``, replaces the schema (and with
    ``partition_by`` the partitioning) by the data's. ``operation`` names the commit (default
    ``WRITE``, or ``CREATE TABLE AS SELECT`` for a new table)."""

    mode: str = "append"
    partition_by: tuple[str, ...] | None = None
    replace_where: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    app_id: str | None = None
    app_version: int | None = None
    merge_schema: bool = False
    target_file_size: int | None = None
    operation: str | None = None
    partition_overwrite_mode: str = "static"
    schema_mode: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {list(MODES)}, got {self.mode!r}")
        if self.schema_mode not in SCHEMA_MODES:
            raise InvalidArgumentError(f"schema_mode must be one of {list(SCHEMA_MODES)}, got {self.schema_mode!r}")
        if self.merge_schema and self.schema_mode not in (None, "merge"):
            raise InvalidArgumentError(f"merge_schema=True contradicts schema_mode={self.schema_mode!r}")
        if self.merge_schema:
            object.__setattr__(self, "schema_mode", "merge")
        if self.schema_mode == "overwrite" and (self.mode != "overwrite" or self.replace_where is not None
                                                or self.partition_overwrite_mode == "dynamic"):
            raise InvalidArgumentError("schema_mode='overwrite' goes with mode='overwrite' replacing every row "
                                       "(no replace_where, no dynamic partition overwrite), as overwriteSchema does in delta-spark")
        if self.replace_where is not None and self.mode != "overwrite":
            raise InvalidArgumentError("replace_where needs mode='overwrite'")
        if self.partition_overwrite_mode not in ("static", "dynamic"):
            raise InvalidArgumentError(f"partition_overwrite_mode must be 'static' or 'dynamic', got {self.partition_overwrite_mode!r}")
        if self.partition_overwrite_mode == "dynamic" and (self.mode != "overwrite" or self.replace_where is not None):
            raise InvalidArgumentError("partition_overwrite_mode='dynamic' goes with mode='overwrite' and no replace_where")
        if (self.app_id is None) != (self.app_version is None):
            raise InvalidArgumentError("app_id and app_version go together")
        if self.target_file_size is not None and self.target_file_size <= 0:
            raise InvalidArgumentError(f"target_file_size must be positive, got {self.target_file_size}")
        if isinstance(self.partition_by, str):
            object.__setattr__(self, "partition_by", (self.partition_by,))
        elif self.partition_by is not None:
            object.__setattr__(self, "partition_by", tuple(self.partition_by))

    @property
    def parameters(self) -> dict[str, Any]:
        """The commit's ``operationParameters``, as delta-spark records them for a write."""
        params: dict[str, Any] = {"mode": self.mode.capitalize(), "partitionBy": list(self.partition_by or [])}
        if self.replace_where is not None:
            params["predicate"] = self.replace_where
        return params


@dataclass(frozen=True)
class WritePlan:
    """What :func:`plan_write` decided. ``context`` None: nothing is written (``skip`` says why)."""

    table_uri: str
    options: WriteOptions
    read_version: int  # -1: the write creates the table
    operation: str
    parameters: dict[str, Any]
    context: WriteContext | None
    metadata: Metadata | None = None  # the metadata the commit sets (new table, evolved schema); None: the table's stays
    skip: Literal["ignore", "applied"] | None = None

    def removal(self, txn: OptimisticTransaction) -> Literal["none", "table", "rows", "partitions"]:
        """What the write removes from the table ``txn`` reads: nothing (an append, or a new
        table), every row, the rows matching ``replace_where``, or (dynamic partition
        overwrite) the partitions it writes to."""
        if self.options.mode != "overwrite" or txn.snapshot is None:
            return "none"
        if self.options.replace_where is not None:
            return "rows"
        return "partitions" if self.options.partition_overwrite_mode == "dynamic" else "table"

    def for_batch(self, mode: str, app_id: str, batch_id: int, operation: str = "STREAMING UPDATE") -> WritePlan:
        """This plan (a stream's, made once) for one micro-batch: its mode, committed as
        ``(app_id, batch_id)`` under ``operation``."""
        options = dataclasses.replace(self.options, mode=mode, replace_where=None, app_id=app_id, app_version=batch_id, operation=operation)
        return dataclasses.replace(self, options=options, operation=operation, parameters=options.parameters)

    def check_rows(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches``, each checked to satisfy ``replace_where`` (:func:`rows_matching`)."""
        if self.options.replace_where is None or self.context is None:
            return iter(batches)
        return rows_matching(self.context, self.options.replace_where, batches)


def replace_where_violation(condition: str, table_uri: str, count: int, example: object | None = None) -> ProtocolViolationError:
    """The error for ``count`` written rows outside a replaceWhere (every writer's)."""
    e_g = "" if example is None else f", e.g. {example}"
    return ProtocolViolationError(f"{count} written row(s) do not match the replaceWhere condition {condition!r} of table {table_uri}{e_g}",
                                  rule="replaceWhere")


def rows_matching(ctx: WriteContext, condition: str, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, each checked to satisfy the SQL ``condition`` (a replaceWhere) on every row
    (a null result does not), else ProtocolViolationError naming a failing row."""
    predicate = FilePredicate(condition, ctx.schema, ctx.partition_columns, ctx.table_configuration.physical_names)
    rows = predicate.rows()  # any boolean SQL: conditions that compute values too
    for batch in batches:
        table = pa.Table.from_batches([batch])
        mask = rows.mask(table)
        matching = int(pc.sum(mask).as_py() or 0)
        if matching != batch.num_rows:
            raise replace_where_violation(condition, ctx.table_uri, batch.num_rows - matching,
                                          table.filter(pc.invert(mask)).slice(0, 1).to_pylist()[0])
        yield batch


def evolved_schema(table: pa.Schema, data: pa.Schema, *, widen: bool = False) -> pa.Schema | None:
    """The table schema a ``schema_mode="merge"`` write of ``data`` leaves: the data's new
    columns appended (nullable), at any depth of a struct, and with ``widen`` (a table with
    ``delta.enableTypeWidening``) a column's type widened to the data's where delta-spark widens
    on write; None when nothing changes. (The one place writes evolve a schema; whether the
    result is legal is decided by :mod:`txnlog.txn.schema_changes`.)"""
    fields = _merged_fields(list(table), list(data), widen)
    merged = pa.schema(fields, metadata=table.metadata)
    return None if merged.equals(table, check_metadata=True) else merged


def evolve_schema(txn: OptimisticTransaction, data_schema: pa.Schema) -> bool:
    """Stage in ``txn`` the schema a ``schema_mode="merge"`` write of ``data_schema`` leaves
    (:func:`evolved_schema`), through ``update_metadata``, which refuses what the table cannot
    take; whether the schema changed. Every write path that evolves a schema (writes, MERGE,
    the Spark writers and sinks) goes through here."""
    wider = evolved_schema(txn.metadata.schema, data_schema, widen=txn.table_configuration.table_property(props.ENABLE_TYPE_WIDENING))
    if wider is None:
        return False
    txn.update_metadata(schema=arrow_to_delta_schema(wider), automatic_widening_only=True)
    return True


def _merged_fields(table: list[pa.Field], data: list[pa.Field], widen: bool) -> list[pa.Field]:
    by_name = {f.name.lower(): f for f in data}
    out = []
    for f in table:
        given = by_name.pop(f.name.lower(), None)
        if given is None:
            out.append(f)
        elif pa.types.is_struct(f.type) and pa.types.is_struct(given.type):
            out.append(f.with_type(pa.struct(_merged_fields(list(f.type), list(given.type), widen))))
        elif widen and _widens_on_write(f.type, given.type):
            out.append(f.with_type(given.type))
        else:
            out.append(f)
    return out + [f.with_nullable(True) for f in data if f.name.lower() in by_name]


def _widens_on_write(table_type: pa.DataType, data_type: pa.DataType) -> bool:
    try:
        old, new = arrow_to_delta_schema(pa.schema([pa.field("c", table_type)])), arrow_to_delta_schema(pa.schema([pa.field("c", data_type)]))
    except SchemaError:
        return False
    old_type, new_type = orjson.loads(old)["fields"][0]["type"], orjson.loads(new)["fields"][0]["type"]
    return isinstance(old_type, str) and isinstance(new_type, str) and widening(old_type, new_type) == "automatic"


def plan_write(location: TableLocation, snapshot: Snapshot | None, data_schema: pa.Schema, options: WriteOptions, *,
               table_schema: pa.Schema | str | None = None) -> WritePlan:
    """Plan a write of rows of ``data_schema`` to the table at ``location`` as ``snapshot``
    shows it (None: no table yet). ``table_schema``: the schema a new table gets (default the
    data's; an engine passes its own Delta schema). Checks everything that can be checked
    before a row is written: the mode, the partitioning, the data's columns and types, the
    replaceWhere condition, an app version already committed."""
    params = options.parameters
    uri = location.uri
    if snapshot is None:
        txn = OptimisticTransaction(location, None, operation=options.operation or "CREATE TABLE AS SELECT", operation_parameters=params)
        txn.update_metadata(schema=table_schema if table_schema is not None else data_schema,
                            partition_columns=tuple(options.partition_by or ()), configuration=dict(options.properties))
    else:
        if options.mode == "error":
            raise TableAlreadyExistsError(f"a Delta table already exists at {uri} (mode='error')", uri=uri)
        if options.mode == "ignore":
            return WritePlan(uri, options, snapshot.version, options.operation or "WRITE", params, None, skip="ignore")
        txn = OptimisticTransaction(location, snapshot, operation=options.operation or "WRITE", operation_parameters=params)
        partitioning = list(txn.metadata.partition_columns)
        if options.schema_mode == "overwrite":
            txn.update_metadata(schema=table_schema if table_schema is not None else data_schema,
                                partition_columns=options.partition_by, replaces_rows=True)
        elif options.partition_by is not None and [c.lower() for c in options.partition_by] != [c.lower() for c in partitioning]:
            raise InvalidArgumentError(f"partition_by={list(options.partition_by)} differs from the partitioning {partitioning} of table {uri}"
                                       " (schema_mode='overwrite' with mode='overwrite' repartitions it)")
        elif options.schema_mode == "merge":
            evolve_schema(txn, data_schema)
        if options.app_id is not None and (done := snapshot.app_transaction_version(options.app_id)) is not None:
            assert options.app_version is not None
            if done >= options.app_version:
                return WritePlan(uri, options, snapshot.version, txn.operation, params, None, skip="applied")
    try:
        txn.table_configuration.check_writable(f"table {uri}")  # before any file is written
        overrides = {} if options.target_file_size is None else {"target_file_size": options.target_file_size}
        ctx = txn.write_context(**overrides)
        ctx.check_schema(data_schema)
        ctx.conform_spec.check_supplied(data_schema.names)
        if any(c.identity is not None for c in ctx.conform_spec.columns):
            # The plan travels to wherever rows are written (this process, Spark tasks): each
            # writer numbers identity values in its own part of one region.
            ctx = dataclasses.replace(ctx, identity=IdentityAllocator().for_tasks())
        if options.replace_where is not None:  # a condition that does not bind fails here, not in every task
            FilePredicate(options.replace_where, ctx.schema, ctx.partition_columns, ctx.table_configuration.physical_names)
        changed = txn.snapshot is None or txn.metadata != txn.snapshot.metadata
        return WritePlan(uri, options, txn.read_version, txn.operation, params, ctx, txn.metadata if changed else None)
    finally:
        txn.abort()  # planning only: the commit opens its own transaction


def open_write(plan: WritePlan, location: TableLocation, snapshot: Snapshot | None, **txn_options: Any) -> OptimisticTransaction | None:
    """The commit's transaction, reading ``snapshot``: the plan's read version (or, for a
    stream's later batch, the table as it is now, whose metadata must still be what the files
    were written for). It sets the plan's metadata and claims the app version (recorded as
    read); None, with nothing staged, when that version is already committed."""
    assert plan.context is not None, "a skipped write has no transaction"
    options = plan.options
    if snapshot is None:
        if plan.metadata is None or plan.read_version >= 0:
            raise TableNotFoundError(f"table {plan.table_uri} no longer exists", uri=plan.table_uri)
        txn = OptimisticTransaction(location, None, operation=plan.operation, operation_parameters=plan.parameters, **txn_options)
        # The planned schema already holds its column mapping ids and physical names, so the
        # same metadata comes out; a new table gets the properties asked for (protocol settings too).
        txn.update_metadata(schema=plan.metadata.schema_string, partition_columns=plan.metadata.partition_columns,
                            configuration={**options.properties, **plan.metadata.configuration})
    else:
        operation = plan.operation if plan.read_version >= 0 else (options.operation or "WRITE")
        txn = OptimisticTransaction(location, snapshot, operation=operation, operation_parameters=plan.parameters, **txn_options)
        if snapshot.version == plan.read_version:
            if plan.metadata is not None:
                txn.update_metadata(schema=plan.metadata.schema_string, partition_columns=plan.metadata.partition_columns,
                                    replaces_rows=options.schema_mode == "overwrite", automatic_widening_only=options.schema_mode == "merge")
        else:
            planned = plan.metadata if plan.metadata is not None else plan.context.table_configuration.metadata
            current = snapshot.metadata
            same = current.schema_string == planned.schema_string and current.partition_columns == planned.partition_columns
            if not same or (plan.metadata is None and current != planned):
                raise SchemaError(f"table {plan.table_uri} changed its schema or partitioning since the write was planned; plan it again")
    if options.app_id is not None:
        assert options.app_version is not None
        if txn.already_applied(options.app_id, options.app_version):
            txn.abort()
            return None
        txn.set_app_transaction(options.app_id, int(options.app_version))
    return txn


class RowRemoval(Protocol):
    """An engine's executor of what a write removes row by row (a replaceWhere's DELETE plan)
    and of the change data the write's commit holds."""

    def delete(self, txn: OptimisticTransaction, plan: RowChangePlan) -> RowChangeMetrics:
        """Stage the DELETE ``plan``, recording its change rows."""

    def imply(self, txn: OptimisticTransaction, files: pa.Table, change_type: str) -> None:
        """The rows of ``files`` (whole files added or removed) as implied change rows."""

    def finish(self, txn: OptimisticTransaction) -> int:
        """Before the commit: stage the change data (:class:`~txnlog.dml.change_data.ChangeData`);
        how many cdc files it wrote."""


class ArrowRemoval:
    """:class:`RowRemoval` in this process: the Python DML, change rows read with txnlog's reader."""

    def __init__(self, txn: OptimisticTransaction) -> None:
        self.changes: ChangeData[pa.Table] = ChangeData(txn)

    def delete(self, txn: OptimisticTransaction, plan: RowChangePlan) -> RowChangeMetrics:
        metrics = run_row_change(txn, plan)
        self.changes.written(metrics.change_files)  # the DML writes the rows it deletes
        return metrics

    def imply(self, txn: OptimisticTransaction, files: pa.Table, change_type: str) -> None:
        if not files.num_rows or not self.changes.enabled or txn.snapshot is None:
            return  # a new table's first commit only adds: it needs no change files
        # The rows in the schema this commit writes (a file older than it reads its new columns as NULL).
        ctx = ReadContext.for_configuration(txn.uri, txn.table_configuration, storage_options=txn.location.storage_options,
                                            allow_absolute_paths=txn.location.allow_absolute_paths)
        names = ctx.output_schema().names

        def rows() -> pa.Table:
            table = ctx.read(files, store=txn.location.store).select(names)
            return table.append_column(CHANGE_TYPE_COLUMN, pa.repeat(pa.scalar(change_type, pa.string()), table.num_rows))

        self.changes.imply(rows, change_type)

    def finish(self, txn: OptimisticTransaction) -> int:
        def write(rows: ChangeRowsOf[pa.Table]) -> int:
            tables = [make() for make, _ in rows]
            files = write_change_files(txn.write_context(), pa.concat_tables(tables, promote_options="default"), store=txn.location.store)
            txn.add_cdc_files(files)
            return len(files)

        return self.changes.finish(write)


@dataclass(frozen=True)
class WriteResult:
    """What :func:`stage_write` staged: ``metrics`` for the commit's ``operationMetrics``."""

    metrics: dict[str, int]
    removal: RowChangeMetrics | None = None


def files_table(adds: Sequence[AddFile] | pa.Table) -> pa.Table:
    """``AddFile`` records as a file table (the ``Snapshot.files()`` layout)."""
    if isinstance(adds, pa.Table):
        return adds
    if not adds:
        return FILES_SCHEMA.empty_table()
    return table_from_log_dicts([encode_action(a)["add"] for a in adds], "add")


def stage_write(txn: OptimisticTransaction, plan: WritePlan, adds: Sequence[AddFile] | pa.Table, removal: RowRemoval) -> WriteResult | None:
    """Stage a written plan's removal (every row, or through ``removal`` the rows matching
    ``replace_where``), then ``adds``, then the change data. None, with ``txn`` aborted, when
    that stages nothing worth a commit (no file, no schema change, no app version): delta-spark
    skips such an empty commit too (``skipRecordingEmptyCommits``)."""
    added = files_table(adds)
    removed = 0
    deleted: RowChangeMetrics | None = None
    removal_kind = plan.removal(txn)
    if removal_kind in ("table", "partitions"):
        live = txn.read_whole_table()  # a concurrent change of any row conflicts, as for every overwrite
        if removal_kind == "partitions":  # the live files of the partitions written to
            written = {frozenset(values) for values in added.column("partition_values").to_pylist()}
            live = live.filter(pa.array([frozenset(values) in written for values in live.column("partition_values").to_pylist()], pa.bool_()))
        if live.num_rows:
            txn.remove_files(live)
            removal.imply(txn, live, "delete")
        removed = live.num_rows
    elif removal_kind == "rows":
        assert plan.options.replace_where is not None and txn.snapshot is not None
        deleted = removal.delete(txn, RowChangePlan.delete(txn.snapshot, plan.options.replace_where, config=txn.table_configuration))
        removed = int(deleted.changed)
    if added.num_rows:
        txn.add_files(added)
        removal.imply(txn, added, "insert")
    if txn.snapshot is not None and not added.num_rows and not removed and plan.options.app_id is None and txn.metadata == txn.snapshot.metadata:
        txn.abort()
        return None
    change_files = removal.finish(txn)
    rows = live_rows(added)
    metrics = {"numFiles": added.num_rows, "numOutputBytes": int(pc.sum(added.column("size")).as_py() or 0) if added.num_rows else 0}
    if deleted is not None:
        metrics["numFiles"] += deleted.files.added_files
        metrics["numOutputBytes"] += deleted.files.added_bytes
        rows = None if rows is None or deleted.copied_rows is None else rows + deleted.copied_rows
    if rows is not None:
        metrics["numOutputRows"] = rows
    if change_files or (deleted is not None and deleted.change_files):
        metrics["numAddedChangeFiles"] = change_files + (deleted.change_files if deleted is not None else 0)
    return WriteResult(metrics, deleted)


__all__ = [
    "MODES",
    "SCHEMA_MODES",
    "ArrowRemoval",
    "RowRemoval",
    "WriteOptions",
    "WritePlan",
    "WriteResult",
    "evolve_schema",
    "evolved_schema",
    "open_write",
    "plan_write",
    "rows_matching",
    "stage_write",
]
