"""Table properties: one registry with each key's type, default and meaning.

Nothing else in txnlog parses ``metaData.configuration`` strings or spells a ``delta.`` or
``txnlog.`` key. Reading goes through :meth:`TableProperty.get`, which normalises values
(booleans and enums case-insensitively, as delta-spark does). New metadata goes through
:func:`normalize`, which refuses unknown ``delta.*`` and ``txnlog.*`` keys, naming the nearest
known one. Tables written by others keep whatever keys they carry: reading never refuses one.

Each property is either *acted on* by txnlog or *carried, not enforced* (kept in the metadata for
other engines). docs/properties.md is generated from this module (``python -m txnlog.properties``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidTablePropertyError

T = TypeVar("T")

_INTERVAL = re.compile(
    r"^\s*(?:interval\s+)?(\d+)\s*(millisecond|second|minute|hour|day|week)s?\s*$", re.IGNORECASE
)
_UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}

#: The namespaces whose keys must be known to be written.
CHECKED_NAMESPACES = ("delta.", "txnlog.")


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected true or false, got {text!r}")


def parse_interval_ms(text: str) -> int:
    """Delta's ``interval 7 days`` style durations, in milliseconds."""
    m = _INTERVAL.match(text)
    if not m:
        raise ValueError(f"expected a duration like 'interval 7 days', got {text!r}")
    return int(m.group(1)) * _UNIT_MS[m.group(2).lower()]


def _optional_interval_ms(text: str) -> int | None:
    return parse_interval_ms(text) if text else None


def _optional_int(text: str) -> int | None:
    return int(text) if text.strip() else None


def _ratio(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a ratio between 0 and 1, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"expected an integer >= 0, got {text!r}")
    return value


def _indexed_cols(text: str) -> int:
    value = int(text)
    if value < -1:
        raise ValueError(f"expected -1 or more, got {text!r}")
    return value


def _column_list(text: str) -> tuple[str, ...] | None:
    return tuple(c.strip() for c in text.split(",") if c.strip()) if text else None


def _text(text: str) -> str:
    return text


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        for option in options:
            if text.strip().lower() == option.lower():
                return option
        raise ValueError(f"expected one of {list(options)}, got {text!r}")

    return parse


@dataclass(frozen=True)
class TableProperty(Generic[T]):
    """One table property: ``parse`` turns the stored text into a value (raising ValueError);
    ``enforced`` is False for properties txnlog carries for other engines but does not act on."""

    key: str
    parse: Callable[[str], T]
    default: str
    doc: str
    enforced: bool = True

    def raw(self, configuration: Mapping[str, str]) -> str | None:
        """The stored text, found by exact key or, failing that, case-insensitively."""
        value = configuration.get(self.key)
        if value is not None:
            return value
        lowered = self.key.lower()
        return next((v for k, v in configuration.items() if k.lower() == lowered), None)

    def get(self, configuration: Mapping[str, str]) -> T:
        raw = self.raw(configuration)
        return self._parse(self.default if raw is None else raw)

    def is_set(self, configuration: Mapping[str, str]) -> bool:
        return self.raw(configuration) is not None

    def _parse(self, raw: str) -> T:
        try:
            return self.parse(raw)
        except (TypeError, ValueError) as e:
            raise InvalidTablePropertyError(f"table property {self.key}={raw!r} is invalid: {e}", key=self.key) from None

    def canonical(self, raw: str) -> str:
        """``raw`` validated, and written the canonical way when it is a boolean or a choice."""
        value = self._parse(raw)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str) and value.lower() == raw.strip().lower():
            return value
        return raw


@dataclass(frozen=True)
class PropertyFamily:
    """Keys sharing a prefix, one per name: ``delta.constraints.<name>``, ``delta.feature.<name>``."""

    prefix: str
    doc: str
    enforced: bool = True

    def items(self, configuration: Mapping[str, str]) -> Iterator[tuple[str, str]]:
        """(name after the prefix, value) for every key of the family."""
        lowered = self.prefix.lower()
        for key, value in configuration.items():
            if key.lower().startswith(lowered):
                yield key[len(self.prefix) :], value

    def key(self, name: str) -> str:
        return self.prefix + name


