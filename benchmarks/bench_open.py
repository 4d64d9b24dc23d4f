"""Opening a table and listing its live files: txnlog against delta-rs, with a pyarrow floor.

    .venv/bin/python benchmarks/bench_open.py            # 100k files + checkpoint; 1,000 commits
    .venv/bin/python benchmarks/bench_open.py --quick    # 10k files; 100 commits; few rounds

Two tables are built once under benchmarks/_work/ (kept between runs):

- ``checkpoint``: 100,000 live files in 10 commits of 10,000 adds (8 partitions, realistic stats),
  checkpointed by delta-rs (``DeltaTable.create_checkpoint``) at the last version;
- ``json``: 1,000 commits of one add each, no checkpoint.

Each round times, in rotating order and each from a cold object (no cache in either library):

- txnlog: ``txnlog.Table(path).snapshot().files()``;
- delta-rs: ``pyarrow.table(DeltaTable(path).get_add_actions())``;
- floor: pyarrow reading the checkpoint's ``add`` column, or reading every commit file and
  parsing each line with orjson.

Target (core reader issue): txnlog at most 0.5x the delta-rs time on both tables.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from _common import (
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
from bench_checkpoint import build_table

TARGET = 0.5  # txnlog time / delta-rs time


def build_open_table(path: Path, commits: int, files_per_commit: int, checkpoint: bool) -> None:
    """The table of ``commits`` x ``files_per_commit`` adds at ``path``, built once (bench_delta_spark.py opens it too)."""
    params = {"commits": commits, "files_per_commit": files_per_commit, "partitions": 8, "checkpoint": checkpoint}
    if is_built(path, params):
        return
    shutil.rmtree(path, ignore_errors=True)
    started = time.perf_counter()
    build_table(str(path), commits, files_per_commit, params["partitions"])
    if checkpoint:
        from deltalake import DeltaTable

        DeltaTable(str(path)).create_checkpoint()
    mark_built(path, params)
    log.info("built %s: %d commits x %d adds in %.1fs", path.name, commits, files_per_commit, time.perf_counter() - started)


def _txnlog_open(path: str) -> Callable[[], int]:
    import txnlog

    def run() -> int:
        return txnlog.Table(path).snapshot().files().num_rows

    return run


def _deltalake_open(path: str) -> Callable[[], int]:
    from deltalake import DeltaTable

    def run() -> int:
        return pa.table(DeltaTable(path).get_add_actions()).num_rows

    return run


def _checkpoint_floor(path: str) -> Callable[[], int]:
    log_dir = os.path.join(path, "_delta_log")
    (name,) = [n for n in os.listdir(log_dir) if n.endswith(".checkpoint.parquet")]
    checkpoint = os.path.join(log_dir, name)

    def run() -> int:
        add = pq.read_table(checkpoint, columns=["add"]).column("add")
        return len(add) - add.null_count

    return run


def _json_floor(path: str) -> Callable[[], int]:
    log_dir = os.path.join(path, "_delta_log")

    def run() -> int:
        adds = 0
        for name in sorted(n for n in os.listdir(log_dir) if n.endswith(".json")):
            with open(os.path.join(log_dir, name), "rb") as f:
                for line in f.read().splitlines():
                    adds += "add" in orjson.loads(line)
        return adds

    return run


def _check_same_files(path: str, expected: int) -> None:
    """Both readers must list the same live files before their speed means anything."""
    from deltalake import DeltaTable

    import txnlog

    ours = set(txnlog.Table(path).snapshot().files().column("path").to_pylist())
    theirs = set(pa.table(DeltaTable(path).get_add_actions()).column("path").to_pylist())
    if ours != theirs or len(ours) != expected:
        raise SystemExit(f"{path}: txnlog lists {len(ours)} files, delta-rs {len(theirs)}, expected {expected}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small tables and few rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per table (default 15, quick 3)")
    args = parser.parse_args()
    setup_logging()

    rounds = args.rounds or (3 if args.quick else 15)
    scale = "quick" if args.quick else "full"
    cases = [
        # (label, directory, commits, adds per commit, checkpoint, floor)
        ("100k files, checkpoint" if not args.quick else "10k files, checkpoint", "checkpoint", 10, 1_000 if args.quick else 10_000, True, _checkpoint_floor),
        ("1,000 JSON commits" if not args.quick else "100 JSON commits", "json", 100 if args.quick else 1_000, 1, False, _json_floor),
    ]
    floor_names = {_checkpoint_floor: "pyarrow `read_table(columns=['add'])`", _json_floor: "read + orjson-parse every commit"}

    rows = []
    for label, directory, commits, per_commit, checkpoint, floor in cases:
        path = WORK_DIR / f"open-{scale}" / directory
        path.parent.mkdir(parents=True, exist_ok=True)
        build_open_table(path, commits, per_commit, checkpoint)
        _check_same_files(str(path), commits * per_commit)
        log.info("timing %s: %d rounds", label, rounds)
        times, results = interleaved(
            {"txnlog": _txnlog_open(str(path)), "delta-rs": _deltalake_open(str(path)), "floor": floor(str(path))}, rounds
        )
        for name, counts in results.items():
            if set(counts) != {commits * per_commit}:
                raise SystemExit(f"{label}: {name} returned {sorted(set(counts))} files, expected {commits * per_commit}")
        vs_peer = paired_ratio(times["txnlog"], times["delta-rs"])
        rows.append(
            [
                label,
                ms(median(times["txnlog"])),
                ms(median(times["delta-rs"])),
                f"{ms(median(times['floor']))} ({floor_names[floor]})",
                ratio(vs_peer),
                ratio(paired_ratio(times["txnlog"], times["floor"])),
                f"≤ {TARGET}x: {verdict(vs_peer, TARGET)}",
            ]
        )

    print(f"### Open + list files ({rounds} rounds, medians; {machine_line()})\n")
    print(markdown_table(["table", "txnlog", "delta-rs", "floor", "txnlog / delta-rs", "txnlog / floor", "target"], rows))


if __name__ == "__main__":
    main()
