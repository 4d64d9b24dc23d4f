"""The ``txnlog`` Spark data source (``format("txnlog")``) against plain Spark Parquet, side by side.

    .venv/bin/python benchmarks/bench_datasource.py            # 10M rows (writes at 1M and 10M)
    .venv/bin/python benchmarks/bench_datasource.py --quick    # 1M rows, one round
    .venv/bin/python benchmarks/bench_datasource.py --only read --rows 1000000 --rounds 3

One local[2] session for every contender; contenders take turns and ratios are medians of paired
runs (see _common.py). The table: 5 columns (long, int, double, string, timestamp) in 100 files
of consecutive ids, written once by ``txnlog.spark.write``; the same rows as a Parquet directory
written by ``df.write.parquet`` (100 files too).

- **read**: a full scan aggregating every column (neither side can answer from footers), a
  one-column query, and a filter on ``id`` that selects 1% of the files (``filterPushdown``,
  a fresh ``load`` per query) against ``spark.read.parquet(dir).where(...)``. Contenders:
  ``spark.read.format("txnlog")``, ``txnlog.spark.read``, ``spark.read.parquet``.
- **deletion vectors**: the same table with 10% of its rows deleted by vectors (``id % 10 = 3``),
  read by ``txnlog.spark.read`` and the format, against ``spark.read.parquet(dir).where("id % 10
  <> 3")`` (the same rows).
- **write**: ``df.write.format("txnlog").save``, ``df.write.parquet`` and ``txnlog.spark.write``
  at 1M and 10M rows (4 input partitions), each run to a fresh path; and two floors, Python
  data sources that drop Spark's Arrow batches or only write them with pyarrow (see
  ``register_floors``): what any writer on this API pays before txnlog's own work.
- **stream**: ``readStream.format("txnlog")`` of a source table → ``writeStream.format("txnlog")``
  into a sink table; one small append committed to the source at a time, and the time from its
  commit to the sink's commit of it (both commits' timestamps), median and p95 over N batches.

Goals (issue 17): format read ≤ 2x ``spark.read.parquet`` on a full scan and faster than
parquet+where with the 1% filter; ``txnlog.spark.read`` ≤ 1.2x with and without vectors; format
write ≤ 1.15x ``df.write.parquet``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from benchmarks._common import (  # noqa: E402
    WORK_DIR,
    fresh_paths,
    interleaved,
    is_built,
    log,
    machine_line,
    mark_built,
    markdown_table,
    median,
    ms,
    paired_ratio,
    percentile,
    ratio,
    setup_logging,
    verdict,
)

BASE = WORK_DIR / "datasource"
FILES = 100
COLUMNS = [
    "id",
    "cast(id % 1000 as int) as k",
    "cast(id * 0.5 as double) as v",
    "concat('name-', cast(id % 100000 as string)) as s",
    "timestamp_seconds(1700000000 + id) as ts",
]
EVERY_COLUMN = ["sum(id)", "sum(k)", "sum(v)", "max(s)", "max(ts)", "count(*)"]
ONE_COLUMN = ["sum(v)"]
DELETED = "id % 10 = 3"
DV = {"delta.enableDeletionVectors": "true"}


def session() -> Any:
    from pyspark.sql import SparkSession

    import txnlog.spark as ts

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-datasource")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ts.register(spark)
    return spark


def rows_df(spark: Any, rows: int, partitions: int) -> Any:
    return spark.range(0, rows, numPartitions=partitions).selectExpr(*COLUMNS)


def build(spark: Any, rows: int) -> tuple[str, str, str]:
    """The txnlog table, the same with 10% deleted by vectors, and the Parquet directory."""
    import txnlog
    import txnlog.spark as ts

    plain, dv, parquet = (str(BASE / f"{name}-{rows}") for name in ("table", "table-dv", "parquet"))
    params = {"rows": rows, "files": FILES, "columns": COLUMNS, "deleted": DELETED}
    if is_built(BASE / f"built-{rows}", params):  # kept between runs: building 10M rows three times takes minutes
        return plain, dv, parquet
    for path in (plain, dv, parquet):
        shutil.rmtree(path, ignore_errors=True)
    df = rows_df(spark, rows, FILES)
    ts.write(df, plain, mode="overwrite")
    ts.write(df, dv, mode="overwrite", properties=DV)
    txnlog.Table(dv).delete(DELETED)
    df.write.parquet(parquet)
    snapshot = txnlog.Table(dv).snapshot()
    assert snapshot.num_files == FILES and snapshot.files().column("deletion_vector").null_count == 0, "every file should have a vector"
    (BASE / f"built-{rows}").mkdir(parents=True, exist_ok=True)
    mark_built(BASE / f"built-{rows}", params)
    return plain, dv, parquet


def bench_read(spark: Any, rows: int, rounds: int, warmup: int) -> list[list[str]]:
    import txnlog.spark as ts

    plain, dv, parquet = build(spark, rows)
    out: list[list[str]] = []
    cut = rows // FILES  # the first file's ids: 1% of the files

    def fmt(uri: str, pushdown: bool = False, schema: str | None = None) -> Any:
        reader = spark.read.format("txnlog")
        if pushdown:
            reader = reader.option("filterPushdown", "true")
        if schema is not None:
            reader = reader.schema(schema)
        return reader.load(uri)  # a fresh load per query (pushed filters stick to a DataFrame)

    def query(df: Any, aggregates: list[str], where: str | None = None) -> Any:
        if where is not None:
            df = df.where(where)
        return tuple(df.selectExpr(*aggregates).collect()[0])

    cases = [  # (what, aggregates, filter, filterPushdown, the schema given to the format: the columns it reads)
        ("full scan", EVERY_COLUMN, None, False, None),
        ("one column (sum(v))", ONE_COLUMN, None, False, None),
        ("one column (sum(v)), `.schema(\"v double\")` given to the format", ONE_COLUMN, None, False, "v double"),
        (f"filter id < {cut:,} (1 of {FILES} files)", EVERY_COLUMN, f"id < {cut}", True, None),
    ]
    for label, aggregates, where, pushdown, schema in cases:
        log.info("read %s, %d rows", label, rows)
        runners = {
            "format": lambda a=aggregates, w=where, p=pushdown, s=schema: query(fmt(plain, p, s), a, w),
            "txnlog.spark.read": lambda a=aggregates, w=where: query(ts.read(spark, plain), a, w),
            "parquet": lambda a=aggregates, w=where: query(spark.read.parquet(parquet), a, w),
        }
        times, answers = interleaved(runners, rounds, warmup=warmup)
        assert answers["format"][-1] == answers["parquet"][-1] == answers["txnlog.spark.read"][-1], (label, answers)
        f, t = paired_ratio(times["format"], times["parquet"]), paired_ratio(times["txnlog.spark.read"], times["parquet"])
        if where is not None:
            goal = f"< 1x: {verdict(f, 0.999)}"
        elif aggregates is EVERY_COLUMN:
            goal = f"≤ 2x: {verdict(f, 2.0)}"
        else:
            goal = "measured"
        out.append([f"read {rows:,}: {label}", ms(median(times["format"])), ms(median(times["txnlog.spark.read"])),
                    ms(median(times["parquet"])), ratio(f), goal, ratio(t), verdict(t, 1.2)])

    log.info("read with deletion vectors, %d rows", rows)
    kept = DELETED.replace("=", "<>")
    runners = {
        "format": lambda: query(fmt(dv), EVERY_COLUMN),
        "txnlog.spark.read": lambda: query(ts.read(spark, dv), EVERY_COLUMN),
        "parquet": lambda: query(spark.read.parquet(parquet), EVERY_COLUMN, kept),
    }
    times, answers = interleaved(runners, rounds, warmup=warmup)
    assert answers["format"][-1] == answers["parquet"][-1] == answers["txnlog.spark.read"][-1], answers
    f, t = paired_ratio(times["format"], times["parquet"]), paired_ratio(times["txnlog.spark.read"], times["parquet"])
    out.append([f"read {rows:,}: full scan, 10% deleted by vectors (parquet: `where {kept}`)", ms(median(times["format"])),
                ms(median(times["txnlog.spark.read"])), ms(median(times["parquet"])), ratio(f), f"≤ 2x: {verdict(f, 2.0)}",
                ratio(t), verdict(t, 1.2)])
    return out


def register_floors(spark: Any) -> None:
    """Two throwaway write-only Python data sources that bound what any Python writer can reach:
    ``floor_transfer`` takes Spark's Arrow batches and drops them (the JVM -> Python transfer
    and the DataFrame's own work); ``floor_pyarrow`` writes each task's batches to one Parquet
    file with pyarrow's ``ParquetWriter`` and nothing else (no log, no statistics). Defined here,
    so Spark pickles them by value to its workers."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class Dropped(WriterCommitMessage):
        pass

    class TransferWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return Dropped()

    class PyarrowWriter(DataSourceArrowWriter):
        def __init__(self, path: str) -> None:
            self.path = path

        def write(self, iterator: Any) -> WriterCommitMessage:
            import uuid

            import pyarrow.parquet as pq

            writer = None
            for batch in iterator:
                if writer is None:
                    os.makedirs(self.path, exist_ok=True)
                    writer = pq.ParquetWriter(os.path.join(self.path, f"part-{uuid.uuid4().hex}.parquet"), batch.schema)
                writer.write_batch(batch)
            if writer is not None:
                writer.close()
            return Dropped()

    class FloorTransfer(DataSource):
        @classmethod
        def name(cls) -> str:
            return "floor_transfer"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return TransferWriter()

    class FloorPyarrow(DataSource):
        @classmethod
        def name(cls) -> str:
            return "floor_pyarrow"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return PyarrowWriter(self.options["path"])

    spark.dataSource.register(FloorTransfer)
    spark.dataSource.register(FloorPyarrow)


