"""``df.writeStream.format("txnlog").option("checkpointLocation", ...).start(uri)``: a txnlog
table as a streaming sink, exactly once.

Each micro-batch is one commit that records the transaction ``(app id, batch id)``; a batch
Spark replays after a crash (it committed here but not in Spark's checkpoint) finds its batch
id already recorded and commits nothing, as delta-spark's sink does. The app id is the
query's id: Spark's Python sink API does not hand it over, so it is read from the query's
checkpoint (``<checkpointLocation>/metadata``, written when the query starts and kept across
restarts); ``option("txnAppId", ...)`` names it instead (needed when the checkpoint location
comes from the session setting rather than the option).

Spark creates the writer once for the tasks and again, from the data source as it was before
any batch, in each commit's process: the tasks' plan (the metadata a new table gets, with its
column mapping's physical names) travels to the commit inside the tasks' messages.

Identity columns: the plan made when the query starts knows the high-water marks of that
moment, and each batch's commit moves them. So on a table with identity columns every task
numbers its values past the marks of the table as it is when the task runs (the previous
batch has committed by then), and the batch commits reading that very version: a commit by
another writer in between conflicts (both move the marks) instead of two writers handing out
the same values. Tasks that read different versions fail the batch, and a restart replays it.
A stream with ``mergeSchema`` evolves the table as each task finds it (with its marks), until
one batch has committed the evolution.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from txnlog import CommitResult, Table, TableConfiguration
from txnlog.dml import ArrowRemoval, stage_write
from txnlog.errors import InvalidArgumentError, MetadataChangedError, SchemaError, TxnLogError
from txnlog.schema import with_high_water_marks
from txnlog.spark.datasource.batch_write import SourceWrite, WrittenFiles, delete_written, plan_write, task_files, write_task
from txnlog.spark.datasource.options import SourceOptions
from txnlog.storage import open_store

#: The file of a streaming query's checkpoint that holds the query's id.
CHECKPOINT_METADATA = "metadata"


def query_id(options: SourceOptions) -> str:
    """The app id a stream's commits record: ``txnAppId``, else the query id in the checkpoint."""
    if options.app_id is not None:
        return options.app_id
    location = options.checkpoint_location
    if not location:
        raise InvalidArgumentError(
            f"writeStream.format('txnlog') to {options.uri} needs option('checkpointLocation', ...) (its query id keys "
            f"the exactly-once commits) or option('txnAppId', ...)"
        )
    try:
        raw = open_store(location).read(CHECKPOINT_METADATA)
        found = orjson.loads(raw.splitlines()[0]).get("id")
    except (TxnLogError, orjson.JSONDecodeError, IndexError, AttributeError) as e:
        raise InvalidArgumentError(
            f"cannot read the streaming query's id from {location}/{CHECKPOINT_METADATA} ({e}); pass option('txnAppId', ...)"
        ) from None
    if not isinstance(found, str) or not found:
        raise InvalidArgumentError(f"{location}/{CHECKPOINT_METADATA} names no query id; pass option('txnAppId', ...)")
    return found


@dataclass
class StreamedFiles(WrittenFiles):
    """One task's files, with the plan they were written under (the commit's process has its own)."""

    plan: SourceWrite | None = None


def commit_batch(write: SourceWrite, messages: list[WriterCommitMessage | None], batch_id: int, app_id: str, mode: str) -> CommitResult | None:
    """Commit one micro-batch's files with the transaction ``(app_id, batch_id)``, on the table
    as it is now (earlier batches have committed since the plan was made; its schema must still
    be the one the files were written for); None when the batch was already committed (a
    replay: its new files are deleted) or changes nothing."""
    adds = task_files(messages)
    plans = [m.plan for m in messages if isinstance(m, StreamedFiles) and m.plan is not None]
    # The tasks' plan: a new table's metadata as the files were written for it.
    write = next(iter(plans), write)
    if write.plan.context is None:  # planned as nothing to write: no table was checked, plan again
        return None
    # Identity values numbered from one version's marks commit reading that version (see above).
    numbered_at = {p.plan.read_version for p in plans if numbers_identity(p)}
    if len(numbered_at) > 1:
        delete_written(write, messages)
        raise MetadataChangedError(
            f"the tasks of batch {batch_id} numbered identity values of table {write.options.uri} from versions "
            f"{sorted(numbered_at)}: another writer committed meanwhile; nothing committed, a restart replays the batch",
            winning_version=max(numbered_at))
    plan = write.plan.for_batch(mode, app_id, batch_id)
    table = Table(write.options.uri, write.options.storage_options)
    txn = table.open_write(plan, latest=not numbered_at)
    if txn is None:
        delete_written(write, messages)
        return None
    with txn:
        result = stage_write(txn, plan, adds, ArrowRemoval(txn))
        if result is None:
            return None
        txn.set_operation_metrics(**result.metrics)
    return txn.result


