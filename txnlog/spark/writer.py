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
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from txnlog import AddFile, CommitResult, OptimisticTransaction, Snapshot, Table, TableConfiguration, WriteContext
from txnlog.errors import InvalidArgumentError, ProtocolViolationError, SchemaError, TableAlreadyExistsError, TxnLogError
from txnlog.expressions import FilePredicate
from txnlog.file_facts import num_records
from txnlog.log import FILES_SCHEMA, AddCDCFile, decode_action, encode_action, table_from_log_dicts
from txnlog.read import CHANGE_TYPE, ROW_COMMIT_VERSION, ROW_ID
from txnlog.schema import arrow_to_delta_schema
from txnlog.spark.common import (
    SPARK_FAILURES,
    arrow_schema_of_struct,
    column,
    decode_error,
    delta_schema_of,
    encode_error,
    job_error,
    require_dataframe,
)
from txnlog.spark.driver import fits_driver, spark_agrees
from txnlog.spark.driver import matching_positions as positions_on_driver
from txnlog.spark.reader import FILE_COLUMN, ROW_INDEX_COLUMN, read_files
from txnlog.write import RowDeletes, write_change_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MODES = ("append", "overwrite", "error", "ignore")
A = TypeVar("A", AddFile, AddCDCFile)

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
            source = check_rows(self.ctx, self.require, named) if self.require is not None else named
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


