"""Issue 26's DML, OPTIMIZE and streaming rows: txnlog.spark against delta-spark's own statements
on identical tables, in one local[2] session with delta-spark in it, the contenders taking turns.

    TXNLOG_DELTA_JARS_DIR=.delta-jars .venv/bin/python benchmarks/bench_spark_vs_delta.py            # 10M rows
    ... --rows 1000000 --rounds 1 --batches 5                                                        # a quick look

- **DML** on a table of ``--rows`` rows in 20 files of consecutive keys (key, user_id, amount,
  note), written once by txnlog and copied before timing, so both contenders start from the same
  files: DELETE of 0.1% of the rows (``key % 1000 = 7``, in every file), UPDATE of 1%
  (``key % 100 = 7``), MERGE of 1% (keys spread over every file, 1% of them new; update ``*``,
  insert ``*``). With deletion vectors (``delta.enableDeletionVectors``) and copy-on-write.
  txnlog: ``txnlog.spark.transaction`` (``delete``, ``update``) and ``txnlog.spark.merge``;
  delta-spark: ``DELETE FROM`` / ``UPDATE`` / ``MERGE INTO delta.`path```. After the rounds both
  contenders' last tables must hold the same rows (count, sums, updated rows) by delta-spark.
- **OPTIMIZE** of 100 small files (``--optimize-rows`` rows): ``txnlog.spark.optimize`` against
  ``OPTIMIZE delta.`path```; both must leave the same rows in fewer files.
- **Streaming**: two queries running at once, ``readStream.format("txnlog")`` →
  ``writeStream.format("txnlog")`` and delta-spark's ``readStream.format("delta")`` →
  ``writeStream.format("delta")`` (default trigger). Small appends go to the two sources in
  turns; the latency of each is the time from the source commit to the sink commit of it (both
  commits' timestamps).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import txnlog.spark as ts  # noqa: E402
from benchmarks._common import (  # noqa: E402
    WORK_DIR,
    interleaved,
    log,
    machine_line,
    markdown_table,
    median,
    ms,
    paired_ratio,
    percentile,
    ratio,
    setup_logging,
    spark_with_delta,
    verdict,
)
from benchmarks.bench_row_level import copies  # noqa: E402
from benchmarks.bench_spark_dml import build, merge_source  # noqa: E402

BASE = WORK_DIR / "spark_vs_delta"
DV = {"delta.enableDeletionVectors": "true"}
DELETE_WHERE = "key % 1000 = 7"  # 0.1% of the rows, in every file
UPDATE_WHERE = "key % 100 = 7"  # 1% of the rows, in every file


def _txnlog_delete(spark: Any, uri: str) -> None:
    with ts.transaction(spark, uri, "DELETE") as tx:
        tx.delete(DELETE_WHERE)


def _txnlog_update(spark: Any, uri: str) -> None:
    with ts.transaction(spark, uri, "UPDATE") as tx:
        tx.update(UPDATE_WHERE, {"amount": "-1.0", "note": "'updated'"})


def _txnlog_merge(spark: Any, uri: str) -> None:
    ts.merge(spark, uri, spark.table("merge_source"), on="key", when_matched_update="*", when_not_matched_insert="*")


def _delta_statement(operation: str, uri: str) -> str:
    target = f"delta.`{uri}`"
    if operation == "DELETE":
        return f"DELETE FROM {target} WHERE {DELETE_WHERE}"
    if operation == "UPDATE":
        return f"UPDATE {target} SET amount = -1.0, note = 'updated' WHERE {UPDATE_WHERE}"
    return (f"MERGE INTO {target} t USING merge_source s ON t.key = s.key "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")


TXNLOG_DML = {"DELETE": _txnlog_delete, "UPDATE": _txnlog_update, "MERGE": _txnlog_merge}


def _summary(spark: Any, uri: str) -> tuple[Any, ...]:
    """What both contenders must agree on, read by delta-spark."""
    row = spark.read.format("delta").load(uri).selectExpr(
        "count(*)", "sum(key)", "sum(cast(round(amount * 100) as bigint))", "count_if(note = 'updated')", "count_if(note = 'merged')").collect()[0]
    return tuple(row)


def _on_copies(base: str, rounds: int, name: str, mine: Callable[[str], Any], theirs: Callable[[str], Any]) -> tuple[dict[str, list[float]], dict[str, str]]:
    """``mine`` and ``theirs`` taking turns, each run on a fresh copy of ``base`` made before
    timing; the times, and the copy each contender ran on last."""
    paths = {"txnlog": copies(base, rounds + 1, f"txnlog-{name}", BASE), "delta-spark": copies(base, rounds + 1, f"delta-{name}", BASE)}
    last: dict[str, str] = {}

    def on_next_copy(contender: str, run: Callable[[str], Any]) -> Callable[[], None]:
        def timed() -> None:
            last[contender] = next(paths[contender])
            run(last[contender])
        return timed

    times, _ = interleaved({"txnlog": on_next_copy("txnlog", mine), "delta-spark": on_next_copy("delta-spark", theirs)}, rounds)
    return times, last


def bench_dml(spark: Any, rows: int, files: int, rounds: int) -> list[list[str]]:
    source = merge_source(spark, rows, spread=True)
    source.createOrReplaceTempView("merge_source")
    source.count()
    out = []
    for mode, properties in (("deletion vectors", DV), ("copy-on-write", None)):
        base = build(spark, BASE / "base", rows, files, properties)
        for operation in ("DELETE", "UPDATE", "MERGE"):
            times, last = _on_copies(
                base, rounds, operation,
                lambda uri, op=operation: TXNLOG_DML[op](spark, uri),
                lambda uri, op=operation: spark.sql(_delta_statement(op, uri)).collect(),
            )
            a, b = _summary(spark, last["txnlog"]), _summary(spark, last["delta-spark"])
            assert a == b, f"{operation} ({mode}): txnlog's table {a} differs from delta-spark's {b}"
            if mode == "deletion vectors" and operation != "MERGE":
                assert _has_vectors(last["txnlog"]) and _has_vectors(last["delta-spark"]), f"{operation}: no deletion vectors written"
            r = paired_ratio(times["txnlog"], times["delta-spark"])
            log.info("%s %s: %s", operation, mode, times)
            out.append([f"{operation} {_share(operation)} of {rows:,} rows, {mode}", ms(median(times["txnlog"])),
                        ms(median(times["delta-spark"])), ratio(r), f"≤ 1.0x: {verdict(r, 1.0)}"])
    source.unpersist()
    return out


def _share(operation: str) -> str:
    return "0.1%" if operation == "DELETE" else "1%"


def _has_vectors(uri: str) -> bool:
    import txnlog

    files = txnlog.Table(uri).snapshot().files()
    return files.column("deletion_vector").null_count < files.num_rows


def bench_optimize(spark: Any, rows: int, rounds: int) -> list[list[str]]:
    base = build(spark, BASE / "small-files", rows, 100)
    times, last = _on_copies(base, rounds, "OPTIMIZE", lambda uri: ts.optimize(spark, uri),
                             lambda uri: spark.sql(f"OPTIMIZE delta.`{uri}`").collect())
    import txnlog

    for name, uri in last.items():
        left = txnlog.Table(uri).snapshot().files().num_rows
        assert left < 100, f"{name}'s OPTIMIZE left {left} files"
    assert _summary(spark, last["txnlog"]) == _summary(spark, last["delta-spark"]), "OPTIMIZE changed the rows"
    r = paired_ratio(times["txnlog"], times["delta-spark"])
    return [[f"OPTIMIZE of 100 small files ({rows:,} rows)", ms(median(times["txnlog"])), ms(median(times["delta-spark"])),
             ratio(r), f"≤ 1.0x: {verdict(r, 1.0)}"]]


def bench_stream(spark: Any, batches: int, rows_per_batch: int) -> list[list[str]]:
    """Both pipelines run at once; appends go to their sources in turns, one waited for at a time."""
    import pyarrow as pa

    import txnlog

    ts.register(spark)
    work = Path(tempfile.mkdtemp(prefix="stream-", dir=BASE))
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])
    pipelines: dict[str, dict[str, Any]] = {}
    for name in ("txnlog", "delta-spark"):
        fmt = "txnlog" if name == "txnlog" else "delta"
        source_uri, sink_uri, checkpoint = (str(work / f"{fmt}-{n}") for n in ("source", "sink", "checkpoint"))
        source = txnlog.Table.create(source_uri, schema)
        source.append(pa.table({"id": [-1], "v": [0.0]}, schema=schema))
        query = (spark.readStream.format(fmt).load(source_uri)
                 .writeStream.format(fmt).option("checkpointLocation", checkpoint).start(sink_uri))
        pipelines[name] = {"source": source, "sink": txnlog.Table(sink_uri), "sink_uri": sink_uri, "query": query, "latencies": []}

    def wait_for(p: dict[str, Any], version: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        sink = p["sink"]
        while not (sink.exists() and sink.latest_version() >= version):
            if time.monotonic() > deadline or p["query"].exception() is not None:
                raise RuntimeError(f"the sink did not reach version {version}: {p['query'].exception()}")
            time.sleep(0.005)

    try:
        for p in pipelines.values():
            wait_for(p, 0)  # the starting snapshot's batch (delta-spark's sink commits at 0)
        base_version = {name: p["sink"].latest_version() for name, p in pipelines.items()}
        for i in range(batches + 1):
            order = list(pipelines) if i % 2 == 0 else list(reversed(pipelines))
            for name in order:
                p = pipelines[name]
                start = i * rows_per_batch
                ids = pa.array(range(start, start + rows_per_batch), pa.int64())
                p["source"].append(pa.table({"id": ids, "v": pa.array([0.5] * rows_per_batch)}, schema=schema))
                wait_for(p, base_version[name] + i + 1)
                source_ms = p["source"].history(1)[0].timestamp
                sink_ms = p["sink"].history(1)[0].timestamp
                if i > 0:  # the first commit after the start waits for the query's first poll
                    p["latencies"].append((sink_ms - source_ms) / 1000)
    finally:
        for p in pipelines.values():
            p["query"].stop()
    for name, p in pipelines.items():
        total = spark.read.format("delta").load(p["sink_uri"]).count()
        assert total == 1 + (batches + 1) * rows_per_batch, f"{name}'s sink holds {total} rows"
    shutil.rmtree(work, ignore_errors=True)
    mine, theirs = pipelines["txnlog"]["latencies"], pipelines["delta-spark"]["latencies"]
    r = median(mine) / median(theirs)
    return [[f"streaming latency, source commit → sink commit, {batches} micro-batches of {rows_per_batch:,} rows "
             f"(median; p95 {ms(percentile(mine, 95))} vs {ms(percentile(theirs, 95))})",
             ms(median(mine)), ms(median(theirs)), ratio(r), f"≤ 1.0x: {verdict(r, 1.0)}"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the DML tables")
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--optimize-rows", type=int, default=1_000_000, help="rows of the 100-file table")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--connect", action="store_true", help="through Spark Connect (a local Connect server)")
    parser.add_argument("--only", choices=["dml", "optimize", "stream"], action="append")
    args = parser.parse_args()
    setup_logging()
    only = set(args.only or ["dml", "optimize", "stream"])
    spark = spark_with_delta("bench-spark-vs-delta", connect=args.connect)
    shutil.rmtree(BASE, ignore_errors=True)
    BASE.mkdir(parents=True)
    load_before = os.getloadavg()[0]
    rows: list[list[str]] = []
    if "dml" in only:
        rows += bench_dml(spark, args.rows, args.files, args.rounds)
    if "optimize" in only:
        rows += bench_optimize(spark, args.optimize_rows, args.rounds)
    if "stream" in only:
        rows += bench_stream(spark, args.batches, 1000)
    print(machine_line())
    print(f"{type(spark).__module__}.{type(spark).__name__}; load average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; {args.rounds} rounds")
    print(markdown_table(["work", "txnlog", "delta-spark", "ratio", "goal"], rows))
    shutil.rmtree(BASE, ignore_errors=True)


if __name__ == "__main__":
    main()
