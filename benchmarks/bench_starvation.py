"""Does a copy-on-write updater get through while blind appenders keep winning versions?

    .venv/bin/python benchmarks/bench_starvation.py              # 4 and 8 appenders, 30 s each
    .venv/bin/python benchmarks/bench_starvation.py --quick      # 4 appenders, 5 s

A local table partitioned by ``part``. N appender processes (multiprocessing, spawn) make
one-file blind appends to ``part='hot'`` as fast as they can; one updater process, at the same
time, rewrites the single file of ``part='cold'`` in a loop:

    with table.transaction("UPDATE") as t:
        t.remove_files(t.filter_files("part = 'cold'"))
        t.add_files([AddFile(...)])          # into part='cold'

Its footprint never conflicts with the appends (Serializable isolation: an append to 'hot' does
not match ``part = 'cold'``), so every lost race must end in a retry that commits. Reported: the
updater's commits per minute during the window, its p50/p99/max commit latency and attempts, and
the appenders' throughput. Commits still in flight when the window closes are finished (the
appenders have stopped by then) and reported apart. No data files exist: only the log is timed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import shutil
import time
from pathlib import Path
from typing import Any

from _common import WORK_DIR, log, machine_line, markdown_table, median, ms, percentile, setup_logging


def _create(root: Path) -> None:
    import pyarrow as pa

    import txnlog

    schema = pa.schema([("id", pa.int64()), ("part", pa.string())])
    table = txnlog.Table.create(str(root), schema, partition_by=["part"])
    now = int(time.time() * 1000)
    with table.transaction("WRITE") as txn:
        txn.add_files([txnlog.AddFile(path="part=cold/c-00000.parquet", partition_values={"part": "cold"}, size=100, modification_time=now, stats='{"numRecords":1}')])


def appender(root: str, worker: int, deadline: float, barrier: Any, out: Any) -> None:
    import txnlog

    table = txnlog.Table(root)
    barrier.wait()
    done = 0
    while time.time() < deadline:
        now = int(time.time() * 1000)
        with table.transaction("WRITE") as txn:
            txn.add_files([txnlog.AddFile(path=f"part=hot/w{worker}-{done:06d}.parquet", partition_values={"part": "hot"}, size=100, modification_time=now, stats='{"numRecords":1}')])
        done += 1
    out.put({"role": "appender", "commits": done})


def updater(root: str, deadline: float, barrier: Any, out: Any) -> None:
    import txnlog

    table = txnlog.Table(root)
    barrier.wait()
    records = []
    i = 0
    while time.time() < deadline:
        i += 1
        started = time.perf_counter()
        with table.transaction("UPDATE") as txn:
            txn.remove_files(txn.filter_files("part = 'cold'"))
            now = int(time.time() * 1000)
            txn.add_files([txnlog.AddFile(path=f"part=cold/c-{i:05d}.parquet", partition_values={"part": "cold"}, size=100, modification_time=now, stats='{"numRecords":1}')])
        assert txn.result is not None
        records.append({"latency": time.perf_counter() - started, "attempts": txn.result.attempts, "ended": time.time()})
    out.put({"role": "updater", "records": records})


def run(appenders: int, seconds: float) -> dict[str, Any]:
    root = WORK_DIR / "starvation" / f"a{appenders}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _create(root)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(appenders + 1)
    out = ctx.Queue()
    # The deadline is set once every process has started: spawn takes a while.
    start_at = time.time() + 3 + 0.5 * appenders
    deadline = start_at + seconds
    procs = [ctx.Process(target=appender, args=(str(root), w, deadline, barrier, out)) for w in range(appenders)]
    procs.append(ctx.Process(target=updater, args=(str(root), deadline, barrier, out)))
    for p in procs:
        p.start()
    reports: list[dict[str, Any]] = []
    while len(reports) < len(procs):
        try:
            reports.append(out.get(timeout=5))
        except queue.Empty:
            if all(p.exitcode is not None for p in procs):
                raise SystemExit(f"workers exited with {[p.exitcode for p in procs]} before reporting") from None
    for p in procs:
        p.join()
    records = next(r["records"] for r in reports if r["role"] == "updater")
    in_window = [r for r in records if r["ended"] <= deadline]
    appended = sum(r["commits"] for r in reports if r["role"] == "appender")
    versions = sorted(int(n[:-5]) for n in os.listdir(root / "_delta_log") if n.endswith(".json"))
    if versions != list(range(len(versions))):
        raise SystemExit("log versions are not contiguous")
    return {"appenders": appenders, "seconds": seconds, "records": records, "in_window": in_window, "appended": appended}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 appenders for 5 s")
    parser.add_argument("--seconds", type=float, default=None, help="length of each window (default 30)")
    args = parser.parse_args()
    setup_logging()
    seconds = args.seconds or (5.0 if args.quick else 30.0)
    counts = [4] if args.quick else [4, 8]
    rows = []
    for n in counts:
        r = run(n, seconds)
        lat = [x["latency"] for x in r["records"]]
        att = [x["attempts"] for x in r["records"]]
        log.info("%d appenders: updater %d commits in window, %d total", n, len(r["in_window"]), len(r["records"]))
        rows.append(
            [
                n,
                f"{len(r['in_window']) * 60 / seconds:.0f}",
                str(len(r["records"]) - len(r["in_window"])),
                ms(median(lat)) if lat else "–",
                ms(percentile(lat, 99)) if lat else "–",
                ms(max(lat)) if lat else "–",
                f"{sum(att) / len(att):.1f} / {max(att)}" if att else "–",
                f"{r['appended'] / seconds:.0f}",
            ]
        )
    print(f"### One copy-on-write updater among blind appenders, {seconds:.0f} s each ({machine_line()})\n")
    print(
        markdown_table(
            ["appenders", "updater commits/min", "finished after the window", "updater p50", "p99", "max", "attempts (mean / max)", "appends/s"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
