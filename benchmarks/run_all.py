"""Run every benchmark, one process each, and print their markdown tables (``make bench``).

    .venv/bin/python benchmarks/run_all.py            # full runs (tens of minutes)
    .venv/bin/python benchmarks/run_all.py --quick    # smoke runs

Each benchmark runs alone, one after the other: they would otherwise compete for the same cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (script, arguments of its full run); every script also takes --quick for a smoke run.
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("bench_open.py", []),
    ("bench_commit.py", []),
    ("bench_contention.py", []),
    ("bench_checkpoint.py", ["--stats", "numrecords"]),  # the design brief's 1M-file table
    ("bench_checkpoint.py", []),  # the same with min/max stats for 4 columns
    ("bench_overwrite.py", []),  # a copy-on-write overwrite of 1M files
    ("bench_starvation.py", []),  # a copy-on-write updater among 4 and 8 blind appenders
    ("bench_maintenance.py", []),  # checkpoint, expire, vacuum against delta-rs
    ("bench_spark_merge.py", []),  # Spark MERGE vs a full rebuild; the foreachBatch sink vs a bare Parquet write
    ("bench_reads.py", []),  # DuckDB over to_pyarrow_dataset, and streaming memory, against deltalake
    ("bench_python_api.py", []),  # write_table and the MERGE builder against deltalake
    ("bench_supplied_columns.py", []),  # appends with identity and generated columns against plain ones
    ("bench_mixed_writers.py", []),  # 4 appending writers in one session: txnlog, delta-spark, mixed
    ("bench_delta_spark.py", []),  # one-file append at version 200+, opening 100k files: beside delta-spark
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="pass --quick (a smoke run) to every benchmark")
    args = parser.parse_args()

    failed = []
    runs = list(dict.fromkeys((name, tuple(["--quick"] if args.quick else full_args)) for name, full_args in BENCHMARKS))
    for name, extra in runs:
        script = HERE / name
        print(f"\n## {name} {' '.join(extra)}\n", flush=True)
        started = time.perf_counter()
        code = subprocess.run([sys.executable, str(script), *extra]).returncode
        print(f"\n({name}: {time.perf_counter() - started:.0f}s, exit code {code})", flush=True)
        if code:
            failed.append(" ".join([name, *extra]))
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
