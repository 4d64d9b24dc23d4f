"""``spark.read.format("txnlog").option("readChangeFeed", "true").option("startingVersion", v)``:
a batch read of the change data feed, as delta-spark users write it.

Planning asks the core for the range's changes (:meth:`Table.change_files`, the one classifier)
and packs whole versions into read tasks; each task reads its versions with the core's change
reader (:func:`txnlog.read.change_batches`, what :meth:`Table.changes` and the streaming source
read with), in the end version's schema, as delta-spark reads a range.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from txnlog import Snapshot, Table
from txnlog.log import VersionChanges
from txnlog.read import ReadContext, change_batches
from txnlog.spark.common import arrow_schema_of_struct
from txnlog.spark.datasource.batch_read import check_given_schema, pack_files, spark_batch, table_schema
from txnlog.spark.datasource.options import SourceOptions
from txnlog.spark.datasource.stream_read import ChangesPartition, change_feed_schema


def change_range(options: SourceOptions, latest: int | None) -> tuple[Snapshot, list[VersionChanges]]:
    """The range's changes and the snapshot whose schema they are read in (the end version's).
    Without an ending bound the range ends at ``latest`` (the version the DataFrame was loaded
    at), so that a later commit does not change a loaded DataFrame."""
    table = Table(options.uri, options.storage_options)
    ending = options.ending_version
    if ending is None and options.ending_timestamp is None:
        ending = latest
    versions = table.change_files(
        options.starting_version, ending, starting_timestamp=options.starting_timestamp, ending_timestamp=options.ending_timestamp
    )
    return table.snapshot(versions[-1].version if versions else latest), versions


def change_feed_read_schema(options: SourceOptions, latest: int | None) -> StructType:
    """The DataFrame's schema: the end version's columns, then the change columns."""
    snapshot, _ = change_range(options, latest)
    return change_feed_schema(table_schema(snapshot))


class ChangeFeedReader(DataSourceReader):
    """Reads the change data feed of a range of versions. Picklable: tasks get the end
    version's :class:`ReadContext` and their versions' changes."""

    def __init__(self, options: SourceOptions, latest: int | None, schema: StructType) -> None:
        snapshot, versions = change_range(options, latest)
        check_given_schema(schema, change_feed_schema(table_schema(snapshot)), snapshot.uri, "spark.read")
        self.options = options
        self.context: ReadContext = snapshot.read_context()
        self.arrow_schema = arrow_schema_of_struct(schema)
        self._versions: list[VersionChanges] | None = [v for v in versions if not v.is_empty]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_versions"] = None  # the tasks carry their own versions
        return state

    def partitions(self) -> Sequence[InputPartition]:
        """Whole versions packed into tasks by the bytes they read, as files are packed."""
        versions = self._versions or []
        if not versions:
            return []
        cost = pa.table({
            "size": pa.array([sum(int(pc.sum(t.column("size")).as_py() or 0) for t in v.feed_files()) for v in versions], pa.int64()),
            "index": pa.array(range(len(versions)), pa.int64()),
        })
        groups = pack_files(cost, self.options.max_partition_bytes, self.options.open_cost_bytes, self.options.min_partitions)
        return [ChangesPartition([versions[i] for i in g.column("index").to_pylist()]) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ChangesPartition):  # Spark's placeholder when there is nothing to read
            return
        for batch in change_batches(self.context, partition.versions):
            yield spark_batch(batch, self.arrow_schema)


__all__ = ["ChangeFeedReader", "change_feed_read_schema", "change_range"]
