"""OPTIMIZE on tables with deletion vectors: a file whose vector deletes more than the threshold
of its rows is rewritten whatever its size, one below it is not; ``purge_deletion_vectors``
rewrites every file with a vector (delta-spark's REORG ... APPLY (PURGE)) and leaves none. Both
commit dataChange=false, and txnlog and DuckDB read the same rows before and after; RESTORE to
before the purge brings the vectors back. Also on delta-spark's DV tables from the corpus."""

from __future__ import annotations

import shutil

import orjson
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyroaring")

import txnlog  # noqa: E402
from tests.dv_tables import (  # noqa: E402
    DV_PROPERTIES,
    SCHEMA,
    delete_where,
    duckdb_ids,
    duckdb_rows,
    dv_files,
    live_dv_files,
    txnlog_ids,
    txnlog_rows,
)
from txnlog.errors import InvalidArgumentError  # noqa: E402
from txnlog.log.filenames import commit_path  # noqa: E402
from txnlog.maintenance import restore, vacuum  # noqa: E402
from txnlog.optimize import plan_bins  # noqa: E402
from txnlog.spark.optimize import optimize  # noqa: E402

DV_TYPE = pa.struct(
    [
        ("storage_type", pa.string()),
        ("path_or_inline_dv", pa.string()),
        ("offset", pa.int32()),
        ("size_in_bytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("max_row_index", pa.int64()),
    ]
)


def _files(rows: list[tuple[str, int, int | None, int | None]]) -> pa.Table:
    """(path, size, numRecords or None, deleted rows or None: no vector) per file, one partition."""
    return pa.table(
        {
            "path": [r[0] for r in rows],
            "partition_values": pa.array([[("p", "1")]] * len(rows), pa.map_(pa.string(), pa.string())),
            "size": [r[1] for r in rows],
            "stats": [None if r[2] is None else orjson.dumps({"numRecords": r[2]}).decode() for r in rows],
            "deletion_vector": pa.array(
                [None if r[3] is None else {"storage_type": "i", "path_or_inline_dv": "x", "size_in_bytes": 1, "cardinality": r[3]} for r in rows],
                DV_TYPE,
            ),
        }
    )


def _paths(bins: list[pa.Table]) -> list[list[str]]:
    return [b.column("path").to_pylist() for b in bins]


def test_plan_bins_rewrites_big_files_past_the_deleted_rows_ratio():
    files = _files(
        [
            ("big-6pct", 1000, 100, 6),
            ("big-5pct", 1000, 100, 5),  # exactly the ratio: not more than it
            ("big-1pct", 1000, 100, 1),
            ("big-no-stats", 1000, None, 1),
            ("big-clean", 1000, 100, None),
        ]
    )
    assert _paths(plan_bins(files, target_file_size=100)) == [["big-6pct"], ["big-no-stats"]]
    assert _paths(plan_bins(files, target_file_size=100, max_deleted_rows_ratio=0.0)) == [["big-6pct"], ["big-5pct"], ["big-1pct"], ["big-no-stats"]]
    # A vector on a file whose row count is unknown always counts as past the ratio.
    assert _paths(plan_bins(files, target_file_size=100, max_deleted_rows_ratio=1.0)) == [["big-no-stats"]]
    with pytest.raises(InvalidArgumentError):
        plan_bins(files, target_file_size=100, max_deleted_rows_ratio=1.5)


def test_plan_bins_purge_takes_exactly_the_files_with_vectors():
    files = _files([("small-clean", 10, 100, None), ("small-dv", 20, 100, 1), ("big-dv", 1000, 100, 1), ("big-clean", 1000, 100, None)])
    assert _paths(plan_bins(files, target_file_size=100, purge_deletion_vectors=True)) == [["small-dv"], ["big-dv"]]
    # Without purging, the two small files are packed together and the big 1% file stays.
    assert _paths(plan_bins(files, target_file_size=100)) == [["small-clean", "small-dv"]]


def _dv_table(uri: str) -> txnlog.Table:
    """Four files of 100 rows (ids 0..399, file k holds 100k..100k+99)."""
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["part"], properties=DV_PROPERTIES)
    for start in range(0, 400, 100):
        table.append(pa.table({"id": list(range(start, start + 100)), "part": ["a"] * 100}, schema=SCHEMA))
    return table


def _commit(table: txnlog.Table, version: int) -> list[dict]:
    return [orjson.loads(line) for line in table.store.read(commit_path(version)).splitlines() if line.strip()]


def _vector_files_by_path(snapshot: txnlog.Snapshot) -> dict[str, int | None]:
    files = snapshot.files()
    return {
        p: None if d is None else d["cardinality"]
        for p, d in zip(files.column("path").to_pylist(), files.column("deletion_vector").to_pylist())
    }


