"""``spark.readStream.format("txnlog").load(uri)``: a txnlog table as a streaming source.

The stream is a sequence of files, as delta-spark's source sees it: first (unless
``startingVersion``/``startingTimestamp`` says where to begin) every live file of the snapshot
the query starts from, then, version after version, the files each commit adds. An offset is a
position in that sequence, a JSON dict ``{"version": v, "index": i, "snapshot": s}``: every file
before the ``i``-th of version ``v`` has been read; ``snapshot`` says whether version ``v`` is
read whole (the starting snapshot) or as its commit's adds. A finished version rolls over to
``{"version": v + 1, "index": 0, "snapshot": false}``, so equal positions are equal dicts.

Spark asks for the initial offset again when it runs the first batch, and after a restart whose
first batch was planned but not committed, so that offset cannot depend on when it is asked. It
is version -1: "the snapshot (or, for startingVersion=latest, the end) of the table when the
first batch is planned". That batch stops at the end of the snapshot, so its end offset names
the snapshot's version and every later call reads the same rows.

Each commit is classified by the core (:func:`txnlog.log.commit_changes`, the classifier the
change feed uses). Commits that remove data (DELETE, UPDATE, MERGE, an overwrite: ``remove``
actions with ``dataChange`` true) cannot be streamed as appends: they raise
:class:`ChangeCommitError` naming the version and the operation, unless ``skipChangeCommits``
skips such a version whole. With ``readChangeFeed`` the stream carries the change data feed
instead (``_change_type``, ``_commit_version``, ``_commit_timestamp``), read by txnlog's change
reader; a version is then one indivisible step. Either way a commit that changes the schema
stops the stream (:class:`SchemaError`): it reads with the schema it started with.

Planning (the offsets, the files of each batch) runs in a long-lived Python process on the
driver; the rows are decoded on the executors by the snapshot's :class:`~txnlog.read.ReadContext`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from txnlog import Snapshot, Table, to_millis
from txnlog.errors import InvalidArgumentError, SchemaError, TxnLogError, VersionNotFoundError
from txnlog.log import LogListing, VersionChanges, commit_changes, list_log
from txnlog.properties import LOG_RETENTION
from txnlog.read import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION, ReadContext, change_batches
from txnlog.spark.common import arrow_schema_of_struct
from txnlog.spark.datasource.batch_read import FilesPartition, check_given_schema, file_partitions, spark_batch, table_schema
from txnlog.spark.datasource.options import SourceOptions

#: delta-spark's rate limit when neither maxFilesPerTrigger nor maxBytesPerTrigger is set.
DEFAULT_MAX_FILES_PER_TRIGGER = 1000
# Commits read ahead at once while walking the log (one listing, one batched read).
_READ_AHEAD_VERSIONS = 100


class ChangeCommitError(TxnLogError):
    """A streamed table's commit at ``version`` removed data (``operation``: DELETE, UPDATE,
    MERGE...): a stream of appends cannot carry it."""

    def __init__(self, message: str, *, version: int, operation: str | None) -> None:
        super().__init__(message)
        self.version = version
        self.operation = operation


def change_feed_schema(schema: StructType) -> StructType:
    """``schema`` plus the change data feed's columns."""
    return StructType(
        [
            *schema.fields,
            StructField(CHANGE_TYPE, StringType()),
            StructField(COMMIT_VERSION, LongType(), False),
            StructField(COMMIT_TIMESTAMP, TimestampType(), False),
        ]
    )


def stream_schema(options: SourceOptions, snapshot: Snapshot) -> StructType:
    """The schema of a stream of the table (its columns; with ``readChangeFeed`` the change columns too)."""
    schema = table_schema(snapshot)
    return change_feed_schema(schema) if options.read_change_feed else schema


