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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from txnlog import properties as props
from txnlog.errors import CorruptCheckpointError, TxnLogError
from txnlog.log import codec
from txnlog.log.actions import CheckpointMetadata, Metadata, Protocol, Sidecar
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
from txnlog.log.segment import list_log
from txnlog.schema import delta_field_metadata
from txnlog.storage.base import LogStore

if TYPE_CHECKING:
    from txnlog.table import Snapshot

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

_PHYSICAL_NAME = "delta.columnMapping.physicalName"


@dataclass(frozen=True)
class CheckpointResult:
    """What a checkpoint holds: ``paths`` are relative to the table root, the top-level file
    first (then V2 sidecars); ``num_actions`` counts every row of every file."""

    version: int
    paths: tuple[str, ...]
    num_actions: int
    num_add_files: int
    size_in_bytes: int


def write_checkpoint(snapshot: "Snapshot", *, now_ms: int | None = None) -> CheckpointResult:
    """Checkpoint ``snapshot``'s version, then point ``_last_checkpoint`` at it (never backwards).

    A complete checkpoint already there for that version (another writer's) is kept and
    described instead. ``now_ms`` (default: the clock) dates the tombstone and app transaction
    retention horizons.
    """
    store = snapshot.table.store
    version = snapshot.version
    now = int(time.time() * 1000) if now_ms is None else now_ms
    result = _existing(store, version)
    if result is None:
        started = time.perf_counter()
        content = _Content.of(snapshot, now)
        if snapshot.protocol.has_writer_feature("v2Checkpoint"):
            result = _write_v2(store, version, content)
        else:
            if snapshot.table_property(props.CHECKPOINT_POLICY) == "v2":
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
    _advance_hint(store, result)
    return result


# --- what goes in ------------------------------------------------------------------------------


