"""Writing a Spark DataFrame to a txnlog table: executors write the Parquet files, the driver
commits the log.

Each Spark task gets the table's picklable :class:`~txnlog.write.context.WriteContext` (the same
code ``Table.append`` writes with: layout, physical names, stats, target file size, storage
options) and writes its rows with pyarrow straight to final, collision-free paths under the table
root. It yields one small row per file; the driver collects only those rows and commits them in
one transaction. Nothing is renamed, so a failed or killed job leaves no visible data: its files
are never named by a commit, and vacuum removes them.

Only public DataFrame APIs are used (``mapInArrow``, ``repartition``, ``collect`` of the file
rows), so the same code runs on a classic session, a cluster and over Spark Connect.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from txnlog import AddFile, CommitResult, OptimisticTransaction, Snapshot, Table, WriteContext
from txnlog.errors import InvalidArgumentError, ProtocolViolationError, SchemaError, TableAlreadyExistsError, TxnLogError
from txnlog.expressions import FilePredicate
from txnlog.log import FILES_SCHEMA, decode_action, encode_action, table_from_log_dicts
from txnlog.schema import arrow_to_delta_schema
from txnlog.spark.common import (
    SPARK_FAILURES,
    arrow_schema_of_struct,
    decode_error,
    delta_schema_of,
    encode_error,
    job_error,
    require_dataframe,
)
from txnlog.spark.reader import FILE_COLUMN, read_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MODES = ("append", "overwrite", "error", "ignore")

# One row per written file, or one row carrying a txnlog error raised in the task.
_RESULT_DDL = "add string, error string"
_RESULT_SCHEMA = pa.schema([("add", pa.string()), ("error", pa.string())])


class _WriteTask:
    """The function each ``mapInArrow`` task runs: write its rows, yield its file rows.

    A txnlog error (schema, constraint, replaceWhere condition) comes back as a row rather than
    a task failure, so the driver raises it as the same txnlog error class; the failing task's
    own files are deleted by ``WriteContext.write``.
    """

    def __init__(self, ctx: WriteContext, data_change: bool, require: str | None, column_names: Sequence[str]) -> None:
        self.ctx = ctx
        self.data_change = data_change
        self.require = require
        self.column_names = list(column_names)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            named = self._named(batches)
            source = check_rows(self.ctx, self.require, named) if self.require is not None else named
            written = self.ctx.write(source, data_change=self.data_change)
        except TxnLogError as e:
            yield pa.RecordBatch.from_pydict({"add": [None], "error": [encode_error(e)]}, schema=_RESULT_SCHEMA)
            return
        rows = [orjson.dumps(encode_action(a)["add"]).decode() for a in written.add_files]
        yield pa.RecordBatch.from_pydict({"add": rows, "error": [None] * len(rows)}, schema=_RESULT_SCHEMA)

    def _named(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The DataFrame's own column names back on the rows (they travel under positional ones)."""
        for batch in batches:
            schema = pa.schema([f.with_name(n) for f, n in zip(batch.schema, self.column_names)])
            yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)