def check_rows(ctx: WriteContext, condition: str, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, each checked to satisfy the SQL ``condition`` (replaceWhere) on every row (a
    null result does not), else ProtocolViolationError naming a failing row."""
    predicate = FilePredicate(condition, ctx.schema, ctx.partition_columns, ctx.table_configuration.physical_names)
    rows = predicate.rows()  # any boolean SQL: conditions that compute values too
    for batch in batches:
        table = pa.Table.from_batches([batch])
        mask = rows.mask(table)
        matching = int(pc.sum(mask).as_py() or 0)
        if matching != batch.num_rows:
            bad = table.filter(pc.invert(mask)).slice(0, 1).to_pylist()
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
    preserve_row_ids: bool = False,
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
    task starts (SchemaError naming the column).
    """
    require_dataframe(df)
    if target_file_size is not None:
        if target_file_size <= 0:
            raise InvalidArgumentError(f"target_file_size must be positive, got {target_file_size}")
        ctx = dataclasses.replace(ctx, target_file_size=int(target_file_size))
    check_schema(df, ctx, extra=(ROW_ID, ROW_COMMIT_VERSION) if preserve_row_ids else ())
    task = _WriteTask(ctx, data_change, require, list(df.columns), preserve_row_ids=preserve_row_ids)
    rows = _run_tasks(df, ctx, task, partition_by, f"the Spark job writing data files of table {ctx.table_uri}", "data")
    return _decoded(rows, "add", AddFile)


def write_change_rows(df: DataFrame, ctx: WriteContext) -> list[AddCDCFile]:
    """Write ``df`` (the table's columns and ``_change_type``) as change data files of the table
    ``ctx`` describes, on the executors, each task through ``txnlog.write.write_change_files``:
    ``cdc-*.parquet`` under ``_change_data/``, partitioned like the table. Their ``cdc`` actions,
    for ``txn.add_cdc_files``."""
    require_dataframe(df)
    check_schema(df, ctx, extra=(CHANGE_TYPE,))
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
    keys = []
    for c in columns:
        key = by_name.get(c, by_lower.get(c.lower()))
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


@dataclass(frozen=True)
class RowRemoval:
    """What a row-level DELETE (or the delete half of an UPDATE) staged: ``removed`` and
    ``added`` are the file entries staged as removes and adds (with deletion vectors: the same
    files with their grown vectors; copy-on-write: the rewritten copies); ``metrics`` delta-spark's
    DELETE operation metrics for them."""

    removed: pa.Table
    added: pa.Table
    metrics: dict[str, int]


def live_rows(files: pa.Table) -> int | None:
    """The rows of ``files`` that no deletion vector deletes, by their stats; None when a file
    has no stats (then nobody knows without reading it)."""
    if not files.num_rows:
        return 0
    if files.column("stats").null_count:
        return None
    cardinalities = pc.struct_field(files.column("deletion_vector"), "cardinality")
    return num_records(files) - int(pc.sum(cardinalities).as_py() or 0)


def _file_bytes(files: pa.Table) -> int:
    return int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0


def _delete_metrics(
    *, removed_files: pa.Table, added_files: pa.Table, deleted: int | None, copied: int | None, vectors: Mapping[str, int] | None = None
) -> dict[str, int]:
    metrics = {
        "numRemovedFiles": removed_files.num_rows,
        "numAddedFiles": added_files.num_rows,
        "numRemovedBytes": _file_bytes(removed_files),
        "numAddedBytes": _file_bytes(added_files),
        "numAddedChangeFiles": 0,
        "numDeletionVectorsAdded": 0,
        "numDeletionVectorsUpdated": 0,
        "numDeletionVectorsRemoved": 0,
    }
    metrics.update(vectors or {})
    if deleted is not None:
        metrics["numDeletedRows"] = deleted
    if copied is not None:
        metrics["numCopiedRows"] = copied
    return metrics


def tracks_row_ids(config: TableConfiguration) -> bool:
    """Whether rewrites of the table must carry each row's stable id and commit version into
    the materialized columns (row tracking enabled, with their names set)."""
    return bool(config.row_tracking_enabled and config.materialized_row_id_column and config.materialized_row_commit_version_column)


class ChangeRows:
    """The change data of one commit on a table with the change data feed enabled
    (``delta.enableChangeDataFeed``), written as ``cdc`` files when the commit needs them.

    A change reader takes a version's cdc files *instead of* its adds and removes, so a commit
    with any cdc file must hold all of its changes in them. :meth:`require` takes rows only cdc
    files can tell (deleted rows next to copied ones, update pre- and post-images): the commit
    gets cdc files. :meth:`imply` takes rows the log already tells (appended files as inserts,
    whole files removed and rows a deletion vector deletes as deletes): written only when the
    commit gets cdc files anyway. Nothing is recorded on a table without the feed. Each entry
    is a function making the DataFrame (the table's columns): those never needed are never
    planned."""

    def __init__(self, spark: SparkSession, txn: OptimisticTransaction) -> None:
        self.spark = spark
        self.txn = txn
        self.enabled = txn.table_configuration.change_data_feed_enabled
        self._required: list[Callable[[], DataFrame]] = []
        self._implied: list[Callable[[], DataFrame]] = []

    def require(self, rows: Callable[[], DataFrame], change_type: str) -> None:
        if self.enabled:
            self._required.append(lambda: self._typed(rows(), change_type))

    def imply(self, rows: Callable[[], DataFrame], change_type: str) -> None:
        if self.enabled:
            self._implied.append(lambda: self._typed(rows(), change_type))

    def imply_files(self, files: pa.Table, change_type: str) -> None:
        """Every live row of ``files`` (of the snapshot, or staged adds) as ``change_type``."""
        snapshot = self.txn.snapshot
        if self.enabled and files.num_rows and snapshot is not None:  # a new table's first commit only adds
            self.imply(lambda: read_files(self.spark, snapshot, files), change_type)

    def _typed(self, df: DataFrame, change_type: str) -> DataFrame:
        names = [f.name for f in self.txn.metadata.schema]
        return df.select(*[column(c) for c in names], F.lit(change_type).alias(CHANGE_TYPE))

    def stage(self, ctx: WriteContext | None = None) -> int:
        """Write the change rows as cdc files and stage them in the transaction, if any row
        requires them; the number of cdc files."""
        if not self._required:
            return 0
        frames = [make() for make in [*self._required, *self._implied]]
        self._required, self._implied = [], []
        df = frames[0]
        for more in frames[1:]:
            df = df.unionByName(more)
        cdc = write_change_rows(df, ctx or self.txn.write_context())
        self.txn.add_cdc_files(cdc)
        return len(cdc)


def remove_where(
    spark: SparkSession,
    txn: OptimisticTransaction,
    predicate: str,
    *,
    ctx: WriteContext | None = None,
    files: pa.Table | None = None,
    changes: ChangeRows | None = None,
) -> RowRemoval:
    """Stage the removal of every row matching ``predicate``, recording the read.

    Files whose partition values alone decide the predicate are removed whole. Otherwise, on a
    table with deletion vectors enabled, the matching rows of each file are marked in its
    vector (no data file is written); without them (copy-on-write), a file holding a matching
    row is rewritten without the matching ones (keeping the copied rows' stable ids under row
    tracking). ``files``: the live files as the transaction sees them so far (the snapshot's,
    by default). ``changes``: where the commit's change rows are recorded (the deleted rows);
    without it, they are written here when the table has the change data feed enabled.
    """
    snapshot = txn.snapshot
    empty = FILES_SCHEMA.empty_table()
    if snapshot is None:
        return RowRemoval(empty, empty, {})
    own_changes = changes is None
    changes = changes if changes is not None else ChangeRows(spark, txn)
    candidates = txn.filter_files(predicate)  # records the read
    if files is not None:
        candidates = snapshot.predicate(predicate).filter(files)
    if candidates.num_rows == 0:
        return RowRemoval(candidates, empty, _delete_metrics(removed_files=empty, added_files=empty, deleted=0, copied=0))
    if snapshot.predicate(predicate).matches_partition_only():
        txn.remove_files(candidates)
        changes.imply_files(candidates, "delete")
        metrics = _delete_metrics(removed_files=candidates, added_files=empty, deleted=live_rows(candidates), copied=0)
        return RowRemoval(candidates, empty, metrics)
    matches = F.coalesce(F.expr(predicate), F.lit(False))
    if txn.table_configuration.deletion_vectors_enabled:
        hit, positions = rows_to_mark(spark, snapshot, candidates, predicate)
        deletes = txn.delete_rows(hit, positions)
        # Readers could tell these rows from the grown vectors (delta-spark writes no cdc file
        # here), but a reader that takes the protocol's rule literally would read the re-added
        # file's other rows as deleted and inserted: cdc files are exact for every reader, and
        # the Python DML writes them too.
        changes.require(lambda: read_files(spark, snapshot, hit).filter(matches), "delete")
        return RowRemoval(deletes.removed, deletes.added, row_delete_metrics(deletes))
    hit, deleted = matching_files(spark, snapshot, candidates, matches)
    if hit.num_rows == 0:
        return RowRemoval(hit, empty, _delete_metrics(removed_files=empty, added_files=empty, deleted=0, copied=0))
    row_ids = tracks_row_ids(txn.table_configuration)
    kept = read_files(spark, snapshot, hit, with_row_ids=row_ids).filter(~matches)
    ctx = ctx or txn.write_context()
    added = files_table(write_files(kept, ctx, preserve_row_ids=row_ids))
    txn.add_files(added)
    txn.remove_files(hit)
    changes.require(lambda: read_files(spark, snapshot, hit).filter(matches), "delete")
    metrics = _delete_metrics(removed_files=hit, added_files=added, deleted=deleted, copied=live_rows(added))
    metrics["numDeletionVectorsRemoved"] = dropped_vectors(hit)
    if own_changes:
        metrics["numAddedChangeFiles"] = changes.stage(ctx)
    return RowRemoval(hit, added, metrics)


def dropped_vectors(files: pa.Table) -> int:
    """How many of ``files`` have a deletion vector (dropped with them when they are rewritten)."""
    return int(pc.sum(files.column("deletion_vector").is_valid()).as_py() or 0)


def row_delete_metrics(deletes: RowDeletes) -> dict[str, int]:
    """delta-spark's DELETE metrics for rows deleted through deletion vectors: files count only
    when every row of one is deleted (it is removed), no row is copied."""
    gone = deletes.removed.filter(pc.invert(pc.is_in(deletes.removed.column("path"), deletes.added.column("path"))))
    return _delete_metrics(removed_files=gone, added_files=FILES_SCHEMA.empty_table(), deleted=None, copied=0, vectors=deletes.metrics())


def rows_to_mark(spark: SparkSession, snapshot: Snapshot, candidates: pa.Table, predicate: str) -> tuple[pa.Table, list[pa.Array]]:
    """The rows of ``candidates`` holding a row on which ``predicate`` is TRUE, and each one's
    physical positions of those rows (int64): what a DELETE or UPDATE marks in deletion
    vectors. Found on the driver when the predicate's columns of the candidates are small
    (:mod:`txnlog.spark.driver`), else by one Spark job."""
    if candidates.num_rows == 0:
        return candidates, []
    condition = snapshot.predicate(predicate)
    if fits_driver(spark, candidates, len(condition.columns), of=len(snapshot.schema)) and spark_agrees(snapshot, condition):
        return positions_on_driver(snapshot, candidates, condition)
    return matching_positions(spark, snapshot, candidates, F.coalesce(F.expr(predicate), F.lit(False)))


def matching_positions(spark: SparkSession, snapshot: Snapshot, candidates: pa.Table, condition: Any) -> tuple[pa.Table, list[pa.Array]]:
    """The rows of ``candidates`` holding a row on which ``condition`` (a Spark Column) is TRUE,
    and for each of them the physical positions of those rows (int64). One Spark job; only the
    positions, one array per file, come back to the driver."""
    rows = read_files(spark, snapshot, candidates, with_file_column=True, with_row_index=True).filter(condition)
    grouped = rows.groupBy(FILE_COLUMN).agg(F.collect_list(ROW_INDEX_COLUMN).alias("rows"))
    try:
        found = grouped.toArrow()
    except SPARK_FAILURES as e:
        raise job_error(e, f"the Spark job finding the rows to change in table {snapshot.uri}") from e
    return positions_of(candidates, found.column(FILE_COLUMN), found.column("rows"))


def positions_of(candidates: pa.Table, paths: pa.ChunkedArray | pa.Array, rows: pa.ChunkedArray | pa.Array) -> tuple[pa.Table, list[pa.Array]]:
    """``candidates`` narrowed to ``paths`` (in that order) and each file's positions out of the
    list column ``rows``."""
    index = {p: i for i, p in enumerate(candidates.column("path").to_pylist())}
    order = pa.array([index[p] for p in paths.to_pylist()], pa.int64())
    lists = rows.combine_chunks() if isinstance(rows, pa.ChunkedArray) else rows
    positions = [lists[i].values for i in range(len(lists))]
    return candidates.take(order), positions


def files_with_matches(spark: SparkSession, snapshot: Snapshot, candidates: pa.Table, predicate: str) -> pa.Table:
    """The rows of ``candidates`` (a file list) holding a row on which ``predicate`` is TRUE:
    the files a copy-on-write DELETE or UPDATE must rewrite. One Spark job over the candidates."""
    return matching_files(spark, snapshot, candidates, F.coalesce(F.expr(predicate), F.lit(False)))[0]


def matching_files(spark: SparkSession, snapshot: Snapshot, candidates: pa.Table, condition: Any) -> tuple[pa.Table, int]:
    """The rows of ``candidates`` holding a row on which ``condition`` (a Spark Column) is
    TRUE, and how many such rows there are. One Spark job; one row per file comes back."""
    rows = read_files(spark, snapshot, candidates, with_file_column=True).filter(condition)
    try:
        counts = rows.groupBy(FILE_COLUMN).count().collect()
    except SPARK_FAILURES as e:
        raise job_error(e, f"the Spark job finding the rows to change in table {snapshot.uri}") from e
    touched = sorted(r[0] for r in counts)
    hit = candidates.filter(pc.is_in(candidates.column("path"), pa.array(touched, pa.string())))
    return hit, sum(int(r[1]) for r in counts)


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
        changes = ChangeRows(spark, txn)
        if not stage_write(txn, mode, replace_where, adds, app_id,
                           remove_matching=lambda t, where: remove_where(spark, t, where, ctx=ctx, changes=changes).removed.num_rows):
            return None
        changes.imply_files(files_table(adds), "insert")
        changes.stage(ctx)
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
    "ChangeRows",
    "RowRemoval",
    "changes_nothing",
    "check_rows",
    "check_schema",
    "check_write_arguments",
    "claim_app_version",
    "dropped_vectors",
    "files_table",
    "files_with_matches",
    "live_rows",
    "matching_files",
    "matching_positions",
    "positions_of",
    "remove_where",
    "row_delete_metrics",
    "rows_to_mark",
    "stage_write",
    "start_write",
    "tracks_row_ids",
    "write",
    "write_change_rows",
    "write_files",
    "write_parameters",
]

