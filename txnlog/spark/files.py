"""The live file list of a table, reconstructed on Spark executors.

For tables whose file list does not fit the driver: the driver only lists ``_delta_log`` (the
log segment: which checkpoint files and which commits) with txnlog's own listing, and finds the
protocol in force (the checkpoint's protocol row, and a byte search of the commits for
protocol lines) to refuse a table it cannot read before any job runs; executors
read the checkpoint parts and V2 sidecars with ``spark.read.parquet`` and the commits as text,
and reconcile them with the protocol's rules as DataFrame operations:

- a logical file is keyed by (path, deletion vector unique id);
- its latest action wins, by version, then by position within the commit;
- a file whose latest action is a remove is not live (tombstones are dropped).

The columns are those of :meth:`txnlog.Snapshot.files` (``path``, ``partition_values``,
``size``, ``modification_time``, ``data_change``, ``stats``, ``tags``, ``deletion_vector``,
``base_row_id``, ``default_row_commit_version``, ``clustering_provider``), as the log holds
them: relative paths are not resolved here (:meth:`txnlog.Snapshot.locate` does that safely).

Example::

    import txnlog.spark

    df = txnlog.spark.files(spark, "s3a://bucket/table")
    df.groupBy("partition_values").count().show()
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow.parquet as pq

from txnlog.errors import CorruptCheckpointError, InvalidArgumentError, StorageError, TxnLogError
from txnlog.log import (
    CheckpointFile,
    LogSegment,
    Protocol,
    Sidecar,
    build_segment,
    check_readable,
    checkpoint_sources,
    decode_action,
    parse_lines,
    sidecar_path,
)
from txnlog.storage import LogStore, open_store

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# Spark DDL of what is read from the log (camelCase, as written).
_DV = (
    "struct<storageType: string, pathOrInlineDv: string, offset: int, sizeInBytes: int, "
    "cardinality: bigint, maxRowIndex: bigint>"
)
_ADD_FIELDS: list[tuple[str, str, str]] = [
    # (log name, output column, Spark type)
    ("path", "path", "string"),
    ("partitionValues", "partition_values", "map<string, string>"),
    ("size", "size", "bigint"),
    ("modificationTime", "modification_time", "bigint"),
    ("dataChange", "data_change", "boolean"),
    ("stats", "stats", "string"),
    ("tags", "tags", "map<string, string>"),
    ("deletionVector", "deletion_vector", _DV),
    ("baseRowId", "base_row_id", "bigint"),
    ("defaultRowCommitVersion", "default_row_commit_version", "bigint"),
    ("clusteringProvider", "clustering_provider", "string"),
]
_DV_COLUMNS = [
    ("storageType", "storage_type"),
    ("pathOrInlineDv", "path_or_inline_dv"),
    ("offset", "offset"),
    ("sizeInBytes", "size_in_bytes"),
    ("cardinality", "cardinality"),
    ("maxRowIndex", "max_row_index"),
]
_ADD_DDL = "struct<" + ", ".join(f"{name}: {t}" for name, _, t in _ADD_FIELDS) + ">"
_REMOVE_DDL = f"struct<path: string, deletionVector: {_DV}>"
_PROTOCOL_DDL = "struct<minReaderVersion: int, minWriterVersion: int, readerFeatures: array<string>, writerFeatures: array<string>>"
#: One line of a commit: only the actions this reads (the JSON reader ignores the others).
COMMIT_LINE_DDL = f"struct<add: {_ADD_DDL}, remove: {_REMOVE_DDL}, protocol: {_PROTOCOL_DDL}>"


def files(
    spark: SparkSession, uri: str, version: int | None = None, storage_options: Mapping[str, Any] | None = None
) -> DataFrame:
    """The live files of the table at ``uri`` at ``version`` (default: the latest), computed by
    Spark. ``storage_options`` serve the driver's listing of ``_delta_log``; executors read
    with the session's own Hadoop configuration, so it must grant them access too (``s3://``
    URIs are read as ``s3a://``).

    Raises TableNotFoundError / VersionNotFoundError / VersionGapError as ``Table.snapshot``
    does, UnsupportedFeatureError for a table this version cannot read, and
    CorruptCheckpointError naming an unreadable checkpoint file. A malformed commit fails the
    Spark job that evaluates the DataFrame (Spark's JSON reader in FAILFAST mode).
    """
    from pyspark.sql import functions as F  # optional dependency: pyspark (txnlog[spark])

    store = open_store(uri, storage_options)
    segment = build_segment(store, version)
    where = f"{store.root_uri} at version {segment.version}"
    protocol, parquet_parts, json_parts = _checkpoint_files(store, segment)

    pieces: list[DataFrame] = []
    if parquet_parts:
        pieces += _checkpoint_actions(spark, store, segment, parquet_parts)
    protocol = _latest_protocol(store, [c.path for c in segment.commits], protocol)
    commit_files = json_parts + [c.path for c in segment.commits]
    if commit_files:
        pieces += _file_actions(_commit_lines(spark, store, commit_files))
    if protocol is None:
        raise CorruptCheckpointError(f"{where}: no protocol action in the log segment", version=segment.version)
    check_readable(protocol, f"table {store.root_uri} at version {segment.version}")

    if not pieces:
        return spark.createDataFrame([], _output_ddl())
    actions = pieces[0]
    for piece in pieces[1:]:
        actions = actions.unionByName(piece)
    dv = F.col("file.deletion_vector")
    dv_id = F.when(
        dv.isNotNull(),
        F.concat(
            dv["storage_type"],
            dv["path_or_inline_dv"],
            F.when(dv["offset"].isNull(), F.lit("")).otherwise(F.concat(F.lit("@"), dv["offset"].cast("string"))),
        ),
    )
    latest_action = (
        actions.withColumn("dv_id", dv_id)
        .groupBy(F.col("file.path").alias("key_path"), "dv_id")
        .agg(F.max_by(F.struct("is_add", "file"), F.struct("version", "line")).alias("last"))
    )
    return latest_action.where(F.col("last.is_add")).select("last.file.*")


_PROTOCOL_LINE = re.compile(rb'^[ \t]*\{[ \t]*"protocol"[ \t]*:.*$', re.MULTILINE)


def _latest_protocol(store: LogStore, commits: list[str], protocol: Protocol | None) -> Protocol | None:
    """The protocol in force after ``commits``: found on the driver by a byte search of each
    commit in turn (one commit in memory at a time, no JSON parsed but the protocol lines),
    so refusing an unreadable table needs no Spark job."""
    for path in commits:
        data = store.read(path)
        version = int(path.rsplit("/", 1)[-1][:20])
        for match in _PROTOCOL_LINE.finditer(data):
            (obj,) = parse_lines(match.group(0), path=path, version=version)
            action = decode_action("protocol", obj["protocol"], path=path, version=version)
            if isinstance(action, Protocol):
                protocol = action
    return protocol


def _output_dv_ddl() -> str:
    return "struct<" + ", ".join(f"{col}: {t}" for (_, col), t in zip(_DV_COLUMNS, _DV_TYPES)) + ">"


def _output_ddl() -> str:
    return ", ".join(f"{col} {_output_dv_ddl() if name == 'deletionVector' else t}" for name, col, t in _ADD_FIELDS)


def _reader(spark: SparkSession, store: LogStore) -> Any:
    """``spark.read``; for local tables through Hadoop's raw local filesystem (reader options
    reach the Hadoop configuration of this read only): the checksumming one trusts stale
    ``.*.crc`` side files that tools other than Hadoop leave behind, and fails on them."""
    reader = spark.read
    if urlparse(store.root_uri).scheme == "file":
        reader = reader.option("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem").option("fs.file.impl.disable.cache", "true")
    return reader


def _spark_uri(store: LogStore, path: str) -> str:
    """The URI executors read ``path`` (relative to the table root) at."""
    uri = store.uri_of(path)
    scheme = urlparse(uri).scheme
    if scheme == "memory":
        raise InvalidArgumentError(f"{store.root_uri}: Spark cannot read memory:// tables")
    return "s3a" + uri[len("s3") :] if scheme == "s3" else uri


def _checkpoint_files(store: LogStore, segment: LogSegment) -> tuple[Protocol | None, list[str], list[str]]:
    """The checkpoint's protocol, its Parquet files holding file actions (parts, sidecars),
    and a V2 top-level JSON file holding inline ones."""
    if not segment.checkpoint:
        return None, [], []
    sources = checkpoint_sources(store, segment.checkpoint)
    protocol: Protocol | None = None
    if sources is not None:
        protocol = next((a for a in sources.non_file_actions if isinstance(a, Protocol)), None)
        return protocol, [part.path for part in sources.file_parts], []
    # A V2 checkpoint whose top-level file is JSON: it is small (sidecars hold the files).
    top = segment.checkpoint[0]
    try:
        lines = parse_lines(store.read(top.path), path=top.path, version=top.version)
    except StorageError as e:
        raise CorruptCheckpointError(f"checkpoint {top.path} is unreadable: {e}", path=top.path, version=top.version) from e
    sidecars: list[str] = []
    for obj in lines:
        for kind, body in obj.items():
            if kind in ("protocol", "sidecar"):
                action = decode_action(kind, body, path=top.path, version=top.version)
                if isinstance(action, Protocol):
                    protocol = action
                elif isinstance(action, Sidecar):
                    sidecars.append(sidecar_path(store, action, top.version))
    return protocol, sidecars, [top.path]


_DV_TYPES = ["string", "string", "int", "int", "bigint", "bigint"]


def _file_struct(source: Column, present: set[str], stats_parsed: bool, dv_present: set[str] | None = None) -> Column:
    """A log-layout add struct as the output layout: fields cast, absent ones null
    (``dv_present``: the deletionVector fields there, when not all of them are)."""
    from pyspark.sql import functions as F  # optional dependency: pyspark (txnlog[spark])

    columns = []
    for name, col, t in _ADD_FIELDS:
        if name == "stats" and stats_parsed:
            # writeStatsAsJson=false: the stats live only in stats_parsed.
            json = source["stats"] if "stats" in present else F.lit(None).cast("string")
            value = F.coalesce(json, F.to_json(source["stats_parsed"]))
        elif name not in present:
            value = F.lit(None).cast(t)
        elif name == "deletionVector":
            dv = source[name]
            fields = [
                (dv[log].cast(dv_type) if dv_present is None or log in dv_present else F.lit(None).cast(dv_type)).alias(out)
                for (log, out), dv_type in zip(_DV_COLUMNS, _DV_TYPES)
            ]
            value = F.when(dv.isNull(), F.lit(None)).otherwise(F.struct(*fields))
        else:
            value = source[name].cast(t)
        if name == "deletionVector" and name not in present:
            value = F.lit(None).cast(_output_dv_ddl())
        columns.append(value.alias(col))
    return F.struct(*columns)


def _dv_fields(struct_type: Any) -> set[str]:
    """The deletionVector fields a checkpoint's add or remove struct has (older writers lack
    maxRowIndex, for one)."""
    names = struct_type.fieldNames()
    if "deletionVector" not in names:
        return set()
    return set(struct_type["deletionVector"].dataType.fieldNames())


def _checkpoint_actions(spark: SparkSession, store: LogStore, segment: LogSegment, paths: list[str]) -> list[DataFrame]:
    from pyspark.sql import functions as F  # optional dependency: pyspark (txnlog[spark])

    version = segment.checkpoint[0].version
    # Only files that hold add or remove columns (a V2 top-level Parquet file holds neither).
    by_kind: dict[str, list[str]] = {}
    for path in paths:
        part = CheckpointFile(path, version)
        try:
            names = set(pq.read_schema(store.open_input(path)).names)
        except TxnLogError as e:
            raise CorruptCheckpointError(f"checkpoint file {path} (version {version}) is unreadable: {e}", path=path, version=version) from e
        except Exception as e:  # pyarrow's errors for a file that is not Parquet
            raise CorruptCheckpointError(f"checkpoint file {path} (version {version}) is unreadable: {e}", path=path, version=version) from e
        key = ",".join(sorted(names & {"add", "remove"}))
        if key:
            by_kind.setdefault(key, []).append(_spark_uri(store, part.path))
    out = []
    for key, uris in by_kind.items():
        df: DataFrame = _reader(spark, store).parquet(*uris)
        kinds = key.split(",")
        if "add" in kinds:
            add_type = df.schema["add"].dataType
            present = set(add_type.fieldNames())  # type: ignore[attr-defined]
            adds = df.where(F.col("add").isNotNull()).select(
                F.lit(True).alias("is_add"),
                _file_struct(F.col("add"), present, "stats_parsed" in present, _dv_fields(add_type)).alias("file"),
            )
            out.append(adds)
        if "remove" in kinds:
            remove_type = df.schema["remove"].dataType
            present = set(remove_type.fieldNames()) & {"path", "deletionVector"}  # type: ignore[attr-defined]
            removes = df.where(F.col("remove").isNotNull()).select(
                F.lit(False).alias("is_add"),
                _file_struct(F.col("remove"), present, False, _dv_fields(remove_type)).alias("file"),
            )
            out.append(removes)
    # One checkpoint holds one action per logical file: order among them does not matter.
    return [df.select(F.lit(version).cast("bigint").alias("version"), F.lit(-1).cast("bigint").alias("line"), "is_add", "file") for df in out]


def _commit_lines(spark: SparkSession, store: LogStore, paths: list[str]) -> DataFrame:
    """Every line of the commits (and of a V2 JSON checkpoint), parsed with an explicit
    schema: (version, line, a). The version is the file name's 20-digit prefix."""
    from pyspark.sql import functions as F  # optional dependency: pyspark (txnlog[spark])

    # Whole files, so each line's position within its commit is known.
    raw: DataFrame = _reader(spark, store).text([_spark_uri(store, p) for p in paths], wholetext=True)
    lines = raw.select(
        F.regexp_extract(F.col("_metadata.file_name"), r"^(\d{20})\.", 1).cast("bigint").alias("version"),
        F.posexplode(F.split("value", "\n")).alias("line", "text"),
    ).where(F.length(F.trim("text")) > 0)
    return lines.select(
        "version",
        F.col("line").cast("bigint").alias("line"),
        F.from_json("text", COMMIT_LINE_DDL, {"mode": "FAILFAST"}).alias("a"),
    )


def _file_actions(lines: DataFrame) -> list[DataFrame]:
    from pyspark.sql import functions as F  # optional dependency: pyspark (txnlog[spark])

    adds = lines.where(F.col("a.add").isNotNull()).select(
        "version", "line", F.lit(True).alias("is_add"), _file_struct(F.col("a.add"), {n for n, _, _ in _ADD_FIELDS}, False).alias("file")
    )
    removes = lines.where(F.col("a.remove").isNotNull()).select(
        "version", "line", F.lit(False).alias("is_add"), _file_struct(F.col("a.remove"), {"path", "deletionVector"}, False).alias("file")
    )
    return [adds, removes]


__all__ = ["files", "COMMIT_LINE_DDL"]