def check_rows(ctx: WriteContext, condition: str, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, each checked to satisfy the SQL ``condition`` (replaceWhere) on every row (a
    null result does not), else ProtocolViolationError naming a failing row."""
    predicate = FilePredicate(condition, ctx.schema, ctx.partition_columns, ctx.table_configuration.physical_names)
    expression = predicate.row_filter()
    for batch in batches:
        table = pa.Table.from_batches([batch])
        matching = table.filter(expression).num_rows
        if matching != batch.num_rows:
            bad = table.filter(~expression).slice(0, 1).to_pylist() or ["(a row where the condition is null)"]
            raise ProtocolViolationError(
                f"{batch.num_rows - matching} written row(s) do not match the replaceWhere condition "
                f"{condition!r} of table {ctx.table_uri}, e.g. {bad[0]}",
                rule="replaceWhere",
            )
        yield batch


def write_files(
    df: DataFrame,
    ctx: WriteContext,
    *,
    partition_by: Sequence[str] | None = None,
    target_file_size: int | None = None,
    data_change: bool = True,
    require: str | None = None,
) -> list[AddFile]:
    """Write ``df`` as data files of the table ``ctx`` describes, on the executors; the files'
    ``AddFile`` records, not yet committed.

    ``partition_by`` defaults to the table's partition columns: rows are repartitioned by them
    first so each task writes few files per partition. ``target_file_size`` (bytes) overrides
    the table's. ``require``: a SQL condition every row must satisfy (replaceWhere), else
    ProtocolViolationError. The DataFrame's schema is checked against the table's before any
    task starts (SchemaError naming the column).
    """
    require_dataframe(df)
    if target_file_size is not None:
        if target_file_size <= 0:
            raise InvalidArgumentError(f"target_file_size must be positive, got {target_file_size}")
        ctx = dataclasses.replace(ctx, target_file_size=int(target_file_size))
    check_schema(df, ctx)
    names = list(df.columns)
    # mapInArrow and repartition look columns up by name, and a name such as "a.b" reads as a
    # path into a struct there: the rows travel under positional names, renamed back in the task.
    positional = [f"_txnlog_c{i}" for i in range(len(names))]
    columns = list(partition_by) if partition_by is not None else list(ctx.partition_columns)
    by_name = {n: p for n, p in zip(names, positional)}
    by_lower = {n.lower(): p for n, p in zip(names, positional)}
    keys = []
    for c in columns:
        key = by_name.get(c, by_lower.get(c.lower()))
        if key is None:
            raise SchemaError(f"partition column '{c}' is not a column of the DataFrame", field=c)
        keys.append(key)
    task = _WriteTask(ctx, data_change, require, names)
    job = f"the Spark job writing data files of table {ctx.table_uri}"
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
    adds = [r["add"] for r in rows if r["add"] is not None]
    if errors:
        error = decode_error(errors[0])
        if adds:
            error.add_note(f"txnlog: {len(adds)} data file(s) other tasks wrote are left uncommitted for vacuum")
        raise error
    out: list[AddFile] = []
    for text in adds:
        action = decode_action("add", orjson.loads(text), path="<spark task result>")
        assert isinstance(action, AddFile)
        out.append(action)
    return out


def check_schema(df: DataFrame | StructType, ctx: WriteContext) -> None:
    """SchemaError naming the column unless ``df``'s columns and types fit the table: the same
    check the executors make, done once on the driver before any file is written. ``df`` may be
    the DataFrame's schema alone (a data source's writer has no DataFrame)."""
    ctx.check_schema(arrow_schema_of_struct(df if isinstance(df, StructType) else df.schema))


def _add_columns(snapshot_schema: pa.Schema, df_schema: pa.Schema) -> pa.Schema | None:
    """The table schema with the DataFrame's new top-level columns appended (nullable), or None
    when the DataFrame has none."""
    known = {f.name.lower() for f in snapshot_schema}
    new = [f.with_nullable(True) for f in df_schema if f.name.lower() not in known]
    return pa.schema([*snapshot_schema, *new]) if new else None


def check_write_arguments(mode: str, replace_where: str | None, app_id: str | None, app_version: int | None) -> None:
    """InvalidArgumentError unless the options of a write go together."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if replace_where is not None and mode != "overwrite":
        raise InvalidArgumentError("replace_where needs mode='overwrite'")
    if (app_id is None) != (app_version is None):
        raise InvalidArgumentError("app_id and app_version go together")


def write_parameters(mode: str, partition_by: Sequence[str] | None, replace_where: str | None) -> dict[str, Any]:
    """The commit's operationParameters, as delta-spark records them for a write."""
    params: dict[str, Any] = {"mode": mode.capitalize(), "partitionBy": list(partition_by or [])}
    if replace_where is not None:
        params["predicate"] = replace_where
    return params


