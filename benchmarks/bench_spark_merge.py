"""Spark MERGE and streaming commits, each against its plain-Spark peer on the same session.

1. MERGE of 1% of the rows (updates and a few inserts) into a 1M-row table with
   ``txnlog.spark.merge``, against a full rebuild: plain Spark reads every row, applies the same
   upsert with a join and writes the whole table again with ``df.write.parquet``. Two source
   shapes: keys in one contiguous range (a recent slice, what key-range pruning is for) and keys
   spread over the whole table (every file holds a match: the worst case for copy-on-write).
2. A foreachBatch micro-batch commit (``foreach_batch_sink``, append mode) against a bare
   ``df.write.mode("append").parquet(...)`` of the same DataFrame: the sink's overhead is the
   app-transaction check, the log commit and the file rows sent back to the driver.

The contenders take turns (A, B, then B, A, ...); results are medians and paired ratios.

    .venv/bin/python benchmarks/bench_spark_merge.py            # 1M rows, 3 rounds
    .venv/bin/python benchmarks/bench_spark_merge.py --quick    # 100k rows, 1 round
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import WORK_DIR, interleaved, log, median, ms, paired_ratio, setup_logging  # noqa: E402
from txnlog import Table  # noqa: E402


def session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark-merge")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def events(spark: Any, start: int, stop: int, files: int = 1) -> Any:
    from pyspark.sql import functions as F

    return spark.range(start, stop, numPartitions=files).select(
        F.col("id").alias("key"),
        (F.col("id") % 1000).alias("user_id"),
        (F.col("id") * 7 % 10_000 / 100.0).alias("amount"),
        F.concat(F.lit("note-"), (F.col("id") % 97).cast("string")).alias("note"),
    )


def build_table(spark: Any, uri: str, rows: int, files: int) -> None:
    """``rows`` rows in ``files`` files of consecutive keys (as a keyed table appended in key
    order is), written by txnlog's Spark writer."""
    from txnlog.spark import write

    shutil.rmtree(uri, ignore_errors=True)
    write(events(spark, 0, rows, files).sortWithinPartitions("key"), uri, mode="overwrite")


def merge_source(spark: Any, rows: int, spread: bool) -> Any:
    """1% of ``rows``: updates of existing keys (99%) and new keys (1%)."""
    from pyspark.sql import functions as F

    n = rows // 100
    if spread:
        keys = spark.range(0, n, numPartitions=2).select((F.col("id") * 100 + 37).alias("key"))
    else:
        keys = spark.range(rows - n + n // 100, rows + n // 100, numPartitions=2).select(F.col("id").alias("key"))
    return keys.select("key", (F.col("key") % 1000).alias("user_id"), F.lit(-1.0).alias("amount"), F.lit("merged").alias("note")).cache()


def txnlog_merge(spark: Any, uri: str, source: Any) -> int:
    from txnlog.spark.merge import merge

    version = merge(spark, uri, source, on="key", when_matched_update="*", when_not_matched_insert="*")
    assert version is not None
    return Table(uri).snapshot().num_files


def full_rebuild(spark: Any, table_uri: str, out_dir: Path, source: Any) -> int:
    """Plain Spark: every row read, the upsert as a join, every row written."""
    target = spark.read.parquet(*Table(table_uri).snapshot().file_uris())
    kept = target.join(source.select("key"), on="key", how="left_anti")
    out = str(out_dir / uuid.uuid4().hex)
    kept.unionByName(source).write.parquet(out)
    return len(list(Path(out).glob("*.parquet")))


def bench_merge(spark: Any, rows: int, files: int, rounds: int) -> list[str]:
    lines = [
        f"### MERGE of 1% of {rows:,} rows ({files} files) vs a full rebuild",
        "",
        "| source keys | txnlog.spark.merge | full rebuild (plain Spark) | ratio (merge / rebuild) |",
        "| --- | --- | --- | --- |",
    ]
    for spread in (False, True):
        source = merge_source(spark, rows, spread)
        source.count()
        base = WORK_DIR / "spark_merge"
        table_uris = [str(base / f"table-{i}") for i in range(rounds + 1)]
        for uri in table_uris:
            build_table(spark, uri, rows, files)
        rebuilt = base / "rebuilt"
        shutil.rmtree(rebuilt, ignore_errors=True)
        rebuilt.mkdir(parents=True)
        fresh = iter(table_uris)  # each merge gets an unmerged table
        times, _ = interleaved(
            {
                "merge": lambda source=source, fresh=fresh: txnlog_merge(spark, next(fresh), source),
                "rebuild": lambda source=source, uri=table_uris[0], rebuilt=rebuilt: full_rebuild(spark, uri, rebuilt, source),
            },
            rounds,
        )
        label = "spread over every file" if spread else "one contiguous range"
        lines.append(
            f"| {label} | {ms(median(times['merge']))} | {ms(median(times['rebuild']))} | {paired_ratio(times['merge'], times['rebuild']):.2f}x |"
        )
        log.info("merge (spread=%s): %s", spread, times)
        source.unpersist()
    return lines


def bench_sink(spark: Any, batch_rows: int, batches: int) -> list[str]:
    from txnlog.spark.sink import foreach_batch_sink

    base = WORK_DIR / "spark_sink"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    uri, plain = str(base / "table"), str(base / "plain")
    sink = foreach_batch_sink(uri, "bench")
    batch = events(spark, 0, batch_rows, 2).cache()
    batch.count()
    ids = iter(range(10_000))
    times, _ = interleaved(
        {
            "sink": lambda: sink(batch, next(ids)),
            "parquet": lambda: batch.write.mode("append").parquet(plain),
        },
        batches,
    )
    batch.unpersist()
    overhead = median(times["sink"]) - median(times["parquet"])
    return [
        f"### A foreachBatch micro-batch commit vs a bare `df.write.parquet` ({batch_rows:,} rows, {batches} batches)",
        "",
        "| foreach_batch_sink (append) | df.write.mode('append').parquet | ratio | overhead per batch |",
        "| --- | --- | --- | --- |",
        f"| {ms(median(times['sink']))} | {ms(median(times['parquet']))} | {paired_ratio(times['sink'], times['parquet']):.2f}x | {ms(overhead)} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-rows", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds, args.batches = 100_000, 1, 3
    setup_logging()
    started = time.monotonic()
    spark = session()
    try:
        out = [f"load average at start: {os.getloadavg()[0]:.1f}", ""]
        out += bench_merge(spark, args.rows, args.files, args.rounds)
        out += [""]
        out += bench_sink(spark, args.batch_rows, args.batches)
        out += ["", f"load average at end: {os.getloadavg()[0]:.1f}; {time.monotonic() - started:.0f} s in all"]
        print("\n".join(out))
    finally:
        spark.stop()
        shutil.rmtree(WORK_DIR / "spark_merge", ignore_errors=True)
        shutil.rmtree(WORK_DIR / "spark_sink", ignore_errors=True)


if __name__ == "__main__":
    main()