def _p(key: str, parse: Callable[[str], T], default: str, doc: str, *, enforced: bool = True) -> TableProperty[T]:
    return TableProperty(key, parse, default, doc, enforced)


# --- acted on by txnlog ----------------------------------------------------------------------

APPEND_ONLY = _p("delta.appendOnly", parse_bool, "false", "Refuse commits that remove or change data.")
CHECKPOINT_INTERVAL = _p("delta.checkpointInterval", _positive_int, "10", "Write a checkpoint after every this many commits.")
CHECKPOINT_POLICY = _p(
    "delta.checkpointPolicy", _choice("classic", "v2"), "classic", "Checkpoint layout: classic or V2 (adds the v2Checkpoint feature)."
)
WRITE_STATS_AS_JSON = _p("delta.checkpoint.writeStatsAsJson", parse_bool, "true", "Checkpoints keep add.stats as a JSON string.")
WRITE_STATS_AS_STRUCT = _p(
    "delta.checkpoint.writeStatsAsStruct",
    parse_bool,
    "false",
    "Checkpoints also keep stats_parsed and partitionValues_parsed as typed structs.",
)
LOG_RETENTION = _p(
    "delta.logRetentionDuration", parse_interval_ms, "interval 30 days", "How long log entries are kept.", enforced=False
)
DELETED_FILE_RETENTION = _p(
    "delta.deletedFileRetentionDuration",
    parse_interval_ms,
    "interval 7 days",
    "How long tombstones are kept in checkpoints, and the horizon VACUUM respects.",
)
SET_TRANSACTION_RETENTION = _p(
    "delta.setTransactionRetentionDuration",
    _optional_interval_ms,
    "",
    "Drop app transaction ids older than this from checkpoints (unset: keep them forever).",
)
ENABLE_IN_COMMIT_TIMESTAMPS = _p(
    "delta.enableInCommitTimestamps", parse_bool, "false", "Commits carry a monotonic commitInfo.inCommitTimestamp (adds inCommitTimestamp)."
)
ICT_ENABLEMENT_VERSION = _p(
    "delta.inCommitTimestampEnablementVersion", _optional_int, "", "First version whose commits carry in-commit timestamps."
)
ICT_ENABLEMENT_TIMESTAMP = _p(
    "delta.inCommitTimestampEnablementTimestamp", _optional_int, "", "In-commit timestamp of that first version."
)
DATA_SKIPPING_NUM_INDEXED_COLS = _p(
    "delta.dataSkippingNumIndexedCols",
    _indexed_cols,
    "32",
    "Collect min/max/nullCount stats for the first this many leaf columns (-1: all).",
)
DATA_SKIPPING_STATS_COLUMNS = _p(
    "delta.dataSkippingStatsColumns",
    _column_list,
    "",
    "Comma-separated columns to collect stats for (backticks quote a name); overrides dataSkippingNumIndexedCols.",
)
ISOLATION_LEVEL = _p(
    "delta.isolationLevel",
    _choice("Serializable", "WriteSerializable", "SnapshotIsolation"),
    "Serializable",
    "Default isolation level of transactions on this table.",
)
COLUMN_MAPPING_MODE = _p(
    "delta.columnMapping.mode",
    _choice("none", "name", "id"),
    "none",
    "How data file columns map to table columns (name or id adds the columnMapping feature).",
)
COLUMN_MAPPING_MAX_ID = _p(
    "delta.columnMapping.maxColumnId", _non_negative_int, "0", "Highest column id assigned under column mapping."
)
ENABLE_CHANGE_DATA_FEED = _p(
    "delta.enableChangeDataFeed", parse_bool, "false", "Writers record change data for updates and deletes (adds changeDataFeed)."
)
ENABLE_DELETION_VECTORS = _p(
    "delta.enableDeletionVectors", parse_bool, "false", "Deletes may mark rows in deletion vectors (adds deletionVectors)."
)
TARGET_FILE_SIZE = _p("delta.targetFileSize", _positive_int, "134217728", "Target size in bytes of data files written.")
MIN_READER_VERSION = _p("delta.minReaderVersion", _positive_int, "1", "Ask for at least this reader version (legacy protocols).")
MIN_WRITER_VERSION = _p("delta.minWriterVersion", _positive_int, "2", "Ask for at least this writer version (legacy protocols).")
ENABLE_ROW_TRACKING = _p(
    "delta.enableRowTracking",
    parse_bool,
    "false",
    "Stable row ids and row commit versions (adds rowTracking and domainMetadata; turning it on later backfills row ids).",
)
ROW_ID_COLUMN = _p(
    "delta.rowTracking.materializedRowIdColumnName", _text, "", "Hidden data-file column of preserved row ids (assigned with rowTracking)."
)
ROW_COMMIT_VERSION_COLUMN = _p(
    "delta.rowTracking.materializedRowCommitVersionColumnName",
    _text,
    "",
    "Hidden data-file column of preserved row commit versions (assigned with rowTracking).",
)
ROW_TRACKING_SUSPENDED = _p(
    "delta.rowTrackingSuspended", parse_bool, "false", "Writers stop assigning row ids (not allowed with delta.enableRowTracking=true)."
)

