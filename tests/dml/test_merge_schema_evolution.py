"""MERGE with schema evolution (``schema_mode="merge"``, delta-spark's autoMerge): a ``*`` clause
brings the source's new columns into the table in the MERGE's own commit, through the one place
that decides schema changes. (delta-spark agrees: tests/test_schema_delta_spark.py.)"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.dml.conftest import duckdb_rows, sorted_rows
from txnlog import Table
from txnlog.errors import InvalidArgumentError

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _table(path: Path) -> Table:
    table = Table.create(str(path), SCHEMA)
    table.append(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    return table


def _rows(table: Table) -> list[tuple]:
    return sorted_rows([tuple(r.values()) for r in table.snapshot().to_arrow().to_pylist()])


def test_update_and_insert_star_add_the_sources_new_columns(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    source = pa.table({"id": [2, 3], "v": ["B", "C"], "extra": [20, 30]})
    version = table.merge(source, "id", when_matched_update="*", when_not_matched_insert="*", schema_mode="merge")
    assert version is not None and table.latest_version() == 2  # the schema change is the MERGE's commit
    assert table.snapshot().schema.names == ["id", "v", "extra"]
    assert _rows(table) == [(1, "a", None), (2, "B", 20), (3, "C", 30)] == sorted_rows(duckdb_rows(table.uri, ["id", "v", "extra"]))
    assert table.history(1)[0].commit_info.operation == "MERGE"

    # A source without a target column: UPDATE SET * keeps it, INSERT * leaves it NULL.
    table.merge(pa.table({"id": [1, 4], "extra": [10, 40]}), "id", when_matched_update="*", when_not_matched_insert="*", schema_mode="merge")
    assert _rows(table) == [(1, "a", 10), (2, "B", 20), (3, "C", 30), (4, None, 40)]


def test_without_schema_mode_the_new_columns_are_left_out(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    table.merge(pa.table({"id": [3], "v": ["c"], "extra": [1]}), "id", when_not_matched_insert="*")
    assert table.snapshot().schema.names == ["id", "v"]
    with pytest.raises(InvalidArgumentError, match="needs every target column"):
        table.merge(pa.table({"id": [1], "extra": [1]}), "id", when_matched_update="*")


def test_only_a_star_clause_evolves_the_schema(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    table.merge(pa.table({"id": [1], "extra": [1]}), "id", when_matched_update={"v": "'x'"}, schema_mode="merge")
    assert table.snapshot().schema.names == ["id", "v"]
    assert _rows(table) == [(1, "x"), (2, "b")]


def test_the_builder_evolves_too(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    builder = table.merge(pa.table({"id": [5], "v": ["e"], "n": [1.5]}), "id", schema_mode="merge")
    builder.when_not_matched_insert_all().execute()
    assert _rows(table) == [(1, "a", None), (2, "b", None), (5, "e", 1.5)]
    version = table.latest_version()
    source = pa.table({"id": pa.array([6], pa.int64()), "req": pa.array([1], pa.int64())},
                      schema=pa.schema([("id", pa.int64()), pa.field("req", pa.int64(), nullable=False)]))
    table.merge(source, "id", when_not_matched_insert="*", schema_mode="merge")  # added nullable, as every write adds it
    assert table.snapshot().schema.field("req").nullable
    assert table.latest_version() == version + 1
    with pytest.raises(InvalidArgumentError, match="schema_mode"):
        table.merge(source, "id", when_not_matched_insert="*", schema_mode="overwrite")
