"""txnlog.spark.files (the file list reconciled on Spark executors) against the driver-side
replay (``Table(path).snapshot().files()``), on tables of 100k and 1M live files, to show
where Spark overtakes the single process.

    .venv/bin/python benchmarks/bench_spark_files.py             # 100k and 1M files, 2 rounds
    .venv/bin/python benchmarks/bench_spark_files.py --quick     # 20k files, 1 round
    .venv/bin/python benchmarks/bench_spark_files.py --sizes 100000,1000000,3000000

Each table: commits of 10,000 adds in 50 partitions (numRecords stats), in two shapes: JSON
commits only, and a txnlog checkpoint with 10 commits after it. Both sides compute the whole
reconciled list: the driver-side replay in a fresh process (its peak memory from VmHWM); Spark
in one local[2] session started once (``files(...).agg(count, sum(size))`` collected, so every
row is reconciled; the JVM's peak memory from its VmHWM, which only grows). Tables are built
under benchmarks/_work/ and kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from _common import WORK_DIR, is_built, log, machine_line, mark_built, markdown_table, median, setup_logging

PER_COMMIT = 10_000


def _vmhwm_mib(pid: str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def _build(path: str, commits: int, checkpointed: bool) -> None:
    from bench_checkpoint import build_table

    import txnlog

    build_table(path, commits, PER_COMMIT, 50, stats="numrecords")
    if checkpointed:
        txnlog.Table(path).snapshot(commits - 11).checkpoint()


def _table(files: int, shape: str) -> str:
    commits = max(files // PER_COMMIT, 12)
    path = WORK_DIR / f"spark-files-{files}-{shape}"
    params = {"files": files, "shape": shape, "v": 1}
    if not is_built(path, params):
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        started = time.perf_counter()
        _build(str(path), commits, shape == "checkpoint")
        mark_built(path, params)
        log.info("built %s in %.0fs", path, time.perf_counter() - started)
    return str(path)


def _driver(path: str) -> dict[str, Any]:
    """The driver-side replay, in a fresh process."""
    code = (
        "import json, sys, time\n"
        "import pyarrow.compute as pc\n"
        "import txnlog\n"
        "t = time.perf_counter(); f = txnlog.Table(sys.argv[1]).snapshot().files(); s = time.perf_counter() - t\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "print(json.dumps({'seconds': s, 'files': f.num_rows, 'bytes': pc.sum(f.column('size')).as_py(), 'peak_mib': int(hwm) / 1024}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", default=None, help="file counts, comma-separated (default 100000,1000000)")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    setup_logging()
    sizes = [int(s) for s in (args.sizes or ("20000" if args.quick else "100000,1000000")).split(",")]
    rounds = args.rounds or (1 if args.quick else 2)
    WORK_DIR.mkdir(parents=True, exist_ok=True)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import txnlog.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark-files")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jvm_pid = str(spark.sparkContext._gateway.proc.pid)  # type: ignore[union-attr]
    try:
        spark.range(10).count()  # start-up is not timed
        rows = []
        for files in sizes:
            for shape in ("json", "checkpoint"):
                path = _table(files, shape)
                driver_runs, spark_times = [], []
                spark_result = None
                for _ in range(rounds):
                    driver_runs.append(_driver(path))
                    started = time.perf_counter()
                    spark_result = txnlog.spark.files(spark, path).agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect()[0]
                    spark_times.append(time.perf_counter() - started)
                    log.info("%s: driver %.2fs, spark %.2fs", path, driver_runs[-1]["seconds"], spark_times[-1])
                assert spark_result is not None
                if (spark_result["n"], spark_result["b"]) != (driver_runs[0]["files"], driver_runs[0]["bytes"]):
                    raise SystemExit(f"{path}: Spark lists {spark_result['n']} files, the driver {driver_runs[0]['files']}")
                d, s = median([r["seconds"] for r in driver_runs]), median(spark_times)
                rows.append(
                    [
                        f"{files:,}",
                        "JSON commits only" if shape == "json" else "checkpoint + 10 commits",
                        f"{d:.2f} s, {max(r['peak_mib'] for r in driver_runs):.0f} MiB",
                        f"{s:.2f} s",
                        f"{s / d:.2f}x",
                        "Spark" if s < d else "driver",
                    ]
                )
        jvm_peak = _vmhwm_mib(jvm_pid)
    finally:
        spark.stop()
    print(f"### txnlog.spark.files against the driver-side replay ({rounds} round{'s' if rounds != 1 else ''}; {machine_line()})\n")
    print(markdown_table(["live files", "log", "driver-side replay (time, peak)", "Spark local[2]", "Spark / driver", "faster"], rows))
    print(f"\nThe Spark JVM's peak resident memory over the whole run: {jvm_peak:.0f} MiB (driver and executors in one JVM, local mode).")


if __name__ == "__main__":
    main()