def bench_write(spark: Any, rows: int, rounds: int, warmup: int) -> tuple[list[str], list[str]]:
    import txnlog.spark as ts

    df = rows_df(spark, rows, 4)
    fresh = fresh_paths(BASE, f"write-{rows}")

    def done(path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)  # keeps the disk and page cache from filling up

    def fmt() -> None:
        path = fresh("format")
        df.write.format("txnlog").mode("append").save(path)
        done(path)

    def parquet() -> None:
        path = fresh("parquet")
        df.write.parquet(path)
        done(path)

    def function() -> None:
        path = fresh("function")
        ts.write(df, path)
        done(path)

    def transfer() -> None:
        df.write.format("floor_transfer").mode("append").save(fresh("transfer"))

    def pyarrow_only() -> None:
        path = fresh("pyarrow")
        df.write.format("floor_pyarrow").mode("append").save(path)
        done(path)

    log.info("write %d rows", rows)
    contenders = {"format": fmt, "parquet": parquet, "txnlog.spark.write": function, "transfer": transfer, "pyarrow": pyarrow_only}
    times, _ = interleaved(contenders, rounds, warmup=warmup)
    f, t = paired_ratio(times["format"], times["parquet"]), paired_ratio(times["txnlog.spark.write"], times["parquet"])
    row = [f"write {rows:,} rows", ms(median(times["format"])), ms(median(times["txnlog.spark.write"])), ms(median(times["parquet"])),
           ratio(f), f"≤ 1.15x: {verdict(f, 1.15)}", ratio(t), "–"]
    floors = [f"write {rows:,} rows", ms(median(times["transfer"])), ms(median(times["pyarrow"])), ms(median(times["format"])),
              ms(median(times["parquet"])), ratio(paired_ratio(times["transfer"], times["parquet"])),
              ratio(paired_ratio(times["pyarrow"], times["parquet"])), ratio(f), ratio(paired_ratio(times["format"], times["pyarrow"]))]
    return row, floors