CONSTRAINTS = PropertyFamily("delta.constraints.", "CHECK constraints: `delta.constraints.<name>` = a SQL expression every written row must satisfy.")
FEATURES = PropertyFamily("delta.feature.", "`delta.feature.<name>` = `supported` adds the table feature to the protocol.")

# --- carried, not enforced: keys real tables hold that other engines act on -------------------

CHECKPOINT_RETENTION = _p(
    "delta.checkpointRetentionDuration", parse_interval_ms, "interval 2 days", "How long old checkpoints are kept.", enforced=False
)
RANDOMIZE_FILE_PREFIXES = _p(
    "delta.randomizeFilePrefixes", parse_bool, "false", "Random prefixes instead of partition directories.", enforced=False
)
RANDOM_PREFIX_LENGTH = _p("delta.randomPrefixLength", _positive_int, "2", "Length of those random prefixes.", enforced=False)
SYMLINK_MANIFEST = _p(
    "delta.compatibility.symlinkFormatManifest.enabled", parse_bool, "false", "Keep a symlink manifest for Presto/Athena.", enforced=False
)
AUTO_OPTIMIZE_WRITE = _p("delta.autoOptimize.optimizeWrite", parse_bool, "false", "Databricks optimized writes.", enforced=False)
AUTO_OPTIMIZE_COMPACT = _p("delta.autoOptimize.autoCompact", _text, "false", "Databricks auto compaction.", enforced=False)
TUNE_FILE_SIZES = _p("delta.tuneFileSizesForRewrites", parse_bool, "false", "Smaller files for tables rewritten often.", enforced=False)
UNIVERSAL_FORMAT = _p(
    "delta.universalFormat.enabledFormats",
    _text,
    "",
    "Formats (iceberg, hudi) UniForm keeps in sync. txnlog acts on `iceberg`: the iceberg-export "
    "post-commit hook writes Iceberg metadata after each commit (see docs/iceberg.md); other formats are carried.",
)
ICEBERG_COMPAT_V1 = _p("delta.enableIcebergCompatV1", parse_bool, "false", "Iceberg compatibility V1 (UniForm).", enforced=False)
ICEBERG_COMPAT_V2 = _p("delta.enableIcebergCompatV2", parse_bool, "false", "Iceberg compatibility V2 (UniForm).", enforced=False)
ENABLE_TYPE_WIDENING = _p("delta.enableTypeWidening", parse_bool, "false", "Allow widening column types.", enforced=False)
ENABLE_VARIANT_SHREDDING = _p("delta.enableVariantShredding", parse_bool, "false", "Shred variant columns.", enforced=False)
LIQUID_CLUSTERING_COLUMNS = _p("delta.liquid.clusteringColumns", _text, "", "Liquid clustering columns (Databricks).", enforced=False)
PARQUET_COMPRESSION = _p("delta.parquet.compression.codec", _text, "snappy", "Compression of data files other engines write.", enforced=False)
SAMPLE_RETENTION = _p("delta.sampleRetentionDuration", parse_interval_ms, "interval 7 days", "Retention of sample files.", enforced=False)
COORDINATED_COMMITS = _p(
    "delta.coordinatedCommits.commitCoordinator-preview", _text, "", "Commit coordinator (coordinated commits preview).", enforced=False
)
COORDINATED_COMMITS_CONF = _p(
    "delta.coordinatedCommits.commitCoordinatorConf-preview", _text, "", "Its configuration.", enforced=False
)
COORDINATED_COMMITS_TABLE_CONF = _p(
    "delta.coordinatedCommits.tableConf-preview", _text, "", "Its per-table configuration.", enforced=False
)

