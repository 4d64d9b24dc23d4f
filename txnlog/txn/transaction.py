"""OptimisticTransaction: read a snapshot, stage actions, commit put-if-absent, resolve races.

The commit pipeline, in the order it runs (design brief, section 1):

1. **scan**     ``filter_files`` / ``read_whole_table`` / ``app_transaction_version`` record what
                the transaction read (readPredicates, readFiles, app ids);
2. **write**    ``write`` / ``add_files`` / ``remove_files`` stage data files, invisible until
                a commit names them;
3. **refresh**  after losing the race for version N, the commits that won become the new base;
4. **validate** ``check_conflicts`` against each winner; a logical conflict raises and is never
                retried;
5. **prepare**  commitInfo first, then the actions, serialized for the attempted version;
6. **publish**  put-if-absent of ``N.json``; a lost race goes back to 3 with backoff; then the
                post-commit hooks run.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import orjson
import pyarrow as pa

import txnlog
from txnlog import properties as props
from txnlog.errors import (
    AmbiguousWriteError,
    CommitConflictError,
    CommitFailedError,
    FileAlreadyExistsError,
    LogCorruptError,
    ProtocolViolationError,
    TableAlreadyExistsError,
    TransactionError,
    UnsupportedFeatureError,
)
from txnlog.log import codec
from txnlog.log.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from txnlog.log.features import check_writable, merge_protocols, protocol_for, writer_features
from txnlog.log.file_actions import file_keys, key_of
from txnlog.log.filenames import commit_path
from txnlog.log.replay import Commit, advance, read_commits
from txnlog.log.segment import CommitFile, commit_file, list_log
from txnlog.txn.conflicts import TransactionFootprint, WinningCommit, check_conflicts
from txnlog.txn.hooks import HookFailure, HookRegistry, PostCommitContext
from txnlog.txn.isolation import IsolationLevel
from txnlog.txn.retry import RetryClock, RetryPolicy

if TYPE_CHECKING:
    from txnlog.predicates import FilePredicate
    from txnlog.table import Snapshot, Table

log = logging.getLogger(__name__)

ENGINE_INFO = f"txnlog/{txnlog.__version__}"


class CommitResult(int):
    """The committed version (an ``int``), with how the commit went."""

    attempts: int
    hook_failures: tuple[HookFailure, ...]
    txn_id: str

    def __new__(cls, version: int, *, attempts: int, hook_failures: Sequence[HookFailure], txn_id: str) -> "CommitResult":
        obj = super().__new__(cls, version)
        obj.attempts = attempts
        obj.hook_failures = tuple(hook_failures)
        obj.txn_id = txn_id
        return obj

    @property
    def version(self) -> int:
        return int(self)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _operation_parameters(params: Mapping[str, Any] | None) -> dict[str, str]:
    # Spark writes every value as a string, JSON-encoded unless it already is one.
    out = {}
    for key, value in (params or {}).items():
        out[key] = value if isinstance(value, str) else orjson.dumps(value).decode()
    return out


def add_files_from_table(files: pa.Table) -> list[AddFile]:
    """AddFile records from rows laid out like ``Snapshot.files()`` (missing columns allowed)."""
    rows = files.to_pylist(maps_as_pydicts="lossy")
    return [
        AddFile(
            path=r["path"],
            partition_values=r.get("partition_values") or {},
            size=r["size"],
            modification_time=r.get("modification_time") or _now_ms(),
            data_change=r.get("data_change") is not False,
            stats=r.get("stats"),
            tags=r.get("tags"),
            # The snake_case DV columns are the descriptor's own field names.
            deletion_vector=DeletionVectorDescriptor(**r["deletion_vector"]) if r.get("deletion_vector") else None,
            base_row_id=r.get("base_row_id"),
            default_row_commit_version=r.get("default_row_commit_version"),
            clustering_provider=r.get("clustering_provider"),
        )
        for r in rows
    ]


class OptimisticTransaction:
    """One atomic change to a table, validated against concurrent commits at publish time.

    Use it as a context manager: it commits on normal exit and aborts, writing nothing to the
    log, when the block raises.
    """

    def __init__(
        self,
        table: "Table",
        snapshot: "Snapshot | None",
        *,
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        isolation: IsolationLevel | str | None = None,
        engine_info: str | None = None,
        user_metadata: str | None = None,
        hooks: HookRegistry | None = None,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.table = table
        self.snapshot = snapshot
        self.read_version = snapshot.version if snapshot is not None else -1
        self.operation = operation
        self.operation_parameters = dict(operation_parameters or {})
        self.engine_info = engine_info or ENGINE_INFO
        self.user_metadata = user_metadata
        self.hooks = hooks if hooks is not None else table.hooks
        self._retry_policy = retry_policy
        self._requested_isolation = IsolationLevel.parse(isolation) if isolation is not None else None

        self.read_predicates: list["FilePredicate"] = []
        self._read_keys: list[pa.Array] = []
        self._read_whole_table = False
        self._read_app_ids: set[str] = set()

        self._adds: list[AddFile] = []
        self._removes: list[RemoveFile] = []
        self._cdc: list[AddCDCFile] = []
        self._protocol: Protocol | None = None
        self._metadata: Metadata | None = None
        self._txns: dict[str, Txn] = {}
        self._domains: dict[str, DomainMetadata] = {}
        self._metrics: dict[str, int] = {}
        self._state = "open"
        self.result: CommitResult | None = None

    # -- context manager --------------------------------------------------------------------

    def __enter__(self) -> "OptimisticTransaction":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self.abort()
            if self.orphan_files and hasattr(exc, "add_note"):
                exc.add_note(
                    f"txnlog: transaction on {self.table.uri} aborted; data files left for vacuum: "
                    + ", ".join(self.orphan_files)
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
                    self.table.uri,
                    len(self.orphan_files),
                    ", ".join(self.orphan_files[:20]),
                )

    @property
    def orphan_files(self) -> tuple[str, ...]:
        """Data files this transaction staged that no commit references (unless it committed)."""
        return tuple(a.path for a in self._adds) + tuple(c.path for c in self._cdc)

    def _ensure_open(self) -> None:
        if self._state != "open":
            raise TransactionError(f"transaction on {self.table.uri} is already {self._state}")

    # -- 1. scan ----------------------------------------------------------------------------

    @property
    def metadata(self) -> Metadata:
        if self._metadata is not None:
            return self._metadata
        if self.snapshot is None:
            raise TransactionError(f"{self.table.uri} does not exist yet: call update_metadata first")
        return self.snapshot.metadata

    @property
    def protocol(self) -> Protocol:
        if self._protocol is not None:
            return self._protocol
        if self.snapshot is None:
            return protocol_for(self.metadata.configuration, self.metadata.schema_string)
        return self.snapshot.protocol

    def _files(self) -> pa.Table:
        if self.snapshot is None:
            from txnlog.log.file_actions import FILES_SCHEMA

            return FILES_SCHEMA.empty_table()
        return self.snapshot.files()

    def filter_files(self, predicate: "str | FilePredicate | None" = None) -> pa.Table:
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
        matched = pred.filter(self._files())
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

    def app_transaction_version(self, app_id: str) -> int | None:
        """The last version ``app_id`` committed, recorded as read: a concurrent commit by the
        same app id then conflicts."""
        self._read_app_ids.add(app_id)
        return self.snapshot.app_transaction_version(app_id) if self.snapshot is not None else None

    # -- 2. write ---------------------------------------------------------------------------

    def write(self, data: pa.Table | pa.RecordBatchReader, *, data_change: bool = True) -> list[AddFile]:
        """Write ``data`` as Parquet files in the table's layout and stage them as adds."""
        self._ensure_open()
        from txnlog.txn.constraints import check_constraints
        from txnlog.write.parquet import write_data_files

        metadata = self.metadata
        schema = metadata.schema
        if isinstance(data, pa.Table):
            check_constraints(data, metadata)
        else:
            data = _checked_reader(data, metadata)
        adds = write_data_files(
            self.table.store,
            data,
            table_schema=schema,
            partition_columns=metadata.partition_columns,
            configuration=metadata.configuration,
            data_change=data_change,
        )
        self.add_files(adds, data_change=data_change)
        return adds

    def add_files(self, files: Iterable[AddFile] | pa.Table, *, data_change: bool = True) -> None:
        """Stage data files (already written under the table root) to be added."""
        self._ensure_open()
        records = add_files_from_table(files) if isinstance(files, pa.Table) else list(files)
        for f in records:
            if not isinstance(f, AddFile):
                raise TransactionError(f"add_files takes txnlog.AddFile records or a pyarrow Table, got {type(f).__name__}")
            self._adds.append(f if f.data_change == data_change else dataclasses.replace(f, data_change=data_change))

    def remove_files(self, files: Iterable[AddFile] | pa.Table, *, data_change: bool = True) -> None:
        """Stage live files (as returned by ``filter_files``) to be removed."""
        self._ensure_open()
        records = add_files_from_table(files) if isinstance(files, pa.Table) else list(files)
        now = _now_ms()
        for f in records:
            if not isinstance(f, AddFile):
                raise TransactionError(f"remove_files takes rows of filter_files() or AddFile records, got {type(f).__name__}")
            self._removes.append(f.remove(now, data_change))

    def add_cdc_files(self, files: Iterable[AddCDCFile]) -> None:
        """Stage change-data files (for tables with change data feed)."""
        self._ensure_open()
        self._cdc.extend(files)

    def update_metadata(
        self,
        *,
        schema: pa.Schema | str | Mapping[str, Any] | None = None,
        partition_columns: Sequence[str] | None = None,
        configuration: Mapping[str, str] | None = None,
        name: str | None = None,
        description: str | None = None,
    ) -> Metadata:
        """Change the table's schema, partitioning, properties, name or description (once per
        transaction). ``configuration`` replaces the properties; the protocol is upgraded if a
        property needs it."""
        self._ensure_open()
        if self._metadata is not None:
            raise TransactionError("update_metadata may be called at most once per transaction")
        from txnlog.schema import arrow_to_delta_schema, assign_column_mapping

        base = self.snapshot.metadata if self.snapshot is not None else None
        if isinstance(schema, pa.Schema):
            schema_string = arrow_to_delta_schema(schema)
        elif isinstance(schema, str):
            schema_string = schema
        elif isinstance(schema, Mapping):
            schema_string = orjson.dumps(schema).decode()
        elif base is not None:
            schema_string = base.schema_string
        else:
            raise TransactionError("a new table needs a schema")
        conf = dict(configuration) if configuration is not None else dict(base.configuration if base else {})
        props.validate(conf)
        protocol_conf = {k: v for k, v in conf.items() if k.startswith(("delta.feature.", "delta.minReaderVersion", "delta.minWriterVersion"))}
        conf = {k: v for k, v in conf.items() if k not in protocol_conf}
        if props.COLUMN_MAPPING_MODE.get(conf) != "none":
            schema_string, max_id = assign_column_mapping(schema_string, int(conf.get("delta.columnMapping.maxColumnId", 0)))
            conf["delta.columnMapping.maxColumnId"] = str(max_id)
        metadata = Metadata(
            id=base.id if base else str(uuid.uuid4()),
            schema_string=schema_string,
            partition_columns=tuple(partition_columns) if partition_columns is not None else (base.partition_columns if base else ()),
            configuration=conf,
            created_time=base.created_time if base else _now_ms(),
            name=name if name is not None else (base.name if base else None),
            description=description if description is not None else (base.description if base else None),
            format=base.format if base else Metadata.__dataclass_fields__["format"].default_factory(),  # type: ignore[misc]
        )
        metadata.schema  # validates the schema string, raising SchemaError naming the field
        for column in metadata.partition_columns:
            if column not in metadata.schema.names:
                from txnlog.errors import SchemaError

                raise SchemaError(f"partition column {column!r} is not in the schema", field=column)
        required = protocol_for({**conf, **protocol_conf}, schema_string)
        current = self.snapshot.protocol if self.snapshot is not None else None
        new_protocol = merge_protocols(current, required) if current is not None else required
        if new_protocol != current:
            self._protocol = new_protocol
        self._metadata = metadata
        return metadata

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Record that ``app_id`` has committed ``version`` (idempotent streaming writes)."""
        self._ensure_open()
        self._txns[app_id] = Txn(app_id, int(version), _now_ms())

    def set_domain_metadata(self, domain: str, configuration: str, *, removed: bool = False) -> None:
        """Write (or remove) the configuration of a user domain, e.g. ``"myapp.watermark"``."""
        self._ensure_open()
        if domain.startswith("delta."):
            raise TransactionError(f"domain {domain!r} is reserved for the Delta protocol")
        self._domains[domain] = DomainMetadata(domain, configuration, removed)

    def set_operation_metrics(self, **metrics: int) -> None:
        self._metrics.update(metrics)

    # -- 4. validate: rules of this table's protocol ----------------------------------------

    def _check_protocol_rules(self, protocol: Protocol, metadata: Metadata) -> None:
        check_writable(protocol, metadata.schema_string, f"table {self.table.uri}")
        if self._domains and "domainMetadata" not in writer_features(protocol):
            raise UnsupportedFeatureError(
                f"table {self.table.uri} does not have the domainMetadata writer feature; set the table "
                "property delta.feature.domainMetadata=supported first",
                features=("domainMetadata",),
            )
        data_removes = [r for r in self._removes if r.data_change]
        if data_removes and props.APPEND_ONLY.get(metadata.configuration):
            raise ProtocolViolationError(
                f"table {self.table.uri} is append-only (delta.appendOnly=true); refusing to remove "
                f"{data_removes[0].path}",
                rule="appendOnly",
            )
        if data_removes and props.ENABLE_CHANGE_DATA_FEED.get(metadata.configuration) and not self._cdc:
            raise ProtocolViolationError(
                f"table {self.table.uri} records change data (delta.enableChangeDataFeed=true): a commit that "
                "removes data must also add cdc files (add_cdc_files)",
                rule="changeDataFeed",
            )

    def _isolation(self, metadata: Metadata) -> IsolationLevel:
        file_actions = [*self._adds, *self._removes]
        if (
            file_actions
            and not any(f.data_change for f in file_actions)
            and self._metadata is None
            and not self._txns
        ):
            return IsolationLevel.SNAPSHOT_ISOLATION  # compaction: rows are unchanged
        if self._requested_isolation is not None:
            return self._requested_isolation
        return IsolationLevel.parse(props.ISOLATION_LEVEL.get(metadata.configuration))

    def _is_blind_append(self) -> bool:
        return not self._removes and not self._read_keys and not self.read_predicates and not self._read_whole_table

    def _footprint(self, isolation: IsolationLevel) -> TransactionFootprint:
        read_keys = set()
        for keys in self._read_keys:
            read_keys.update(keys.to_pylist())
        return TransactionFootprint(
            read_version=self.read_version,
            isolation=isolation,
            read_predicates=list(self.read_predicates),
            read_whole_table=self._read_whole_table,
            read_file_keys=read_keys,
            app_ids=self._read_app_ids | set(self._txns),
            domains=set(self._domains),
            removed_keys={key_of(codec.encode_action(r)["remove"]) for r in self._removes},
        )

    # -- 5. prepare -------------------------------------------------------------------------

    def _metrics_for_commit(self) -> dict[str, str]:
        metrics: dict[str, int] = {
            "numFiles": len(self._adds),
            "numAddedFiles": len(self._adds),
            "numRemovedFiles": len(self._removes),
            "numOutputBytes": sum(a.size for a in self._adds),
        }
        rows = 0
        for a in self._adds:
            if a.stats:
                try:
                    rows += int(orjson.loads(a.stats).get("numRecords", 0))
                except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
                    pass
        metrics["numOutputRows"] = rows
        metrics.update(self._metrics)
        return {k: str(v) for k, v in metrics.items()}

    def _encoded_body(self) -> list[dict[str, Any]]:
        """The actions after protocol and metaData, encoded once: they do not change between
        attempts, and a large transaction's adds are costly to encode again on every retry."""
        actions: list[Action] = [*self._txns.values(), *self._domains.values(), *self._removes, *self._adds, *self._cdc]
        return [codec.encode_action(a) for a in actions]

    def _prepare(
        self,
        version: int,
        txn_id: str,
        isolation: IsolationLevel,
        blind: bool,
        previous_ict: int | None,
        metrics: dict[str, str],
        body: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        now = _now_ms()
        metadata = self._metadata
        ict = None
        conf = (metadata or self.metadata).configuration
        if props.ENABLE_IN_COMMIT_TIMESTAMPS.get(conf):
            ict = max(now, previous_ict + 1) if previous_ict is not None else now
            if metadata is not None and self.snapshot is not None and not props.ENABLE_IN_COMMIT_TIMESTAMPS.get(self.snapshot.configuration):
                # Turning timestamps on for an existing table: record from where they hold.
                metadata = dataclasses.replace(
                    metadata,
                    configuration={
                        **metadata.configuration,
                        "delta.inCommitTimestampEnablementVersion": str(version),
                        "delta.inCommitTimestampEnablementTimestamp": str(ict),
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
        )
        head: list[Action] = [info]
        if self._protocol is not None:
            head.append(self._protocol)
        if metadata is not None:
            head.append(metadata)
        return [*(codec.encode_action(a) for a in head), *body]

    def _previous_ict(self, version: int, winners: list[Commit]) -> int | None:
        if version == 0:
            return None
        for commit in reversed(winners):
            if commit.version == version - 1:
                info = commit.commit_info()
                return info.in_commit_timestamp if info else None
        try:
            previous = read_commits(self.table.store, [list_log(self.table.store, version - 1).commits[version - 1]])[0]
        except KeyError:
            return None
        info = previous.commit_info()
        return info.in_commit_timestamp if info else None

    # -- 6. publish -------------------------------------------------------------------------

    def commit(self) -> CommitResult:
        """Publish the staged actions as the next version; returns it (a ``CommitResult``).

        Losing the race for a version re-checks the winners and retries at the next one, with
        backoff, until ``txnlog.commit.retry.*`` runs out. A logical conflict raises a
        ``CommitConflictError`` subclass at once.
        """
        self._ensure_open()
        metadata = self.metadata
        protocol = self.protocol
        if self.snapshot is None and self._protocol is None:
            self._protocol = protocol
        self._check_protocol_rules(protocol, metadata)
        isolation = self._isolation(metadata)
        blind = self._is_blind_append()
        footprint = self._footprint(isolation)
        policy = self._retry_policy or RetryPolicy.from_configuration(metadata.configuration)
        clock = RetryClock(policy)
        txn_id = str(uuid.uuid4())
        store = self.table.store

        metrics, body = self._metrics_for_commit(), self._encoded_body()
        version = self.read_version + 1
        winners: list[Commit] = []
        ict_enabled = props.ENABLE_IN_COMMIT_TIMESTAMPS.get(metadata.configuration)
        committed: list[dict[str, Any]] | None = None
        while committed is None:
            previous_ict = self._previous_ict(version, winners) if ict_enabled else None
            actions = self._prepare(version, txn_id, isolation, blind, previous_ict, metrics, body)
            try:
                store.put_if_absent(commit_path(version), codec.dump_lines(actions))
                committed = actions
                break
            except FileAlreadyExistsError:
                if self.read_version < 0:
                    self._state = "failed"
                    raise TableAlreadyExistsError(
                        f"a table was created at {self.table.uri} concurrently", uri=self.table.uri
                    ) from None
            except AmbiguousWriteError:
                log.warning("commit of version %d to %s has an unknown outcome; checking the log", version, self.table.uri)
            except Exception:
                self._state = "failed"
                raise
            exhausted = clock.exhausted()
            if not exhausted:
                clock.backoff()  # wait before looking, so the version chosen next is fresh
            # 3. refresh and 4. validate against every commit that won since the last look.
            try:
                new_winners = self._read_winners(version if not winners else winners[-1].version + 1)
            except Exception:
                self._state = "failed"
                raise
            for winner in new_winners:
                summary = WinningCommit.of(winner)
                if summary.txn_id == txn_id:
                    # An earlier attempt with an unknown outcome did land: that is our commit.
                    version = winner.version
                    committed = winner.actions
                    break
                try:
                    check_conflicts(footprint, summary)
                except CommitConflictError as e:
                    self._state = "failed"
                    e.attempts = clock.retries + 1
                    e.orphan_files = self.orphan_files
                    raise
            if committed is not None:
                break
            winners.extend(new_winners)
            version = (winners[-1].version if winners else version - 1) + 1
            if exhausted:
                self._state = "failed"
                raise CommitFailedError(
                    f"gave up committing to {self.table.uri} after {clock.retries + 1} attempts in "
                    f"{clock.elapsed_ms():.0f} ms (txnlog.commit.retry.num-retries={policy.num_retries}, "
                    f"total-timeout-ms={policy.total_timeout_ms}); last version tried {version}",
                    attempts=clock.retries + 1,
                    version=version,
                    orphan_files=self.orphan_files,
                )

        self._state = "committed"
        failures = self._run_hooks(version, winners, committed, metadata)
        self.result = CommitResult(version, attempts=clock.retries + 1, hook_failures=failures, txn_id=txn_id)
        return self.result

    def _read_winners(self, start: int) -> list[Commit]:
        store = self.table.store
        listing = list_log(store, start)
        last = max((v for v in listing.commits if v >= start), default=start - 1)
        files: list[CommitFile] = []
        for v in range(start, last + 1):
            found = commit_file(store, listing, v)
            if found is None:
                if v == start:
                    raise LogCorruptError(
                        f"cannot check conflicts on {self.table.uri}: commit {start} is gone (log cleaned up?)", version=start
                    )
                raise LogCorruptError(f"{self.table.uri}: commit {v} is missing between winning commits", version=v)
            files.append(found)
        return read_commits(store, files)

    def _run_hooks(
        self, version: int, winners: list[Commit], committed: list[dict[str, Any]], metadata: Metadata
    ) -> list[HookFailure]:
        from txnlog.table import Snapshot

        post_state = None
        if self.snapshot is not None:
            # The state at our version, from what this transaction already holds: it also becomes
            # the table's latest known state, so the next transaction need not re-read our commit.
            own = Commit(version, commit_path(version), _now_ms(), committed)
            post_state = advance(self.snapshot._state, [*winners, own], f"{self.table.uri} version {version}")
            cached = self.table._latest_state
            if cached is None or cached.version < version:
                self.table._latest_state = post_state
        if self.hooks is None:
            return []

        def snapshot_at_version() -> "Snapshot":
            return Snapshot(self.table, post_state) if post_state is not None else self.table.snapshot(version)

        ctx = PostCommitContext(self.table, version, self.operation, dict(metadata.configuration), snapshot_at_version)
        return self.hooks.run(ctx)


def _checked_reader(reader: pa.RecordBatchReader, metadata: Metadata) -> pa.RecordBatchReader:
    """Enforce constraints batch by batch while the writer streams."""
    from txnlog.txn.constraints import check_constraints

    def batches() -> Iterable[pa.RecordBatch]:
        for batch in reader:
            check_constraints(pa.Table.from_batches([batch]), metadata)
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


__all__ = ["CommitResult", "OptimisticTransaction", "add_files_from_table"]
