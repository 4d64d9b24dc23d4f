"""The write path: optimistic transactions, the committer, conflict checks, isolation levels,
metadata and protocol updates, table creation, and post-commit hooks.

This ``__all__`` is what engines may use; the modules behind it are the core's own.
"""

from txnlog.txn.hooks import HookFailure, HookRegistry, PostCommitContext, PostCommitHook
from txnlog.txn.isolation import IsolationLevel
from txnlog.txn.rebase import RebaseStep
from txnlog.txn.transaction import CommitResult, OptimisticTransaction

__all__ = [
    "CommitResult",
    "HookFailure",
    "HookRegistry",
    "IsolationLevel",
    "OptimisticTransaction",
    "PostCommitContext",
    "PostCommitHook",
    "RebaseStep",
]
