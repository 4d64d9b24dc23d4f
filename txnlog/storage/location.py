"""TableLocation: where a table is and how to reach it, without the Table around it.

Snapshots, transactions and post-commit hooks hold this small value instead of the
:class:`~txnlog.table.Table` that opened them: the store, the storage options (for processes
that open the store again, such as Spark executors) and whether data files may lie outside the
table root (shallow clones).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from txnlog.storage.base import LogStore
from txnlog.storage.paths import FileLocation, locate


@dataclass(frozen=True, slots=True)
class TableLocation:
    """The store a table lives in, the options it was opened with, and the absolute-path opt-in."""

    store: LogStore
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    allow_absolute_paths: bool = False

    @property
    def uri(self) -> str:
        return self.store.root_uri

    def locate(self, path: str, *, version: int | None = None) -> FileLocation:
        """Where the data file ``path`` (as an add or remove action names it) is; UnsafePathError
        if it leaves the table root without the opt-in."""
        return locate(self.uri, path, allow_absolute=self.allow_absolute_paths, version=version)


class Located:
    """The ``uri``, ``store``, ``storage_options`` and ``allow_absolute_paths`` of an object's
    ``location``: what a Table, a Snapshot and a transaction all answer the same way."""

    __slots__ = ()
    location: TableLocation

    @property
    def uri(self) -> str:
        return self.location.uri

    @property
    def store(self) -> LogStore:
        return self.location.store

    @property
    def storage_options(self) -> Mapping[str, Any]:
        return self.location.storage_options

    @property
    def allow_absolute_paths(self) -> bool:
        return self.location.allow_absolute_paths


__all__ = ["Located", "TableLocation"]
