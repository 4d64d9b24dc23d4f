"""A store that lets another writer's commit land between a writer's plan and its commit."""

from __future__ import annotations

from collections.abc import Callable

from txnlog.storage import open_store
from txnlog.testing import FaultInjectingStore


class HookedStore(FaultInjectingStore):
    """Runs ``before`` once, just before the next commit file is put: another writer's commit
    lands between this writer's planning and its commit."""

    def __init__(self, uri: str, before: Callable[[], None]) -> None:
        super().__init__(open_store(uri))
        self.before: Callable[[], None] | None = before

    def put_if_absent(self, path: str, data: bytes) -> None:
        if path.startswith("_delta_log/") and path.endswith(".json") and self.before is not None:
            before, self.before = self.before, None
            before()
        super().put_if_absent(path, data)
