"""The single jobs the pipeline is made of, run through their main() on the shared session:
exit codes, and what they do to the table."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers import this venv's txnlog

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from spark_jobs import compact, ingest_stream, update  # noqa: E402
from spark_jobs._common import CONFLICT, FAILED, OK, USAGE  # noqa: E402
from txnlog import Table  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("amount", pa.float64())])


def small_table(uri: str) -> Table:
    table = Table.create(uri, SCHEMA, partition_by=["day"])
    for start in (0, 5, 10):
        ids = list(range(start, start + 5))
        table.append(pa.table({"id": ids, "day": ["2024-01-01"] * 5, "amount": [float(i) for i in ids]}, schema=SCHEMA))
    return table


def ids(uri: str) -> list[int]:
    return sorted(deltalake.DeltaTable(uri).to_pyarrow_table(columns=["id"])["id"].to_pylist())


def test_update_and_delete_jobs(spark, tmp_path, capsys):
    uri = str(tmp_path / "t")
    small_table(uri)
    assert update.main(["--table", uri, "--where", "id < 3", "--delete"], spark=spark) == OK
    assert ids(uri) == list(range(3, 15))
    assert update.main(["--table", uri, "--where", "id = 7", "--set", "amount = amount * 10"], spark=spark) == OK
    rows = {r["id"]: r["amount"] for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()}
    assert rows[7] == 70.0 and rows[8] == 8.0
    assert update.main(["--table", uri, "--where", "id = 1000", "--delete"], spark=spark) == OK
    assert "no row matched" in capsys.readouterr().out
    assert update.main(["--table", uri, "--where", "id = 1", "--set", "amount"], spark=spark) == USAGE
    assert update.main(["--table", uri, "--where", "nope = 1", "--delete"], spark=spark) == FAILED
    assert update.main(["--table", str(tmp_path / "missing"), "--where", "id = 1", "--delete"], spark=spark) == FAILED


def test_compact_job(spark, tmp_path, capsys):
    uri = str(tmp_path / "t")
    table = small_table(uri)
    assert compact.main(["--table", uri, "--where", "id < 3"], spark=spark) == FAILED  # not a partition predicate
    assert compact.main(["--table", uri, "--where", "day < '2024-01-01'"], spark=spark) == OK
    assert "nothing to compact" in capsys.readouterr().out
    assert compact.main(["--table", uri, "--where", "day <= '2024-01-01'"], spark=spark) == OK
    assert "3 files -> 1" in capsys.readouterr().out
    assert table.snapshot().num_files == 1 and ids(uri) == list(range(15))
    assert CONFLICT == 3  # documented exit code of a conflict that was not retried


def test_ingest_job_from_a_rate_source(spark, tmp_path):
    uri = str(tmp_path / "rate")
    argv = ["--table", uri, "--rate", "20", "--checkpoint", str(tmp_path / "cp"), "--trigger-seconds", "1", "--run-seconds", "15"]
    assert ingest_stream.main(argv, spark=spark) == OK
    got = ids(uri)
    assert got and len(got) == len(set(got)) and got == list(range(len(got)))  # rate values 0..n-1, each once
    version = Table(uri).snapshot().app_transaction_version("spark_jobs.ingest_stream")
    assert version is not None and version >= 0


def test_ingest_job_through_the_format_sink(spark, tmp_path):
    """--sink format: writeStream.format("txnlog"), exactly once by the query's id; a restart
    with the same checkpoint writes only the new files."""
    import pyarrow.parquet as pq

    source, uri, checkpoint = tmp_path / "in", str(tmp_path / "t"), str(tmp_path / "cp")
    source.mkdir()
    for k in range(2):
        pq.write_table(pa.table({"id": list(range(k * 5, k * 5 + 5)), "day": ["2024-01-01"] * 5, "amount": [1.0] * 5}, schema=SCHEMA),
                       source / f"f{k}.parquet")
    argv = ["--table", uri, "--source-dir", str(source), "--checkpoint", checkpoint, "--sink", "format", "--available-now",
            "--partition-by", "day"]
    assert ingest_stream.main(argv, spark=spark) == OK
    assert ids(uri) == list(range(10))
    assert Table(uri).snapshot().metadata.partition_columns == ("day",)
    pq.write_table(pa.table({"id": [10, 11], "day": ["2024-01-02"] * 2, "amount": [2.0, 3.0]}, schema=SCHEMA), source / "f2.parquet")
    assert ingest_stream.main(argv, spark=spark) == OK
    assert ids(uri) == list(range(12))
    query_id = (tmp_path / "cp" / "metadata").read_text().split('"id":"')[1].split('"')[0]
    assert Table(uri).snapshot().app_transaction_version(query_id) == 2  # one file per batch: batch ids 0, 1, then 2
    with pytest.raises(SystemExit) as usage:
        ingest_stream.parse_args(["--table", uri, "--rate", "1", "--checkpoint", checkpoint, "--sink", "format", "--mode", "merge"])
    assert usage.value.code == USAGE
