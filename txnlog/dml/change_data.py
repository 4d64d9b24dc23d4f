"""The change data of one commit, on a table that records it: the rule every engine follows.

A change reader takes a version's ``cdc`` files *instead of* its adds and removes, so a commit
with any cdc file must hold all of its changes in them. Rows only cdc files can tell (deleted
rows next to copied ones, update pre- and post-images) are *required*: the commit then gets cdc
files, which also hold the rows its file actions imply (added files' rows as inserts, whole
removed files' rows as deletes). A commit that requires none gets no cdc file: its file
actions are its changes, which it declares to the transaction (the protocol allows a commit of
whole-file adds and removes without cdc files; readers derive the feed from them).

Engines hold their rows their own way (``txnlog.dml`` as Arrow, ``txnlog.spark`` as
DataFrames): each entry is a function making them, so rows never needed are never made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from txnlog.txn.transaction import OptimisticTransaction

R = TypeVar("R")
#: Change rows and their ``_change_type``.
ChangeRowsOf = list[tuple[Callable[[], R], str]]


class ChangeData(Generic[R]):
    """The change rows of one commit, kept until it is staged (:meth:`finish`)."""

    def __init__(self, txn: OptimisticTransaction) -> None:
        self.txn = txn
        self.enabled = txn.table_configuration.change_data_feed_enabled
        self._required: ChangeRowsOf[R] = []
        self._implied: ChangeRowsOf[R] = []
        self._written = 0  # cdc files staged already (by an executor that writes its own)

    def require(self, rows: Callable[[], R], change_type: str) -> None:
        """Rows only cdc files can tell: the commit gets cdc files."""
        if self.enabled:
            self._required.append((rows, change_type))

    def imply(self, rows: Callable[[], R], change_type: str) -> None:
        """Rows the file actions already tell: written only if the commit gets cdc files anyway."""
        if self.enabled:
            self._implied.append((rows, change_type))

    def written(self, files: int) -> None:
        """``files`` cdc files were staged by the caller: the commit has cdc files."""
        self._written += files

    @property
    def needs_files(self) -> bool:
        return bool(self.enabled and (self._required or self._written))

    def finish(self, write: Callable[[ChangeRowsOf[R]], int]) -> int:
        """Before the commit: ``write`` the change rows the commit must hold, or, when it needs
        no cdc file, declare its file actions its changes. The number of cdc files written here."""
        if not self.enabled:
            return 0
        if not self.needs_files:
            self.txn.file_actions_are_the_changes()
            return 0
        rows = [*self._required, *self._implied]
        self._required, self._implied = [], []
        return write(rows) if rows else 0


__all__ = ["ChangeData", "ChangeRowsOf"]
