"""Writing checkpoints: the classic single Parquet file, or a V2 checkpoint (UUID-named Parquet
file plus ``_delta_log/_sidecars/``) when the table has the ``v2Checkpoint`` feature.

Layout (PROTOCOL.md, "Checkpoints" and "Checkpoint Schema"; checked against the checkpoints
Spark and delta-rs write): one nullable struct column per action (``txn``, ``add``,
``remove``, ``metaData``, ``protocol``, ``domainMetadata``; V2 adds ``checkpointMetadata`` and
``sidecar``), camelCase fields, one row per action, non-file actions first. ``remove`` carries
no ``stats`` or ``tags``: checkpoint tombstones only serve VACUUM.

The file list is streamed from the snapshot's Arrow table in row-group chunks: no Python
object per file, memory bounded by one chunk plus the Parquet writer's buffers.
"""

from __future__ import annotations

import io
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from txnlog import properties as props
from txnlog.errors import CorruptCheckpointError, FileAlreadyExistsError, ObjectNotFoundError, TxnLogError
from txnlog.file_facts import file_keys, is_column_mapped, parse_partition_values, parse_stats, partition_fields, table_stats_type
from txnlog.log import codec
from txnlog.log.actions import CheckpointMetadata, Metadata, Protocol, Sidecar
from txnlog.log.checkpoint_reader import SKIPPABLE_WHEN_NULL, CheckpointSources, checkpoint_sources, sidecar_path
from txnlog.log.commits import read_commits
from txnlog.log.file_actions import (
    ADD_LOG_TYPE,
    DV_LOG_TYPE,
    FILES_SCHEMA,
    REMOVE_LOG_TYPE,
    STRING_MAP,
    TOMBSTONES_SCHEMA,
)
from txnlog.log.filenames import LOG_DIR, SIDECAR_DIR, CheckpointFile, classic_checkpoint_path, version_prefix
from txnlog.log.last_checkpoint import LastCheckpointHint, read_hint, write_hint
from txnlog.log.replay import apply_commits, checkpoint_table_actions, replay
from txnlog.log.segment import LogSegment, build_segment, list_log
from txnlog.log.table_state import TableState
from txnlog.storage.base import LogStore

logger = logging.getLogger(__name__)

#: Rows per Parquet row group (and per Arrow chunk converted at a time).
CHUNK_ROWS = 100_000
#: A V2 checkpoint starts a new sidecar file after this many file actions.
SIDECAR_MAX_ROWS = 1_000_000

_STRING_LIST = pa.list_(pa.string())

TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", _STRING_LIST),
        ("configuration", STRING_MAP),
        ("createdTime", pa.int64()),
    ]
)
PROTOCOL_TYPE = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", _STRING_LIST),
        ("writerFeatures", _STRING_LIST),
    ]
)
DOMAIN_METADATA_TYPE = pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())])
CHECKPOINT_METADATA_TYPE = pa.struct([("version", pa.int64()), ("tags", STRING_MAP)])
SIDECAR_TYPE = pa.struct(
    [("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64()), ("tags", STRING_MAP)]
)
# Checkpoint tombstones drop stats and tags (PROTOCOL.md, "Checkpoint Schema").
REMOVE_TYPE = pa.struct([f for f in REMOVE_LOG_TYPE if f.name not in ("stats", "tags")])


@dataclass(frozen=True)
class CheckpointResult:
    """What a checkpoint holds: ``paths`` are relative to the table root, the top-level file
    first (then V2 sidecars); ``num_actions`` counts every row of every file."""

    version: int
    paths: tuple[str, ...]
    num_actions: int
    num_add_files: int
    size_in_bytes: int


def write_checkpoint(store: LogStore, state: TableState | None = None, *, now_ms: int | None = None) -> CheckpointResult:
    """Checkpoint ``state``'s version in ``store``, then point ``_last_checkpoint`` at it (never
    backwards).

    A checkpoint already there for that version (another writer's) is kept and described
    instead: checkpoints are written put-if-absent and never replaced, since readers may be
    reading the one there (see :func:`_write_unless_there`). ``now_ms`` (default: the clock) dates the tombstone and app transaction
    retention horizons. (``write_checkpoint(snapshot)``, the earlier form, still works.)
    """
    if state is None:  # the earlier write_checkpoint(snapshot): anything with .store and .state
        store, state = store.store, store.state  # type: ignore[attr-defined]
    assert state is not None
    version = state.version
    now = int(time.time() * 1000) if now_ms is None else now_ms
    result = existing_checkpoint(store, version)
    if result is None:
        result = _write_unless_there(store, state, lambda: _Content.of(state, now))
    advance_last_checkpoint(store, result)
    return result


#: Fresh listings of the log when a file vanishes under a checkpoint (a concurrent expiry).
_RELISTS = 3


def checkpoint_from_log(store: LogStore, version: int | None = None, *, now_ms: int | None = None) -> CheckpointResult:
    """Checkpoint ``version`` (default: the latest) of the table in ``store`` without opening a
    snapshot of it: the newest checkpoint below it is streamed row group by row group, minus
    the logical files (path, deletion vector id) the commits after it add or remove, then the
    commits' live files. Memory is bounded by one row group and those commits, whatever the
    number of files. Without an earlier Parquet checkpoint, the log is replayed in full.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    relists = 0
    while True:
        try:
            return _checkpoint_listed_log(store, version, now)
        except TxnLogError as e:
            # A file listed was gone when read: a concurrent log expiry moved the log on under
            # this read. The log listed again has what the version needs (or says it is gone).
            vanished = e.vanished if isinstance(e, CorruptCheckpointError) else isinstance(e, ObjectNotFoundError)
            if not vanished or relists == _RELISTS:
                raise
            relists += 1
            # Expected under log expiry and handled: information, not a warning.
            logger.info("%s: a log file vanished while checkpointing (%s); listing the log again", store.root_uri, e)


def _checkpoint_listed_log(store: LogStore, version: int | None, now: int) -> CheckpointResult:
    segment = build_segment(store, version)
    result = existing_checkpoint(store, segment.version)
    if result is None:
        sources = checkpoint_sources(store, segment.checkpoint) if segment.checkpoint else None
        if sources is None:
            state = replay(store, segment)
            result = _write_unless_there(store, state, lambda: _Content.of(state, now))
        else:
            state, content = _streamed(store, segment, sources, now)
            result = _write_unless_there(store, state, lambda: content)
    advance_last_checkpoint(store, result)
    return result


def _streamed(store: LogStore, segment: LogSegment, sources: CheckpointSources, now: int) -> tuple[TableState, _Content]:
    """The content of a checkpoint at ``segment.version``: ``sources`` (the previous
    checkpoint) brought forward by the segment's commits, as streams."""
    protocol, metadata, txns, domains = checkpoint_table_actions(sources.non_file_actions)
    # The commits alone, reconciled among themselves (the same rules and checks as a replay).
    delta = apply_commits(
        read_commits(store, segment.commits, columnar=True),
        base_files=FILES_SCHEMA.empty_table(),
        protocol=protocol,
        metadata=metadata,
        app_transactions=txns,
        domains=domains,
        tombstone_parts=(),
        version=segment.version,
        where=f"{store.root_uri} version {segment.version}",
    )
    new_tombstones = delta.tombstones()
    # Every logical file a commit touched: its latest action is either a live add or a tombstone.
    touched = pa.concat_arrays([delta.file_keys(), file_keys(new_tombstones).cast(pa.string())])
    config = delta.metadata.configuration

    def untouched(tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
        for table in tables:
            if len(touched):
                table = table.filter(pc.invert(pc.is_in(file_keys(table), value_set=touched)))
            if table.num_rows:
                yield table

    def adds() -> Iterator[pa.Table]:
        # Row groups are read on this thread: reading the next one on a helper thread while
        # this one is written saved ~15% of the time but held 40-60 MiB more (the allocator
        # keeps the helper thread's freed pages), which the 300 MiB bound cannot spare.
        yield from untouched(sources.iter_files(store, "add"))
        yield delta.files

    def removes() -> Iterator[pa.Table]:
        for table in untouched(sources.iter_files(store, "remove")):
            yield _retained(table, config, now)
        yield _retained(new_tombstones, config, now)

    content = _Content(_non_file_rows(delta, now), _AddEncoder(delta.protocol, delta.metadata), adds, removes)
    return delta, content


def _write_unless_there(store: LogStore, state: TableState, content: Callable[[], _Content]) -> CheckpointResult:
    """Write the checkpoint of ``state``, or describe the one of the same version another
    writer put there first (txnlog's checkpoint hook and checkpointer race; so do other
    engines). Nothing is ever written over a checkpoint: a reader may be reading it.

    A file there that is not a readable checkpoint (a foreign writer's, cut short) stays too:
    readers skip it and rebuild the version from the log; FileAlreadyExistsError names it.
    """
    try:
        return _write(store, state, content())
    except FileAlreadyExistsError as e:
        there = existing_checkpoint(store, state.version)
        if there is not None:
            logger.info("checkpoint %s of %s was written by another writer first: kept", state.version, store.root_uri)
            return there
        raise FileAlreadyExistsError(
            f"cannot checkpoint version {state.version} of {store.root_uri}: {e.path} is there but unreadable, and "
            "txnlog never writes over a checkpoint (readers may be reading it); readers rebuild that version "
            "without it. Remove it (validate names it) to checkpoint this version, or checkpoint a later one",
            path=e.path,
        ) from e


def _write(store: LogStore, state: TableState, content: _Content) -> CheckpointResult:
    version = state.version
    started = time.perf_counter()
    if state.protocol.has_writer_feature("v2Checkpoint"):
        result = _write_v2(store, version, content)
    else:
        if props.CHECKPOINT_POLICY.get(state.metadata.configuration) == "v2":
            logger.warning(
                "%s has %s=v2 but no v2Checkpoint table feature: writing a classic checkpoint "
                "(PROTOCOL.md allows UUID-named checkpoints only with the feature)",
                store.root_uri,
                props.CHECKPOINT_POLICY.key,
            )
        result = _write_classic(store, version, content)
    logger.info(
        "wrote checkpoint %s of %s: %d actions, %d files, %d bytes in %.2fs",
        version,
        store.root_uri,
        result.num_actions,
        result.num_add_files,
        result.size_in_bytes,
        time.perf_counter() - started,
    )
    return result


# --- what goes in ------------------------------------------------------------------------------


@dataclass
class _Content:
    non_file: list[dict[str, Any]]  # {column: body} rows
    add_encoder: _AddEncoder
    #: Producers of the file list (FILES_SCHEMA tables) and of the tombstones
    #: (TOMBSTONES_SCHEMA, retention applied), each a stream of pieces, called once.
    adds: Callable[[], Iterable[pa.Table]]
    removes: Callable[[], Iterable[pa.Table]]
    num_add_files: int = 0

    @classmethod
    def of(cls, state: TableState, now: int) -> _Content:
        tombstones = _retained(state.tombstones(), state.metadata.configuration, now)
        return cls(
            _non_file_rows(state, now),
            _AddEncoder(state.protocol, state.metadata),
            lambda: [state.files],
            lambda: [tombstones],
        )

    def file_batches(self, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The add rows, then the remove rows, in chunks of at most CHUNK_ROWS."""
        self.num_add_files = 0
        for table in self.adds():
            for batch in _regrouped(table):
                self.num_add_files += batch.num_rows
                yield _row_batch(schema, batch.num_rows, add=self.add_encoder.encode(batch))
        for table in self.removes():
            for batch in _regrouped(table):
                yield _row_batch(schema, batch.num_rows, remove=_encode_removes(batch))


def _non_file_rows(state: TableState, now: int) -> list[dict[str, Any]]:
    """protocol, metaData, the app transactions within their retention, and live domains."""
    config = state.metadata.configuration
    rows: list[dict[str, Any]] = [codec.encode_action(state.protocol), codec.encode_action(state.metadata)]
    txn_horizon = props.SET_TRANSACTION_RETENTION.get(config)
    for txn in state.app_transactions.values():
        # A txn without lastUpdated cannot be dated, so it is kept.
        if txn_horizon is not None and txn.last_updated is not None and txn.last_updated < now - txn_horizon:
            continue
        rows.append(codec.encode_action(txn))
    rows += [codec.encode_action(d) for d in state.domains.values() if not d.removed]
    return rows


def _retained(tombstones: pa.Table, config: Mapping[str, str], now: int) -> pa.Table:
    """Tombstones younger than the deleted-file retention (the others only served VACUUM)."""
    if not tombstones.num_rows:
        return tombstones
    # A tombstone without a deletionTimestamp counts as deleted at 0, i.e. expired.
    horizon = now - props.DELETED_FILE_RETENTION.get(config)
    deleted_at = pc.fill_null(tombstones.column("deletion_timestamp"), 0)
    return tombstones.filter(pc.greater_equal(deleted_at, horizon))


def _regrouped(table: pa.Table) -> Iterator[pa.RecordBatch]:
    """Batches of CHUNK_ROWS rows whatever the input's chunking (one row group each)."""
    for start in range(0, table.num_rows, CHUNK_ROWS):
        piece = table.slice(start, CHUNK_ROWS)
        batches = piece.to_batches()
        yield batches[0] if len(batches) == 1 else piece.combine_chunks().to_batches()[0]


def _row_batch(schema: pa.Schema, n: int, **columns: pa.Array) -> pa.RecordBatch:
    arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_FILE_TO_LOG = dict(zip(FILES_SCHEMA.names, (f.name for f in ADD_LOG_TYPE)))
_TOMBSTONE_TO_LOG = dict(zip(TOMBSTONES_SCHEMA.names, (f.name for f in REMOVE_LOG_TYPE)))


def _log_child(batch: pa.RecordBatch, column: str) -> pa.Array:
    child = batch.column(column)
    if column != "deletion_vector":
        return child
    # camelCase field names, and maxRowIndex left null as delta-spark leaves it: it is not the
    # protocol's, and delta-spark refuses to re-serialize an add that has one.
    dv = child.view(DV_LOG_TYPE)
    fields = [pa.nulls(len(dv), f.type) if f.name == "maxRowIndex" else values for f, values in zip(DV_LOG_TYPE, dv.flatten())]
    return pa.StructArray.from_arrays(fields, fields=list(DV_LOG_TYPE), mask=dv.is_null())


def _encode_removes(batch: pa.RecordBatch) -> pa.StructArray:
    by_log_name = {_TOMBSTONE_TO_LOG[name]: name for name in TOMBSTONES_SCHEMA.names}
    children = [_log_child(batch, by_log_name[f.name]) for f in REMOVE_TYPE]
    return pa.StructArray.from_arrays(children, fields=list(REMOVE_TYPE))


# --- the add column: stats and partition values, as JSON and/or parsed -------------------------


class _AddEncoder:
    """Turns chunks of a snapshot's file list into the checkpoint's ``add`` struct column."""

    def __init__(self, protocol: Protocol, metadata: Metadata) -> None:
        config = metadata.configuration
        self.write_json = props.WRITE_STATS_AS_JSON.get(config)
        self.metadata = metadata
        self.stats_type: pa.StructType | None = None
        self.partition_type: pa.StructType | None = None
        if props.WRITE_STATS_AS_STRUCT.get(config):
            schema = metadata.schema
            self.stats_type = table_stats_type(
                schema, metadata.partition_columns, config, tight_bounds=protocol.has_reader_feature("deletionVectors")
            )
            known = [c for c in metadata.partition_columns if c in schema.names]  # a broken table is refused elsewhere
            fields = partition_fields(schema, known, is_column_mapped(config))
            if fields:
                self.partition_type = pa.struct([pa.field(key, f.type) for key, f in fields])
        fields = [f for f in ADD_LOG_TYPE if self.write_json or f.name != "stats"]
        if self.stats_type is not None:
            fields.append(pa.field("stats_parsed", self.stats_type))
        if self.partition_type is not None:
            fields.append(pa.field("partitionValues_parsed", self.partition_type))
        self.type = pa.struct(fields)

    def encode(self, batch: pa.RecordBatch) -> pa.StructArray:
        by_log_name = {_FILE_TO_LOG[name]: name for name in FILES_SCHEMA.names}
        children = []
        for f in self.type:
            if f.name == "stats_parsed":
                assert self.stats_type is not None
                children.append(parse_stats(batch.column("stats"), self.stats_type))
            elif f.name == "partitionValues_parsed":
                metadata = self.metadata
                known = [c for c in metadata.partition_columns if c in metadata.schema.names]
                parsed = parse_partition_values(
                    batch.column("partition_values"), metadata.schema, known, metadata.configuration, physical=True
                )
                children.append(pa.StructArray.from_arrays([c.combine_chunks() for c in parsed.columns], fields=list(f.type)))
            else:
                children.append(_log_child(batch, by_log_name[f.name]))
        return pa.StructArray.from_arrays(children, fields=list(self.type))


# --- files -----------------------------------------------------------------------------------


def _parquet_writer(sink: Any, schema: pa.Schema) -> pq.ParquetWriter:
    return pq.ParquetWriter(
        sink,
        schema,
        compression="snappy",
        write_statistics=_statistics_columns(schema),
        use_dictionary=True,
        store_schema=False,
    )


def _statistics_columns(schema: pa.Schema) -> list[str]:
    """Parquet column paths whose row-group statistics a reader uses: stats_parsed and
    partitionValues_parsed leaves (data skipping), and the leaves of the optional fields most
    files lack, whose null counts let a reader skip decoding them (paths and stats strings are
    just cost)."""
    out: list[str] = []

    def walk(t: pa.DataType, prefix: str) -> None:
        if pa.types.is_struct(t):
            for f in t:
                walk(f.type, f"{prefix}.{f.name}")
        elif pa.types.is_map(t):
            out.extend([f"{prefix}.key_value.key", f"{prefix}.key_value.value"])
        else:
            out.append(prefix)

    for field in schema:
        if field.name in ("add", "remove") and pa.types.is_struct(field.type):
            for f in field.type:
                if f.name in ("stats_parsed", "partitionValues_parsed") or f.name in SKIPPABLE_WHEN_NULL:
                    walk(f.type, f"{field.name}.{f.name}")
    return out


def _classic_schema(add_type: pa.StructType) -> pa.Schema:
    return pa.schema(
        [
            ("txn", TXN_TYPE),
            ("add", add_type),
            ("remove", REMOVE_TYPE),
            ("metaData", METADATA_TYPE),
            ("protocol", PROTOCOL_TYPE),
            ("domainMetadata", DOMAIN_METADATA_TYPE),
        ]
    )


def _write_classic(store: LogStore, version: int, content: _Content) -> CheckpointResult:
    path = classic_checkpoint_path(version)
    schema = _classic_schema(content.add_encoder.type)
    head = pa.Table.from_pylist(content.non_file, schema=schema)
    rows = _write_parquet(store, path, schema, head, content.file_batches(schema))
    return CheckpointResult(version, (path,), rows, content.num_add_files, store.info(path).size)


def _write_parquet(
    store: LogStore, path: str, schema: pa.Schema, head: pa.Table | None, batches: Iterable[pa.RecordBatch]
) -> int:
    """Stream ``head`` then ``batches`` into one Parquet file that appears at ``path`` whole, if
    nothing is there (FileAlreadyExistsError otherwise)."""
    rows = 0
    with store.open_atomic_output(path) as sink:
        writer = _parquet_writer(sink, schema)
        try:
            if head is not None and head.num_rows:
                writer.write_table(head)
                rows += head.num_rows
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
        finally:
            writer.close()
    return rows


def _write_v2(store: LogStore, version: int, content: _Content) -> CheckpointResult:
    """Adds and removes into sidecars, then the UUID-named top-level file that references them
    (it is written last, so a sidecar is never referenced before it is complete)."""
    sidecar_schema = pa.schema([("add", content.add_encoder.type), ("remove", REMOVE_TYPE)])
    sidecars: list[Sidecar] = []
    sidecar_rows = 0
    written: list[str] = []
    try:
        for chunk in _runs(content.file_batches(sidecar_schema), SIDECAR_MAX_ROWS):
            name = f"{uuid.uuid4()}.parquet"
            path = f"{SIDECAR_DIR}/{name}"
            sidecar_rows += _write_parquet(store, path, sidecar_schema, None, chunk)
            written.append(path)  # only once it is ours: a name found taken is someone else's file
            info = store.info(path)
            sidecars.append(Sidecar(path=name, size_in_bytes=info.size, modification_time=info.modification_time))

        # The file actions live in the sidecars, but the top-level file keeps (null) add and
        # remove columns: delta-spark reads it with a schema taken from the file and fails
        # without them ("No such struct field `add`").
        top_schema = pa.schema(
            [
                ("checkpointMetadata", CHECKPOINT_METADATA_TYPE),
                ("txn", TXN_TYPE),
                ("metaData", METADATA_TYPE),
                ("protocol", PROTOCOL_TYPE),
                ("domainMetadata", DOMAIN_METADATA_TYPE),
                ("sidecar", SIDECAR_TYPE),
                *sidecar_schema,
            ]
        )
        rows = (
            [codec.encode_action(CheckpointMetadata(version=version))]
            + content.non_file
            + [codec.encode_action(s) for s in sidecars]
        )
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=top_schema), buffer, compression="snappy", store_schema=False)
        top_path = f"{LOG_DIR}/{version_prefix(version)}.checkpoint.{uuid.uuid4()}.parquet"
        store.put_if_absent(top_path, buffer.getvalue())
    except BaseException:
        for path in written:  # unreferenced sidecars: remove them rather than leave them to cleanup
            try:
                store.delete(path)
            except TxnLogError:
                logger.warning("could not delete unreferenced sidecar %s", store.uri_of(path))
        raise
    size = len(buffer.getvalue()) + sum(s.size_in_bytes for s in sidecars)
    return CheckpointResult(
        version, (top_path, *written), len(rows) + sidecar_rows, content.num_add_files, size
    )


def _runs(batches: Iterable[pa.RecordBatch], max_rows: int) -> Iterator[Iterator[pa.RecordBatch]]:
    """Consecutive runs of whole ``batches``, each ending once it reaches ``max_rows`` rows.
    Lazy: each run must be consumed before the next one is asked for."""
    it = iter(batches)
    head = [next(it, None)]

    def run() -> Iterator[pa.RecordBatch]:
        rows = 0
        while head[0] is not None and rows < max_rows:
            batch = head[0]
            rows += batch.num_rows
            yield batch
            head[0] = next(it, None)

    while head[0] is not None:
        yield run()


# --- an existing checkpoint, and the hint ------------------------------------------------------


def existing_checkpoint(store: LogStore, version: int) -> CheckpointResult | None:
    """The complete checkpoint already in ``store`` for ``version``, described, or None if there
    is none or it is unreadable (then a warning is logged)."""
    files = list_log(store, version).complete_checkpoint(version)
    if not files:
        return None
    try:
        return _describe(store, version, files)
    except CorruptCheckpointError as e:
        logger.warning("existing checkpoint %s is unreadable: %s", files[0].path, e)
        return None


def _describe(store: LogStore, version: int, files: list[CheckpointFile]) -> CheckpointResult:
    paths: list[str] = []
    actions = adds = size = 0
    sidecars: list[Sidecar] = []
    for part in files:
        paths.append(part.path)
        size += part.size
        if part.v2_format == "json":
            lines = codec.parse_lines(store.read(part.path), path=part.path, version=version)
            actions += len(lines)
            adds += sum(1 for obj in lines if "add" in obj)
            for obj in lines:
                if "sidecar" in obj:
                    sidecar = codec.decode_action("sidecar", obj["sidecar"], path=part.path, version=version)
                    sidecars.append(sidecar)  # type: ignore[arg-type]
            continue
        rows, part_adds, part_sidecars = _parquet_counts(store, part.path, version)
        actions += rows
        adds += part_adds
        sidecars += part_sidecars
    for sidecar in sidecars:
        path = sidecar_path(store, sidecar, version)
        rows, part_adds, _ = _parquet_counts(store, path, version)
        paths.append(path)
        actions += rows
        adds += part_adds
        size += sidecar.size_in_bytes
    return CheckpointResult(version, tuple(paths), actions, adds, size)


def _parquet_counts(store: LogStore, path: str, version: int) -> tuple[int, int, list[Sidecar]]:
    """Rows, add actions, and sidecar actions of one checkpoint Parquet file."""
    try:
        pf = pq.ParquetFile(store.open_input(path))
        names = pf.schema_arrow.names
        adds = 0
        if "add" in names:
            column = pf.read(columns=["add.path"]).column("add")
            adds = len(column) - column.null_count
        sidecars: list[Sidecar] = []
        if "sidecar" in names:
            column = pf.read(columns=["sidecar"]).column("sidecar")
            for body in column.filter(column.is_valid()).to_pylist(maps_as_pydicts="lossy"):
                action = codec.decode_action("sidecar", body, path=path, version=version)
                sidecars.append(action)  # type: ignore[arg-type]
        return pf.metadata.num_rows, adds, sidecars
    except ObjectNotFoundError as e:  # deleted since the log was listed: a concurrent log expiry
        raise CorruptCheckpointError(
            f"checkpoint file {path} (version {version}) vanished while it was read: {e}", path=path, version=version, vanished=True
        ) from e
    except TxnLogError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise CorruptCheckpointError(
            f"checkpoint file {path} (version {version}) is unreadable: {e}", path=path, version=version
        ) from e


def advance_last_checkpoint(store: LogStore, result: CheckpointResult) -> None:
    """Point ``_last_checkpoint`` at the checkpoint ``result`` describes, unless it already names
    that one or a newer one.

    Stores have no conditional overwrite, so two writers can read the old hint and write theirs
    in the wrong order. Each checkpoint is complete before its hint is written, so after each
    write the log is listed above it: a newer complete checkpoint found there was overwritten
    (or is about to be pointed at by its writer) and the hint is moved on to it. When every
    writer has done this, the hint names the newest checkpoint.
    """
    while True:
        hint = LastCheckpointHint(
            version=result.version,
            size=result.num_actions,
            size_in_bytes=result.size_in_bytes,
            num_of_add_files=result.num_add_files,
        )
        current = read_hint(store)
        if current is not None and (current.version > result.version or current == hint):
            return
        write_hint(store, hint)
        newer = _newest_checkpoint_above(store, result.version)
        if newer is None:
            return
        result = newer


def _newest_checkpoint_above(store: LogStore, version: int) -> CheckpointResult | None:
    listing = list_log(store, version + 1)
    for candidate in sorted((v for v in listing.checkpoints if v > version), reverse=True):
        files = listing.complete_checkpoint(candidate)
        if not files:
            continue
        try:
            return _describe(store, candidate, files)
        except (CorruptCheckpointError, ObjectNotFoundError):
            continue  # being expired or unreadable: not one to point at
    return None


__all__ = ["CheckpointResult", "advance_last_checkpoint", "checkpoint_from_log", "existing_checkpoint", "write_checkpoint", "CHUNK_ROWS"]
