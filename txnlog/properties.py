"""Table properties: one registry with each key's type, default and meaning.

Nothing else parses ``metaData.configuration`` strings. docs/properties.md is generated from
:data:`PROPERTIES` (``python -m txnlog.properties``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Generic, Mapping, TypeVar

from txnlog.errors import InvalidTablePropertyError

T = TypeVar("T")

_INTERVAL = re.compile(
    r"^\s*(?:interval\s+)?(\d+)\s*(millisecond|second|minute|hour|day|week)s?\s*$", re.IGNORECASE
)
_UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}


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


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        for option in options:
            if text.strip().lower() == option.lower():
                return option
        raise ValueError(f"expected one of {list(options)}, got {text!r}")

    return parse


@dataclass(frozen=True)
class TableProperty(Generic[T]):
    key: str
    parse: Callable[[str], T]
    default: str
    doc: str

    def get(self, configuration: Mapping[str, str]) -> T:
        raw = configuration.get(self.key, self.default)
        try:
            return self.parse(raw)
        except (TypeError, ValueError) as e:
            raise InvalidTablePropertyError(f"table property {self.key}={raw!r} is invalid: {e}", key=self.key) from None

    def validate(self, raw: str) -> None:
        try:
            self.parse(raw)
        except (TypeError, ValueError) as e:
            raise InvalidTablePropertyError(f"table property {self.key}={raw!r} is invalid: {e}", key=self.key) from None


APPEND_ONLY = TableProperty("delta.appendOnly", parse_bool, "false", "Refuse commits that remove or change data.")
CHECKPOINT_INTERVAL = TableProperty(
    "delta.checkpointInterval", _positive_int, "10", "Write a checkpoint after every this many commits."
)
CHECKPOINT_POLICY = TableProperty(
    "delta.checkpointPolicy", _choice("classic", "v2"), "classic", "Checkpoint layout: classic or V2 (needs v2Checkpoint)."
)
WRITE_STATS_AS_JSON = TableProperty(
    "delta.checkpoint.writeStatsAsJson", parse_bool, "true", "Checkpoints keep add.stats as a JSON string."
)
WRITE_STATS_AS_STRUCT = TableProperty(
    "delta.checkpoint.writeStatsAsStruct",
    parse_bool,
    "false",
    "Checkpoints also keep stats_parsed and partitionValues_parsed as typed structs.",
)
LOG_RETENTION = TableProperty(
    "delta.logRetentionDuration", parse_interval_ms, "interval 30 days", "How long log entries are kept."
)
DELETED_FILE_RETENTION = TableProperty(
    "delta.deletedFileRetentionDuration",
    parse_interval_ms,
    "interval 7 days",
    "How long tombstones are kept, and the horizon VACUUM respects.",
)
SET_TRANSACTION_RETENTION = TableProperty(
    "delta.setTransactionRetentionDuration",
    lambda s: parse_interval_ms(s) if s else None,
    "",
    "Drop app transaction ids older than this from checkpoints (unset: keep them forever).",
)
ENABLE_IN_COMMIT_TIMESTAMPS = TableProperty(
    "delta.enableInCommitTimestamps", parse_bool, "false", "Commits carry a monotonic commitInfo.inCommitTimestamp."
)
ICT_ENABLEMENT_VERSION = TableProperty(
    "delta.inCommitTimestampEnablementVersion",
    lambda s: int(s) if s else None,
    "",
    "First version whose commits carry in-commit timestamps.",
)
DATA_SKIPPING_NUM_INDEXED_COLS = TableProperty(
    "delta.dataSkippingNumIndexedCols",
    lambda s: int(s),
    "32",
    "Collect min/max/nullCount stats for the first this many leaf columns (-1: all).",
)
DATA_SKIPPING_STATS_COLUMNS = TableProperty(
    "delta.dataSkippingStatsColumns",
    lambda s: tuple(c.strip() for c in s.split(",") if c.strip()) if s else None,
    "",
    "Comma-separated columns to collect stats for; overrides dataSkippingNumIndexedCols.",
)
ISOLATION_LEVEL = TableProperty(
    "delta.isolationLevel",
    _choice("Serializable", "WriteSerializable", "SnapshotIsolation"),
    "Serializable",
    "Default isolation level of transactions on this table.",
)
COLUMN_MAPPING_MODE = TableProperty(
    "delta.columnMapping.mode", _choice("none", "name", "id"), "none", "How data file columns map to table columns."
)
ENABLE_CHANGE_DATA_FEED = TableProperty(
    "delta.enableChangeDataFeed", parse_bool, "false", "Writers record change data for updates and deletes."
)
ENABLE_DELETION_VECTORS = TableProperty(
    "delta.enableDeletionVectors", parse_bool, "false", "Deletes may mark rows in deletion vectors."
)
TARGET_FILE_SIZE = TableProperty(
    "delta.targetFileSize", _positive_int, "134217728", "Target size in bytes of data files written."
)
COMMIT_RETRIES = TableProperty(
    "txnlog.commit.retry.num-retries",
    _non_negative_int,
    "100",
    "How many times a commit that lost the race for its version is retried at the next one.",
)
COMMIT_MIN_WAIT_MS = TableProperty(
    "txnlog.commit.retry.min-wait-ms", _non_negative_int, "2", "First backoff before a retry; doubles each retry."
)
COMMIT_MAX_WAIT_MS = TableProperty(
    "txnlog.commit.retry.max-wait-ms", _non_negative_int, "1000", "Longest backoff between two retries."
)
COMMIT_TOTAL_TIMEOUT_MS = TableProperty(
    "txnlog.commit.retry.total-timeout-ms",
    _non_negative_int,
    "600000",
    "Give up retrying once this long has passed since the first attempt.",
)

PROPERTIES: dict[str, TableProperty[Any]] = {
    p.key: p
    for p in (
        APPEND_ONLY,
        CHECKPOINT_INTERVAL,
        CHECKPOINT_POLICY,
        WRITE_STATS_AS_JSON,
        WRITE_STATS_AS_STRUCT,
        LOG_RETENTION,
        DELETED_FILE_RETENTION,
        SET_TRANSACTION_RETENTION,
        ENABLE_IN_COMMIT_TIMESTAMPS,
        ICT_ENABLEMENT_VERSION,
        DATA_SKIPPING_NUM_INDEXED_COLS,
        DATA_SKIPPING_STATS_COLUMNS,
        ISOLATION_LEVEL,
        COLUMN_MAPPING_MODE,
        ENABLE_CHANGE_DATA_FEED,
        ENABLE_DELETION_VECTORS,
        TARGET_FILE_SIZE,
        COMMIT_RETRIES,
        COMMIT_MIN_WAIT_MS,
        COMMIT_MAX_WAIT_MS,
        COMMIT_TOTAL_TIMEOUT_MS,
    )
}


def validate(configuration: Mapping[str, str]) -> None:
    """Check every known property in ``configuration``; unknown keys pass through untouched."""
    for key, raw in configuration.items():
        if key in PROPERTIES:
            PROPERTIES[key].validate(raw)


def markdown() -> str:
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{p.key}` | `{p.default}` | {p.doc} |" for p in PROPERTIES.values()]
    return "# Table properties\n\nGenerated from `txnlog/properties.py`.\n\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
