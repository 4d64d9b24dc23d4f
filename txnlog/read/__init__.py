"""Reading data files: rows with column mapping, partition values and deletion vectors applied;
and the change data feed's rows."""

from txnlog.read.changes import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    ChangeScan,
    change_batches,
    change_scans,
    change_schema,
    deletion_vector_diff,
)
from txnlog.read.files import BATCH_ROWS, READ_THREADS, ROW_COMMIT_VERSION, ROW_ID, ReadContext

__all__ = [
    "BATCH_ROWS",
    "CHANGE_TYPE",
    "CHANGE_TYPES",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "ChangeScan",
    "READ_THREADS",
    "ROW_COMMIT_VERSION",
    "ROW_ID",
    "ReadContext",
    "change_batches",
    "change_scans",
    "change_schema",
    "deletion_vector_diff",
]
