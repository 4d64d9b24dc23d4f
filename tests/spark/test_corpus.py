"""txnlog.spark.read over the conformance corpus (../shared/conformance): every readable table
and version, including the deletion-vector and column-mapping tables.

Expected answers: delta-rs's row count (``expected/<table>.json``, latest version) where it
answered. Where it did not (deletion vectors, which delta-rs refuses), and for older versions,
the count is derived independently of Spark and of txnlog's reader: the rows in the Parquet
footers of the version's live files (delta-rs's file list) minus the cardinality of their
deletion vectors, and the deleted rows themselves are checked to be absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest

import txnlog
import txnlog.spark as ts

pytestmark = pytest.mark.spark


def conformance_cases(root: Path, test_name: str) -> list[Any]:
    """One case per table; every version of the tables with deletion vectors or column mapping
    (the reader's hard cases), the latest version of the others (all their versions under soak)."""
    out = []
    for path in sorted((root / "expected").glob("*.json")):
        record = json.loads(path.read_text())
        if "error" in record:
            continue
        if test_name == "test_spark_read_every_version":
            out.append(pytest.param((record["table"], record), id=record["table"], marks=pytest.mark.soak))
        else:
            out.append(pytest.param((record["table"], record), id=record["table"]))
    return out


def _hard_case(record: dict[str, Any]) -> bool:
    text = json.dumps(record.get("versions", {}))
    return "deletionVectors" in text or "columnMapping" in text


def _readable_versions(table_dir: Path, record: dict[str, Any]) -> dict[int, list[str]]:
    """Version -> live file paths, for the versions delta-rs listed whose data files are all on
    disk (some corpus tables were vacuumed on purpose; reading those is not a reader question)."""
    out = {}
    for v, entry in record.get("versions", {}).items():
        if "files" not in entry:
            continue
        if all((table_dir / unquote(p)).exists() for p in entry["files"]):
            out[int(v)] = entry["files"]
    return out


def _footer_rows(table_dir: Path, snapshot: txnlog.Snapshot) -> int:
    files = snapshot.files()
    rows = sum(pq.ParquetFile(table_dir / unquote(p)).metadata.num_rows for p in files.column("path").to_pylist())
    dvs = files.column("deletion_vector").to_pylist()
    return rows - sum(d["cardinality"] for d in dvs if d is not None)


def test_spark_read_matches_delta_rs(spark: Any, conformance_case: Any, conformance_dir: Path) -> None:
    name, record = conformance_case
    _check_versions(spark, conformance_dir, name, record, every=False)


def test_spark_read_every_version(spark: Any, conformance_case: Any, conformance_dir: Path) -> None:
    name, record = conformance_case
    _check_versions(spark, conformance_dir, name, record, every=True)


def _check_versions(spark: Any, conformance_dir: Path, name: str, record: dict[str, Any], *, every: bool) -> None:
    table_dir = conformance_dir / "tables" / name
    versions = _readable_versions(table_dir, record)
    if versions and not every:
        # The latest version; for a table with deletion vectors or column mapping also its
        # first and two in between (every version runs under soak).
        ordered = sorted(versions)
        keep = {ordered[-1]}
        if _hard_case(record):
            keep |= {ordered[0], ordered[len(ordered) // 3], ordered[2 * len(ordered) // 3]}
        versions = {v: versions[v] for v in keep}
    if not versions:
        pytest.skip(f"no version of {name} has all its data files (delta-rs: {record.get('num_rows_error', '')[:80]})")
    table = txnlog.Table(table_dir)
    for version, paths in sorted(versions.items()):
        snap = table.snapshot(version)
        assert sorted(snap.files().column("path").to_pylist()) == sorted(paths)
        df = ts.read(spark, str(table_dir), version=version)
        count = df.count()
        assert count == _footer_rows(table_dir, snap), f"{name}@v{version}"
        if version == record["latest_version"] and "num_rows" in record:
            assert count == record["num_rows"], f"{name}@v{version}: delta-rs counts {record['num_rows']}"
        logical = [f.name for f in snap.schema]
        assert df.columns == logical


def test_deletion_vectors_hide_exactly_the_deleted_rows(spark: Any, conformance_dir: Path) -> None:
    """table-with-dv-small: v0 holds values 0..9; v1's DELETE of value IN (0, 9) is a DV."""
    table_dir = conformance_dir / "tables" / "table-with-dv-small"
    if not table_dir.exists():
        pytest.skip("corpus table table-with-dv-small is absent")
    before = sorted(r[0] for r in ts.read(spark, str(table_dir), version=0).collect())
    after = sorted(r[0] for r in ts.read(spark, str(table_dir)).collect())
    assert before == list(range(10))
    assert after == list(range(1, 9))


def test_column_mapping_reads_logical_names_and_partition_values(spark: Any, conformance_dir: Path) -> None:
    table_dir = conformance_dir / "tables" / "table_with_column_mapping"
    if not table_dir.exists():
        pytest.skip("corpus table table_with_column_mapping is absent")
    snap = txnlog.Table(table_dir).snapshot()
    df = ts.read(spark, str(table_dir))
    assert df.columns == [f.name for f in snap.schema]
    rows = df.collect()
    assert len(rows) == 5
    for column in df.columns:  # physical names would read as all-null columns
        assert any(r[column] is not None for r in rows), column
