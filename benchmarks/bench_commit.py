"""Latency of a one-file blind append at table version >= 200: txnlog against delta-rs, with the
put-if-absent floor of the local filesystem.

    .venv/bin/python benchmarks/bench_commit.py            # advance to v200, then 200 commits each
    .venv/bin/python benchmarks/bench_commit.py --quick    # advance to v20, then 20 commits each

Two identical tables (schema ``id long, value double, part string``, partitioned by ``part``) are
created by txnlog and copied; each is advanced to version 200 by its own writer, so each has the
checkpoints its writer makes. One small Parquet file is written beforehand and hard-linked under
a new name for every commit, so only the transaction and commit are timed. Per round, in
rotating order:

- txnlog: ``with table.transaction() as t: t.add_files([AddFile(...)])`` on a long-lived
  ``Table`` (the transaction refreshes the table's cached snapshot first);
- txnlog, new Table: the same on ``txnlog.Table(path)`` made for each commit (a third identical
  table), so the snapshot is read from the latest checkpoint and the commits after it;
- delta-rs: ``dt.update_incremental()`` then ``dt.create_write_transaction([AddAction(...)],
  mode="append", schema=..., partition_by=["part"])`` on a long-lived ``DeltaTable``. The refresh
  is timed too: it is the same work txnlog's transaction does, and a DeltaTable left stale
  re-validates against every commit since it was loaded;
- floor: a 1 KiB file written to a temp name, ``os.link``-ed to its final name, temp unlinked.

Both writers keep their default post-commit checkpoints (txnlog every 10 versions, delta-rs every
100): medians hide them; they are reported separately.

Targets (transactions issue): txnlog median at most 0.2x delta-rs and at most 10x the floor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
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
    paired_ratio,
    percentile,
    ratio,
    setup_logging,
    verdict,
)

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.float64()), ("part", pa.string())])
PARTITION_BY = ["part"]
TARGET_VS_PEER = 0.2
TARGET_VS_FLOOR = 10.0
COMMIT_SIZE = 1024


class AppendFiles:
    """Distinct data-file names, each a hard link to one small Parquet file written once."""

    def __init__(self, root: Path, template: Any, prefix: str) -> None:
        self.root = root
        self.template = template  # a txnlog AddFile
        self.prefix = prefix
        self.count = 0

    def next_add(self) -> Any:
        path = f"part=a/{self.prefix}-{self.count:06d}.parquet"
        self.count += 1
        os.link(self.root / self.template.path, self.root / path)
        return replace(self.template, path=path)


def make_tables(workdir: Path) -> tuple[Path, Path, Any]:
    """Two identical tables at version 0 holding one small data file; its AddFile."""
    import txnlog
    from txnlog.write.parquet import write_data_files

    shutil.rmtree(workdir, ignore_errors=True)
    ours, theirs = workdir / "txnlog", workdir / "deltalake"
    table = txnlog.Table.create(str(ours), SCHEMA, partition_by=PARTITION_BY)
    data = pa.table(
        {"id": pa.array(range(100), pa.int64()), "value": pa.array([i / 7 for i in range(100)]), "part": ["a"] * 100},
        schema=SCHEMA,
    )
    (template,) = write_data_files(table.store, data, table_configuration=table.snapshot().table_configuration)
    shutil.copytree(ours, theirs)
    return ours, theirs, template


def txnlog_committer(path: Path, template: Any, *, new_table_each_commit: bool = False) -> Callable[[], int]:
    import txnlog

    table = txnlog.Table(str(path))
    files = AppendFiles(path, template, "txnlog")

    def commit() -> int:
        add = files.next_add()
        with (txnlog.Table(str(path)) if new_table_each_commit else table).transaction() as txn:
            txn.add_files([add])
        assert txn.result is not None
        return txn.result.version

    return commit


def deltalake_committer(path: Path, template: Any) -> Callable[[], int]:
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    table = DeltaTable(str(path))
    files = AppendFiles(path, template, "deltars")

    def commit() -> int:
        add = files.next_add()
        action = AddAction(add.path, add.size, dict(add.partition_values), add.modification_time, True, add.stats)
        table.update_incremental()
        table.create_write_transaction(actions=[action], mode="append", schema=SCHEMA, partition_by=PARTITION_BY)
        return table.version() + 1  # the DeltaTable is not moved to the version it just wrote

    return commit


def floor_committer(path: Path) -> Callable[[], int]:
    """The local put-if-absent floor: what LocalLogStore.put_if_absent does, without txnlog."""
    directory = path / "_delta_log"
    directory.mkdir(parents=True, exist_ok=True)
    payload = b"x" * (COMMIT_SIZE - 1) + b"\n"
    version = [0]

    def commit() -> int:
        final = directory / f"{version[0]:020d}.json"
        tmp = directory / f".{final.name}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "xb") as f:
            f.write(payload)
        os.link(tmp, final)
        os.unlink(tmp)
        version[0] += 1
        return version[0] - 1

    return commit


def checkpoint_versions(path: Path) -> set[int]:
    return {int(n.split(".")[0]) for n in os.listdir(path / "_delta_log") if ".checkpoint." in n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="advance to v20 and time 20 commits (a smoke run)")
    parser.add_argument("--start-version", type=int, default=None, help="version to advance to first (default 200)")
    parser.add_argument("--commits", type=int, default=None, help="timed commits per writer (default 200)")
    args = parser.parse_args()
    setup_logging()

    start = args.start_version if args.start_version is not None else (20 if args.quick else 200)
    rounds = args.commits or (20 if args.quick else 200)
    workdir = WORK_DIR / "commit"
    ours, theirs, template = make_tables(workdir)
    fresh = workdir / "txnlog-new-table"
    shutil.copytree(ours, fresh)
    writers = {
        "txnlog": txnlog_committer(ours, template),
        "txnlog, new Table": txnlog_committer(fresh, template, new_table_each_commit=True),
        "delta-rs": deltalake_committer(theirs, template),
        "floor": floor_committer(workdir / "floor"),
    }

    started = time.perf_counter()
    interleaved({k: v for k, v in writers.items() if k != "floor"}, rounds=start, warmup=0)
    log.info("advanced the tables to version %d in %.1fs", start, time.perf_counter() - started)

    log.info("timing %d commits per writer", rounds)
    times, versions = interleaved(writers, rounds, warmup=0)
    for name in ("txnlog", "txnlog, new Table", "delta-rs"):
        expected = list(range(start + 1, start + rounds + 1))
        if versions[name] != expected:
            raise SystemExit(f"{name} committed versions {versions[name][:5]}..., expected {start + 1}..{start + rounds}")

    checkpoints = {
        "txnlog": checkpoint_versions(ours),
        "txnlog, new Table": checkpoint_versions(fresh),
        "delta-rs": checkpoint_versions(theirs),
        "floor": set(),
    }
    rows = []
    for name in writers:
        t = times[name]
        cp_times = [s for s, v in zip(t, versions[name]) if v in checkpoints[name]]
        plain = [s for s, v in zip(t, versions[name]) if v not in checkpoints[name]]
        cp_cell = (
            f"{len(cp_times)} (1 in {rounds / len(cp_times):.0f}), median {ms(median(cp_times))}, max {ms(max(cp_times))}"
            if cp_times
            else ("none" if name != "floor" else "–")
        )
        rows.append(
            [
                name,
                ms(median(t)),
                ms(percentile(t, 90)),
                ms(median(plain)),
                cp_cell,
                ratio(paired_ratio(t, times["delta-rs"])) if name != "delta-rs" else "1x",
                ratio(paired_ratio(t, times["floor"])),
            ]
        )
    vs_peer = paired_ratio(times["txnlog"], times["delta-rs"])
    vs_floor = paired_ratio(times["txnlog"], times["floor"])

    print(f"### One-file blind append at versions {start + 1}..{start + rounds} ({rounds} commits each; {machine_line()})\n")
    print(
        markdown_table(
            ["writer", "median", "p90", "median without checkpoint commits", "checkpoint commits", "/ delta-rs", "/ floor"],
            rows,
        )
    )
    print(
        f"\nTargets: txnlog / delta-rs {ratio(vs_peer)} (≤ {TARGET_VS_PEER}x: {verdict(vs_peer, TARGET_VS_PEER)}); "
        f"txnlog / floor {ratio(vs_floor)} (≤ {TARGET_VS_FLOOR:.0f}x: {verdict(vs_floor, TARGET_VS_FLOOR)}). "
        "Ratios are medians of the per-round ratios."
    )


if __name__ == "__main__":
    main()
