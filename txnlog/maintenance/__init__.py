"""Table maintenance: checkpoints, log expiry (Paimon's rules on Delta's files), tags, consumers,
vacuum, restore and validation. The ``txnlog`` command is a thin layer over these functions.

See docs/maintenance.md.
"""

from txnlog.maintenance import consumers, tags
from txnlog.maintenance.deletes import Progress
from txnlog.maintenance.expiry import ExpireResult, ExpiryHook, expire
from txnlog.maintenance.inspection import (
    TableDescription,
    checkpoint,
    describe,
    history,
    list_files,
)
from txnlog.maintenance.restoring import RestoreResult, restore
from txnlog.maintenance.vacuuming import VacuumDecision, VacuumResult, vacuum
from txnlog.maintenance.validation import Problem, ValidationReport, validate
from txnlog.properties import parse_duration_ms

__all__ = [
    "ExpireResult",
    "ExpiryHook",
    "Problem",
    "Progress",
    "RestoreResult",
    "TableDescription",
    "VacuumDecision",
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