@dataclass(frozen=True)
class Position:
    """An offset: every file before ``index`` of ``version`` has been read."""

    version: int
    index: int
    snapshot: bool

    @classmethod
    def of(cls, offset: dict[str, Any]) -> Position:
        try:
            return cls(int(offset["version"]), int(offset["index"]), bool(offset.get("snapshot", False)))
        except (KeyError, TypeError, ValueError):
            raise InvalidArgumentError(f"not an offset of a txnlog stream: {offset!r}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "index": self.index, "snapshot": self.snapshot}

    def next_version(self) -> Position:
        return Position(self.version + 1, 0, False)


#: The initial offsets, resolved by the first batch (see the module's docstring).
START_AT_SNAPSHOT = Position(-1, 0, True)
START_AT_LATEST = Position(-1, 0, False)


@dataclass
class VersionFiles:
    """One version's steps. ``files``: the files in stream order (``Snapshot.files()`` layout);
    ``changes``: with readChangeFeed, where the version's changes are (then the version is one
    step)."""

    files: pa.Table
    changes: VersionChanges | None = None

    @property
    def steps(self) -> int:
        if self.changes is not None:
            return 0 if self.changes.is_empty else 1
        return int(self.files.num_rows)

    def step_cost(self, index: int) -> tuple[int, int]:
        """(files, bytes) of step ``index``."""
        if self.changes is not None:
            tables = self.changes.feed_files()
            return sum(t.num_rows for t in tables), sum(int(pc.sum(t.column("size")).as_py() or 0) for t in tables)
        return 1, int(self.files.column("size")[index].as_py() or 0)


class ChangesPartition(InputPartition):
    """One read task of a change feed stream: the changes of whole versions."""

    def __init__(self, versions: list[VersionChanges]) -> None:
        super().__init__(len(versions))
        self.versions = versions


class TableStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader. Picklable for the executors: they get the read context and the
    schema; the log state (listing, parsed versions) stays in the planning process."""

    def __init__(self, options: SourceOptions, snapshot: Snapshot, schema: StructType) -> None:
        check_given_schema(schema, stream_schema(options, snapshot), snapshot.uri, "spark.readStream")
        self.options = options
        self.uri = snapshot.uri
        self.schema_string = snapshot.metadata.schema_string
        self.context: ReadContext = snapshot.read_context()
        self.arrow_schema = arrow_schema_of_struct(schema)
        self._table: Table | None = None
        self._listing: LogListing | None = None
        self._versions: dict[tuple[int, bool], VersionFiles] = {}
        self._target: int | None = None  # Trigger.AvailableNow: the last version to read

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_table=None, _listing=None, _versions={})
        return state

    # -- the log ----------------------------------------------------------------------------

    @property
    def table(self) -> Table:
        if self._table is None:
            self._table = Table(self.options.uri, self.options.storage_options)
        return self._table

    def _latest_version(self) -> int:
        self._listing = list_log(self.table.store)
        latest = self._listing.latest_version()
        if latest is None:
            raise VersionNotFoundError(f"the streamed table {self.uri} has no commits left in its log")
        return latest

    def _expired(self, version: int, what: str) -> VersionNotFoundError:
        return VersionNotFoundError(
            f"the stream of {self.uri} needs {what} of version {version}, which the table no longer holds (expired "
            f"by log cleanup); restart the query from a later version (a new checkpoint with startingVersion), and "
            f"keep versions longer by raising the table property {LOG_RETENTION.key}",
            version=version,
        )

    def _snapshot_files(self, version: int) -> VersionFiles:
        try:
            snapshot = self.table.snapshot(version=version)
        except VersionNotFoundError:
            raise self._expired(version, "the snapshot") from None
        files = snapshot.files(stats=False)
        order = [c for c in ("modification_time", "path") if c in files.column_names]
        files = files.sort_by([(c, "ascending") for c in order])
        if not self.options.read_change_feed:
            return VersionFiles(files)
        # The starting snapshot streams as inserts at its version, as delta-spark does.
        try:
            timestamp = self.table.commit_timestamp(version)
        except VersionNotFoundError:
            raise self._expired(version, "the commit") from None
        return VersionFiles(files, VersionChanges.inserts(version, timestamp, files))

    def _load(self, first: int, last: int) -> None:
        """Classify the commits ``first..last`` (all in the log) into the cache."""
        listing = self._listing
        assert listing is not None
        if self.options.read_change_feed:
            # The change feed's own range reader: it also refuses versions that recorded no change data.
            versions = self.table.change_files(first, last)
        else:
            try:
                versions = commit_changes(self.table.store, listing, first, last)
            except VersionNotFoundError as e:
                raise self._expired(e.version if e.version is not None else first, "the commit") from None
        for changes in versions:
            self._versions[(changes.version, False)] = self._commit_files(changes)

    def _commit_files(self, changes: VersionChanges) -> VersionFiles:
        version, operation = changes.version, changes.operation
        if changes.metadata is not None and changes.metadata.schema_string != self.schema_string:
            raise SchemaError(
                f"the streamed table {self.uri} changed its schema at version {version} ({operation}); "
                f"a stream keeps the schema it started with: restart the query to read the new one"
            )
        if self.options.read_change_feed:
            return VersionFiles(changes.inserted, changes)
        if changes.removes_data:
            if self.options.skip_change_commits:
                return VersionFiles(changes.inserted.slice(0, 0))
            raise ChangeCommitError(
                f"the streamed table {self.uri} changed existing data at version {version} ({operation or 'an unnamed operation'} "
                f"removed {changes.removed_files} file(s)); a stream of appends cannot carry that: set option skipChangeCommits=true "
                f"to skip such versions, or readChangeFeed=true to stream the changes",
                version=version,
                operation=operation,
            )
        return VersionFiles(changes.inserted)

    def _version(self, position: Position, last: int) -> VersionFiles:
        key = (position.version, position.snapshot)
        if key not in self._versions:
            if position.snapshot:
                self._versions[key] = self._snapshot_files(position.version)
            else:
                if self._listing is None or position.version not in self._listing.commits:
                    self._latest_version()
                assert self._listing is not None
                latest = self._listing.latest_version()
                assert latest is not None
                if position.version > latest:
                    raise VersionNotFoundError(f"the stream of {self.uri} asks for version {position.version}, after the latest {latest}",
                                               version=position.version)
                self._load(position.version, min(last, latest, position.version + _READ_AHEAD_VERSIONS - 1))
        return self._versions[key]

    # -- offsets ----------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        options = self.options
        latest = self._latest_version()
        if options.starting_latest:
            return START_AT_LATEST.to_dict()
        if options.starting_version is not None:
            if options.starting_version > latest:
                raise VersionNotFoundError(
                    f"startingVersion {options.starting_version} of {self.uri} is after the latest version {latest}",
                    version=options.starting_version,
                )
            return Position(options.starting_version, 0, False).to_dict()
        if options.starting_timestamp is not None:
            try:
                first = self.table.first_version_at_or_after(to_millis(options.starting_timestamp))
            except VersionNotFoundError:
                raise VersionNotFoundError(
                    f"startingTimestamp {options.starting_timestamp} of {self.uri} is after the latest commit (version {latest})"
                ) from None
            return Position(first, 0, False).to_dict()
        return START_AT_SNAPSHOT.to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """One limit (Spark's Python API has no composite): files when maxFilesPerTrigger is set
        or no byte limit is, else bytes. ``latestOffset`` applies the other option's limit too."""
        options = self.options
        if options.max_files_per_trigger is None and options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(options.max_bytes_per_trigger)
        return ReadMaxFiles(options.max_files_per_trigger or DEFAULT_MAX_FILES_PER_TRIGGER)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        self._target = self._latest_version()

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        if isinstance(limit, ReadAllAvailable):
            return None, None
        files, size = self.options.max_files_per_trigger, self.options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxFiles):
            files = limit.max_files
        elif isinstance(limit, ReadMaxBytes):
            size = limit.max_bytes
        return files, size

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """The position after the files the next batch takes: at most ``maxFilesPerTrigger``
        files; files until ``maxBytesPerTrigger`` is reached (the file crossing it included, so
        that a batch always moves); with readChangeFeed whole versions, at least one."""
        max_files, max_bytes = self._limits(limit)
        latest = self._latest_version()
        last = latest if self._target is None else min(self._target, latest)
        position = Position.of(start)
        if position == START_AT_LATEST:
            return Position(last, 0, False).next_version().to_dict()
        snapshot_only = position == START_AT_SNAPSHOT
        if snapshot_only:
            position = Position(last, 0, True)
        taken_files = taken_bytes = 0
        while position.version <= last:
            version = self._version(position, last)
            index = position.index
            while index < version.steps:
                if (max_files is not None and taken_files >= max_files) or (max_bytes is not None and taken_bytes >= max_bytes):
                    return Position(position.version, index, position.snapshot).to_dict()
                files, size = version.step_cost(index)
                if taken_files and max_files is not None and taken_files + files > max_files and version.changes is not None:
                    return Position(position.version, index, position.snapshot).to_dict()
                taken_files += files
                taken_bytes += size
                index += 1
            # Versions stay cached until Spark commits the batch: partitions() reads them next.
            position = position.next_version()
            if snapshot_only:
                break
        return position.to_dict()

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802 - Spark's name
        return Position(self._latest_version(), 0, False).next_version().to_dict()

    def _forget_before(self, version: int) -> None:
        for key in [k for k in self._versions if k[0] < version]:
            del self._versions[key]

    # -- batches ----------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, stop = Position.of(start), Position.of(end)
        if first == START_AT_LATEST:
            return []
        if first == START_AT_SNAPSHOT:
            # The first batch ends inside the snapshot or right after it (see latestOffset).
            first = Position(stop.version if stop.snapshot else stop.version - 1, 0, True)
        files: list[pa.Table] = []
        changes: list[VersionChanges] = []
        position = first
        while (position.version, position.index) < (stop.version, stop.index):
            version = self._version(position, stop.version)
            upto = stop.index if stop.version == position.version else version.steps
            if version.changes is not None:
                if position.index < upto:
                    changes.append(version.changes)
            elif upto > position.index:
                files.append(version.files.slice(position.index, upto - position.index))
            position = position.next_version()
        if changes:
            return [ChangesPartition([c]) for c in changes]
        if not files:
            return []
        return file_partitions(files, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ChangesPartition):
            batches = change_batches(self.context, partition.versions)
        elif isinstance(partition, FilesPartition):
            batches = self.context.batches(partition.files)
        else:
            return
        for batch in batches:
            yield spark_batch(batch, self.arrow_schema)

    def commit(self, end: dict[str, Any]) -> None:
        self._forget_before(Position.of(end).version)


__all__ = [
    "DEFAULT_MAX_FILES_PER_TRIGGER",
    "START_AT_LATEST",
    "START_AT_SNAPSHOT",
    "ChangeCommitError",
    "ChangesPartition",
    "Position",
    "TableStreamReader",
    "change_feed_schema",
    "stream_schema",
]
