"""A small thread-safe LRU map for the export's caches: Iceberg metadata files and manifests
are immutable, so what was read from one never goes stale."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class LruCache(OrderedDict[str, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size
        self.lock = threading.Lock()

    def get_or(self, key: str) -> Any:
        with self.lock:
            value = self.get(key)
            if value is not None:
                self.move_to_end(key)
            return value

    def put(self, key: str, value: Any) -> None:
        with self.lock:
            self[key] = value
            self.move_to_end(key)
            while len(self) > self._size:
                self.popitem(last=False)
