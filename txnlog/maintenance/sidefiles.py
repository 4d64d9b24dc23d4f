"""Small JSON files txnlog keeps beside the log, under ``<table>/_txnlog/`` (tags, consumers).

Not in ``_delta_log``: other Delta engines ignore them, and the leading underscore keeps every
engine's VACUUM away from them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from txnlog.errors import InvalidArgumentError, LogCorruptError, ObjectNotFoundError
from txnlog.storage import LogStore

ROOT = "_txnlog"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgumentError(
            f"{kind} name {name!r} must start with a letter or digit and hold only letters, digits, '.', '_' and '-'"
        )
    return name


def path_of(directory: str, name: str) -> str:
    return f"{ROOT}/{directory}/{name}.json"


def read(store: LogStore, path: str) -> dict[str, Any] | None:
    try:
        data = store.read(path)
    except ObjectNotFoundError:
        return None
    try:
        obj = orjson.loads(data)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        return obj
    except (orjson.JSONDecodeError, ValueError) as e:
        raise LogCorruptError(f"{store.uri_of(path)} is not valid: {e}", path=path) from None


def read_named(store: LogStore, directory: str, kind: str, name: str, missing: Callable[[], Exception]) -> tuple[dict[str, Any], str]:
    """The side file ``name`` of ``directory`` and its URI; ``missing()`` is raised if it is absent."""
    path = path_of(directory, check_name(kind, name))
    obj = read(store, path)
    if obj is None:
        raise missing()
    return obj, store.uri_of(path)


def read_all(store: LogStore, directory: str) -> list[dict[str, Any]]:
    out = []
    for info in store.list_from(f"{ROOT}/{directory}"):
        if info.name.endswith(".json") and not info.name.startswith("."):
            obj = read(store, info.path)
            if obj is not None:
                out.append(obj)
    return out


def dump(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"
