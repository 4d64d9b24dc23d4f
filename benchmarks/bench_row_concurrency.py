"""Concurrent updaters on disjoint keys of the same files, plus a compactor: row-level
concurrency on against off (file-level checks only: what txnlog did before, and delta-spark OSS).

    .venv/bin/python benchmarks/bench_row_concurrency.py            # 4 updaters, 40 s, 2 rounds
    .venv/bin/python benchmarks/bench_row_concurrency.py --quick    # 2 updaters, 10 s, 1 round

The table: 8 files of 500 rows, deletion vectors and row tracking on. Each updater process owns
the keys ``id % N == w``, spread over every file, and loops ``UPDATE ... SET v = v + 1 WHERE id IN
(5 of its keys)`` (``Table.update``, merge-on-read); a statement that fails with a conflict is
re-run until it commits. One compactor process loops ``Table.optimize()``. The two settings of
``txnlog.rowLevelConcurrency.enabled`` take turns. Reported: statements committed per minute,
statements re-run after a conflict (and the compactor's), and a check that every key's value
equals the number of committed updates that named it (read by DuckDB's delta_scan when it is
available, else by txnlog).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import WORK_DIR, log, machine_line, markdown_table, setup_logging  # noqa: E402
from txnlog import Table  # noqa: E402
from txnlog.errors import CommitConflictError  # noqa: E402

FILES, ROWS = 8, 500
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def make_table(path: Path, row_level: bool) -> None:
    shutil.rmtree(path, ignore_errors=True)
    table = Table.create(str(path), SCHEMA, properties={
        "delta.enableDeletionVectors": "true",
        "delta.enableRowTracking": "true",
        "txnlog.rowLevelConcurrency.enabled": str(row_level).lower(),
        "delta.checkpointInterval": "50",
    })
    for f in range(FILES):
        ids = list(range(f * ROWS, (f + 1) * ROWS))
        table.append(pa.table({"id": ids, "v": [0] * ROWS}, schema=SCHEMA))


def updater(uri: str, worker: int, workers: int, deadline: float, out: Any) -> None:
    rng = random.Random(worker)
    keys = [k for k in range(FILES * ROWS) if k % workers == worker]
    table = Table(uri)
    committed, reruns = 0, 0
    counts: Counter[int] = Counter()
    kinds: Counter[str] = Counter()
    while time.time() < deadline:
        chosen = rng.sample(keys, 5)
        where = f"id in ({', '.join(map(str, chosen))})"
        while True:
            try:
                table.update(where, {"v": "v + 1"})
                break
            except CommitConflictError as e:
                reruns += 1
                kinds[type(e).__name__] += 1
                if time.time() >= deadline + 30:
                    raise
        committed += 1
        counts.update(chosen)
    out.put(("updater", committed, reruns, dict(counts), dict(kinds)))


def compactor(uri: str, deadline: float, out: Any) -> None:
    table = Table(uri)
    committed, reruns = 0, 0
    kinds: Counter[str] = Counter()
    while time.time() < deadline:
        try:
            if table.optimize() is not None:
                committed += 1
        except CommitConflictError as e:
            reruns += 1
            kinds[f"OPTIMIZE {type(e).__name__}"] += 1
        time.sleep(0.2)
    out.put(("compactor", committed, reruns, {}, dict(kinds)))


def run(path: Path, row_level: bool, workers: int, seconds: float) -> dict[str, Any]:
    make_table(path, row_level)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    deadline = time.time() + seconds + 3  # the spawned interpreters need a moment to start
    procs = [ctx.Process(target=updater, args=(str(path), w, workers, deadline, out)) for w in range(workers)]
    procs.append(ctx.Process(target=compactor, args=(str(path), deadline, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 300) for _ in procs]
    for p in procs:
        p.join()
    expected: Counter[int] = Counter()
    summary: dict[str, Any] = {"statements": 0, "reruns": 0, "compactions": 0, "compaction_reruns": 0, "errors": Counter()}
    for kind, committed, reruns, counts, errors in results:
        summary["errors"].update(errors)
        if kind == "updater":
            summary["statements"] += committed
            summary["reruns"] += reruns
            expected.update(counts)
        else:
            summary["compactions"] += committed
            summary["compaction_reruns"] += reruns
    rows = Table(str(path)).snapshot().to_arrow().to_pylist()
    actual = {r["id"]: r["v"] for r in rows}
    summary["exact"] = len(rows) == FILES * ROWS and all(actual[k] == expected.get(k, 0) for k in actual)
    summary["per_minute"] = summary["statements"] * 60.0 / seconds
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    setup_logging()
    workers = args.workers or (2 if args.quick else 4)
    seconds = args.seconds or (10 if args.quick else 40)
    rounds = args.rounds or (1 if args.quick else 2)
    results: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for r in range(rounds):
        order = [False, True] if r % 2 == 0 else [True, False]
        for row_level in order:
            log.info("round %d: row-level concurrency %s", r + 1, "on" if row_level else "off")
            result = run(WORK_DIR / "row_concurrency" / f"t-{row_level}", row_level, workers, seconds)
            log.info("  %s", result)
            results[row_level].append(result)
    rows = []
    for row_level in (False, True):
        runs = results[row_level]
        total = {k: sum(r[k] for r in runs) for k in ("statements", "reruns", "compactions", "compaction_reruns")}
        per_minute = sum(r["per_minute"] for r in runs) / len(runs)
        rows.append([
            "on (rebase)" if row_level else "off (file-level checks, as before)",
            f"{per_minute:.0f}",
            total["statements"],
            total["reruns"],
            f"{total['reruns'] / max(1, total['statements'] + total['reruns']):.0%}",
            total["compactions"],
            total["compaction_reruns"],
            "yes" if all(r["exact"] for r in runs) else "NO",
        ])
    print(machine_line())
    print(f"{workers} updaters on disjoint keys of {FILES} files x {ROWS} rows + 1 compactor, {seconds:.0f} s x {rounds} round(s) each")
    print(markdown_table(
        ["row-level concurrency", "statements/min", "statements", "re-run after a conflict", "re-run share",
         "compactions", "compactions lost", "values exact"],
        rows,
    ))
    on, off = rows[1], rows[0]
    print(f"\nthroughput on/off: {float(on[1]) / max(1.0, float(off[1])):.2f}x")


if __name__ == "__main__":
    main()
