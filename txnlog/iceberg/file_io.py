"""A pyiceberg FileIO over the table's LogStore, so Iceberg metadata goes through the same
storage layer (and the same fault injection, credentials and path checks) as the Delta log."""

from __future__ import annotations

import io
from typing import Any

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream

from txnlog.errors import ObjectNotFoundError, UnsafePathError
from txnlog.storage import LogStore


class _StoreOutputStream(io.BytesIO):
    """Buffers the bytes and hands them to the store whole on close: readers never see a
    partly written manifest."""

    def __init__(self, store: LogStore, path: str, overwrite: bool) -> None:
        super().__init__()
        self._store = store
        self._path = path
        self._overwrite = overwrite
        self._done = False

    def close(self) -> None:
        if not self._done and not self.closed:
            self._done = True
            data = self.getvalue()
            if self._overwrite or not self._store.supports_put_if_absent:
                self._store.put(self._path, data)
            else:
                self._store.put_if_absent(self._path, data)
        super().close()


class _StoreObject:
    """What pyiceberg's input and output files share here: one object of the store."""

    def __init__(self, store: LogStore, location: str, path: str) -> None:
        super().__init__(location)  # InputFile / OutputFile, next in the MRO
        self._store = store
        self._path = path

    def __len__(self) -> int:
        return self._store.info(self._path).size

    def exists(self) -> bool:
        return self._store.exists(self._path)


class _StoreInputFile(_StoreObject, InputFile):
    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._store.read(self._path))


class _StoreOutputFile(_StoreObject, OutputFile):
    def to_input_file(self) -> InputFile:
        return _StoreInputFile(self._store, self.location, self._path)

    def create(self, overwrite: bool = False) -> OutputStream:
        return _StoreOutputStream(self._store, self._path, overwrite)


class StoreFileIO(FileIO):
    """Reads and writes locations under the table root through ``store``; refuses any other."""

    def __init__(self, store: LogStore, properties: dict[str, Any] | None = None) -> None:
        super().__init__(properties or {})
        self.store = store

    def relative(self, location: str) -> str:
        root = self.store.root_uri.rstrip("/") + "/"
        if not location.startswith(root) or "/../" in location[len(root) - 1 :]:
            raise UnsafePathError(f"Iceberg file {location} is outside the table root {self.store.root_uri}", path=location)
        return location[len(root) :]

    def location(self, relative: str) -> str:
        return f"{self.store.root_uri.rstrip('/')}/{relative}"

    def new_input(self, location: str) -> InputFile:
        return _StoreInputFile(self.store, location, self.relative(location))

    def new_output(self, location: str) -> OutputFile:
        return _StoreOutputFile(self.store, location, self.relative(location))

    def delete(self, location: str | InputFile | OutputFile) -> None:
        where = location if isinstance(location, str) else location.location
        try:
            self.store.delete(self.relative(where))
        except ObjectNotFoundError:
            pass
