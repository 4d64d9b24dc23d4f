"""Reads through ``Snapshot.to_pyarrow_dataset()`` against deltalake's ``to_pyarrow_dataset()``,
the contenders taking turns.

1. DuckDB queries over the dataset (each run makes the dataset and runs the query; the tables
   are opened once): a filter selecting 1% of the rows by the sorted key (1 file of 100), a
   filter selecting 1% of the rows in every file, and a sum with no filter.
2. Peak memory streaming a table of 20M rows batch by batch, each run in a process of its own:
   txnlog's dataset, ``Snapshot.to_batches()``, deltalake's dataset; and, with no peer (deltalake
   cannot read deletion vectors), txnlog's dataset of the same table with 10% of its rows deleted
   by deletion vectors.

    .venv/bin/python benchmarks/bench_reads.py            # 5M rows / 100 files; 20M rows / 40 files
    .venv/bin/python benchmarks/bench_reads.py --quick    # 200k rows / 10 files; 1M rows / 4 files
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    WORK_DIR,
    interleaved,
    is_built,
    log,
    machine_line,
    mark_built,
    markdown_table,
    median,
    ms,
    paired_ratio,
    ratio,
    setup_logging,
    verdict,
)
from benchmarks.bench_row_level import events  # noqa: E402  (the same four columns)
from txnlog import Table  # noqa: E402

BASE = WORK_DIR / "reads"


def build(path: Path, rows: int, files: int, properties: dict[str, str] | None = None) -> Table:
    """``rows`` rows in key order, one append (one file) per ``rows // files``."""
    params = {"rows": rows, "files": files, "properties": properties or {}}
    if is_built(path, params):
        return Table(str(path))
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    table = Table.create(str(path), events(0, 1).schema, properties=properties)
    step = rows // files
    for start in range(0, rows, step):
        table.append(events(start, min(rows, start + step)))
    if properties:  # 10% of the rows deleted by deletion vectors, in every file
        table.delete("key % 10 = 3")
    mark_built(path, params)
    log.info("built %s", path)
    return table


# --- 1. DuckDB over the dataset -----------------------------------------------------------------


def bench_duckdb(rows: int, files: int, rounds: int) -> list[str]:
    import deltalake
    import duckdb

    path = BASE / f"duckdb-{rows}-{files}"
    build(path, rows, files)
    snapshot = Table(str(path)).snapshot()
    theirs = deltalake.DeltaTable(str(path))
    low = rows // 2
    queries = {
        "1% of rows by the sorted key (1 file)": f"select count(*), sum(amount) from t where key between {low} and {low + rows // 100 - 1}",
        "1% of rows in every file": "select count(*), sum(amount) from t where user_id < 10",
        "sum of one column, no filter": "select sum(amount) from t",
    }
    out = [
        f"DuckDB {duckdb.__version__} over each library's `to_pyarrow_dataset()`, {rows:,} rows in {files} files "
        f"(4 columns; key sorted across files); {rounds} rounds, the contenders taking turns.",
        "",
    ]
    table_rows = []
    for name, query in queries.items():
        connection = duckdb.connect()

        def run(dataset: Any, query: str = query, connection: Any = connection) -> Any:
            connection.register("t", dataset)
            result = connection.sql(query).fetchall()
            connection.unregister("t")
            return result

        times, results = interleaved(
            {"txnlog": lambda run=run: run(snapshot.to_pyarrow_dataset()), "deltalake": lambda run=run: run(theirs.to_pyarrow_dataset())},
            rounds,
        )
        ours, peers = ([tuple(round(v, 3) for v in row) for row in r[0]] for r in (results["txnlog"], results["deltalake"]))
        assert ours == peers, (name, ours, peers)  # the same answer (sums to rounding: rows come in another order)
        r = paired_ratio(times["txnlog"], times["deltalake"])
        table_rows.append([name, ms(median(times["txnlog"])), ms(median(times["deltalake"])), ratio(r), verdict(r, 1.0)])
        log.info("%s: %s", name, ratio(r))
    out.append(markdown_table(["query", "txnlog", "deltalake", "ratio", "goal ≤ 1.0x"], table_rows))
    return out


