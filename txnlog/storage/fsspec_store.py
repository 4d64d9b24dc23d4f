"""A LogStore over any fsspec filesystem. Subclasses that can do an atomic put-if-absent
override :meth:`FsspecLogStore.put_if_absent`; the rest refuse to commit."""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import inspect
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any, BinaryIO, Literal, cast

import fsspec
import pyarrow as pa
import pyarrow.fs as pafs

from txnlog.errors import (
    AmbiguousWriteError,
    FileAlreadyExistsError,
    ObjectNotFoundError,
    StorageError,
    TxnLogError,
)
from txnlog.storage.base import FileInfo, LogStore
from txnlog.storage.options import DELTA_RS_IGNORED, unknown_option

logger = logging.getLogger(__name__)

#: What a failed conditional write means: the key exists, a concurrent conditional write
#: collided with it, it was certainly not applied, or it may have been applied.
Outcome = Literal["exists", "conflict", "failed", "ambiguous"]
_CONFLICT_ATTEMPTS = 5

# Keyword arguments every fsspec filesystem accepts on top of its own.
_FSSPEC_KWARGS = frozenset({"use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache"})


def status_outcome(status: int) -> Outcome:
    """The outcome of an HTTP error answer to a write, other than 409 and 412."""
    # 503 (busy, slow down) is a refusal; another 5xx may come after the write was applied.
    return "ambiguous" if status >= 500 and status != 503 else "failed"


def connect_failed(error: BaseException | None) -> bool:
    """Whether an aiohttp error proves the request never left (no connection was made).
    SDKs report a connection reset mid-request with the same exception types as a refused
    connect, so only the underlying aiohttp error tells "not sent" from "sent, answer lost"."""
    try:
        import aiohttp  # optional dependency (installed with txnlog[s3] or txnlog[azure])
    except ImportError:
        return False
    return isinstance(error, (aiohttp.ClientConnectorError, getattr(aiohttp, "ConnectionTimeoutError", ())))


def import_extra(module: str, extra: str) -> ModuleType:
    """Import an optional backend, or say which txnlog extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise StorageError(
            f"{module} is needed for this storage but is not installed: pip install 'txnlog[{extra}]' ({e})"
        ) from e


def split_options(
    options: Mapping[str, Any],
    fs_class: type,
    aliases: Mapping[str, str],
    *,
    where: str,
    prefixes: tuple[str, ...] = (),
    extra: tuple[str, ...] = (),
    ignored: frozenset[str] = frozenset(),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``storage_options`` into ``fs_class``'s own keyword arguments and delta-rs style
    keys, the latter matched case-insensitively with or without one of ``prefixes`` and
    returned under their ``aliases`` name.

    delta-rs keys txnlog has no use for (``ignored``, and every store's
    :data:`~txnlog.storage.options.DELTA_RS_IGNORED`) are dropped, so one options dict serves
    both deltalake and txnlog. Any other key is refused (InvalidArgumentError naming ``where``,
    the known keys and the nearest one): a typo must not quietly fall back to defaults.
    """
    # The class's own __init__: fsspec's caching metaclass hides it from signature(fs_class).
    own = inspect.signature(fs_class.__init__).parameters  # type: ignore[misc]
    accepted = (set(own) | _FSSPEC_KWARGS | set(extra)) - {"self", "args", "kwargs"}
    native: dict[str, Any] = {}
    mapped: dict[str, Any] = {}
    for key, value in options.items():
        if key in accepted:
            native[key] = value
            continue
        lowered = key.lower()
        prefix = next((p for p in prefixes if lowered.startswith(p)), "")
        name = lowered[len(prefix) :]
        if name in aliases:
            mapped[aliases[name]] = value
        elif name in ignored or lowered in ignored or name in DELTA_RS_IGNORED:
            logger.debug("ignoring storage option %r: a delta-rs setting %s does not need", key, fs_class.__name__)
        else:
            raise unknown_option(
                key, where, [*aliases, *accepted], prefix=prefixes[0] if prefixes else "",
                details=f" (the delta-rs keys with or without {' or '.join(repr(p) for p in prefixes) or 'a prefix'}, in any case, "
                f"and {fs_class.__module__}.{fs_class.__name__}'s arguments; delta-rs keys txnlog does not need are accepted and ignored)",
            )
    return native, mapped


