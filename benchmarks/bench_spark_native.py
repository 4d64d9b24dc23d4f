"""Issue 26: txnlog.spark's reads and writes against Spark's own Parquet paths and delta-spark,
all in one session with delta-spark in it, the contenders taking turns.

    TXNLOG_DELTA_JARS_DIR=.delta-jars .venv/bin/python benchmarks/bench_spark_native.py --rows 1000000
    ... --rows 10000000 --rounds 3

Tables: 5 columns (long, int, double, string, timestamp) in 100 files. Reads:
``txnlog.spark.read`` with delta-spark's reader (the default when delta-spark is in the session)
and without it (``spark.txnlog.read.deltaReader=false``, txnlog's own scan), against
``spark.read.parquet`` of a plain copy of the rows and ``spark.read.format("delta")`` of the same
table: a full scan (every column aggregated), one column, a filter selecting 1 file of 100; then
a table with 10% of its rows deleted by vectors. Writes: ``txnlog.spark.write`` (Spark's own
Parquet writer, and txnlog's Python tasks with ``spark.txnlog.write.native=false``) against
``df.write.parquet`` and ``df.write.format("delta")``. Ratios are medians of paired runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from _common import (
    WORK_DIR,
    fresh_paths,
    interleaved,
    machine_line,
    markdown_table,
    median,
    ms,
    paired_ratio,
    ratio,
    setup_logging,
    spark_with_delta,
    verdict,
)
from bench_spark import COLUMNS  # the 5 columns of issue 8's tables

import txnlog.spark as ts
from txnlog.spark.delta import DELTA_READER_CONF
from txnlog.spark.native import NATIVE_WRITE_CONF

FULL = ["count(*)", "sum(id)", "sum(k)", "sum(v)", "max(s)", "max(ts)"]


def _with_conf(spark: Any, key: str, value: str, fn: Any) -> Any:
    """``fn()`` with ``key`` set to ``value`` in the session, then unset."""
    spark.conf.set(key, value)
    try:
        return fn()
    finally:
        spark.conf.unset(key)


def _own_scan(spark: Any, fn: Any) -> Any:
    return _with_conf(spark, DELTA_READER_CONF, "false", fn)


def reads(spark: Any, rows: int, rounds: int, work: Path) -> list[list[str]]:
    source = spark.range(0, rows, 1, 100).selectExpr(*COLUMNS)
    plain, table = str(work / "plain"), str(work / "table")
    source.write.parquet(plain)
    ts.write(spark.read.parquet(plain), table, properties={"delta.targetFileSize": str(1 << 40)})
    first = rows // 100  # the first of 100 files holds ids below this (ranges in order)
    queries = {
        "full scan": (lambda df: df.selectExpr(*FULL).collect()[0], None),
        "one column": (lambda df: df.selectExpr("sum(v)").collect()[0], None),
        "1% of files": (lambda df: df.where(f"id < {first // 2}").selectExpr(*FULL).collect()[0], f"id < {first // 2}"),
    }
    out = []
    for name, (query, predicate) in queries.items():
        runners = {
            "txnlog (delta reader)": lambda q=query, p=predicate: q(ts.read(spark, table, predicate=p)),
            "txnlog (own scan)": lambda q=query, p=predicate: _own_scan(spark, lambda: q(ts.read(spark, table, predicate=p))),
            "parquet": lambda q=query: q(spark.read.parquet(plain)),
            "delta": lambda q=query: q(spark.read.format("delta").load(table)),
        }
        times, answers = interleaved(runners, rounds)
        assert len({str(a[-1]) for a in answers.values()}) == 1, f"{name}: the reads disagree: {answers}"
        out += _read_rows(f"read {name}, {rows:,} rows", times, 1.1)
    # 10% of the rows deleted by vectors, against delta-spark on the same table and parquet of the kept rows.
    dv = str(work / "dv")
    ts.write(spark.read.parquet(plain), dv, properties={"delta.enableDeletionVectors": "true", "delta.targetFileSize": str(1 << 40)})
    with ts.transaction(spark, dv, operation="DELETE") as tx:
        tx.delete("id % 10 = 3")
    kept = str(work / "kept")
    spark.read.parquet(plain).where("id % 10 != 3").write.parquet(kept)
    runners = {
        "txnlog (delta reader)": lambda: ts.read(spark, dv).selectExpr(*FULL).collect()[0],
        "txnlog (own scan)": lambda: _own_scan(spark, lambda: ts.read(spark, dv).selectExpr(*FULL).collect()[0]),
        "parquet": lambda: spark.read.parquet(kept).selectExpr(*FULL).collect()[0],
        "delta": lambda: spark.read.format("delta").load(dv).selectExpr(*FULL).collect()[0],
    }
    times, answers = interleaved(runners, rounds)
    assert len({str(a[-1]) for a in answers.values()}) == 1, f"vectors: the reads disagree: {answers}"
    return out + _read_rows(f"read 10% deleted by vectors, {rows:,} rows", times, 1.2)


def _read_rows(work: str, times: dict[str, list[float]], parquet_goal: float) -> list[list[str]]:
    """A result row per txnlog contender: its median, the peers', its paired ratios against goals."""
    out = []
    for contender in ("txnlog (delta reader)", "txnlog (own scan)"):
        vs_parquet = paired_ratio(times[contender], times["parquet"])
        vs_delta = paired_ratio(times[contender], times["delta"])
        out.append([f"{work}: {contender}", ms(median(times[contender])), ms(median(times["parquet"])), ms(median(times["delta"])),
                    f"{ratio(vs_parquet)} ({verdict(vs_parquet, parquet_goal)})", f"{ratio(vs_delta)} ({verdict(vs_delta, 1.05)})"])
    return out


