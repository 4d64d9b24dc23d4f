"""The main job end to end on local Spark: ingest, compaction and updates run concurrently,
and the final table (read by delta-rs) holds every source row exactly once with the updates
and deletes applied; a second run on the same table ingests the next batches."""

from __future__ import annotations

import os
import sys

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers import this venv's txnlog

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from spark_jobs import pipeline  # noqa: E402
from txnlog import Table  # noqa: E402


def reference(source_dir) -> tuple[int, int]:
    """(count, checksum) computed straight from the source files, independently of the job."""
    ids, total = [], 0
    for path in sorted(source_dir.glob("batch-*.parquet")):
        rows = pq.read_table(path).to_pylist()
        for r in rows:
            if r["amount"] < 1:
                continue  # the pipeline's DELETE
            flag = "big" if r["amount"] >= 90 else None  # its UPDATE
            ids.append(r["event_id"])
            total += hash((r["event_id"], r["user_id"], r["day"], round(r["amount"], 6), flag))
    return len(ids), total


def table_checksum(uri: str) -> tuple[int, int, int]:
    rows = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
    distinct = len({r["event_id"] for r in rows})
    return len(rows), distinct, sum(hash((r["event_id"], r["user_id"], r["day"], round(r["amount"], 6), r["flag"])) for r in rows)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_concurrent_pipeline_loses_and_duplicates_nothing(spark, tmp_path, capsys):
    uri = tmp_path / "data" / "events"
    argv = ["--table", str(uri), "--batches", "4", "--rows", "400", "--pause", "0.2"]
    assert pipeline.main(argv, spark=spark) == 0
    out = capsys.readouterr().out
    assert "verified     OK" in out

    source = tmp_path / "data" / "source"
    count, checksum = reference(source)
    assert count < 4 * 400  # the DELETE had rows to delete
    assert table_checksum(str(uri)) == (count, count, checksum)
    table = Table(str(uri))
    assert table.snapshot().app_transaction_version(pipeline.APP_ID) == 3
    operations = {h.commit_info.operation for h in table.history()}
    assert {"WRITE", "OPTIMIZE", "DELETE", "UPDATE"} <= operations

    # A second run on the existing table: the stream resumes from its checkpoint.
    assert pipeline.main(argv[:2] + ["--batches", "2", "--rows", "400", "--pause", "0.2"], spark=spark) == 0
    assert "verified     OK" in capsys.readouterr().out
    count2, checksum2 = reference(source)
    assert count2 > count
    assert table_checksum(str(uri)) == (count2, count2, checksum2)
    assert Table(str(uri)).snapshot().app_transaction_version(pipeline.APP_ID) == 5
    assert len(pc.unique(deltalake.DeltaTable(str(uri)).to_pyarrow_table()["event_id"])) == count2
