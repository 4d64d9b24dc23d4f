"""The LogStore contract: the only layer that touches bytes on a filesystem.

Paths passed to a store are relative to the table root and use ``/``. A store lists, reads,
writes put-if-absent (commits, checkpoints), overwrites (hints such as ``_last_checkpoint``, side
files, data files) and deletes.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow.fs as pafs

from txnlog.errors import ObjectNotFoundError, PutIfAbsentUnsupportedError, StorageError, TxnLogError

#: What :meth:`LogStore.open_atomic_output` keeps in memory before it spools to a temporary file.
SPOOL_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One listed object: ``path`` relative to the table root, ``size`` in bytes,
    ``modification_time`` in milliseconds since the epoch."""

    path: str
    size: int
    modification_time: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class LogStore(abc.ABC):
    """Storage for one table root."""

    #: Whether :meth:`put_if_absent` is atomic. Stores without it refuse to commit.
    supports_put_if_absent: bool = False
    #: Reads :meth:`iter_read` keeps in flight: parallel requests pay off on object stores.
    read_ahead: int = 16

    def __init__(self, root_uri: str) -> None:
        self.root_uri = root_uri.rstrip("/")

    # -- reading --------------------------------------------------------------------------

    @abc.abstractmethod
    def read(self, path: str) -> bytes:
        """Whole object; raises ObjectNotFoundError when absent."""

    def iter_read(self, paths: Iterable[str]) -> Iterator[bytes]:
        """Several whole objects, in order, each yielded as it is needed: up to
        :attr:`read_ahead` reads are in flight, so only that many objects' bytes are held at once."""
        paths = list(paths)
        ahead = self.read_ahead
        if len(paths) <= 1 or ahead <= 1:
            for p in paths:
                yield self.read(p)
            return
        with ThreadPoolExecutor(min(ahead, len(paths))) as pool:
            pending: deque[Future[bytes]] = deque()
            queued = iter(paths)
            for p in itertools.islice(queued, ahead):
                pending.append(pool.submit(self.read, p))
            try:
                while pending:
                    data = pending.popleft().result()
                    nxt = next(queued, None)
                    if nxt is not None:
                        pending.append(pool.submit(self.read, nxt))
                    yield data
            finally:
                for future in pending:
                    future.cancel()

    @abc.abstractmethod
    def list_from(self, directory: str, start_name: str = "") -> list[FileInfo]:
        """Objects directly inside ``directory`` whose name sorts >= ``start_name``, sorted by name.

        An absent directory lists as empty.
        """

    @abc.abstractmethod
    def info(self, path: str) -> FileInfo:
        """Size and modification time; raises ObjectNotFoundError when absent."""

    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except ObjectNotFoundError:
            return False
        return True

    @abc.abstractmethod
    def walk_files(self, directory: str = "") -> Iterator[FileInfo]:
        """Every object below ``directory``, recursively, in no particular order."""

    # -- writing --------------------------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` only if it does not exist, atomically.

        Raises FileAlreadyExistsError if it exists, AmbiguousWriteError if the outcome is
        unknown, and PutIfAbsentUnsupportedError on stores that cannot do it atomically.
        """
        raise PutIfAbsentUnsupportedError(
            f"{type(self).__name__} at {self.root_uri} has no atomic put-if-absent; refusing to write "
            f"{path} because a concurrent writer could silently overwrite it",
            path=path,
        )

    @abc.abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` (for hints like ``_last_checkpoint`` and for data files)."""

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Delete ``path``; an absent object is not an error (deletes must be safe to re-run)."""

    @contextlib.contextmanager
    def open_atomic_output(self, path: str) -> Iterator[BinaryIO]:
        """A stream for a large object (a checkpoint) that appears at ``path`` whole, when the
        block exits without error, and only if nothing is there: it never replaces an object
        (FileAlreadyExistsError, and nothing changes), since readers may be reading that one.
        An error leaves ``path`` untouched.

        Here: spooled locally (in memory up to :data:`SPOOL_BYTES`, then in a temporary file),
        then one :meth:`put_if_absent`, the same conditional write as a commit's.
        """
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            try:
                yield spool  # type: ignore[misc]
                spool.seek(0)
                data = spool.read()
            except OSError as e:  # a full disk while the caller wrote
                raise StorageError(f"cannot write {self.uri_of(path)}: {e}", path=path) from e
        self.put_if_absent(path, data)

    # -- bulk I/O through Arrow -------------------------------------------------------------

    @abc.abstractmethod
    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the root path inside it, for Parquet reads and writes.

        Writers create the parent directory first (``fs.create_dir(parent, recursive=True)``):
        a local filesystem needs it, and on object stores it writes nothing.
        """

    def arrow_path(self, path: str) -> str:
        fs_root = self.arrow_filesystem()[1]
        return f"{fs_root}/{path}" if fs_root else path

    def open_input(self, path: str) -> BinaryIO:
        """A random-access stream over ``path`` (for Parquet); ObjectNotFoundError when absent."""
        fs, _ = self.arrow_filesystem()
        try:
            return fs.open_input_file(self.arrow_path(path))  # type: ignore[no-any-return]
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{self.uri_of(path)} does not exist", path=path) from None
        except TxnLogError:
            raise
        except Exception as e:  # OSError, and the SDK errors fsspec backends raise
            raise StorageError(f"cannot read {self.uri_of(path)}: {e}", path=path) from e

    def uri_of(self, path: str) -> str:
        """Absolute URI of a root-relative path."""
        return f"{self.root_uri}/{path}"
