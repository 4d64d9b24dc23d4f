"""Data skipping after OPTIMIZE: a clustered table against the same rows compacted only and
Z-ordered (issue 25).

    .venv/bin/python benchmarks/bench_clustering.py                # 10M rows
    .venv/bin/python benchmarks/bench_clustering.py --rows 1000000 # smaller

The same rows (``x``, ``y``: uniform random longs, plus a payload string) are appended in
``--appends`` files to three tables, then each is optimized into files of the same target size:

- unclustered: the table as appended (its files are larger than the target: a compaction
  leaves them alone);
- Z-ordered: an unclustered table, ``OPTIMIZE ... z_order_by=["x", "y"]``;
- clustered: ``cluster_by=["x", "y"]``, ``OPTIMIZE`` (Hilbert curve).

Reported: OPTIMIZE time, and the share of files txnlog's scan planning keeps (min/max
statistics) for point queries (``x = v``, ``y = v``, 20 values the table holds) and range
queries covering 1% of either column's domain. Goal (issue 25): a point query on either
clustering column reads at most 10% of the files.
"""

from __future__ import annotations

import argparse
import shutil
import time

import numpy as np
import pyarrow as pa
from _common import WORK_DIR, log, machine_line, markdown_table, ms, setup_logging, verdict

from txnlog import Table

DOMAIN = 1_000_000_000
SCHEMA = pa.schema([("x", pa.int64()), ("y", pa.int64()), ("payload", pa.string())])


def _share(table: Table, predicates: list[str]) -> float:
    snapshot = table.snapshot()
    return float(np.mean([snapshot.files(p).num_rows for p in predicates])) / snapshot.num_files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--files", type=int, default=200, help="about this many files after OPTIMIZE")
    args = parser.parse_args()
    setup_logging()
    base = WORK_DIR / "clustering"
    shutil.rmtree(base, ignore_errors=True)
    rng = np.random.default_rng(42)
    tables = {
        "unclustered": Table.create(str(base / "unclustered"), SCHEMA),
        "Z-ordered": Table.create(str(base / "zorder"), SCHEMA),
        "clustered": Table.create(str(base / "clustered"), SCHEMA, cluster_by=["x", "y"]),
    }
    per_append = args.rows // args.appends
    log.info("appending %d rows in %d files to each of %d tables", args.rows, args.appends, len(tables))
    for _ in range(args.appends):
        x, y = rng.integers(0, DOMAIN, per_append), rng.integers(0, DOMAIN, per_append)
        rows = pa.table({"x": x, "y": y, "payload": pa.array(np.char.add("p", (x % 1000).astype(str)))}, schema=SCHEMA)
        for table in tables.values():
            table.append(rows)
    size = sum(tables["unclustered"].snapshot().files().column("size").to_pylist())
    target = max(1, size // args.files)
    optimize_s = {}
    for name, table in tables.items():
        if name == "unclustered":
            continue
        started = time.monotonic()
        if name == "Z-ordered":
            table.optimize(target_size=target, z_order_by=["x", "y"])
        else:
            table.optimize(target_size=target)
        optimize_s[name] = time.monotonic() - started
        log.info("%s: OPTIMIZE %.1fs, %d files", name, optimize_s[name], table.snapshot().num_files)
    sample = tables["unclustered"].snapshot().to_arrow(columns=["x", "y"]).slice(0, 20)
    xs, ys = sample.column("x").to_pylist(), sample.column("y").to_pylist()
    width = DOMAIN // 100
    starts = rng.integers(0, DOMAIN - width, 20)
    queries = {
        "x = v": [f"x = {v}" for v in xs],
        "y = v": [f"y = {v}" for v in ys],
        "x in 1% range": [f"x >= {s} and x < {s + width}" for s in starts],
        "y in 1% range": [f"y >= {s} and y < {s + width}" for s in starts],
    }
    print(machine_line())
    print()
    rows = []
    for name, table in tables.items():
        shares = {q: _share(table, p) for q, p in queries.items()}
        rows.append([name, table.snapshot().num_files, ms(optimize_s[name]) if name in optimize_s else "-"] + [f"{100 * s:.1f}%" for s in shares.values()])
    print(markdown_table([f"{args.rows} rows", "files", "OPTIMIZE"] + [f"files read, {q}" for q in queries], rows))
    print()
    clustered = tables["clustered"]
    worst = max(_share(clustered, queries["x = v"]), _share(clustered, queries["y = v"]))
    print(f"clustered, point query on either column: {100 * worst:.1f}% of files (goal <= 10%: {verdict(worst, 0.10)})")


if __name__ == "__main__":
    main()