def mtime_ms(info: dict[str, Any]) -> int:
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
        every one leaves the store as a StorageError naming the object, and an object that is
        not there (never was, or deleted since it was listed or opened) as ObjectNotFoundError."""
        try:
            yield
        except TxnLogError:
            raise
        except Exception as e:
            if not_found(e):
                raise ObjectNotFoundError(f"{self.uri_of(path)} does not exist", path=path) from e
            raise StorageError(f"cannot {verb} {self.uri_of(path)}: {e}", path=path) from e

    def _uncached(self, full: str) -> str:
        # Object-store filesystems cache listings (s3fs even answers info() from them): the
        # log must always see the newest commit, so drop what is cached before every look-up.
        self.fs.invalidate_cache(full)
        return full

    def _conditional_put(
        self, path: str, data: bytes, send: Callable[[], object], classify: Callable[[Exception], Outcome]
    ) -> None:
        """Put-if-absent by a conditional write: ``send()`` makes one (after the SDK's own
        retries) and ``classify`` says what an error it raised means."""
        for attempt in range(_CONFLICT_ATTEMPTS):
            try:
                send()
                return
            except Exception as e:
                error, outcome = e, classify(e)
            # "conflict": another conditional write of this key was in flight (S3's 409); if it
            # won, the key is there now, otherwise ours was refused and is safe to send again.
            if outcome == "exists" or (outcome == "conflict" and self.exists(path)):
                raise self._exists_error(path, data) from None
            if outcome == "ambiguous":
                raise AmbiguousWriteError(
                    f"conditional write of {self.uri_of(path)} failed after it was sent, so it may or "
                    f"may not have landed: {error!r}",
                    path=path,
                ) from error
            if outcome == "failed":
                raise StorageError(f"cannot write {self.uri_of(path)}: {error}", path=path) from error
            time.sleep(random.uniform(0.5, 1.0) * 0.05 * 2**attempt)
        raise StorageError(
            f"cannot write {self.uri_of(path)}: {_CONFLICT_ATTEMPTS} conditional writes met concurrent ones",
            path=path,
        ) from error

    def _exists_error(self, path: str, data: bytes) -> StorageError:
        """The error for a conditional write refused because ``path`` exists.

        SDKs and HTTP clients retry writes on their own (aiohttp resends a PUT whose connection
        dropped, botocore, azure-core and google-cloud-storage retry timeouts), so "exists" may
        be our own first attempt, answered too late. If the object holds exactly our bytes, that
        cannot be told apart from winning, so it is ambiguous rather than lost.
        """
        try:
            current = self.read(path)
        except StorageError:
            current = None
        if current == data:
            return AmbiguousWriteError(
                f"{self.uri_of(path)} already exists with exactly the bytes being written: either this "
                "write landed and was retried, or another writer wrote the same bytes",
                path=path,
            )
        return FileAlreadyExistsError(f"{self.uri_of(path)} already exists", path=path)

    def read(self, path: str) -> bytes:
        with self._errors("read", path):
            return cast(bytes, self.fs.cat_file(self._full(path)))

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
                out.append(FileInfo(prefix + name, int(e.get("size") or 0), mtime_ms(e)))
        out.sort(key=lambda f: f.path)
        return out

    def info(self, path: str) -> FileInfo:
        full = self._full(path)
        with self._errors("stat", path):
            self._uncached(full.rsplit("/", 1)[0])
            e = self.fs.info(full)
        return FileInfo(path, int(e.get("size") or 0), mtime_ms(e))

    def walk_files(self, directory: str = "") -> Iterator[FileInfo]:
        with self._errors("list", directory):
            try:
                found = self.fs.find(self._uncached(self._full(directory)), detail=True)
            except FileNotFoundError:
                found = {}
        for full, e in found.items():
            if e.get("type", "file") == "file":
                yield FileInfo(self._relative(full), int(e.get("size") or 0), mtime_ms(e))

    def put(self, path: str, data: bytes) -> None:
        full = self._full(path)
        with self._errors("write", path):
            try:
                self.fs.pipe_file(full, data)
            except FileNotFoundError:
                # Filesystems with real directories (file, sftp...) need the parent to exist.
                self.fs.makedirs(full.rsplit("/", 1)[0], exist_ok=True)
                self.fs.pipe_file(full, data)

    def delete(self, path: str) -> None:
        with self._errors("delete", path):
            try:
                self.fs.rm_file(self._full(path))
            except Exception as e:
                if not not_found(e):
                    raise

    def open_input(self, path: str) -> BinaryIO:
        """As the base class, but a read or seek that fails later, after the open (the object
        deleted in between, by a concurrent log expiry), raises the store's errors too."""
        with self._errors("read", path):
            raw = self.fs.open(self._full(path), mode="rb")
        return pa.PythonFile(_ClassifiedReads(self, path, raw), mode="r")  # type: ignore[no-any-return]

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        if self._arrow_fs is None:
            self._arrow_fs = pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))
        return self._arrow_fs, self.root_path


def not_found(error: BaseException) -> bool:
    """Whether a backend's error says the object is not there. fsspec backends mostly raise
    FileNotFoundError, but not on every path: an SDK's 404 (botocore's NoSuchKey, azure-core's
    ResourceNotFoundError, google-api-core's NotFound) can come through as it is, or as the
    cause of another error, on a ranged read of an object deleted after it was opened."""
    seen: BaseException | None = error
    # The error and the few errors it was raised from (an SDK's, wrapped by the backend); not
    # the errors it was raised while handling, which may be an earlier, handled 404.
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, FileNotFoundError) or _http_status(seen) == 404:
            return True
        seen = seen.__cause__
    return False


def _http_status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)  # botocore's ClientError
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status is None and response.get("Error", {}).get("Code") in ("NoSuchKey", "NotFound", "404"):
            return 404
        return status if isinstance(status, int) else None
    for name in ("status_code", "code", "status"):  # azure-core, google-api-core, aiohttp
        status = getattr(error, name, None)
        if isinstance(status, int) and 100 <= status < 600:
            return status
    return None


class _ClassifiedReads:
    """A backend's file object, for :class:`pyarrow.PythonFile`, whose reads and seeks raise
    the store's errors: pyarrow hands them back to the reader as they are."""

    def __init__(self, store: FsspecLogStore, path: str, raw: Any) -> None:
        self._store, self._path, self._raw = store, path, raw

    def read(self, size: int = -1) -> bytes:
        with self._store._errors("read", self._path):
            return cast(bytes, self._raw.read(size))

    def seek(self, offset: int, whence: int = 0) -> int:
        with self._store._errors("read", self._path):
            return cast(int, self._raw.seek(offset, whence))

    def tell(self) -> int:
        return cast(int, self._raw.tell())

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return bool(self._raw.closed)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # nothing was written: a failed close loses nothing
            self._raw.close()