# --- txnlog's own ----------------------------------------------------------------------------

COMMIT_RETRIES = _p(
    "txnlog.commit.retry.num-retries",
    _non_negative_int,
    "100",
    "How many times a commit that lost the race for its version is retried at the next one.",
)
COMMIT_MIN_WAIT_MS = _p(
    "txnlog.commit.retry.min-wait-ms", _non_negative_int, "2", "First backoff after a lost race; doubles each further loss."
)
COMMIT_MAX_WAIT_MS = _p("txnlog.commit.retry.max-wait-ms", _non_negative_int, "200", "Longest backoff between two attempts.")
COMMIT_TOTAL_TIMEOUT_MS = _p(
    "txnlog.commit.retry.total-timeout-ms",
    _non_negative_int,
    "600000",
    "Give up retrying once this long has passed since the first attempt.",
)
OPTIMIZE_MAX_DELETED_ROWS_RATIO = _p(
    "txnlog.optimize.maxDeletedRowsRatio",
    _ratio,
    "0.05",
    "OPTIMIZE rewrites a file whose deletion vector deletes more than this fraction of its rows, "
    "whatever its size (delta-spark's spark.databricks.delta.optimize.maxDeletedRowsRatio).",
)
OPTIMIZE_CLUSTERING_MIN_CUBE_SIZE = _p(
    "txnlog.optimize.clustering.minCubeSize",
    _positive_int,
    str(100 * 1024**3),
    "OPTIMIZE on a clustered table leaves alone the files of a cube (the output of one earlier clustering OPTIMIZE) "
    "at least this many bytes large (delta-spark's optimize.clustering.mergeStrategy.minCubeSize.threshold).",
)
ROW_LEVEL_CONCURRENCY = _p(
    "txnlog.rowLevelConcurrency.enabled",
    parse_bool,
    "true",
    "A merge-on-read DML that loses to a compaction or to a deletion vector on other rows of its files is rebased "
    "instead of failing, and a compaction carries a concurrent deletion vector onto its output (docs/concurrency.md).",
)

# --- maintenance (txnlog.maintenance: log expiry, consumers) ----------------------------------

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$", re.IGNORECASE)
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_duration_ms(text: str) -> int:
    """``30d``, ``168h``, ``15m``, ``0s``, ``500ms``, ``2w``, or Delta's ``interval 7 days``, in ms.
    InvalidArgumentError (also a ValueError) names a text that is none of these."""
    if not isinstance(text, str):
        raise InvalidArgumentTypeError(f"a duration must be text like '30d', got {type(text).__name__} {text!r}")
    m = _DURATION.match(text)
    if m:
        return int(m.group(1)) * _DURATION_MS[m.group(2).lower()]
    try:
        return parse_interval_ms(text)
    except ValueError:
        raise InvalidArgumentError(f"expected a duration like 30d, 168h, 15m, 0s or 'interval 7 days', got {text!r}") from None


def _optional(parse: Callable[[str], T]) -> Callable[[str], T | None]:
    def parse_or_none(text: str) -> T | None:
        return parse(text) if text.strip() else None

    return parse_or_none


