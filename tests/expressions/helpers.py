"""Shared by the expressions tests: hand-built file lists (FILES_SCHEMA tables with stats JSON
written by orjson) and a predicate over one schema."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

from txnlog.expressions import FilePredicate
from txnlog.log.file_actions import FILES_SCHEMA

UTC = dt.timezone.utc

# --- helpers -------------------------------------------------------------------------------------


def files_table(entries: Sequence[tuple[Mapping[str, str | None], Any]]) -> pa.Table:
    """A FILES_SCHEMA table: one (partition values, stats) per file, named f0, f1...

    stats is a dict (dumped with orjson), a raw string, or None.
    """
    n = len(entries)
    columns: dict[str, Any] = {f.name: pa.nulls(n, f.type) for f in FILES_SCHEMA}
    columns["path"] = pa.array([f"f{i}" for i in range(n)])
    columns["partition_values"] = pa.array([list(pv.items()) for pv, _ in entries], FILES_SCHEMA.field("partition_values").type)
    columns["stats"] = pa.array(
        [s if s is None or isinstance(s, str) else orjson.dumps(s).decode() for _, s in entries], pa.string()
    )
    return pa.table(columns, schema=FILES_SCHEMA)


def kept(predicate: FilePredicate, files: pa.Table) -> list[str]:
    return predicate.filter(files).column("path").to_pylist()


def matching_rows(predicate: FilePredicate, data: pa.Table) -> list[int]:
    """Indices of the rows where the predicate's row filter holds."""
    indexed = data.append_column("__row", pa.array(range(data.num_rows), pa.int64()))
    return indexed.filter(predicate.row_filter()).column("__row").to_pylist()


def stats(num_records: int, minimum: Mapping[str, Any], maximum: Mapping[str, Any], nulls: Mapping[str, int]) -> dict[str, Any]:
    return {"numRecords": num_records, "minValues": dict(minimum), "maxValues": dict(maximum), "nullCount": dict(nulls)}


SCHEMA = pa.schema(
    [
        ("region", pa.string()),
        ("id", pa.int64()),
        ("name", pa.string()),
        ("price", pa.float64()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("flag", pa.bool_()),
        ("amount", pa.decimal128(10, 2)),
        ("s", pa.struct([("a", pa.int64()), ("b", pa.string())])),
    ]
)


def pred(sql: str, partition_columns: Sequence[str] = ("region",), schema: pa.Schema = SCHEMA, **kw: Any) -> FilePredicate:
    return FilePredicate(sql, schema, partition_columns, **kw)


# Three files: ids 1..5 in EU, 11..20 in US, and ids 8..12 in EU with every name NULL.
BASIC = files_table(
    [
        ({"region": "EU"}, stats(5, {"id": 1, "name": "apple"}, {"id": 5, "name": "cherry"}, {"id": 0, "name": 1})),
        ({"region": "US"}, stats(10, {"id": 11, "name": "kiwi"}, {"id": 20, "name": "plum"}, {"id": 0, "name": 0})),
        ({"region": "EU"}, stats(5, {"id": 8}, {"id": 12}, {"id": 0, "name": 5})),
    ]
)

