"""The options of ``format("txnlog")``, parsed once for the reader and the writer.

Spark hands a Python data source its options in a case-insensitive mapping whose keys arrive
lower-cased, values as strings. Every option is listed here: an unknown one is refused (a
misspelt ``replaceWhere`` must not turn into a full overwrite), except the two open families:

- ``storage.<key>``: a storage option for the table's store (``storage.AWS_ENDPOINT_URL``),
  the same keys ``Table(uri, storage_options)`` takes (matched case-insensitively there);
- ``delta.<property>`` / ``txnlog.<property>``: a table property of a table the write creates.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from txnlog.errors import InvalidArgumentError
from txnlog.properties import FAMILIES, PROPERTIES, PROPERTY_PREFIXES

STORAGE_PREFIX = "storage."

READ_OPTIONS = ("versionAsOf", "timestampAsOf", "filterPushdown", "maxPartitionBytes", "openCostInBytes", "minPartitions")
#: A batch read of the change data feed (``spark.read``), as delta-spark users write it.
CHANGE_FEED_READ_OPTIONS = ("readChangeFeed", "startingVersion", "endingVersion", "startingTimestamp", "endingTimestamp")
WRITE_OPTIONS = ("replaceWhere", "mergeSchema", "overwriteSchema", "txnAppId", "txnVersion", "partitionBy", "saveMode", "targetFileSize")
#: ``spark.readStream``'s own (``versionAsOf``/``timestampAsOf`` do not apply to a stream).
STREAM_READ_OPTIONS = ("startingVersion", "startingTimestamp", "maxFilesPerTrigger", "maxBytesPerTrigger", "skipChangeCommits",
                       "readChangeFeed")
#: ``df.writeStream``'s: Spark passes the query's checkpoint location, where its id is kept.
STREAM_WRITE_OPTIONS = ("checkpointLocation", "queryName")
#: Spark's own: the URI given to ``load``/``save``.
_PATH = "path"

# What Spark's file sources read by default: 128 MiB per task, a file costing 4 MiB to open.
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
DEFAULT_OPEN_COST_BYTES = 4 * 1024 * 1024


def _property_key(lowered: str) -> str:
    """A table property's key as Delta spells it (Spark lower-cases option keys)."""
    for key in PROPERTIES:
        if key.lower() == lowered:
            return key
    for family in FAMILIES:
        if lowered.startswith(family.prefix.lower()):
            return family.prefix + lowered[len(family.prefix) :]
    return lowered  # unknown: refused by name when the table is created


