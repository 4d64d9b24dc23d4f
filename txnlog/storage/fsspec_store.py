"""A LogStore over any fsspec filesystem. Subclasses that can do an atomic put-if-absent
override :meth:`FsspecLogStore.put_if_absent`; the rest refuse to commit."""

from __future__ import annotations

import contextlib
import datetime as _dt
from typing import Any, Iterator

import fsspec
import pyarrow.fs as pafs

from txnlog.errors import ObjectNotFoundError, StorageError, TxnLogError
from txnlog.storage.base import FileInfo, LogStore


def _mtime_ms(info: dict[str, Any]) -> int:
    for key in ("LastModified", "last_modified", "mtime", "updated", "created", "modified"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.timezone.utc)
            return int(value.timestamp() * 1000)
        if isinstance(value, (int, float)):
            return int(value * 1000) if value < 1e11 else int(value)
        if isinstance(value, str):
            try:
                return int(_dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                continue
    return 0


class FsspecLogStore(LogStore):
    def __init__(self, root_uri: str, fs: fsspec.AbstractFileSystem, root_path: str) -> None:
        super().__init__(root_uri)
        self.fs = fs
        self.root_path = root_path.rstrip("/")
        self._arrow_fs: pafs.FileSystem | None = None

    def _full(self, path: str) -> str:
        return f"{self.root_path}/{path}" if path else self.root_path

    def _relative(self, full: str) -> str:
        # Backends differ on a leading "/" (memory, file) and the root may be "" (memory://).
        root, full = self.root_path.strip("/"), full.strip("/")
        return full[len(root) + 1 :] if root else full

    @contextlib.contextmanager
    def _errors(self, verb: str, path: str) -> Iterator[None]:
        """Backends raise OSErrors but also their SDK's own errors (botocore, azure-core...):
        every one leaves the store as a StorageError naming the object."""
        try:
            yield
        except TxnLogError:
            raise
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{self.uri_of(path)} does not exist", path=path) from None
        except Exception as e:
            raise StorageError(f"cannot {verb} {self.uri_of(path)}: {e}", path=path) from e

    def _uncached(self, full: str) -> str:
        # Object-store filesystems cache listings (s3fs even answers info() from them): the
        # log must always see the newest commit, so drop what is cached before every look-up.
        self.fs.invalidate_cache(full)
        return full

    def read(self, path: str) -> bytes:
        with self._errors("read", path):
            return self.fs.cat_file(self._full(path))

    def list_from(self, directory: str, start_name: str = "") -> list[FileInfo]:
        with self._errors("list", directory):
            try:
                entries = self.fs.ls(self._uncached(self._full(directory)), detail=True)
            except FileNotFoundError:
                return []
        prefix = f"{directory}/" if directory else ""
        out = []
        for e in entries:
            if e.get("type") != "file":
                continue
            name = e["name"].rstrip("/").rsplit("/", 1)[-1]
            if name >= start_name:
                out.append(FileInfo(prefix + name, int(e.get("size") or 0), _mtime_ms(e)))
        out.sort(key=lambda f: f.path)
        return out

    def info(self, path: str) -> FileInfo:
        full = self._full(path)
        with self._errors("stat", path):
            self._uncached(full.rsplit("/", 1)[0])
            e = self.fs.info(full)
        return FileInfo(path, int(e.get("size") or 0), _mtime_ms(e))

    def walk_files(self, directory: str = "") -> Iterator[FileInfo]:
        with self._errors("list", directory):
            try:
                found = self.fs.find(self._uncached(self._full(directory)), detail=True)
            except FileNotFoundError:
                found = {}
        for full, e in found.items():
            if e.get("type", "file") == "file":
                yield FileInfo(self._relative(full), int(e.get("size") or 0), _mtime_ms(e))

    def put(self, path: str, data: bytes) -> None:
        with self._errors("write", path):
            self.fs.pipe_file(self._full(path), data)

    def delete(self, path: str) -> None:
        with self._errors("delete", path):
            try:
                self.fs.rm_file(self._full(path))
            except FileNotFoundError:
                pass

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        if self._arrow_fs is None:
            self._arrow_fs = pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))
        return self._arrow_fs, self.root_path
