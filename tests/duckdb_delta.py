"""DuckDB with its delta extension (delta_scan, on delta-kernel-rs): an independent reader that,
unlike deltalake 1.6, reads tables with deletion vectors."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest


def duckdb_delta() -> Any:
    """A DuckDB connection with the delta extension loaded; the test skips when DuckDB or the
    extension's package is absent (DuckDB cannot download extensions here)."""
    duckdb = pytest.importorskip("duckdb")
    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("duckdb-ext-delta is not installed (DuckDB cannot download its delta extension here)")
    con = duckdb.connect(config={"extension_directory": str(Path(next(iter(spec.submodule_search_locations))) / "extensions")})
    con.sql("LOAD delta")
    return con
