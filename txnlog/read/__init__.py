"""Reading data files: rows with column mapping, partition values and deletion vectors applied."""

from txnlog.read.files import BATCH_ROWS, ReadContext

__all__ = ["BATCH_ROWS", "ReadContext"]
