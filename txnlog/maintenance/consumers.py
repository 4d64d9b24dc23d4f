"""Consumers: streaming readers' positions, which pin the log (Paimon's consumers).

A consumer is an id, the next version it will read, and its last heartbeat. Log expiry never
removes a version a consumer still needs (``next_version`` and later). A consumer not heard from
for ``txnlog.consumer.expiration-time`` is dropped by the next expiry run, as in Paimon.

Stored in ``<table>/_txnlog/consumers/<id>.json``, one small file each, rewritten on every
:func:`record`: a position moves with every micro-batch, and a commit per move would flood the log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from txnlog.documents import document
from txnlog.errors import ConsumerNotFoundError, LogCorruptError, VersionNotFoundError
from txnlog.maintenance import arguments, sidefiles
from txnlog.maintenance.layout import LogLayout

if TYPE_CHECKING:
    from txnlog import Table

_DIR = "consumers"


@dataclass(frozen=True)
class Consumer:
    consumer_id: str
    #: The first version this consumer has not read yet; it and every later version are kept.
    next_version: int
    #: When the consumer last recorded its position, ms since the epoch.
    last_heartbeat_ms: int

    def to_dict(self) -> dict[str, Any]:
        return document(self, keys={"consumer_id": "id", "last_heartbeat_ms": "lastHeartbeat"})


def _now_ms() -> int:
    return int(time.time() * 1000)


def _decode(obj: dict[str, Any], where: str) -> Consumer:
    try:
        return Consumer(str(obj["id"]), int(obj["nextVersion"]), int(obj["lastHeartbeat"]))
    except (KeyError, TypeError, ValueError) as e:
        raise LogCorruptError(f"consumer file {where} is not valid: {e!r}", path=where) from None


def _write(table: Table, consumer: Consumer) -> Consumer:
    table.store.put(sidefiles.path_of(_DIR, consumer.consumer_id), sidefiles.dump(consumer.to_dict()))
    return consumer


def _check_version(table: Table, next_version: int) -> None:
    layout = LogLayout.of(table.store)
    if not layout.earliest <= next_version <= layout.latest + 1:
        raise VersionNotFoundError(
            f"{table.uri}: a consumer's next version must be between the earliest retained version "
            f"{layout.earliest} and {layout.latest + 1}, got {next_version}",
            version=next_version,
        )


@arguments.takes_table
def record(table: Table, consumer_id: str, next_version: int, *, now_ms: int | None = None) -> Consumer:
    """Create or move consumer ``consumer_id`` to ``next_version``, with a heartbeat now."""
    sidefiles.check_name("consumer", consumer_id)
    _check_version(table, arguments.integer("next_version", next_version, minimum=0))
    now_ms = arguments.optional_integer("now_ms", now_ms)
    return _write(table, Consumer(consumer_id, next_version, _now_ms() if now_ms is None else now_ms))


@arguments.takes_table
def get(table: Table, consumer_id: str) -> Consumer:
    obj, where = sidefiles.read_named(
        table.store, _DIR, "consumer", consumer_id,
        lambda: ConsumerNotFoundError(f"no consumer {consumer_id!r} on {table.uri}", consumer_id=consumer_id),
    )
    return _decode(obj, where)


@arguments.takes_table
def reset(table: Table, consumer_id: str, next_version: int) -> Consumer:
    """Move an existing consumer to ``next_version`` (ConsumerNotFoundError if there is none)."""
    arguments.integer("next_version", next_version, minimum=0)
    get(table, consumer_id)
    return record(table, consumer_id, next_version)


@arguments.takes_table
def delete(table: Table, consumer_id: str) -> Consumer:
    """Drop a consumer: it no longer pins any version."""
    consumer = get(table, consumer_id)
    table.store.delete(sidefiles.path_of(_DIR, consumer_id))
    return consumer


@arguments.takes_table
def list_consumers(table: Table) -> list[Consumer]:
    return sorted((_decode(obj, table.uri) for obj in sidefiles.read_all(table.store, _DIR)), key=lambda c: c.consumer_id)


@arguments.takes_table
def expire(table: Table, inactive_ms: int, *, now_ms: int | None = None) -> list[Consumer]:
    """Drop consumers whose last heartbeat is more than ``inactive_ms`` old; returns them."""
    inactive_ms = arguments.integer("inactive_ms", inactive_ms, minimum=0)
    now_ms = arguments.optional_integer("now_ms", now_ms)
    horizon = (_now_ms() if now_ms is None else now_ms) - inactive_ms
    dropped = [c for c in list_consumers(table) if c.last_heartbeat_ms < horizon]
    for c in dropped:
        table.store.delete(sidefiles.path_of(_DIR, c.consumer_id))
    return dropped


@arguments.takes_table
def min_next_version(table: Table) -> int | None:
    """The smallest next version over all consumers (what expiry must keep), or None."""
    return min((c.next_version for c in list_consumers(table)), default=None)


__all__ = ["Consumer", "delete", "expire", "get", "list_consumers", "min_next_version", "record", "reset"]
