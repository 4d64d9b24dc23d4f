"""``df.write.format("txnlog").save(uri)``: the writer half of the data source.

Spark runs a Python data source's write in three processes, none of which holds the
SparkSession: ``writer()`` plans (on the driver, before any task), ``write()`` runs in each task,
``commit()``/``abort()`` run once on the driver. A transaction object cannot travel between
them, so the plan carries what the commit needs to redo exactly: the version the checks read
and the metadata a new table or a merged schema gets (column mapping's physical names are drawn
at random, so they are carried, not drawn again). The checks, the staging and the empty-commit
rule are ``txnlog.spark.writer``'s, shared with ``txnlog.spark.write``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from txnlog import AddFile, CommitResult, OptimisticTransaction, Table, WriteContext, dml
from txnlog.errors import InvalidArgumentError, TxnLogError
from txnlog.expressions import FilePredicate
from txnlog.file_facts import num_records
from txnlog.log import Metadata
from txnlog.spark.datasource.options import SourceOptions
from txnlog.spark.writer import (
    check_rows,
    check_schema,
    check_write_arguments,
    claim_app_version,
    files_table,
    stage_write,
    start_write,
    write_parameters,
)
from txnlog.storage import locate


@dataclass(frozen=True)
class WritePlan:
    """What ``writer()`` decided, for the tasks and the commit. ``context`` None: nothing is
    written (``saveMode=ignore`` found a table, or the app version is already committed)."""

    options: SourceOptions
    mode: str
    read_version: int  # -1: the write creates the table
    parameters: dict[str, Any]
    context: WriteContext | None
    metadata: Metadata | None = None  # the metadata the commit sets; None: the table's stays
    column_names: list[str] = field(default_factory=list)


@dataclass
class WrittenFiles(WriterCommitMessage):
    """One task's result: the files it wrote (not yet committed), or the txnlog error it raised."""

    adds: list[AddFile]
    error: TxnLogError | None = None


def plan_write(options: SourceOptions, schema: StructType, overwrite: bool) -> WritePlan:
    """Check the write against the table before any task runs: the mode, the options, the
    DataFrame's ``schema``, the replaceWhere condition, an app version already committed."""
    if options.save_mode is not None and overwrite:
        raise InvalidArgumentError(f"option saveMode={options.save_mode!r} goes with .mode('append'), not 'overwrite' (table {options.uri})")
    mode = options.save_mode or ("overwrite" if overwrite else "append")
    check_write_arguments(mode, options.replace_where, options.app_id, options.app_version)
    table = Table(options.uri, options.storage_options)
    params = write_parameters(mode, options.partition_by, options.replace_where)
    txn = start_write(table, schema, mode, options.partition_by, options.properties, options.merge_schema, params)
    names = list(schema.fieldNames())
    if txn is None:  # saveMode=ignore and the table exists
        return WritePlan(options, mode, -1, params, None, column_names=names)
    try:
        read_version = txn.read_version
        if claim_app_version(txn, options.app_id, options.app_version):
            return WritePlan(options, mode, read_version, params, None, column_names=names)
        ctx = txn.write_context()
        if options.target_file_size is not None:
            ctx = dataclasses.replace(ctx, target_file_size=options.target_file_size)
        check_schema(schema, ctx)
        if options.replace_where is not None:  # a condition that does not bind fails here, not in every task
            FilePredicate(options.replace_where, ctx.schema, ctx.partition_columns, ctx.table_configuration.physical_names)
        changed = txn.snapshot is None or txn.metadata != txn.snapshot.metadata
        return WritePlan(options, mode, read_version, params, ctx, txn.metadata if changed else None, names)
    finally:
        txn.abort()  # planning only: the commit opens its own transaction at read_version


#: Rows per batch handed to the table's writer. Spark sends a task's rows in batches of
#: ``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000 by default); the writer's work per
#: batch (statistics, conforming to the table schema, splitting by partition values, one Arrow
#: call per column each time) costs less over fewer, larger batches, and the Parquet encoder
#: gets them contiguous instead of joining small slices itself.
WRITE_BATCH_ROWS = 131_072


