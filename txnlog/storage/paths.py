"""Where a data file named by the log is: the one place an ``add.path`` or ``remove.path``
becomes a location, and where escapes from the table root are refused.

A path in the log is a URI reference: relative to the table root (URI-encoded, the usual case)
or absolute (a URI or an absolute path). Nothing is followed out of the table's root because a
log entry says so: ``../`` that climbs out, an absolute path or URI elsewhere, another bucket.
Tables that really name files elsewhere (shallow clones) are read with an explicit opt-in,
``allow_absolute_paths``; relative paths that climb out are refused even then.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from txnlog.errors import UnsafePathError

# URI schemes that name the same storage.
_SAME_SCHEME = {"s3a": "s3", "s3n": "s3", "abfs": "abfss", "gcs": "gs"}


@dataclass(frozen=True, slots=True)
class FileLocation:
    """A data file: its absolute ``uri``, and its ``relative`` path under the table root (the
    store's path, not URI-encoded), or None when it lies outside the root."""

    uri: str
    relative: str | None


def _split(uri: str) -> tuple[str, str, str]:
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    return _SAME_SCHEME.get(scheme, scheme), parsed.netloc, posixpath.normpath(unquote(parsed.path) or "/")


def locate(root_uri: str, path: str, *, allow_absolute: bool = False, version: int | None = None) -> FileLocation:
    """The location of the file a log entry names, or UnsafePathError naming the path (and the
    version, when given) if it escapes the table root without the opt-in."""
    where = f" (version {version})" if version is not None else ""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise UnsafePathError(f"file path {path!r}{where} of table {root_uri} is not a path", path=str(path), version=version)
    root_scheme, root_netloc, root_path = _split(root_uri)
    if "://" not in path and not path.startswith("/"):
        relative = posixpath.normpath(unquote(path))
        if relative == ".." or relative.startswith("../") or relative in (".", "") or relative.startswith("/"):
            raise UnsafePathError(
                f"file path {path!r}{where} leaves the root of table {root_uri}; refusing to follow it",
                path=path,
                version=version,
            )
        return FileLocation(f"{root_uri.rstrip('/')}/{relative}", relative)
    if "://" in path:
        scheme, netloc, file_path = _split(path)
    else:  # an absolute path on the table's own filesystem
        scheme, netloc, file_path = root_scheme, root_netloc, posixpath.normpath(unquote(path))
    prefix = root_path.rstrip("/") + "/"
    if (scheme, netloc) == (root_scheme, root_netloc) and file_path.startswith(prefix):
        return FileLocation(f"{root_uri.rstrip('/')}/{file_path[len(prefix):]}", file_path[len(prefix) :])
    if not allow_absolute:
        raise UnsafePathError(
            f"file path {path!r}{where} is outside the root of table {root_uri}; open the table with "
            "allow_absolute_paths=True if it really names files elsewhere (a shallow clone)",
            path=path,
            version=version,
        )
    uri = path if "://" in path else f"{root_scheme}://{root_netloc}{file_path}"
    return FileLocation(uri, None)


def check_new_file_path(root_uri: str, path: str, *, allow_absolute: bool = False) -> FileLocation:
    """A path a transaction is about to commit: inside the table root, or, with
    ``allow_absolute``, an absolute path in the table's own storage (same scheme and bucket)."""
    location = locate(root_uri, path, allow_absolute=allow_absolute)
    if location.relative is None:
        scheme, netloc, _ = _split(location.uri)
        root_scheme, root_netloc, _ = _split(root_uri)
        if (scheme, netloc) != (root_scheme, root_netloc):
            raise UnsafePathError(
                f"file path {path!r} is in another storage than table {root_uri}; refusing to commit it", path=path
            )
    return location
