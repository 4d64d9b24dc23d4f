"""Helpers shared by the DML tests: DuckDB's delta_scan as an independent reader."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tests.duckdb_delta import duckdb_delta


def duckdb_rows(uri: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """The rows DuckDB's delta_scan reads at ``uri`` (skips when DuckDB's delta extension is absent)."""
    con = duckdb_delta()
    selected = ", ".join(f'"{c}"' for c in columns)
    return [tuple(r) for r in con.sql(f"select {selected} from delta_scan('{uri}')").fetchall()]


def sorted_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda r: tuple((v is None, v if v is not None else 0) for v in r))


def table_rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted_rows([tuple(r[c] for c in columns) for r in table.to_pylist()])
