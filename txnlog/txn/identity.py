"""Identity high-water marks: a commit that adds rows with generated identity values moves each
column's mark (``delta.identity.highWaterMark``) past them, in the metaData it commits
(PROTOCOL.md "Identity Columns"). The values are read from the added files' statistics, which
writers always keep for identity columns, so every write path (Python, Spark tasks, MERGE)
is covered by this one step at commit."""

from __future__ import annotations

from typing import Any

from txnlog.errors import ProtocolViolationError
from txnlog.file_facts import decode_stats
from txnlog.table_configuration import TableConfiguration
from txnlog.txn.staging import FileActions


def _added_stats(files: FileActions) -> list[str | None]:
    """The stats strings of the dataChange adds (copies of rows cannot hold new values)."""
    if files.add_bodies is not None:
        return [b.get("stats") for b in files.add_bodies if b.get("dataChange", True)]
    if files.adds is None or not files.adds.num_rows:
        return []
    adds = files.adds
    changes = adds.column("data_change").to_pylist() if "data_change" in adds.column_names else [True] * adds.num_rows
    stats = adds.column("stats").to_pylist() if "stats" in adds.column_names else [None] * adds.num_rows
    return [s for s, change in zip(stats, changes, strict=True) if change is not False]


def advanced_marks(files: FileActions, config: TableConfiguration, uri: str) -> dict[str, int]:
    """Each identity column whose high-water mark the added files move, and its new mark: the
    furthest value they hold in the step's direction, never moved back."""
    identities = config.identity_columns
    if not identities:
        return {}
    physical = config.physical_names or {}
    furthest: dict[str, int] = {}
    for text in _added_stats(files):
        stats: dict[str, Any] = decode_stats(text) or {}
        if not stats.get("numRecords"):
            continue
        for name, identity in identities.items():
            key = physical.get(name, name)
            bound = (stats.get("maxValues") if identity.step > 0 else stats.get("minValues")) or {}
            nulls = (stats.get("nullCount") or {}).get(key)
            if key not in bound:
                if nulls is not None and nulls == stats["numRecords"]:
                    continue  # every value NULL: nothing to move past
                raise ProtocolViolationError(
                    f"a file added to table {uri} has no statistics for identity column '{name}': its high-water mark cannot be kept",
                    rule="identityColumns",
                )
            value = int(bound[key])
            if name not in furthest or (value - furthest[name]) * identity.step > 0:
                furthest[name] = value
    out = {}
    for name, value in furthest.items():
        mark = identities[name].advanced(value)
        if mark is not None:
            out[name] = mark
    return out


__all__ = ["advanced_marks"]