LOG_RETAIN_MIN = _p(
    "txnlog.log.retain.min",
    _positive_int,
    "10",
    "Log expiry keeps at least this many of the newest versions (Paimon's snapshot.num-retained.min).",
)
LOG_RETAIN_MAX = _p(
    "txnlog.log.retain.max",
    _optional(_positive_int),
    "",
    "Log expiry keeps at most this many versions, whatever their age (unset: no limit).",
)
LOG_EXPIRE_LIMIT = _p(
    "txnlog.log.expire.limit",
    _positive_int,
    "50",
    "Log expiry removes at most this many versions per run (Paimon's snapshot.expire.limit).",
)
ENABLE_EXPIRED_LOG_CLEANUP = _p(
    "delta.enableExpiredLogCleanup",
    parse_bool,
    "false",
    "Expire the log after every commit (the log-expiry post-commit hook). Off unless set: "
    "txnlog deletes log files only when asked.",
)
LOG_EXPIRE_ASYNC = _p(
    "txnlog.log.expire.async",
    parse_bool,
    "false",
    "Run log expiry after commits in one background thread (implies the hook is on); a failure "
    "is reported on the next commit.",
)
ICEBERG_EXPORT_ENABLED = _p(
    "txnlog.iceberg.export.enabled",
    parse_bool,
    "false",
    "Write Iceberg metadata under <table>/metadata/ after every commit (the iceberg-export "
    "post-commit hook; needs the txnlog[iceberg] extra). A failed export never fails the commit.",
)
ICEBERG_EXPORT_ASYNC = _p(
    "txnlog.iceberg.export.async",
    parse_bool,
    "false",
    "Run the iceberg-export hook in one background thread per process instead of on the commit "
    "path (UniForm's way); a background failure is reported on the next commit's hook_failures.",
)
ICEBERG_EXPORT_MAX_COMMITS = _p(
    "txnlog.iceberg.export.maxIncrementalCommits",
    _positive_int,
    "1000",
    "An Iceberg export more than this many Delta commits behind rebuilds from the latest snapshot "
    "(one Iceberg snapshot for the gap) instead of one snapshot per commit.",
)
CONSUMER_EXPIRATION = _p(
    "txnlog.consumer.expiration-time",
    _optional(parse_duration_ms),
    "",
    "Drop consumers whose last heartbeat is older than this (e.g. 7d; unset: consumers never expire).",
)

_REGISTERED = [p for p in list(globals().values()) if isinstance(p, TableProperty)]
PROPERTIES: dict[str, TableProperty[Any]] = {p.key: p for p in _REGISTERED}
assert len(PROPERTIES) == len(_REGISTERED), "a property key is registered twice"
FAMILIES: tuple[PropertyFamily, ...] = (CONSTRAINTS, FEATURES)
_BY_LOWER = {key.lower(): p for key, p in PROPERTIES.items()}

# --- Delta keys that are not table properties -----------------------------------------------
# Column metadata (``StructField.metadata`` in the schema), and the reserved domain prefix.

COLUMN_MAPPING_ID_KEY = "delta.columnMapping.id"
PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
INVARIANTS_KEY = "delta.invariants"
GENERATION_EXPRESSION_KEY = "delta.generationExpression"
IDENTITY_START_KEY = "delta.identity.start"
IDENTITY_STEP_KEY = "delta.identity.step"
#: Column metadata: the highest identity value generated so far.
IDENTITY_HIGH_WATER_MARK_KEY = "delta.identity.highWaterMark"
IDENTITY_ALLOW_EXPLICIT_INSERT_KEY = "delta.identity.allowExplicitInsert"
#: Column metadata: a column's default value as SQL (feature allowColumnDefaults); Spark's name.
CURRENT_DEFAULT_KEY = "CURRENT_DEFAULT"
#: commitInfo tag delta-spark sets and reads when resolving conflicts: the commit's metaData
#: action only moves identity high-water marks.
IDENTITY_ONLY_TAG = "delta.identity.schemaUpdate"
TYPE_CHANGES_KEY = "delta.typeChanges"
RESERVED_DOMAIN_PREFIX = "delta."
#: The namespaces of table property keys: an option or setting in one of them is a table property.
PROPERTY_PREFIXES = ("delta.", "txnlog.")
#: Delta's own keys in a schema field's metadata (column mapping ids and physical names, ...).
FIELD_METADATA_PREFIX = "delta."
#: The domain whose configuration holds the row id high-water mark (row tracking).
ROW_TRACKING_DOMAIN = "delta.rowTracking"
CLUSTERING_DOMAIN = "delta.clustering"
ROW_ID_HIGH_WATER_MARK_KEY = "rowIdHighWaterMark"
#: commitInfo key: the winners a commit was rebased over at row level (txnlog.txn.rebase).
REBASE_COMMIT_INFO_KEY = "txnlog.rowLevelRebase"
#: Column metadata: the highest identity value generated so far.
IDENTITY_HIGH_WATER_MARK_KEY = "delta.identity.highWaterMark"
#: commitInfo tags delta-spark sets and reads when resolving conflicts: a metaData action that
#: only moves identity high-water marks, and whether a commit preserved row ids.
IDENTITY_ONLY_TAG = "delta.identity.schemaUpdate"
ROW_TRACKING_PRESERVED_TAG = "delta.rowTracking.preserved"
#: Column metadata: ids of array elements and map keys/values under column mapping (IcebergCompat).
NESTED_IDS_KEY = "delta.columnMapping.nested.ids"

