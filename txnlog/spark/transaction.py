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
from txnlog.errors import FileNotLiveError, InvalidArgumentError, InvalidArgumentTypeError, InvalidPredicateError, TransactionError
from txnlog.spark.common import column, require_dataframe
from txnlog.spark.reader import read_files
from txnlog.spark.writer import check_schema, files_table, files_with_matches, remove_where, write_files

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

    def _staged(self, removed: pa.Table | None = None, added: list[AddFile] | None = None) -> None:
        view = self._live()
        if removed is not None and removed.num_rows:
            view = view.filter(pc.invert(pc.is_in(view.column("path"), removed.column("path"))))
        if added:
            new = files_table(added).select(view.column_names).cast(view.schema)
            view = pa.concat_tables([view, new])
        self._view = view

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
        adds = write_files(df, self.txn.write_context(), data_change=data_change)
        self.txn.add_files(adds, data_change=data_change)
        self._staged(added=adds)
        return adds

    def write(self, df: DataFrame) -> list[AddFile]:
        """Append ``df``'s rows."""
        return self.write_files(df)

    def add(self, add_files: Iterable[AddFile] | pa.Table, data_change: bool = True) -> None:
        """Stage files already written under the table root (``AddFile`` records or a file table)."""
        if isinstance(add_files, pa.Table):
            self.txn.add_files(add_files, data_change=data_change)
            self._view = None if self._view is None else pa.concat_tables(
                [self._view, add_files.select([c for c in self._view.column_names if c in add_files.column_names])], promote_options="default"
            )
            return
        adds = list(add_files)
        self.txn.add_files(adds, data_change=data_change)
        self._staged(added=adds)

    def remove(self, files: pa.Table | Iterable[str] | Iterable[AddFile], data_change: bool = True) -> None:
        """Stage the removal of live files: rows of :meth:`files`, ``AddFile`` records, or
        ``add.path`` strings (FileNotLiveError names a path that is not live)."""
        if isinstance(files, pa.Table):
            self.txn.remove_files(files, data_change=data_change)
            self._staged(removed=files)
            return
        if isinstance(files, (str, bytes)):
            raise InvalidArgumentTypeError("remove() takes a list of paths, not a single string")
        items = list(files)
        if all(isinstance(f, AddFile) for f in items):
            adds = [f for f in items if isinstance(f, AddFile)]
            self.txn.remove_files(adds, data_change=data_change)
            self._staged(removed=files_table(adds))
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
        self._staged(removed=chosen)

    def delete(self, predicate: str) -> int:
        """Delete the rows matching ``predicate`` (copy-on-write: files whose partition values
        match are dropped, a file holding matching and other rows is rewritten without the
        matching ones). Returns how many files were removed."""
        self._record_predicate(predicate)
        removed, added = remove_where(self.spark, self.txn, predicate, files=self._live())
        self._staged(removed, added)
        return int(removed.num_rows)

    def update(self, predicate: str, set: Mapping[str, str]) -> int:  # noqa: A002 - the SQL word
        """``UPDATE ... SET col = expr WHERE predicate``, copy-on-write: only files holding a
        matching row are rewritten. ``set`` maps column names to Spark SQL expressions over the
        row. Returns how many files were rewritten."""
        if not set:
            raise InvalidArgumentError("update() needs at least one column in set")
        snapshot = self.snapshot
        names = {f.name.lower(): f.name for f in snapshot.schema}
        for target in set:
            if target.lower() not in names:
                raise InvalidArgumentError(f"update() sets column {target!r}, which table {snapshot.uri} does not have")
        self._record_predicate(predicate)
        self.txn.filter_files(predicate)  # records the read
        candidates = snapshot.predicate(predicate).filter(self._live())
        if candidates.num_rows == 0:
            return 0
        hit = files_with_matches(self.spark, snapshot, candidates, predicate)
        if hit.num_rows == 0:
            return 0
        matches = F.coalesce(F.expr(predicate), F.lit(False))
        source = read_files(self.spark, snapshot, hit)
        new_values = {names[c.lower()]: e for c, e in set.items()}
        types = {f.name: f.dataType for f in source.schema.fields}
        updated = source.select(*[
            F.when(matches, F.expr(new_values[c]).cast(types[c])).otherwise(column(c)).alias(c) if c in new_values else column(c)
            for c in source.columns
        ])
        self.txn.remove_files(hit)
        self._staged(removed=hit)
        self.write_files(updated)
        return int(hit.num_rows)

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
        else:
            if self.snapshot.predicate(predicate).rows().expression is None:
                # The written rows are checked against it on the executors, as one Arrow expression.
                raise InvalidPredicateError(
                    f"overwrite of table {self.snapshot.uri}: predicate {predicate!r} computes values on rows "
                    "(arithmetic, functions, CASE), which the check of the written rows cannot; "
                    "use conditions on columns against literals, or delete() then write()",
                    predicate=predicate,
                )
            removed, added = remove_where(self.spark, self.txn, predicate, ctx=ctx, files=self._live())
        self._staged(removed, added)
        adds = write_files(df, ctx, require=predicate)
        self.txn.add_files(adds)
        self._staged(added=adds)
        return adds


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
        yield SparkTransaction(spark, txn)


__all__ = ["SparkTransaction", "transaction"]
