"""A copy-on-write overwrite of a table with many live files (default 1M): every file removed,
one added, in one commit. txnlog against delta-rs on identical copies of one table.

    .venv/bin/python benchmarks/bench_overwrite.py            # 100 commits x 10k adds, 3 rounds
    .venv/bin/python benchmarks/bench_overwrite.py --quick    # 5 commits x 2k adds, 1 round

The table is ``bench_checkpoint.py``'s (50 partitions, numRecords-only stats), checkpointed by
delta-rs at its last version so both libraries open it the same way. Each round hard-links a
fresh copy of it and runs each contender in a fresh process:

- txnlog: ``Table(path)``, then ``with table.transaction("OVERWRITE") as t:
  t.remove_files(t.read_whole_table()); t.add_files([AddFile(...)])``;
- delta-rs: ``DeltaTable(path).create_write_transaction([AddAction(...)], mode="overwrite", ...)``.

Timed from opening the table to the commit being published, post-commit work included. Memory
is the process's peak resident set (VmHWM, reset through ``/proc/self/clear_refs`` just before the
call). Afterwards the process checks that the other library reads exactly the one new file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa
from _common import WORK_DIR, is_built, log, machine_line, mark_built, markdown_table, median, ratio, setup_logging
from bench_checkpoint import _timed, build_table

PARTITIONS = 50
ARROW_SCHEMA = pa.schema(
    [("id", pa.int64()), ("value", pa.float64()), ("name", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("part", pa.string())]
)
NEW_FILE = "part=p000/overwrite-new.c000.snappy.parquet"


def _overwrite_txnlog(path: str) -> dict[str, Any]:
    import txnlog

    marks: dict[str, float] = {}

    def run() -> int:
        started = time.perf_counter()
        table = txnlog.Table(path)
        with table.transaction("OVERWRITE") as txn:
            files = txn.read_whole_table()
            marks["open"] = time.perf_counter() - started
            marks["removed"] = files.num_rows
            txn.remove_files(files)
            now = int(time.time() * 1000)
            txn.add_files([txnlog.AddFile(path=NEW_FILE, partition_values={"part": "p000"}, size=1234, modification_time=now, stats='{"numRecords":1}')])
        assert txn.result is not None
        return int(txn.result)

    version, result = _timed(run)
    return {**result, **marks, "version": version}


def _overwrite_deltalake(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    marks: dict[str, float] = {}

    def run() -> int:
        started = time.perf_counter()
        table = DeltaTable(path)
        marks["open"] = time.perf_counter() - started
        marks["removed"] = table.get_add_actions().num_rows
        now = int(time.time() * 1000)
        action = AddAction(NEW_FILE, 1234, {"part": "p000"}, now, True, '{"numRecords":1}')
        table.create_write_transaction(actions=[action], mode="overwrite", schema=ARROW_SCHEMA, partition_by=["part"])
        return int(table.version()) + 1

    version, result = _timed(run)
    return {**result, **marks, "version": version}


def measure(op: str, path: str) -> dict[str, Any]:
    result = _overwrite_txnlog(path) if op == "txnlog" else _overwrite_deltalake(path)
    # The other library, reading independently, must see exactly the new file.
    if op == "txnlog":
        from deltalake import DeltaTable

        live = pa.table(DeltaTable(path).get_add_actions()).column("path").to_pylist()
    else:
        import txnlog

        live = txnlog.Table(path).snapshot().files().column("path").to_pylist()
    if live != [NEW_FILE]:
        raise SystemExit(f"{op}: after the overwrite the other library lists {len(live)} files, not just {NEW_FILE}")
    return result


def _run(op: str, path: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", op, path], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5 commits x 2k adds, one round")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--measure", nargs=2, metavar=("OP", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    setup_logging()
    commits, per_commit = (5, 2_000) if args.quick else (100, 10_000)
    rounds = args.rounds or (1 if args.quick else 3)
    params = {"commits": commits, "files_per_commit": per_commit, "partitions": PARTITIONS, "stats": "numrecords"}
    base = WORK_DIR / "overwrite" / f"base-{commits}x{per_commit}"
    if not is_built(base, params):
        shutil.rmtree(base, ignore_errors=True)
        log.info("building %d commits x %d adds at %s", commits, per_commit, base)
        build_table(str(base), commits, per_commit, PARTITIONS, stats="numrecords")
        from deltalake import DeltaTable

        DeltaTable(str(base)).create_checkpoint()
        mark_built(base, params)

    results: dict[str, list[dict[str, Any]]] = {"txnlog": [], "delta-rs": []}
    for r in range(rounds):
        order = ["txnlog", "delta-rs"] if r % 2 == 0 else ["delta-rs", "txnlog"]
        for op in order:
            copy = WORK_DIR / "overwrite" / f"copy-{op}"
            shutil.rmtree(copy, ignore_errors=True)
            subprocess.run(["cp", "-al", str(base), str(copy)], check=True)
            os.remove(copy / ".bench-built.json")
            results[op].append(_run("txnlog" if op == "txnlog" else "deltalake", str(copy)))
            log.info("%s round %d: %.2fs, peak %.0f MiB", op, r + 1, results[op][-1]["seconds"], results[op][-1]["peak_mib"])
            shutil.rmtree(copy)

    rows = []
    for op, rs in results.items():
        rows.append(
            [
                op,
                f"{rs[0]['removed']:,}",
                f"{median([x['seconds'] for x in rs]):.2f} s",
                f"{median([x['open'] for x in rs]):.2f} s",
                f"{max(x['peak_mib'] for x in rs):.0f} MiB",
                f"{max(x['rss_before_mib'] for x in rs):.0f} MiB",
            ]
        )
    t = median([x["seconds"] for x in results["txnlog"]])
    d = median([x["seconds"] for x in results["delta-rs"]])
    print(f"### Overwrite of {commits * per_commit:,} live files, {rounds} round(s) ({machine_line()})\n")
    print(markdown_table(["writer", "files removed", "open + overwrite commit", "of which open", "peak RSS", "RSS before"], rows))
    print(f"\ntxnlog / delta-rs time: {ratio(t / d)}")


if __name__ == "__main__":
    main()
