"""An exactly-once sink for Structured Streaming's ``foreachBatch``.

Each micro-batch is committed in one transaction together with ``txn(appId=app_id,
version=batchId)``. Spark replays a batch whose checkpoint it did not finish writing (a crash,
a kill, a restart); the sink then finds ``app_id`` already at that version or later and skips
it, so every source row lands once.

    query = (
        spark.readStream.format("rate").load()
        .writeStream.foreachBatch(foreach_batch_sink("s3://bucket/events", app_id="events-ingest"))
        .option("checkpointLocation", "s3://bucket/checkpoints/events-ingest")
        .start()
    )

``app_id`` must be stable across restarts of the same query and unique per query writing to
the table (two queries sharing one would skip each other's batches).

A batch that loses a conflict to a compaction (``OPTIMIZE``, which changes no row) is redone on
the new snapshot: safe, because compaction did not change what the batch means. Any other
conflict fails the batch and so the query: restarting it replays the batch, which is then
skipped if it had landed, or done again on the current table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from txnlog import Table
from txnlog.errors import CommitConflictError, InvalidArgumentError
from txnlog.spark.merge import merge_into
from txnlog.spark.writer import write

log = logging.getLogger(__name__)

COMPACTION_OPERATIONS = frozenset({"OPTIMIZE"})


def is_compaction_conflict(error: BaseException) -> bool:
    """True for a conflict whose winning commit was a compaction (rows unchanged): redoing the
    losing transaction on the new snapshot means the same as it did before."""
    return isinstance(error, CommitConflictError) and error.winning_operation in COMPACTION_OPERATIONS


@dataclass
class SinkStats:
    """Counters of one sink, for logs and summaries (thread-safe increments)."""

    committed: int = 0
    skipped: int = 0
    empty: int = 0
    conflicts: int = 0
    retries: int = 0
    rows: int = 0
    versions: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class ForeachBatchSink:
    """The callable ``foreach_batch_sink`` returns: ``sink(batch_df, batch_id)``."""

    def __init__(
        self,
        uri: str,
        app_id: str,
        mode: str = "append",
        merge_on: str | Sequence[str] | None = None,
        partition_by: Sequence[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        *,
        when_matched_update: Mapping[str, str] | str | None = "*",
        when_matched_delete: bool | str = False,
        when_not_matched_insert: Mapping[str, str] | str | None = "*",
        compaction_retries: int = 5,
        properties: Mapping[str, str] | None = None,
        merge_schema: bool = False,
    ) -> None:
        if mode not in ("append", "merge"):
            raise InvalidArgumentError(f"foreach_batch_sink mode must be 'append' or 'merge', got {mode!r}")
        if mode == "merge" and not merge_on:
            raise InvalidArgumentError("foreach_batch_sink(mode='merge') needs merge_on (the key column(s) or an ON condition)")
        if not isinstance(app_id, str) or not app_id:
            raise InvalidArgumentError(f"foreach_batch_sink needs a non-empty app_id, got {app_id!r}")
        self.uri = uri
        self.app_id = app_id
        self.mode = mode
        self.merge_on = merge_on
        self.partition_by = list(partition_by) if partition_by else None
        self.storage_options = dict(storage_options or {})
        self.when_matched_update = when_matched_update
        self.when_matched_delete = when_matched_delete
        self.when_not_matched_insert = when_not_matched_insert
        self.compaction_retries = compaction_retries
        self.properties = dict(properties) if properties else None
        self.merge_schema = merge_schema
        self.stats = SinkStats()
        #: The error that failed the last failed batch (the query itself only reports its text).
        self.last_error: BaseException | None = None
        self._table: Table | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark Connect pickles the function to run it server-side: the open Table stays behind.
        state = dict(self.__dict__)
        state["_table"] = None
        state["last_error"] = None
        return state

    def table(self) -> Table:
        if self._table is None:
            self._table = Table(self.uri, self.storage_options)
        return self._table

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        try:
            self._batch(batch_df, int(batch_id))
        except BaseException as error:
            # Spark hands the query's caller a StreamingQueryException carrying only the text.
            self.last_error = error
            raise

    def _batch(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        for attempt in range(1, self.compaction_retries + 2):
            try:
                version = self._commit(batch_df, batch_id)
                break
            except CommitConflictError as conflict:
                self.stats.add(conflicts=1)
                if not is_compaction_conflict(conflict) or attempt > self.compaction_retries:
                    raise
                self.stats.add(retries=1)
                log.warning("sink %s batch %d lost to a compaction (%s); redoing it on the new snapshot", self.app_id, batch_id, conflict)
        if version is None:
            return
        self.stats.add(committed=1)
        with self.stats._lock:
            self.stats.versions.append(int(version))
        log.info("sink %s batch %d committed as version %d in %.2fs", self.app_id, batch_id, version, time.monotonic() - started)

    def _skip(self, batch_id: int) -> None:
        self.stats.add(skipped=1)
        log.info("sink %s batch %d skipped: the table already has this app at this batch or a later one", self.app_id, batch_id)

    def _commit(self, batch_df: Any, batch_id: int) -> int | None:
        table = self.table()
        exists = table.exists()
        if not exists or self.mode == "append":
            # The writer skips the batch (returning None) when the app already committed it,
            # checked inside its transaction before any file is written.
            result = write(
                batch_df,
                self.uri,
                mode="append",
                partition_by=self.partition_by,
                properties=None if exists else self.properties,
                storage_options=self.storage_options,
                app_id=self.app_id,
                app_version=batch_id,
                merge_schema=self.merge_schema,
            )
            if result is None:
                self._skip(batch_id)
                return None
            return int(result)
        return self._merge(batch_df, batch_id, table)

    def _merge(self, batch_df: Any, batch_id: int, table: Table) -> int | None:
        assert self.merge_on is not None
        with table.transaction("STREAMING UPDATE", operation_parameters={"outputMode": "Update", "epochId": batch_id}) as txn:
            if txn.already_applied(self.app_id, batch_id):
                txn.abort()
                self._skip(batch_id)
                return None
            metrics = merge_into(
                txn,
                batch_df.sparkSession,
                batch_df,
                self.merge_on,
                when_matched_update=self.when_matched_update,
                when_matched_delete=self.when_matched_delete,
                when_not_matched_insert=self.when_not_matched_insert,
                schema_mode="merge" if self.merge_schema else None,
            )
            txn.set_operation_metrics(**metrics.operation_metrics())
            txn.set_app_transaction(self.app_id, batch_id)
        assert txn.result is not None
        return int(txn.result)


def foreach_batch_sink(
    uri: str,
    app_id: str,
    mode: str = "append",
    merge_on: str | Sequence[str] | None = None,
    partition_by: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> Callable[[Any, int], None]:
    """The function for ``df.writeStream.foreachBatch(...)``: every micro-batch is committed
    to the table at ``uri`` exactly once, keyed by ``(app_id, batchId)``.

    ``mode="append"`` appends each batch (creating the table, partitioned by ``partition_by``,
    from the first batch if needed); ``mode="merge"`` upserts it on ``merge_on`` (see
    :func:`txnlog.spark.merge.merge`; ``when_matched_update``, ``when_matched_delete`` and
    ``when_not_matched_insert`` pass through, by default ``"*"`` updates and inserts).
    ``merge_schema=True`` (delta-spark's ``mergeSchema``, and in merge mode its
    ``schema.autoMerge.enabled``): a batch's new columns are added to the table in its commit.
    The returned object counts what it did in ``.stats``.
    """
    return ForeachBatchSink(uri, app_id, mode, merge_on, partition_by, storage_options, **options)


__all__ = ["ForeachBatchSink", "SinkStats", "foreach_batch_sink", "is_compaction_conflict"]
