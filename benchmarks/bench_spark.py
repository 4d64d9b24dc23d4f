"""txnlog.spark write and read against plain Spark Parquet on the same session.

    .venv/bin/python benchmarks/bench_spark.py            # 1M rows, then 10M
    .venv/bin/python benchmarks/bench_spark.py --quick    # 100k rows, one round

Write: ``txnlog.spark.write(df, uri)`` (executors write Parquet with pyarrow, the driver commits)
against ``df.write.parquet(path)`` (Spark's writer and output committer). Read: a full scan that
touches every column (a sum per column, so neither side can answer from footers) through
``txnlog.spark.read`` against ``spark.read.parquet``. Runs alternate and the ratios are of paired
runs (see _common.py). Target (issue 8): at most 1.2x for both.
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

from _common import (
    WORK_DIR,
    fresh_paths,
    interleaved,
    log,
    machine_line,
    markdown_table,
    median,
    ms,
    paired_ratio,
    ratio,
    setup_logging,
    verdict,
)

import txnlog.spark as ts

COLUMNS = [
    "id",
    "cast(id % 1000 as int) as k",
    "cast(id * 0.5 as double) as v",
    "concat('name-', cast(id % 100000 as string)) as s",
    "timestamp_seconds(1700000000 + id) as ts",
]


def _session() -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )


def run(spark: Any, rows: int, rounds: int) -> list[list[str]]:
    base = WORK_DIR / "spark"
    df = spark.range(0, rows, numPartitions=4).selectExpr(*COLUMNS)
    fresh = fresh_paths(base, str(rows))

    def txnlog_write() -> str:
        uri = fresh("txnlog")
        ts.write(df, uri)
        return uri

    def parquet_write() -> str:
        path = fresh("parquet")
        df.write.parquet(path)
        return path

    log.info("write %d rows", rows)
    write_times, written = interleaved({"txnlog.spark.write": txnlog_write, "df.write.parquet": parquet_write}, rounds)
    table_uri, parquet_path = written["txnlog.spark.write"][-1], written["df.write.parquet"][-1]
    aggregate = ["sum(id)", "sum(k)", "sum(v)", "max(s)", "max(ts)"]

    def txnlog_read() -> Any:
        return ts.read(spark, table_uri).selectExpr(*aggregate).collect()[0]

    def parquet_read() -> Any:
        return spark.read.parquet(parquet_path).selectExpr(*aggregate).collect()[0]

    log.info("read %d rows", rows)
    read_times, answers = interleaved({"txnlog.spark.read": txnlog_read, "spark.read.parquet": parquet_read}, rounds)
    assert answers["txnlog.spark.read"][-1] == answers["spark.read.parquet"][-1], "the two reads disagree"
    for path in {*written["txnlog.spark.write"], *written["df.write.parquet"]}:
        shutil.rmtree(path, ignore_errors=True)

    w = paired_ratio(write_times["txnlog.spark.write"], write_times["df.write.parquet"])
    r = paired_ratio(read_times["txnlog.spark.read"], read_times["spark.read.parquet"])
    return [
        [f"write {rows:,} rows", ms(median(write_times["txnlog.spark.write"])), ms(median(write_times["df.write.parquet"])), ratio(w), verdict(w, 1.2)],
        [f"read (full scan) {rows:,} rows", ms(median(read_times["txnlog.spark.read"])), ms(median(read_times["spark.read.parquet"])), ratio(r), verdict(r, 1.2)],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, nargs="*", default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    setup_logging()
    sizes = args.rows or ([100_000] if args.quick else [1_000_000, 10_000_000])
    rounds = args.rounds or (1 if args.quick else 3)
    spark = _session()
    spark.sparkContext.setLogLevel("ERROR")
    table = []
    for rows in sizes:
        table.extend(run(spark, rows, rounds))
    print("## Spark write and read\n")
    print(machine_line() + f"; local[2] Spark session, {rounds} paired round(s) after a warm-up\n")
    print(markdown_table(["what", "txnlog.spark", "plain Spark Parquet", "ratio", "target ≤ 1.2x"], table))
    spark.stop()


if __name__ == "__main__":
    main()
