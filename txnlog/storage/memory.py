"""``memory://`` store for tests: fsspec's in-process MemoryFileSystem, with put-if-absent made
atomic by a process-wide lock (the memory filesystem is only visible inside one process)."""

from __future__ import annotations

import threading

import fsspec

from txnlog.errors import FileAlreadyExistsError
from txnlog.storage.fsspec_store import FsspecLogStore

_LOCK = threading.Lock()


class MemoryLogStore(FsspecLogStore):
    supports_put_if_absent = True

    def __init__(self, root_uri: str, root_path: str) -> None:
        super().__init__(root_uri, fsspec.filesystem("memory"), root_path)

    def put_if_absent(self, path: str, data: bytes) -> None:
        full = self._full(path)
        with _LOCK, self._errors("write", path):
            if self.fs.exists(full):
                raise FileAlreadyExistsError(f"{self.uri_of(path)} already exists", path=path)
            self.fs.pipe_file(full, data)

    def put(self, path: str, data: bytes) -> None:
        with _LOCK:
            super().put(path, data)
