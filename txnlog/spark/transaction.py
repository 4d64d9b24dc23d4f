"""A transaction context manager for PySpark jobs.

``with txnlog.spark.transaction(spark, uri) as tx:`` reads one snapshot, records what the job
reads (readPredicates, readFiles) so concurrent commits that change it are caught, stages what
it writes (files written by the executors), and commits everything in one version on normal
exit. An exception aborts: nothing reaches the log, and data files already written are left
for vacuum. A lost race that conflicts raises one of the :mod:`txnlog.errors` conflict classes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from txnlog import AddFile, CommitResult, IsolationLevel, OptimisticTransaction, Table
from txnlog.dml import RowChangePlan, files_table
from txnlog.errors import FileNotLiveError, InvalidArgumentTypeError, TransactionError
from txnlog.spark.change_data import ChangeRows
from txnlog.spark.common import in_utc, require_dataframe
from txnlog.spark.reader import read_files, read_snapshot
from txnlog.spark.row_changes import StagedRows, run_delete, run_update
from txnlog.spark.tasks import check_schema, write_files

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

    def _count_statement(self, staged: StagedRows) -> None:
        """Stage a DELETE's or UPDATE's files in the view and add its metrics (the commit's
        file and output counts stay the transaction's own)."""
        self._staged(staged.removed, staged.added)
        if staged.new_files is not None:
            self._staged(added=staged.new_files)
        metrics = staged.metrics.operation_metrics()
        self._count({k: v for k, v in metrics.items() if k not in _COMMIT_COUNTS})

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
        files = self.files(predicate)
        if self._view is None:  # nothing staged yet: the snapshot's rows, whichever reader reads them
            return read_snapshot(self.spark, self.snapshot, files, predicate)
        df = read_files(self.spark, self.snapshot, files)
        if predicate is not None:
            df = df.filter(F.expr(predicate))
        return df

    def read_files(self, files: pa.Table) -> DataFrame:
        """The rows of ``files`` (rows of :meth:`files`) as a DataFrame."""
        return read_files(self.spark, self.snapshot, files)

    # -- writes: staged ----------------------------------------------------------------------

    def write_files(self, df: DataFrame, data_change: bool = True) -> list[AddFile]:
        """Write ``df`` as data files on the executors and stage them as adds. Its rows may not
        give a GENERATED ALWAYS identity column (SchemaError), as in delta-spark."""
        adds = self._write(df, data_change, user_rows=True)
        self._count({"numAddedFiles": len(adds)})
        return adds

    def _write(self, df: DataFrame, data_change: bool = True, *, inserted: bool = True, preserve_row_ids: bool = False,
               user_rows: bool = False) -> list[AddFile]:
        ctx = self.txn.write_context()
        if user_rows and data_change:  # a statement's own rows keep their ids; a user's may not give them
            ctx.conform_spec.check_supplied(df.columns)
        adds = write_files(df, ctx, data_change=data_change, preserve_row_ids=preserve_row_ids)
        self.txn.add_files(adds, data_change=data_change)
        self._staged(added=adds)
        if inserted and data_change:
            self._changes.imply_files(files_table(adds), "insert")
        return adds

    def _finish(self) -> None:
        """Before the commit: write the change data files the staged changes need."""
        with in_utc(self.spark):  # Spark Connect analyses the staged change rows only now
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

    def _plan(self, plan: RowChangePlan) -> RowChangePlan:
        """Name the rows a DELETE or UPDATE chose in the commit's ``operationParameters``, as
        delta-spark does: ``predicate`` is the JSON list of every such condition, in order."""
        self._predicates.append(plan.predicate)
        self.txn.operation_parameters["predicate"] = list(self._predicates)
        return plan

    def delete(self, predicate: str) -> int:
        """Delete the rows matching ``predicate``. Files whose partition values match are
        removed; in a file also holding other rows, the matching rows are marked in its deletion
        vector where the table enables them (``delta.enableDeletionVectors``), else the file is
        rewritten without them (copy-on-write). Returns how many file entries were removed (a
        file whose vector grew counts: its old entry is replaced)."""
        plan = self._plan(RowChangePlan.delete(self.snapshot, predicate, config=self.txn.table_configuration))
        staged = run_delete(self.spark, self.txn, plan, files=self._live(), changes=self._changes)
        self._count_statement(staged)
        return int(staged.removed.num_rows)

    def update(self, predicate: str, set: Mapping[str, str]) -> int:  # noqa: A002 - the SQL word
        """``UPDATE ... SET col = expr WHERE predicate``. ``set`` maps column names to Spark SQL
        expressions over the row. Where the table enables deletion vectors, the old rows are
        marked deleted and only their new versions are written; otherwise (copy-on-write) each
        file holding a matching row is rewritten. Returns how many file entries were replaced."""
        plan = RowChangePlan.update(self.snapshot, predicate, set, config=self.txn.table_configuration, strict=False)
        staged = run_update(self.spark, self.txn, self._plan(plan), files=self._live(), changes=self._changes)
        self._count_statement(staged)
        return int(staged.removed.num_rows)

    def overwrite(self, df: DataFrame, predicate: str | None = None) -> list[AddFile]:
        """Replace every row (or the rows matching ``predicate``, and then every row of ``df``
        must match it) with ``df``'s rows."""
        require_dataframe(df)
        ctx = self.txn.write_context()
        check_schema(df, ctx)
        if predicate is None:
            self.txn.read_whole_table()
            removed = self._live()
            self.txn.remove_files(removed)
            self._changes.imply_files(removed, "delete")
            self._staged(removed=removed)
            self._count({"numRemovedFiles": removed.num_rows})
        else:
            plan = RowChangePlan.delete(self.snapshot, predicate, config=self.txn.table_configuration)
            staged = run_delete(self.spark, self.txn, plan, ctx=ctx, files=self._live(), changes=self._changes)
            self._staged(staged.removed, staged.added)
            metrics = staged.metrics.operation_metrics()
            self._count({k: metrics[k] for k in ("numRemovedFiles", "numAddedFiles")})
        adds = write_files(df, ctx, require=predicate)
        self.txn.add_files(adds)
        self._staged(added=adds)
        self._changes.imply_files(files_table(adds), "insert")
        self._count({"numAddedFiles": len(adds)})
        return adds


#: The commit's counts of its files and output, which the transaction computes from all of them.
_COMMIT_COUNTS = ("numFiles", "numOutputBytes", "numOutputRows")


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