def _int(options: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidArgumentError(f"option {name} must be at least {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return False
    if raw.strip().lower() not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} must be true or false, got {raw!r}")
    return raw.strip().lower() == "true"


def _column_list(raw: str) -> list[str]:
    """``partitionBy``: a JSON array of names (for names holding a comma), or names separated by commas."""
    text = raw.strip()
    if text.startswith("["):
        try:
            names = orjson.loads(text)
        except orjson.JSONDecodeError:
            names = None
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise InvalidArgumentError(f"option partitionBy must be a JSON array of column names or a comma-separated list, got {raw!r}")
        return names
    return [n.strip() for n in text.split(",") if n.strip()]


def _check_change_feed_read(
    lowered: Mapping[str, str], uri: str, read_change_feed: bool, starting_latest: bool, version: int | None, timestamp: str | None
) -> None:
    """A batch read's change feed options: the range bounds only with ``readChangeFeed``, which
    needs a start and takes no time travel (its range says which versions it reads)."""
    bounds = [n for n in CHANGE_FEED_READ_OPTIONS[1:] if n.lower() in lowered]
    if not read_change_feed:
        if bounds:
            raise InvalidArgumentError(
                f"option {bounds[0]} of spark.read.format(\"txnlog\") applies with readChangeFeed=true (or to spark.readStream) (table {uri})"
            )
        return
    if "startingversion" not in lowered and "startingtimestamp" not in lowered:
        raise InvalidArgumentError(f"a batch read of the change data feed needs startingVersion or startingTimestamp (table {uri})")
    if starting_latest:
        raise InvalidArgumentError(f"startingVersion=latest applies to spark.readStream; a batch read of the change feed needs a version (table {uri})")
    if version is not None or timestamp is not None:
        raise InvalidArgumentError(f"versionAsOf/timestampAsOf do not apply with readChangeFeed: the range says which versions are read (table {uri})")
    if "filterpushdown" in lowered:
        raise InvalidArgumentError(f"filterPushdown does not apply with readChangeFeed (table {uri})")


@dataclass(frozen=True)
class SourceOptions:
    """What ``format("txnlog")`` was asked to do, parsed and checked."""

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict)
    properties: Mapping[str, str] = field(default_factory=dict)
    version: int | None = None
    timestamp: str | None = None
    filter_pushdown: bool = False
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES
    min_partitions: int = 1
    replace_where: str | None = None
    merge_schema: bool = False
    overwrite_schema: bool = False
    app_id: str | None = None
    app_version: int | None = None
    partition_by: list[str] | None = None
    save_mode: str | None = None
    target_file_size: int | None = None
    # streams
    starting_version: int | None = None
    starting_latest: bool = False  # startingVersion=latest: only commits after the query starts
    starting_timestamp: str | None = None
    max_files_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    skip_change_commits: bool = False
    read_change_feed: bool = False
    ending_version: int | None = None  # a batch read of the change feed
    ending_timestamp: str | None = None
    checkpoint_location: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, writing: bool, streaming: bool = False) -> SourceOptions:
        """``streaming``: the options of ``readStream``/``writeStream`` rather than ``read``/``write``."""
        lowered = {str(k).lower(): str(v) for k, v in options.items()}
        uri = lowered.get(_PATH)
        if not uri:
            verb = ("start(uri)" if streaming else "save(uri)") if writing else "load(uri)"
            raise InvalidArgumentError(f'format("txnlog") needs the table URI: {verb}')
        accepted_names = (WRITE_OPTIONS if writing else READ_OPTIONS) + ((STREAM_WRITE_OPTIONS if writing else STREAM_READ_OPTIONS) if streaming else ())
        if not writing and not streaming:
            accepted_names += CHANGE_FEED_READ_OPTIONS
        if streaming and not writing:  # a stream has no time travel
            accepted_names = tuple(n for n in accepted_names if n not in ("versionAsOf", "timestampAsOf"))
        known = {n.lower() for n in accepted_names} | {_PATH}
        other = {n.lower() for n in (READ_OPTIONS if writing else WRITE_OPTIONS)}
        storage: dict[str, str] = {}
        properties: dict[str, str] = {}
        for key, value in lowered.items():
            if key in known:
                continue
            if key.startswith(STORAGE_PREFIX) and len(key) > len(STORAGE_PREFIX):
                storage[key[len(STORAGE_PREFIX) :]] = value
            elif writing and key.startswith(PROPERTY_PREFIXES):
                properties[_property_key(key)] = value
            elif key in other:
                kind = "reads" if writing else "writes"
                raise InvalidArgumentError(f'option {key!r} of format("txnlog") applies to {kind} only (table {uri})')
            else:
                accepted = ", ".join((*accepted_names, "storage.<key>") + (tuple(f"{p}<property>" for p in PROPERTY_PREFIXES) if writing else ()))
                raise InvalidArgumentError(f'unknown option {key!r} of format("txnlog") for table {uri} (accepted: {accepted})')
        version = _int(lowered, "versionAsOf", minimum=0)
        timestamp = lowered.get("timestampasof")
        if version is not None and timestamp is not None:
            raise InvalidArgumentError(f"pass versionAsOf or timestampAsOf, not both (table {uri})")
        app_id = lowered.get("txnappid")
        app_version = _int(lowered, "txnVersion", minimum=0)
        if streaming and writing and app_version is not None:
            raise InvalidArgumentError(f"a stream's writes are versioned by their batch id: pass txnAppId without txnVersion (table {uri})")
        if (app_id is None) != (app_version is None) and not (streaming and writing):
            raise InvalidArgumentError(f"options txnAppId and txnVersion go together (table {uri})")
        save_mode = lowered.get("savemode")
        if save_mode is not None:
            save_mode = {"errorifexists": "error"}.get(save_mode.strip().lower(), save_mode.strip().lower())
            if save_mode not in ("error", "ignore"):
                raise InvalidArgumentError(f"option saveMode must be 'error' or 'ignore', got {lowered['savemode']!r} (table {uri})")
        partition_by = lowered.get("partitionby")
        starting = lowered.get("startingversion")
        starting_latest = starting is not None and starting.strip().lower() == "latest"
        starting_version = None if starting_latest else _int(lowered, "startingVersion", minimum=0)
        starting_timestamp = lowered.get("startingtimestamp")
        if starting is not None and starting_timestamp is not None:
            raise InvalidArgumentError(f"pass startingVersion or startingTimestamp, not both (table {uri})")
        ending_version = _int(lowered, "endingVersion", minimum=0)
        ending_timestamp = lowered.get("endingtimestamp")
        if ending_version is not None and ending_timestamp is not None:
            raise InvalidArgumentError(f"pass endingVersion or endingTimestamp, not both (table {uri})")
        read_change_feed = _bool(lowered, "readChangeFeed")
        if not writing and not streaming:
            _check_change_feed_read(lowered, uri, read_change_feed, starting_latest, version, timestamp)
        return cls(
            uri=uri,
            storage_options=storage,
            properties=properties,
            version=version,
            timestamp=timestamp,
            filter_pushdown=_bool(lowered, "filterPushdown"),
            max_partition_bytes=_int(lowered, "maxPartitionBytes", minimum=1) or DEFAULT_MAX_PARTITION_BYTES,
            open_cost_bytes=_int(lowered, "openCostInBytes", minimum=0) or DEFAULT_OPEN_COST_BYTES,
            # The planner runs on the driver's machine: its cores stand in for the cluster's.
            min_partitions=_int(lowered, "minPartitions", minimum=1) or (os.cpu_count() or 1),
            replace_where=lowered.get("replacewhere"),
            merge_schema=_bool(lowered, "mergeSchema"),
            overwrite_schema=_bool(lowered, "overwriteSchema"),
            app_id=app_id,
            app_version=app_version,
            partition_by=_column_list(partition_by) if partition_by is not None else None,
            save_mode=save_mode,
            target_file_size=_int(lowered, "targetFileSize", minimum=1),
            starting_version=starting_version,
            starting_latest=starting_latest,
            starting_timestamp=starting_timestamp,
            max_files_per_trigger=_int(lowered, "maxFilesPerTrigger", minimum=1),
            max_bytes_per_trigger=_int(lowered, "maxBytesPerTrigger", minimum=1),
            skip_change_commits=_bool(lowered, "skipChangeCommits"),
            ending_version=ending_version,
            ending_timestamp=ending_timestamp,
            read_change_feed=read_change_feed,
            checkpoint_location=lowered.get("checkpointlocation"),
        )


__all__ = [
    "CHANGE_FEED_READ_OPTIONS",
    "DEFAULT_MAX_PARTITION_BYTES",
    "DEFAULT_OPEN_COST_BYTES",
    "READ_OPTIONS",
    "STORAGE_PREFIX",
    "STREAM_READ_OPTIONS",
    "STREAM_WRITE_OPTIONS",
    "WRITE_OPTIONS",
    "SourceOptions",
]
