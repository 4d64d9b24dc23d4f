"""The everyday Python calls against deltalake's, the contenders taking turns (issue 27):

1. ``txnlog.write_table`` of 1M rows into a new table against ``deltalake.write_deltalake``
   (each run writes a fresh table: create and rows in one commit for both).
2. A MERGE of 1% of the rows into 1M rows (20 files, keys in every file) with four clauses
   through the MERGE builder (a conditional matched delete, a conditional matched update, a
   matched update of every column, an insert of every column), txnlog with deletion vectors
   against deltalake's ``merge`` with the same clauses (deltalake writes no deletion vectors:
   it rewrites the files). txnlog copy-on-write is shown beside it. The same rows come out of
   every contender (checked after the runs).

    .venv/bin/python benchmarks/bench_python_api.py            # 1M rows, 5 rounds
    .venv/bin/python benchmarks/bench_python_api.py --quick    # 100k rows, 2 rounds
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    WORK_DIR,
    fresh_paths,
    interleaved,
    log,
    machine_line,
    markdown_table,
    median,
    ms,
    paired_ratio,
    ratio,
    setup_logging,
    verdict,
)
from benchmarks.bench_row_level import build, copies, events  # noqa: E402
from txnlog import Table, write_table  # noqa: E402

BASE = WORK_DIR / "python_api"
DV = {"delta.enableDeletionVectors": "true"}


def bench_write(rows: int, rounds: int) -> list[str]:
    import deltalake

    data = events(0, rows)
    fresh = fresh_paths(BASE, "write")
    cpu: dict[str, list[float]] = {"txnlog": [], "deltalake": []}

    def timed(name: str, write: Any) -> Any:
        """``write``, its CPU time (every thread of the process) kept: on a busy machine the wall
        time is mostly the wait for a core, the CPU time what the work costs."""
        started = time.process_time()
        out = write()
        cpu[name].append(time.process_time() - started)
        return out

    times, _ = interleaved(
        {
            "txnlog": lambda: timed("txnlog", lambda: write_table(fresh("txnlog"), data)),
            "deltalake": lambda: timed("deltalake", lambda: deltalake.write_deltalake(fresh("deltalake"), data)),
        },
        rounds,
    )
    for path in BASE.glob("txnlog-write-*"):
        assert Table(str(path)).snapshot().to_arrow(columns=["key"]).num_rows == rows
    vs = paired_ratio(times["txnlog"], times["deltalake"])
    cpu_ours, cpu_theirs = cpu["txnlog"][-rounds:], cpu["deltalake"][-rounds:]  # the warm-up round is not counted
    return [
        f"### `write_table` of {rows:,} rows (4 columns) into a new table vs `write_deltalake`",
        "",
        markdown_table(
            ["", "txnlog", "deltalake", "ratio", "target"],
            [["wall", ms(median(times["txnlog"])), ms(median(times["deltalake"])), ratio(vs), f"≤ 0.8x: {verdict(vs, 0.8)}"],
             ["CPU", ms(median(cpu_ours)), ms(median(cpu_theirs)), ratio(paired_ratio(cpu_ours, cpu_theirs)), ""]],
        ),
    ]


def merge_source(rows: int) -> pa.Table:
    """1% of ``rows``, spread over every file: existing keys (a tenth of them marked for
    deletion, a third with a larger amount), and 1% of them new keys."""
    n = rows // 100
    keys = np.arange(0, n, dtype=np.int64) * 100 + 37
    keys[: n // 100] = rows + np.arange(n // 100)
    amount = np.where(np.arange(n) % 3 == 0, 1000.0, -1.0)
    note = pa.array(np.where(np.arange(n) % 10 == 0, "delete", "merged").tolist(), pa.string())
    return pa.table({"key": keys, "user_id": keys % 1000, "amount": amount, "note": note}, schema=events(0, 0).schema)


def four_clauses(builder: Any) -> Any:
    return (builder.when_matched_delete(predicate="s.note = 'delete'")
            .when_matched_update({"amount": "t.amount + s.amount"}, predicate="s.amount > t.amount")
            .when_matched_update_all()
            .when_not_matched_insert_all())


def txnlog_merge(uri: str, source: pa.Table) -> Any:
    return four_clauses(Table(uri).merge(source, "t.key = s.key")).execute()


def deltalake_merge(uri: str, source: pa.Table) -> Any:
    import deltalake

    return four_clauses(deltalake.DeltaTable(uri).merge(source, predicate="t.key = s.key", source_alias="s", target_alias="t")).execute()


def bench_merge(rows: int, files: int, rounds: int) -> list[str]:
    import deltalake

    source = merge_source(rows)
    build(BASE / "merge-cow", rows, files)
    build(BASE / "merge-dv", rows, files, DV)
    n = rounds + 1  # the warm-up round takes a copy too
    dv_txnlog = copies(BASE / "merge-dv", n, "dv-txnlog", BASE)
    cow_txnlog = copies(BASE / "merge-cow", n, "cow-txnlog", BASE)
    cow_deltalake = copies(BASE / "merge-cow", n, "cow-deltalake", BASE)
    times, _ = interleaved(
        {
            "txnlog_dv": lambda: txnlog_merge(next(dv_txnlog), source),
            "deltalake": lambda: deltalake_merge(next(cow_deltalake), source),
            "txnlog": lambda: txnlog_merge(next(cow_txnlog), source),
        },
        rounds,
    )
    theirs = sorted(deltalake.DeltaTable(str(BASE / "cow-deltalake-0")).to_pyarrow_table().to_pylist(), key=lambda r: r["key"])
    for name in ("dv-txnlog", "cow-txnlog"):
        ours = sorted(Table(str(BASE / f"{name}-0")).snapshot().to_arrow().to_pylist(), key=lambda r: r["key"])
        assert ours == theirs, f"{name} differs from deltalake's rows"
    dv = paired_ratio(times["txnlog_dv"], times["deltalake"])
    cow = paired_ratio(times["txnlog"], times["deltalake"])
    return [
        f"### MERGE builder, four clauses, 1% of {rows:,} rows ({files} files, keys in every file) vs deltalake's `merge`",
        "",
        markdown_table(
            ["txnlog", "time", "deltalake", "ratio", "target"],
            [
                ["deletion vectors", ms(median(times["txnlog_dv"])), ms(median(times["deltalake"])), ratio(dv), f"≤ 0.5x: {verdict(dv, 0.5)}"],
                ["copy-on-write", ms(median(times["txnlog"])), ms(median(times["deltalake"])), ratio(cow), "(no target)"],
            ],
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 100_000, 2
    setup_logging()
    started = time.monotonic()
    try:
        out = [machine_line(), ""]
        out += bench_write(args.rows, args.rounds)
        out += [""]
        out += bench_merge(args.rows, args.files, args.rounds)
        out += ["", machine_line(), f"{time.monotonic() - started:.0f} s in all"]
        print("\n".join(out))
        log.info("done")
    finally:
        shutil.rmtree(BASE, ignore_errors=True)


if __name__ == "__main__":
    main()