def test_optimize_rewrites_files_past_the_threshold_then_purge_removes_every_vector(spark, tmp_path):
    uri = str(tmp_path / "t")
    table = _dv_table(uri)
    delete_where(table, lambda v: v < 10)  # file 0: 10% deleted
    delete_where(table, lambda v: v == 150)  # file 1: 1% deleted
    delete_where(table, lambda v: 200 <= v < 206)  # file 2: 6% deleted
    before = table.snapshot()
    by_path = _vector_files_by_path(before)
    over = {p for p, n in by_path.items() if n in (10, 6)}
    under = {p for p, n in by_path.items() if n == 1}
    expected = [v for v in range(400) if not (v < 10 or v == 150 or 200 <= v < 206)]
    assert txnlog_ids(table) == duckdb_ids(uri) == expected

    # No file is small (target 1 byte): only the ratio picks files.
    result = optimize(spark, uri, target_file_size=1)
    actions = _commit(table, result.version)
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    adds = [a["add"] for a in actions if "add" in a]
    assert removed == over
    assert all(a["remove"]["dataChange"] is False for a in actions if "remove" in a)
    assert all(a["dataChange"] is False and a.get("deletionVector") is None for a in adds)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE" and info["operationMetrics"]["numDeletionVectorsRemoved"] == "2"
    after = table.snapshot()
    assert not (set(after.files().column("path").to_pylist()) & over)
    assert {p for p, n in _vector_files_by_path(after).items() if n is not None} == under
    assert txnlog_ids(table) == duckdb_ids(uri) == expected

    # A table property sets the threshold: at 0.5, nothing is worth rewriting.
    with table.transaction("SET TBLPROPERTIES") as txn:
        txn.update_metadata(configuration={**after.configuration, "txnlog.optimize.maxDeletedRowsRatio": "0.5"})
    assert optimize(spark, uri, target_file_size=1).version is None
    with table.transaction("SET TBLPROPERTIES") as txn:
        txn.update_metadata(configuration={**after.configuration, "txnlog.optimize.maxDeletedRowsRatio": "0"})
    assert optimize(spark, uri, target_file_size=1, max_deleted_rows_ratio=0.5).version is None

    # Purge: every file with a vector is rewritten, whatever the threshold; none is left.
    purge = optimize(spark, uri, target_file_size=1 << 30, purge_deletion_vectors=True, max_deleted_rows_ratio=1.0)
    actions = _commit(table, purge.version)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "REORG" and orjson.loads(info["operationParameters"]["applyPurge"]) is True
    assert {a["remove"]["path"] for a in actions if "remove" in a} == under
    assert all(a.get("add", a.get("remove", {})).get("dataChange", False) is False for a in actions if "add" in a or "remove" in a)
    purged = table.snapshot()
    assert purged.files().column("deletion_vector").null_count == purged.num_files
    assert live_dv_files(purged) == set()
    assert txnlog_ids(table) == duckdb_ids(uri) == expected
    assert optimize(spark, uri, purge_deletion_vectors=True).version is None  # nothing left to purge

    # RESTORE to before the purge: the vectors come back with their files.
    restore(table, version=purge.version - 1)
    assert {p for p, n in _vector_files_by_path(table.snapshot()).items() if n is not None} == under
    assert txnlog_ids(table) == duckdb_ids(uri) == expected

    # Restore to before the first delete: every row is back, no vector is live.
    restore(table, version=4)
    assert live_dv_files(table.snapshot()) == set()
    assert txnlog_ids(table) == duckdb_ids(uri) == list(range(400))
    assert dv_files(table)  # still needed by retained versions: vacuum keeps them
    vacuum(table, retention="0s", force=True)
    assert dv_files(table)


@pytest.mark.parametrize("name", ["table-with-dv-small", "table_with_deletion_logs"])
def test_purge_on_delta_spark_tables(spark, tmp_path, conformance_dir, name):
    copy = tmp_path / name
    shutil.copytree(conformance_dir / "tables" / name, copy)
    uri = str(copy)
    table = txnlog.Table(uri)
    before = table.snapshot()
    columns = [f.name for f in before.schema]
    rows_before = txnlog_rows(table, columns)
    assert rows_before == duckdb_rows(uri, columns)
    assert before.files().column("deletion_vector").null_count < before.num_files
    result = optimize(spark, uri, purge_deletion_vectors=True)
    assert result.version is not None
    after = table.snapshot()
    assert after.files().column("deletion_vector").null_count == after.num_files
    assert txnlog_rows(table, columns) == duckdb_rows(uri, columns) == rows_before


def test_a_concurrent_delete_by_vector_makes_the_purge_replan(spark, tmp_path):
    """A DELETE that grows the vector of a file being purged lands between the purge's plan and
    its commit: the purge must not commit its copy of the file (the newly deleted rows would come
    back); it re-plans from the new snapshot and purges the new vector."""
    from tests.optimize.hooked import HookedStore

    uri = str(tmp_path / "t")
    table = _dv_table(uri)
    delete_where(table, lambda v: v < 10)
    hooked = txnlog.Table(uri, store=HookedStore(uri, lambda: delete_where(txnlog.Table(uri), lambda v: v in (10, 11))))
    result = optimize(spark, hooked, purge_deletion_vectors=True)
    assert result.attempts == 2 and len(result.conflicts) == 1
    assert live_dv_files(table.snapshot()) == set()
    assert txnlog_ids(table) == duckdb_ids(uri) == list(range(12, 400))


def test_compact_job_purges_deletion_vectors(spark, tmp_path, capsys):
    from spark_jobs import compact
    from spark_jobs._common import FAILED, OK

    uri = str(tmp_path / "t")
    table = _dv_table(uri)
    delete_where(table, lambda v: v % 50 == 0)  # 2% of every file: under the default ratio
    assert compact.main(["--table", uri, "--target-file-size", "1"], spark=spark) == OK
    assert "nothing to compact" in capsys.readouterr().out
    assert compact.main(["--table", uri, "--max-deleted-rows-ratio", "7"], spark=spark) == FAILED
    assert compact.main(["--table", uri, "--purge-deletion-vectors"], spark=spark) == OK
    assert "4 files" in capsys.readouterr().out
    assert live_dv_files(table.snapshot()) == set()
    assert txnlog_ids(table) == duckdb_ids(uri) == [v for v in range(400) if v % 50]
