"""txnlog: a Delta Lake protocol transaction layer for Python and PySpark."""

from txnlog.errors import TxnLogError
from txnlog.log.actions import AddFile, DeletionVectorDescriptor, RemoveFile
from txnlog.table import HistoryEntry, Snapshot, Table

__version__ = "0.1.0"

__all__ = [
    "AddFile",
    "DeletionVectorDescriptor",
    "HistoryEntry",
    "RemoveFile",
    "Snapshot",
    "Table",
    "TxnLogError",
    "__version__",
]