def numbers_identity(write: SourceWrite) -> bool:
    """Does the write generate identity values (a table with identity columns)?"""
    context = write.plan.context
    return context is not None and write.plan.read_version >= 0 and any(c.identity is not None for c in context.conform_spec.columns)


def numbered_from_latest(write: SourceWrite) -> SourceWrite:
    """The stream's plan for one task of a batch on a table with identity columns: the table's
    configuration as it is now (its identity high-water marks), and that version as the one the
    batch's commit reads. The schema must still be the one the stream was planned for; a stream
    that evolves the schema (``mergeSchema``) evolves the table as it is now until one of its
    batches has committed the evolution, and then writes to the evolved table."""
    plan = write.plan
    assert plan.context is not None
    txn = Table(write.options.uri, write.options.storage_options).transaction(plan.operation)
    try:
        assert txn.snapshot is not None
        version, planned, current = txn.snapshot.version, plan.context.table_configuration, txn.table_configuration
        marks = {name: i.high_water_mark for name, i in current.identity_columns.items() if i.high_water_mark is not None}
        metadata, same = plan.metadata, _same_table(planned, current, marks)
        if metadata is not None and not same:
            # Not evolved yet: the planned metadata with today's marks, checked as every evolution is.
            txn.update_metadata(schema=with_high_water_marks(metadata.schema_string, marks), partition_columns=metadata.partition_columns,
                                automatic_widening_only=True)
            current, metadata = txn.table_configuration, txn.metadata
            same = _same_table(planned, current, marks)
        else:
            metadata = None  # an earlier batch of this stream committed the evolution
    except TxnLogError as e:
        raise SchemaError(f"the stream to table {write.options.uri} cannot evolve its schema at version {version}: {e}") from None
    finally:
        txn.abort()
    if not same:
        raise SchemaError(f"table {write.options.uri} changed its schema, partitioning or properties since the stream started (version "
                          f"{plan.read_version}, now {version}); restart the query to plan it again")
    context = dataclasses.replace(plan.context, table_configuration=current)
    return dataclasses.replace(write, plan=dataclasses.replace(plan, read_version=version, context=context, metadata=metadata))


def _same_table(planned: TableConfiguration, current: TableConfiguration, marks: dict[str, int]) -> bool:
    """Do the two configurations differ in nothing but identity high-water marks?"""
    return (with_high_water_marks(planned.metadata.schema_string, marks) == with_high_water_marks(current.metadata.schema_string, marks)
            and planned.partition_columns == current.partition_columns and planned.protocol == current.protocol
            and dict(planned.properties) == dict(current.properties))


class TableStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink: tasks write Parquet; each batch commits once, keyed by its batch id."""

    def __init__(self, options: SourceOptions, schema: StructType, overwrite: bool) -> None:
        self.mode = "overwrite" if overwrite else "append"  # outputMode complete truncates each batch
        self.app_id = query_id(options)
        # Planned as an append (a new table's metadata, the checks of txnlog.spark.write);
        # complete mode's overwrite happens in each batch's commit.
        self.plan = plan_write(dataclasses.replace(options, app_id=None, app_version=None), schema, False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StreamedFiles:
        plan = self.plan
        if numbers_identity(plan):
            try:
                plan = numbered_from_latest(plan)
            except TxnLogError as e:
                for _ in iterator:
                    pass
                return StreamedFiles([], e, None)
        written = write_task(plan, iterator)
        return StreamedFiles(written.adds, written.error, plan)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        commit_batch(self.plan, messages, batchId, self.app_id, self.mode)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        delete_written(self.plan, messages)


__all__ = ["CHECKPOINT_METADATA", "StreamedFiles", "TableStreamWriter", "commit_batch", "numbered_from_latest", "numbers_identity", "query_id"]
