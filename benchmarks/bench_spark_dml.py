"""Spark DML with deletion vectors against copy-on-write and against a full rebuild.

1. MERGE of 1% of the rows (keys spread over every file) into a table with deletion vectors,
   against a full rebuild with plain Spark (every row read, the upsert as a join, every row
   written). And copy-on-write MERGE with the keys in one file of the 20, against the same.
2. DELETE of 0.1% of the rows, spread over every file: deletion vectors against copy-on-write.
3. Reading a table with 10% of its rows deleted through deletion vectors against reading the
   same rows from a table that holds only them.

Every contender takes turns with its peer (A, B, then B, A, ...); each DML run gets a table of
its own, built before timing. Results are medians and paired ratios.

    .venv/bin/python benchmarks/bench_spark_dml.py                  # 10M rows, 20 files, 3 rounds
    .venv/bin/python benchmarks/bench_spark_dml.py --quick          # 200k rows, 1 round
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import WORK_DIR, interleaved, log, median, ms, paired_ratio, ratio, setup_logging, verdict  # noqa: E402
from benchmarks.bench_row_level import copies as _copies  # noqa: E402
from benchmarks.bench_spark_merge import events, full_rebuild, session  # noqa: E402
from txnlog import Table  # noqa: E402

BASE = WORK_DIR / "spark_dml"
DV = {"delta.enableDeletionVectors": "true"}


def build(spark: Any, uri: Path, rows: int, files: int, properties: dict[str, str] | None = None, where: str | None = None) -> str:
    """``rows`` rows in ``files`` files of consecutive keys, written by txnlog's Spark writer
    (``where`` keeps only the rows matching it)."""
    from txnlog.spark import write

    shutil.rmtree(uri, ignore_errors=True)
    df = events(spark, 0, rows, files)
    if where is not None:
        df = df.where(where)
    write(df.sortWithinPartitions("key"), str(uri), mode="overwrite", properties=properties)
    return str(uri)


def copies(source: str, n: int, name: str) -> Iterator[str]:
    return _copies(source, n, name, BASE)


def merge_source(spark: Any, rows: int, spread: bool) -> Any:
    """1% of ``rows``: updates of existing keys, 1% of them new keys. ``spread``: keys in every
    file; otherwise keys from the middle of one file (of 20)."""
    from pyspark.sql import functions as F

    n = rows // 100
    if spread:
        keys = spark.range(0, n, numPartitions=2).select((F.col("id") * 100 + 37).alias("key"))
    else:
        first = (rows // 20) * 7  # the 8th file's first key: a file in the middle
        keys = spark.range(first, first + n, numPartitions=2).select(F.col("id").alias("key"))
    keys = keys.select(F.when(F.col("key") % 100 == 99, F.col("key") + rows).otherwise(F.col("key")).alias("key"))
    return keys.select("key", (F.col("key") % 1000).alias("user_id"), F.lit(-1.0).alias("amount"), F.lit("merged").alias("note")).cache()


def txnlog_merge(spark: Any, uri: str, source: Any) -> None:
    from txnlog.spark.merge import merge

    merge(spark, uri, source, on="key", when_matched_update="*", when_not_matched_insert="*")


def txnlog_delete(spark: Any, uri: str, predicate: str) -> None:
    from txnlog.spark import transaction

    with transaction(spark, uri, "DELETE") as tx:
        tx.delete(predicate)


def bench_merge(spark: Any, rows: int, files: int, rounds: int) -> list[str]:
    out = [
        f"### MERGE of 1% of {rows:,} rows ({files} files) vs a full rebuild with plain Spark",
        "",
        "| txnlog | source keys | txnlog.spark.merge | full rebuild | ratio | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    rebuilt = BASE / "rebuilt"
    for mode, spread, limit in (("deletion vectors", True, 0.1), ("copy-on-write", False, 0.3)):
        base = build(spark, BASE / "merge-base", rows, files, DV if mode == "deletion vectors" else None)
        fresh = copies(base, rounds + 1, "merge")
        source = merge_source(spark, rows, spread)
        source.count()
        shutil.rmtree(rebuilt, ignore_errors=True)
        rebuilt.mkdir(parents=True)
        times, _ = interleaved(
            {
                "merge": lambda source=source, fresh=fresh: txnlog_merge(spark, next(fresh), source),
                "rebuild": lambda source=source, base=base: full_rebuild(spark, base, rebuilt, source),
            },
            rounds,
        )
        source.unpersist()
        r = paired_ratio(times["merge"], times["rebuild"])
        keys = "spread over every file" if spread else "in one file"
        out.append(f"| {mode} | {keys} | {ms(median(times['merge']))} | {ms(median(times['rebuild']))} | {ratio(r)} | ≤ {limit}x: {verdict(r, limit)} |")
        log.info("merge %s: %s", mode, times)
    return out


def bench_delete(spark: Any, rows: int, files: int, rounds: int) -> list[str]:
    predicate = "key % 1000 = 7"  # 0.1% of the rows, in every file
    dv_base = build(spark, BASE / "delete-dv", rows, files, DV)
    cow_base = build(spark, BASE / "delete-cow", rows, files)
    dv_fresh = copies(dv_base, rounds + 1, "delete-dv")
    cow_fresh = copies(cow_base, rounds + 1, "delete-cow")
    times, _ = interleaved(
        {
            "dv": lambda: txnlog_delete(spark, next(dv_fresh), predicate),
            "cow": lambda: txnlog_delete(spark, next(cow_fresh), predicate),
        },
        rounds,
    )
    r = paired_ratio(times["dv"], times["cow"])
    return [
        f"### DELETE of 0.1% of {rows:,} rows ({files} files, matches in every file)",
        "",
        "| deletion vectors | copy-on-write | ratio | target |",
        "| --- | --- | --- | --- |",
        f"| {ms(median(times['dv']))} | {ms(median(times['cow']))} | {ratio(r)} | ≤ 0.05x: {verdict(r, 0.05)} |",
    ]


def bench_read(spark: Any, rows: int, files: int, rounds: int) -> list[str]:
    from pyspark.sql import functions as F

    from txnlog.spark import read

    deleted = build(spark, BASE / "read-dv", rows, files, DV)
    txnlog_delete(spark, deleted, "key % 10 = 3")
    survivors = build(spark, BASE / "read-survivors", rows, files, where="key % 10 != 3")

    def scan(uri: str) -> int:
        # An aggregate over every column, so every value is decoded and no column is pruned.
        df = read(spark, uri)
        return int(df.agg(F.count("*"), F.sum("key"), F.sum("user_id"), F.sum("amount"), F.max(F.length("note"))).collect()[0][0])

    assert scan(deleted) == scan(survivors) == rows - rows // 10
    times, _ = interleaved({"dv": lambda: scan(deleted), "plain": lambda: scan(survivors)}, rounds)
    spark_ratio = paired_ratio(times["dv"], times["plain"])
    arrow_times, _ = interleaved(
        {"dv": lambda: Table(deleted).snapshot().to_arrow(), "plain": lambda: Table(survivors).snapshot().to_arrow()}, rounds
    )
    arrow_ratio = paired_ratio(arrow_times["dv"], arrow_times["plain"])
    return [
        f"### Reading {rows - rows // 10:,} rows: 10% of {rows:,} deleted through deletion vectors vs the same rows without",
        "",
        "| reader | with deletion vectors | without | ratio | target |",
        "| --- | --- | --- | --- | --- |",
        f"| txnlog.spark.read (every column aggregated) | {ms(median(times['dv']))} | {ms(median(times['plain']))} | {ratio(spark_ratio)} | ≤ 1.3x: {verdict(spark_ratio, 1.3)} |",
        f"| Snapshot.to_arrow() | {ms(median(arrow_times['dv']))} | {ms(median(arrow_times['plain']))} | {ratio(arrow_ratio)} | ≤ 1.3x: {verdict(arrow_ratio, 1.3)} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("merge", "delete", "read"), action="append")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 200_000, 1
    setup_logging()
    started = time.monotonic()
    spark = session()
    parts = args.only or ["merge", "delete", "read"]
    try:
        out = [f"load average at start: {os.getloadavg()[0]:.1f}", ""]
        for part in parts:
            out += {"merge": bench_merge, "delete": bench_delete, "read": bench_read}[part](spark, args.rows, args.files, args.rounds)
            out += [""]
            print("\n".join(out), flush=True)
            out = []
        print(f"load average at end: {os.getloadavg()[0]:.1f}; {time.monotonic() - started:.0f} s in all")
    finally:
        spark.stop()
        shutil.rmtree(BASE, ignore_errors=True)


if __name__ == "__main__":
    main()