def joined_batches(batches: Iterator[pa.RecordBatch], names: list[str], rows: int = WRITE_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The task's batches under the DataFrame's own column names (whatever Spark's Arrow
    batches call them), joined into batches of at least ``rows`` rows (the last may be smaller)."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if batch.schema.names != names:
            batch = pa.RecordBatch.from_arrays(batch.columns, names=names)
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, count = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def write_task(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> WrittenFiles:
    """What each Spark task runs: write its rows as Parquet, return the files (or the error)."""
    ctx = plan.context
    if ctx is None:
        for _ in batches:  # nothing to write: Spark still hands the task its rows
            pass
        return WrittenFiles([])
    try:
        source = joined_batches(batches, plan.column_names)
        if plan.options.replace_where is not None:
            source = check_rows(ctx, plan.options.replace_where, source)
        written = ctx.write(source)
    except TxnLogError as e:  # carried to commit(), which raises it once (retrying the task would fail again)
        return WrittenFiles([], e)
    return WrittenFiles(list(written.add_files))


def _transaction(plan: WritePlan, table: Table) -> OptimisticTransaction:
    """The commit's transaction, reading the version the plan was checked against."""
    if plan.read_version < 0:
        txn = table.create_transaction("CREATE TABLE AS SELECT", operation_parameters=plan.parameters)
    else:
        txn = OptimisticTransaction(table.location, table.snapshot(version=plan.read_version), operation="WRITE",
                                    operation_parameters=plan.parameters, hooks=table.hooks)
    if plan.metadata is not None:
        # The planned schema already holds its column mapping ids and physical names, so the
        # same metadata comes out; a new table gets the properties asked for (protocol settings too).
        configuration = {**plan.options.properties, **plan.metadata.configuration} if plan.read_version < 0 else None
        txn.update_metadata(schema=plan.metadata.schema_string, partition_columns=plan.metadata.partition_columns,
                            configuration=configuration)
    return txn


def remove_rows_on_driver(txn: OptimisticTransaction, condition: str, adds: list[AddFile]) -> int:
    """Stage the removal of every row matching ``condition`` through the Python DML (deletion
    vectors where the table enables them, else copy-on-write on this process: a data source's
    commit has no SparkSession to spread a rewrite with); 1 when it staged anything, else 0.
    The commit's output metrics and predicate stay the write's."""
    recorded = txn.operation_parameters.get("predicate")
    result = dml.delete(txn, condition)
    if recorded is not None:  # a WRITE names its replaceWhere as txnlog.spark.write does
        txn.operation_parameters["predicate"] = recorded
    txn.set_operation_metrics(
        numFiles=len(adds) + result.metrics.get("numAddedFiles", 0),
        numOutputRows=num_records(files_table(adds)) + result.metrics.get("numCopiedRows", 0),
        numOutputBytes=sum(a.size for a in adds) + result.metrics.get("numAddedBytes", 0),
    )
    return int(result.changed)


def commit_write(plan: WritePlan, messages: list[WriterCommitMessage | None]) -> CommitResult | None:
    """Commit the tasks' files in one transaction; None when nothing was committed."""
    results = [m for m in messages if isinstance(m, WrittenFiles)]
    errors = [m.error for m in results if m.error is not None]
    adds = [a for m in results for a in m.adds]
    if errors:
        error = errors[0]
        if adds:
            error.add_note(f"txnlog: nothing committed; the {len(adds)} data file(s) other tasks wrote are deleted by the job's abort")
        raise error
    ctx = plan.context
    if ctx is None:
        return None
    table = Table(plan.options.uri, plan.options.storage_options)
    options = plan.options
    with _transaction(plan, table) as txn:
        if claim_app_version(txn, options.app_id, options.app_version):  # committed meanwhile by another run
            return None
        if not stage_write(txn, plan.mode, options.replace_where, adds, options.app_id,
                           remove_matching=lambda t, where: remove_rows_on_driver(t, where, adds)):
            return None
    return txn.result


def delete_written(plan: WritePlan, messages: list[WriterCommitMessage | None]) -> None:
    """Best effort, after a failed job: delete the files the successful tasks wrote (no commit
    names them; vacuum would remove any left behind)."""
    paths = [a.path for m in messages if isinstance(m, WrittenFiles) for a in m.adds]
    if not paths:
        return
    try:
        store = Table(plan.options.uri, plan.options.storage_options).store
    except TxnLogError:
        return
    for path in paths:
        try:
            relative = locate(store.root_uri, path).relative
            if relative is not None:
                store.delete(relative)
        except (TxnLogError, OSError):
            continue


class TableWriter(DataSourceArrowWriter):
    """The data source's batch writer: one plan, shipped to every task and to the commit."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        return write_task(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_write(self.plan, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        delete_written(self.plan, messages)


__all__ = ["WRITE_BATCH_ROWS", "TableWriter", "WritePlan", "WrittenFiles", "commit_write", "joined_batches", "plan_write", "remove_rows_on_driver", "write_task"]
