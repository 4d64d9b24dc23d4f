"""The main job: a small Spark pipeline whose commits go through txnlog.

1. Spark generates micro-batches of sales events.
2. Each batch is appended with an idempotent app transaction (appId, batchId), the way a
   foreachBatch sink does: re-running the job skips batches already committed.
3. A copy-on-write DELETE runs as a txnlog transaction: txnlog picks the files, Spark rewrites
   the surviving rows, and the commit replaces the files atomically.
4. Spark reads the table back from the snapshot's file list and reports per-region totals.

Run with ``make run`` (local Spark, local table under out/).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import pyarrow as pa

import txnlog

APP_ID = "spark-jobs/pipeline"
SCHEMA = pa.schema(
    [
        ("event_id", pa.int64()),
        ("user_id", pa.int64()),
        ("region", pa.string()),
        ("amount", pa.float64()),
    ]
)


def spark_session():
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("txnlog-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )


def batch(spark, batch_id: int, rows: int):
    from pyspark.sql import functions as F

    start = batch_id * rows
    return spark.range(start, start + rows).select(
        F.col("id").alias("event_id"),
        (F.col("id") % 97).alias("user_id"),
        F.element_at(F.array(F.lit("EU"), F.lit("US"), F.lit("APAC")), (F.col("id") % 3 + 1).cast("int")).alias("region"),
        F.round((F.col("id") * 7 % 1000) / 10.0, 2).alias("amount"),
    )


def to_arrow(df) -> pa.Table:
    return df.toArrow().cast(SCHEMA)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="out/events", help="table path or URI")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    spark = spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    table = txnlog.Table.create(args.table, SCHEMA, partition_by=["region"], mode="ignore")

    for batch_id in range(args.batches):
        result = table.append(to_arrow(batch(spark, batch_id, args.rows)), app_id=APP_ID, app_version=batch_id)
        print(f"batch {batch_id}: " + (f"committed version {result}" if result is not None else "already committed, skipped"))

    # Copy-on-write DELETE of small APAC orders: txnlog chooses the files, Spark rewrites them.
    predicate = "region = 'APAC' AND amount < 10"
    with table.transaction("DELETE", operation_parameters={"predicate": predicate}) as txn:
        files = txn.filter_files(predicate)
        uris = [txn.table.data_file_uri(p) for p in files.column("path").to_pylist()]
        candidates = spark.read.option("basePath", table.uri).parquet(*uris) if uris else None
        # Stats only say a file *may* hold matching rows: rewrite only if some row really matches,
        # so a re-run of the job changes nothing.
        if candidates is not None and candidates.where(predicate).limit(1).count():
            txn.remove_files(files)
            txn.write(to_arrow(candidates.where(f"NOT ({predicate})").select(*SCHEMA.names)))
        else:
            txn.abort()
    if txn.result is not None:
        print(f"delete where {predicate}: version {txn.result}, rewrote {files.num_rows} file(s)")

    snapshot = table.snapshot()
    df = spark.read.option("basePath", table.uri).parquet(*snapshot.file_uris())
    print(f"table {table.uri} at version {snapshot.version}: {snapshot.num_files} files")
    df.groupBy("region").agg({"amount": "sum", "event_id": "count"}).orderBy("region").show()
    for entry in table.history(limit=5):
        info = entry.commit_info
        print(f"  v{entry.version} {info.operation if info else '?'} blind={info.is_blind_append if info else '?'}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise SystemExit(main())
