"""A transaction context manager for PySpark jobs.

``with txnlog.spark.transaction(spark, uri) as tx:`` reads one snapshot, records what the job
reads (readPredicates, readFiles) so concurrent commits that change it are caught, stages what
it writes (files written by the executors), and commits everything in one version on normal
exit. An exception aborts: nothing reaches the log, and data files already written are left
for vacuum. A lost race that conflicts raises one of the :mod:`txnlog.errors` conflict classes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from txnlog import AddFile, CommitResult, IsolationLevel, OptimisticTransaction, Table
from txnlog.errors import FileNotLiveError, InvalidArgumentError, InvalidArgumentTypeError, TransactionError
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import column, require_dataframe
from txnlog.spark.reader import read_files
from txnlog.spark.writer import (
    ChangeRows,
    check_schema,
    dropped_vectors,
    files_table,
    live_rows,
    matching_files,
    remove_where,
    row_delete_metrics,
    rows_to_mark,
    tracks_row_ids,
    write_files,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from txnlog import Snapshot


class SparkTransaction:
    """One atomic change to a table, driven from PySpark. Made by :func:`transaction`."""

    def __init__(self, spark: SparkSession, txn: OptimisticTransaction) -> None:
        self.spark = spark
        #: The underlying :class:`~txnlog.txn.transaction.OptimisticTransaction`.
        self.txn = txn
        # The live files as this transaction sees them: the snapshot's, less staged removes,
        # plus staged adds, so a delete after an update in one transaction sees the update.
        self._view: pa.Table | None = None
        self._predicates: list[str] = []
        self._metrics: dict[str, int] = {}
        # The commit's change data (tables with the change data feed enabled).
        self._changes = ChangeRows(spark, txn)

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot this transaction reads."""
        if self.txn.snapshot is None:  # transaction() only starts on an existing table
            raise TransactionError(f"table {self.txn.uri} does not exist")
        return self.txn.snapshot

    @property
    def result(self) -> CommitResult | None:
        """The committed version, once the ``with`` block has committed."""
        return self.txn.result

    def _record_predicate(self, predicate: str) -> None:
        """Name the rows a DELETE or UPDATE chose in the commit's ``operationParameters``, as
        delta-spark does: ``predicate`` is the JSON list of every such condition, in order."""
        self._predicates.append(predicate)
        self.txn.operation_parameters["predicate"] = list(self._predicates)

    def _live(self) -> pa.Table:
        return self._view if self._view is not None else self.snapshot.files()

    def _staged(self, removed: pa.Table | None = None, added: list[AddFile] | pa.Table | None = None) -> None:
        # A file whose deletion vector changed is removed and added again under the same path:
        # the removes go first, so its new entry is the one left in the view.
        view = self._live()
        if removed is not None and removed.num_rows:
            view = view.filter(pc.invert(pc.is_in(view.column("path"), removed.column("path"))))
        new = files_table(added) if isinstance(added, list) else added
        if new is not None and new.num_rows:
            view = pa.concat_tables([view, new.select(view.column_names).cast(view.schema)])
        self._view = view

    def _count(self, metrics: Mapping[str, int]) -> None:
        """Add one operation's metrics to the commit's: a transaction holding several DELETEs
        or UPDATEs records their sums. Every operation counts the data files it adds and removes
        (``numAddedFiles``, ``numRemovedFiles``) as delta-spark does: a file that only gets a new
        deletion vector is neither, though the log removes and adds it."""
        for name, value in metrics.items():
            self._metrics[name] = self._metrics.get(name, 0) + int(value)
        self.txn.set_operation_metrics(**self._metrics)

    # -- reads: recorded ---------------------------------------------------------------------

    def files(self, predicate: str | None = None) -> pa.Table:
        """The live files that may hold rows matching ``predicate`` (all when None), recorded
        as read. Files this transaction already staged count: removed ones are gone, added ones
        are there."""
        recorded = self.txn.filter_files(predicate)
        if self._view is None:
            return recorded
        return self._view if predicate is None else self.snapshot.predicate(predicate).filter(self._view)

    def read(self, predicate: str | None = None) -> DataFrame:
        """The rows matching ``predicate`` (all when None) as a DataFrame; the files and the
        predicate are recorded as read."""
        df = read_files(self.spark, self.snapshot, self.files(predicate))
        if predicate is not None:
            df = df.filter(F.expr(predicate))
        return df

    def read_files(self, files: pa.Table) -> DataFrame:
        """The rows of ``files`` (rows of :meth:`files`) as a DataFrame."""
        return read_files(self.spark, self.snapshot, files)

    # -- writes: staged ----------------------------------------------------------------------

    def write_files(self, df: DataFrame, data_change: bool = True) -> list[AddFile]:
        """Write ``df`` as data files on the executors and stage them as adds."""
        adds = self._write(df, data_change)
        self._count({"numAddedFiles": len(adds)})
        return adds

    def _write(self, df: DataFrame, data_change: bool = True, *, inserted: bool = True, preserve_row_ids: bool = False) -> list[AddFile]:
        adds = write_files(df, self.txn.write_context(), data_change=data_change, preserve_row_ids=preserve_row_ids)
        self.txn.add_files(adds, data_change=data_change)
        self._staged(added=adds)
        if inserted and data_change:
            self._changes.imply_files(files_table(adds), "insert")
        return adds

    def _finish(self) -> None:
        """Before the commit: write the change data files the staged changes need."""
        written = self._changes.stage()
        if written:
            self._count({"numAddedChangeFiles": written})

    def write(self, df: DataFrame) -> list[AddFile]:
        """Append ``df``'s rows."""
        return self.write_files(df)

    def add(self, add_files: Iterable[AddFile] | pa.Table, data_change: bool = True) -> None:
        """Stage files already written under the table root (``AddFile`` records or a file table)."""
        if isinstance(add_files, pa.Table):
            self.txn.add_files(add_files, data_change=data_change)
            if data_change:
                self._changes.imply_files(add_files, "insert")
            self._view = None if self._view is None else pa.concat_tables(
                [self._view, add_files.select([c for c in self._view.column_names if c in add_files.column_names])], promote_options="default"
            )
            self._count({"numAddedFiles": add_files.num_rows})
            return
        adds = list(add_files)
        self.txn.add_files(adds, data_change=data_change)
        self._staged(added=adds)
        if data_change:
            self._changes.imply_files(files_table(adds), "insert")
        self._count({"numAddedFiles": len(adds)})

    def remove(self, files: pa.Table | Iterable[str] | Iterable[AddFile], data_change: bool = True) -> None:
        """Stage the removal of live files: rows of :meth:`files`, ``AddFile`` records, or
        ``add.path`` strings (FileNotLiveError names a path that is not live)."""
        if isinstance(files, pa.Table):
            self.txn.remove_files(files, data_change=data_change)
            if data_change:
                self._changes.imply_files(files, "delete")
            self._staged(removed=files)
            self._count({"numRemovedFiles": files.num_rows})
            return
        if isinstance(files, (str, bytes)):
            raise InvalidArgumentTypeError("remove() takes a list of paths, not a single string")
        items = list(files)
        if all(isinstance(f, AddFile) for f in items):
            adds = [f for f in items if isinstance(f, AddFile)]
            self.txn.remove_files(adds, data_change=data_change)
            if data_change:
                self._changes.imply_files(files_table(adds), "delete")
            self._staged(removed=files_table(adds))
            self._count({"numRemovedFiles": len(adds)})
            return
        if not all(isinstance(f, str) for f in items):
            raise InvalidArgumentTypeError("remove() takes a file table, AddFile records or add.path strings")
        live = self._live()
        chosen = live.filter(pc.is_in(live.column("path"), pa.array(items, pa.string())))
        found = set(chosen.column("path").to_pylist())
        for path in items:
            if path not in found:
                raise FileNotLiveError(f"file {path!r} is not live in table {self.snapshot.uri} at version {self.snapshot.version}", path=str(path))
        self.txn.remove_files(chosen, data_change=data_change)
        if data_change:
            self._changes.imply_files(chosen, "delete")
        self._staged(removed=chosen)
        self._count({"numRemovedFiles": chosen.num_rows})

    def delete(self, predicate: str) -> int:
        """Delete the rows matching ``predicate``. Files whose partition values match are
        removed; in a file also holding other rows, the matching rows are marked in its deletion
        vector where the table enables them (``delta.enableDeletionVectors``), else the file is
        rewritten without them (copy-on-write). Returns how many file entries were removed (a
        file whose vector grew counts: its old entry is replaced)."""
        started = time.monotonic()
        self._record_predicate(predicate)
        removal = remove_where(self.spark, self.txn, predicate, files=self._live(), changes=self._changes)
        self._staged(removal.removed, removal.added)
        self._count({**removal.metrics, "executionTimeMs": _elapsed_ms(started)})
        return int(removal.removed.num_rows)

    def update(self, predicate: str, set: Mapping[str, str]) -> int:  # noqa: A002 - the SQL word
        """``UPDATE ... SET col = expr WHERE predicate``. ``set`` maps column names to Spark SQL
        expressions over the row. Where the table enables deletion vectors, the old rows are
        marked deleted and only their new versions are written; otherwise (copy-on-write) each
        file holding a matching row is rewritten. Returns how many file entries were replaced."""
        if not set:
            raise InvalidArgumentError("update() needs at least one column in set")
        started = time.monotonic()
        snapshot = self.snapshot
        names = {f.name.lower(): f.name for f in snapshot.schema}
        for target in set:
            if target.lower() not in names:
                raise InvalidArgumentError(f"update() sets column {target!r}, which table {snapshot.uri} does not have")
        self._record_predicate(predicate)
        self.txn.filter_files(predicate)  # records the read
        candidates = snapshot.predicate(predicate).filter(self._live())
        matches = F.coalesce(F.expr(predicate), F.lit(False))
        new_values = {names[c.lower()]: e for c, e in set.items()}
        merge_on_read = self.txn.table_configuration.deletion_vectors_enabled
        if merge_on_read:
            hit, positions = rows_to_mark(self.spark, snapshot, candidates, predicate)
        else:
            hit, matched = matching_files(self.spark, snapshot, candidates, matches) if candidates.num_rows else (candidates, 0)
        scanned = time.monotonic()
        if hit.num_rows == 0:
            self._count({"numUpdatedRows": 0, "numCopiedRows": 0, "executionTimeMs": _elapsed_ms(started)})
            return 0
        row_ids = tracks_row_ids(self.txn.table_configuration)
        source = read_files(self.spark, snapshot, hit, with_row_ids=row_ids)
        types = {f.name: f.dataType for f in source.schema.fields}
        table_columns = [f.name for f in snapshot.schema]
        # An updated row keeps its stable id; its commit version becomes this commit's.
        new_version = F.lit(None).cast("long").alias(ROW_COMMIT_VERSION)

        def new_value(c: str, condition: Any) -> Any:
            value = F.expr(new_values[c]).cast(types[c])
            return (F.when(condition, value).otherwise(column(c)) if condition is not None else value).alias(c)

        new_rows = source.filter(matches).select(
            *[new_value(c, None) if c in new_values else column(c) for c in table_columns], *([column(ROW_ID), new_version] if row_ids else [])
        )
        self._changes.require(lambda: source.filter(matches), "update_preimage")
        self._changes.require(lambda: new_rows, "update_postimage")
        if merge_on_read:
            # only the new versions of the updated rows
            adds = self._write(new_rows, inserted=False, preserve_row_ids=row_ids)
            deletes = self.txn.delete_rows(hit, positions)
            self._staged(deletes.removed, deletes.added)
            metrics = row_delete_metrics(deletes)
            metrics["numUpdatedRows"] = metrics.pop("numDeletedRows")
            removed = deletes.removed
        else:
            versions = [column(ROW_ID), F.when(matches, F.lit(None).cast("long")).otherwise(column(ROW_COMMIT_VERSION)).alias(ROW_COMMIT_VERSION)]
            rewritten = source.select(*[new_value(c, matches) if c in new_values else column(c) for c in table_columns], *(versions if row_ids else []))
            self.txn.remove_files(hit)
            self._staged(removed=hit)
            adds = self._write(rewritten, inserted=False, preserve_row_ids=row_ids)
            written = live_rows(files_table(adds))
            metrics = {
                "numRemovedFiles": hit.num_rows,
                "numRemovedBytes": int(pc.sum(hit.column("size")).as_py() or 0),
                "numDeletionVectorsAdded": 0,
                "numDeletionVectorsUpdated": 0,
                "numDeletionVectorsRemoved": dropped_vectors(hit),
                "numUpdatedRows": matched,
            }
            if written is not None:  # every live row of a rewritten file is written again
                metrics["numCopiedRows"] = written - matched
            removed = hit
        self._count({
            **metrics,
            "numAddedFiles": len(adds),
            "numAddedBytes": sum(a.size for a in adds),
            "numAddedChangeFiles": 0,  # counted when written, before the commit
            "scanTimeMs": _elapsed_ms(started, scanned),
            "rewriteTimeMs": _elapsed_ms(scanned),
            "executionTimeMs": _elapsed_ms(started),
        })
        return int(removed.num_rows)

    def overwrite(self, df: DataFrame, predicate: str | None = None) -> list[AddFile]:
        """Replace every row (or the rows matching ``predicate``, and then every row of ``df``
        must match it) with ``df``'s rows."""
        require_dataframe(df)
        ctx = self.txn.write_context()
        check_schema(df, ctx)
        if predicate is None:
            self.txn.read_whole_table()
            removed, added = self._live(), list[AddFile]()
            self.txn.remove_files(removed)
            self._changes.imply_files(removed, "delete")
            files_metrics = {"numRemovedFiles": removed.num_rows}
        else:
            removal = remove_where(self.spark, self.txn, predicate, ctx=ctx, files=self._live(), changes=self._changes)
            removed, added = removal.removed, removal.added
            files_metrics = {k: removal.metrics.get(k, 0) for k in ("numRemovedFiles", "numAddedFiles")}
        self._staged(removed, added)
        adds = write_files(df, ctx, require=predicate)
        self.txn.add_files(adds)
        self._staged(added=adds)
        self._changes.imply_files(files_table(adds), "insert")
        files_metrics["numAddedFiles"] = files_metrics.get("numAddedFiles", 0) + len(adds)
        self._count(files_metrics)
        return adds


def _elapsed_ms(start: float, end: float | None = None) -> int:
    return int(((time.monotonic() if end is None else end) - start) * 1000)


@contextlib.contextmanager
def transaction(
    spark: SparkSession,
    uri: str,
    operation: str = "WRITE",
    isolation: IsolationLevel | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Iterator[SparkTransaction]:
    """``with transaction(spark, uri) as tx:`` one atomic change to the existing table at
    ``uri``: commit on normal exit, abort on an exception (see :class:`SparkTransaction`)."""
    table = Table(uri, storage_options)
    txn = table.transaction(operation, isolation)
    with txn:
        spark_txn = SparkTransaction(spark, txn)
        yield spark_txn
        if txn.state == "open":  # the block may have aborted it (a statement that matched nothing)
            spark_txn._finish()


__all__ = ["SparkTransaction", "transaction"]
