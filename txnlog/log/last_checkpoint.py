"""The ``_last_checkpoint`` hint. Only a hint: missing, stale or corrupt means "list the log"."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson

from txnlog.errors import StorageError
from txnlog.log.filenames import LAST_CHECKPOINT
from txnlog.storage.base import LogStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LastCheckpointHint:
    version: int
    size: int | None = None
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None


def read_hint(store: LogStore) -> LastCheckpointHint | None:
    try:
        data = store.read(LAST_CHECKPOINT)
    except StorageError:
        return None
    try:
        obj = orjson.loads(data)
        return LastCheckpointHint(
            version=int(obj["version"]),
            size=obj.get("size"),
            parts=obj.get("parts"),
            size_in_bytes=obj.get("sizeInBytes"),
            num_of_add_files=obj.get("numOfAddFiles"),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        log.warning("ignoring corrupt %s: %s", store.uri_of(LAST_CHECKPOINT), e)
        return None


def write_hint(store: LogStore, hint: LastCheckpointHint, extra: dict[str, Any] | None = None) -> None:
    body: dict[str, Any] = {"version": hint.version}
    if hint.size is not None:
        body["size"] = hint.size
    if hint.parts is not None:
        body["parts"] = hint.parts
    if hint.size_in_bytes is not None:
        body["sizeInBytes"] = hint.size_in_bytes
    if hint.num_of_add_files is not None:
        body["numOfAddFiles"] = hint.num_of_add_files
    body.update(extra or {})
    store.put(LAST_CHECKPOINT, orjson.dumps(body))
