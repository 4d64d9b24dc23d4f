"""Four processes appending to one local table at once: txnlog against delta-rs.

    .venv/bin/python benchmarks/bench_contention.py            # 4 x 50 appends, 3 rounds each
    .venv/bin/python benchmarks/bench_contention.py --quick    # 4 x 5 appends, 1 round each

Each round gives each library a fresh table (schema ``id long, value double, part string``,
partitioned by ``part``, created by txnlog and copied) and starts 4 processes (multiprocessing,
spawn). Each process opens the table, waits at a barrier with the others, then makes N one-file
blind appends as fast as it can:

- txnlog: ``with table.transaction() as t: t.add_files([AddFile(...)])`` on its own ``Table``;
- delta-rs: ``dt.update_incremental()`` then ``dt.create_write_transaction([AddAction(...)],
  mode="append", ...)`` on its own ``DeltaTable`` (its built-in retries: 15).

The data files are one small Parquet file hard-linked under a new name per append, made before
the round. Rounds alternate which library goes first. After each round the log is checked: the
commit versions must be contiguous, and the other library, as an independent reader, must list
exactly the files of the appends that reported success. Latencies are per call, failed calls
included; txnlog must have no failed commits.
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

import pyarrow as pa
from _common import (
    WORK_DIR,
    interleaved,
    log,
    machine_line,
    markdown_table,
    median,
    ms,
    percentile,
    ratio,
    setup_logging,
)
from bench_commit import PARTITION_BY, SCHEMA, make_tables

PROCESSES = 4


def _add_paths(worker: int, n: int) -> list[str]:
    return [f"part=a/w{worker}-{i:05d}.parquet" for i in range(n)]


def worker(kind: str, root: str, worker_id: int, n: int, template: dict[str, Any], barrier: Any, out: Any) -> None:
    """One appending process: opens the table, waits for the others, appends ``n`` files."""
    paths = _add_paths(worker_id, n)
    if kind == "txnlog":
        import txnlog

        table = txnlog.Table(root)
        table.snapshot()  # a long-lived writer has its table loaded before it appends

        def commit(path: str) -> int:
            add = txnlog.AddFile(path, template["partition_values"], template["size"], template["modification_time"], stats=template["stats"])
            with table.transaction() as txn:
                txn.add_files([add])
            assert txn.result is not None
            return txn.result.attempts

    else:
        from deltalake import DeltaTable
        from deltalake.transaction import AddAction

        dt = DeltaTable(root)

        def commit(path: str) -> int:
            action = AddAction(path, template["size"], template["partition_values"], template["modification_time"], True, template["stats"])
            dt.update_incremental()
            dt.create_write_transaction(actions=[action], mode="append", schema=SCHEMA, partition_by=PARTITION_BY)
            return 0  # delta-rs does not report its retries

    latencies: list[float] = []
    attempts: list[int] = []
    ok: list[str] = []
    failures: list[str] = []
    barrier.wait()
    started = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes on one machine
    for path in paths:
        t0 = time.perf_counter()
        try:
            attempts.append(commit(path))
            ok.append(path)
        except Exception as e:  # a failed commit is a result here, not a crash
            failures.append(f"{type(e).__name__}: {str(e)[:160]}")
        latencies.append(time.perf_counter() - t0)
    out.put({"worker": worker_id, "started": started, "ended": time.monotonic(), "latencies": latencies, "attempts": attempts, "ok": ok, "failures": failures})


def _log_versions(root: Path) -> list[int]:
    return sorted(int(n[:-5]) for n in os.listdir(root / "_delta_log") if n.endswith(".json") and n[:-5].isdigit())


def _listed_by_other(kind: str, root: Path) -> set[str]:
    if kind == "txnlog":
        from deltalake import DeltaTable

        return set(pa.table(DeltaTable(str(root)).get_add_actions()).column("path").to_pylist())
    import txnlog

    return set(txnlog.Table(str(root)).snapshot().files().column("path").to_pylist())


def run_round(kind: str, root: Path, template: Any, n: int) -> dict[str, Any]:
    """Fresh data-file links, 4 processes, then the checks on what landed."""
    for w in range(PROCESSES):
        for path in _add_paths(w, n):
            os.link(root / template.path, root / path)
    spec = {"partition_values": dict(template.partition_values), "size": template.size, "modification_time": template.modification_time, "stats": template.stats}
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(kind, str(root), w, n, spec, barrier, out)) for w in range(PROCESSES)]
    for p in procs:
        p.start()
    reports: list[dict[str, Any]] = []
    while len(reports) < len(procs):
        # A worker that died without reporting (an import error, say) must not block us forever.
        exited = all(p.exitcode is not None for p in procs)
        try:
            reports.append(out.get(timeout=5 if exited else 1))
        except queue.Empty:
            if exited:
                raise SystemExit(f"{kind} workers exited with {[p.exitcode for p in procs]} before reporting") from None
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"{kind} worker exited with {p.exitcode}")

    ok = {path for r in reports for path in r["ok"]}
    versions = _log_versions(root)
    listed = _listed_by_other(kind, root)
    return {
        "seconds": max(r["ended"] for r in reports) - min(r["started"] for r in reports),
        "latencies": [x for r in reports for x in r["latencies"]],
        "attempts": [x for r in reports for x in r["attempts"]],
        "committed": len(ok),
        "failures": [f for r in reports for f in r["failures"]],
        "contiguous": versions == list(range(len(versions))) and versions[-1] == len(ok),
        "read_back": listed == ok,
        "landed_despite_error": len(listed - ok),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 x 5 appends, one round (a smoke run)")
    parser.add_argument("-n", "--appends", type=int, default=None, help="appends per process (default 50)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per library (default 3)")
    args = parser.parse_args()
    setup_logging()

    n = args.appends or (5 if args.quick else 50)
    rounds = args.rounds or (1 if args.quick else 3)
    counter = {"txnlog": 0, "delta-rs": 0}

    def runner(kind: str) -> Any:
        def run() -> dict[str, Any]:
            counter[kind] += 1
            ours, theirs, template = make_tables(WORK_DIR / "contention" / f"{kind}-{counter[kind]}")
            root = ours if kind == "txnlog" else theirs
            shutil.rmtree(theirs if kind == "txnlog" else ours)
            result = run_round("txnlog" if kind == "txnlog" else "deltalake", root, template, n)
            log.info("%s round %d: %d committed, %d failed in %.1fs", kind, counter[kind], result["committed"], len(result["failures"]), result["seconds"])
            return result

        return run

    shutil.rmtree(WORK_DIR / "contention", ignore_errors=True)
    _, results = interleaved({"txnlog": runner("txnlog"), "delta-rs": runner("delta-rs")}, rounds, warmup=0)

    rows = []
    summary: dict[str, dict[str, float]] = {}
    for kind, rs in results.items():
        latencies = [x for r in rs for x in r["latencies"]]
        failures = [f for r in rs for f in r["failures"]]
        attempts = [x for r in rs for x in r["attempts"]]
        throughput = [r["committed"] / r["seconds"] for r in rs]
        summary[kind] = {"throughput": median(throughput), "p50": median(latencies), "p99": percentile(latencies, 99)}
        calls = len(latencies)
        retries = f"{sum(a - 1 for a in attempts) / len(attempts):.2f} / {max(attempts)}" if kind == "txnlog" and attempts else "n/a"
        rows.append(
            [
                kind,
                f"{sum(r['committed'] for r in rs)} / {calls}",
                f"{len(failures)} ({100 * len(failures) / calls:.1f}%)",
                f"{median(throughput):.0f}",
                ms(median(latencies)),
                ms(percentile(latencies, 99)),
                ms(max(latencies)),
                retries,
                "yes" if all(r["contiguous"] for r in rs) else "NO",
                "yes" if all(r["read_back"] for r in rs) else f"NO ({sum(r['landed_despite_error'] for r in rs)} landed despite an error)",
            ]
        )
    kinds = sorted({f.split(":")[0] for r in results["delta-rs"] for f in r["failures"]})
    print(f"### {PROCESSES} processes x {n} blind appends, {rounds} round(s) per library ({machine_line()})\n")
    print(
        markdown_table(
            ["writer", "committed / calls", "failed", "commits/s (median round)", "p50", "p99", "max", "retries per commit (mean / max attempts)", "versions contiguous", "read back = committed"],
            rows,
        )
    )
    t, d = summary["txnlog"], summary["delta-rs"]
    print(
        f"\ntxnlog / delta-rs: throughput {ratio(t['throughput'] / d['throughput'])}, p50 latency {ratio(t['p50'] / d['p50'])}, "
        f"p99 latency {ratio(t['p99'] / d['p99'])}." + (f" delta-rs failures: {', '.join(kinds)}." if kinds else "")
    )
    txnlog_failures = [f for r in results["txnlog"] for f in r["failures"]]
    if txnlog_failures:
        raise SystemExit(f"txnlog had {len(txnlog_failures)} failed commits, e.g. {txnlog_failures[0]}")


if __name__ == "__main__":
    main()
