"""txnlog as a Spark data source: ``spark.read.format("txnlog")`` and ``df.write.format("txnlog")``.

Register it once per session with :func:`register` (a Python data source lives in a session;
importing this package cannot register it, as no session need exist yet). Reads decode the
files with txnlog's own reader on the executors; writes have the tasks write Parquet and the
driver commit once, with the checks of :func:`txnlog.spark.write`.

- :mod:`~txnlog.spark.datasource.options`: the options both halves accept;
- :mod:`~txnlog.spark.datasource.batch_read`: planning, filter pushdown, read tasks;
- :mod:`~txnlog.spark.datasource.change_read`: a batch read of the change data feed (``readChangeFeed``);
- :mod:`~txnlog.spark.datasource.batch_write`: plan, tasks, one commit;
- :mod:`~txnlog.spark.datasource.stream_read`: ``spark.readStream``, offsets and rate limits;
- :mod:`~txnlog.spark.datasource.stream_write`: ``df.writeStream``, one commit per batch, exactly once.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from txnlog.errors import TxnLogError
from txnlog.spark.datasource.batch_read import FilteringTableReader, TableReader, open_snapshot, table_schema
from txnlog.spark.datasource.batch_write import TableWriter, plan_write
from txnlog.spark.datasource.change_read import ChangeFeedReader, change_feed_read_schema
from txnlog.spark.datasource.options import CHANGE_FEED_READ_OPTIONS, STREAM_READ_OPTIONS, SourceOptions
from txnlog.spark.datasource.stream_read import TableStreamReader, stream_schema
from txnlog.spark.datasource.stream_write import TableStreamWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The format name: ``spark.read.format(NAME)``.
NAME = "txnlog"
# Options only a stream takes, and those only a batch read of the change feed takes.
_STREAM_ONLY = {n.lower() for n in STREAM_READ_OPTIONS} - {n.lower() for n in CHANGE_FEED_READ_OPTIONS}
_CHANGE_FEED_ENDS = {"endingversion", "endingtimestamp"}
_STARTS = {"startingversion", "startingtimestamp"}

#: The session setting without which Spark refuses a reader that takes pushed filters.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


class TxnlogDataSource(DataSource):
    """The ``txnlog`` format. Spark creates one per ``load``/``save`` from its options."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        # The version schema() saw: Spark pickles this object after schema() and plans the read
        # with the copy, so the rows come from the version whose schema the DataFrame has.
        self.pinned_version: int | None = None

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # Spark does not say whether a read or a stream asks: an option of the other kind is
        # refused by reader() / streamReader(). A change feed read with a start and no end may
        # be either; both read it in the latest version's schema.
        lowered = {str(k).lower(): str(v) for k, v in self.options.items()}
        if lowered.keys() & _CHANGE_FEED_ENDS and not lowered.keys() & _STREAM_ONLY:
            options = SourceOptions.parse(self.options, writing=False)
            self.pinned_version = open_snapshot(options).version
            return change_feed_read_schema(options, self.pinned_version)
        streaming = bool(lowered.keys() & _STREAM_ONLY or lowered.keys() & _STARTS or lowered.get("readchangefeed", "").strip().lower() == "true")
        try:
            options = SourceOptions.parse(self.options, writing=False, streaming=streaming)
        except TxnLogError:
            if not streaming or lowered.keys() & _STREAM_ONLY:
                raise
            SourceOptions.parse(self.options, writing=False)  # a batch read's own error, when it is one
            raise
        snapshot = open_snapshot(options)
        self.pinned_version = snapshot.version
        return stream_schema(options, snapshot) if streaming else table_schema(snapshot)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options, writing=False)
        if options.read_change_feed:
            return ChangeFeedReader(options, self.pinned_version, schema)
        kind = FilteringTableReader if options.filter_pushdown else TableReader
        return kind(options, open_snapshot(options, self.pinned_version), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return TableWriter(plan_write(SourceOptions.parse(self.options, writing=True), schema, overwrite))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        options = SourceOptions.parse(self.options, writing=False, streaming=True)
        return TableStreamReader(options, open_snapshot(options, self.pinned_version), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - Spark's name
        return TableStreamWriter(SourceOptions.parse(self.options, writing=True, streaming=True), schema, overwrite)


def register(spark: SparkSession | Any) -> None:
    """Make ``format("txnlog")`` available in ``spark`` (a classic or Spark Connect session), and
    turn on Spark's filter pushdown to Python data sources, which ``option("filterPushdown",
    "true")`` needs (a session setting, allowed at runtime; Spark refuses a reader that takes
    pushed filters while it is off)."""
    spark.dataSource.register(TxnlogDataSource)
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")


__all__ = ["FILTER_PUSHDOWN_CONF", "NAME", "TxnlogDataSource", "register"]
