"""Helpers shared by the DML tests: DuckDB's delta_scan as an independent reader."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest


def duckdb_rows(uri: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """The rows DuckDB's delta_scan reads at ``uri`` (skips when DuckDB's delta extension is absent)."""
    duckdb = pytest.importorskip("duckdb")
    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("duckdb-ext-delta is not installed (DuckDB cannot download its delta extension here)")
    con = duckdb.connect(config={"extension_directory": str(Path(next(iter(spec.submodule_search_locations))) / "extensions")})
    con.sql("LOAD delta")
    selected = ", ".join(f'"{c}"' for c in columns)
    return [tuple(r) for r in con.sql(f"select {selected} from delta_scan('{uri}')").fetchall()]


def sorted_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda r: tuple((v is None, v if v is not None else 0) for v in r))


def table_rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted_rows([tuple(r[c] for c in columns) for r in table.to_pylist()])