def _python_tasks(spark: Any, fn: Any) -> Any:
    return _with_conf(spark, NATIVE_WRITE_CONF, "false", fn)


def writes(spark: Any, rows: int, rounds: int, work: Path, partition: str | None = None) -> list[list[str]]:
    """``txnlog.spark.write`` with Spark's Parquet writer (the default) and with txnlog's Python
    tasks, against ``df.write.parquet`` and delta-spark's ``format("delta")``, of one cached
    DataFrame of 2 partitions; every table is checked to hold the rows. ``partition``: a SQL
    expression over the columns, added as column ``part`` that every contender partitions by."""
    df = spark.range(0, rows, 1, 2).selectExpr(*COLUMNS)
    by = ["part"] if partition else []
    if partition:
        df = df.selectExpr("*", f"{partition} as part")
    df = df.cache()
    df.count()
    fresh = fresh_paths(work, "w")
    runners = {
        "txnlog (native)": lambda: ts.write(df, fresh("native"), partition_by=by),
        "txnlog (python tasks)": lambda: _python_tasks(spark, lambda: ts.write(df, fresh("python"), partition_by=by)),
        "parquet": lambda: df.write.partitionBy(*by).parquet(fresh("parquet")),
        "delta": lambda: df.write.format("delta").partitionBy(*by).save(fresh("delta")),
    }
    times, _ = interleaved(runners, rounds)
    df.unpersist()
    written = sorted(work.glob("native-w-*"))[-1]
    assert ts.read(spark, str(written)).count() == rows and all(f.startswith("job-") for f in _paths(str(written)))
    out = []
    for contender in ("txnlog (native)", "txnlog (python tasks)"):
        vs_parquet = paired_ratio(times[contender], times["parquet"])
        vs_delta = paired_ratio(times[contender], times["delta"])
        out.append([f"write {rows:,} rows{f' partitioned by {partition}' if partition else ''}: {contender}", ms(median(times[contender])), ms(median(times["parquet"])),
                    ms(median(times["delta"])), f"{ratio(vs_parquet)} ({verdict(vs_parquet, 1.1)})", f"{ratio(vs_delta)} ({verdict(vs_delta, 1.0)})"])
    return out


def _paths(uri: str) -> list[str]:
    import txnlog

    return list(txnlog.Table(uri).snapshot().files().column("path").to_pylist())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-writes", action="store_true")
    parser.add_argument("--skip-reads", action="store_true")
    parser.add_argument("--connect", action="store_true", help="through Spark Connect (a local Connect server)")
    parser.add_argument("--time-zone", help="the session's time zone (spark.sql.session.timeZone) for the whole run")
    parser.add_argument("--partition", help="writes: partition every table by this SQL expression (e.g. \"timestamp_seconds(1700000000 + id %% 24 * 3600)\")")
    args = parser.parse_args()
    setup_logging()
    spark = spark_with_delta("bench-spark-native", connect=args.connect)
    if args.time_zone:
        spark.conf.set("spark.sql.session.timeZone", args.time_zone)
    work = WORK_DIR / f"spark-native-{args.rows}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    load_before = os.getloadavg()[0]
    rows = [] if args.skip_reads else reads(spark, args.rows, args.rounds, work)
    if not args.skip_writes:
        rows += writes(spark, args.rows, args.rounds, work, args.partition)
    print(machine_line())
    print(f"{type(spark).__module__}.{type(spark).__name__}; load average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; {args.rounds} rounds")
    print(markdown_table(["work", "txnlog", "spark.read/write.parquet", "delta-spark", "vs parquet (goal)", "vs delta-spark (goal)"], rows))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