# --- Keys txnlog writes into exported Iceberg metadata (txnlog.iceberg), not Delta properties ---
#: Iceberg table property and snapshot-summary key: the Delta version the metadata shows.
ICEBERG_DELTA_VERSION_KEY = "txnlog.delta.version"
#: Snapshot-summary key: the Delta commit's timestamp (ms since the epoch).
ICEBERG_DELTA_TIMESTAMP_KEY = "txnlog.delta.timestamp"
#: Snapshot-summary key: the Delta commit's operation (commitInfo.operation).
ICEBERG_DELTA_OPERATION_KEY = "txnlog.delta.operation"
#: Iceberg table property: the Delta table id (metaData.id) the metadata was exported from.
ICEBERG_DELTA_TABLE_ID_KEY = "txnlog.delta.table-id"
#: Snapshot-summary key on a snapshot rebuilt from the full file list: why.
ICEBERG_REBUILD_KEY = "txnlog.export.rebuild"


def lookup(key: str) -> TableProperty[Any] | None:
    """The registered property named ``key`` (case-insensitively), or None."""
    return _BY_LOWER.get(key.lower())


def _family(key: str) -> PropertyFamily | None:
    lowered = key.lower()
    return next((f for f in FAMILIES if lowered.startswith(f.prefix.lower()) and len(key) > len(f.prefix)), None)


def normalize(configuration: Mapping[str, str]) -> dict[str, str]:
    """``configuration`` as it is written in new metadata: known keys in their canonical case,
    booleans and enum values canonical, every value valid. An unknown ``delta.*`` or
    ``txnlog.*`` key is refused with the nearest known key; other keys pass through."""
    out: dict[str, str] = {}
    for key, raw in configuration.items():
        if not isinstance(key, str) or not isinstance(raw, str):
            raise InvalidTablePropertyError(
                f"table property {key!r} must map a string to a string, got {type(raw).__name__}", key=str(key)
            )
        prop = lookup(key)
        if prop is not None:
            out[prop.key] = prop.canonical(raw)
            continue
        family = _family(key)
        if family is not None:
            out[family.prefix + key[len(family.prefix) :]] = raw
            continue
        if key.lower().startswith(CHECKED_NAMESPACES):
            raise InvalidTablePropertyError(_unknown_message(key), key=key)
        out[key] = raw
    return out


def validate(configuration: Mapping[str, str]) -> None:
    """Raise InvalidTablePropertyError for what :func:`normalize` would refuse."""
    normalize(configuration)


def _unknown_message(key: str) -> str:
    known = {k.lower(): k for k in PROPERTIES}
    known.update({f.prefix.lower() + "<name>": f.prefix + "<name>" for f in FAMILIES})
    close = difflib.get_close_matches(key.lower(), list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {known[close[0]]}?" if close else ""
    return f"unknown table property {key!r}{hint} (see docs/properties.md for the keys txnlog knows)"


def markdown() -> str:
    rows = ["| key | default | txnlog | meaning |", "| --- | --- | --- | --- |"]
    for p in PROPERTIES.values():
        acted = "acted on" if p.enforced else "carried, not enforced"
        rows.append(f"| `{p.key}` | `{p.default}` | {acted} | {p.doc} |")
    for f in FAMILIES:
        acted = "acted on" if f.enforced else "carried, not enforced"
        rows.append(f"| `{f.prefix}<name>` | | {acted} | {f.doc} |")
    head = (
        "# Table properties\n\nGenerated from `txnlog/properties.py` (`make docs`).\n\n"
        "Values of booleans and choices are read case-insensitively. Writing new metadata with an unknown "
        "`delta.*` or `txnlog.*` key is refused, naming the nearest known key; tables written by other "
        "engines keep whatever keys they carry. *Carried, not enforced*: txnlog keeps the key for the "
        "engines that act on it, but does not act on it itself.\n\n"
    )
    return head + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
