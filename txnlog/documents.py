"""Results as JSON documents: every result's ``to_dict`` (and so every ``--json`` document the CLI
prints) is camelCase. Each result names only the keys that are not its fields' camelCase names,
so a new field reaches the document without a second list to keep in step."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["camel_case", "document"]


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


def document(result: Any, *, keys: Mapping[str, str] | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The dataclass ``result`` as a document: each field under ``keys[field]`` or its camelCase
    name, tuples as lists and nested results as their own documents, then ``extra``."""
    keys = keys or {}
    out = {keys.get(f.name, camel_case(f.name)): _plain(getattr(result, f.name)) for f in dataclasses.fields(result)}
    out.update({k: _plain(v) for k, v in (extra or {}).items()})
    return out
