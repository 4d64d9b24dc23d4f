"""Snapshot: the read view of a table at one version, a pure function of the log.

It sits below transactions and the :class:`~txnlog.table.Table` entry point: it knows where the
table is (a :class:`~txnlog.storage.TableLocation`), the log-level
:class:`~txnlog.log.table_state.TableState` and the :class:`~txnlog.table_configuration.TableConfiguration`
derived from it, nothing above.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from txnlog import properties as props
from txnlog.errors import CorruptCheckpointError, ObjectNotFoundError, TxnLogError, operation_context
from txnlog.expressions import FilePredicate
from txnlog.expressions.foreign import Filter
from txnlog.log.actions import DomainMetadata, Metadata, Protocol, Txn
from txnlog.log.checkpoint_writer import CheckpointResult, write_checkpoint
from txnlog.log.commits import read_commits
from txnlog.log.replay import advance, replay
from txnlog.log.segment import build_segment, commit_file, list_log
from txnlog.log.table_state import TableState
from txnlog.read import BATCH_ROWS, READ_THREADS, ROW_COMMIT_VERSION, ROW_ID, ReadContext, TableDataset, scan_batches
from txnlog.storage.base import LogStore
from txnlog.storage.location import Located, TableLocation
from txnlog.storage.paths import FileLocation
from txnlog.table_configuration import TableConfiguration

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Fresh listings of the log when files vanish under a read (a concurrent expiry).
_RELISTS = 3


def load_state(store: LogStore, version: int | None = None) -> TableState:
    """The table state at ``version`` (the latest when None), read from the newest checkpoint
    that is readable.

    A checkpoint is only a summary of the commits before it: when one cannot be read (cut short,
    not Parquet, a sidecar lost), the state is rebuilt from an older checkpoint or from the
    commits it summarises, with a logged warning. Only when nothing else can reconstruct the
    version is the first checkpoint's CorruptCheckpointError raised.
    """
    skipped: set[int] = set()
    first_error: CorruptCheckpointError | None = None
    relists = 0
    vanished = False  # a file listed was gone when read: a concurrent log expiry
    while True:
        segment = None
        try:
            segment = build_segment(store, version, skip_checkpoints=frozenset(skipped))
            return replay(store, segment)
        except TxnLogError as e:
            vanished = vanished or _vanished(e)
            retry_checkpoint = isinstance(e, CorruptCheckpointError) and segment is not None and segment.checkpoint
            if not retry_checkpoint:
                if vanished and relists < _RELISTS:
                    # The log moved on under this read (a log expiry): list it again from scratch.
                    # Nothing is wrong, so it is no warning.
                    log.info("%s: a log file vanished while reading it (%s); listing the log again", store.root_uri, e)
                    relists += 1
                    skipped.clear()
                    first_error, vanished = None, False
                    continue
                if first_error is None:
                    raise
                raise first_error from e  # without that checkpoint, nothing rebuilds the version
            assert segment is not None and isinstance(e, CorruptCheckpointError)
            first_error = first_error or e
            skipped.add(segment.checkpoint[0].version)
            log.warning(
                "%s: the checkpoint at version %d is unreadable (%s); rebuilding version %s without it",
                store.root_uri, segment.checkpoint[0].version, e, "latest" if version is None else version,
            )


def _vanished(error: TxnLogError) -> bool:
    """Whether ``error`` says a log file listed a moment ago was gone when read."""
    if isinstance(error, CorruptCheckpointError):
        return error.vanished
    return isinstance(error, ObjectNotFoundError) or isinstance(error.__cause__, ObjectNotFoundError)


class Snapshot(Located):
    """The state of a table at one version, read from ``location`` (a
    :class:`~txnlog.storage.TableLocation`, or a bare store).

    ``allow_absolute_paths`` (with a bare store): resolve file paths outside the table root
    (shallow clones) instead of refusing them; see :mod:`txnlog.storage.paths`.
    """

    def __init__(self, location: TableLocation | LogStore, state: TableState, *, allow_absolute_paths: bool = False) -> None:
        if not isinstance(location, TableLocation):
            location = TableLocation(location, allow_absolute_paths=allow_absolute_paths)
        #: Where the table is: its store, storage options and the absolute-path opt-in.
        self.location = location
        self._state = state
        #: The protocol and metadata at this version, and what derives from them.
        self.table_configuration = TableConfiguration.from_actions(state.protocol, state.metadata)
        self.table_configuration.check_readable(f"table {location.uri} at version {state.version}")
        self._dataset: TableDataset | None = None

    def __repr__(self) -> str:
        return f"Snapshot({self.uri!r}, version={self.version}, files={self.num_files})"

    @property
    def state(self) -> TableState:
        """The log-level state this snapshot shows (what checkpoints and transactions build on)."""
        return self._state

    @property
    def version(self) -> int:
        return self._state.version

    @property
    def protocol(self) -> Protocol:
        return self._state.protocol

    @property
    def metadata(self) -> Metadata:
        return self._state.metadata

    @property
    def schema(self) -> pa.Schema:
        return self._state.metadata.schema

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self._state.metadata.partition_columns

    @property
    def configuration(self) -> Mapping[str, str]:
        """The table properties as stored; :attr:`table_configuration` has what they mean."""
        return self._state.metadata.configuration

    def table_property(self, prop: props.TableProperty[Any]) -> Any:
        """A typed table property, e.g. ``snap.table_property(txnlog.properties.CHECKPOINT_INTERVAL)``."""
        return self.table_configuration.table_property(prop)

    @property
    def num_files(self) -> int:
        return self._state.num_files

    def files(self, predicate: Filter | FilePredicate | None = None, *, stats: bool = True) -> pa.Table:
        """One row per live file (the columns of ``txnlog.log.file_actions.FILES_SCHEMA``).

        With a ``predicate`` (SQL text, a pyarrow expression or DNF tuples), only files that may hold matching rows, judged by partition
        values and min/max stats. Paths are as the log holds them: :meth:`file_uris` resolves
        them, refusing any that leave the table root.

        A snapshot opened from a checkpoint leaves the files' stats in it until they are asked
        for: ``stats=False`` gives the list without the ``stats`` column and reads nothing more,
        and with a predicate only the stats of the files its partition values keep are read.
        """
        return self._rebuilt_if_checkpoint_gone(lambda: self._files(predicate, stats), "list its files")

    def _files(self, predicate: Filter | FilePredicate | None, stats: bool) -> pa.Table:
        state = self._state
        if predicate is None:
            return state.files if stats else state.files_without_stats()
        pred = self.predicate(predicate)
        if state.pending_stats is None:
            matched = pred.filter(state.file_list)
        else:
            # Files whose stats are still in the checkpoint count as having none here: only
            # partition values and the other files' stats prune. Then read the survivors' stats.
            maybe = pc.indices_nonzero(pred.may_match(state.file_list))
            matched = pred.filter(state.take(maybe))
        return matched if stats else matched.drop_columns(["stats"])

    def _rebuilt_if_checkpoint_gone(self, read: Callable[[], T], what: str) -> T:
        rebuilds = 0
        while True:
            try:
                return read()
            except CorruptCheckpointError as e:
                # The state reads tombstones and stats lazily from the checkpoint it was built on,
                # which log expiry may have deleted since: rebuild this version from the log as it
                # is. On a busy table the next checkpoint may go too before it is read.
                if rebuilds and not (e.vanished and rebuilds < _RELISTS):
                    raise
                rebuilds += 1
                # A checkpoint that log expiry deleted (here or in another process) is expected
                # and costs only the rebuild; an unreadable one is worth a warning.
                log.log(logging.INFO if e.vanished else logging.WARNING, "%s: rebuilding version %d to %s (%s)", self.uri, self.version, what, e)
                self._state = load_state(self.store, self.version)

    def locate(self, path: str) -> FileLocation:
        """Where the data file ``path`` (an ``add.path`` of this snapshot) is; raises
        UnsafePathError naming the version and path if it leaves the table root."""
        return self.location.locate(path, version=self.version)

    def file_uris(self, predicate: Filter | FilePredicate | None = None) -> list[str]:
        """Absolute URIs of the live data files; UnsafePathError for a path that leaves the table root."""
        return [self.locate(p).uri for p in self.files(predicate, stats=False).column("path").to_pylist()]

    def predicate(self, predicate: Filter | FilePredicate) -> FilePredicate:
        """``predicate`` (SQL text, a pyarrow expression, DNF tuples or a tree) bound to this
        version's schema."""
        return FilePredicate.of(predicate, self.table_configuration)

    def tombstones(self) -> pa.Table:
        """Removed files not live again (the columns of ``TOMBSTONES_SCHEMA``), for vacuum."""
        return self._rebuilt_if_checkpoint_gone(lambda: self._state.tombstones(), "list its tombstones")

    def app_transaction_version(self, app_id: str) -> int | None:
        txn = self._state.app_transactions.get(app_id)
        return txn.version if txn else None

    @property
    def app_transactions(self) -> Mapping[str, Txn]:
        return dict(self._state.app_transactions)

    def domain_metadata(self, domain: str) -> str | None:
        d = self._state.domains.get(domain)
        return d.configuration if d else None

    @property
    def domains(self) -> Mapping[str, DomainMetadata]:
        return dict(self._state.domains)

    def checkpoint(self, *, now_ms: int | None = None) -> CheckpointResult:
        """Write a checkpoint of this version (see :func:`txnlog.log.checkpoint_writer.write_checkpoint`)."""
        with operation_context("checkpoint", self.uri, version=self.version):
            return self._rebuilt_if_checkpoint_gone(
                lambda: write_checkpoint(self.store, self._state, now_ms=now_ms), "checkpoint it"
            )

    # -- rows ---------------------------------------------------------------------------------

    def read_context(self) -> ReadContext:
        """How to read this version's data files, as a picklable value (for other processes)."""
        return ReadContext.for_configuration(
            self.uri, self.table_configuration, storage_options=self.location.storage_options,
            version=self.version, allow_absolute_paths=self.allow_absolute_paths,
        )

    def to_batches(
        self,
        columns: Sequence[str] | None = None,
        predicate: Filter | FilePredicate | None = None,
        *,
        batch_rows: int = BATCH_ROWS,
        with_row_ids: bool = False,
    ) -> pa.RecordBatchReader:
        """The table's rows at this version, streamed: partition values, column mapping and
        deletion vectors applied. With a ``predicate`` (SQL text, a pyarrow expression or DNF
        tuples), files that cannot match are skipped (partition values, stats) and the rows read
        are filtered by it. ``columns`` (logical names; one name as a string) selects and orders
        the columns; all of them when None. ``with_row_ids`` (a table with row tracking enabled)
        adds ``row_id`` and ``row_commit_version`` (int64): each row's stable id and the version
        that last inserted or updated it.

        Memory stays bounded whatever the table's size: files are read as the batches are
        consumed, a few at a time (see :func:`txnlog.read.scan`)."""
        context = self.read_context()
        pred = self.predicate(predicate) if predicate is not None else None
        files = self.files(pred, stats=False)
        schema = context.output_schema(columns)
        rows = pred.rows() if pred is not None else None
        if with_row_ids:  # the one reader computes row ids
            for name in (ROW_ID, ROW_COMMIT_VERSION):
                schema = schema.append(pa.field(name, pa.int64(), nullable=False))
            batches = context.batches(
                files, columns=columns, store=self.store, batch_rows=batch_rows, row_filter=rows,
                filter_columns=pred.columns if pred is not None else (), parallel=READ_THREADS,
                row_id=ROW_ID, row_commit_version=ROW_COMMIT_VERSION,
            )
            return pa.RecordBatchReader.from_batches(schema, batches)
        # Read on the consuming thread (scan_batches): no Python runs on pyarrow's threads, so a
        # reader dropped half way leaves nothing running when the interpreter exits.
        names = schema.names
        if rows is None or rows.expression is not None:  # pyarrow filters the rows
            expression = rows.expression if rows is not None else None
            _, batches = scan_batches(context, files, columns=names, filter=expression, store=self.store, batch_size=batch_rows)
            return pa.RecordBatchReader.from_batches(schema, batches)
        assert pred is not None
        # A condition only txnlog computes (id % 10 = 3): read the columns it needs too, then filter.
        read = names + sorted(c for c in pred.columns if c not in names)
        _, unfiltered = scan_batches(context, files, columns=read, store=self.store, batch_size=batch_rows)

        def filtered() -> Iterator[pa.RecordBatch]:
            for batch in unfiltered:
                batch = batch.filter(rows.mask(pa.Table.from_batches([batch]))).select(names)
                if batch.num_rows:
                    yield batch

        return pa.RecordBatchReader.from_batches(schema, filtered())

    def to_arrow(
        self, columns: Sequence[str] | None = None, predicate: Filter | FilePredicate | None = None, *, with_row_ids: bool = False
    ) -> pa.Table:
        """The table's rows at this version as one Arrow table (see :meth:`to_batches`)."""
        return self.to_batches(columns, predicate, with_row_ids=with_row_ids).read_all()

    def to_pandas(self, columns: Sequence[str] | None = None, predicate: Filter | FilePredicate | None = None) -> Any:
        """The rows of :meth:`to_arrow` as a pandas DataFrame (needs pandas)."""
        if importlib.util.find_spec("pandas") is None:  # optional: pyarrow imports it to convert
            raise TxnLogError("Snapshot.to_pandas needs pandas: pip install pandas")
        return self.to_arrow(columns, predicate).to_pandas()

    def to_polars(self, columns: Sequence[str] | None = None, predicate: Filter | FilePredicate | None = None) -> Any:
        """The rows of :meth:`to_arrow` as a Polars DataFrame (needs polars). For a lazy frame,
        ``polars.scan_pyarrow_dataset(snapshot.to_pyarrow_dataset())``."""
        try:
            import polars  # optional: only this method needs polars
        except ImportError as e:
            raise TxnLogError(f"Snapshot.to_polars needs polars: pip install polars ({e})") from None
        return polars.from_arrow(self.to_arrow(columns, predicate))

    def to_pyarrow_dataset(self) -> TableDataset:
        """This version's rows as a lazy ``pyarrow.dataset.Dataset`` (a
        :class:`~txnlog.read.TableDataset`): partition values, column mapping and deletion
        vectors applied, nothing read until it is scanned. DuckDB, Polars and pyarrow push
        their projections and filters into it: columns not asked for are not decoded, files
        are skipped by partition values and stats, Parquet row groups by their statistics."""
        if self._dataset is None:  # one per snapshot: it keeps the parsed stats its scans skip files with
            self._dataset = TableDataset(self.read_context(), lambda predicate, stats: self.files(predicate, stats=stats), store=self.store)
        return self._dataset

    def _with(self, state: TableState) -> Snapshot:
        return Snapshot(self.location, state)

    def update(self) -> Snapshot:
        """This snapshot brought up to the latest version, reading only the commits after it."""
        listing = list_log(self.store, self.version + 1)
        newer = sorted(v for v in listing.commits if v > self.version)
        if not newer:
            return self
        files = [commit_file(self.store, listing, v) for v in range(self.version + 1, newer[-1] + 1)]
        present = [f for f in files if f is not None]
        if len(present) != len(files):
            # The commits we need were cleaned up: rebuild from the log.
            return self._with(load_state(self.store))
        commits = read_commits(self.store, present)
        return self._with(advance(self._state, commits, f"{self.uri} version {newer[-1]}"))


__all__ = ["Snapshot", "load_state"]
