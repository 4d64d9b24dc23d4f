"""Conformance corpus tables txnlog reads export, and pyiceberg reads back the same rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txnlog
from txnlog.errors import TxnLogError
from txnlog.file_facts import is_column_mapped, parse_partition_values, physical_name
from txnlog.iceberg import export

from .helpers import delta_rows, iceberg_rows, local_path, same_rows


def _rows_from_files(snap: txnlog.snapshot.Snapshot) -> pa.Table:
    """The table's rows read straight from its Parquet files by physical name (deltalake 1.6.6
    reads a column-mapped column with a space in its name as all nulls)."""
    mapped = is_column_mapped(snap.configuration)
    files = snap.files()
    parts = parse_partition_values(files, snap.schema, snap.partition_columns, snap.configuration)
    out = []
    for i, path in enumerate(files.column("path").to_pylist()):
        data = pq.read_table(local_path(snap.locate(path).uri), coerce_int96_timestamp_unit="us")
        columns = {}
        for f in snap.schema:
            if f.name in snap.partition_columns:
                columns[f.name] = pa.repeat(parts.column(f.name)[i], data.num_rows)
            else:
                columns[f.name] = data.column(physical_name(f, mapped))
        out.append(pa.table(columns))
    return pa.concat_tables(out)


def conformance_cases(root: Path, _name: str) -> list[object]:
    tables = sorted(p.parent for p in (root / "tables").rglob("_delta_log"))
    # pyiceberg 0.12 reads Spark's legacy INT96 timestamps as nanoseconds, so 9999-12-31 wraps to
    # 1816: the exported metadata is right, the reader is not (strict: passes once pyiceberg does).
    int96_overflow = pytest.mark.xfail(strict=True, reason="pyiceberg reads INT96 as ns; 9999-12-31 overflows")
    return [
        pytest.param(t, id=str(t.relative_to(root / "tables")), marks=[int96_overflow] if t.name == "table_with_edge_timestamps" else [])
        for t in tables
    ]


def test_corpus_table_exports_and_reads_back(conformance_dir, conformance_case, tmp_path):
    uri = str(tmp_path / "t")
    shutil.copytree(conformance_case, uri)  # never write into the shared corpus
    try:
        snap = txnlog.Table(uri).snapshot()
    except TxnLogError as e:
        pytest.skip(f"txnlog does not read this table: {e}")
    files = snap.files()
    with_vectors = bool(pc.any(pc.is_valid(files.column("deletion_vector"))).as_py())
    try:
        export(uri)
    except TxnLogError as e:
        if "does not exist" in str(e):  # a file without stats whose footer is gone: named, not guessed
            missing = [p for p in files.column("path").to_pylist() if snap.locate(p).uri in str(e)]
            assert missing and not Path(local_path(snap.locate(missing[0]).uri)).exists()
            return
        assert "cannot represent" in str(e)  # a type Iceberg v2 lacks (variant): refused, naming the column
        return
    try:
        # deltalake, except where it misreads (column mapping) or cannot read (v2 checkpoints,
        # nanosecond timestamps): then the Parquet files themselves; with deletion vectors
        # (deltalake refuses them, the files hold deleted rows) txnlog's reader, which DuckDB
        # checks in tests/read.
        if with_vectors:
            reference = snap.to_arrow()
        elif is_column_mapped(snap.configuration):
            reference = _rows_from_files(snap)
        else:
            reference = delta_rows(uri)
    except Exception:
        try:
            reference = _rows_from_files(snap)
        except Exception as e:
            pytest.skip(f"no reference reader reads this table's data files: {e}")
    got = iceberg_rows(uri)
    columns = [c for c in reference.column_names if c in got.column_names]
    assert set(columns) == set(reference.column_names)
    assert same_rows(got, reference, columns)
