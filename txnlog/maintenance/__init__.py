"""Table maintenance: checkpoints, log expiry (Paimon's rules on Delta's files), tags, consumers,
vacuum, restore and validation. The ``txnlog`` command is a thin layer over these functions.

See docs/maintenance.md.
"""

from txnlog.maintenance import consumers, tags
from txnlog.maintenance._deletes import Progress
from txnlog.maintenance._expire import ExpireResult, ExpiryHook, expire
from txnlog.maintenance._inspect import (
    TableDescription,
    checkpoint,
    describe,
    history,
    list_files,
)
from txnlog.maintenance._restore import RestoreResult, restore
from txnlog.maintenance._vacuum import VacuumResult, vacuum
from txnlog.maintenance._validate import Problem, ValidationReport, validate
from txnlog.properties import parse_duration_ms

__all__ = [
    "ExpireResult",
    "ExpiryHook",
    "Problem",
    "Progress",
    "RestoreResult",
    "TableDescription",
    "VacuumResult",
    "ValidationReport",
    "checkpoint",
    "consumers",
    "describe",
    "expire",
    "history",
    "list_files",
    "parse_duration_ms",
    "restore",
    "tags",
    "vacuum",
    "validate",
]