def start_write(table: Table, schema: StructType, mode: str, partition_by: Sequence[str] | None, properties: Mapping[str, str] | None,
                merge_schema: bool, params: dict[str, Any]) -> OptimisticTransaction | None:
    """The transaction of a write of rows of ``schema`` (the DataFrame's): a new table's first
    commit, or one on the existing table; None when ``mode="ignore"`` finds a table."""
    if not table.exists():
        txn = table.create_transaction("CREATE TABLE AS SELECT", operation_parameters=params)
        txn.update_metadata(schema=delta_schema_of(schema), partition_columns=tuple(partition_by or ()),
                            configuration=dict(properties or {}))
        return txn
    if mode == "error":
        raise TableAlreadyExistsError(f"a Delta table already exists at {table.uri} (mode='error')", uri=table.uri)
    if mode == "ignore":
        return None
    txn = table.transaction("WRITE", operation_parameters=params)
    if partition_by is not None and [c.lower() for c in partition_by] != [c.lower() for c in txn.metadata.partition_columns]:
        txn.abort()
        raise InvalidArgumentError(
            f"partition_by={list(partition_by)} differs from the partitioning {list(txn.metadata.partition_columns)} of table {table.uri}"
        )
    if merge_schema:
        wider = _add_columns(txn.metadata.schema, arrow_schema_of_struct(schema))
        if wider is not None:
            txn.update_metadata(schema=arrow_to_delta_schema(wider))
    return txn


def remove_where(
    spark: SparkSession,
    txn: OptimisticTransaction,
    predicate: str,
    *,
    ctx: WriteContext | None = None,
    files: pa.Table | None = None,
) -> tuple[pa.Table, list[AddFile]]:
    """Stage the removal of every row matching ``predicate`` (copy-on-write), recording the read;
    the files removed and the files written in their place.

    Files whose partition values alone decide the predicate are removed whole; a file that also
    holds non-matching rows is rewritten without the matching ones, but only if it holds a
    matching row. ``files``: the live files as the transaction sees them so far (the snapshot's,
    by default).
    """
    snapshot = txn.snapshot
    if snapshot is None:
        return FILES_SCHEMA.empty_table(), []
    candidates = txn.filter_files(predicate)  # records the read
    if files is not None:
        candidates = snapshot.predicate(predicate).filter(files)
    if candidates.num_rows == 0:
        return candidates, []
    if snapshot.predicate(predicate).matches_partition_only():
        txn.remove_files(candidates)
        return candidates, []
    hit = files_with_matches(spark, snapshot, candidates, predicate)
    if hit.num_rows == 0:
        return hit, []
    kept = read_files(spark, snapshot, hit).filter(~F.coalesce(F.expr(predicate), F.lit(False)))
    adds = write_files(kept, ctx or txn.write_context())
    txn.add_files(adds)
    txn.remove_files(hit)
    return hit, adds


def files_with_matches(spark: SparkSession, snapshot: Snapshot, candidates: pa.Table, predicate: str) -> pa.Table:
    """The rows of ``candidates`` (a file list) holding a row on which ``predicate`` is TRUE:
    the files a copy-on-write DELETE or UPDATE must rewrite. One Spark job over the candidates."""
    rows = read_files(spark, snapshot, candidates, with_file_column=True)
    matches = F.coalesce(F.expr(predicate), F.lit(False))
    touched = sorted({r[0] for r in rows.filter(matches).select(FILE_COLUMN).distinct().collect()})
    return candidates.filter(pc.is_in(candidates.column("path"), pa.array(touched, pa.string())))


def files_table(adds: Sequence[AddFile]) -> pa.Table:
    """``AddFile`` records as a file table (the ``Snapshot.files()`` layout)."""
    if not adds:
        return FILES_SCHEMA.empty_table()
    return table_from_log_dicts([encode_action(a)["add"] for a in adds], "add")


