"""Tags: names that pin a version (Paimon's tags; Delta has none).

A tagged version stays reconstructable and time-travelable: log expiry keeps its commit and a
checkpoint at it, and VACUUM keeps its data files. Tags live in ``<table>/_txnlog/tags/<name>.json``
(see docs/maintenance.md for why not in the log). Creating one is put-if-absent, so two writers
cannot both create the same name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from txnlog.documents import document
from txnlog.errors import (
    FileAlreadyExistsError,
    LogCorruptError,
    TagAlreadyExistsError,
    TagNotFoundError,
    TxnLogError,
    VersionNotFoundError,
)
from txnlog.maintenance import arguments, sidefiles

if TYPE_CHECKING:
    from txnlog import Snapshot, Table

_DIR = "tags"


@dataclass(frozen=True)
class Tag:
    name: str
    version: int
    #: When the tag was created, ms since the epoch.
    created_ms: int

    def to_dict(self) -> dict[str, Any]:
        return document(self, keys={"created_ms": "createdTime"})


def _decode(obj: dict[str, Any], where: str) -> Tag:
    try:
        return Tag(str(obj["name"]), int(obj["version"]), int(obj.get("createdTime", 0)))
    except (KeyError, TypeError, ValueError) as e:
        raise LogCorruptError(f"tag file {where} is not valid: {e!r}", path=where) from None


@arguments.takes_table
def create(table: Table, name: str, version: int | None = None) -> Tag:
    """Tag ``version`` (default: the latest) as ``name``; TagAlreadyExistsError if the name is taken."""
    sidefiles.check_name("tag", name)
    snapshot = table.snapshot(arguments.optional_integer("version", version, minimum=0))  # reconstructable now
    tag = Tag(name, snapshot.version, int(time.time() * 1000))
    path = sidefiles.path_of(_DIR, name)
    try:
        table.store.put_if_absent(path, sidefiles.dump(tag.to_dict()))
    except FileAlreadyExistsError:
        existing = get(table, name)
        raise TagAlreadyExistsError(
            f"tag {name!r} already exists on {table.uri} (version {existing.version}); delete it first", name=name
        ) from None
    # Log expiry may have removed the version between the check and the write: it reads the
    # tags before deleting anything, so a version still reconstructable now stays so.
    try:
        table.snapshot(tag.version)
    except TxnLogError:
        table.store.delete(path)
        raise VersionNotFoundError(
            f"version {tag.version} of {table.uri} expired while tag {name!r} was being created", version=tag.version
        ) from None
    return tag


@arguments.takes_table
def get(table: Table, name: str) -> Tag:
    obj, where = sidefiles.read_named(
        table.store, _DIR, "tag", name, lambda: TagNotFoundError(f"no tag {name!r} on {table.uri}", name=name)
    )
    return _decode(obj, where)


@arguments.takes_table
def delete(table: Table, name: str) -> Tag:
    """Remove tag ``name`` (its version is then expired like any other); returns what it was."""
    tag = get(table, name)
    table.store.delete(sidefiles.path_of(_DIR, name))
    return tag


@arguments.takes_table
def list_tags(table: Table) -> list[Tag]:
    """Every tag, by version then name."""
    tags = [_decode(obj, table.uri) for obj in sidefiles.read_all(table.store, _DIR)]
    return sorted(tags, key=lambda t: (t.version, t.name))


@arguments.takes_table
def snapshot(table: Table, name: str) -> Snapshot:
    """The table at the version tagged ``name``."""
    return table.snapshot(get(table, name).version)


__all__ = ["Tag", "create", "delete", "get", "list_tags", "snapshot"]
