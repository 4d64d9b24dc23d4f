"""txnlog beside delta-spark in one SparkSession: a one-file blind append at version 200+, and
opening a 100k-file table with a checkpoint.

    .venv/bin/python benchmarks/bench_delta_spark.py            # 15 rounds each
    .venv/bin/python benchmarks/bench_delta_spark.py --quick    # 3 rounds, a 10k-file table

Append: three tables (``id long, v long``), each brought to version 200 by one-row txnlog
appends, one per contender, so that each engine pays its own checkpoints (both write one every
10 commits). Each round, in rotating order, appends one row (one file, one commit):

- delta-spark: ``df.write.format("delta").mode("append").save(path)``;
- txnlog.spark.write: ``txnlog.spark.write(df, path)``;
- Table.append: ``Table(path).append(arrow_table)`` on a ``Table`` kept across rounds (as a
  job keeps its DeltaLog).

The DataFrames are made once, outside the timing. After the rounds, txnlog and delta-spark must
read every table back with every appended row.

Open: the 100k-file table of ``bench_open.py`` (10 commits of 10,000 adds, a delta-rs
checkpoint at the last version; shared with it under benchmarks/_work/). Each round, cold
(delta-spark's DeltaLog cache cleared, a new txnlog ``Table``):

- delta-spark ``update()``: ``DeltaLog.forTable(spark, path).update()`` through py4j (the
  snapshot: log segment, protocol and metadata);
- delta-spark files: the same, then ``.allFiles().count()`` (its state reconstruction, a Spark
  job over the checkpoint);
- txnlog: ``Table(path).snapshot().files()``.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from _common import (
    WORK_DIR,
    interleaved,
    is_built,
    log,
    machine_line,
    mark_built,
    markdown_table,
    median,
    ms,
    paired_ratio,
    ratio,
    setup_logging,
)
from bench_mixed_writers import SCHEMA, session
from bench_open import build_open_table

APPEND_FROM = 200


def _append_template(path: Path) -> None:
    """A table at version ``APPEND_FROM``: created, then one-row appends."""
    from txnlog import Table

    params = {"version": APPEND_FROM}
    if is_built(path, params):
        return
    shutil.rmtree(path, ignore_errors=True)
    table = Table.create(str(path), SCHEMA)
    for i in range(APPEND_FROM):
        table.append(pa.table({"id": [i], "v": [0]}, schema=SCHEMA))
    mark_built(path, params)


def append_case(spark: Any, rounds: int) -> list[list[str]]:
    import txnlog.spark
    from txnlog import Table

    template = WORK_DIR / "delta_spark" / "append-template"
    _append_template(template)
    paths = {}
    for name in ("delta-spark", "txnlog.spark.write", "Table.append"):
        paths[name] = WORK_DIR / "delta_spark" / f"append-{name}"
        shutil.rmtree(paths[name], ignore_errors=True)
        shutil.copytree(template, paths[name])
    df = spark.createDataFrame([(-1, 0)], "id long, v long")
    row = pa.table({"id": [-1], "v": [0]}, schema=SCHEMA)
    table = Table(str(paths["Table.append"]))

    def delta_spark() -> None:
        df.write.format("delta").mode("append").save(str(paths["delta-spark"]))

    def spark_write() -> None:
        txnlog.spark.write(df, str(paths["txnlog.spark.write"]))

    def table_append() -> None:
        table.append(row)

    runners: dict[str, Callable[[], None]] = {"delta-spark": delta_spark, "txnlog.spark.write": spark_write, "Table.append": table_append}
    times, _ = interleaved(runners, rounds, warmup=1)
    for name, path in paths.items():
        expected = APPEND_FROM + rounds + 1
        by_txnlog = Table(str(path)).snapshot().to_arrow().num_rows
        by_delta = spark.read.format("delta").load(str(path)).count()
        if not by_txnlog == by_delta == expected:
            raise SystemExit(f"{name}: txnlog reads {by_txnlog} rows, delta-spark {by_delta}, expected {expected}")
    peer = times["delta-spark"]
    return [[name, ms(median(t)), ratio(paired_ratio(t, peer))] for name, t in times.items()]


def open_case(spark: Any, rounds: int, files_per_commit: int, scale: str) -> list[list[str]]:
    from txnlog import Table

    path = WORK_DIR / f"open-{scale}" / "checkpoint"
    path.parent.mkdir(parents=True, exist_ok=True)
    build_open_table(path, 10, files_per_commit, checkpoint=True)
    expected = 10 * files_per_commit
    delta = spark._jvm.org.apache.spark.sql.delta
    none = spark._jvm.scala.Option.empty()

    def update() -> Any:
        delta.DeltaLog.clearCache()
        return delta.DeltaLog.forTable(spark._jsparkSession, str(path)).update(False, none, none)

    def delta_update() -> int:
        return int(update().version())

    def delta_files() -> int:
        return int(update().allFiles().count())

    def txnlog_files() -> int:
        return int(Table(str(path)).snapshot().files().num_rows)

    times, results = interleaved({"delta-spark update()": delta_update, "delta-spark allFiles().count()": delta_files, "txnlog files()": txnlog_files}, rounds)
    if set(results["delta-spark allFiles().count()"]) != {expected} or set(results["txnlog files()"]) != {expected}:
        raise SystemExit(f"open: delta-spark counted {set(results['delta-spark allFiles().count()'])}, txnlog {set(results['txnlog files()'])}, expected {expected}")
    peer = times["delta-spark allFiles().count()"]
    return [[name, ms(median(t)), ratio(paired_ratio(t, peer))] for name, t in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    setup_logging()
    rounds = args.rounds or (3 if args.quick else 15)
    spark = session()
    log.info("append at version %d+: %d rounds", APPEND_FROM, rounds)
    appends = append_case(spark, rounds)
    files = 1_000 if args.quick else 10_000
    log.info("open a %d-file table: %d rounds", 10 * files, rounds)
    opens = open_case(spark, rounds, files, "quick" if args.quick else "full")
    print(f"### One-file blind append at version {APPEND_FROM}+ ({rounds} rounds, medians; {machine_line()}, pyspark {spark.version})\n")
    print(markdown_table(["writer", "time per append", "against delta-spark (paired)"], appends))
    print(f"\n### Open a {10 * files:,}-file table with a checkpoint, cold ({rounds} rounds, medians)\n")
    print(markdown_table(["reader", "time", "against delta-spark allFiles().count() (paired)"], opens))


if __name__ == "__main__":
    main()
