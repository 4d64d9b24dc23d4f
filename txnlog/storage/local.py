"""Local filesystem store: put-if-absent by temp file + hard link, so readers never see a
partly written commit (``open('xb')`` would expose one)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import BinaryIO

import pyarrow.fs as pafs

from txnlog.errors import AmbiguousWriteError, FileAlreadyExistsError, ObjectNotFoundError, StorageError, TablePathIsFileError
from txnlog.storage.base import FileInfo, LogStore


class LocalLogStore(LogStore):
    supports_put_if_absent = True
    read_ahead = 1  # local reads are faster than thread hand-offs

    def __init__(self, root_uri: str, root_path: str, *, fsync: bool = False) -> None:
        super().__init__(root_uri)
        self.root_path = os.path.abspath(root_path)
        if os.path.isfile(self.root_path):
            # Otherwise reads say "no table here" and writes fail deep inside with ENOTDIR.
            raise TablePathIsFileError(f"table path {root_uri} is a file, not a directory", uri=root_uri)
        self.fsync = fsync
        self._arrow_fs = pafs.LocalFileSystem()

    def _abs(self, path: str) -> str:
        return os.path.join(self.root_path, path) if path else self.root_path

    def read(self, path: str) -> bytes:
        try:
            with open(self._abs(path), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{self.uri_of(path)} does not exist", path=path) from None
        except OSError as e:
            raise StorageError(f"cannot read {self.uri_of(path)}: {e}", path=path) from e

    def list_from(self, directory: str, start_name: str = "") -> list[FileInfo]:
        prefix = f"{directory}/" if directory else ""
        out: list[FileInfo] = []
        try:
            with os.scandir(self._abs(directory)) as it:
                for entry in it:
                    if entry.name < start_name:
                        continue
                    # A file deleted between scandir and stat (log cleanup) is skipped, not
                    # allowed to turn the whole listing into "directory absent".
                    try:
                        if not entry.is_file():
                            continue
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    out.append(FileInfo(prefix + entry.name, st.st_size, st.st_mtime_ns // 1_000_000))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise StorageError(f"cannot list {self.uri_of(directory)}: {e}", path=directory) from e
        out.sort(key=lambda f: f.path)
        return out

    def info(self, path: str) -> FileInfo:
        try:
            st = os.stat(self._abs(path))
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFoundError(f"{self.uri_of(path)} does not exist", path=path) from None
        except OSError as e:
            raise StorageError(f"cannot stat {self.uri_of(path)}: {e}", path=path) from e
        return FileInfo(path, st.st_size, st.st_mtime_ns // 1_000_000)

    def walk_files(self, directory: str = "") -> Iterator[FileInfo]:
        base = self._abs(directory)
        for dirpath, _dirs, files in os.walk(base):
            rel_dir = os.path.relpath(dirpath, self.root_path).replace(os.sep, "/")
            rel_dir = "" if rel_dir == "." else rel_dir + "/"
            for name in files:
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                yield FileInfo(rel_dir + name, st.st_size, st.st_mtime_ns // 1_000_000)

    def _write_temp(self, path: str, data: bytes) -> str:
        """``data`` in a new hidden file next to ``path`` (same directory, so it can be linked or
        renamed onto it); nothing is left behind when writing fails."""
        final = self._abs(path)
        directory = os.path.dirname(final)
        tmp = os.path.join(directory, f".{os.path.basename(final)}.{uuid.uuid4().hex}.tmp")
        try:
            os.makedirs(directory, exist_ok=True)
            with open(tmp, "xb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            _unlink_quietly(tmp)
            raise StorageError(f"cannot write {self.uri_of(path)}: {e}", path=path) from e
        return tmp

    def _fsync_dir(self, path: str, error: type[StorageError] = StorageError) -> None:
        """Make the new directory entry of ``path`` durable (POSIX only)."""
        if not self.fsync or os.name == "nt":
            return
        try:
            fd = os.open(os.path.dirname(self._abs(path)), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise error(f"{self.uri_of(path)} was written but may not survive a crash: {e}", path=path) from e

    def put_if_absent(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, final)
        except FileExistsError:
            raise FileAlreadyExistsError(f"{self.uri_of(path)} already exists", path=path) from None
        except OSError as e:
            raise StorageError(f"cannot write {self.uri_of(path)}: {e}", path=path) from e
        finally:
            # A failure to remove the temp file must not turn a won commit into an error.
            _unlink_quietly(tmp)
        # The commit is visible now; if it cannot be made durable, whether it "landed" is unknown.
        self._fsync_dir(path, AmbiguousWriteError)

    def put(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        tmp = self._write_temp(path, data)
        try:
            os.replace(tmp, final)
        except OSError as e:
            _unlink_quietly(tmp)
            raise StorageError(f"cannot write {self.uri_of(path)}: {e}", path=path) from e
        self._fsync_dir(path)

    @contextlib.contextmanager
    def open_atomic_output(self, path: str) -> Iterator[BinaryIO]:
        """A hidden temporary file next to ``path``, hard-linked onto it once complete (as a
        commit is): FileAlreadyExistsError if something is there, which stays as it was."""
        final = self._abs(path)
        tmp = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.{uuid.uuid4().hex}.tmp")
        try:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            f = open(tmp, "xb")
        except OSError as e:
            raise StorageError(f"cannot write {self.uri_of(path)}: {e}", path=path) from e
        try:
            with f:
                try:
                    yield f
                except OSError as e:  # a full disk while the caller wrote
                    raise StorageError(f"cannot write {self.uri_of(path)}: {e}", path=path) from e
                try:
                    if self.fsync:
                        f.flush()
                        os.fsync(f.fileno())
                except OSError as e:
                    raise StorageError(f"cannot write {self.uri_of(path)}: {e}", path=path) from e
            try:
                os.link(tmp, final)
            except FileExistsError:
                raise FileAlreadyExistsError(f"{self.uri_of(path)} already exists", path=path) from None
            except OSError as e:
                raise StorageError(f"cannot write {self.uri_of(path)}: {e}", path=path) from e
        finally:
            _unlink_quietly(tmp)
        self._fsync_dir(path)

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._abs(path))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StorageError(f"cannot delete {self.uri_of(path)}: {e}", path=path) from e

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return self._arrow_fs, self.root_path


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