def bench_stream(spark: Any, batches: int, rows_per_batch: int) -> list[str]:
    """Median and p95 of source commit → sink commit, one source commit per micro-batch."""
    import pyarrow as pa

    import txnlog

    work = Path(tempfile.mkdtemp(prefix="stream-", dir=BASE))
    source_uri, sink_uri, checkpoint = (str(work / n) for n in ("source", "sink", "checkpoint"))
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])
    source = txnlog.Table.create(source_uri, schema)
    source.append(pa.table({"id": [-1], "v": [0.0]}, schema=schema))

    query = (spark.readStream.format("txnlog").load(source_uri)
             .writeStream.format("txnlog").option("checkpointLocation", checkpoint).start(sink_uri))
    sink = txnlog.Table(sink_uri)

    def wait_for(version: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not (sink.exists() and sink.latest_version() >= version):
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"the sink did not reach version {version}: {query.exception()}")
            time.sleep(0.005)

    latencies: list[float] = []
    try:
        wait_for(0)  # the starting snapshot's batch
        for i in range(batches + 1):
            start = i * rows_per_batch
            ids = pa.array(range(start, start + rows_per_batch), pa.int64())
            committed = source.append(pa.table({"id": ids, "v": pa.array([0.5] * rows_per_batch)}, schema=schema))
            wait_for(i + 1)
            source_ms = source.history(1)[0].timestamp
            sink_ms = sink.history(1)[0].timestamp
            assert committed is not None
            if i > 0:  # the first commit after the start waits for the query's first poll
                latencies.append((sink_ms - source_ms) / 1000)
    finally:
        query.stop()
    total = sink.snapshot().to_arrow().num_rows
    assert total == 1 + (batches + 1) * rows_per_batch, f"the sink holds {total} rows"
    shutil.rmtree(work, ignore_errors=True)
    return [f"readStream.format(\"txnlog\") → writeStream.format(\"txnlog\"), {batches} micro-batches of {rows_per_batch:,} rows "
            "(default trigger)", ms(median(latencies)), ms(percentile(latencies, 95)), ms(max(latencies))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1M rows for reads and writes, 1 round, 5 stream batches")
    parser.add_argument("--rows", type=int, default=None, help="rows of the read table (default 10M; 1M with --quick)")
    parser.add_argument("--write-rows", type=int, nargs="*", default=None, help="default 1M and 10M; 1M with --quick")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--batches", type=int, default=None, help="stream micro-batches (default 20; 5 with --quick)")
    parser.add_argument("--only", choices=["read", "write", "stream"], action="append")
    args = parser.parse_args()
    setup_logging()
    load_at_start = os.getloadavg()
    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    write_rows = args.write_rows or ([1_000_000] if args.quick else [1_000_000, 10_000_000])
    rounds = args.rounds or (1 if args.quick else 3)
    batches = args.batches or (5 if args.quick else 20)
    only = set(args.only or ["read", "write", "stream"])
    BASE.mkdir(parents=True, exist_ok=True)
    spark = session()
    table: list[list[str]] = []
    stream: list[str] | None = None
    if "read" in only:
        table += bench_read(spark, rows, rounds, args.warmup)
    floors: list[list[str]] = []
    if "write" in only:
        register_floors(spark)
        for n in write_rows:
            row, floor = bench_write(spark, n, rounds, args.warmup)
            table.append(row)
            floors.append(floor)
    if "stream" in only:
        stream = bench_stream(spark, batches, 1000)
    print("## Spark data source\n")
    print(machine_line() + f"; local[2] Spark session, {rounds} paired round(s) after {args.warmup} warm-up round(s); "
          f"load average (1, 5, 15 min) {', '.join(f'{x:.1f}' for x in load_at_start)} at the start, "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end\n")
    if table:
        print(markdown_table(["what", "format(\"txnlog\")", "txnlog.spark", "plain Spark Parquet", "format / parquet", "goal",
                              "txnlog.spark / parquet", "≤ 1.2x"], table))
    if floors:
        print("\nWrite floors (throwaway Python data sources: Arrow batches dropped; written by pyarrow's ParquetWriter alone)\n")
        print(markdown_table(["what", "transfer only", "pyarrow writer", "format(\"txnlog\")", "df.write.parquet",
                              "transfer / parquet", "pyarrow / parquet", "format / parquet", "format / pyarrow"], floors))
    if stream is not None:
        print()
        print(markdown_table(["stream", "median", "p95", "max"], [stream]))
    spark.stop()


if __name__ == "__main__":
    main()