@dataclass
class _Content:
    non_file: list[dict[str, Any]]  # {column: body} rows
    files: pa.Table  # FILES_SCHEMA
    tombstones: pa.Table  # TOMBSTONES_SCHEMA, retention applied
    add_encoder: "_AddEncoder"

    @classmethod
    def of(cls, snapshot: "Snapshot", now: int) -> "_Content":
        config = snapshot.configuration
        rows: list[dict[str, Any]] = [codec.encode_action(snapshot.protocol), codec.encode_action(snapshot.metadata)]
        txn_horizon = props.SET_TRANSACTION_RETENTION.get(config)
        for txn in snapshot.app_transactions.values():
            # A txn without lastUpdated cannot be dated, so it is kept.
            if txn_horizon is not None and txn.last_updated is not None and txn.last_updated < now - txn_horizon:
                continue
            rows.append(codec.encode_action(txn))
        rows += [codec.encode_action(d) for d in snapshot.domains.values() if not d.removed]

        tombstones = snapshot.tombstones()
        if tombstones.num_rows:
            # A tombstone without a deletionTimestamp counts as deleted at 0, i.e. expired.
            horizon = now - props.DELETED_FILE_RETENTION.get(config)
            deleted_at = pc.fill_null(tombstones.column("deletion_timestamp"), 0)
            tombstones = tombstones.filter(pc.greater_equal(deleted_at, horizon))
        return cls(rows, snapshot.files(), tombstones, _AddEncoder(snapshot.protocol, snapshot.metadata))

    @property
    def num_add_files(self) -> int:
        return self.files.num_rows

    def file_batches(self, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The add rows, then the remove rows, in chunks of at most CHUNK_ROWS."""
        for batch in _regrouped(self.files):
            yield _row_batch(schema, batch.num_rows, add=self.add_encoder.encode(batch))
        for batch in _regrouped(self.tombstones):
            yield _row_batch(schema, batch.num_rows, remove=_encode_removes(batch))


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
    # Same layout, camelCase field names: a zero-copy view.
    return child.view(DV_LOG_TYPE) if column == "deletion_vector" else child


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
        write_struct = props.WRITE_STATS_AS_STRUCT.get(config)
        mapped = props.COLUMN_MAPPING_MODE.get(config) != "none"
        schema = metadata.schema if write_struct else None
        self.stats_type: pa.StructType | None = None
        self.partition_fields: list[tuple[str, pa.Field]] = []
        if schema is not None:
            self.stats_type = _stats_type(
                schema,
                metadata.partition_columns,
                config,
                mapped,
                tight_bounds=protocol.has_reader_feature("deletionVectors"),
            )
            by_name = {f.name: f for f in schema}
            for col in metadata.partition_columns:
                f = by_name.get(col)
                if f is None:
                    continue  # a partition column missing from the schema: the table is broken elsewhere
                key = _physical(f, mapped)
                self.partition_fields.append((key, pa.field(key, f.type)))
        fields = [f for f in ADD_LOG_TYPE if self.write_json or f.name != "stats"]
        if self.stats_type is not None:
            fields.append(pa.field("stats_parsed", self.stats_type))
        if self.partition_fields:
            fields.append(pa.field("partitionValues_parsed", pa.struct([f for _, f in self.partition_fields])))
        self.type = pa.struct(fields)

    def encode(self, batch: pa.RecordBatch) -> pa.StructArray:
        by_log_name = {_FILE_TO_LOG[name]: name for name in FILES_SCHEMA.names}
        children = []
        for f in self.type:
            if f.name == "stats_parsed":
                children.append(_parse_stats(batch.column("stats"), self.stats_type))  # type: ignore[arg-type]
            elif f.name == "partitionValues_parsed":
                children.append(_parse_partition_values(batch.column("partition_values"), self.partition_fields))
            else:
                children.append(_log_child(batch, by_log_name[f.name]))
        return pa.StructArray.from_arrays(children, fields=list(self.type))


def _physical(field: pa.Field, mapped: bool) -> str:
    if not mapped:
        return field.name
    return str(delta_field_metadata(field).get(_PHYSICAL_NAME, field.name))


def _is_variant(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and sorted(f.name for f in t) == ["metadata", "value"] and all(
        pa.types.is_binary(f.type) for f in t
    )


def _has_min_max(t: pa.DataType) -> bool:
    """Types writers keep min/max statistics for (delta-rs includes booleans; none binary or
    nested collections)."""
    return (
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
    )


def _column_path(text: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("`").lower() for part in text.split("."))


def _stats_type(
    schema: pa.Schema,
    partition_columns: Sequence[str],
    config: Any,
    mapped: bool,
    *,
    tight_bounds: bool,
) -> pa.StructType:
    """The ``stats_parsed`` struct: the columns data skipping collects stats for (the
    ``delta.dataSkippingStatsColumns``, else the first ``delta.dataSkippingNumIndexedCols``
    leaf columns, partition columns excluded), by physical name."""
    wanted_names = props.DATA_SKIPPING_STATS_COLUMNS.get(config)
    wanted = [_column_path(c) for c in wanted_names] if wanted_names is not None else None
    budget = [props.DATA_SKIPPING_NUM_INDEXED_COLS.get(config)]  # -1: every column

    def walk(fields: Iterable[pa.Field], parent: tuple[str, ...]) -> tuple[list[pa.Field], list[pa.Field]]:
        min_max: list[pa.Field] = []
        null_count: list[pa.Field] = []
        for f in fields:
            name = _physical(f, mapped)
            path = parent + (f.name.lower(),)
            if pa.types.is_struct(f.type) and not _is_variant(f.type):
                sub_min, sub_null = walk(f.type, path)
                if sub_min:
                    min_max.append(pa.field(name, pa.struct(sub_min)))
                if sub_null:
                    null_count.append(pa.field(name, pa.struct(sub_null)))
                continue
            if wanted is not None:
                if not any(path[: len(w)] == w or w[: len(path)] == path for w in wanted):
                    continue
            elif budget[0] >= 0:
                if budget[0] == 0:
                    continue
                budget[0] -= 1
            null_count.append(pa.field(name, pa.int64()))
            if _has_min_max(f.type):
                min_max.append(pa.field(name, f.type))
        return min_max, null_count

    partition = set(partition_columns)
    min_max, null_count = walk((f for f in schema if f.name not in partition), ())
    fields = [pa.field("numRecords", pa.int64())]
    if min_max:
        fields += [pa.field("minValues", pa.struct(min_max)), pa.field("maxValues", pa.struct(min_max))]
    if null_count:
        fields.append(pa.field("nullCount", pa.struct(null_count)))
    if tight_bounds:
        fields.append(pa.field("tightBounds", pa.bool_()))
    return pa.struct(fields)


def _json_read_type(t: pa.DataType) -> pa.DataType:
    """The type the JSON reader can produce for ``t``: dates are read as strings, then cast."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _json_read_type(f.type)) for f in t])
    if pa.types.is_date(t):
        return pa.string()
    return t


def _parse_stats(stats: pa.Array, target: pa.StructType) -> pa.Array:
    """All stats strings of a chunk parsed in one ``pyarrow.json`` call with an explicit schema.

    A chunk whose stats do not fit the schema (a NaN written as a string, a column whose type
    changed...) gets null ``stats_parsed``: readers then use the JSON ``stats``.
    """
    n = len(stats)
    missing = pc.or_kleene(pc.is_null(stats), pc.equal(stats, ""))
    filled = pc.if_else(missing, pa.scalar("{}"), stats)
    # A raw newline can only be whitespace between JSON tokens: make each object one line.
    if pc.any(pc.match_substring(filled, "\n")).as_py():
        filled = pc.replace_substring(filled, "\n", " ")
    lines = pc.binary_join_element_wise(filled, "", "\n")  # each value + "\n", one contiguous buffer
    lengths = pc.binary_length(lines)
    total, longest = pc.sum(lengths).as_py() or 0, pc.max(lengths).as_py() or 0
    read_schema = pa.schema([pa.field(f.name, _json_read_type(f.type)) for f in target])
    try:
        parsed = pa_json.read_json(
            pa.BufferReader(lines.buffers()[2][:total]),
            read_options=pa_json.ReadOptions(block_size=max(1 << 20, 2 * longest)),
            parse_options=pa_json.ParseOptions(explicit_schema=read_schema, unexpected_field_behavior="ignore"),
        )
        if parsed.num_rows != n:
            raise ValueError(f"{parsed.num_rows} stats objects for {n} files")
        struct = pa.StructArray.from_arrays(
            [parsed.column(i).combine_chunks() for i in range(parsed.num_columns)], fields=list(read_schema)
        ).cast(target)
    except (pa.ArrowException, ValueError) as e:
        logger.warning("stats of %d files do not parse as the table schema, leaving their stats_parsed null: %s", n, e)
        return pa.nulls(n, target)
    return pa.StructArray.from_arrays(struct.flatten(), fields=list(target), mask=missing)


def _parse_partition_value_strings(values: pa.Array, t: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(t):
        # Either "2021-01-01 00:00:00[.ffffff]" or ISO 8601 in UTC with a trailing Z.
        naive = pc.replace_substring_regex(values, "Z$", "").cast(pa.timestamp(t.unit))
        return naive.cast(t)
    if pa.types.is_binary(t):
        return values.cast(pa.binary())
    return values.cast(t)


def _parse_partition_values(values: pa.Array, fields: list[tuple[str, pa.Field]]) -> pa.StructArray:
    children = []
    for key, field in fields:
        raw = pc.map_lookup(values, pa.scalar(key), "first")
        raw = pc.if_else(pc.equal(raw, ""), pa.scalar(None, pa.string()), raw)  # "" means null
        try:
            children.append(_parse_partition_value_strings(raw, field.type))
        except pa.ArrowException as e:
            logger.warning("partition values of %s do not parse as %s, leaving them null: %s", key, field.type, e)
            children.append(pa.nulls(len(values), field.type))
    return pa.StructArray.from_arrays(children, fields=[f for _, f in fields])


# --- files -----------------------------------------------------------------------------------


def _parquet_writer(sink: Any, schema: pa.Schema) -> pq.ParquetWriter:
    return pq.ParquetWriter(
        sink,
        schema,
        compression="snappy",
        write_statistics=_parsed_leaf_paths(schema),
        use_dictionary=True,
        store_schema=False,
    )


def _parsed_leaf_paths(schema: pa.Schema) -> list[str]:
    """Parquet column paths of stats_parsed and partitionValues_parsed leaves: the only columns
    whose row-group statistics a reader can skip with (paths and stats strings are just cost)."""
    out: list[str] = []

    def walk(t: pa.DataType, prefix: str) -> None:
        if pa.types.is_struct(t):
            for f in t:
                walk(f.type, f"{prefix}.{f.name}")
        else:
            out.append(prefix)

    for field in schema:
        if field.name == "add":
            for f in field.type:
                if f.name in ("stats_parsed", "partitionValues_parsed"):
                    walk(f.type, f"add.{f.name}")
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
    """Stream ``head`` then ``batches`` into one Parquet file that appears at ``path`` whole."""
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
            written.append(path)
            sidecar_rows += _write_parquet(store, path, sidecar_schema, None, chunk)
            info = store.info(path)
            sidecars.append(Sidecar(path=name, size_in_bytes=info.size, modification_time=info.modification_time))

        top_schema = pa.schema(
            [
                ("checkpointMetadata", CHECKPOINT_METADATA_TYPE),
                ("txn", TXN_TYPE),
                ("metaData", METADATA_TYPE),
                ("protocol", PROTOCOL_TYPE),
                ("domainMetadata", DOMAIN_METADATA_TYPE),
                ("sidecar", SIDECAR_TYPE),
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
        store.put(top_path, buffer.getvalue())
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


def _existing(store: LogStore, version: int) -> CheckpointResult | None:
    """The complete checkpoint already written for ``version``, if any and readable."""
    files = list_log(store, version).complete_checkpoint(version)
    if not files:
        return None
    try:
        return _describe(store, version, files)
    except CorruptCheckpointError as e:
        logger.warning("existing checkpoint %s is unreadable, writing a new one: %s", files[0].path, e)
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
        path = sidecar.path if "://" in sidecar.path else f"{SIDECAR_DIR}/{sidecar.path}"
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
    except TxnLogError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise CorruptCheckpointError(
            f"checkpoint file {path} (version {version}) is unreadable: {e}", path=path, version=version
        ) from e


def _advance_hint(store: LogStore, result: CheckpointResult) -> None:
    """Point ``_last_checkpoint`` at ``result`` unless it already names a newer checkpoint."""
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


__all__ = ["CheckpointResult", "write_checkpoint", "CHUNK_ROWS"]
