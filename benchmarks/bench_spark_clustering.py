"""Liquid clustering on Spark (issue 25): ``txnlog.spark.optimize`` against delta-spark's
``OPTIMIZE`` of the same clustered table, in one local[2] session with delta-spark in it, the
contenders taking turns.

    TXNLOG_DELTA_JARS_DIR=.delta-jars .venv/bin/python benchmarks/bench_spark_clustering.py             # 2M rows
    ... --rows 500000 --rounds 1                                                                           # a quick look

The same rows (``x``, ``y``: uniform random longs, and a short string) are appended in
``--appends`` files to two tables clustered by ``(x, y)``: one created by txnlog
(``cluster_by``), one by delta-spark (``CREATE TABLE ... CLUSTER BY``). Both have
``delta.targetFileSize`` set to the appended bytes / ``--files``, and the session's
``spark.databricks.delta.optimize.maxFileSize`` says the same to delta-spark. Each round
optimizes a fresh copy of each (made before timing). Reported: OPTIMIZE time, the files after
it, and the share of files txnlog's scan planning keeps (min/max statistics) for 20 point
queries on either column, on each contender's last table. Both must keep the same rows.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

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
    ratio,
    setup_logging,
    spark_with_delta,
)
from benchmarks.bench_row_level import copies  # noqa: E402
from txnlog import Table  # noqa: E402

BASE = WORK_DIR / "spark_clustering"
DOMAIN = 1_000_000_000
SCHEMA = pa.schema([("x", pa.int64()), ("y", pa.int64()), ("payload", pa.string())])


def build(spark: Any, rows: int, appends: int, files: int) -> dict[str, str]:
    """The two clustered tables holding the same appended files' rows."""
    shutil.rmtree(BASE, ignore_errors=True)
    paths = {"txnlog": str(BASE / "txnlog-base"), "delta-spark": str(BASE / "delta-base")}
    Table.create(paths["txnlog"], SCHEMA, cluster_by=["x", "y"])
    spark.sql(f"CREATE TABLE delta.`{paths['delta-spark']}` (x BIGINT, y BIGINT, payload STRING) USING delta CLUSTER BY (x, y)")
    rng = np.random.default_rng(42)
    per_append = rows // appends
    for _ in range(appends):
        x, y = rng.integers(0, DOMAIN, per_append), rng.integers(0, DOMAIN, per_append)
        batch = pa.table({"x": x, "y": y, "payload": [f"p{v % 1000}" for v in x]}, schema=SCHEMA)
        for path in paths.values():
            Table(path).append(batch)
    size = sum(Table(paths["txnlog"]).snapshot().files().column("size").to_pylist())
    target = max(1, size // files)
    for path in paths.values():
        Table(path).alter.set_table_properties({"delta.targetFileSize": str(target)})
    log.info("two clustered tables of %d rows in %d files; target file size %d bytes", rows, appends, target)
    return paths


def _point_share(uri: str, column: str, probes: int = 20) -> float:
    snapshot = Table(uri).snapshot()
    values = snapshot.to_arrow(columns=[column]).column(column).to_pylist()
    picks = np.random.default_rng(1).choice(values, probes, replace=False)
    return float(np.mean([snapshot.files(f"{column} = {int(v)}").num_rows for v in picks])) / snapshot.num_files


def _rows(spark: Any, uri: str) -> tuple[Any, ...]:
    return tuple(spark.read.format("delta").load(uri).selectExpr("count(*)", "sum(x)", "sum(y)", "count(distinct payload)").collect()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--files", type=int, default=40, help="about this many files after OPTIMIZE")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    setup_logging()
    spark = spark_with_delta("bench-spark-clustering")
    paths = build(spark, args.rows, args.appends, args.files)
    target_size = Table(paths["txnlog"]).snapshot().configuration["delta.targetFileSize"]
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", target_size)
    fresh = {name: copies(path, args.rounds + 1, f"{name}-copy", BASE) for name, path in paths.items()}
    last: dict[str, str] = {}

    def run(name: str) -> Any:
        def timed() -> None:
            last[name] = next(fresh[name])
            if name == "txnlog":
                ts.optimize(spark, last[name])
            else:
                spark.sql(f"OPTIMIZE delta.`{last[name]}`").collect()
        return timed

    times, _ = interleaved({"txnlog": run("txnlog"), "delta-spark": run("delta-spark")}, args.rounds)
    log.info("OPTIMIZE times: %s", times)
    expected = _rows(spark, paths["txnlog"])
    rows = []
    for name in ("txnlog", "delta-spark"):
        assert _rows(spark, last[name]) == expected, f"{name}'s OPTIMIZE changed the rows"
        files = Table(last[name]).snapshot().num_files
        rows.append([name, ms(median(times[name])), f"{files}", f"{_point_share(last[name], 'x'):.1%}", f"{_point_share(last[name], 'y'):.1%}"])
    r = paired_ratio(times["txnlog"], times["delta-spark"])
    print(machine_line())
    print(f"{args.rows:,} rows appended in {args.appends} files, target file size {int(target_size):,} bytes, "
          f"{args.rounds} rounds taking turns; txnlog / delta-spark OPTIMIZE (paired): {ratio(r)}")
    print(markdown_table(["clustered table", "OPTIMIZE", "files after", "files read, x = v", "files read, y = v"], rows))
    spark.stop()


if __name__ == "__main__":
    main()
