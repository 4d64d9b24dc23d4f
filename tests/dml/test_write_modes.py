"""Table.write: every mode through the core write planner, with the change data each records
(equal to a model of its row changes, and to what deltalake's change reader reads), and the
behaviour the planner owns for every engine: app-id idempotency, schema checks, empty commits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import txnlog
from tests import write_modes_model as model
from txnlog.errors import ProtocolViolationError, TableAlreadyExistsError

LAYOUTS = {
    "partitioned": ({}, ["p"]),
    "unpartitioned": ({}, None),
    "partitioned-dv": ({"delta.enableDeletionVectors": "true"}, ["p"]),
    "unpartitioned-dv": ({"delta.enableDeletionVectors": "true"}, None),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_change_feed_of_every_write_mode_equals_the_model(tmp_path: Path, layout: str) -> None:
    properties, partition_by = LAYOUTS[layout]
    uri = str(tmp_path / "t")
    table = txnlog.Table(uri)

    def write(rows: list[model.Row], mode: str, replace_where: str | None) -> Any:
        return table.write(model.rows_table(rows), mode=mode, replace_where=replace_where, partition_by=partition_by,
                           properties={"delta.enableChangeDataFeed": "true", **properties})

    expected = model.run(uri, write)
    assert model.all_changes(table.changes(0)) == model.expected_all(expected)
    if "dv" not in layout:  # an independent change reader
        theirs = pa.table(DeltaTable(uri).load_cdf(starting_version=0).read_all())
        assert model.all_changes(theirs.select(["id", "p", "v", "_change_type", "_commit_version"])) == model.expected_all(expected)


def test_modes_error_ignore_and_idempotent_app_versions(tmp_path: Path) -> None:
    table = txnlog.Table(str(tmp_path / "t"))
    assert table.write(model.rows_table([(1, "x", 1)]), mode="error") == 0
    with pytest.raises(TableAlreadyExistsError):
        table.write(model.rows_table([(2, "x", 2)]), mode="error")
    assert table.write(model.rows_table([(2, "x", 2)]), mode="ignore") is None
    assert table.append(model.rows_table([(3, "x", 3)]), app_id="job", app_version=5) == 1
    assert table.append(model.rows_table([(4, "x", 4)]), app_id="job", app_version=5) is None  # a replay
    assert table.write(model.rows_table([(4, "x", 4)]), app_id="job", app_version=4) is None  # an older one
    assert table.append(pa.table({"id": pa.array([], pa.int64())})) is None  # no rows: no commit
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [1, 3]
    assert table.snapshot().app_transaction_version("job") == 5


def test_every_written_row_must_match_replace_where_and_nothing_is_committed_otherwise(tmp_path: Path) -> None:
    table = txnlog.Table(str(tmp_path / "t"))
    table.write(model.rows_table([(1, "x", 1), (2, "y", 2)]), partition_by=["p"])
    with pytest.raises(ProtocolViolationError, match="replaceWhere"):
        table.write(model.rows_table([(3, "y", 3)]), mode="overwrite", replace_where="p = 'x'")
    assert table.latest_version() == 0


def test_merge_schema_adds_the_new_columns(tmp_path: Path) -> None:
    table = txnlog.Table(str(tmp_path / "t"))
    table.write(pa.table({"id": [1]}))
    table.write(pa.table({"id": [2], "name": ["b"]}), merge_schema=True)
    assert table.snapshot().schema.names == ["id", "name"]
    assert sorted(table.snapshot().to_arrow().to_pylist(), key=lambda r: r["id"]) == [{"id": 1, "name": None}, {"id": 2, "name": "b"}]


def test_a_dynamic_partition_overwrite_replaces_only_the_partitions_it_writes(tmp_path: Path) -> None:
    table = txnlog.Table(str(tmp_path / "t"))
    table.write(model.rows_table([(1, "x", 1), (2, "y", 2), (3, "z", 3), (4, "x", 4)]), partition_by=["p"],
                properties={"delta.enableChangeDataFeed": "true"})
    version = table.write(model.rows_table([(10, "x", 10), (11, "z", 11)]), mode="overwrite", partition_overwrite_mode="dynamic")
    assert version == 1
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [2, 10, 11]
    assert model.changes_of(table.changes(1, 1)) == model.changes_of(pa.Table.from_pylist(
        [{"id": i, "p": p, "v": i, "_change_type": kind} for i, p, kind in
         [(1, "x", "delete"), (4, "x", "delete"), (3, "z", "delete"), (10, "x", "insert"), (11, "z", "insert")]]))
    assert table.write(model.rows_table([]), mode="overwrite", partition_overwrite_mode="dynamic") is None  # no partition written
    with pytest.raises(txnlog.errors.InvalidArgumentError, match="dynamic"):
        table.write(model.rows_table([(5, "x", 5)]), mode="overwrite", replace_where="p = 'x'", partition_overwrite_mode="dynamic")
