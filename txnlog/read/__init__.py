"""Reading data files: rows with column mapping, partition values and deletion vectors applied;
scans and the lazy dataset engines push work into; and the change data feed's rows."""

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
from txnlog.read.dataset import SCAN_BATCH_ROWS, FileLister, TableDataset, TableScanner, scan, scan_batches
from txnlog.read.files import BATCH_ROWS, READ_THREADS, ROW_COMMIT_VERSION, ROW_ID, ReadContext

__all__ = [
    "BATCH_ROWS",
    "CHANGE_TYPE",
    "CHANGE_TYPES",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "SCAN_BATCH_ROWS",
    "ChangeScan",
    "FileLister",
    "READ_THREADS",
    "ROW_COMMIT_VERSION",
    "ROW_ID",
    "ReadContext",
    "TableDataset",
    "TableScanner",
    "change_batches",
    "change_scans",
    "change_schema",
    "deletion_vector_diff",
    "scan",
    "scan_batches",
]
