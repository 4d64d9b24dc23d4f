"""The readers the README names read txnlog's tables: Polars (``read_delta``) and DuckDB
(``delta_scan``), besides delta-rs (tests/txn/test_interop_deltalake.py).

Each table is built with txnlog's public API: partitioned with NULL and escaped partition
values, copy-on-write deletes (removes in the log), a checkpoint with the JSON commits it covers
deleted, and column mapping in name mode. Rows are checked against what the test wrote.

DuckDB's delta extension cannot be downloaded at run time here; its PyPI wheel
(``duckdb-ext-delta``, built for duckdb 1.4.4) is loaded from its extension directory.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.duckdb_delta import duckdb_delta
from txnlog import Table
from txnlog.log.checkpoint_writer import write_checkpoint

from .txn.test_interop_deltalake import (
    copy_on_write,
    drop_commits_through,
    read_rows,
    sorted_rows,
)

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("day", pa.date32()),
        ("amount", pa.float64()),
        ("note", pa.string()),
    ]
)


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    regions = ["EU", "US/West", "a b=c", None]
    return pa.table(
        {
            "id": ids,
            "region": [regions[i % len(regions)] for i in ids],
            "day": [dt.date(2024, 1, 1 + i % 5) for i in ids],
            "amount": [None if i % 7 == 0 else i * 1.25 for i in ids],
            "note": [f"n{i}" for i in ids],
        },
        schema=SCHEMA,
    )


def _without(rows: pa.Table, drop: Callable[[dict[str, Any]], bool]) -> pa.Table:
    return rows.filter(pa.array([not drop(r) for r in rows.to_pylist()], pa.bool_()))


def _deleted(row: dict[str, Any]) -> bool:
    return row["region"] == "EU" and row["id"] % 3 == 0


def _build(path: Path, kind: str) -> list[dict[str, Any]]:
    """A table of the given kind at ``path``; returns the rows it must hold."""
    properties = {"delta.columnMapping.mode": "name"} if kind == "column-mapping" else None
    partition_by = ["region"] if kind in ("partitioned", "checkpointed") else []
    table = Table.create(path, SCHEMA, partition_by=partition_by, properties=properties)
    expected = pa.concat_tables([_rows(0, 40), _rows(100, 25)])
    table.append(_rows(0, 40))
    table.append(_rows(100, 25))
    if kind != "column-mapping":
        # DELETE WHERE region = 'EU' AND id % 3 = 0, copy-on-write.
        copy_on_write(table, "region = 'EU'", lambda rows: _without(rows, _deleted), "DELETE")
        expected = _without(expected, _deleted)
    if kind == "checkpointed":
        write_checkpoint(table.snapshot())
        drop_commits_through(path, table.latest_version() - 1)
        table.append(_rows(200, 8))
        expected = pa.concat_tables([expected, _rows(200, 8)])
    if kind != "column-mapping":
        # The rows the log names really are these (read with plain pyarrow).
        assert sorted_rows(read_rows(table, table.snapshot().files(), SCHEMA)) == sorted_rows(expected)
    return sorted_rows(expected)


KINDS = ["unpartitioned", "partitioned", "checkpointed", "column-mapping"]


def _normalized(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        day = r["day"]
        out.append({**r, "day": day.date() if isinstance(day, dt.datetime) else day})
    return sorted_rows(out)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "column-mapping"])
def test_polars_reads_txnlog_tables(tmp_path: Path, kind: str) -> None:
    pl = pytest.importorskip("polars")
    expected = _build(tmp_path / "t", kind)
    frame = pl.read_delta(str(tmp_path / "t"))
    assert _normalized(frame.select(SCHEMA.names).to_dicts()) == expected


def test_polars_refuses_column_mapped_tables_itself(tmp_path: Path) -> None:
    """Polars (2.1) refuses every table of reader version 2 (column mapping), whoever wrote it;
    the README says so. When Polars lifts that limit this test fails: update the README."""
    pl = pytest.importorskip("polars")
    _build(tmp_path / "t", "column-mapping")
    with pytest.raises(Exception, match="column mapping"):
        pl.read_delta(str(tmp_path / "t"))



@pytest.mark.parametrize("kind", KINDS)
def test_duckdb_reads_txnlog_tables(tmp_path: Path, kind: str) -> None:
    con = duckdb_delta()
    expected = _build(tmp_path / "t", kind)
    columns = ", ".join(f'"{n}"' for n in SCHEMA.names)
    rows = con.sql(f"SELECT {columns} FROM delta_scan('{tmp_path / 't'}')").fetch_arrow_table()
    assert _normalized(rows.to_pylist()) == expected
