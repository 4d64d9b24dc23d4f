"""What the change data feed and row tracking cost, each against the same work without them.

1. ``Table.update`` of 1% of the rows and ``Table.merge`` of 1% (keys in every file) on a table
   with ``delta.enableChangeDataFeed=true`` against the same table without it (copy-on-write).
2. Reading one version's changes (``Table.changes(v, v)`` after that UPDATE) against reading the
   whole table (``Snapshot.to_arrow()``).
3. A one-file append (10,000 rows) and Spark's OPTIMIZE of 20 small files on a table with
   ``delta.enableRowTracking=true`` against the same without it.

Contenders take turns; every DML and OPTIMIZE run gets a fresh copy of its table.

    .venv/bin/python benchmarks/bench_change_data.py            # 1M rows in 20 files, 3 rounds
    .venv/bin/python benchmarks/bench_change_data.py --quick    # 100k rows, 1 round
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import WORK_DIR, interleaved, log, machine_line, markdown_table, median, ms, paired_ratio, ratio, setup_logging  # noqa: E402
from benchmarks.bench_row_level import build, copies, events, merge_source  # noqa: E402
from txnlog import Table  # noqa: E402

BASE = WORK_DIR / "row_level"
CDF = {"delta.enableChangeDataFeed": "true"}
ROW_TRACKING = {"delta.enableRowTracking": "true"}


def bench_dml(rows: int, files: int, rounds: int) -> list[str]:
    source = merge_source(rows)
    build(BASE / "plain", rows, files)
    build(BASE / "cdf", rows, files, CDF)
    n = rounds + 1
    out = []
    for what, run in (
        ("UPDATE of 1% (`key % 100 = 37`)", lambda uri: Table(uri).update("key % 100 = 37", set={"amount": "amount + 1"})),
        ("MERGE of 1% (keys in every file)", lambda uri: Table(uri).merge(source, on="key", when_matched_update="*", when_not_matched_insert="*")),
    ):
        plain, cdf = copies(BASE / "plain", n, "dml-plain"), copies(BASE / "cdf", n, "dml-cdf")
        times, _ = interleaved(
            {"cdf": lambda run=run, cdf=cdf: run(next(cdf)), "plain": lambda run=run, plain=plain: run(next(plain))}, rounds
        )
        out.append([what, ms(median(times["cdf"])), ms(median(times["plain"])), ratio(paired_ratio(times["cdf"], times["plain"]))])
        log.info("%s: %s", what, times)
    updated = str(BASE / "changes")
    shutil.rmtree(updated, ignore_errors=True)
    shutil.copytree(BASE / "cdf", updated)
    version = Table(updated).update("key % 100 = 37", set={"amount": "amount + 1"})
    assert version is not None
    changes = Table(updated).changes(int(version), int(version))
    assert changes.num_rows == 2 * (rows // 100), changes.num_rows  # pre- and post-image of each updated row
    times, _ = interleaved(
        {"changes": lambda: Table(updated).changes(int(version), int(version)), "table": lambda: Table(updated).snapshot().to_arrow()},
        rounds,
    )
    return [
        f"### The change data feed on {rows:,} rows ({files} files), copy-on-write",
        "",
        markdown_table(["operation", "with the change data feed", "without", "ratio"], out),
        "",
        markdown_table(
            ["read", "time", "peer: the whole table (`to_arrow()`)", "ratio"],
            [[f"`Table.changes(v, v)` of the UPDATE ({changes.num_rows:,} change rows)", ms(median(times["changes"])), ms(median(times["table"])),
              ratio(paired_ratio(times["changes"], times["table"]))]],
        ),
    ]


def bench_append(rounds: int) -> list[str]:
    batch = events(0, 10_000)
    tables = {}
    for name, props in (("tracked", ROW_TRACKING), ("plain", None)):
        uri = BASE / f"append-{name}"
        shutil.rmtree(uri, ignore_errors=True)
        tables[name] = Table.create(str(uri), batch.schema, properties=props)
        tables[name].append(batch)
    times, _ = interleaved({"tracked": lambda: tables["tracked"].append(batch), "plain": lambda: tables["plain"].append(batch)}, rounds * 5)
    return [["one-file append of 10,000 rows (`Table.append`)", ms(median(times["tracked"])), ms(median(times["plain"])),
             ratio(paired_ratio(times["tracked"], times["plain"]))]]


def bench_optimize(rows: int, rounds: int) -> list[str]:
    from benchmarks.bench_spark_merge import session
    from txnlog.spark import optimize

    spark = session()
    try:
        for name, props in (("tracked", ROW_TRACKING), ("plain", None)):
            build(BASE / f"optimize-{name}", rows, 20, props)
        n = rounds + 1
        tracked, plain = copies(BASE / "optimize-tracked", n, "opt-tracked"), copies(BASE / "optimize-plain", n, "opt-plain")
        times, _ = interleaved({"tracked": lambda: optimize(spark, next(tracked)), "plain": lambda: optimize(spark, next(plain))}, rounds)
    finally:
        spark.stop()
    return [[f"Spark OPTIMIZE of 20 files ({rows:,} rows) into one", ms(median(times["tracked"])), ms(median(times["plain"])),
             ratio(paired_ratio(times["tracked"], times["plain"]))]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-spark", action="store_true", help="leave out the Spark OPTIMIZE")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 100_000, 1
    setup_logging()
    started = time.monotonic()
    try:
        out: list[Any] = [machine_line(), ""]
        out += bench_dml(args.rows, args.files, args.rounds)
        tracking = bench_append(args.rounds)
        if not args.no_spark:
            tracking += bench_optimize(args.rows, args.rounds)
        out += ["", "### Row tracking", "", markdown_table(["operation", "with row tracking", "without", "ratio"], tracking)]
        out += ["", f"{time.monotonic() - started:.0f} s in all"]
        print("\n".join(out))
    finally:
        shutil.rmtree(BASE, ignore_errors=True)


if __name__ == "__main__":
    main()
