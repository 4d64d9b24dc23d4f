"""txnlog.spark.read_changes: Spark's Parquet reader over the same change files, the same rows
as Table.changes and deltalake's load_cdf."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import txnlog
import txnlog.spark as ts

pytestmark = pytest.mark.spark

COLUMNS = {
    "cdf-table": ["id", "name", "birthday"],
    "cdf-table-with-cdc-and-dvs": ["id", "comment"],
}


def _rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in table.select(columns).to_pylist())


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_read_changes_equals_table_changes_and_deltalake(spark: Any, conformance_dir: Path, tmp_path: Path, name: str) -> None:
    uri = str(tmp_path / name)
    shutil.copytree(conformance_dir / "tables" / name, uri)
    columns = [*COLUMNS[name], "_change_type", "_commit_version"]
    df = ts.read_changes(spark, uri, 0)
    assert [f.name for f in df.schema.fields] == [*COLUMNS[name], "_change_type", "_commit_version", "_commit_timestamp"]
    got = df.toArrow()
    ours = txnlog.Table(uri).changes(0)
    theirs = pa.table(DeltaTable(uri).load_cdf(starting_version=0).read_all())
    assert _rows(got, columns) == _rows(ours, columns) == _rows(theirs, columns)
    stamps = got.select(["_commit_version", "_commit_timestamp"]).to_pylist()
    expected = {r["_commit_version"]: r["_commit_timestamp"] for r in ours.to_pylist()}
    assert all(r["_commit_timestamp"] == expected[r["_commit_version"]] for r in stamps)


def test_read_changes_of_an_empty_range_and_errors(spark: Any, conformance_dir: Path) -> None:
    uri = str(conformance_dir / "tables" / "cdf-table")
    df = ts.read_changes(spark, uri, 1, 1)
    assert df.count() == txnlog.Table(uri).changes(1, 1).num_rows
    with pytest.raises(txnlog.errors.VersionNotFoundError):
        ts.read_changes(spark, uri, 99)
