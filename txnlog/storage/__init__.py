"""Storage: pick the LogStore for a table URI.

| scheme | store | put-if-absent |
| --- | --- | --- |
| path, ``file://`` | LocalLogStore | temp file + hard link |
| ``memory://`` | MemoryLogStore | process-wide lock |
| ``s3://``, ``s3a://`` | S3LogStore | conditional PUT ``If-None-Match: *`` |
| ``az://``, ``abfs://``, ``abfss://`` | AzureLogStore | ``If-None-Match: *`` |
| ``gs://``, ``gcs://`` | GcsLogStore | ``ifGenerationMatch=0`` |
| anything else fsspec knows | FsspecLogStore | none: reads only, commits refused |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse

from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, StorageError
from txnlog.storage.base import FileInfo, LogStore
from txnlog.storage.local import LocalLogStore
from txnlog.storage.location import TableLocation
from txnlog.storage.options import check_options
from txnlog.storage.paths import FileLocation, check_new_file_path, locate

# fsspec and the stores built on it are imported when a URI needs them: a local table's
# process need not hold them (12 MiB resident).

# What engines may use (the modules behind it are the core's own).
__all__ = [
    "FileInfo",
    "FileLocation",
    "LocalLogStore",
    "LogStore",
    "TableLocation",
    "check_new_file_path",
    "locate",
    "normalize_uri",
    "open_store",
]


def normalize_uri(uri: str | os.PathLike[str]) -> str:
    """A table URI with no trailing slash; local paths become absolute ``file://`` URIs."""
    text = os.fspath(uri)
    scheme = urlparse(text).scheme
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = unquote(urlparse(text).path) if scheme == "file" else text
        return "file://" + os.path.abspath(os.path.expanduser(path))
    return text.rstrip("/")


def open_store(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> LogStore:
    """The LogStore rooted at the table ``uri``."""
    if not isinstance(uri, (str, os.PathLike)):
        raise InvalidArgumentTypeError(f"a table URI must be a string or a path, got {type(uri).__name__}")
    root_uri = normalize_uri(uri)
    options = dict(storage_options or {})
    parsed = urlparse(root_uri)
    scheme = parsed.scheme
    if scheme == "file":
        check_options(options, "a local table", ("fsync",))
        return LocalLogStore(root_uri, unquote(parsed.path), fsync=as_bool(options.get("fsync", False)))
    if scheme == "memory":
        from txnlog.storage.memory import MemoryLogStore  # deferred: fsspec

        check_options(options, "a memory:// table", ())
        return MemoryLogStore(root_uri, "/" + (parsed.netloc + parsed.path).strip("/"))
    if scheme in ("s3", "s3a"):
        from txnlog.storage.s3 import S3LogStore  # lazily: s3fs is an optional extra (txnlog[s3])

        return S3LogStore(root_uri, options)
    if scheme in ("az", "abfs", "abfss", "adl"):
        from txnlog.storage.azure import AzureLogStore  # lazily: adlfs is an optional extra (txnlog[azure])

        return AzureLogStore(root_uri, options)
    if scheme in ("gs", "gcs"):
        from txnlog.storage.gcs import GcsLogStore  # lazily: gcsfs is an optional extra (txnlog[gcs])

        return GcsLogStore(root_uri, options)
    import fsspec  # deferred: fsspec

    from txnlog.storage.fsspec_store import FsspecLogStore  # deferred: fsspec

    try:
        fs, path = fsspec.core.url_to_fs(root_uri, **options)
    except ImportError as e:  # fsspec knows the scheme, but its package is not installed
        raise StorageError(f"cannot open {root_uri}: {e}") from e
    except (ValueError, TypeError) as e:
        raise InvalidArgumentError(f"cannot open table URI {root_uri!r}: unknown URI scheme {scheme!r} ({e})") from None
    return FsspecLogStore(root_uri, fs, path)


def as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
