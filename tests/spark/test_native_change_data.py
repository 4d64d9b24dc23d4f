"""Change data files written by Spark's own Parquet writer (issue 26): the change feed the DML
writes natively (UPDATE, DELETE, MERGE; copy-on-write and with deletion vectors) is the one the
Python tasks write, version by version, on unpartitioned, partitioned and column-mapped tables;
its cdc files live in a job directory below ``_change_data/``; txnlog's Spark reader,
delta-spark and deltalake read them; a failed or killed job leaves only files vacuum removes, and vacuum keeps a committed
one while its commit is in the log."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txnlog
import txnlog.spark as ts
from tests.conftest import session_confs
from tests.interop.agree import assert_feed_agrees, canonical
from tests.spark.test_native_write import _assert_vacuum_leaves_only_the_table, _history, kill_while_staging, python_tasks
from txnlog.errors import InvalidArgumentError
from txnlog.maintenance import vacuum
from txnlog.spark import SparkJobError
from txnlog.spark.native import NATIVE_WRITE_CONF
from txnlog.spark.tasks import write_change_rows
from txnlog.write import OUTPUT_DIRECTORY

pytestmark = pytest.mark.spark

CDF = {"delta.enableChangeDataFeed": "true"}
DV = {"delta.enableDeletionVectors": "true"}
LAYOUTS = {
    "unpartitioned, copy-on-write": (CDF, []),
    "partitioned, deletion vectors": ({**CDF, **DV}, ["p"]),
    "column mapping id, partitioned": ({**CDF, "delta.columnMapping.mode": "id"}, ["p"]),
    "column mapping name, deletion vectors": ({**CDF, **DV, "delta.columnMapping.mode": "name"}, []),
    "unpartitioned, deletion vectors": ({**CDF, **DV}, []),
}
#: The default suite's layouts; the others (the same writer path as one here: a statement with
#: deletion vectors hands its change rows to the same write as a copy-on-write one) run under ``soak``.
DEFAULT_LAYOUTS = {"unpartitioned, copy-on-write", "column mapping id, partitioned"}


def _cdc_paths(uri: str) -> dict[int, list[str]]:
    """The cdc files each version of the log names."""
    out: dict[int, list[str]] = {}
    for entry in sorted(Path(uri, "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
        out[int(entry.stem)] = [a["cdc"]["path"] for a in actions if "cdc" in a]
    return out


def _is_native(path: str) -> bool:
    parts = path.split("/")
    return parts[0] == "_change_data" and OUTPUT_DIRECTORY.match(parts[1]) is not None


def _changes(table: txnlog.Table, version: int) -> list[dict[str, Any]]:
    rows = table.changes(version, version)
    return canonical(rows.drop_columns(["_commit_timestamp"]))


@pytest.mark.parametrize("layout", [n if n in DEFAULT_LAYOUTS else pytest.param(n, marks=pytest.mark.soak) for n in LAYOUTS])
def test_the_dml_change_feed_is_the_same_natively_as_through_the_python_tasks(delta_spark: Any, tmp_path: Path, layout: str) -> None:
    """Create, append, UPDATE, DELETE, MERGE (scanned in Spark), once natively and once through
    the Python tasks: every version's changes equal, txnlog's Spark reader reads them, the
    native cdc files are Spark's in a job directory below ``_change_data/`` (the Python tasks'
    are ``cdc-*`` files), and delta-spark reads the same feed."""
    properties, partition_by = LAYOUTS[layout]
    native, python = str(tmp_path / "native"), str(tmp_path / "python")
    _history(delta_spark, native, properties, partition_by)
    with python_tasks(delta_spark):
        _history(delta_spark, python, properties, partition_by)
    native_cdc, python_cdc = _cdc_paths(native), _cdc_paths(python)
    assert all(native_cdc[v] for v in (2, 3, 4)), "UPDATE, DELETE and MERGE wrote cdc files"
    assert all(_is_native(p) for paths in native_cdc.values() for p in paths)
    assert all(not _is_native(p) and p.rsplit("/", 1)[-1].startswith("cdc-") for paths in python_cdc.values() for p in paths)
    native_table, python_table = txnlog.Table(native), txnlog.Table(python)
    assert native_table.latest_version() == python_table.latest_version() == 4
    for version in range(5):
        assert _changes(native_table, version) == _changes(python_table, version), f"version {version}"
    ours = canonical(native_table.changes(0))
    assert canonical(ts.read_changes(delta_spark, native, 0).toArrow()) == ours, "txnlog's Spark reader"
    if not ({"delta.columnMapping.mode", "delta.enableDeletionVectors"} & set(properties)):  # deltalake 1.6 reads neither
        deltalake = pytest.importorskip("deltalake")
        columns = ["id", "p", "s", "v", "_change_type", "_commit_version"]
        theirs = pa.table(deltalake.DeltaTable(native).load_cdf(starting_version=0).read_all()).select(columns)
        assert canonical(theirs) == canonical(native_table.changes(0).select(columns))
    config = native_table.snapshot().table_configuration
    a_file = pq.read_schema(os.path.join(native, native_cdc[2][0]))
    expected = [config.physical_name(n) for n in ("id", "k", "day", "s", "st", "v", "p") if n not in partition_by] + ["_change_type"]
    assert sorted(a_file.names) == sorted(expected), "physical names, no partition column, _change_type under its name"
    assert_feed_agrees(delta_spark, native)


def _change_rows(spark: Any, n: int, kind: str = "'delete'") -> Any:
    return spark.range(0, n, 1, 4).selectExpr("id", "concat('p', id % 2) as p", f"{kind} as _change_type")


def test_a_committed_native_cdc_file_is_kept_by_vacuum_and_a_failed_or_uncommitted_jobs_are_not(spark: Any, tmp_path: Path) -> None:
    """A cdc file in ``_change_data/job-*/`` stays while its commit is in the log; a job that
    failed (a bad ``_change_type``, refused as the Python tasks refuse it, or a row Spark fails
    on) leaves nothing, and one never committed (a driver gone before its commit) leaves only
    orphans vacuum removes."""
    uri = str(tmp_path / "t")
    ts.write(spark.range(0, 10, 1, 2).selectExpr("id", "concat('p', id % 2) as p"), uri, partition_by=["p"], properties=CDF)
    with session_confs(spark, {"spark.txnlog.dml.driverScanCells": "0"}):
        with ts.transaction(spark, uri) as tx:
            tx.delete("id < 3")
    committed = _cdc_paths(uri)[1]
    assert committed and all(_is_native(p) for p in committed)
    ctx = txnlog.WriteContext.for_snapshot(txnlog.Table(uri).snapshot())
    with pytest.raises(InvalidArgumentError, match="_change_type 'deleted' is not one of insert, delete"):
        write_change_rows(_change_rows(spark, 100, "if(id = 42, 'deleted', 'delete')"), ctx)
    with pytest.raises(SparkJobError, match="boom"):
        write_change_rows(_change_rows(spark, 20_000, "if(id = 19999, raise_error('boom'), 'delete')"), ctx)
    left = {str(p.relative_to(uri)) for p in Path(uri, "_change_data").rglob("*") if p.is_file()}
    assert left == set(committed), "a failed job's files are deleted at once"
    orphans = write_change_rows(_change_rows(spark, 100), ctx)
    assert orphans and all(_is_native(f.path) for f in orphans)
    table = txnlog.Table(uri)
    decisions = {d.path: d for d in vacuum(table, retention=0, force=True).decisions}
    assert {decisions[p].reason for p in committed} == {"change-data-in-log"} and not any(decisions[p].delete for p in committed)
    assert all(decisions[f.path].delete and decisions[f.path].reason == "unreferenced" for f in orphans)
    kept = set(table.snapshot().files().column("path").to_pylist()) | {p for p, d in decisions.items() if not d.delete}
    assert {str(p.relative_to(uri)) for p in Path(uri).rglob("*") if p.is_file() and "_delta_log" not in p.parts} == kept
    assert sorted(r["id"] for r in txnlog.Table(uri).changes(1).to_pylist()) == [0, 1, 2]


def test_the_native_path_is_not_taken_when_the_session_says_so(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    ts.write(spark.range(0, 10, 1, 2).selectExpr("id", "concat('p', id % 2) as p"), uri, partition_by=["p"], properties=CDF)
    ctx = txnlog.WriteContext.for_snapshot(txnlog.Table(uri).snapshot())
    with session_confs(spark, {NATIVE_WRITE_CONF: "false"}):
        files = write_change_rows(_change_rows(spark, 10), ctx)
    assert files and not any(_is_native(f.path) for f in files)
    assert all(f.path.startswith("_change_data/p=") and f.path.rsplit("/", 1)[-1].startswith("cdc-") for f in files)


CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[2])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    import txnlog
    from txnlog.spark.tasks import write_change_rows
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    rows = spark.range(0, 400_000_000, 1, 8).selectExpr("id", "repeat(cast(id as string), 8) as s", "'delete' as _change_type")
    write_change_rows(rows, txnlog.WriteContext.for_snapshot(txnlog.Table(sys.argv[1]).snapshot()))
""")


@pytest.mark.soak
def test_a_killed_cdc_job_leaves_only_files_vacuum_removes(spark: Any, tmp_path: Path) -> None:
    """A process writing change rows natively is killed with SIGKILL (its JVM with it) while its
    tasks write into ``_change_data/job-*/_temporary/``: vacuum removes every file it left."""
    uri = str(tmp_path / "t")
    ts.write(spark.range(5).selectExpr("id", "'x' as s"), uri, properties=CDF)
    kill_while_staging(tmp_path, uri, CHILD, "_change_data/job-*/_temporary/**/*.parquet")
    assert txnlog.Table(uri).latest_version() == 0
    _assert_vacuum_leaves_only_the_table(uri)
