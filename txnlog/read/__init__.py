"""Reading data files: rows with column mapping, partition values and deletion vectors applied."""

from txnlog.read.files import BATCH_ROWS, ROW_COMMIT_VERSION, ROW_ID, ReadContext

__all__ = ["BATCH_ROWS", "ROW_COMMIT_VERSION", "ROW_ID", "ReadContext"]