# --- 2. peak memory streaming --------------------------------------------------------------------


def _status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS now, VmHWM its peak: unlike
    ru_maxrss, which a child inherits from its parent, VmHWM starts afresh with each exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(contender: str, uri: str) -> None:
    """One streaming read in this process; prints its figures as JSON."""
    if contender == "deltalake":
        import deltalake

        batches = deltalake.DeltaTable(uri).to_pyarrow_dataset().to_batches()
    elif contender == "to_batches":
        batches = Table(uri).snapshot().to_batches()
    else:
        batches = Table(uri).snapshot().to_pyarrow_dataset().to_batches()
    before = _status_kib("VmRSS")
    started = time.perf_counter()
    rows, total = 0, 0.0
    for batch in batches:
        rows += batch.num_rows
        total += float(pa.compute.sum(batch.column("amount")).as_py() or 0)  # touch the data
    seconds = time.perf_counter() - started
    peak = _status_kib("VmHWM")
    print(json.dumps({"rows": rows, "sum": total, "seconds": seconds, "before_kib": before, "peak_kib": peak}))


def bench_memory(rows: int, files: int, rounds: int) -> list[str]:
    plain = BASE / f"stream-{rows}-{files}"
    vectors = BASE / f"stream-dv-{rows}-{files}"
    build(plain, rows, files)
    build(vectors, rows, files, {"delta.enableDeletionVectors": "true"})
    contenders = {
        "txnlog dataset": ("dataset", plain),
        "txnlog to_batches": ("to_batches", plain),
        "deltalake dataset": ("deltalake", plain),
        "txnlog dataset, 10% deleted by vectors": ("dataset", vectors),
    }
    figures: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            contender, path = contenders[name]
            proc = subprocess.run([sys.executable, __file__, "--child", contender, str(path)], capture_output=True, text=True, check=True)
            figures[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            log.info("%s: %s", name, figures[name][-1])
    assert len({f["rows"] for f in figures["txnlog dataset"] + figures["deltalake dataset"] + figures["txnlog to_batches"]}) == 1
    peer = figures["deltalake dataset"]

    def mib(kib: float) -> str:
        return f"{kib / 1024:.0f} MiB"

    table_rows = []
    for name, runs in figures.items():
        peaks = [f["peak_kib"] for f in runs]
        grown = [f["peak_kib"] - f["before_kib"] for f in runs]
        if name.endswith("vectors"):
            versus, goal = "-", "no peer"
        else:
            versus = ratio(median([a / b for a, b in zip(peaks, [f["peak_kib"] for f in peer])]))
            goal = verdict(median([a / b for a, b in zip(peaks, [f["peak_kib"] for f in peer])]), 1.0) if name != "deltalake dataset" else "-"
        table_rows.append([name, mib(median(peaks)), mib(median(grown)), f"{median([f['seconds'] for f in runs]):.1f} s", versus, goal])
    return [
        f"Peak resident memory of a process streaming {rows:,} rows ({files} files, 4 columns) batch by batch, "
        f"summing one column; {rounds} rounds, a process per run, the contenders taking turns. \"grown\" is the peak "
        "less the memory before the first batch (interpreter, imports, the open table).",
        "",
        markdown_table(["reader", "peak", "grown while streaming", "time", "peak vs deltalake", "goal ≤ 1.0x"], table_rows),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("CONTENDER", "URI"), help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=["duckdb", "memory"])
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    setup_logging()
    print(machine_line())
    print()
    if args.only in (None, "duckdb"):
        rows, files, rounds = (200_000, 10, 3) if args.quick else (5_000_000, 100, 7)
        print("\n".join(bench_duckdb(rows, files, rounds)))
        print()
    if args.only in (None, "memory"):
        rows, files, rounds = (1_000_000, 4, 1) if args.quick else (20_000_000, 40, 3)
        print("\n".join(bench_memory(rows, files, rounds)))


if __name__ == "__main__":
    main()
