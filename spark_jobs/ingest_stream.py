"""Streaming ingest: a rate source or a folder of files, written to a txnlog table exactly once,
by the foreachBatch sink (``--sink foreach``, the default) or the data source's streaming sink
(``--sink format``: ``writeStream.format("txnlog")``).

    python -m spark_jobs.ingest_stream --table data/events --source-dir data/incoming \
        --checkpoint data/_checkpoints/ingest --available-now

Each micro-batch commits together with txn(appId, batchId), the app id being --app-id
(foreach) or the query's id, kept in its checkpoint (format): after a crash or a kill, restart
the same command (same --checkpoint, and --app-id) and Spark replays the unfinished batch, which
the sink skips if it had landed. Exit codes: 0 done, 1 failed (a txnlog error), 2 bad
arguments, 3 a conflict that is not safe to retry.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs._common import CONFLICT, FAILED, OK, local_session, setup_logging
from txnlog.errors import CommitConflictError, TxnLogError
from txnlog.spark import register
from txnlog.spark.sink import foreach_batch_sink

log = logging.getLogger("spark_jobs.ingest_stream")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ingest_stream", description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="table path or URI")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--source-dir", help="folder of source files (new files are picked up as they arrive)")
    source.add_argument("--rate", type=int, help="rows per second from Spark's rate source")
    parser.add_argument("--format", default="parquet", choices=["parquet", "json", "csv"], help="format of --source-dir files")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint location (keep it across restarts)")
    parser.add_argument("--app-id", default="spark_jobs.ingest_stream", help="the sink's app id (stable across restarts)")
    parser.add_argument("--sink", default="foreach", choices=["foreach", "format"],
                        help="foreach: foreach_batch_sink (append or merge); format: writeStream.format('txnlog') (append)")
    parser.add_argument("--mode", default="append", choices=["append", "merge"])
    parser.add_argument("--merge-on", help="key column(s), comma-separated, for --mode merge")
    parser.add_argument("--partition-by", default="", help="partition columns of a new table, comma-separated")
    parser.add_argument("--files-per-batch", type=int, default=1, help="source files per micro-batch")
    parser.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval when not --available-now")
    parser.add_argument("--available-now", action="store_true", help="process what is there now, then stop")
    parser.add_argument("--run-seconds", type=float, help="stop after this many seconds (rate source or a live folder)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.sink == "format" and args.mode != "append":
        parser.error("--sink format appends; --mode merge needs --sink foreach")
    return args


def source_stream(spark: Any, args: argparse.Namespace) -> Any:
    """The streaming DataFrame the job reads."""
    if args.rate is not None:
        from pyspark.sql import functions as F

        return (
            spark.readStream.format("rate")
            .option("rowsPerSecond", args.rate)
            .load()
            .select(F.col("value").alias("id"), F.col("timestamp").alias("ts"), F.to_date("timestamp").alias("day"))
        )
    # A file stream needs its schema up front: take it from the files already there.
    schema = spark.read.format(args.format).option("header", "true").option("inferSchema", "true").load(args.source_dir).schema
    return (
        spark.readStream.format(args.format)
        .schema(schema)
        .option("header", "true")
        .option("maxFilesPerTrigger", args.files_per_batch)
        .load(args.source_dir)
    )


def start(spark: Any, args: argparse.Namespace, sink: Callable[[Any, int], None] | None) -> Any:
    """Start the query: ``source_stream`` -> ``sink`` (None: ``writeStream.format("txnlog")``
    into ``args.table``), checkpointed at ``args.checkpoint``."""
    stream = source_stream(spark, args).writeStream.option("checkpointLocation", str(args.checkpoint))
    if sink is not None:
        writer = stream.foreachBatch(sink)
    else:
        register(spark)
        writer = stream.format("txnlog").outputMode("append").option("path", args.table)
        partition_by = [c for c in args.partition_by.split(",") if c]
        if partition_by:
            writer = writer.option("partitionBy", ",".join(partition_by))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    return writer.queryName(args.app_id.replace("/", "_").replace(".", "_")).start()


def make_sink(args: argparse.Namespace) -> Any:
    """The foreachBatch sink, or None for ``--sink format``."""
    if args.sink == "format":
        return None
    return foreach_batch_sink(
        args.table,
        args.app_id,
        mode=args.mode,
        merge_on=args.merge_on.split(",") if args.merge_on else None,
        partition_by=[c for c in args.partition_by.split(",") if c] or None,
    )


def run(spark: Any, args: argparse.Namespace) -> int:
    sink = make_sink(args)
    query = start(spark, args, sink)
    try:
        if args.run_seconds is not None:
            query.awaitTermination(args.run_seconds)
            query.stop()
        else:
            query.awaitTermination()
    except Exception as e:  # the query's failure comes back as a StreamingQueryException
        cause = sink.last_error if sink is not None and isinstance(sink.last_error, TxnLogError) else _txnlog_cause(e)
        if cause is None:
            raise
        log.error("ingest into %s failed: %s", args.table, cause)
        return CONFLICT if isinstance(cause, CommitConflictError) else FAILED
    if sink is None:
        batches = [p for p in query.recentProgress if p.numInputRows]
        print(f"ingest {args.table}: {len(batches)} batch(es) written by writeStream.format('txnlog'), query id {query.id}")
        return OK
    stats = sink.stats  # type: ignore[attr-defined]
    print(
        f"ingest {args.table}: {stats.committed} batch(es) committed, {stats.skipped} replayed batch(es) skipped, "
        f"{stats.retries} retried after compaction"
    )
    return OK


def _txnlog_cause(error: BaseException) -> TxnLogError | None:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, TxnLogError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose)
    own = spark is None
    spark = spark if spark is not None else local_session("txnlog-ingest-stream")
    try:
        return run(spark, args)
    except TxnLogError as e:
        log.error("%s", e)
        return CONFLICT if isinstance(e, CommitConflictError) else FAILED
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
