"""txnlog: a Delta Lake protocol transaction layer for Python and PySpark."""

from txnlog import errors
from txnlog._version import __version__
from txnlog.errors import TxnLogError
from txnlog.log.actions import AddFile, DeletionVectorDescriptor, RemoveFile
from txnlog.log.history import HistoryEntry
from txnlog.read import ReadContext
from txnlog.retrying import retry
from txnlog.snapshot import Snapshot
from txnlog.table import Table, Timestamp, to_millis, write_table
from txnlog.table_configuration import TableConfiguration
from txnlog.txn.hooks import PostCommitContext
from txnlog.txn.isolation import IsolationLevel
from txnlog.txn.transaction import CommitResult, OptimisticTransaction
from txnlog.write.context import WriteContext, WrittenFiles

__all__ = [
    "AddFile",
    "CommitResult",
    "DeletionVectorDescriptor",
    "HistoryEntry",
    "IsolationLevel",
    "OptimisticTransaction",
    "PostCommitContext",
    "ReadContext",
    "RemoveFile",
    "Snapshot",
    "Table",
    "TableConfiguration",
    "Timestamp",
    "TxnLogError",
    "WriteContext",
    "WrittenFiles",
    "__version__",
    "errors",
    "retry",
    "to_millis",
    "write_table",
]
