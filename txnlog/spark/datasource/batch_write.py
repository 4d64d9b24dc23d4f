"""``df.write.format("txnlog").save(uri)``: the writer half of the data source.

Spark runs a Python data source's write in three processes, none of which holds the
SparkSession: ``writer()`` plans (on the driver, before any task), ``write()`` runs in each task,
``commit()``/``abort()`` run once on the driver. A transaction object cannot travel between
them, so the core write planner's :class:`~txnlog.dml.WritePlan` does: the version the checks
read, the metadata a new table or a merged schema gets (column mapping's physical names are
drawn at random, so they are carried, not drawn again), what the commit removes. The commit
stages it with :func:`txnlog.dml.stage_write`, as ``txnlog.spark.write`` and ``Table.write`` do;
a replaceWhere's row removal runs on this process through the Python DML (a data source's commit
has no SparkSession to spread a rewrite with).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from txnlog import AddFile, CommitResult, Table
from txnlog.dml import ArrowRemoval, WriteOptions, WritePlan, stage_write
from txnlog.errors import InvalidArgumentError, TxnLogError
from txnlog.spark.common import arrow_schema_of_struct, delta_schema_of
from txnlog.spark.datasource.options import SourceOptions
from txnlog.storage import locate


@dataclass(frozen=True)
class SourceWrite:
    """What ``writer()`` decided, for the tasks and the commit: the core's plan, and the
    DataFrame's column names (Spark's batches may call them otherwise)."""

    options: SourceOptions
    plan: WritePlan
    column_names: list[str] = field(default_factory=list)


@dataclass
class WrittenFiles(WriterCommitMessage):
    """One task's result: the files it wrote (not yet committed), or the txnlog error it raised."""

    adds: list[AddFile]
    error: TxnLogError | None = None


def write_options(options: SourceOptions, mode: str, *, with_app: bool = True) -> WriteOptions:
    """The write the data source's options ask for (``overwriteSchema`` wins over ``mergeSchema``
    in an overwrite, as in delta-spark)."""
    overwrites_schema = options.overwrite_schema and mode == "overwrite"
    return WriteOptions(mode, tuple(options.partition_by) if options.partition_by is not None else None, options.replace_where,
                        dict(options.properties), options.app_id if with_app else None, options.app_version if with_app else None,
                        options.merge_schema and not overwrites_schema, options.target_file_size,
                        schema_mode="overwrite" if overwrites_schema else None)


def plan_write(options: SourceOptions, schema: StructType, overwrite: bool) -> SourceWrite:
    """Check the write against the table before any task runs: the mode, the options, the
    DataFrame's ``schema``, the replaceWhere condition, an app version already committed."""
    if options.save_mode is not None and overwrite:
        raise InvalidArgumentError(f"option saveMode={options.save_mode!r} goes with .mode('append'), not 'overwrite' (table {options.uri})")
    mode = options.save_mode or ("overwrite" if overwrite else "append")
    table = Table(options.uri, options.storage_options)
    plan = table.plan_write(arrow_schema_of_struct(schema), write_options(options, mode), table_schema=delta_schema_of(schema))
    return SourceWrite(options, plan, list(schema.fieldNames()))


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


def write_task(write: SourceWrite, batches: Iterator[pa.RecordBatch]) -> WrittenFiles:
    """What each Spark task runs: write its rows as Parquet, return the files (or the error)."""
    ctx = write.plan.context
    if ctx is None:
        for _ in batches:  # nothing to write: Spark still hands the task its rows
            pass
        return WrittenFiles([])
    try:
        written = ctx.write(write.plan.check_rows(joined_batches(batches, write.column_names)))
    except TxnLogError as e:  # carried to commit(), which raises it once (retrying the task would fail again)
        return WrittenFiles([], e)
    return WrittenFiles(list(written.add_files))


def task_files(messages: list[WriterCommitMessage | None]) -> list[AddFile]:
    """The files the tasks wrote; the first task's error raised."""
    results = [m for m in messages if isinstance(m, WrittenFiles)]
    errors = [m.error for m in results if m.error is not None]
    adds = [a for m in results for a in m.adds]
    if errors:
        error = errors[0]
        if adds:
            error.add_note(f"txnlog: nothing committed; the {len(adds)} data file(s) other tasks wrote are deleted by the job's abort")
        raise error
    return adds


def commit_write(write: SourceWrite, messages: list[WriterCommitMessage | None]) -> CommitResult | None:
    """Commit the tasks' files in one transaction; None when nothing was committed."""
    adds = task_files(messages)
    if write.plan.context is None:
        return None
    table = Table(write.options.uri, write.options.storage_options)
    txn = table.open_write(write.plan)
    if txn is None:  # committed meanwhile by another run
        return None
    with txn:
        result = stage_write(txn, write.plan, adds, ArrowRemoval(txn))
        if result is None:
            return None
        txn.set_operation_metrics(**result.metrics)
    return txn.result


def delete_written(write: SourceWrite, messages: list[WriterCommitMessage | None]) -> None:
    """Best effort, after a failed job: delete the files the successful tasks wrote (no commit
    names them; vacuum would remove any left behind)."""
    paths = [a.path for m in messages if isinstance(m, WrittenFiles) for a in m.adds]
    if not paths:
        return
    try:
        store = Table(write.options.uri, write.options.storage_options).store
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

    def __init__(self, write: SourceWrite) -> None:
        self.plan = write

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        return write_task(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_write(self.plan, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        delete_written(self.plan, messages)


__all__ = ["WRITE_BATCH_ROWS", "SourceWrite", "TableWriter", "WrittenFiles", "commit_write", "joined_batches", "plan_write", "task_files",
           "write_options", "write_task"]
