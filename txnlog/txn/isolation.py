"""Isolation levels, with Delta's names (they are written to commitInfo.isolationLevel)."""

from __future__ import annotations

import enum

from txnlog.errors import TxnLogError


class IsolationLevel(str, enum.Enum):
    #: Every concurrent add that matches what this transaction read is a conflict.
    SERIALIZABLE = "Serializable"
    #: Concurrent blind appends do not count against what this transaction read.
    WRITE_SERIALIZABLE = "WriteSerializable"
    #: No concurrent add counts; only deletes of what was read or removed do.
    SNAPSHOT_ISOLATION = "SnapshotIsolation"

    @classmethod
    def parse(cls, value: str | IsolationLevel) -> IsolationLevel:
        if isinstance(value, IsolationLevel):
            return value
        for level in cls:
            if value.replace("_", "").lower() == level.value.lower():
                return level
        raise TxnLogError(f"unknown isolation level {value!r}; expected one of {[lvl.value for lvl in cls]}")
