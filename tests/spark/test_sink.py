"""The foreachBatch sink is exactly-once: a streaming query killed with SIGKILL right after
a batch committed (before Spark's checkpoint knew) and restarted from its checkpoint location
replays that batch, the sink skips it, and every source row lands once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from spark_jobs import ingest_stream  # noqa: E402
from txnlog import Table  # noqa: E402
from txnlog.errors import InvalidArgumentError  # noqa: E402
from txnlog.schema import identity_column  # noqa: E402
from txnlog.spark.sink import foreach_batch_sink  # noqa: E402

pytestmark = pytest.mark.spark

CHILD = Path(__file__).with_name("stream_child.py")
FILES, ROWS = 4, 50


def checksum(table: pa.Table) -> int:
    """Order-independent: the sum of a per-row mix of every column."""
    mixed = pc.add(pc.multiply(table["id"], 1_000_003), pc.cast(pc.multiply(table["amount"], 100), pa.int64()))
    return int(pc.sum(mixed).as_py() or 0)


def write_source(folder: Path) -> pa.Table:
    folder.mkdir()
    parts = []
    for i in range(FILES):
        ids = pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())
        part = pa.table({"id": ids, "amount": pc.divide(pc.cast(pc.multiply(ids, 7), pa.float64()), 4.0)})
        pq.write_table(part, folder / f"part-{i:03d}.parquet")
        parts.append(part)
    return pa.concat_tables(parts)


def test_killed_stream_restarts_and_every_row_lands_once(spark, tmp_path):
    source = write_source(tmp_path / "incoming")
    table_uri, checkpoint, app_id = str(tmp_path / "events"), str(tmp_path / "checkpoint"), "test-sink"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    child = subprocess.Popen(
        [sys.executable, str(CHILD), table_uri, str(tmp_path / "incoming"), checkpoint, app_id, "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = child.communicate(timeout=300)
    finally:
        try:  # the child's JVM exits with it; make sure nothing of its group outlives the test
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert child.returncode == -signal.SIGKILL, out + err[-3000:]
    assert "committed batch 1" in out
    snapshot = Table(table_uri).snapshot()
    assert snapshot.app_transaction_version(app_id) == 1  # batch 1 landed before the kill

    # Restart the same query from its checkpoint (in this process's session): Spark replays
    # batch 1, which the sink must skip, then processes the rest.
    args = ingest_stream.parse_args(
        ["--table", table_uri, "--source-dir", str(tmp_path / "incoming"), "--checkpoint", checkpoint, "--app-id", app_id, "--available-now"]
    )
    sink = ingest_stream.make_sink(args)
    ingest_stream.start(spark, args, sink).awaitTermination(240)
    assert sink.last_error is None
    assert sink.stats.skipped == 1
    assert sink.stats.committed == FILES - 2

    result = deltalake.DeltaTable(table_uri).to_pyarrow_table(columns=["id", "amount"])
    assert result.num_rows == source.num_rows
    assert sorted(result["id"].to_pylist()) == list(range(FILES * ROWS))
    assert checksum(result) == checksum(source)
    assert Table(table_uri).snapshot().app_transaction_version(app_id) == FILES - 1


def test_replayed_batch_in_merge_mode_is_skipped(spark, tmp_path):
    uri = str(tmp_path / "t")
    sink = foreach_batch_sink(uri, "upserts", mode="merge", merge_on="id")
    batch0 = spark.createDataFrame([(1, 1.0), (2, 2.0)], "id long, amount double")
    batch1 = spark.createDataFrame([(2, 20.0), (3, 3.0)], "id long, amount double")
    sink(batch0, 0)
    sink(batch1, 1)
    version = Table(uri).latest_version()
    sink(batch1, 1)  # a replay after a crash
    sink(batch0, 0)
    assert Table(uri).latest_version() == version
    assert (sink.stats.committed, sink.stats.skipped) == (2, 2)
    rows = sorted(tuple(r.values()) for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist())
    assert rows == [(1, 1.0), (2, 20.0), (3, 3.0)]
    # The merge batch's commit is the stream's, as delta-spark records it, with MERGE's metrics.
    info = deltalake.DeltaTable(uri).history(1)[0]
    assert info["operation"] == "STREAMING UPDATE" and info["operationParameters"] == {"outputMode": "Update", "epochId": "1"}
    assert info["operationMetrics"]["numTargetRowsUpdated"] == "1" and info["operationMetrics"]["numTargetRowsInserted"] == "1"
    with pytest.raises(InvalidArgumentError, match="merge_on"):
        foreach_batch_sink(uri, "x", mode="merge")


def test_foreach_batch_sink_numbers_identity_values_once_across_batches_and_replays(spark, tmp_path):
    uri = str(tmp_path / "t")
    Table.create(uri, pa.schema([identity_column("key"), pa.field("id", pa.int64()), pa.field("amount", pa.float64())]))
    sink = foreach_batch_sink(uri, "ids")
    batch0 = spark.createDataFrame([(1, 1.0), (2, 2.0)], "id long, amount double")
    batch1 = spark.createDataFrame([(3, 3.0), (4, 4.0)], "id long, amount double")
    sink(batch0, 0)
    sink(batch1, 1)
    sink(batch1, 1)  # a replay after a crash
    assert (sink.stats.committed, sink.stats.skipped) == (2, 1)
    snapshot = Table(uri).snapshot()
    rows = snapshot.to_arrow().to_pylist()
    assert sorted(r["id"] for r in rows) == [1, 2, 3, 4]
    keys = [r["key"] for r in rows]
    assert None not in keys and len(set(keys)) == 4
    assert snapshot.table_configuration.identity_columns["key"].high_water_mark == max(keys)


def test_foreach_batch_sink_with_merge_schema_adds_a_batchs_new_columns(spark, tmp_path):
    uri = str(tmp_path / "t")
    sink = foreach_batch_sink(uri, "evolving", merge_schema=True)
    sink(spark.createDataFrame([(1, 1.0)], "id long, amount double"), 0)
    sink(spark.createDataFrame([(2, 2.0, "new")], "id long, amount double, note string"), 1)
    sink(spark.createDataFrame([(2, 2.0, "new")], "id long, amount double, note string"), 1)  # a replay
    rows = sorted(tuple(r.values()) for r in Table(uri).snapshot().to_arrow().to_pylist())
    assert rows == [(1, 1.0, None), (2, 2.0, "new")]
    strict = foreach_batch_sink(uri, "strict")
    with pytest.raises(Exception, match="(?i)column|schema"):
        strict(spark.createDataFrame([(3, 3.0, "x", 1)], "id long, amount double, note string, more int"), 0)
    upserts = foreach_batch_sink(uri, "upserts", mode="merge", merge_on="id", merge_schema=True)
    upserts(spark.createDataFrame([(2, 20.0, "upd", 7), (5, 5.0, "ins", 8)], "id long, amount double, note string, more long"), 0)
    rows = sorted(tuple(r.values()) for r in Table(uri).snapshot().to_arrow().to_pylist())
    assert rows == [(1, 1.0, None, None), (2, 20.0, "upd", 7), (5, 5.0, "ins", 8)]