def write(
    df: DataFrame,
    uri: str,
    mode: str = "append",
    partition_by: Sequence[str] | str | None = None,
    replace_where: str | None = None,
    properties: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    merge_schema: bool = False,
    *,
    target_file_size: int | None = None,
) -> CommitResult | None:
    """Write ``df`` to the table at ``uri`` in one commit; the version committed, or None when
    nothing was written (``mode="ignore"`` on an existing table, ``app_version`` already done,
    or an empty DataFrame appended: no commit, as in delta-spark).

    ``mode``: "append"; "overwrite" replaces every row (or, with ``replace_where``, only rows
    matching it, and then every written row must match it too); "error" refuses an existing
    table; "ignore" leaves one alone. A table that does not exist is created with the
    DataFrame's schema, ``partition_by`` and ``properties``. ``app_id``/``app_version`` make the
    write idempotent. ``merge_schema`` adds the DataFrame's new columns to the table (nullable).
    """
    require_dataframe(df)
    check_write_arguments(mode, replace_where, app_id, app_version)
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    table = Table(uri, storage_options)
    txn = start_write(table, df.schema, mode, partition_by, properties, merge_schema, write_parameters(mode, partition_by, replace_where))
    if txn is None:
        return None
    with txn:
        if claim_app_version(txn, app_id, app_version):
            return None
        ctx = txn.write_context()
        check_schema(df, ctx)  # before any file is written, the rewrite of replace_where's too
        adds = write_files(df, ctx, target_file_size=target_file_size, require=replace_where)
        spark = df.sparkSession
        if not stage_write(txn, mode, replace_where, adds, app_id,
                           remove_matching=lambda t, where: remove_where(spark, t, where, ctx=ctx)[0].num_rows):
            return None
    return txn.result


def claim_app_version(txn: OptimisticTransaction, app_id: str | None, app_version: int | None) -> bool:
    """True (and ``txn`` aborted) when ``app_id`` has already committed ``app_version``: the
    write is a replay to skip. Else the version is staged with the write."""
    if app_id is None:
        return False
    assert app_version is not None
    if txn.already_applied(app_id, app_version):
        txn.abort()
        return True
    txn.set_app_transaction(app_id, int(app_version))
    return False


def stage_write(
    txn: OptimisticTransaction,
    mode: str,
    replace_where: str | None,
    adds: Sequence[AddFile],
    app_id: str | None,
    *,
    remove_matching: Callable[[OptimisticTransaction, str], int],
) -> bool:
    """Stage a write's files in ``txn``: under ``mode="overwrite"`` first the removal of every
    row (or, with ``replace_where``, of the rows ``remove_matching(txn, replace_where)`` removes,
    returning how many files it removed), then ``adds``. False (and ``txn`` aborted) when that
    changes nothing worth a commit."""
    removed = 0
    if mode == "overwrite" and txn.snapshot is not None:
        if replace_where is None:
            live = txn.read_whole_table()
            txn.remove_files(live)
            removed = live.num_rows
        else:
            removed = remove_matching(txn, replace_where)
    txn.add_files(adds)
    if changes_nothing(txn, adds, removed, app_id):
        txn.abort()
        return False
    return True


def changes_nothing(txn: OptimisticTransaction, adds: Sequence[AddFile], removed: int, app_id: str | None) -> bool:
    """Whether a write of an existing table stages no action at all (no file added or removed,
    no new schema, no app version): then there is nothing to commit. delta-spark skips such an
    empty commit too (``skipRecordingEmptyCommits``)."""
    if txn.snapshot is None or adds or removed or app_id is not None:
        return False
    return txn.metadata == txn.snapshot.metadata


__all__ = [
    "MODES",
    "changes_nothing",
    "claim_app_version",
    "check_rows",
    "check_schema",
    "check_write_arguments",
    "files_table",
    "remove_where",
    "stage_write",
    "start_write",
    "write",
    "write_files",
    "write_parameters",
]

