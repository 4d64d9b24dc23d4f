"""Four writers appending to one local table at once, in one SparkSession with delta-spark:
txnlog alone, delta-spark alone, and two of each mixed.

    .venv/bin/python benchmarks/bench_mixed_writers.py            # 3 rounds of 20 s per configuration
    .venv/bin/python benchmarks/bench_mixed_writers.py --quick    # 1 round of 4 s

The writers are threads of the driver process, as in a PySpark job: each makes one-row blind
appends as fast as it can for the round's duration,

- txnlog: ``Table.append`` of a one-row Arrow table on its own ``Table``;
- delta-spark: ``df.write.format("delta").mode("append").save(path)`` of a one-row DataFrame, in
  its own ``spark.newSession()`` (delta-spark's usual single-row write, a Spark job per commit),
  idempotent (``txnAppId``/``txnVersion``) so that a call that failed is retried and lands once.
  On a local disk delta-spark's listing of the log is a directory read that can miss a commit
  racing it and fail with DELTA_VERSIONS_NOT_CONTIGUOUS; those calls are counted and retried.

Each round gives every configuration a fresh table (created by txnlog, ``id long, v long``) and
the configurations take turns (A, B, C, then B, C, A, ...). After each run, the rows read by
txnlog and by delta-spark must be exactly the acknowledged appends, once each.

The rates count only the writing window: from the moment all writers are released together to
the moment the last one stops. Each writer is warmed first with one append to a table of its own
(delta-spark's new session plans its first write and loads its first snapshot there), so the
window holds neither session start-up nor the table's creation and read-back.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from _common import WORK_DIR, interleaved, log, machine_line, markdown_table, median, ratio, setup_logging

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
CONFIGURATIONS = {"txnlog x4": ("txnlog",) * 4, "delta-spark x4": ("delta",) * 4, "mixed 2+2": ("txnlog", "txnlog", "delta", "delta")}


def session() -> Any:
    from pyspark.sql import SparkSession

    from txnlog.spark import with_delta

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
    )
    spark = with_delta(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(spark: Any, writers: tuple[str, ...], path: Path, seconds: float) -> dict[str, float]:
    """The writers appending for ``seconds``; the commits each kind made and the writing window."""
    from txnlog import Table

    shutil.rmtree(path, ignore_errors=True)
    Table.create(str(path), SCHEMA)
    done: dict[str, list[int]] = {"txnlog": [], "delta": []}
    gaps: list[int] = []
    lock = threading.Lock()
    counter = iter(range(10**9))
    barrier = threading.Barrier(len(writers))
    errors: list[BaseException] = []

    def next_id() -> int:
        with lock:
            return next(counter)

    windows: list[tuple[float, float]] = []

    def writer(kind: str) -> None:
        try:
            table = Table(str(path)) if kind == "txnlog" else None
            own = spark.newSession() if kind == "delta" else None
            app = f"bench-{threading.get_ident()}"
            warm_up(kind, own, path.parent / f"warm-{threading.get_ident()}")
            barrier.wait()
            start = time.monotonic()
            stop = start + seconds
            n = 0
            while time.monotonic() < stop:
                i = next_id()
                if table is not None:
                    table.append(pa.table({"id": [i], "v": [0]}, schema=SCHEMA))
                else:
                    n += 1
                    df = own.createDataFrame([(i, 0)], "id long, v long")
                    while True:
                        try:
                            df.write.format("delta").mode("append").option("txnAppId", app).option("txnVersion", n).save(str(path))
                            break
                        except Exception as e:  # noqa: BLE001
                            if "DELTA_VERSIONS_NOT_CONTIGUOUS" not in str(e):
                                raise
                            with lock:
                                gaps.append(i)
                with lock:
                    done[kind].append(i)
            with lock:
                windows.append((start, time.monotonic()))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(kind,)) for kind in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    acknowledged = sorted(done["txnlog"] + done["delta"])
    by_txnlog = sorted(Table(str(path)).snapshot().to_arrow().column("id").to_pylist())
    by_delta = sorted(r.id for r in spark.read.format("delta").load(str(path)).select("id").collect())
    if not by_txnlog == by_delta == acknowledged:
        raise AssertionError(f"{writers}: read back {len(by_txnlog)} / {len(by_delta)} rows, acknowledged {len(acknowledged)}")
    window = max(end for _, end in windows) - min(start for start, _ in windows)
    return {**{kind: len(ids) for kind, ids in done.items()}, "gaps": len(gaps), "window": window}


def warm_up(kind: str, own: Any, scratch: Path) -> None:
    """One append by this writer to a scratch table of its own, outside the timed window."""
    from txnlog import Table

    shutil.rmtree(scratch, ignore_errors=True)
    table = Table.create(str(scratch), SCHEMA)
    if kind == "txnlog":
        table.append(pa.table({"id": [-1], "v": [0]}, schema=SCHEMA))
    else:
        own.createDataFrame([(-1, 0)], "id long, v long").write.format("delta").mode("append").save(str(scratch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    setup_logging()
    seconds = args.seconds or (4.0 if args.quick else 20.0)
    rounds = args.rounds or (1 if args.quick else 3)
    spark = session()
    base = WORK_DIR / "mixed_writers"
    base.mkdir(parents=True, exist_ok=True)
    runners = {}
    for name, writers in CONFIGURATIONS.items():
        path = base / name.replace(" ", "_").replace("+", "_")
        runners[name] = lambda writers=writers, path=path: run(spark, writers, path, seconds)
    log.info("%d round(s) of %.0f s per configuration", rounds, seconds)
    _, results = interleaved(runners, rounds, warmup=1)
    rows = []
    rates: dict[str, list[float]] = {}
    for name in CONFIGURATIONS:
        per_round = [(r["txnlog"] / r["window"], r["delta"] / r["window"]) for r in results[name]]
        t_rate, d_rate = median([p[0] for p in per_round]), median([p[1] for p in per_round])
        rates[name] = [p[0] + p[1] for p in per_round]
        gaps = sum(r["gaps"] for r in results[name])
        rows.append([name, f"{t_rate:.1f}" if t_rate else "-", f"{d_rate:.1f}" if d_rate else "-", f"{t_rate + d_rate:.1f}", gaps])
    print(markdown_table(["writers (4 threads)", "txnlog commits/s", "delta-spark commits/s", "total commits/s",
                          "delta-spark calls retried after a listing gap (all rounds)"], rows))
    print()
    alone = [a / b for a, b in zip(rates["txnlog x4"], rates["delta-spark x4"], strict=True)]
    mixed = [a / b for a, b in zip(rates["mixed 2+2"], rates["delta-spark x4"], strict=True)]
    print(f"txnlog x4 against delta-spark x4: {ratio(median(alone))} the commits/s; mixed 2+2 against delta-spark x4: {ratio(median(mixed))}.")
    print(machine_line())


if __name__ == "__main__":
    main()
