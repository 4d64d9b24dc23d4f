"""The Spark task runner: executors write data or change files with the table's
:class:`~txnlog.write.WriteContext`, the driver collects one small row per file.

Each Spark task gets the table's picklable context (the same code ``Table.append`` writes with:
layout, physical names, stats, target file size, storage options) and writes its rows with
pyarrow straight to final, collision-free paths under the table root. It yields one row per
file; the driver collects only those rows. Nothing is renamed, so a failed or killed job
leaves no visible data: its files are never named by a commit, and vacuum removes them.

Only public DataFrame APIs are used (``mapInArrow``, ``repartition``, ``collect`` of the file
rows), so the same code runs on a classic session, a cluster and over Spark Connect.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import orjson
import pyarrow as pa
from pyspark.sql.types import StructType

from txnlog import AddFile, WriteContext
from txnlog.dml import rows_matching
from txnlog.errors import InvalidArgumentError, SchemaError, TxnLogError
from txnlog.log import AddCDCFile, decode_action, encode_action
from txnlog.read import CHANGE_TYPE, ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import SPARK_FAILURES, arrow_schema_of_struct, decode_error, encode_error, job_error, require_dataframe
from txnlog.spark.native import unsupported, write_native, write_native_changes
from txnlog.write import Fill, IdentityAllocator, write_change_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

A = TypeVar("A", AddFile, AddCDCFile)
logger = logging.getLogger(__name__)

# One row per written file, or one row carrying a txnlog error raised in the task.
_RESULT_DDL = "add string, error string"
_RESULT_SCHEMA = pa.schema([("add", pa.string()), ("error", pa.string())])


class _WriteTask:
    """The function each ``mapInArrow`` task runs: write its rows, yield its file rows.

    ``change_files``: the rows are change rows (the table's columns and ``_change_type``),
    written by ``write_change_files`` as ``cdc`` files under ``_change_data/``; else they are
    data rows, written by ``WriteContext.write`` (with ``preserve_row_ids``, their ``row_id`` and
    ``row_commit_version`` go to the table's materialized columns).

    A txnlog error (schema, constraint, replaceWhere condition) comes back as a row rather than
    a task failure, so the driver raises it as the same txnlog error class; the failing task's
    own files are deleted by the writer.
    """

    def __init__(
        self,
        ctx: WriteContext,
        data_change: bool,
        require: str | None,
        column_names: Sequence[str],
        *,
        change_files: bool = False,
        preserve_row_ids: bool = False,
    ) -> None:
        self.ctx = ctx
        self.data_change = data_change
        self.require = require
        self.column_names = list(column_names)
        self.change_files = change_files
        self.preserve_row_ids = preserve_row_ids

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            named = self._named(batches)
            source = rows_matching(self.ctx, self.require, named) if self.require is not None else named
            if self.change_files:
                first = next(source, None)  # a task without rows writes no change file
                changes = write_change_files(self.ctx, itertools.chain([first], source)) if first is not None else []
                rows = [orjson.dumps(encode_action(c)["cdc"]).decode() for c in changes]
            else:
                written = self.ctx.write(source, data_change=self.data_change, preserve_row_ids=self.preserve_row_ids)
                rows = [orjson.dumps(encode_action(a)["add"]).decode() for a in written.add_files]
        except TxnLogError as e:
            yield pa.RecordBatch.from_pydict({"add": [None], "error": [encode_error(e)]}, schema=_RESULT_SCHEMA)
            return
        yield pa.RecordBatch.from_pydict({"add": rows, "error": [None] * len(rows)}, schema=_RESULT_SCHEMA)

    def _named(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The DataFrame's own column names back on the rows (they travel under positional ones)."""
        for batch in batches:
            schema = pa.schema([f.with_name(n) for f, n in zip(batch.schema, self.column_names)])
            yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def write_files(
    df: DataFrame,
    ctx: WriteContext,
    *,
    partition_by: Sequence[str] | None = None,
    target_file_size: int | None = None,
    data_change: bool = True,
    require: str | None = None,
    preserve_row_ids: bool = False,
    rows_per_file: int | None = None,
) -> list[AddFile]:
    """Write ``df`` as data files of the table ``ctx`` describes, on the executors; the files'
    ``AddFile`` records, not yet committed.

    ``partition_by`` defaults to the table's partition columns: rows are repartitioned by them
    first so each task writes few files per partition. ``target_file_size`` (bytes) overrides
    the table's. ``require``: a SQL condition every row must satisfy (replaceWhere), else
    ProtocolViolationError. ``preserve_row_ids`` (row tracking enabled): ``df``'s ``row_id``
    and ``row_commit_version`` columns (as ``read_files(..., with_row_ids=True)`` gives them;
    null for "a new one") are written to the table's materialized columns, so rewritten rows
    keep their stable ids. The DataFrame's schema is checked against the table's before any
    task starts (SchemaError naming the column). ``rows_per_file``: ``df``'s rows are in the
    order to write them, each table partition within one of its Spark partitions (a curve's
    order): Spark's writer keeps that order, with no repartition, and cuts a file every
    ``rows_per_file`` rows (the Python tasks, where the native writer does not apply, cut at
    the target size instead).
    """
    require_dataframe(df)
    if target_file_size is not None:
        if target_file_size <= 0:
            raise InvalidArgumentError(f"target_file_size must be positive, got {target_file_size}")
        ctx = dataclasses.replace(ctx, target_file_size=int(target_file_size))
    check_schema(df, ctx, extra=(ROW_ID, ROW_COMMIT_VERSION) if preserve_row_ids else ())
    fallback = unsupported(df, ctx, data_change=data_change, target_file_size=target_file_size, require=require)
    if fallback is None:
        return write_native(df, ctx, partition_by=partition_by, data_change=data_change, preserve_row_ids=preserve_row_ids, require=require,
                            rows_per_file=rows_per_file)
    logger.debug("data files of table %s written by Python tasks: %s", ctx.table_uri, fallback)
    if data_change and any(c.identity is not None for c in ctx.conform_spec.columns):
        # Identity values: a region of indexes reserved here, split among the tasks by partition index.
        ctx = dataclasses.replace(ctx, identity=(ctx.identity or IdentityAllocator()).for_tasks())
    task = _WriteTask(ctx, data_change, require, list(df.columns), preserve_row_ids=preserve_row_ids)
    rows = _run_tasks(df, ctx, task, partition_by, f"the Spark job writing data files of table {ctx.table_uri}", "data")
    return _decoded(rows, "add", AddFile)


def write_change_rows(df: DataFrame, ctx: WriteContext) -> list[AddCDCFile]:
    """Write ``df`` (the table's columns and ``_change_type``) as change data files of the table
    ``ctx`` describes, partitioned like the table below ``_change_data/``; their ``cdc`` actions,
    for ``txn.add_cdc_files``. Spark's Parquet writer writes them into a job directory there
    (:func:`txnlog.spark.native.write_native_changes`) where it writes data files natively
    (:func:`~txnlog.spark.native.unsupported`, the rows taken as a rewrite's: every column
    supplied, none generated or numbered); else each task writes ``cdc-*.parquet`` files through
    ``txnlog.write.write_change_files``."""
    require_dataframe(df)
    check_schema(df, ctx, extra=(CHANGE_TYPE,))
    fallback = unsupported(df, ctx, data_change=False)
    if fallback is None:
        return write_native_changes(df, ctx)
    logger.debug("change data files of table %s written by Python tasks: %s", ctx.table_uri, fallback)
    task = _WriteTask(ctx, False, None, list(df.columns), change_files=True)
    rows = _run_tasks(df, ctx, task, None, f"the Spark job writing change data files of table {ctx.table_uri}", "change data")
    return _decoded(rows, "cdc", AddCDCFile)


def _decoded(rows: list[str], kind: str, cls: type[A]) -> list[A]:
    """The ``kind`` action bodies (JSON text) the tasks returned, as ``cls`` records."""
    out: list[A] = []
    for text in rows:
        action = decode_action(kind, orjson.loads(text), path="<spark task result>")
        assert isinstance(action, cls)
        out.append(action)
    return out


def _run_tasks(df: DataFrame, ctx: WriteContext, task: _WriteTask, partition_by: Sequence[str] | None, job: str, kind: str) -> list[str]:
    """Run ``task`` over ``df``'s rows, repartitioned by ``partition_by`` (default: the table's
    partition columns); the JSON action bodies the tasks return, or the first task's txnlog
    error raised."""
    names = list(df.columns)
    # mapInArrow and repartition look columns up by name, and a name such as "a.b" reads as a
    # path into a struct there: the rows travel under positional names, renamed back in the task.
    positional = [f"_txnlog_c{i}" for i in range(len(names))]
    columns = list(partition_by) if partition_by is not None else list(ctx.partition_columns)
    by_name = {n: p for n, p in zip(names, positional)}
    by_lower = {n.lower(): p for n, p in zip(names, positional)}
    supplied_by_table = {col.name.lower() for col in ctx.conform_spec.columns if col.fill is not Fill.NULL}
    keys = []
    for c in columns:
        key = by_name.get(c, by_lower.get(c.lower()))
        if key is None and c.lower() in supplied_by_table:
            continue  # a generated (or default) partition column: the task's conform step computes it
        if key is None:
            raise SchemaError(f"partition column '{c}' is not a column of the DataFrame", field=c)
        keys.append(key)
    try:
        rows_df = df.toDF(*positional)
        if keys:
            rows_df = rows_df.repartition(*keys)
        rows = rows_df.mapInArrow(task, _RESULT_DDL).collect()  # one small row per file, never the data
    except SPARK_FAILURES as e:
        # A task failed outside txnlog's own checks (a bad input row, a lost executor, a
        # worker Python without txnlog...).
        raise job_error(e, job) from e
    errors = [r["error"] for r in rows if r["error"] is not None]
    written = [r["add"] for r in rows if r["add"] is not None]
    if errors:
        error = decode_error(errors[0])
        if written:
            error.add_note(f"txnlog: {len(written)} {kind} file(s) other tasks wrote are left uncommitted for vacuum")
        raise error
    return written


def check_schema(df: DataFrame | StructType, ctx: WriteContext, *, extra: Sequence[str] = ()) -> None:
    """SchemaError naming the column unless ``df``'s columns and types fit the table: the same
    check the executors make, done once on the driver before any file is written. ``df`` may be
    the DataFrame's schema alone (a data source's writer has no DataFrame). Columns named in
    ``extra`` (row ids, ``_change_type``) are the writer's own and left out of the check."""
    schema = arrow_schema_of_struct(df if isinstance(df, StructType) else df.schema)
    if extra:
        schema = pa.schema([f for f in schema if f.name not in extra])
    ctx.check_schema(schema)


__all__ = ["check_schema", "write_change_rows", "write_files"]
