"""validate reads every deletion vector of the live files: a vector file that is missing,
truncated or fails its CRC, a cardinality the vector does not hold, a row index past the file's
rows and an inline vector that does not decode are each reported, naming the table, the data
file and the vector (file@offset or inline); healthy tables, ours and delta-spark's, pass."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

import txnlog
from tests.dv_tables import build_dv, delete_where, dv_files
from txnlog.maintenance import validate

from .test_cli import run, run_json

pytest.importorskip("pyroaring")

CORPUS_DV_TABLES = ["table-with-dv-small", "table_with_deletion_logs", "cdf-table-with-cdc-and-dvs"]


def _dv_table(path: Path) -> tuple[txnlog.Table, str, list[dict]]:
    """Two data files whose vectors share one DV file (offsets 1 and 47)."""
    table = build_dv(path)
    delete_where(table, lambda v: v % 7 == 0)
    (dv_file,) = dv_files(table)
    files = table.snapshot().files().sort_by("path").to_pylist()
    assert sorted(f["deletion_vector"]["offset"] for f in files) == [1, 47]
    return table, dv_file, files


def _file_at(files: list[dict], offset: int) -> dict:
    return next(f for f in files if f["deletion_vector"]["offset"] == offset)


def _only_problem(table: txnlog.Table) -> txnlog.maintenance.Problem:
    report = validate(table)
    assert len(report.problems) == 1, report.problems
    return report.problems[0]


@pytest.mark.parametrize("name", CORPUS_DV_TABLES)
def test_delta_spark_tables_with_deletion_vectors_pass(tmp_path, conformance_dir, name):
    copy = tmp_path / name
    shutil.copytree(conformance_dir / "tables" / name, copy)
    report = validate(txnlog.Table(str(copy)))
    assert report.ok, report.problems
    assert report.checked["deletionVectors"] >= 1


def test_our_table_with_deletion_vectors_passes(tmp_path):
    table, _, _ = _dv_table(tmp_path / "t")
    delete_where(table, lambda v: v == 1, max_inline_bytes=1000)  # one inline vector as well
    report = validate(table)
    assert report.ok, report.problems
    assert report.checked["deletionVectors"] == 2


def test_missing_deletion_vector_file(tmp_path):
    table, dv_file, files = _dv_table(tmp_path / "t")
    os.unlink(tmp_path / "t" / dv_file)
    report = validate(table)
    assert [p.kind for p in report.problems] == ["missing-file", "missing-file"]
    assert {p.path for p in report.problems} == {f["path"] for f in files}
    assert {p.deletion_vector for p in report.problems} == {f"{dv_file}@1", f"{dv_file}@47"}
    assert all(dv_file in p.message and table.uri in p.message and p.version == 3 for p in report.problems)


def test_truncated_deletion_vector_file(tmp_path):
    table, dv_file, files = _dv_table(tmp_path / "t")
    with open(tmp_path / "t" / dv_file, "r+b") as f:
        f.truncate(60)  # the first vector (bytes 1..46) survives, the second does not
    problem = _only_problem(table)
    second = _file_at(files, 47)
    assert problem.kind == "corrupt-deletion-vector" and problem.path == second["path"]
    assert problem.deletion_vector == f"{dv_file}@47"
    assert "60 bytes" in problem.message and second["path"] in problem.message and table.uri in problem.message


def test_bit_flip_fails_the_crc(tmp_path):
    table, dv_file, files = _dv_table(tmp_path / "t")
    with open(tmp_path / "t" / dv_file, "r+b") as f:
        f.seek(1 + 4 + 20)  # inside the first vector's bitmap
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x10]))
    problem = _only_problem(table)
    assert problem.kind == "corrupt-deletion-vector" and problem.path == _file_at(files, 1)["path"]
    assert problem.deletion_vector == f"{dv_file}@1" and "CRC" in problem.message


def _recommit(table: txnlog.Table, change) -> None:
    """Re-add the live files with ``change`` applied to each row (a log written wrong by hand)."""
    files = table.snapshot().files()
    rows = [change(dict(r)) for r in files.to_pylist()]
    with table.transaction("WRITE") as txn:
        txn.remove_files(files)
        txn.add_files(pa.Table.from_pylist(rows, schema=files.schema))


def test_cardinality_the_vector_does_not_hold(tmp_path):
    table, dv_file, files = _dv_table(tmp_path / "t")

    def wrong_count(row: dict) -> dict:
        if row["deletion_vector"]["offset"] == 47:
            row["deletion_vector"] = {**row["deletion_vector"], "cardinality": 5}
        return row

    _recommit(table, wrong_count)
    problem = _only_problem(table)
    assert problem.kind == "corrupt-deletion-vector" and problem.path == _file_at(files, 47)["path"]
    assert "holds 3 row(s) but its descriptor says 5" in problem.message and f"{dv_file}@47" in problem.message


def test_row_index_past_the_rows_of_the_file(tmp_path):
    table, dv_file, files = _dv_table(tmp_path / "t")

    def fewer_records(row: dict) -> dict:
        stats = orjson.loads(row["stats"])
        row["stats"] = orjson.dumps({**stats, "numRecords": 10}).decode()  # vectors name rows up to 14 and 15
        return row

    _recommit(table, fewer_records)
    report = validate(table)
    assert [p.kind for p in report.problems] == ["corrupt-deletion-vector"] * 2
    assert all("10 rows (numRecords)" in p.message for p in report.problems)


def test_inline_vector_that_does_not_decode(tmp_path):
    table = build_dv(tmp_path / "t")
    delete_where(table, lambda v: v == 3, max_inline_bytes=1000)
    broken = {}

    def garbage(row: dict) -> dict:
        if row["deletion_vector"] is not None:
            row["deletion_vector"] = {**row["deletion_vector"], "path_or_inline_dv": "00000" * 8}
            broken["path"] = row["path"]
        return row

    _recommit(table, garbage)
    problem = _only_problem(table)
    assert problem.kind == "corrupt-deletion-vector" and problem.path == broken["path"]
    assert problem.deletion_vector == "inline" and "magic number" in problem.message


def test_cli_reports_truncated_and_bit_flipped_vectors(tmp_path):
    table, dv_file, files = _dv_table(tmp_path / "t")
    uri = str(tmp_path / "t")
    assert "2 deletion vectors" in run("validate", uri).stdout
    blob = (tmp_path / "t" / dv_file).read_bytes()
    flipped = bytearray(blob)
    flipped[1 + 4 + 20] ^= 0x01
    (tmp_path / "t" / dv_file).write_bytes(bytes(flipped[:60]))  # first vector flipped, second cut off
    proc = run("validate", uri, check_code=1)
    assert proc.stdout.count("corrupt-deletion-vector") == 2
    report = run_json("validate", uri, check_code=1)
    assert isinstance(report, dict) and report["ok"] is False
    by_vector = {p["deletionVector"]: p for p in report["problems"]}
    assert set(by_vector) == {f"{dv_file}@1", f"{dv_file}@47"}
    assert by_vector[f"{dv_file}@1"]["path"] == _file_at(files, 1)["path"] and "CRC" in by_vector[f"{dv_file}@1"]["message"]
    assert by_vector[f"{dv_file}@47"]["path"] == _file_at(files, 47)["path"]
    json.dumps(report)  # one plain JSON document
