"""OPTIMIZE's one plan, parameters, predicate rule and retry rule, through Python's
``Table.optimize`` (Spark's executor runs the same plan: tests/spark/test_optimize.py)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from tests.dml.conftest import duckdb_rows, sorted_rows
from tests.optimize.hooked import HookedStore
from txnlog import Table
from txnlog.errors import ConcurrentDeleteReadError, InvalidArgumentError, InvalidPredicateError
from txnlog.optimize import OptimizeParameters, plan_optimize, stage_optimize

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.int64())])


def _table(path: Path, properties: dict[str, str] | None = None, files: int = 6) -> Table:
    """``files`` appends of two rows each into partition ``a``, then two into ``b``."""
    table = Table.create(str(path), SCHEMA, partition_by=["part"], properties=properties)
    for k in range(files):
        table.append(pa.table({"id": [2 * k, 2 * k + 1], "part": ["a" if k < files - 2 else "b"] * 2, "v": [k, k]}, schema=SCHEMA))
    return table


def _rows(table: Table) -> list[tuple]:
    return sorted_rows([(r["id"], r["part"], r["v"]) for r in table.snapshot().to_arrow().to_pylist()])


def _delete_first_file(uri: str) -> None:
    """A copy-on-write DELETE of id 0: the file holding ids 0 and 1 is replaced."""
    other = Table(uri)
    with other.transaction("DELETE") as txn:
        txn.remove_files(txn.filter_files("id = 0"))
        txn.write(pa.table({"id": [1], "part": ["a"], "v": [0]}, schema=SCHEMA))


def test_commit_info_carries_delta_sparks_optimize_parameters_and_metrics(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    assert table.optimize("part = 'a'") is not None
    info = table.history(1)[0].commit_info
    assert info.operation == "OPTIMIZE"
    assert info.operation_parameters == {"predicate": orjson.dumps(["part = 'a'"]).decode(), "zOrderBy": "[]", "clusterBy": "[]", "auto": "false"}
    metrics = info.operation_metrics
    assert {"numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes", "minFileSize", "p25FileSize",
            "p50FileSize", "p75FileSize", "maxFileSize", "numDeletionVectorsRemoved"} <= set(metrics)
    assert (metrics["numRemovedFiles"], metrics["numAddedFiles"]) == ("4", "1")
    assert metrics["minFileSize"] == metrics["maxFileSize"] == metrics["numAddedBytes"]


def test_the_predicate_may_name_partition_columns_only(tmp_path: Path) -> None:
    """One rule for Python and Spark (delta-spark's OPTIMIZE ... WHERE): Python's OPTIMIZE used
    to take any predicate and compact the files whose stats might match it."""
    table = _table(tmp_path / "t")
    with pytest.raises(InvalidPredicateError, match=r"partition columns only.*\['id'\]"):
        table.optimize("id < 3")
    assert table.latest_version() == 6


def test_target_size_decides_the_bins(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", files=8)  # 6 small files in a, 2 in b
    size = max(table.snapshot().files().column("size").to_pylist())
    plan = plan_optimize(table.snapshot(), OptimizeParameters(target_size=3 * size))
    assert [b.num_rows for b in plan.bins] == [3, 3, 2]  # a in two bins of three, b in one
    before = _rows(table)
    assert table.optimize(target_size=3 * size, max_concurrent_tasks=2) is not None
    metrics = table.history(1)[0].commit_info.operation_metrics
    assert (metrics["numBins"], metrics["numRemovedFiles"], metrics["numAddedFiles"]) == ("3", "8", "3")
    assert _rows(table) == before == sorted_rows(duckdb_rows(table.uri, ["id", "part", "v"]))
    assert table.optimize(target_size=1) is None  # no file is smaller than one byte


@pytest.mark.parametrize("arguments", [{"target_size": 0}, {"max_concurrent_tasks": 0}, {"min_files": 0}])
def test_bad_arguments_are_refused_before_anything_is_read(tmp_path: Path, arguments: dict[str, int]) -> None:
    table = _table(tmp_path / "t")
    with pytest.raises(InvalidArgumentError, match=next(iter(arguments))):
        table.optimize(**arguments)


def test_optimize_records_the_files_it_read(tmp_path: Path) -> None:
    """A concurrent DELETE of a file being compacted is a delete/read conflict, as delta-spark's
    OPTIMIZE (``trackFilesRead``) reports it; it was a delete/delete conflict."""
    uri = str(tmp_path / "t")
    table = _table(tmp_path / "t")
    txn = table.transaction("OPTIMIZE")
    assert stage_optimize(txn, OptimizeParameters()).changed
    _delete_first_file(uri)
    with pytest.raises(ConcurrentDeleteReadError, match="a file this transaction read"):
        txn.commit()


def test_a_conflicting_commit_makes_python_optimize_replan(tmp_path: Path) -> None:
    """The retry rule Spark's OPTIMIZE always had: Python's raised the conflict instead."""
    uri = str(tmp_path / "t")
    _table(tmp_path / "t")
    expected = [r for r in _rows(Table(uri)) if r[0] != 0]
    hooked = Table(uri, store=HookedStore(uri, lambda: _delete_first_file(uri)))
    version = hooked.optimize()
    assert version is not None
    history = Table(uri).history(2)
    assert [h.commit_info.operation for h in history] == ["OPTIMIZE", "DELETE"]
    assert _rows(Table(uri)) == expected == sorted_rows(duckdb_rows(uri, ["id", "part", "v"]))
    assert Table(uri).snapshot().num_files == 2  # one file per partition: the replanned bins held the DELETE's file
