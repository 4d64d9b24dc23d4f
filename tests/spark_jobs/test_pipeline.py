"""The main job end to end on local Spark: hop 1 (a file stream into ``events`` by
writeStream.format("txnlog")) with compaction and merge-on-read DML running concurrently on
``events``, and hop 2 (``events``' change feed aggregated per user, MERGEd into ``user_totals``).
Both tables, read by DuckDB, equal references computed here from the source files; a second run
resumes both streams from their checkpoints."""

from __future__ import annotations

import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers import this venv's txnlog

pytest.importorskip("pyspark")

from spark_jobs import pipeline  # noqa: E402
from tests.duckdb_delta import duckdb_delta  # noqa: E402
from txnlog import Table  # noqa: E402


def source_rows(source_dir: Path) -> list[dict[str, object]]:
    """Every source row with the job's DELETE and UPDATE applied, computed independently of the job."""
    rows = []
    for path in sorted(source_dir.glob("batch-*.parquet")):
        for r in pq.read_table(path).to_pylist():
            if r["amount"] < 1:
                continue  # the pipeline's DELETE
            # its UPDATE, and delta-spark's
            rows.append({**r, "flag": "big" if r["amount"] >= 90 else "mid" if r["amount"] >= 50 else None})
    return rows


def events_reference(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return sorted((r["event_id"], r["user_id"], r["day"], r["amount"], r["flag"]) for r in rows)


def totals_reference(rows: list[dict[str, object]]) -> dict[int, tuple[int, float, int]]:
    totals: dict[int, list[float]] = defaultdict(lambda: [0, 0.0, 0])
    for r in rows:
        t = totals[int(r["user_id"])]  # type: ignore[call-overload]
        t[0] += 1
        t[1] += float(r["amount"])  # type: ignore[arg-type]
        t[2] += r["flag"] == "big"
    return {user: (int(t[0]), t[1], int(t[2])) for user, t in totals.items()}


def read_events(uri: Path) -> list[tuple[object, ...]]:
    con = duckdb_delta()
    return sorted(con.sql(f"SELECT event_id, user_id, day, amount, flag FROM delta_scan('{uri}')").fetchall())


def read_totals(uri: Path) -> dict[int, tuple[int, float, int]]:
    con = duckdb_delta()
    rows = con.sql(f"SELECT user_id, events, amount, big_events FROM delta_scan('{uri}')").fetchall()
    assert len(rows) == len({r[0] for r in rows})  # one row per user
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def ingest_query_id(checkpoint: Path) -> str:
    return str(json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"])


def totals_batches(out: str) -> list[tuple[int, int]]:
    """(first, last) version of ``events`` each hop 2 micro-batch of this run read."""
    return [(int(a), int(b)) for a, b in re.findall(r"\[totals\] batch \d+: events versions (\d+)\.\.(\d+)", out)]


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_two_hop_pipeline_loses_and_duplicates_nothing(delta_spark, tmp_path, capsys):
    spark = delta_spark
    data = tmp_path / "data"
    events, totals, source = data / "events", data / "user_totals", data / "source"
    argv = ["--table", str(events), "--batches", "3", "--rows", "400", "--pause", "0.2"]
    assert pipeline.main(argv, spark=spark) == 0
    out = capsys.readouterr().out
    for reader in ("DuckDB", "delta-spark"):
        assert f"verified     events OK with {reader}" in out and f"verified     user_totals OK with {reader}" in out
    # delta-spark's UPDATE raced the txnlog writers in the same session and committed.
    assert re.search(r"^\[delta-spark\] version \d+: UPDATE SET flag = 'mid'", out, re.M)
    engines = re.search(r"^engines .*: (.*)$", out, re.M)
    assert engines and re.search(r"\d+ delta-spark", engines.group(1)) and re.search(r"\d+ txnlog", engines.group(1))
    # Row-level concurrency: a DML that loses to OPTIMIZE is rebased, never re-run.
    assert re.search(r"^statements re-run because of compaction: 0; rebased at row level instead: ", out, re.M)
    assert "hop 1 " in out and "hop 2 " in out

    rows = source_rows(source)
    assert len(rows) < 3 * 400  # the DELETE had rows to delete
    assert read_events(events) == events_reference(rows)
    assert read_totals(totals) == totals_reference(rows)
    assert sum(r["flag"] == "big" for r in rows) > 0  # hop 2 saw updates change an aggregate
    assert sum(r["flag"] == "mid" for r in rows) > 0  # and delta-spark's

    table = Table(str(events))
    configuration = table.snapshot().metadata.configuration
    assert {k: configuration.get(k) for k in ("delta.enableChangeDataFeed", "delta.enableDeletionVectors", "delta.enableRowTracking")} == {
        "delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
    query_id = ingest_query_id(data / "_checkpoints" / "ingest")
    assert table.snapshot().app_transaction_version(query_id) == 2  # hop 1: batch ids 0..2, keyed by the query's id
    history = table.history()
    operations = {h.commit_info.operation for h in history if h.commit_info is not None}
    # The final compaction pass makes at least one OPTIMIZE certain, whatever the timing.
    assert {"STREAMING UPDATE", "OPTIMIZE", "DELETE", "UPDATE"} <= operations
    delta_spark_updates = [h for h in history if h.commit_info is not None and "Delta-Lake" in (h.commit_info.engine_info or "")]
    assert delta_spark_updates and {h.commit_info.operation for h in delta_spark_updates} == {"UPDATE"}
    dml_metrics = [h.commit_info.operation_metrics or {} for h in history if h.commit_info is not None and h.commit_info.operation in ("DELETE", "UPDATE")]
    assert any(int(m.get("numDeletionVectorsAdded", 0)) + int(m.get("numDeletionVectorsUpdated", 0)) > 0 for m in dml_metrics)  # merge-on-read
    first_totals_version = Table(str(totals)).snapshot().app_transaction_version(pipeline.TOTALS_APP_ID)
    assert first_totals_version is not None

    # A second run on the same tables: both streams resume from their checkpoints.
    before = table.latest_version()
    assert pipeline.main(argv[:2] + ["--batches", "1", "--rows", "400", "--pause", "0.2"], spark=spark) == 0
    out = capsys.readouterr().out
    for reader in ("DuckDB", "delta-spark"):
        assert f"verified     events OK with {reader}" in out and f"verified     user_totals OK with {reader}" in out
    assert re.search(r"^statements re-run because of compaction: 0;", out, re.M)
    assert totals_batches(out) and all(first > before for first, _ in totals_batches(out))  # hop 2 read only the new versions
    rows2 = source_rows(source)
    assert len(rows2) > len(rows)
    assert read_events(events) == events_reference(rows2)
    assert read_totals(totals) == totals_reference(rows2)
    assert Table(str(events)).snapshot().app_transaction_version(query_id) == 3
    assert Table(str(totals)).snapshot().app_transaction_version(pipeline.TOTALS_APP_ID) > first_totals_version


@pytest.mark.spark
def test_a_delta_spark_conflict_names_the_txnlog_commit_it_lost_to(delta_spark, tmp_path):
    """The pipeline's delta-spark job recognizes delta-spark's conflicts and names the winning
    commit: here its UPDATE (held inside its scan by a UDF until the txnlog commit is in) loses
    to a txnlog DELETE of a file it read. delta-spark checks the winner's added files first, so
    the file re-added with its deletion vector makes it a ConcurrentAppendException (a sibling
    of DeltaConcurrentModificationException in delta-spark's Python classes, not a subclass)."""
    uri = str(tmp_path / "events")
    table = Table.create(uri, pipeline.SCHEMA, partition_by=["day"], properties=pipeline.PROPERTIES)
    table.append(pipeline.source_batch(0, 100))
    started, go = tmp_path / "started", tmp_path / "go"

    def hold(amount: float) -> bool:
        import time

        if not started.exists():
            started.touch()
            deadline = time.monotonic() + 120
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return amount >= 50

    delta_spark.udf.register("held_until_go", hold, "boolean")
    outcome: dict[str, BaseException] = {}

    def update() -> None:
        try:
            delta_spark.sql(f"UPDATE delta.`{uri}` SET {pipeline.MID_SET} WHERE held_until_go(amount)").collect()
        except BaseException as error:  # noqa: BLE001 - examined below
            outcome["error"] = error

    import threading
    import time

    thread = threading.Thread(target=update)
    thread.start()
    deadline = time.monotonic() + 300
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    winner = table.delete("event_id < 10")  # removes the file delta-spark is reading (deletion vectors)
    go.touch()
    thread.join(300)

    conflict = pipeline.delta_spark_conflict(outcome["error"])
    assert conflict is not None, outcome["error"]
    condition, version, operation = conflict
    assert condition == "ConcurrentAppendException" and (version, operation) == (int(winner), "DELETE")
    assert pipeline.delta_spark_conflict(ValueError("not a conflict")) is None
    assert Table(uri).latest_version() == int(winner)  # delta-spark committed nothing
    assert delta_spark.read.format("delta").load(uri).count() == 90
