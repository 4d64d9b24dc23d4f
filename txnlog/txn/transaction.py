"""OptimisticTransaction: read a snapshot, stage actions, commit put-if-absent, resolve races.

The commit pipeline, in the order it runs:

1. **scan**     ``filter_files`` / ``read_whole_table`` / ``already_applied`` record what
                the transaction read (readPredicates, readFiles, app ids);
2. **write**    ``write`` / ``add_files`` / ``remove_files`` stage data files, invisible until
                a commit names them (kept as Arrow tables, reconciled at commit: one action per
                file, the later one winning);
3. **refresh**  after losing the race for version N, the commits that won become the new base;
4. **validate** the winners are checked all at once; a logical conflict raises and is never
                retried;
5. **prepare**  commitInfo first, then the actions, serialized for the attempted version;
6. **publish**  put-if-absent of ``N.json`` (:mod:`txnlog.txn.committer`); a lost race goes back
                to 3; then the table is handed the new state and the post-commit hooks run.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog import properties as props
from txnlog._version import __version__
from txnlog.errors import ProtocolViolationError, SchemaChangeError, TransactionError, TxnLogError, UnsupportedFeatureError
from txnlog.expressions import FilePredicate
from txnlog.file_facts import file_keys
from txnlog.log import codec
from txnlog.log.actions import Action, AddCDCFile, AddFile, CommitInfo, DomainMetadata, Metadata, Protocol, Txn
from txnlog.log.commits import Commit, read_commits
from txnlog.log.features import merge_protocols, protocol_for
from txnlog.log.file_actions import FILES_SCHEMA
from txnlog.log.filenames import commit_path
from txnlog.log.replay import advance
from txnlog.log.segment import list_log
from txnlog.log.table_state import TableState
from txnlog.schema import with_high_water_marks
from txnlog.snapshot import Snapshot, load_state
from txnlog.storage.location import Located, TableLocation
from txnlog.table_configuration import TableConfiguration
from txnlog.txn import row_tracking
from txnlog.txn.committer import Committer
from txnlog.txn.conflicts import Resolved, TransactionFootprint, Winners
from txnlog.txn.hooks import HookFailure, HookRegistry, PostCommitContext
from txnlog.txn.identity import advanced_marks
from txnlog.txn.isolation import IsolationLevel
from txnlog.txn.metadata import updated_metadata
from txnlog.txn.rebase import Rebase, RebaseStep
from txnlog.txn.retry import RetryPolicy
from txnlog.txn.schema_changes import RowCheck, clustering_domain_configuration, column_path
from txnlog.txn.staging import FileActions, StagedFiles, tombstones
from txnlog.txn.table_changes import TableView
from txnlog.write.conform import IdentityAllocator
from txnlog.write.constraints import check_constraints
from txnlog.write.context import WriteContext
from txnlog.write.deletion_vectors import RowDeletes, delete_rows

log = logging.getLogger(__name__)

ENGINE_INFO = f"txnlog/{__version__}"


class CommitResult(int):
    """The committed version (an ``int``), with how the commit went."""

    attempts: int
    hook_failures: tuple[HookFailure, ...]
    txn_id: str
    rebased: tuple[RebaseStep, ...]

    def __new__(
        cls, version: int, *, attempts: int, hook_failures: Sequence[HookFailure], txn_id: str, rebased: Sequence[RebaseStep] = ()
    ) -> CommitResult:
        obj = super().__new__(cls, version)
        obj.attempts = attempts
        obj.hook_failures = tuple(hook_failures)
        obj.txn_id = txn_id
        obj.rebased = tuple(rebased)
        return obj

    @property
    def version(self) -> int:
        return int(self)


def _adds_change_data(files: FileActions) -> bool:
    """Whether the commit adds rows. A file re-added with a deletion vector under a path it
    removes adds none: it only deletes rows (the log tells which)."""
    removed = set(files.removes.column("path").to_pylist()) if files.removes.num_rows else set()
    if files.add_bodies is not None:
        return any(
            b.get("dataChange", True) is not False and not (b.get("deletionVector") and b.get("path") in removed) for b in files.add_bodies
        )
    if files.adds is None or not files.adds.num_rows:
        return False
    changing = pc.fill_null(files.adds.column("data_change"), True)
    if removed:
        re_added = pc.and_(pc.is_in(files.adds.column("path"), pa.array(sorted(removed), pa.string())), pc.is_valid(files.adds.column("deletion_vector")))
        changing = pc.and_(changing, pc.invert(re_added))
    return bool(pc.any(changing).as_py())


def _now_ms() -> int:
    return int(time.time() * 1000)


def _operation_parameters(params: Mapping[str, Any] | None) -> dict[str, str]:
    # Spark writes every value as a string, JSON-encoded unless it already is one.
    return {k: v if isinstance(v, str) else orjson.dumps(v).decode() for k, v in (params or {}).items()}


class OptimisticTransaction(Located):
    """One atomic change to a table, validated against concurrent commits at publish time.

    Use it as a context manager: it commits on normal exit and aborts, writing nothing to the
    log, when the block raises. It knows the table only by its ``location``; ``snapshot`` is the
    version it reads (None when it creates the table). ``on_commit`` receives the table state at
    the committed version (the Table uses it to skip re-reading that commit).
    """

    def __init__(
        self,
        location: TableLocation,
        snapshot: Snapshot | None,
        *,
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        isolation: IsolationLevel | str | None = None,
        engine_info: str | None = None,
        user_metadata: str | None = None,
        hooks: HookRegistry | None = None,
        retry_policy: RetryPolicy | None = None,
        on_commit: Callable[[TableState], None] | None = None,
    ) -> None:
        self.location = location
        self.snapshot = snapshot
        self.read_version = snapshot.version if snapshot is not None else -1
        self.operation = operation
        self.operation_parameters = dict(operation_parameters or {})
        self.engine_info = engine_info or ENGINE_INFO
        self.user_metadata = user_metadata
        self.hooks = hooks
        self._retry_policy = retry_policy
        self._on_commit = on_commit
        self._requested_isolation = IsolationLevel.parse(isolation) if isolation is not None else None

        self.read_predicates: list[FilePredicate] = []
        self._read_keys: list[pa.Array] = []
        self._read_whole_table = False
        self._read_app_ids: set[str] = set()

        self._staged: StagedFiles | None = None  # made on first use: it needs the metadata
        self._cdc: list[AddCDCFile] = []
        self._file_actions_are_the_changes = False
        self._replaces_rows = False
        self._protocol: Protocol | None = None
        self._metadata: Metadata | None = None
        self._identity = IdentityAllocator()  # identity values of every write of this transaction
        self._identity_only = False  # the metaData committed only moves identity high-water marks
        self._configuration: TableConfiguration | None = None
        self._txns: dict[str, Txn] = {}
        self._domains: dict[str, DomainMetadata] = {}
        self._metrics: dict[str, int] = {}
        self._rebase: Rebase | None = None
        self._rows_read_exactly = True
        self._state = "open"
        self.result: CommitResult | None = None

    # -- context manager --------------------------------------------------------------------

    def __enter__(self) -> OptimisticTransaction:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self.abort()
            if self.orphan_files and hasattr(exc, "add_note"):
                exc.add_note(
                    f"txnlog: transaction on {self.uri} aborted; data files left for vacuum: "
                    + ", ".join(self.orphan_files[:20])
                )
            return
        if self._state == "open":
            self.commit()

    def abort(self) -> None:
        """Drop everything staged. Data files already written stay for vacuum."""
        if self._state == "open":
            self._state = "aborted"
            if self.orphan_files:
                log.warning(
                    "transaction on %s aborted; %d data file(s) left for vacuum: %s",
                    self.uri,
                    len(self.orphan_files),
                    ", ".join(self.orphan_files[:20]),
                )

    @property
    def state(self) -> str:
        """"open", "committed", "aborted" or "failed" (a commit that raised)."""
        return self._state

    @property
    def orphan_files(self) -> tuple[str, ...]:
        """Data files this transaction staged that no commit references (unless it committed)."""
        if self._state == "committed":
            return ()
        added = self._staged.added_paths() if self._staged is not None else []
        return tuple(added) + tuple(c.path for c in self._cdc)

    def _ensure_open(self) -> None:
        if self._state != "open":
            raise TransactionError(f"transaction on {self.uri} is already {self._state}")

    # -- 1. scan ----------------------------------------------------------------------------

    @property
    def metadata(self) -> Metadata:
        if self._metadata is not None:
            return self._metadata
        if self.snapshot is None:
            raise TransactionError(f"{self.uri} does not exist yet: call update_metadata first")
        return self.snapshot.metadata

    @property
    def protocol(self) -> Protocol:
        if self._protocol is not None:
            return self._protocol
        if self.snapshot is None:
            return protocol_for(self.metadata.configuration, self.metadata.schema_string)
        return self.snapshot.protocol

    @property
    def table_configuration(self) -> TableConfiguration:
        """The protocol and metadata this transaction commits (the snapshot's unless it changes
        them), and what derives from them."""
        if self._protocol is None and self._metadata is None and self.snapshot is not None:
            return self.snapshot.table_configuration
        protocol, metadata = self.protocol, self.metadata
        config = self._configuration
        if config is None or config.metadata is not metadata or config.protocol != protocol:
            config = self._configuration = TableConfiguration.from_actions(protocol, metadata)
        return config

    def _files(self) -> pa.Table:
        return self.snapshot.files() if self.snapshot is not None else FILES_SCHEMA.empty_table()

    def filter_files(self, predicate: str | FilePredicate | None = None) -> pa.Table:
        """Live files that may hold rows matching ``predicate`` (all files when None).

        Records the predicate in readPredicates and the files in readFiles, so a concurrent
        commit that adds matching files or removes these ones is a conflict.
        """
        self._ensure_open()
        if predicate is None:
            return self.read_whole_table()
        if self.snapshot is None:
            return self._files()
        pred = self.snapshot.predicate(predicate)
        matched = self.snapshot.files(pred)
        self.read_predicates.append(pred)
        self._read_keys.append(file_keys(matched))
        return matched

    def read_whole_table(self) -> pa.Table:
        """Every live file; any concurrent data change then conflicts (under Serializable)."""
        self._ensure_open()
        self._read_whole_table = True
        files = self._files()
        self._read_keys.append(file_keys(files))
        return files

    def track_files_read(self, files: pa.Table) -> None:
        """Record ``files`` (rows of ``Snapshot.files()``) as read, without a predicate: a
        concurrent commit that removes one of them is a conflict (delta-spark's
        ``trackFilesRead``, which OPTIMIZE uses)."""
        self._ensure_open()
        self._read_keys.append(file_keys(files))

    def app_transaction_version(self, app_id: str) -> int | None:
        """The last version ``app_id`` committed, recorded as read: a concurrent commit by the
        same app id then conflicts."""
        self._read_app_ids.add(app_id)
        return self.snapshot.app_transaction_version(app_id) if self.snapshot is not None else None

    def already_applied(self, app_id: str, version: int) -> bool:
        """Whether ``app_id`` has already committed ``version`` or a later one: the check of an
        idempotent write, which then skips its work. The read is recorded, so a concurrent commit
        by the same app id makes this transaction's commit conflict."""
        done = self.app_transaction_version(app_id)
        return done is not None and done >= version

    # -- 2. write ---------------------------------------------------------------------------

    def write_context(self, **overrides: Any) -> WriteContext:
        """How this transaction writes data files (the table's metadata as this transaction sees it)."""
        return WriteContext.for_configuration(
            self.location.uri, self.table_configuration, storage_options=self.location.storage_options, identity=self._identity, **overrides
        )

    def write(
        self,
        data: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch],
        *,
        data_change: bool = True,
        preserve_row_ids: bool = False,
    ) -> list[AddFile]:
        """Write ``data`` as Parquet files in the table's layout and stage them as adds.
        ``preserve_row_ids``: see :meth:`WriteContext.write`."""
        self._ensure_open()
        # Refuse before any data file is written, not at commit, when the files are orphans.
        self.table_configuration.check_writable(f"table {self.uri}")
        written = self.write_context().write(data, data_change=data_change, store=self.location.store, preserve_row_ids=preserve_row_ids)
        self.add_files(written.files, data_change=data_change)
        return written.add_files

    def _staging(self) -> StagedFiles:
        if self._staged is None:
            keys = {key for key, _ in self.table_configuration.partition_keys()}
            snapshot = self.snapshot

            def live() -> pa.Array:
                return snapshot.state.file_keys() if snapshot is not None else pa.array([], pa.string())

            self._staged = StagedFiles(self.uri, keys, live, allow_absolute_paths=self.location.allow_absolute_paths)
        return self._staged

    def add_files(self, files: Iterable[AddFile] | pa.Table, *, data_change: bool = True) -> None:
        """Stage data files (already written under the table root) to be added: ``AddFile``
        records, or a pyarrow Table in the ``Snapshot.files()`` layout (missing columns allowed)."""
        self._ensure_open()
        self._staging().add(files, data_change=data_change)

    def remove_files(self, files: Iterable[AddFile] | pa.Table, *, data_change: bool = True) -> None:
        """Stage live files (rows of ``filter_files()``, or ``AddFile`` records) to be removed.
        A file that is not live at the read version (nor added by this transaction) is refused
        with FileNotLiveError naming it: a remove of nothing is a bug in the caller."""
        self._ensure_open()
        self._staging().remove(files, data_change=data_change)

    def delete_rows(
        self,
        files: pa.Table,
        positions: Sequence[pa.Array | None],
        *,
        matched: Sequence[pa.Array | None] | None = None,
        exact: bool = True,
    ) -> RowDeletes:
        """Merge-on-read: mark rows ``positions[i]`` (physical positions) of ``files[i]`` (rows
        of ``filter_files()``) deleted, unioned with each file's vector; stages the file actions.

        What the transaction matched is what lets it commit through concurrent row-level
        changes (txnlog.txn.rebase): with ``exact`` (the default), its condition matched the
        deleted rows plus ``matched[i]`` in each file given, and nothing in the other files it
        read. ``exact=False`` when that is not known: a concurrent deletion in these files then
        conflicts, as it does without this method."""
        self._ensure_open()
        if self.snapshot is None:
            raise TransactionError(f"{self.uri} does not exist yet: there are no rows to delete")
        store = self.location.store
        ctx = self.snapshot.read_context()
        deletes = delete_rows(store, files, list(positions), ctx.deleted_rows(files, store))
        if deletes.removed.num_rows:
            self.remove_files(deletes.removed)
        if deletes.added.num_rows:
            self.add_files(deletes.added)
        if self._rebase is None:
            self._rebase = Rebase(store, ctx, row_ids=self.table_configuration.row_tracking_enabled)
        self._rebase.add_targets(files, positions, matched, exact, deletes)
        self._rows_read_exactly = self._rows_read_exactly and exact
        return deletes

    def add_cdc_files(self, files: Iterable[AddCDCFile]) -> None:
        """Stage change-data files (for tables with change data feed)."""
        self._ensure_open()
        self._cdc.extend(files)

    def file_actions_are_the_changes(self) -> None:
        """Declare that this commit's row changes are exactly the rows of the files it removes
        (deleted) and adds (inserted), as a change reader reads a version without cdc files: on
        a table with change data feed it may then remove and add data without cdc files. Only
        for commits that move whole files and rewrite no row (RESTORE, an overwrite of whole files)."""
        self._ensure_open()
        self._file_actions_are_the_changes = True

    def update_metadata(
        self,
        *,
        schema: pa.Schema | str | Mapping[str, Any] | None = None,
        partition_columns: Sequence[str] | None = None,
        configuration: Mapping[str, str] | None = None,
        unset_properties: Sequence[str] = (),
        name: str | None = None,
        description: str | None = None,
        replaces_rows: bool = False,
        replace_table: bool = False,
        automatic_widening_only: bool = False,
    ) -> Metadata:
        """Change the table's schema, partitioning, properties, name or description (once per
        transaction). ``configuration`` is merged into the properties (unknown
        ``delta.*``/``txnlog.*`` keys are refused) and ``unset_properties`` are removed; the
        protocol is upgraded if a property or a column type needs it.

        The change must be legal (:mod:`txnlog.txn.schema_changes`, else SchemaChangeError
        naming the column and rule): a new CHECK constraint or NOT NULL column is checked here
        against the live rows, read as part of this transaction (so a concurrent append
        conflicts). ``replaces_rows``: this commit removes every live row (an overwrite), so
        changes that existing rows would not survive (a dropped column without column mapping,
        a narrowed type, new partition columns) are allowed; the commit checks that it does.
        ``replace_table``: CREATE OR REPLACE or RESTORE, a wholesale replacement (properties
        not merged, no change rules). ``automatic_widening_only``: schema evolution on write,
        which may apply only the widenings delta-spark applies on write."""
        self._ensure_open()
        if self._metadata is not None:
            raise TransactionError("update_metadata may be called at most once per transaction")
        base = self.snapshot.metadata if self.snapshot is not None else None
        current = self.snapshot.protocol if self.snapshot is not None else None
        change, protocol = updated_metadata(
            base,
            current,
            schema=schema,
            partition_columns=partition_columns,
            configuration=configuration,
            unset_properties=unset_properties,
            replace_table=replace_table,
            name=name,
            description=description,
            now_ms=_now_ms(),
            automatic_widening_only=automatic_widening_only,
            clustering=self.snapshot.domain_metadata(props.CLUSTERING_DOMAIN) if self.snapshot is not None else None,
        )
        if self.snapshot is not None and not replace_table and (change.needs_no_rows or change.row_checks):
            # Read in full: a concurrent append conflicts with what is checked here.
            files = self.read_whole_table()
            if replaces_rows:
                self._replaces_rows = True
            elif files.num_rows:
                if change.needs_no_rows:
                    raise change.needs_no_rows[0]
                self._check_rows(change.row_checks, files)
        if protocol is not None:
            self._protocol = protocol
        self._metadata = change.metadata
        return change.metadata

    def _check_rows(self, checks: Sequence[RowCheck], files: pa.Table) -> None:
        """Refuse the change unless every live row of ``files`` (deleted rows excluded)
        satisfies every check."""
        assert self.snapshot is not None
        ctx = self.snapshot.read_context()
        try:
            predicates = [(check.field, FilePredicate(check.sql, ctx.schema, ctx.partition_columns)) for check in checks]
        except TxnLogError as e:
            raise SchemaChangeError(f"a new constraint does not apply to table {self.uri}: {e}", rule="CHECK constraint") from e
        by_field = {check.field: check for check in checks}
        for batch in ctx.batches(files, store=self.location.store):
            try:
                check_constraints(pa.Table.from_batches([batch]), predicates)
            except ProtocolViolationError as e:
                check = by_field[e.rule.removeprefix("constraint:")]
                raise SchemaChangeError(
                    f"cannot add {check.rule} {check.field} to table {self.uri}: live rows violate it ({e})",
                    field=check.field, rule=check.rule,
                ) from None

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Record that ``app_id`` has committed ``version`` (idempotent streaming writes)."""
        self._ensure_open()
        self._txns[app_id] = Txn(app_id, int(version), _now_ms())

    def set_domain_metadata(self, domain: str, configuration: str, *, removed: bool = False) -> None:
        """Write (or remove) the configuration of a user domain, e.g. ``"myapp.watermark"``."""
        self._ensure_open()
        if domain.startswith(props.RESERVED_DOMAIN_PREFIX):
            raise TransactionError(f"domain {domain!r} is reserved for the Delta protocol")
        self._domains[domain] = DomainMetadata(domain, configuration, removed)

    def cluster_by(self, columns: Sequence[str | Sequence[str]]) -> None:
        """Make ``columns`` (names, dotted paths or lists of names; empty: none) the table's
        clustering columns: the ``delta.clustering`` domain, with the ``clustering`` and
        ``domainMetadata`` writer features. Each column must have statistics collected."""
        self._ensure_open()
        paths = [column_path(c) for c in columns]
        configuration = clustering_domain_configuration(self.metadata, paths)
        self._domains[props.CLUSTERING_DOMAIN] = DomainMetadata(props.CLUSTERING_DOMAIN, configuration, False)
        required = Protocol(1, 7, None, ("clustering", "domainMetadata"))
        upgraded = merge_protocols(self.protocol, required)
        if upgraded != self.protocol:
            self._protocol = upgraded

    def set_operation_metrics(self, **metrics: int) -> None:
        self._metrics.update(metrics)

    # -- staged file actions, reconciled --------------------------------------------------------

    # -- 4. validate: rules of this table's protocol ----------------------------------------

    def _check_protocol_rules(self, config: TableConfiguration, removes: pa.Table, adds_change_data: bool) -> None:
        config.check_writable(f"table {self.uri}")
        if (self._domains or config.row_tracking_supported) and not config.domain_metadata_supported:
            raise UnsupportedFeatureError(
                f"table {self.uri} does not have the domainMetadata writer feature; set the table "
                f"property {props.FEATURES.key('domainMetadata')}=supported first",
                features=("domainMetadata",),
            )
        data_removes = removes.filter(pc.fill_null(removes.column("data_change"), True))
        if data_removes.num_rows and config.append_only:
            raise ProtocolViolationError(
                f"table {self.uri} is append-only ({props.APPEND_ONLY.key}=true); refusing to remove "
                f"{data_removes.column('path')[0].as_py()}",
                rule="appendOnly",
            )
        # A commit that only removes whole files needs no cdc files: a change reader reads its
        # removed files' rows as deleted (the protocol's rule), nor one that only grows deletion
        # vectors (a reader tells the rows apart by the vectors, as delta-spark's DELETE relies
        # on). One that also adds data may have rewritten rows (copied or updated), which only
        # cdc files tell apart.
        if (data_removes.num_rows and adds_change_data and config.change_data_feed_enabled and not self._cdc
                and not self._file_actions_are_the_changes):
            raise ProtocolViolationError(
                f"table {self.uri} records change data ({props.ENABLE_CHANGE_DATA_FEED.key}=true): a commit that "
                "removes data and adds data must also add cdc files (add_cdc_files); removing whole files needs none",
                rule="changeDataFeed",
            )

    def _check_deletion_vectors(self, config: TableConfiguration, files: FileActions) -> None:
        """An add may carry a deletion vector only where the protocol has the feature."""
        if config.deletion_vectors_supported or not files.num_adds:
            return
        if files.add_bodies is not None:
            with_dv = [b["path"] for b in files.add_bodies if b.get("deletionVector")]
        else:
            assert files.adds is not None
            with_dv = files.adds.filter(files.adds.column("deletion_vector").is_valid()).column("path").to_pylist()
        if with_dv:
            raise UnsupportedFeatureError(
                f"table {self.uri} does not support deletion vectors, but the add of {with_dv[0]} has one; set "
                f"{props.ENABLE_DELETION_VECTORS.key}=true first (it adds the deletionVectors feature)",
                features=("deletionVectors",),
            )

    def _isolation(self, config: TableConfiguration, files: FileActions) -> IsolationLevel:
        # Rows unchanged (a compaction), or nothing at all: concurrent appends cannot matter, as
        # the commit can be ordered before them. A protocol, metaData, txn or domain action keeps
        # the level: later commits would have had to see it.
        if not files.changes_data() and self._metadata is None and self._protocol is None and not self._txns and not self._domains:
            return IsolationLevel.SNAPSHOT_ISOLATION
        if self._requested_isolation is not None:
            return self._requested_isolation
        return IsolationLevel.parse(config.isolation_level)

    def _rebase_for(self, config: TableConfiguration, files: FileActions) -> Rebase | None:
        """What can rebase this commit at row level over winners: a merge-on-read DML's, or,
        for a compaction on a table with row tracking, one that carries deletions onto its output."""
        if not config.table_property(props.ROW_LEVEL_CONCURRENCY):
            return None
        if self._rebase is not None:
            if self._rows_read_exactly and self._read_keys:
                self._rebase.read_keys = {str(k) for keys in self._read_keys for k in keys.cast(pa.string()).to_pylist()}
            if not self._read_whole_table:
                self._rebase.read_predicates = list(self.read_predicates)
            return self._rebase
        compaction = files.changes_data() is False and self._metadata is None and self._protocol is None and not self._txns
        if not (compaction and config.row_tracking_enabled and self.snapshot is not None and files.adds is not None and files.removes.num_rows):
            return None
        rebase = Rebase(self.location.store, self.snapshot.read_context(), row_ids=True)
        rebase.compaction(files.removes, files.adds)
        return rebase

    def _advance_identity_marks(self, files: FileActions) -> None:
        """Move the identity high-water marks past the values the added files hold, in the
        metaData this commit writes (tagged as identity-only when nothing else changes it)."""
        marks = advanced_marks(files, self.table_configuration, self.uri)
        if not marks:
            return
        self._identity_only = self._metadata is None
        base = self.metadata
        self._metadata = dataclasses.replace(base, schema_string=with_high_water_marks(base.schema_string, marks))

    def _is_blind_append(self, removes: pa.Table) -> bool:
        return not removes.num_rows and not self._read_keys and not self.read_predicates and not self._read_whole_table

    def _footprint(self, isolation: IsolationLevel, removes: pa.Table) -> TransactionFootprint:
        read_keys = [k.cast(pa.string()) for k in self._read_keys]
        view = None
        if self.snapshot is not None:
            view = TableView(
                read_protocol=self.snapshot.protocol,
                protocol=self.protocol,
                metadata=self.metadata,
                changes_protocol=self._protocol is not None,
                changes_metadata=self._metadata is not None,
            )
        return TransactionFootprint(
            read_version=self.read_version,
            isolation=isolation,
            read_predicates=list(self.read_predicates),
            read_whole_table=self._read_whole_table,
            read_file_keys=pa.concat_arrays(read_keys) if read_keys else pa.array([], pa.string()),
            app_ids=self._read_app_ids | set(self._txns),
            domains=set(self._domains),
            removed_keys=file_keys(removes) if removes.num_rows else pa.array([], pa.string()),
            view=view,
        )

    # -- 5. prepare -------------------------------------------------------------------------

    def _metrics_for_commit(self, files: FileActions) -> dict[str, str]:
        metrics: dict[str, int] = {
            "numFiles": files.num_adds,
            "numAddedFiles": files.num_adds,
            "numRemovedFiles": files.removes.num_rows,
            "numOutputBytes": files.added_bytes(),
            "numOutputRows": files.added_rows(),
        }
        metrics.update(self._metrics)
        return {k: str(v) for k, v in metrics.items()}

    def _header(
        self, version: int, txn_id: str, isolation: IsolationLevel, blind: bool, previous_ict: int | None, metrics: dict[str, str],
        rebased: Sequence[RebaseStep] = (), *, ict_enabled: bool, tags: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """commitInfo, protocol and metaData for an attempt at ``version``."""
        now = _now_ms()
        metadata = self._metadata
        ict = None
        if ict_enabled:
            ict = max(now, previous_ict + 1) if previous_ict is not None else now
            if metadata is not None and self.snapshot is not None and not self.snapshot.table_configuration.in_commit_timestamps_enabled:
                # Turning timestamps on for an existing table: record from where they hold.
                metadata = dataclasses.replace(
                    metadata,
                    configuration={
                        **metadata.configuration,
                        props.ICT_ENABLEMENT_VERSION.key: str(version),
                        props.ICT_ENABLEMENT_TIMESTAMP.key: str(ict),
                    },
                )
        info = CommitInfo(
            timestamp=now,
            operation=self.operation,
            operation_parameters=_operation_parameters(self.operation_parameters),
            read_version=self.read_version if self.read_version >= 0 else None,
            isolation_level=isolation.value,
            is_blind_append=blind,
            engine_info=self.engine_info,
            txn_id=txn_id,
            operation_metrics=metrics,
            in_commit_timestamp=ict,
            user_metadata=self.user_metadata,
            other={
                **({props.REBASE_COMMIT_INFO_KEY: [step.as_json() for step in rebased]} if rebased else {}),
                **({"tags": all_tags} if (all_tags := {**(tags or {}), **({props.IDENTITY_ONLY_TAG: "true"} if self._identity_only else {})}) else {}),
            },
        )
        head: list[Action] = [info]
        if self._protocol is not None:
            head.append(self._protocol)
        if metadata is not None:
            head.append(metadata)
        return [codec.encode_action(a) for a in head]

    def _previous_ict(self, version: int, winners: list[Commit]) -> int | None:
        if version == 0:
            return None
        for commit in reversed(winners):
            if commit.version == version - 1:
                info = commit.commit_info()
                return info.in_commit_timestamp if info else None
        listing = list_log(self.location.store, version - 1)
        if version - 1 not in listing.commits:
            return None
        info = read_commits(self.location.store, [listing.commits[version - 1]])[0].commit_info()
        return info.in_commit_timestamp if info else None

    def _with_row_ids(
        self, files: FileActions, config: TableConfiguration, version: int, winners: list[Commit]
    ) -> tuple[FileActions, list[dict[str, Any]]]:
        """``files`` with row ids assigned for an attempt at ``version``, and the high-water
        mark's domain action to commit with them (none when no id was assigned). The commit
        that turns row tracking on also re-adds every live file that has no ids yet (the
        protocol's backfill), judged on the table as the winners left it."""
        where = f"table {self.uri}"
        snapshot = self.snapshot
        mark = row_tracking.high_water_mark(snapshot.state.domains, where) if snapshot is not None else row_tracking.NO_ROW_IDS
        mark = row_tracking.winners_high_water_mark(winners, mark, where)
        live = snapshot.state.files_without_stats() if snapshot is not None else FILES_SCHEMA.empty_table()
        backfill = None
        enabling = config.row_tracking_enabled and not (snapshot is not None and snapshot.table_configuration.row_tracking_enabled)
        if enabling and snapshot is not None:
            state = advance(snapshot.state, winners, f"{where} version {version - 1}") if winners else snapshot.state
            if winners:
                live = state.files_without_stats()
            own_paths = [files.removes.column("path").combine_chunks()]
            if files.add_bodies is not None:
                own_paths.append(pa.array([b["path"] for b in files.add_bodies], pa.string()))
            elif files.adds is not None:
                own_paths.append(files.adds.column("path").combine_chunks())
            backfill = row_tracking.backfill_files(
                state.files, pa.concat_arrays(own_paths), self.location.store, self.uri,
                allow_absolute_paths=self.location.allow_absolute_paths,
            )
        elif winners:
            live = row_tracking.recommitted(winners, live)
        assigned = row_tracking.assign(files, live=live, backfill=backfill, mark=mark, version=version, where=where)
        rows = [] if assigned.high_water_mark is None else [codec.encode_action(row_tracking.domain_action(assigned.high_water_mark))]
        return assigned.files, rows

    # -- 6. publish -------------------------------------------------------------------------

    def commit(self) -> CommitResult:
        """Publish the staged actions as the next version; returns it (a ``CommitResult``).

        Losing the race for a version re-checks the winners and retries at the next one until
        ``txnlog.commit.retry.*`` runs out. A logical conflict raises a ``CommitConflictError``
        subclass at once.
        """
        self._ensure_open()
        metadata = self.metadata
        if self.snapshot is None and self._protocol is None:
            self._protocol = self.protocol
        files = self._staging().to_commit()
        self._advance_identity_marks(files)
        config = self.table_configuration
        removes = files.removes
        if self._replaces_rows and self.snapshot is not None:
            kept = pc.invert(pc.is_in(self.snapshot.state.file_keys(), value_set=file_keys(removes).cast(pa.string())))
            if pc.any(kept).as_py():
                raise TransactionError(
                    f"update_metadata(replaces_rows=True) on table {self.uri}, but the commit keeps "
                    f"{pc.sum(kept).as_py()} live file(s): the schema change needs every row replaced"
                )
        self._check_protocol_rules(config, removes, _adds_change_data(files))
        self._check_deletion_vectors(config, files)
        isolation = self._isolation(config, files)
        blind = self._is_blind_append(removes)
        txn_id = str(uuid.uuid4())
        metrics = self._metrics_for_commit(files)
        # The actions after protocol and metaData, encoded once: they do not change between attempts.
        others: list[Action] = [*self._txns.values(), *self._domains.values()]
        head_rows = [codec.encode_action(a) for a in others]
        cdc_rows = [codec.encode_action(c) for c in self._cdc]
        body = b"\n".join(
            [
                *(orjson.dumps(r) for r in head_rows),
                *files.lines(),
                *(orjson.dumps(r) for r in cdc_rows),
            ]
        )
        headers: dict[int, list[dict[str, Any]]] = {}
        tracked: dict[int, tuple[FileActions, list[dict[str, Any]]]] = {}
        attempted: dict[int, FileActions] = {}
        rebase = self._rebase_for(config, files)
        footprint = self._footprint(isolation, removes)

        def committing() -> TableConfiguration:
            """The configuration this attempt commits under: with what it adopted from winners."""
            view = footprint.view
            return view.configuration() if view is not None and view.adopted else config

        def current() -> FileActions:
            """The file actions to commit now: as staged, or rebased over the winners."""
            if rebase is None or not rebase.moved:
                return files
            adds = files.adds if files.adds is not None else FILES_SCHEMA.empty_table()
            rebased_removes, rebased_adds = rebase.files(files.removes, adds, tombstones)
            return FileActions(rebased_removes, adds=rebased_adds)

        def prepare(version: int, winners: list[Commit]) -> bytes:
            now_config = committing()
            ict_enabled = now_config.in_commit_timestamps_enabled
            previous_ict = self._previous_ict(version, winners) if ict_enabled else None
            steps = rebase.steps if rebase is not None else []
            tags = footprint.view.tags() if footprint.view is not None else {}
            headers[version] = self._header(
                version, txn_id, isolation, blind, previous_ict, metrics, steps, ict_enabled=ict_enabled, tags=tags
            )
            head = codec.dump_lines(headers[version])
            now = attempted[version] = current()
            if now_config.row_tracking_supported and not now_config.table_property(props.ROW_TRACKING_SUSPENDED):
                # Fresh ids for each attempt: above the winners' high-water mark after a lost race.
                with_ids, mark_rows = tracked[version] = self._with_row_ids(now, config, version, winners)
                lines = [
                    *(orjson.dumps(r) for r in head_rows + mark_rows),
                    *with_ids.lines(),
                    *(orjson.dumps(r) for r in cdc_rows),
                ]
                return head + b"\n".join(lines) + b"\n" if lines else head
            if now is not files:
                lines = [*(orjson.dumps(r) for r in head_rows), *now.lines(), *(orjson.dumps(r) for r in cdc_rows)]
                return head + b"\n".join(lines) + b"\n" if lines else head
            return head + body + b"\n" if body else head

        def absorb(winners: Winners) -> tuple[Resolved, dict[str, str]]:
            assert rebase is not None
            resolved, hints = rebase.absorb(winners)
            if rebase.moved:
                # The files the commit removes now are the ones later winners must not touch.
                keys = file_keys(current().removes).cast(pa.string())
                footprint.removed_keys = keys
                footprint.read_file_keys = pa.concat_arrays([footprint.read_file_keys.cast(pa.string()), keys])
            return resolved, hints

        committer = Committer(
            self.location.store,
            read_version=self.read_version,
            footprint=footprint,
            policy=self._retry_policy or RetryPolicy.from_configuration(metadata.configuration),
            txn_id=txn_id,
            prepare=prepare,
            orphan_files=lambda: self.orphan_files,
            rebase=absorb if rebase is not None else None,
        )
        try:
            published = committer.publish()
        except BaseException:
            self._state = "failed"
            raise
        self._state = "committed"
        version = published.version
        if version in tracked:
            committed, mark_rows = tracked[version]
            own = committed.commit(version, commit_path(version), _now_ms(), headers.get(version, []) + head_rows + mark_rows + cdc_rows)
        else:
            own = attempted.get(version, files).commit(version, commit_path(version), _now_ms(), headers.get(version, []) + head_rows + cdc_rows)
        failures = self._after_commit(version, published.winners, own, committing())
        rebased = rebase.steps if rebase is not None else []
        if rebased:
            log.info("commit %d to %s rebased at row level over %s", version, self.uri,
                     ", ".join(f"version {step.version} ({step.operation}, {step.kind})" for step in rebased))
        self.result = CommitResult(version, attempts=published.attempts, hook_failures=failures, txn_id=txn_id, rebased=rebased)
        return self.result

    def _after_commit(self, version: int, winners: list[Commit], own: Commit, config: TableConfiguration) -> list[HookFailure]:
        """Hand the table the state at ``version``, then run the post-commit hooks."""
        post_state = None
        if self.snapshot is not None:
            post_state = advance(self.snapshot.state, [*winners, own], f"{self.uri} version {version}")
            if self._on_commit is not None:
                self._on_commit(post_state)
        if self.hooks is None:
            return []
        location = self.location

        def snapshot_at_version() -> Snapshot:
            return Snapshot(location, post_state if post_state is not None else load_state(location.store, version))

        ctx = PostCommitContext(location, version, self.operation, config, snapshot_at_version)
        return self.hooks.run(ctx)


__all__ = ["CommitResult", "OptimisticTransaction"]
