"""The change data of one commit written by Spark: the core's rule (:class:`txnlog.dml.ChangeData`)
with DataFrames as the rows, written as ``cdc`` files by Spark tasks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import functions as F

from txnlog import OptimisticTransaction, WriteContext
from txnlog.dml import ChangeData
from txnlog.read import CHANGE_TYPE
from txnlog.spark.common import column
from txnlog.spark.reader import read_files
from txnlog.spark.tasks import write_change_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class ChangeRows:
    """The change rows of one commit, as DataFrames made only when the commit needs them.
    :meth:`require` takes rows only cdc files can tell (deleted rows next to copied ones, update
    pre- and post-images); :meth:`imply` and :meth:`imply_files` rows the file actions already
    tell (appended files as inserts, whole files removed as deletes). Nothing is recorded on a
    table without the feed."""

    def __init__(self, spark: SparkSession, txn: OptimisticTransaction) -> None:
        self.spark = spark
        self.txn = txn
        self.data: ChangeData[DataFrame] = ChangeData(txn)
        self.enabled = self.data.enabled

    def require(self, rows: Callable[[], DataFrame], change_type: str) -> None:
        self.data.require(lambda: self._typed(rows(), change_type), change_type)

    def imply(self, rows: Callable[[], DataFrame], change_type: str) -> None:
        self.data.imply(lambda: self._typed(rows(), change_type), change_type)

    def imply_files(self, files: pa.Table, change_type: str) -> None:
        """Every live row of ``files`` (of the snapshot, or staged adds) as ``change_type``."""
        snapshot = self.txn.snapshot
        if self.enabled and files.num_rows and snapshot is not None:  # a new table's first commit only adds
            self.imply(lambda: read_files(self.spark, snapshot, files), change_type)

    def _typed(self, df: DataFrame, change_type: str) -> DataFrame:
        names = [f.name for f in self.txn.metadata.schema]
        return df.select(*[column(c) for c in names], F.lit(change_type).alias(CHANGE_TYPE))

    def stage(self, ctx: WriteContext | None = None) -> int:
        """Before the commit: write the change rows as cdc files and stage them when the
        commit needs them, else declare its file actions its changes; the number of cdc files."""

        def write(rows: list[tuple[Callable[[], DataFrame], str]]) -> int:
            frames = [make() for make, _ in rows]
            df = frames[0]
            for more in frames[1:]:
                df = df.unionByName(more)
            cdc = write_change_rows(df, ctx or self.txn.write_context())
            self.txn.add_cdc_files(cdc)
            return len(cdc)

        return self.data.finish(write)


__all__ = ["ChangeRows"]
